/*
 * check_algo.c — the C algorithms at their boundaries, with exact numbers,
 * driven by explicit times (no clock, no sleeps in assertions), their shared
 * invariants over random sequences, and the memory backend end to end.
 * tests/unit/check_algo_diff.c compares them with the Lua twins in Redis.
 */
#include "unit.h"
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "backend.h"
#include "../testutil_core.h"
#include "config.h"

#define MS 1000LL               /* microseconds */
#define S (1000 * MS)
#define T0 (1000000LL * S)      /* an epoch-aligned start, far from 0 */
#define DAY_MS 86400000LL

static struct rl_limit
mklimit(enum rl_algo algo, int64_t limit, int64_t window_ms, int64_t burst)
{
    struct rl_limit l = { algo, limit, window_ms, burst ? burst : limit, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0};
    return l;
}

static struct rl_limit_result
peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
     int64_t cost)
{
    struct rl_limit_result r;

    algo_def(lim->algo)->peek(lim, st, now, cost, &r);
    return r;
}

/* One check of one limit, as the backends do it: peek, then commit if it
 * was allowed or is forced (a hybrid sync), and cost > 0. */
static struct rl_limit_result
check_one(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
          int64_t cost, int forced)
{
    struct rl_limit_result r = peek(lim, st, now, cost);

    if ((r.allowed || forced) && cost > 0)
        algo_def(lim->algo)->commit(lim, st, now, cost, &r);
    return r;
}

static struct rl_limit_result
step(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
     int64_t cost)
{
    return check_one(lim, st, now, cost, 0);
}

static struct rl_limit_result
force(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
      int64_t cost)
{
    return check_one(lim, st, now, cost, 1);
}

static int64_t
ttl_us(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    return algo_def(lim->algo)->ttl_us(lim, st, now);
}

#define EXPECT(r, al, rem, rst, rty)                                          \
    do {                                                                      \
        struct rl_limit_result r_ = (r);                                      \
        ck_assert_msg(r_.allowed == (al) && r_.remaining == (rem) &&          \
                      r_.reset_ms == (rst) && r_.retry_after_ms == (rty),     \
                      "got allowed=%d remaining=%lld reset_ms=%lld "          \
                      "retry_after_ms=%lld, want %d %lld %lld %lld",          \
                      r_.allowed, (long long)r_.remaining,                    \
                      (long long)r_.reset_ms, (long long)r_.retry_after_ms,   \
                      (al), (long long)(rem), (long long)(rst),               \
                      (long long)(rty));                                      \
    } while (0)

/* ---- fixed window: the documented edge burst ------------------------------ */

START_TEST(fw_edge_admits_twice_the_limit)
{
    struct rl_limit fw = mklimit(RL_ALGO_FIXED_WINDOW, 10, 1000, 0);
    struct rl_limit swl = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 10, 1000, 0);
    struct rl_algo_state a = {0}, b = {0};
    int fw_edge = 0, swl_edge = 0;

    /* one check opens the window; then the burst sits on its edge */
    EXPECT(step(&fw, &a, T0, 1), 1, 9, 1000, 0);
    EXPECT(step(&swl, &b, T0, 1), 1, 9, 1000, 0);
    for (int i = 0; i < 10; i++) {
        fw_edge += step(&fw, &a, T0 + S - 1, 1).allowed;
        swl_edge += step(&swl, &b, T0 + S - 1, 1).allowed;
    }
    EXPECT(peek(&fw, &a, T0 + S - 1, 1), 0, 0, 1, 1);
    for (int i = 0; i < 10; i++) {
        fw_edge += step(&fw, &a, T0 + S, 1).allowed;
        swl_edge += step(&swl, &b, T0 + S, 1).allowed;
    }
    /* 19 within two microseconds, 20 within one window length */
    ck_assert_int_eq(fw_edge, 19);
    ck_assert_int_eq(swl_edge, 10);
    EXPECT(peek(&fw, &a, T0 + S, 0), 1, 0, 1000, 0);
    algo_state_release(&a);
    algo_state_release(&b);
}
END_TEST

/* ---- sliding window log --------------------------------------------------- */

START_TEST(swl_exact_no_edge_burst)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 5, 1000, 0);
    struct rl_algo_state st = {0};

    for (int k = 0; k < 5; k++)
        EXPECT(step(&l, &st, T0 + k * 100 * MS, 1), 1, 4 - k, 1000, 0);
    /* full: the oldest leaves at T0 + 1 s; the newest at T0 + 1.4 s */
    EXPECT(step(&l, &st, T0 + 500 * MS, 1), 0, 0, 900, 500);
    EXPECT(step(&l, &st, T0 + S - 1, 1), 0, 0, 401, 1);
    EXPECT(step(&l, &st, T0 + S, 1), 1, 0, 1000, 0);
    /* the one that left made room for exactly one */
    EXPECT(step(&l, &st, T0 + S, 1), 0, 0, 1000, 100);
    ck_assert_int_eq(st.ring_len, 5);
    algo_state_release(&st);
}
END_TEST

START_TEST(swl_counts_cost_units)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 10, 1000, 0);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 3), 1, 7, 1000, 0);
    EXPECT(step(&l, &st, T0 + 50 * MS, 3), 1, 4, 1000, 0);
    EXPECT(step(&l, &st, T0 + 100 * MS, 3), 1, 1, 1000, 0);
    /* 3 more need 2 units gone: the first entry (3 units) at T0 + 1 s */
    EXPECT(step(&l, &st, T0 + 150 * MS, 3), 0, 1, 950, 850);
    EXPECT(step(&l, &st, T0 + 150 * MS, 1), 1, 0, 1000, 0);
    /* 4 units: the first two entries must leave (second at T0 + 1.05 s) */
    EXPECT(step(&l, &st, T0 + 200 * MS, 4), 0, 0, 950, 850);
    /* 7 units: the first three (third at T0 + 1.1 s) */
    EXPECT(step(&l, &st, T0 + 200 * MS, 7), 0, 0, 950, 900);
    /* 10 units: all four (fourth at T0 + 1.15 s) */
    EXPECT(step(&l, &st, T0 + 200 * MS, 10), 0, 0, 950, 950);
    EXPECT(step(&l, &st, T0 + 200 * MS, 11), 0, 0, 950, -1);
    /* only the fourth (1 unit) is left, until T0 + 1.15 s */
    EXPECT(step(&l, &st, T0 + 1100 * MS, 10), 0, 9, 50, 50);
    EXPECT(step(&l, &st, T0 + 1150 * MS, 10), 1, 0, 1000, 0);
    algo_state_release(&st);
}
END_TEST

START_TEST(swl_many_in_one_microsecond_all_count)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 1000, 1000, 0);
    struct rl_algo_state st = {0};

    for (int k = 0; k < 1000; k++)
        EXPECT(step(&l, &st, T0, 1), 1, 999 - k, 1000, 0);
    EXPECT(step(&l, &st, T0, 1), 0, 0, 1000, 1000);
    ck_assert_int_eq(st.ring_len, 1000);
    ck_assert_uint_le(st.ring_cap, 1000);   /* bounded by the limit */
    algo_state_release(&st);
}
END_TEST

START_TEST(swl_ring_wraps_and_stays_small)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 20, 100, 0);
    struct rl_algo_state st = {0};

    /* one check every 10 ms in a 100 ms window: 10 live at any time */
    for (int k = 0; k < 1000; k++) {
        struct rl_limit_result r = step(&l, &st, T0 + k * 10 * MS, 1);
        ck_assert(r.allowed);
        ck_assert_int_eq(r.remaining, k < 9 ? 19 - k : 10);
    }
    ck_assert_int_eq(st.ring_len, 10);
    ck_assert_uint_le(st.ring_cap, 16);
    ck_assert_int_eq(st.swl.units, 10);
    algo_state_release(&st);
}
END_TEST

/* ---- sliding window counter ------------------------------------------------ */

START_TEST(swc_weights_the_previous_window)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 10, 1000, 0);
    struct rl_algo_state st = {0};

    for (int k = 0; k < 10; k++)
        EXPECT(step(&l, &st, T0, 1), 1, 9 - k, 2000, 0);
    /* next window: at 0.1 s in, 10 x 0.9 + 0 + 1 <= 10 */
    EXPECT(step(&l, &st, T0, 1), 0, 0, 2000, 1100);
    /* a quarter in: 10 x 0.75 = 7.5, rounded up to 8, leaves 2 */
    EXPECT(peek(&l, &st, T0 + 1250 * MS, 0), 1, 2, 750, 0);
    /* 3 fit at 0.3 s in: 10 x 0.7 = 7 */
    EXPECT(step(&l, &st, T0 + 1250 * MS, 3), 0, 2, 750, 50);
    EXPECT(step(&l, &st, T0 + 1250 * MS, 2), 1, 0, 1750, 0);
    EXPECT(step(&l, &st, T0 + 1300 * MS, 1), 1, 0, 1700, 0);
    /* exactly half: 10 x 0.5 = 5, plus 3 */
    EXPECT(peek(&l, &st, T0 + 1500 * MS, 0), 1, 2, 1500, 0);
    /* curr (3) fades over the next window: at 2 s + e, 3 x (1 - e) + 9 <= 10
     * from e = 2/3 s (rounded up to the microsecond) */
    EXPECT(peek(&l, &st, T0 + 1500 * MS, 9), 0, 2, 1500, 1167);
    ck_assert(!peek(&l, &st, T0 + 2666666, 9).allowed);
    ck_assert(peek(&l, &st, T0 + 2666667, 9).allowed);
    /* both windows gone */
    EXPECT(peek(&l, &st, T0 + 3000 * MS, 10), 1, 10, 0, 0);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 1500 * MS), 1500 * MS);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 3000 * MS), 0);
}
END_TEST

/* The estimate's worst case: a whole limit at the very end of one window. */
START_TEST(swc_worst_case_is_spread_not_doubled)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 100, 1000, 0);
    struct rl_algo_state st = {0};
    int64_t when[200];
    int n = 0, most = 0;

    for (int k = 0; k < 100; k++) {
        ck_assert(step(&l, &st, T0 + S - 1, 1).allowed);
        when[n++] = T0 + S - 1;
    }
    for (int64_t t = T0 + S; t < T0 + 2 * S; t += MS)
        if (step(&l, &st, t, 1).allowed)
            when[n++] = t;
    ck_assert_int_eq(n, 199);
    /* the most allowed within any window-length span (t - W, t] */
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += when[j] > when[i] - S && when[j] <= when[i];
        most = c > most ? c : most;
    }
    ck_assert_int_eq(most, 199);
    /* but never many at once: 10 ms into the window, 1 */
    ck_assert_int_eq(when[100], T0 + S + 10 * MS);
}
END_TEST

START_TEST(swc_big_limit_day_window_is_exact)
{
    /* 1e9 per day: limit x window in us is ~2^66 */
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 1000000000,
                                DAY_MS, 0);
    struct rl_algo_state st = {0};
    int64_t W = DAY_MS * MS, d0 = 20000 * W;

    EXPECT(step(&l, &st, d0, 999999999), 1, 1, 2 * DAY_MS, 0);
    /* 999999999 x (W - e) / W rounded up: 999999999 until e = 87 us */
    EXPECT(peek(&l, &st, d0 + W + 1, 0), 1, 1, DAY_MS, 0);
    EXPECT(peek(&l, &st, d0 + W + 86, 0), 1, 1, DAY_MS, 0);
    EXPECT(peek(&l, &st, d0 + W + 87, 0), 1, 2, DAY_MS, 0);
    /* cost 2 at e = 1 us: allowed from e = 87 us */
    EXPECT(peek(&l, &st, d0 + W + 1, 2), 0, 1, DAY_MS, 1);
    ck_assert(!peek(&l, &st, d0 + W + 86, 2).allowed);
    ck_assert(peek(&l, &st, d0 + W + 87, 2).allowed);
    /* cost 5e8 at 1 us: 999999999 x (W - e) / W <= 5e8 from
     * e = W - floor(5e8 x W / 999999999) = 43199999957 us */
    EXPECT(peek(&l, &st, d0 + W + 1, 500000000), 0, 1, DAY_MS, 43200000);
    ck_assert(!peek(&l, &st, d0 + W + 43199999956LL, 500000000).allowed);
    ck_assert(peek(&l, &st, d0 + W + 43199999957LL, 500000000).allowed);
}
END_TEST

/* ---- token bucket -------------------------------------------------------- */

START_TEST(tb_burst_then_refill)
{
    /* 5 per second, 10 of capacity: one token per 200 ms */
    struct rl_limit l = mklimit(RL_ALGO_TOKEN_BUCKET, 5, 1000, 10);
    struct rl_algo_state st = {0};

    EXPECT(peek(&l, &st, T0, 0), 1, 10, 0, 0);
    for (int k = 0; k < 10; k++)
        EXPECT(step(&l, &st, T0, 1), 1, 9 - k, (k + 1) * 200, 0);
    EXPECT(step(&l, &st, T0, 1), 0, 0, 2000, 200);
    EXPECT(step(&l, &st, T0, 11), 0, 0, 2000, -1);
    EXPECT(step(&l, &st, T0 + 200 * MS - 1, 1), 0, 0, 1801, 1);
    EXPECT(step(&l, &st, T0 + 200 * MS, 1), 1, 0, 2000, 0);
    /* half a second later 2.5 tokens: 2 whole, the third in 100 ms */
    EXPECT(step(&l, &st, T0 + 700 * MS, 3), 0, 2, 1500, 100);
    EXPECT(step(&l, &st, T0 + 10 * S, 10), 1, 0, 2000, 0);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 10 * S), 2 * S);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 12 * S), 0);
}
END_TEST

START_TEST(tb_fractional_rate_is_exact)
{
    /* 3 per second: a token every 333333.33 us */
    struct rl_limit l = mklimit(RL_ALGO_TOKEN_BUCKET, 3, 1000, 3);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 3), 1, 0, 1000, 0);
    EXPECT(step(&l, &st, T0, 1), 0, 0, 1000, 334);
    EXPECT(step(&l, &st, T0 + 333333, 1), 0, 0, 667, 1);
    /* 1.000002 tokens back: one taken, 999999.33 us to full again */
    EXPECT(step(&l, &st, T0 + 333334, 1), 1, 0, 1000, 0);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 333334), 1000000);
    /* 333333 one-microsecond looks change nothing: the second token is
     * back at T0 + 333334 + 666666 */
    for (int64_t t = T0 + 333335; t < T0 + 666668; t++)
        ck_assert(!peek(&l, &st, t, 2).allowed);
    EXPECT(step(&l, &st, T0 + 666668, 1), 1, 0, 1000, 0);
}
END_TEST

/* ---- gcra ---------------------------------------------------------------- */

START_TEST(gcra_burst_then_interval)
{
    /* T = 100 ms, tolerance = 5 x T */
    struct rl_limit l = mklimit(RL_ALGO_GCRA, 10, 1000, 5);
    struct rl_algo_state st = {0};

    EXPECT(peek(&l, &st, T0, 0), 1, 5, 0, 0);
    for (int k = 0; k < 5; k++)
        EXPECT(step(&l, &st, T0, 1), 1, 4 - k, (k + 1) * 100, 0);
    EXPECT(step(&l, &st, T0, 1), 0, 0, 500, 100);
    EXPECT(step(&l, &st, T0, 6), 0, 0, 500, -1);
    /* equality allows: TAT + T - now = tolerance at exactly T0 + 100 ms */
    EXPECT(step(&l, &st, T0 + 100 * MS - 1, 1), 0, 0, 401, 1);
    EXPECT(step(&l, &st, T0 + 100 * MS, 1), 1, 0, 500, 0);
    EXPECT(step(&l, &st, T0 + 200 * MS - 1, 1), 0, 0, 401, 1);
    EXPECT(step(&l, &st, T0 + 200 * MS, 1), 1, 0, 500, 0);
    /* 250 ms later 2.5 cells are free: 2 whole */
    EXPECT(step(&l, &st, T0 + 450 * MS, 3), 0, 2, 250, 50);
    EXPECT(step(&l, &st, T0 + 450 * MS, 2), 1, 0, 450, 0);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 450 * MS), 450 * MS);
    ck_assert_int_eq(algo_def(l.algo)->ttl_us(&l, &st, T0 + 900 * MS), 0);
}
END_TEST

START_TEST(gcra_fractional_interval_is_exact)
{
    /* T = 333333 + 1/3 us */
    struct rl_limit l = mklimit(RL_ALGO_GCRA, 3, 1000, 1);
    struct rl_limit l3 = mklimit(RL_ALGO_GCRA, 3, 1000, 3);
    struct rl_algo_state st = {0}, st3 = {0};

    EXPECT(step(&l, &st, T0, 1), 1, 0, 334, 0);
    EXPECT(step(&l, &st, T0, 1), 0, 0, 334, 334);
    EXPECT(step(&l, &st, T0 + 333333, 1), 0, 0, 1, 1);
    EXPECT(step(&l, &st, T0 + 333334, 1), 1, 0, 334, 0);
    ck_assert_int_eq(st.gcra.tat_us, T0 + 666667);
    ck_assert_int_eq(st.gcra.tat_frac, 1);  /* + 1/3 us */

    /* three intervals are exactly one second: no drift */
    EXPECT(step(&l3, &st3, T0, 1), 1, 2, 334, 0);
    EXPECT(step(&l3, &st3, T0, 1), 1, 1, 667, 0);
    EXPECT(step(&l3, &st3, T0, 1), 1, 0, 1000, 0);
    ck_assert_int_eq(st3.gcra.tat_us, T0 + S);
    ck_assert_int_eq(st3.gcra.tat_frac, 0);
    EXPECT(step(&l3, &st3, T0 + 333333, 1), 0, 0, 667, 1);
    EXPECT(step(&l3, &st3, T0 + 333334, 1), 1, 0, 1000, 0);
    EXPECT(peek(&l3, &st3, T0 + 333334 + S, 0), 1, 3, 0, 0);
}
END_TEST

/* ---- forced commits: counts admitted elsewhere land whatever the limit says -- */

/*
 * A forced check answers what peek() decided (allowed 0 and its
 * retry_after_ms when it did not fit) with the numbers after the commit.
 */
START_TEST(fw_forced_goes_over_the_limit)
{
    struct rl_limit l = mklimit(RL_ALGO_FIXED_WINDOW, 10, 1000, 0);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 4), 1, 6, 1000, 0);
    EXPECT(force(&l, &st, T0 + 100 * MS, 9), 0, 0, 900, 900);
    ck_assert_int_eq(st.fw.count, 13);
    /* more than the limit: denied for ever, counted all the same */
    EXPECT(force(&l, &st, T0 + 200 * MS, 15), 0, 0, 800, -1);
    ck_assert_int_eq(st.fw.count, 28);
    EXPECT(peek(&l, &st, T0 + 300 * MS, 1), 0, 0, 700, 700);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 300 * MS), 700 * MS);
    /* a forced check that fits is an ordinary one */
    EXPECT(force(&l, &st, T0 + S, 10), 1, 0, 1000, 0);
    EXPECT(peek(&l, &st, T0 + 2 * S, 0), 1, 10, 0, 0);
}
END_TEST

START_TEST(swc_forced_goes_over_the_limit)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 10, 1000, 0);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 6), 1, 4, 2000, 0);
    /* 6 + 8 > 10: it would fit in the next window once 6 x (1 - e) <= 2,
     * from e = 1 s - floor(2 s / 6) = 666667 us: T0 + 1666667 */
    EXPECT(force(&l, &st, T0 + 500 * MS, 8), 0, 0, 1500, 1167);
    ck_assert_int_eq(st.swc.count, 14);
    /* 14 x (1 - e) <= 9 from e = 1 s - floor(9 s / 14) = 357143 us */
    EXPECT(peek(&l, &st, T0 + 500 * MS, 1), 0, 0, 1500, 858);
    ck_assert(!peek(&l, &st, T0 + 1357142, 1).allowed);
    ck_assert(peek(&l, &st, T0 + 1357143, 1).allowed);
    /* half way through the next window 14 x 0.5 = 7 count: room for 3 */
    EXPECT(peek(&l, &st, T0 + 1500 * MS, 3), 1, 3, 500, 0);
    /* 14 x (1 - e) <= 6 from e = 1 s - floor(6 s / 14) = 571429 us */
    EXPECT(peek(&l, &st, T0 + 1500 * MS, 4), 0, 3, 500, 72);
    ck_assert(!peek(&l, &st, T0 + 1571428, 4).allowed);
    ck_assert(peek(&l, &st, T0 + 1571429, 4).allowed);
    EXPECT(force(&l, &st, T0 + 1500 * MS, 11), 0, 0, 1500, -1);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 1500 * MS), 1500 * MS);
    EXPECT(peek(&l, &st, T0 + 3 * S, 10), 1, 10, 0, 0);
}
END_TEST

START_TEST(tb_forced_runs_into_debt_of_one_bucket_at_most)
{
    /* 5 per second, 10 of capacity: one token per 200 ms */
    struct rl_limit l = mklimit(RL_ALGO_TOKEN_BUCKET, 5, 1000, 10);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 8), 1, 2, 1600, 0);
    /* 5 would fit once 3 more tokens are back; taken now: 3 owed */
    EXPECT(force(&l, &st, T0, 5), 0, 0, 2600, 600);
    ck_assert_int_eq(st.tb.owed, 13);
    /* the debt is paid first: one token is 3 + 1 refills away */
    EXPECT(peek(&l, &st, T0, 1), 0, 0, 2600, 800);
    /* 12.5 missing and 12 more taken would be 24.5: the debt stops at one
     * bucket, 20 missing, 4 s to refill (algo_most_owed) */
    EXPECT(force(&l, &st, T0 + 100 * MS, 12), 0, 0, 4000, -1);
    ck_assert_int_eq(st.tb.owed, 20);
    ck_assert_int_eq(st.tb.owed_frac, 0);
    EXPECT(force(&l, &st, T0 + 100 * MS, 1000000), 0, 0, 4000, -1);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 100 * MS), 4000 * MS);
    /* 10 refilled by T0 + 2.1 s: the bucket is empty, not in debt */
    EXPECT(peek(&l, &st, T0 + 2100 * MS, 1), 0, 0, 2000, 200);
    EXPECT(peek(&l, &st, T0 + 2300 * MS - 1, 1), 0, 0, 1801, 1);
    EXPECT(peek(&l, &st, T0 + 2300 * MS, 1), 1, 1, 1800, 0);
    EXPECT(peek(&l, &st, T0 + 4100 * MS, 0), 1, 10, 0, 0);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 4100 * MS), 0);
}
END_TEST

START_TEST(gcra_forced_pushes_tat_out)
{
    /* T = 100 ms, tolerance = 5 x T */
    struct rl_limit l = mklimit(RL_ALGO_GCRA, 10, 1000, 5);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 3), 1, 2, 300, 0);
    EXPECT(force(&l, &st, T0, 4), 0, 0, 700, 200);
    ck_assert_int_eq(st.gcra.tat_us, T0 + 700 * MS);
    /* 700 + 600 ms would pass 2 x tau: TAT stops 1 s ahead */
    EXPECT(force(&l, &st, T0, 6), 0, 0, 1000, -1);
    ck_assert_int_eq(st.gcra.tat_us, T0 + 1000 * MS);
    EXPECT(force(&l, &st, T0, 1000000), 0, 0, 1000, -1);
    ck_assert_int_eq(st.gcra.tat_us, T0 + 1000 * MS);
    ck_assert_int_eq(ttl_us(&l, &st, T0), 1000 * MS);
    EXPECT(peek(&l, &st, T0 + 500 * MS, 1), 0, 0, 500, 100);
    EXPECT(peek(&l, &st, T0 + 600 * MS - 1, 1), 0, 0, 401, 1);
    EXPECT(peek(&l, &st, T0 + 600 * MS, 1), 1, 1, 400, 0);
    EXPECT(peek(&l, &st, T0 + 1000 * MS, 0), 1, 5, 0, 0);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 1000 * MS), 0);
}
END_TEST

START_TEST(swl_forced_keeps_the_newest_limit_entries)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 5, 1000, 0);
    struct rl_algo_state st = {0};

    for (int k = 0; k < 3; k++)
        EXPECT(step(&l, &st, T0 + k * 100 * MS, 1), 1, 4 - k, 1000, 0);
    /* 3 + 4 > 5: the two oldest must leave first (T0 + 1.1 s) */
    EXPECT(force(&l, &st, T0 + 300 * MS, 4), 0, 0, 1000, 800);
    ck_assert_int_eq(st.swl.units, 7);
    /* 7 + 1 > 5: three must leave, the third at T0 + 1.2 s */
    EXPECT(force(&l, &st, T0 + 400 * MS, 1), 0, 0, 1000, 800);
    ck_assert_int_eq(st.ring_len, 5);
    ck_assert_int_eq(st.swl.units, 8);
    /* a sixth entry: the oldest (T0, 1 unit) is forgotten to make room */
    EXPECT(force(&l, &st, T0 + 500 * MS, 2), 0, 0, 1000, 800);
    ck_assert_int_eq(st.ring_len, 5);
    ck_assert_int_eq(st.swl.units, 9);
    EXPECT(force(&l, &st, T0 + 600 * MS, 7), 0, 0, 1000, -1);
    ck_assert_int_eq(st.ring_len, 5);
    ck_assert_int_eq(st.swl.units, 15);
    ck_assert_uint_le(st.ring_cap, 5);
    /* live at 1.2 s: 300 ms x 4, 400 ms x 1, 500 ms x 2, 600 ms x 7 (the
     * 200 ms one has left); for one more unit 14 + 1 - 5 = 10 must leave,
     * the last of them the 600 ms entry, at T0 + 1.6 s */
    EXPECT(peek(&l, &st, T0 + 1200 * MS, 1), 0, 0, 400, 400);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 1200 * MS), 400 * MS);
    EXPECT(peek(&l, &st, T0 + 1600 * MS - 1, 1), 0, 0, 1, 1);
    EXPECT(peek(&l, &st, T0 + 1600 * MS, 5), 1, 5, 0, 0);
    /* and it is a log again */
    EXPECT(step(&l, &st, T0 + 1600 * MS, 5), 1, 0, 1000, 0);
    ck_assert_int_eq(st.ring_len, 1);
    algo_state_release(&st);
}
END_TEST

/* ---- concurrency: slots held by leases -------------------------------------- */

static struct rl_limit_result
hold(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, uint64_t id)
{
    struct rl_lease l = {0x1234, id};
    struct rl_limit_result r = peek(lim, st, now, 1);

    if (r.allowed)
        algo_def(lim->algo)->hold(lim, st, now, &l, &r);
    return r;
}

static bool
release(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, uint64_t id)
{
    struct rl_lease l = {0x1234, id};

    return algo_def(lim->algo)->release(lim, st, now, &l);
}

START_TEST(cc_slots_leases_and_releases)
{
    /* 3 slots, leases of 1 s */
    struct rl_limit l = mklimit(RL_ALGO_CONCURRENCY, 3, 1000, 0);
    struct rl_algo_state st = {0};

    EXPECT(hold(&l, &st, T0, 1), 1, 2, 1000, 0);
    EXPECT(hold(&l, &st, T0 + 100 * MS, 2), 1, 1, 1000, 0);
    /* any cost takes one slot */
    EXPECT(peek(&l, &st, T0 + 200 * MS, 50), 1, 1, 900, 0);
    EXPECT(hold(&l, &st, T0 + 200 * MS, 3), 1, 0, 1000, 0);
    /* full: the first lease ends at T0 + 1 s, an upper bound */
    EXPECT(peek(&l, &st, T0 + 300 * MS, 1), 0, 0, 900, 700);
    /* cost 0 asks: allowed, takes nothing */
    EXPECT(peek(&l, &st, T0 + 300 * MS, 0), 1, 0, 900, 0);
    /* a release frees its slot at once, once */
    ck_assert(release(&l, &st, T0 + 400 * MS, 2));
    ck_assert(!release(&l, &st, T0 + 400 * MS, 2));
    ck_assert(!release(&l, &st, T0 + 400 * MS, 99));
    EXPECT(peek(&l, &st, T0 + 400 * MS, 1), 1, 1, 800, 0);
    EXPECT(hold(&l, &st, T0 + 500 * MS, 4), 1, 0, 1000, 0);
    /* lease 1 ends unreleased: its slot is back at T0 + 1 s */
    EXPECT(peek(&l, &st, T0 + 1000 * MS - 1, 1), 0, 0, 501, 1);
    EXPECT(peek(&l, &st, T0 + 1000 * MS, 1), 1, 1, 500, 0);
    /* an ended lease is not held: its release says so */
    ck_assert(!release(&l, &st, T0 + 1000 * MS, 1));
    /* the rest end too; the state is worthless when the last does */
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 1000 * MS), 500 * MS);
    EXPECT(peek(&l, &st, T0 + 1500 * MS, 1), 1, 3, 0, 0);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 1500 * MS), 0);
    /* releasing the last live lease empties the state */
    EXPECT(hold(&l, &st, T0 + 2000 * MS, 5), 1, 2, 1000, 0);
    ck_assert(release(&l, &st, T0 + 2100 * MS, 5));
    ck_assert_int_eq(st.ring_len, 0);
    ck_assert_ptr_null(st.ring);
    algo_state_release(&st);
}
END_TEST

START_TEST(cc_penalty_and_reward)
{
    struct rl_limit l = mklimit(RL_ALGO_CONCURRENCY, 2, 1000, 0);
    struct rl_algo_state st = {0};
    struct rl_lease zero = {0, 0};

    /* a penalty takes an anonymous slot, never one past the limit */
    EXPECT(force(&l, &st, T0, 7), 1, 1, 1000, 0);
    EXPECT(force(&l, &st, T0 + 100 * MS, 1), 1, 0, 1000, 0);
    EXPECT(force(&l, &st, T0 + 200 * MS, 1), 0, 0, 900, 800);
    ck_assert_int_eq(st.ring_len, 2);
    /* no lease id names an anonymous slot */
    ck_assert(!algo_def(l.algo)->release(&l, &st, T0 + 300 * MS, &zero));
    /* a reward frees the slot that would end last */
    algo_def(l.algo)->give(&l, &st, T0 + 300 * MS, 1);
    EXPECT(peek(&l, &st, T0 + 300 * MS, 1), 1, 1, 700, 0);
    algo_def(l.algo)->give(&l, &st, T0 + 300 * MS, 5);
    ck_assert_int_eq(st.ring_len, 0);
    algo_state_release(&st);
}
END_TEST

/* ---- every algorithm: invariants over random sequences --------------------- */

static uint64_t
rnd(uint64_t *s)
{
    /* splitmix64: small, seeded, the same everywhere */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t
rnd_upto(uint64_t *s, int64_t n)     /* 0..n */
{
    return n <= 0 ? 0 : (int64_t)(rnd(s) % (uint64_t)(n + 1));
}

static int64_t
capacity(const struct rl_limit *l)
{
    return algo_def(l->algo)->uses_burst ? l->burst : l->limit;
}

static int
same(struct rl_limit_result a, struct rl_limit_result b)
{
    return a.allowed == b.allowed && a.remaining == b.remaining &&
           a.reset_ms == b.reset_ms && a.retry_after_ms == b.retry_after_ms;
}

/*
 * What every algorithm promises at (st, now) for a check of `cost`:
 * remaining >= 0; retry_after_ms is 0 when allowed, -1 when cost cannot fit,
 * and otherwise the first whole millisecond at which the same check is
 * allowed; reset_ms is the first whole millisecond at which everything is
 * free again; the TTL is exactly as long as the state differs from none.
 */
static void
check_promises(const struct rl_limit *l, const struct rl_algo_state *st,
               int64_t now, int64_t cost, const char *where)
{
    static const struct rl_algo_state none;
    const struct rl_algo_def *d = algo_def(l->algo);
    int64_t cap = capacity(l), ttl = d->ttl_us(l, st, now);
    struct rl_limit_result r = peek(l, st, now, cost), r0 = peek(l, st, now, 0);
    /* a concurrency limit's check takes one slot whatever its cost */
    int64_t need = l->algo == RL_ALGO_CONCURRENCY ? cost > 0 : cost;

    ck_assert_msg(r.remaining >= 0 && r.reset_ms >= 0, "%s", where);
    if (need > cap) {
        ck_assert_msg(!r.allowed && r.retry_after_ms == -1, "%s", where);
    } else if (r.allowed) {
        ck_assert_msg(r.retry_after_ms == 0, "%s", where);
    } else {
        ck_assert_msg(r.retry_after_ms >= 1, "%s", where);
        ck_assert_msg(peek(l, st, now + r.retry_after_ms * MS, cost).allowed,
                      "%s: not allowed after retry_after_ms=%lld", where,
                      (long long)r.retry_after_ms);
        ck_assert_msg(!peek(l, st, now + (r.retry_after_ms - 1) * MS, cost).allowed,
                      "%s: retry_after_ms=%lld is late", where,
                      (long long)r.retry_after_ms);
    }
    ck_assert_msg(r.remaining == r0.remaining && r.reset_ms == r0.reset_ms,
                  "%s: cost changed remaining/reset", where);
    ck_assert_msg(peek(l, st, now + r0.reset_ms * MS, 0).remaining == cap,
                  "%s: not full after reset_ms=%lld", where, (long long)r0.reset_ms);
    if (r0.reset_ms > 0)
        ck_assert_msg(peek(l, st, now + (r0.reset_ms - 1) * MS, 0).remaining < cap,
                      "%s: reset_ms=%lld is late", where, (long long)r0.reset_ms);
    ck_assert_msg(ttl >= 0 && algo_us_to_ms_ceil(ttl) == r0.reset_ms,
                  "%s: ttl %lld us vs reset_ms %lld", where, (long long)ttl,
                  (long long)r0.reset_ms);
    if (ttl > 0)
        ck_assert_msg(peek(l, st, now + ttl - 1, 0).remaining < cap,
                      "%s: ttl %lld us ends while the state still matters",
                      where, (long long)ttl);
    for (int64_t c = 0; c <= cap + 1; c += cap / 2 + 1)
        ck_assert_msg(same(peek(l, st, now + ttl, c), peek(l, &none, now + ttl, c)),
                      "%s: state still matters after its ttl", where);
}

static const struct {
    int64_t limit, window_ms, burst;
} shapes[] = {
    {3, 1000, 5}, {100, 60000, 100}, {7, 1000, 2}, {5, 1, 5},
    {1000000000, DAY_MS, 1000000000}, {1000000000, DAY_MS, 300000000},
    {2, 366 * DAY_MS, 3},
};

START_TEST(every_algorithm_keeps_its_promises)
{
    enum rl_algo algo = (enum rl_algo)_i;

    for (size_t k = 0; k < RL_ARRAY_LEN(shapes); k++) {
        struct rl_limit l = mklimit(algo, shapes[k].limit, shapes[k].window_ms,
                                    algo_def(algo)->uses_burst ? shapes[k].burst : 0);
        struct rl_algo_state st = {0};
        uint64_t seed = 1000 * (uint64_t)_i + k;
        int64_t now = T0, W = l.window_ms * MS, gap = W / l.limit;
        char where[160];

        for (int n = 0; n < 600; n++) {
            int64_t cost, cap = capacity(&l);

            switch (rnd(&seed) % 8) {
            case 0: break;
            case 1: now += 1; break;
            case 2: now += rnd_upto(&seed, W); break;
            case 3: now += rnd_upto(&seed, 3 * W); break;
            default: now += rnd_upto(&seed, 2 * gap); break;
            }
            switch (rnd(&seed) % 8) {
            case 0: cost = 0; break;
            case 1: cost = cap + 1 + rnd_upto(&seed, 3); break;
            case 2: cost = 1 + rnd_upto(&seed, cap - 1); break;
            case 3: cost = 1 + rnd_upto(&seed, cap / 3); break;
            default: cost = 1; break;
            }
            if (n == 400) {
                /* the config shrinks under live state: still no promise broken */
                l.limit = l.limit / 2 + 1;
                l.burst = algo_def(algo)->uses_burst ? l.burst / 2 + 1 : l.limit;
            }
            snprintf(where, sizeof(where), "%s shape %zu step %d now %lld cost %lld",
                     algo_def(algo)->name, k, n, (long long)now, (long long)cost);
            check_promises(&l, &st, now, cost, where);
            check_promises(&l, &st, now, 1, where);
            /* now and then a forced check: over the limit, into debt */
            if (rnd(&seed) % 8 == 0) {
                force(&l, &st, now, cost);
                if (algo == RL_ALGO_SLIDING_WINDOW_LOG)
                    ck_assert_msg(st.ring_len <= l.limit, "%s: %u entries",
                                  where, st.ring_len);
            } else {
                step(&l, &st, now, cost);
            }
        }
        algo_state_release(&st);
    }
}
END_TEST

START_TEST(token_bucket_and_gcra_decide_alike)
{
    for (size_t k = 0; k < RL_ARRAY_LEN(shapes); k++) {
        struct rl_limit tb = mklimit(RL_ALGO_TOKEN_BUCKET, shapes[k].limit,
                                     shapes[k].window_ms, shapes[k].burst);
        struct rl_limit gc = tb;
        struct rl_algo_state a = {0}, b = {0};
        uint64_t seed = 77 + k;
        int64_t now = T0, gap = tb.window_ms * MS / tb.limit;

        gc.algo = RL_ALGO_GCRA;
        for (int n = 0; n < 5000; n++) {
            int64_t cost = rnd(&seed) % 4 == 0 ? rnd_upto(&seed, tb.burst + 1) : 1;
            struct rl_limit_result x, y;
            int forced;

            now += rnd(&seed) % 16 == 0 ? rnd_upto(&seed, tb.window_ms * MS)
                                         : rnd_upto(&seed, 2 * gap);
            forced = rnd(&seed) % 16 == 0;
            if (forced && rnd(&seed) % 2 == 0)      /* far into debt */
                cost = rnd_upto(&seed, 4 * tb.burst);
            x = check_one(&tb, &a, now, cost, forced);
            y = check_one(&gc, &b, now, cost, forced);
            ck_assert_msg(same(x, y), "shape %zu step %d: tb %d %lld %lld %lld, "
                          "gcra %d %lld %lld %lld", k, n, x.allowed,
                          (long long)x.remaining, (long long)x.reset_ms,
                          (long long)x.retry_after_ms, y.allowed,
                          (long long)y.remaining, (long long)y.reset_ms,
                          (long long)y.retry_after_ms);
            ck_assert_int_eq(algo_def(tb.algo)->ttl_us(&tb, &a, now),
                             algo_def(gc.algo)->ttl_us(&gc, &b, now));
        }
    }
}
END_TEST


/* ---- giving back (a reward) ------------------------------------------------ */

static void
give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
     int64_t units)
{
    algo_def(lim->algo)->give(lim, st, now, units);
}

/* Every number of the state is 0 (whichever algorithm's), and the log empty. */
static int
all_zero(const struct rl_algo_state *st)
{
    static const struct rl_algo_state zero;

    return memcmp(st, &zero, offsetof(struct rl_algo_state, ring)) == 0 && st->ring_len == 0;
}

START_TEST(fw_give_back_floors_at_zero)
{
    struct rl_limit l = mklimit(RL_ALGO_FIXED_WINDOW, 10, 60000, 0);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 7), 1, 3, 60000, 0);
    give(&l, &st, T0 + S, 3);
    /* the window keeps its start */
    EXPECT(peek(&l, &st, T0 + S, 0), 1, 6, 59000, 0);
    give(&l, &st, T0 + S, 100);
    EXPECT(peek(&l, &st, T0 + S, 0), 1, 10, 0, 0);
    ck_assert(all_zero(&st));
    ck_assert_int_eq(ttl_us(&l, &st, T0 + S), 0);
    /* nothing to give in a window that has closed */
    EXPECT(step(&l, &st, T0 + 2 * S, 4), 1, 6, 60000, 0);
    give(&l, &st, T0 + 62 * S, 1);
    ck_assert_int_eq(st.fw.count, 4);
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 62 * S), 0);
}
END_TEST

START_TEST(swc_give_back_takes_current_then_previous)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 10, 60000, 0);
    struct rl_algo_state st = {0};
    int64_t W = 60 * S, t = (T0 / W + 1) * W;

    EXPECT(step(&l, &st, t, 4), 1, 6, 120000, 0);
    /* next window, at its start: prev 4 weighs fully */
    EXPECT(step(&l, &st, t + W, 3), 1, 3, 120000, 0);
    give(&l, &st, t + W, 5);
    /* current 3 -> 0, previous 4 -> 2 */
    ck_assert_int_eq(st.swc.count, 0);
    ck_assert_int_eq(st.swc.prev_count, 2);
    EXPECT(peek(&l, &st, t + W, 0), 1, 8, 60000, 0);
    give(&l, &st, t + W, 5);
    ck_assert(all_zero(&st));
    EXPECT(peek(&l, &st, t + W, 0), 1, 10, 0, 0);
}
END_TEST

START_TEST(tb_give_back_fills_up_to_burst)
{
    struct rl_limit l = mklimit(RL_ALGO_TOKEN_BUCKET, 10, 10000, 10);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 10), 1, 0, 10000, 0);
    give(&l, &st, T0, 4);
    EXPECT(peek(&l, &st, T0, 0), 1, 4, 6000, 0);
    /* out of a debt too: forced to 2 x burst missing, 4 back leaves 16 */
    EXPECT(force(&l, &st, T0, 20), 0, 0, 20000, -1);
    give(&l, &st, T0, 4);
    EXPECT(peek(&l, &st, T0, 0), 0, 0, 16000, 6000);
    give(&l, &st, T0, 1000);
    ck_assert(all_zero(&st));
    EXPECT(peek(&l, &st, T0, 0), 1, 10, 0, 0);
}
END_TEST

START_TEST(gcra_give_back_moves_tat_back_not_before_now)
{
    struct rl_limit l = mklimit(RL_ALGO_GCRA, 10, 10000, 10);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 10), 1, 0, 10000, 0);
    give(&l, &st, T0, 4);
    EXPECT(peek(&l, &st, T0, 0), 1, 4, 6000, 0);
    ck_assert_int_eq(st.gcra.tat_us, T0 + 6 * S);
    /* 3 s later TAT is 3 s ahead; 5 units (5 s) back: now, not before */
    give(&l, &st, T0 + 3 * S, 5);
    ck_assert(all_zero(&st));
    EXPECT(peek(&l, &st, T0 + 3 * S, 0), 1, 10, 0, 0);
    /* a fractional interval stays exact: 3 per second, 2 back of 3 */
    l = mklimit(RL_ALGO_GCRA, 3, 1000, 3);
    EXPECT(step(&l, &st, T0, 3), 1, 0, 1000, 0);
    give(&l, &st, T0, 2);
    EXPECT(peek(&l, &st, T0, 0), 1, 2, 334, 0);
    ck_assert_int_eq(ttl_us(&l, &st, T0), 333334);
}
END_TEST

START_TEST(swl_give_back_takes_the_newest_units)
{
    struct rl_limit l = mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 5, 1000, 0);
    struct rl_algo_state st = {0};

    EXPECT(step(&l, &st, T0, 1), 1, 4, 1000, 0);
    EXPECT(step(&l, &st, T0 + MS, 2), 1, 2, 1000, 0);
    EXPECT(step(&l, &st, T0 + 2 * MS, 1), 1, 1, 1000, 0);
    give(&l, &st, T0 + 3 * MS, 1);
    /* the newest entry (1 unit) went; the log's reset follows its newest */
    EXPECT(peek(&l, &st, T0 + 3 * MS, 0), 1, 2, 998, 0);
    /* one unit of the entry of 2: it stays, of 1, the newest */
    give(&l, &st, T0 + 3 * MS, 1);
    EXPECT(peek(&l, &st, T0 + 3 * MS, 0), 1, 3, 998, 0);
    give(&l, &st, T0 + 3 * MS, 1);
    EXPECT(peek(&l, &st, T0 + 3 * MS, 0), 1, 4, 997, 0);
    give(&l, &st, T0 + 3 * MS, 5);
    ck_assert(all_zero(&st));
    ck_assert_int_eq(ttl_us(&l, &st, T0 + 3 * MS), 0);
    EXPECT(step(&l, &st, T0 + 4 * MS, 5), 1, 0, 1000, 0);
    algo_state_release(&st);
}
END_TEST

START_TEST(give_back_on_nothing_changes_nothing)
{
    for (int a = 0; a < RL_ALGO_COUNT; a++) {
        struct rl_limit l = mklimit((enum rl_algo)a, 7, 5000, 7);
        struct rl_algo_state st = {0};

        give(&l, &st, T0, 3);
        ck_assert_msg(all_zero(&st), "%s", algo_def(l.algo)->name);
        EXPECT(peek(&l, &st, T0, 1), 1, 7, 0, 0);
    }
}
END_TEST

/* ---- the memory backend, end to end ----------------------------------------- */

static struct rl_policy
mkpolicy(struct rl_limit *limits, size_t n)
{
    struct rl_policy p;

    memset(&p, 0, sizeof(p));
    p.name = (char *)"t";
    p.limits = limits;
    p.nlimits = n;
    return p;
}

START_TEST(mem_decides_and_answers_once)
{
    struct rl_limit l[] = { mklimit(RL_ALGO_TOKEN_BUCKET, 3, 3600000, 3) };
    struct rl_policy p = mkpolicy(l, 1);
    struct rl_backend *be = tu_memory();
    const char *reason = NULL;
    struct rl_check_res r;

    ck_assert_ptr_null(reason = be->ops->not_ready(be));
    for (int k = 0; k < 3; k++) {
        r = tu_check(be, &p, "{t:a}", 1, 0);
        ck_assert(r.allowed);
        ck_assert_int_eq(r.limits[0].remaining, 2 - k);
    }
    r = tu_check(be, &p, "{t:a}", 1, 0);
    ck_assert(!r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 0);
    /* one token per 20 minutes; the clock moved a little since */
    ck_assert_int_le(r.limits[0].retry_after_ms, 1200000);
    ck_assert_int_gt(r.limits[0].retry_after_ms, 1200000 - 60000);
    r = tu_check(be, &p, "{t:a}", 4, 0);
    ck_assert_int_eq(r.limits[0].retry_after_ms, -1);
    /* another identity has its own bucket */
    ck_assert(tu_check(be, &p, "{t:b}", 3, 0).allowed);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_cost_zero_consumes_nothing)
{
    struct rl_limit l[] = { mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 2, 3600000, 0) };
    struct rl_policy p = mkpolicy(l, 1);
    struct rl_backend *be = tu_memory();

    for (int k = 0; k < 100; k++) {
        struct rl_check_res r = tu_check(be, &p, "{t:z}", 0, 0);
        ck_assert(r.allowed);
        ck_assert_int_eq(r.limits[0].remaining, 2);
    }
    ck_assert_uint_eq(backend_memory_entries(), 0);
    ck_assert(tu_check(be, &p, "{t:z}", 1, 0).allowed);
    ck_assert(tu_check(be, &p, "{t:z}", 1, 0).allowed);
    ck_assert(!tu_check(be, &p, "{t:z}", 1, 0).allowed);
    ck_assert(tu_check(be, &p, "{t:z}", 0, 0).allowed);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_denied_check_consumes_nothing_anywhere)
{
    struct rl_limit l[] = {
        mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 5, 3600000, 0),
        mklimit(RL_ALGO_FIXED_WINDOW, 3, 3600000, 0),
        mklimit(RL_ALGO_GCRA, 10, 3600000, 10),
    };
    struct rl_policy p = mkpolicy(l, 3), only_log = mkpolicy(l, 1);
    struct rl_backend *be = tu_memory();
    struct rl_check_res r;

    for (int k = 0; k < 3; k++)
        ck_assert(tu_check(be, &p, "{t:m}", 1, 0).allowed);
    for (int k = 0; k < 10; k++) {
        r = tu_check(be, &p, "{t:m}", 1, 0);
        ck_assert(!r.allowed);
        ck_assert(r.limits[0].allowed && !r.limits[1].allowed && r.limits[2].allowed);
        ck_assert_int_eq(r.limits[0].remaining, 2);
        ck_assert_int_eq(r.limits[2].remaining, 7);
    }
    /* too big for the fixed window alone: still nothing consumed */
    r = tu_check(be, &p, "{t:m}", 4, 0);
    ck_assert(!r.allowed);
    ck_assert_int_eq(r.limits[1].retry_after_ms, -1);
    /* the log still holds exactly 2 */
    r = tu_check(be, &only_log, "{t:m}", 2, 0);
    ck_assert(r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 0);
    ck_assert(!tu_check(be, &only_log, "{t:m}", 1, 0).allowed);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_store_is_shared_and_refcounted)
{
    struct rl_limit l[] = { mklimit(RL_ALGO_FIXED_WINDOW, 2, 3600000, 0) };
    struct rl_policy p = mkpolicy(l, 1);
    struct rl_backend *a = tu_memory(), *b = tu_memory();

    ck_assert(tu_check(a, &p, "{t:s}", 1, 0).allowed);
    ck_assert(tu_check(b, &p, "{t:s}", 1, 0).allowed);
    ck_assert(!tu_check(a, &p, "{t:s}", 1, 0).allowed);
    a->ops->destroy(a);
    ck_assert(!tu_check(b, &p, "{t:s}", 1, 0).allowed);
    ck_assert_uint_eq(backend_memory_entries(), 1);
    b->ops->destroy(b);
    ck_assert_uint_eq(backend_memory_entries(), 0);
    /* a new store starts empty */
    a = tu_memory();
    ck_assert(tu_check(a, &p, "{t:s}", 2, 0).allowed);
    a->ops->destroy(a);
}
END_TEST

START_TEST(mem_cap_holds_under_many_keys)
{
    struct rl_limit l[] = {
        mklimit(RL_ALGO_FIXED_WINDOW, 1, 3600000, 0),
        mklimit(RL_ALGO_TOKEN_BUCKET, 1, 3600000, 1),
    };
    struct rl_policy p = mkpolicy(l, 2);
    struct rl_backend *be;
    char key[64];

    backend_memory_set_max_entries(1000);
    be = tu_memory();
    for (int k = 0; k < 20000; k++) {
        snprintf(key, sizeof(key), "{t:%d}", k);
        ck_assert(tu_check(be, &p, key, 1, 0).allowed);
        if (k % 97 == 0 || k > 19900)
            ck_assert_uint_le(backend_memory_entries(), 1000);
    }
    ck_assert_uint_ge(backend_memory_entries(), 900);
    /* the first callers were forgotten to make room: they start afresh */
    ck_assert(tu_check(be, &p, "{t:0}", 1, 0).allowed);
    /* the latest still count */
    ck_assert(!tu_check(be, &p, "{t:19999}", 1, 0).allowed);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_evicts_the_entry_closest_to_expiry)
{
    struct rl_limit soon[] = { mklimit(RL_ALGO_FIXED_WINDOW, 1, 600000, 0) };
    struct rl_limit late[] = { mklimit(RL_ALGO_FIXED_WINDOW, 1, DAY_MS, 0) };
    struct rl_limit hour[] = { mklimit(RL_ALGO_FIXED_WINDOW, 1, 3600000, 0) };
    struct rl_policy ps = mkpolicy(soon, 1), pl = mkpolicy(late, 1),
                     ph = mkpolicy(hour, 1);
    struct rl_backend *be;
    char key[32];

    backend_memory_set_max_entries(32);     /* one shard of 32 */
    be = tu_memory();
    ck_assert(tu_check(be, &ps, "{t:soon}", 1, 0).allowed);
    ck_assert(tu_check(be, &pl, "{t:late}", 1, 0).allowed);
    for (int k = 0; k < 30; k++) {
        snprintf(key, sizeof(key), "{t:%d}", k);
        ck_assert(tu_check(be, &ph, key, 1, 0).allowed);
    }
    ck_assert_uint_eq(backend_memory_entries(), 32);
    ck_assert(tu_check(be, &ph, "{t:new}", 1, 0).allowed);
    ck_assert_uint_eq(backend_memory_entries(), 32);
    ck_assert(!tu_check(be, &pl, "{t:late}", 1, 0).allowed);
    ck_assert(!tu_check(be, &ph, "{t:new}", 1, 0).allowed);
    ck_assert(tu_check(be, &ps, "{t:soon}", 1, 0).allowed);   /* evicted */
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_expired_entries_are_reclaimed)
{
    struct rl_limit brief[] = { mklimit(RL_ALGO_GCRA, 1, 1, 1) };
    struct rl_limit hour[] = { mklimit(RL_ALGO_FIXED_WINDOW, 1000000, 3600000, 0) };
    struct rl_policy pb = mkpolicy(brief, 1), ph = mkpolicy(hour, 1);
    struct rl_backend *be = tu_memory();
    struct timespec ts = { 0, 5000000 };
    char key[32];

    for (int k = 0; k < 500; k++) {
        snprintf(key, sizeof(key), "{t:%d}", k);
        ck_assert(tu_check(be, &pb, key, 1, 0).allowed);
    }
    /* every one of them is worthless 1 ms after its check; no lookup will
     * ever find them again, so only the sweep can reclaim them */
    while (nanosleep(&ts, &ts) != 0)
        ;
    for (int k = 0; k < 4000; k++)
        ck_assert(tu_check(be, &ph, "{t:busy}", 1, 0).allowed);
    ck_assert_uint_eq(backend_memory_entries(), 1);
    be->ops->destroy(be);
}
END_TEST


/* An admin operation on the memory backend, answered at once. */
static struct rl_check_res
mem_admin(struct rl_backend *be, const struct rl_policy *pol, const char *key,
          unsigned flags, int64_t cost, int limit_index, int64_t block_ms)
{
    struct rl_check_req req = { .policy = pol, .key = key,
                                .key_len = strlen(key), .cost = cost,
                                .flags = flags, .limit_index = limit_index,
                                .block_ms = block_ms };
    struct tu_answer a = {0};

    be->ops->check(be, &req, tu_on_answer, &a);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(a.res.status, RL_BACKEND_OK);
    return a.res;
}

START_TEST(mem_block_denies_consumes_nothing_and_lifts)
{
    struct rl_limit l[] = {
        mklimit(RL_ALGO_FIXED_WINDOW, 5, 3600000, 0),
        mklimit(RL_ALGO_TOKEN_BUCKET, 5, 3600000, 5),
    };
    struct rl_policy p = mkpolicy(l, 2);
    struct rl_backend *be = tu_memory();
    struct rl_check_res r;

    ck_assert(tu_check(be, &p, "{t:b}", 1, 0).allowed);
    r = mem_admin(be, &p, "{t:b}", RL_CHECK_BLOCK, 0, -1, 600000);
    /* answered as a check of cost 0 right after it */
    ck_assert(!r.allowed);
    ck_assert_int_gt(r.blocked_ms, 600000 - 60000);
    ck_assert_int_le(r.blocked_ms, 600000);
    ck_assert_int_eq(r.limits[0].remaining, 4);
    for (int k = 0; k < 10; k++) {
        r = tu_check(be, &p, "{t:b}", 1, 0);
        ck_assert(!r.allowed);
        ck_assert_int_gt(r.blocked_ms, 0);
        for (size_t i = 0; i < 2; i++) {
            ck_assert(!r.limits[i].allowed);
            ck_assert_int_ge(r.limits[i].retry_after_ms, r.blocked_ms);
            ck_assert_int_eq(r.limits[i].remaining, 4);
        }
    }
    /* a cost that never fits stays "never" */
    ck_assert_int_eq(tu_check(be, &p, "{t:b}", 6, 0).limits[0].retry_after_ms, -1);
    /* another identity is not blocked */
    ck_assert(tu_check(be, &p, "{t:other}", 1, 0).allowed);
    /* a penalty (forced) still lands while blocked */
    {
        struct rl_check_req req = { .policy = &p, .key = "{t:b}", .key_len = 5,
                                    .cost = 2, .flags = RL_CHECK_FORCE };
        struct tu_answer a = {0};

        be->ops->check(be, &req, tu_on_answer, &a);
        ck_assert(!a.res.allowed && a.res.blocked_ms > 0);
        ck_assert_int_eq(a.res.limits[0].remaining, 2);
    }
    r = mem_admin(be, &p, "{t:b}", RL_CHECK_BLOCK, 0, -1, 0);
    ck_assert(r.allowed);
    ck_assert_int_eq(r.blocked_ms, 0);
    ck_assert_int_eq(r.limits[0].remaining, 2);
    r = tu_check(be, &p, "{t:b}", 1, 0);
    ck_assert(r.allowed && r.blocked_ms == 0);
    ck_assert_int_eq(r.limits[0].remaining, 1);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_block_ends_on_time)
{
    struct rl_limit l[] = { mklimit(RL_ALGO_GCRA, 5, 3600000, 5) };
    struct rl_policy p = mkpolicy(l, 1);
    struct rl_backend *be = tu_memory();
    struct rl_check_res r = mem_admin(be, &p, "{t:e}", RL_CHECK_BLOCK, 0, -1, 30);
    struct timespec ts = { 0, 1000000 };
    int polls = 0;

    ck_assert(!r.allowed && r.blocked_ms > 0 && r.blocked_ms <= 30);
    /* blocked until the block's end, then a check counts again */
    while (!(r = tu_check(be, &p, "{t:e}", 1, 0)).allowed) {
        ck_assert_int_gt(r.blocked_ms, 0);
        ck_assert_int_le(r.blocked_ms, 30);
        ck_assert_int_lt(++polls, 100000);
        nanosleep(&ts, NULL);
    }
    ck_assert_int_eq(r.limits[0].remaining, 4);
    be->ops->destroy(be);
}
END_TEST

START_TEST(mem_reset_one_or_all_and_give_back)
{
    struct rl_limit l[] = {
        mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 5, 3600000, 0),
        mklimit(RL_ALGO_SLIDING_WINDOW_COUNTER, 5, 3600000, 0),
    };
    struct rl_policy p = mkpolicy(l, 2);
    struct rl_backend *be = tu_memory();
    struct rl_check_res r;

    for (int k = 0; k < 5; k++)
        ck_assert(tu_check(be, &p, "{t:r}", 1, 0).allowed);
    ck_assert(!tu_check(be, &p, "{t:r}", 1, 0).allowed);
    /* reset the log only: the counter still denies */
    r = mem_admin(be, &p, "{t:r}", RL_CHECK_RESET, 0, 0, 0);
    ck_assert_int_eq(r.limits[0].remaining, 5);
    ck_assert_int_eq(r.limits[1].remaining, 0);
    ck_assert(!tu_check(be, &p, "{t:r}", 1, 0).allowed);
    /* give 2 back: the counter has room for 2 again, the log (empty) too */
    r = mem_admin(be, &p, "{t:r}", 0, -2, -1, 0);
    ck_assert(r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 5);
    ck_assert_int_eq(r.limits[1].remaining, 2);
    ck_assert(tu_check(be, &p, "{t:r}", 2, 0).allowed);
    ck_assert(!tu_check(be, &p, "{t:r}", 1, 0).allowed);
    /* block, then reset everything: counts and block gone */
    mem_admin(be, &p, "{t:r}", RL_CHECK_BLOCK, 0, -1, 600000);
    r = mem_admin(be, &p, "{t:r}", RL_CHECK_RESET, 0, -1, 0);
    ck_assert(r.allowed && r.blocked_ms == 0);
    ck_assert_int_eq(r.limits[0].remaining, 5);
    ck_assert_int_eq(r.limits[1].remaining, 5);
    ck_assert_uint_eq(backend_memory_entries(), 0);
    /* a limit the policy does not have */
    {
        struct rl_check_req req = { .policy = &p, .key = "{t:r}", .key_len = 5,
                                    .flags = RL_CHECK_RESET, .limit_index = 2 };
        struct tu_answer a = {0};

        be->ops->check(be, &req, tu_on_answer, &a);
        ck_assert_int_eq(a.res.status, RL_BACKEND_ERROR);
    }
    be->ops->destroy(be);
}
END_TEST

struct worker_arg {
    const struct rl_policy *p;
    int allowed;
};

static void *
worker(void *arg)
{
    struct worker_arg *w = arg;
    struct rl_backend *be = NULL;
    char *cause = NULL;

    if (rl_backend_memory_ops.create(&be, NULL, NULL, &cause) != RL_OK)
        return NULL;
    for (int k = 0; k < 5000; k++) {
        struct rl_check_req req = { .policy = w->p, .key = "{t:c}",
                                    .key_len = 5, .cost = 1 };
        struct tu_answer a = {0};
        be->ops->check(be, &req, tu_on_answer, &a);
        w->allowed += a.calls == 1 && a.res.status == RL_BACKEND_OK && a.res.allowed;
    }
    be->ops->destroy(be);
    return NULL;
}

START_TEST(mem_threads_never_overshoot)
{
    /* the same two keys locked from both limit orders */
    struct rl_limit ab[] = {
        mklimit(RL_ALGO_SLIDING_WINDOW_LOG, 10000, 3600000, 0),
        mklimit(RL_ALGO_FIXED_WINDOW, 1000000, 3600000, 0),
    };
    struct rl_limit ba[] = { ab[1], ab[0] };
    struct rl_policy p1 = mkpolicy(ab, 2), p2 = mkpolicy(ba, 2);
    struct rl_backend *keep = tu_memory();
    struct worker_arg w[4] = { {&p1, 0}, {&p2, 0}, {&p1, 0}, {&p2, 0} };
    pthread_t th[4];
    int total = 0;

    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += w[i].allowed;
    }
    ck_assert_int_eq(total, 10000);
    ck_assert(!tu_check(keep, &p1, "{t:c}", 1, 0).allowed);
    ck_assert_int_eq(tu_check(keep, &p2, "{t:c}", 0, 0).limits[0].remaining,
                     1000000 - 10000);
    keep->ops->destroy(keep);
}
END_TEST

/* Tests may share a process (CK_FORK=no): each starts from the default cap. */
static void
default_cap(void)
{
    backend_memory_set_max_entries(1000000);
}

static Suite *
algo_suite(void)
{
    Suite *s = suite_create("algo");
    TCase *tc;

    tc = tcase_create("boundaries");
    tcase_add_test(tc, fw_edge_admits_twice_the_limit);
    tcase_add_test(tc, swl_exact_no_edge_burst);
    tcase_add_test(tc, swl_counts_cost_units);
    tcase_add_test(tc, swl_many_in_one_microsecond_all_count);
    tcase_add_test(tc, swl_ring_wraps_and_stays_small);
    tcase_add_test(tc, swc_weights_the_previous_window);
    tcase_add_test(tc, swc_worst_case_is_spread_not_doubled);
    tcase_add_test(tc, swc_big_limit_day_window_is_exact);
    tcase_add_test(tc, tb_burst_then_refill);
    tcase_add_test(tc, tb_fractional_rate_is_exact);
    tcase_add_test(tc, gcra_burst_then_interval);
    tcase_add_test(tc, gcra_fractional_interval_is_exact);
    tcase_add_test(tc, fw_forced_goes_over_the_limit);
    tcase_add_test(tc, swc_forced_goes_over_the_limit);
    tcase_add_test(tc, tb_forced_runs_into_debt_of_one_bucket_at_most);
    tcase_add_test(tc, gcra_forced_pushes_tat_out);
    tcase_add_test(tc, swl_forced_keeps_the_newest_limit_entries);
    tcase_add_test(tc, fw_give_back_floors_at_zero);
    tcase_add_test(tc, swc_give_back_takes_current_then_previous);
    tcase_add_test(tc, tb_give_back_fills_up_to_burst);
    tcase_add_test(tc, gcra_give_back_moves_tat_back_not_before_now);
    tcase_add_test(tc, swl_give_back_takes_the_newest_units);
    tcase_add_test(tc, give_back_on_nothing_changes_nothing);
    tcase_add_test(tc, cc_slots_leases_and_releases);
    tcase_add_test(tc, cc_penalty_and_reward);
    suite_add_tcase(s, tc);

    tc = tcase_create("promises");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, every_algorithm_keeps_its_promises, 0, RL_ALGO_COUNT);
    tcase_add_test(tc, token_bucket_and_gcra_decide_alike);
    suite_add_tcase(s, tc);

    tc = tcase_create("memory_backend");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, default_cap, NULL);
    tcase_add_test(tc, mem_decides_and_answers_once);
    tcase_add_test(tc, mem_cost_zero_consumes_nothing);
    tcase_add_test(tc, mem_denied_check_consumes_nothing_anywhere);
    tcase_add_test(tc, mem_store_is_shared_and_refcounted);
    tcase_add_test(tc, mem_cap_holds_under_many_keys);
    tcase_add_test(tc, mem_evicts_the_entry_closest_to_expiry);
    tcase_add_test(tc, mem_expired_entries_are_reclaimed);
    tcase_add_test(tc, mem_threads_never_overshoot);
    tcase_add_test(tc, mem_block_denies_consumes_nothing_and_lifts);
    tcase_add_test(tc, mem_block_ends_on_time);
    tcase_add_test(tc, mem_reset_one_or_all_and_give_back);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(algo_suite(), CK_FORK_GETENV);
}
