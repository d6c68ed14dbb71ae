/*
 * algo_sliding_window_counter.c — two counters instead of a log: the current
 * epoch-aligned window (index floor(now / W)) and the previous one, which is
 * weighted by the part of it still inside the sliding window:
 *     estimate = prev * (W - elapsed) / W + curr.
 * O(1) memory and close to the exact log when traffic is smooth; it assumes
 * the previous window's checks were spread evenly, hence "estimate".
 * Mirrors scripts/lua/sliding_window_counter.lua.
 *
 * State (st->swc): the window index, its count, and the count of the window
 * before it.
 * The weighted term is rounded up, which decides exactly like the real-valued
 * comparison because every other term is an integer.  limit x window in
 * microseconds overflows int64 (1e9 x 8.64e10), so products are 128-bit here
 * and digit-wise in the script; both compute the same floor.
 */
#include "algo.h"

/* The two counts as they stand at now. */
struct swc_view {
    int64_t cur; /* window index, never before the stored one */
    int64_t curr, prev;
    int64_t room;  /* limit - curr - ceil(weighted prev); may be < 0 */
    int64_t reset; /* us until the estimate is 0 */
};

static void
swc_view(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
         struct swc_view *v)
{
    int64_t W = lim->window_ms * 1000;
    int64_t e = now % W, weighted, rem;

    v->cur = now / W;
    v->curr = v->prev = 0;
    if (st->swc.window > v->cur) {
        /* a clock that stepped back sees the stored window from its start */
        v->cur = st->swc.window;
        e = 0;
    }
    if (st->swc.window == v->cur) {
        v->curr = st->swc.count;
        v->prev = st->swc.prev_count;
    } else if (st->swc.window == v->cur - 1) {
        v->prev = st->swc.count;
    }
    weighted = algo_muldiv(v->prev, W - e, W, &rem);
    if (rem > 0)
        weighted++;
    v->room = lim->limit - v->curr - weighted;
    if (v->curr > 0)
        v->reset = (v->cur + 2) * W - now;
    else if (v->prev > 0)
        v->reset = (v->cur + 1) * W - now;
    else
        v->reset = 0;
}

static void
swc_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
         struct rl_limit_result *res)
{
    int64_t W = lim->window_ms * 1000;
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
         * The first elapsed time e2 at which the estimate leaves room:
         * x * (W - e2) / W <= R  <=>  e2 >= W - floor(R * W / x).
         */
        int64_t R = lim->limit - v.curr - cost, t;

        if (R >= 0) /* in this window, as prev fades (prev > R here) */
            t = v.cur * W + W - algo_muldiv(R, W, v.prev, NULL) - now;
        else /* in the next one, as curr fades */
            t = (v.cur + 1) * W + W - algo_muldiv(lim->limit - cost, W, v.curr, NULL) - now;
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(t);
    }
}

static void
swc_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
           struct rl_limit_result *res)
{
    int64_t W = lim->window_ms * 1000;
    struct swc_view v;

    swc_view(lim, st, now, &v);
    st->swc.window = v.cur;
    st->swc.count = v.curr + cost;
    st->swc.prev_count = v.prev;
    algo_set_numbers(res, v.room - cost, (v.cur + 2) * W - now);
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
    st->swc.window = curr > 0 || prev > 0 ? v.cur : 0;
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
    .uses_burst = 0,
    .peek = swc_peek,
    .commit = swc_commit,
    .give = swc_give,
    .ttl_us = swc_ttl,
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
};
