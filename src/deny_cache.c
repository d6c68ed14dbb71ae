/* deny_cache.c — see deny_cache.h. */
#include <stdlib.h>
#include <string.h>

#include "deny_cache.h"
#include "backend.h"
#include "keytable.h"
#include "util.h"

struct slot {
    uint64_t hash;
    uint64_t policy; /* its uid: a reload makes new policies, no stale hit */
    char *key;
    size_t klen;
    int64_t cost;
    uint64_t epoch;
    int64_t until_us; /* local monotonic time the denial ends */
    int64_t at_us;    /* when the numbers in res were true */
    struct rl_check_res res;
};

/*
 * Slots are allocated when first written: a lookup reads only the pointer
 * array (8 bytes a slot), so a flood of new keys that are never denied
 * touches no more than that.  A table of whole slots (~350 bytes each, 22 MiB
 * at the default size) was paid in RSS by every lookup of a new key on
 * kernels that map no shared zero page for reads of untouched memory.
 */
struct rl_deny_cache {
    struct slot **slots;
    size_t mask;
};

/* Keyed (keytable.h): a caller who could aim at a victim's slot could
 * evict its cached denial at will, and every check of an abusive caller
 * would reach Redis again. */
uint64_t
deny_cache_hash(uint64_t policy, const char *k, size_t n)
{
    return keytable_hash_salted(policy, k, n);
}

struct rl_deny_cache *
deny_cache_new(size_t slots)
{
    struct rl_deny_cache *c = xcalloc(1, sizeof(*c));
    size_t n = 1;

    while (n < slots)
        n <<= 1;
    c->slots = xcalloc(n, sizeof(*c->slots));
    c->mask = n - 1;
    return c;
}

void
deny_cache_free(struct rl_deny_cache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i <= c->mask; i++) {
        if (c->slots[i] != NULL)
            free(c->slots[i]->key);
        free(c->slots[i]);
    }
    free(c->slots);
    free(c);
}

static int64_t
less(int64_t ms, int64_t elapsed_ms)
{
    return ms > elapsed_ms ? ms - elapsed_ms : (ms > 0 ? 1 : ms);
}

/* The slot that holds (policy, key), NULL when none does. */
static struct slot *
dc_find(struct rl_deny_cache *c, uint64_t h, uint64_t policy, const char *key, size_t klen)
{
    struct slot *s = c->slots[h & c->mask];

    if (s == NULL || s->key == NULL || s->hash != h || s->policy != policy ||
        s->klen != klen || memcmp(s->key, key, klen) != 0)
        return NULL;
    return s;
}

bool
deny_cache_get(struct rl_deny_cache *c, uint64_t policy, const char *key, size_t klen,
               int64_t cost, uint64_t epoch, int64_t now_us, struct rl_check_res *res)
{
    return deny_cache_get_hashed(c, deny_cache_hash(policy, key, klen), policy, key, klen,
                                 cost, epoch, now_us, res);
}

bool
deny_cache_get_hashed(struct rl_deny_cache *c, uint64_t h, uint64_t policy, const char *key,
                      size_t klen, int64_t cost, uint64_t epoch, int64_t now_us,
                      struct rl_check_res *res)
{
    struct slot *s = dc_find(c, h, policy, key, klen);
    int64_t elapsed_ms;

    if (s == NULL || now_us >= s->until_us || cost != s->cost || epoch != s->epoch)
        return false;
    *res = s->res;
    elapsed_ms = (now_us - s->at_us) / 1000;
    for (size_t i = 0; i < res->nlimits; i++) {
        res->limits[i].reset_ms = less(res->limits[i].reset_ms, elapsed_ms);
        if (res->limits[i].retry_after_ms > 0)
            res->limits[i].retry_after_ms = less(res->limits[i].retry_after_ms, elapsed_ms);
    }
    return true;
}

void
deny_cache_put(struct rl_deny_cache *c, uint64_t policy, const char *key, size_t klen,
               int64_t cost, uint64_t epoch, int64_t sent_us, const struct rl_check_res *res)
{
    deny_cache_put_hashed(c, deny_cache_hash(policy, key, klen), policy, key, klen, cost,
                          epoch, sent_us, res);
}

void
deny_cache_put_hashed(struct rl_deny_cache *c, uint64_t h, uint64_t policy, const char *key,
                      size_t klen, int64_t cost, uint64_t epoch, int64_t sent_us,
                      const struct rl_check_res *res)
{
    int64_t wait_ms = 0;
    struct slot *s;

    /* The check can pass once every denying limit lets it: the longest wait.
     * A limit that can never fit this cost (-1) is not cached: reset_ms is
     * no promise about when it would. */
    for (size_t i = 0; i < res->nlimits; i++) {
        if (res->limits[i].retry_after_ms < 0)
            return;
        if (res->limits[i].retry_after_ms > wait_ms)
            wait_ms = res->limits[i].retry_after_ms;
    }
    if (res->allowed || wait_ms <= 1)
        return;
    if (res->blocked_ms > 0 && wait_ms > DENY_CACHE_BLOCKED_MS)
        wait_ms = DENY_CACHE_BLOCKED_MS;
    if (c->slots[h & c->mask] == NULL)
        c->slots[h & c->mask] = xcalloc(1, sizeof(struct slot));
    s = c->slots[h & c->mask];
    /* direct-mapped: a newcomer replaces whoever held the slot */
    if (s->key == NULL || s->klen < klen) {
        free(s->key);
        s->key = xmalloc(klen);
    }
    memcpy(s->key, key, klen);
    s->klen = klen;
    s->hash = h;
    s->policy = policy;
    s->cost = cost;
    s->epoch = epoch;
    /* retry_after is rounded up to whole ms by the algorithms; take 1 ms off
     * so that rounding never makes the local denial outlast the real one. */
    s->until_us = sent_us + (wait_ms - 1) * 1000;
    s->at_us = sent_us;
    s->res = *res;
}

void
deny_cache_forget(struct rl_deny_cache *c, uint64_t policy, const char *key, size_t klen)
{
    deny_cache_forget_hashed(c, deny_cache_hash(policy, key, klen), policy, key, klen);
}

void
deny_cache_forget_hashed(struct rl_deny_cache *c, uint64_t h, uint64_t policy, const char *key,
                         size_t klen)
{
    struct slot *s = dc_find(c, h, policy, key, klen);

    if (s != NULL)
        s->until_us = 0;
}
