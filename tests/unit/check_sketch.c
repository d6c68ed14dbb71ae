/*
 * check_sketch.c — the heavy-hitters sketch (sketch.h) and the per-minute
 * tables built on it (top.h): a caller above total / k is held and its count
 * is within the stated error of the truth; memory stays what sketch_size
 * says whatever the number of distinct callers (a million here); merging
 * several sketches (workers) keeps the bounds; a minute past the interval
 * is left out; an escaped identity is shown as the caller sent it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "keytable.h"
#include "sketch.h"
#include "top.h"

#define MIN_US 60000000LL

static void
add_name(struct sketch *s, const char *name, uint64_t w)
{
    sketch_add(s, keytable_hash(name, strlen(name)), name, strlen(name), w);
}

/* The merged row of name in m, or NULL. */
static const struct sketch_row *
row_of(const struct sketch_merge *m, const char *name)
{
    return sketch_merge_find(m, keytable_hash(name, strlen(name)));
}

/* Whether row names `name` (its id is not NUL-terminated). */
static bool
row_is(const struct sketch_row *r, const char *name)
{
    return r->idlen == strlen(name) && memcmp(r->id, name, r->idlen) == 0;
}

/* A deterministic stream: `heavy` gets share/1000 of n, the rest spread
 * over `others` distinct callers. */
static void
stream(struct sketch *s, const char *heavy, unsigned share, unsigned n, unsigned others,
       uint64_t *heavy_true)
{
    char name[32];
    uint64_t x = 88172645463325252ULL;

    *heavy_true = 0;
    for (unsigned i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (x % 1000 < share) {
            add_name(s, heavy, 1);
            (*heavy_true)++;
        } else {
            snprintf(name, sizeof(name), "k:caller-%llu", (unsigned long long)(x % others));
            add_name(s, name, 1);
        }
    }
}

START_TEST(heavy_caller_exact_within_bound)
{
    struct sketch *s = sketch_new(32);
    struct sketch_merge m;
    const struct sketch_row *r;
    uint64_t truth;

    stream(s, "k:heavy", 600, 100000, 10000, &truth);
    sketch_merge_init(&m);
    sketch_merge_add(&m, s);
    sketch_merge_finish(&m);
    ck_assert_uint_eq(m.total, 100000);
    ck_assert_uint_gt(m.n, 0);
    /* first, its count an upper bound, count - err a lower one, err at most
     * total / k */
    ck_assert(row_is(&m.rows[0], "k:heavy"));
    r = row_of(&m, "k:heavy");
    ck_assert_ptr_eq(r, &m.rows[0]);
    ck_assert_uint_ge(r->count, truth);
    ck_assert_uint_le(r->count - r->err, truth);
    ck_assert_uint_le(r->err, m.total / 32);
    sketch_merge_free(&m);
    sketch_free(s);
}
END_TEST

START_TEST(few_callers_counted_exactly)
{
    struct sketch *s = sketch_new(8);
    struct sketch_merge m;

    add_name(s, "k:a", 5);
    add_name(s, "k:b", 3);
    add_name(s, "k:a", 2);
    sketch_merge_init(&m);
    sketch_merge_add(&m, s);
    sketch_merge_finish(&m);
    ck_assert_uint_eq(m.n, 2);
    ck_assert_uint_eq(row_of(&m, "k:a")->count, 7);
    ck_assert_uint_eq(row_of(&m, "k:a")->err, 0);
    ck_assert_uint_eq(row_of(&m, "k:b")->count, 3);
    ck_assert_uint_eq(m.total, 10);
    sketch_merge_free(&m);
    sketch_clear(s);
    ck_assert_uint_eq(sketch_total(s), 0);
    sketch_merge_init(&m);
    sketch_merge_add(&m, s);
    sketch_merge_finish(&m);
    ck_assert_uint_eq(m.n, 0);
    sketch_merge_free(&m);
    sketch_free(s);
}
END_TEST

START_TEST(bounded_under_a_million_callers)
{
    struct sketch *s = sketch_new(32);
    size_t before = sketch_size(32);
    struct sketch_merge m;
    uint64_t truth;

    /* a million distinct callers and one at 5%: the sketch never grows
     * (one allocation, sketch_size), the 5% caller is still held */
    stream(s, "k:five-percent", 50, 1000000, 1000000, &truth);
    ck_assert_uint_eq(s->n, 32);
    ck_assert_uint_eq(sketch_size(s->k), before);
    ck_assert_uint_lt(before, 8 * 1024);
    sketch_merge_init(&m);
    sketch_merge_add(&m, s);
    sketch_merge_finish(&m);
    ck_assert(row_is(&m.rows[0], "k:five-percent"));
    ck_assert_uint_ge(m.rows[0].count, truth);
    ck_assert_uint_le(m.rows[0].count - m.rows[0].err, truth);
    sketch_merge_free(&m);
    sketch_free(s);
    /* and a policy's tables on one worker: what top_policy_bytes says, a
     * few hundred KiB at the default k */
    ck_assert_uint_lt(top_policy_bytes(TOP_K_DEFAULT), 256 * 1024);
    ck_assert_uint_lt(top_policy_bytes(TOP_K_MAX), 512 * 1024);
}
END_TEST

START_TEST(merge_of_workers_keeps_the_bounds)
{
    struct sketch *w[3];
    struct sketch_merge m;
    uint64_t truth = 0, t;
    const struct sketch_row *r;

    /* the heavy caller spread over three workers, each with its own crowd */
    for (int i = 0; i < 3; i++) {
        w[i] = sketch_new(16);
        stream(w[i], "k:spread", 200 + 150 * (unsigned)i, 20000, 5000, &t);
        truth += t;
    }
    sketch_merge_init(&m);
    for (int i = 0; i < 3; i++)
        sketch_merge_add(&m, w[i]);
    sketch_merge_finish(&m);
    ck_assert_uint_eq(m.total, 60000);
    ck_assert(row_is(&m.rows[0], "k:spread"));
    r = &m.rows[0];
    ck_assert_uint_ge(r->count, truth);
    ck_assert_uint_le(r->count - r->err, truth);
    /* each sketch's error at most its total / k */
    ck_assert_uint_le(r->err, 3 * 20000 / 16);
    /* rows by count, highest first */
    for (size_t i = 1; i < m.n; i++)
        ck_assert_uint_ge(m.rows[i - 1].count, m.rows[i].count);
    sketch_merge_free(&m);
    for (int i = 0; i < 3; i++)
        sketch_free(w[i]);
}
END_TEST

START_TEST(caller_only_in_one_worker)
{
    struct sketch *a = sketch_new(2), *b = sketch_new(2);
    struct sketch_merge m;
    const struct sketch_row *r;

    /* b is full with others: x may have had up to its least count there */
    add_name(a, "k:x", 10);
    add_name(b, "k:y", 4);
    add_name(b, "k:z", 3);
    sketch_merge_init(&m);
    sketch_merge_add(&m, a);
    sketch_merge_add(&m, b);
    sketch_merge_finish(&m);
    r = row_of(&m, "k:x");
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->count, 13);
    ck_assert_uint_eq(r->err, 3);
    r = row_of(&m, "k:y");
    ck_assert_uint_eq(r->count, 4);
    ck_assert_uint_eq(r->err, 0);
    sketch_merge_free(&m);
    sketch_free(a);
    sketch_free(b);
}
END_TEST

START_TEST(top_minutes_and_workers)
{
    struct rl_top *t[2] = {top_new(8), top_new(8)};
    struct top_answer a;
    int64_t now = 100 * MIN_US + 5000000;

    /* minute 100 on both workers; an older minute only on one */
    for (int i = 0; i < 6; i++)
        top_record(t[i % 2], 3, "k:alice", 7, 0, true, 0, now);
    top_record(t[0], 3, "k:bob", 5, 0, true, 0, now);
    top_record(t[1], 3, "k:bob", 5, 0, false, 40, now);
    top_record(t[0], 3, "k:old", 5, 0, true, 0, now - 5 * MIN_US);
    top_read(t, 2, 3, TOP_BY_DENIED, 1, 10, now, &a);
    ck_assert_uint_eq(a.total, 7);
    ck_assert_uint_eq(a.n, 2);
    ck_assert_str_eq(a.callers[0].identity, "k:alice");
    ck_assert_uint_eq(a.callers[0].figure[TOP_BY_DENIED], 6);
    ck_assert_uint_eq(a.callers[0].error_bound, 0);
    ck_assert_str_eq(a.callers[1].identity, "k:bob");
    ck_assert_uint_eq(a.callers[1].figure[TOP_BY_UNITS], 40);
    ck_assert_int_eq(a.interval_us, MIN_US + 5000000);
    top_answer_free(&a);
    /* 15 minutes take the old one in */
    top_read(t, 2, 3, TOP_BY_DENIED, 15, 10, now, &a);
    ck_assert_uint_eq(a.total, 8);
    ck_assert_uint_eq(a.n, 3);
    top_answer_free(&a);
    /* its slot reused 16 minutes on: the old minute is out of every interval */
    top_record(t[0], 3, "k:new", 5, 0, true, 0, now + 11 * MIN_US);
    top_read(t, 2, 3, TOP_BY_DENIED, 15, 10, now + 11 * MIN_US, &a);
    ck_assert_uint_eq(a.total, 8);
    top_answer_free(&a);
    /* another policy: nothing; units: bob */
    top_read(t, 2, 4, TOP_BY_DENIED, 1, 10, now, &a);
    ck_assert_uint_eq(a.n, 0);
    top_answer_free(&a);
    top_read(t, 2, 3, TOP_BY_UNITS, 1, 1, now, &a);
    ck_assert_uint_eq(a.n, 1);
    ck_assert_str_eq(a.callers[0].identity, "k:bob");
    ck_assert_uint_eq(a.total, 40);
    top_answer_free(&a);
    top_free(t[0]);
    top_free(t[1]);
}
END_TEST

START_TEST(one_caller_under_two_hashes)
{
    struct rl_top *t = top_new(2);
    struct top_answer a;

    /* a caller under two hashes (a check hashes it with its deny cache's
     * key; a policy that gives its limits identities of their own on a
     * reload, by its identity alone): read, one caller, counted whole */
    for (int i = 0; i < 5; i++)
        top_record(t, 2, "k:carol", 7, 0x1111, true, 0, MIN_US);
    for (int i = 0; i < 3; i++)
        top_record(t, 2, "k:carol", 7, 0x2222, true, 0, MIN_US);
    top_read(&t, 1, 2, TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.n, 1);
    ck_assert_str_eq(a.callers[0].identity, "k:carol");
    ck_assert_uint_eq(a.callers[0].figure[TOP_BY_DENIED], 8);
    ck_assert_uint_eq(a.callers[0].error_bound, 0);
    ck_assert_uint_eq(a.total, 8);
    top_answer_free(&a);
    top_free(t);
}
END_TEST

START_TEST(identity_shown_unescaped)
{
    struct rl_top *t = top_new(4);
    struct top_answer a;
    /* identity_key's escape of "k:<img src=x onerror=alert(1)>" */
    static const char esc[] = "k:%3Cimg%20src=x%20onerror=alert%281%29%3E";

    top_record(t, 1, esc, strlen(esc), 0, true, 0, MIN_US);
    top_read(&t, 1, 1, TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.n, 1);
    ck_assert_str_eq(a.callers[0].identity, "k:<img src=x onerror=alert(1)>");
    ck_assert(!a.callers[0].cut);
    top_answer_free(&a);
    top_free(t);
}
END_TEST

START_TEST(long_identity_cut)
{
    struct rl_top *t = top_new(4);
    struct top_answer a;
    char id[400];

    memset(id, 'a', sizeof(id));
    memcpy(id, "k:", 2);
    top_record(t, 1, id, sizeof(id), 0, true, 0, MIN_US);
    top_read(&t, 1, 1, TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.n, 1);
    ck_assert(a.callers[0].cut);
    ck_assert_uint_eq(a.callers[0].identity_len, SKETCH_ID_MAX);
    top_answer_free(&a);
    top_free(t);
}
END_TEST

START_TEST(rls_rules_bounded_and_shown_escaped)
{
    struct rl_top *t = top_new(4);
    struct top_answer a;
    static const char id[] = "d:api%1Eremote_address%1F10.0.0.7";

    /* past the policies' ids: TOP_RLS_RULES_MAX rules take sketches, then
     * a new rule's checks are refused; a rule that has them goes on */
    for (int r = 0; r < TOP_RLS_RULES_MAX + 5; r++)
        top_record(t, TOP_RLS_ID(r), id, strlen(id), 0, true, 0, MIN_US);
    top_record(t, TOP_RLS_ID(0), id, strlen(id), 0, true, 0, MIN_US);
    top_read(&t, 1, TOP_RLS_ID(0), TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.total, 2);
    ck_assert_uint_eq(a.n, 1);
    /* as the RLS key shows it: escaped */
    ck_assert_str_eq(a.callers[0].identity, id);
    top_answer_free(&a);
    top_read(&t, 1, TOP_RLS_ID(TOP_RLS_RULES_MAX), TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.total, 0);
    ck_assert_uint_eq(a.n, 0);
    top_answer_free(&a);
    /* the last id: in range */
    top_read(&t, 1, TOP_IDS - 1, TOP_BY_DENIED, 1, 10, MIN_US, &a);
    ck_assert_uint_eq(a.n, 0);
    top_answer_free(&a);
    top_free(t);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("sketch");
    TCase *tc = tcase_create("sketch");

    tcase_add_test(tc, heavy_caller_exact_within_bound);
    tcase_add_test(tc, few_callers_counted_exactly);
    tcase_add_test(tc, bounded_under_a_million_callers);
    tcase_add_test(tc, merge_of_workers_keeps_the_bounds);
    tcase_add_test(tc, caller_only_in_one_worker);
    tcase_add_test(tc, top_minutes_and_workers);
    tcase_add_test(tc, one_caller_under_two_hashes);
    tcase_add_test(tc, identity_shown_unescaped);
    tcase_add_test(tc, long_identity_cut);
    tcase_add_test(tc, rls_rules_bounded_and_shown_escaped);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
