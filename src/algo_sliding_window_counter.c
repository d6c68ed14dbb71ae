/*
 * algo_sliding_window_counter.c — two counters instead of a log: the current
 * epoch-aligned window (index floor(now / W)) and the previous one, which is
 * weighted by the part of it still inside the sliding window:
 *     estimate = prev * (W - elapsed) / W + curr.
 * O(1) memory and close to the exact log when traffic is smooth; it assumes
 * the previous window's checks were spread evenly, hence "estimate".
 * Mirrors scripts/lua/sliding_window_counter.lua.
 *
 * With a calendar period the windows are the periods, of their real lengths:
 * the sliding window is as long as the current period (Lc), so the part of
 * the previous one (Lp) inside it is Lc - elapsed, at most Lp, and
 *     estimate = prev * min(Lc - elapsed, Lp) / Lp + curr,
 * which is the formula above when both are W.
 *
 * State (st->swc): the window index (a period's: its start in us), its
 * count, and the count of the window before it.  The weighted term is rounded up, which decides
 * exactly like the real-valued comparison because every other term is an
 * integer.  limit x window in microseconds overflows int64 (1e9 x 8.64e10),
 * so products are 128-bit here and digit-wise in the script; both compute the
 * same floor.
 */
#include "algo.h"

/* The two counts as they stand at now, and the windows around it. */
struct swc_view {
    int64_t id;      /* what a[] holds for the current window */
    int64_t p, s, e; /* us: the previous window's start, the current one's, its end */
    int64_t e2;      /* us: the end of the next window */
    int64_t curr, prev;
    int64_t room;  /* limit - curr - ceil(weighted prev); may be < 0 */
    int64_t reset; /* us until the estimate is 0 */
};

/* The windows around now and the counts the state holds for them. */
static void
swc_frame(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
          struct swc_view *v)
{
    v->curr = v->prev = 0;
    if (algo_has_period(lim)) {
        int64_t b[RL_PERIOD_BOUNDS];

        algo_period_bounds(lim, now, b);
        v->p = b[1], v->s = b[2], v->e = b[3], v->e2 = b[4];
        v->id = v->s;
        /* a later period's counts (a clock that stepped back) count now */
        if (st->swc.window >= v->s) {
            v->curr = st->swc.count;
            v->prev = st->swc.prev_count;
        } else if (st->swc.window == v->p) {
            v->prev = st->swc.count;
        }
        return;
    }
    int64_t W = lim->window_ms * 1000;

    v->id = now / W;
    /* a clock that stepped back sees the stored window from its start */
    if (st->swc.window > v->id)
        v->id = st->swc.window;
    v->p = (v->id - 1) * W, v->s = v->id * W, v->e = v->s + W, v->e2 = v->e + W;
    if (st->swc.window == v->id) {
        v->curr = st->swc.count;
        v->prev = st->swc.prev_count;
    } else if (st->swc.window == v->id - 1) {
        v->prev = st->swc.count;
    }
}

static void
swc_view(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
         struct swc_view *v)
{
    int64_t lp, part, weighted, rem;

    swc_frame(lim, st, now, v);
    lp = v->s - v->p;
    part = v->e - now < lp ? v->e - now : lp;
    weighted = algo_muldiv(v->prev, part, lp, &rem);
    if (rem > 0)
        weighted++;
    v->room = lim->limit - v->curr - weighted;
    if (v->curr > 0)
        v->reset = v->e2 - now;
    else if (v->prev > 0)
        v->reset = v->e - now;
    else
        v->reset = 0;
}

static void
swc_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
         struct rl_limit_result *res)
{
    struct swc_view v;

    swc_view(lim, st, now, &v);
    algo_set_numbers(res, v.room, v.reset);
    if (cost > lim->limit) {
        res->allowed = 0;
        res->retry_after_ms = -1;
    } else if (cost <= v.room) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        /*
         * The first time t at which the estimate leaves room, the part
         * inside being e - t:  x * (e - t) / L <= R  <=>  t >= e - floor(R * L / x).
         */
        int64_t R = lim->limit - v.curr - cost, t;

        if (R >= 0) { /* in this window, as prev fades (prev > R here) */
            t = v.e - algo_muldiv(R, v.s - v.p, v.prev, NULL);
        } else { /* in the next one, as curr fades; not before it starts */
            t = v.e2 - algo_muldiv(lim->limit - cost, v.e - v.s, v.curr, NULL);
            if (t < v.e)
                t = v.e;
        }
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(t - now);
    }
}

static void
swc_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
           struct rl_limit_result *res)
{
    struct swc_view v;

    swc_view(lim, st, now, &v);
    st->swc.window = v.id;
    st->swc.count = v.curr + cost < ALGO_UNITS_MAX ? v.curr + cost : ALGO_UNITS_MAX;
    st->swc.prev_count = v.prev;
    algo_set_numbers(res, v.room - (st->swc.count - v.curr), v.e2 - now);
}

/* From the current window's count first, then from the previous one's. */
static void
swc_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    struct swc_view v;
    int64_t curr, prev;

    swc_view(lim, st, now, &v);
    curr = v.curr - units;
    prev = v.prev;
    if (curr < 0) {
        prev = prev + curr > 0 ? prev + curr : 0;
        curr = 0;
    }
    st->swc.window = curr > 0 || prev > 0 ? v.id : 0;
    st->swc.count = curr;
    st->swc.prev_count = prev;
}

static int64_t
swc_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    struct swc_view v;

    swc_view(lim, st, now, &v);
    return v.reset;
}

const struct rl_algo_def rl_algo_sliding_window_counter = {
    .name = "sliding_window_counter",
    .tag = "swc",
    .period_tag = "swcp",
    .uses_burst = 0,
    .peek = swc_peek,
    .commit = swc_commit,
    .give = swc_give,
    .ttl_us = swc_ttl,
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
    .charge = swc_commit, /* the previous window weighs a charge as any count */
};
