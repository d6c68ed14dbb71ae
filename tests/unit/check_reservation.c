/*
 * check_reservation.c — reservation.c: a reservation id written and read
 * back (the longest one within 4,400 bytes), every shape it refuses, and
 * the limits hash: the same for the same limits whatever process computes
 * it, another for another limit, burst or zone.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "algo.h"
#include "lease.h"
#include "period.h"
#include "reservation.h"

static bool
parse(const char *s, struct rl_lease *n, char *claim, size_t *clen, int64_t *est, uint64_t *h,
      char *key, size_t *klen)
{
    return reservation_id_parse(s, strlen(s), n, claim, clen, est, h, key, RL_REDIS_KEY_MAX,
                                klen);
}

START_TEST(an_id_reads_back)
{
    struct rl_lease n = {0x0123456789abcdefULL, 0xfedcba9876543210ULL}, m;
    char claim[RL_RSV_CLAIM_MAX], got[RL_RSV_CLAIM_MAX], id[RL_RSV_ID_MAX];
    char key[RL_REDIS_KEY_MAX], back[RL_REDIS_KEY_MAX];
    size_t clen, glen, klen, blen;
    int64_t est;
    uint64_t h;

    /* the estimate as the budgets' bound has it: 10^15 */
    clen = reservation_claim(RL_COST_MAX, 0xabcdef012345ULL, claim);
    ck_assert_str_eq(claim, "1000000000000000.abcdef012345");
    ck_assert_int_eq(reservation_id_format(&n, claim, clen, "{rl:p:k:a}", 10, id, sizeof(id)),
                     RL_OK);
    ck_assert_str_eq(id, "0123456789abcdeffedcba9876543210.1000000000000000.abcdef012345."
                         "e3JsOnA6azphfQ");
    ck_assert(parse(id, &m, got, &glen, &est, &h, back, &blen));
    ck_assert(m.hi == n.hi && m.lo == n.lo);
    ck_assert_int_eq(est, RL_COST_MAX);
    ck_assert(h == 0xabcdef012345ULL);
    ck_assert_uint_eq(glen, clen);
    ck_assert_str_eq(got, claim);
    ck_assert_uint_eq(blen, 10);
    ck_assert_int_eq(memcmp(back, "{rl:p:k:a}", 10), 0);

    /* the longest key: the id stays within 4,400 bytes (docs/API.md) */
    memset(key, 0xff, sizeof(key));
    ck_assert_int_eq(reservation_id_format(&n, claim, clen, key, sizeof(key), id, sizeof(id)),
                     RL_OK);
    ck_assert_uint_le(strlen(id), 4400);
    ck_assert(parse(id, &m, got, &glen, &est, &h, back, &klen));
    ck_assert_uint_eq(klen, sizeof(key));
}
END_TEST

START_TEST(other_shapes_are_refused)
{
    static const char *const bad[] = {
        "",
        "0123456789abcdeffedcba9876543210",
        /* an upper-case digit, a short nonce, the zero nonce */
        "0123456789ABCDEFfedcba9876543210.5.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba987654321.5.abcdef012345.e3JsOnA6azphfQ",
        "00000000000000000000000000000000.5.abcdef012345.e3JsOnA6azphfQ",
        /* an estimate of 0, with a leading zero, past 10^15, not digits */
        "0123456789abcdeffedcba9876543210.0.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.05.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.1000000000000001.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.10000000000000000.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.-5.abcdef012345.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.5x.abcdef012345.e3JsOnA6azphfQ",
        /* a hash of 11 or 13 digits, or not hex */
        "0123456789abcdeffedcba9876543210.5.abcdef01234.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.5.abcdef0123456.e3JsOnA6azphfQ",
        "0123456789abcdeffedcba9876543210.5.abcdeg012345.e3JsOnA6azphfQ",
        /* a key not base64url, not canonical, missing */
        "0123456789abcdeffedcba9876543210.5.abcdef012345.e3JsOnA6a+phfQ",
        "0123456789abcdeffedcba9876543210.5.abcdef012345.e3JsOnA6azphfR",
        "0123456789abcdeffedcba9876543210.5.abcdef012345.",
        "0123456789abcdeffedcba9876543210.5.abcdef012345",
    };
    struct rl_lease m;
    char got[RL_RSV_CLAIM_MAX], back[RL_REDIS_KEY_MAX];
    size_t glen, blen;
    int64_t est;
    uint64_t h;

    for (size_t i = 0; i < RL_ARRAY_LEN(bad); i++)
        ck_assert_msg(!parse(bad[i], &m, got, &glen, &est, &h, back, &blen), "read: %s",
                      bad[i]);
}
END_TEST

START_TEST(the_limits_hash_is_of_the_limits)
{
    struct rl_limit a[2], b[2];
    char *cause = NULL;
    uint64_t h;

    memset(a, 0, sizeof(a));
    a[0].algo = RL_ALGO_TOKEN_BUCKET;
    a[0].limit = 1000;
    a[0].window_ms = 60000;
    a[0].burst = 2000;
    a[1].algo = RL_ALGO_FIXED_WINDOW;
    a[1].limit = 2000000000;
    a[1].burst = 2000000000;
    a[1].period.kind = RL_PERIOD_MONTH;
    a[1].period.tz = period_tz("Europe/Berlin", 0, &cause);
    ck_assert_ptr_nonnull(a[1].period.tz);
    h = reservation_limits_hash(a, 2);
    memcpy(b, a, sizeof(a));
    ck_assert(reservation_limits_hash(b, 2) == h);
    b[0].burst = 1000;
    ck_assert(reservation_limits_hash(b, 2) != h);
    memcpy(b, a, sizeof(a));
    b[1].period.tz = period_tz("UTC", 0, &cause);
    ck_assert(reservation_limits_hash(b, 2) != h);
    ck_assert(reservation_limits_hash(a, 1) != h);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("reservation");
    TCase *tc = tcase_create("ids");

    tcase_add_test(tc, an_id_reads_back);
    tcase_add_test(tc, other_shapes_are_refused);
    tcase_add_test(tc, the_limits_hash_is_of_the_limits);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
