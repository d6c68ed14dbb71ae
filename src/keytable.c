/* keytable.c — see keytable.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "keytable.h"
#include "util.h"

#define BUCKETS_MIN 16

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static uint64_t key0, key1;

/* Once per process, before the first hash.  Without entropy yet (early
 * boot: getrandom would block) the key is still different per process and
 * start, though no longer secret: logged, since the tables are then as weak
 * as an unkeyed hash against a determined caller. */
static void
draw_key(void)
{
    uint64_t k[2];

    if (getrandom(k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        k[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
        k[1] = (uint64_t)ts.tv_sec * 0xbf58476d1ce4e5b9ULL ^ (uint64_t)now_monotonic_us();
    }
    key0 = k[0];
    key1 = k[1];
}

uint64_t
keytable_hash(const void *key, size_t len)
{
    pthread_once(&key_once, draw_key);
    return siphash24(key0, key1, key, len);
}

uint64_t
keytable_hash_salted(uint64_t salt, const void *key, size_t len)
{
    pthread_once(&key_once, draw_key);
    return siphash24(key0, key1 ^ salt, key, len);
}

void
keytable_init(struct rl_keytable *t, size_t buckets)
{
    size_t nb = BUCKETS_MIN;

    while (nb < buckets)
        nb <<= 1;
    memset(t, 0, sizeof(*t));
    t->buckets = xcalloc(nb, sizeof(*t->buckets));
    t->mask = nb - 1;
}

void
keytable_destroy(struct rl_keytable *t)
{
    free(t->buckets);
    memset(t, 0, sizeof(*t));
}

/* The first node from n on (n included) whose hash is `hash`. */
static struct rl_kt_node *
scan(struct rl_keytable *t, struct rl_kt_node *n, uint64_t hash)
{
    for (; n != NULL; n = n->next) {
        t->probes++;
        if (n->hash == hash)
            return n;
    }
    return NULL;
}

struct rl_kt_node *
keytable_first(struct rl_keytable *t, uint64_t hash)
{
    return scan(t, t->buckets[hash & t->mask], hash);
}

struct rl_kt_node *
keytable_next(struct rl_keytable *t, struct rl_kt_node *n, uint64_t hash)
{
    return scan(t, n->next, hash);
}

static void
grow(struct rl_keytable *t)
{
    size_t nb = (t->mask + 1) * 2;
    struct rl_kt_node **b = xcalloc(nb, sizeof(*b));

    for (size_t i = 0; i <= t->mask; i++) {
        struct rl_kt_node *n = t->buckets[i], *next;

        for (; n != NULL; n = next) {
            next = n->next;
            n->next = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->mask = nb - 1;
}

void
keytable_insert(struct rl_keytable *t, struct rl_kt_node *n, uint64_t hash)
{
    if (t->n >= t->mask + 1)
        grow(t);
    n->hash = hash;
    n->next = t->buckets[hash & t->mask];
    t->buckets[hash & t->mask] = n;
    t->n++;
}

void
keytable_remove(struct rl_keytable *t, struct rl_kt_node *n)
{
    struct rl_kt_node **pp = &t->buckets[n->hash & t->mask];

    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    n->next = NULL;
    t->n--;
}
