/*
 * check_keytable.c — the keyed table every caller-named entry lives in:
 * insert, find, remove and growth; and the work a crafted key set costs.
 *
 * The crafted set is what an attacker computes offline against an unkeyed
 * hash: a Joux multicollision of FNV-1a (the hash the hybrid table and the
 * deny cache used before issue 24).  FNV-1a's low bits depend only on the
 * low bits of its state, so two blocks that agree on the state's low 16
 * bits keep agreeing whatever follows: 12 stages of two such blocks give
 * 4,096 keys that share the low 16 bits of their hash, one bucket of any
 * table up to 65,536 buckets.  Under that hash the table's own count of
 * nodes looked at (probes) shows every lookup walking the chain; under
 * keytable_hash the same keys cost what random keys cost.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "keytable.h"
#include "util.h"

#define STAGES 12
#define NKEYS (1 << STAGES)
#define KEYLEN 64

struct ent {
    struct rl_kt_node node;
    size_t len;
    char key[KEYLEN];
};

static const char alphabet[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";

static uint64_t
fnv_state(uint64_t h, const char *p, size_t n)
{
    return fnv1a(h, p, n);
}

/* Two 3-byte blocks that take FNV-1a from state h to states equal in their
 * low 16 bits; the state after them (either: the low bits are what count). */
static uint64_t
stage(uint64_t h, char a[3], char b[3])
{
    static int seen[1 << 16];
    static char block[1 << 16][3];

    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < 64 * 64 * 64; i++) {
        char c[3] = {alphabet[i % 64], alphabet[(i / 64) % 64], alphabet[i / 4096]};
        uint64_t s = fnv_state(h, c, 3);
        unsigned low = (unsigned)(s & 0xffff);

        if (seen[low]) {
            memcpy(a, block[low], 3);
            memcpy(b, c, 3);
            return s;
        }
        seen[low] = 1;
        memcpy(block[low], c, 3);
    }
    ck_abort_msg("no 16-bit collision among 2^18 blocks");
    return 0;
}

/* NKEYS keys "{rl:flood:k:" + one block of each pair per stage + "}" whose
 * FNV-1a hashes share their low 16 bits. */
static void
craft(struct ent *e)
{
    static const char prefix[] = "{rl:flood:k:";
    char pairs[STAGES][2][3];
    uint64_t h = fnv_state(FNV1A_INIT, prefix, sizeof(prefix) - 1);

    for (int s = 0; s < STAGES; s++)
        h = stage(h, pairs[s][0], pairs[s][1]);
    for (int k = 0; k < NKEYS; k++) {
        size_t o = sizeof(prefix) - 1;

        memcpy(e[k].key, prefix, o);
        for (int s = 0; s < STAGES; s++, o += 3)
            memcpy(e[k].key + o, pairs[s][(k >> s) & 1], 3);
        e[k].key[o++] = '}';
        e[k].len = o;
    }
}

static void
random_keys(struct ent *e, uint64_t seed)
{
    for (int k = 0; k < NKEYS; k++) {
        e[k].len = (size_t)snprintf(e[k].key, KEYLEN, "{rl:flood:k:%016llx}",
                                    (unsigned long long)(seed + (uint64_t)k * 0x9e3779b97f4a7c15ULL));
    }
}

static uint64_t
fnv_hash(const void *k, size_t n)
{
    return fnv1a(FNV1A_INIT, k, n);
}

static struct ent *
find(struct rl_keytable *t, uint64_t (*hash)(const void *, size_t), const char *key, size_t len)
{
    uint64_t h = hash(key, len);

    for (struct rl_kt_node *n = keytable_first(t, h); n != NULL; n = keytable_next(t, n, h)) {
        struct ent *e = KEYTABLE_ENTRY(n, struct ent, node);
        if (e->len == len && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

/* Nodes looked at per lookup, over every key of the set, found each time. */
static double
probes_per_lookup(struct ent *e, uint64_t (*hash)(const void *, size_t))
{
    struct rl_keytable t;
    double per;

    keytable_init(&t, 16);
    for (int k = 0; k < NKEYS; k++) {
        ck_assert_ptr_null(find(&t, hash, e[k].key, e[k].len));
        keytable_insert(&t, &e[k].node, hash(e[k].key, e[k].len));
    }
    ck_assert_uint_eq(t.n, NKEYS);
    t.probes = 0;
    for (int k = 0; k < NKEYS; k++)
        ck_assert_ptr_eq(find(&t, hash, e[k].key, e[k].len), &e[k]);
    per = (double)t.probes / NKEYS;
    keytable_destroy(&t);
    return per;
}

START_TEST(insert_find_remove_and_grow)
{
    static struct ent e[NKEYS];
    struct rl_keytable t;

    random_keys(e, 1);
    keytable_init(&t, 3);
    ck_assert_uint_eq(t.mask, 15);
    for (int k = 0; k < NKEYS; k++)
        keytable_insert(&t, &e[k].node, keytable_hash(e[k].key, e[k].len));
    /* never more entries than buckets */
    ck_assert_uint_ge(t.mask + 1, NKEYS);
    for (int k = 0; k < NKEYS; k++)
        ck_assert_ptr_eq(find(&t, keytable_hash, e[k].key, e[k].len), &e[k]);
    /* every other one out: the rest still found, the others not */
    for (int k = 0; k < NKEYS; k += 2)
        keytable_remove(&t, &e[k].node);
    ck_assert_uint_eq(t.n, NKEYS / 2);
    for (int k = 0; k < NKEYS; k++)
        ck_assert_ptr_eq(find(&t, keytable_hash, e[k].key, e[k].len), k % 2 ? &e[k] : NULL);
    for (int k = 1; k < NKEYS; k += 2)
        keytable_remove(&t, &e[k].node);
    ck_assert_uint_eq(t.n, 0);
    for (size_t b = 0; b <= t.mask; b++)
        ck_assert_ptr_null(t.buckets[b]);
    keytable_destroy(&t);
}
END_TEST

START_TEST(the_hash_is_keyed_and_salted)
{
    /* not FNV-1a, not SipHash under a zero key: nothing an outsider can
     * compute; a salt gives other hashes */
    ck_assert_uint_ne(keytable_hash("alice", 5), fnv_hash("alice", 5));
    ck_assert_uint_ne(keytable_hash("alice", 5), siphash24(0, 0, "alice", 5));
    ck_assert_uint_eq(keytable_hash("alice", 5), keytable_hash("alice", 5));
    ck_assert_uint_ne(keytable_hash_salted(1, "alice", 5), keytable_hash_salted(2, "alice", 5));
    ck_assert_uint_ne(keytable_hash_salted(1, "alice", 5), keytable_hash("alice", 5));
}
END_TEST

/* SipHash-2-4 itself: the reference vectors (the paper's key 00..0f, the
 * message 00..len-1), across the word boundaries and its tail's lengths,
 * from an unaligned start too */
START_TEST(siphash_reference_vectors)
{
    static const struct { size_t len; uint64_t h; } v[] = {
        {0, 0x726fdb47dd0e0e31ULL},  {7, 0xab0200f58b01d137ULL},
        {8, 0x93f5f5799a932462ULL},  {15, 0xa129ca6149be45e5ULL},
        {16, 0x3f2acc7f57c29bdbULL}, {63, 0x958a324ceb064572ULL},
    };
    uint64_t k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;
    unsigned char msg[1 + 64];

    for (size_t i = 0; i < 64; i++)
        msg[1 + i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        ck_assert_uint_eq(siphash24(k0, k1, msg + 1, v[i].len), v[i].h);
}
END_TEST

START_TEST(crafted_collisions_cost_what_random_keys_cost)
{
    static struct ent crafted[NKEYS], rnd[NKEYS];
    double unkeyed, keyed, base;

    craft(crafted);
    /* the keys do collide under the unkeyed hash: one bucket for any table
     * up to 65,536 buckets */
    for (int k = 1; k < NKEYS; k++)
        ck_assert_uint_eq(fnv_hash(crafted[k].key, crafted[k].len) & 0xffff,
                          fnv_hash(crafted[0].key, crafted[0].len) & 0xffff);
    random_keys(rnd, 7);
    unkeyed = probes_per_lookup(crafted, fnv_hash);
    keyed = probes_per_lookup(crafted, keytable_hash);
    base = probes_per_lookup(rnd, keytable_hash);
    printf("# probes per lookup: crafted unkeyed %.1f, crafted keyed %.2f, random keyed %.2f\n",
           unkeyed, keyed, base);
    /* the measure sees the attack where there is one ... */
    ck_assert_msg(unkeyed > NKEYS / 4.0, "unkeyed: %.1f probes per lookup", unkeyed);
    /* ... and none under the keyed hash (issue 24: at most 1.5x) */
    ck_assert_msg(keyed <= 1.5 * base, "keyed: %.2f probes per lookup, random %.2f", keyed,
                  base);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("keytable");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, insert_find_remove_and_grow);
    tcase_add_test(tc, the_hash_is_keyed_and_salted);
    tcase_add_test(tc, siphash_reference_vectors);
    tcase_add_test(tc, crafted_collisions_cost_what_random_keys_cost);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
