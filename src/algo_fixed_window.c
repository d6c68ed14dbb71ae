/*
 * algo_fixed_window.c — a counter whose window lasts `window` and opens at
 * the first counted request, or, aligned to the epoch (align: epoch), at the
 * multiple of `window` that holds it: the window every instance and every
 * key shares, as envoyproxy/ratelimit counts; or whose window is the
 * calendar period that holds the check (period: the generalisation of the
 * epoch's alignment to days, weeks, months and years of a time zone).
 * Mirrors scripts/lua/fixed_window.lua.
 *
 * State (st->fw): the count and when the window started.  Only opening a window knows the
 * alignment: an open window is read the same either way, so a limit's state
 * carries over when its alignment changes.  A period's window is the one
 * whose start is stored; a start later than the period's (a clock that
 * stepped back across a boundary) counts in the period as it stands.  The
 * window's edge admits up to 2 x limit in a short span: documented, not a
 * bug.
 */
#include "algo.h"

/* The window as it stands at now: its count (0 when it closed) and, when
 * open, when it ends and where a new count would start it. */
struct fw_view {
    int64_t count;
    int64_t end;   /* us; meaningful when count > 0 or for a period */
    int64_t start; /* where a commit puts the window */
};

static void
fw_view(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
        struct fw_view *v)
{
    if (algo_has_period(lim)) {
        int64_t b[RL_PERIOD_BOUNDS];

        algo_period_bounds(lim, now, b);
        v->count = st->fw.count > 0 && st->fw.start_us >= b[2] ? st->fw.count : 0;
        v->end = b[3];
        v->start = b[2];
        return;
    }
    v->count = st->fw.count > 0 && now < st->fw.start_us + lim->window_ms * 1000 ? st->fw.count
                                                                                 : 0;
    v->end = st->fw.start_us + lim->window_ms * 1000;
    if (v->count > 0)
        v->start = st->fw.start_us;
    else
        v->start = lim->align == RL_ALIGN_EPOCH ? algo_epoch_window_start(lim, now) : now;
}

static void
fw_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
        struct rl_limit_result *res)
{
    struct fw_view v;
    int64_t left;

    fw_view(lim, st, now, &v);
    left = v.count > 0 ? v.end - now : 0;
    algo_set_numbers(res, lim->limit - v.count, left);
    if (cost > lim->limit) {
        res->allowed = 0;
        res->retry_after_ms = -1;
    } else if (v.count + cost <= lim->limit) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(left);
    }
}

static void
fw_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
          struct rl_limit_result *res)
{
    struct fw_view v;

    fw_view(lim, st, now, &v);
    st->fw.count = v.count + cost < ALGO_UNITS_MAX ? v.count + cost : ALGO_UNITS_MAX;
    st->fw.start_us = v.start;
    if (!algo_has_period(lim))
        v.end = st->fw.start_us + lim->window_ms * 1000;
    algo_set_numbers(res, lim->limit - st->fw.count, v.end - now);
}

static void
fw_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    struct fw_view v;

    fw_view(lim, st, now, &v);
    /* a closed window is left as it is, as the script leaves its key: a
     * clock that steps back sees it again either way */
    if (v.count == 0)
        return;
    if (v.count > units) {
        st->fw.count = v.count - units;
        if (algo_has_period(lim))
            st->fw.start_us = v.start; /* every write puts the period's start */
    } else {
        st->fw.count = 0;
        st->fw.start_us = 0;
    }
}

static int64_t
fw_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    struct fw_view v;

    fw_view(lim, st, now, &v);
    return v.count > 0 ? v.end - now : 0;
}

const struct rl_algo_def rl_algo_fixed_window = {
    .name = "fixed_window",
    .tag = "fw",
    .aligned_tag = "fwa",
    .period_tag = "fwp",
    .uses_burst = 0,
    .peek = fw_peek,
    .commit = fw_commit,
    .give = fw_give,
    .ttl_us = fw_ttl,
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
    .charge = fw_commit, /* a window's count ends with it, whatever it holds */
};
