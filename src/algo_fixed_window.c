/*
 * algo_fixed_window.c — a counter whose window lasts `window` and opens at
 * the first counted request, or, aligned to the epoch (align: epoch), at the
 * multiple of `window` that holds it: the window every instance and every
 * key shares, as envoyproxy/ratelimit counts.  Mirrors
 * scripts/lua/fixed_window.lua.
 *
 * State (st->fw): the count and when the window started.  Only opening a
 * window knows the alignment: an open window is read the same either way, so
 * a limit's state carries over when its alignment changes.  The window's
 * edge admits up to 2 x limit in a short span: documented, not a bug.
 */
#include "algo.h"

static int64_t
fw_count(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    if (st->fw.count > 0 && now < st->fw.start_us + lim->window_ms * 1000)
        return st->fw.count;
    return 0;
}

static void
fw_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
        struct rl_limit_result *res)
{
    int64_t count = fw_count(lim, st, now);
    int64_t left = count > 0 ? st->fw.start_us + lim->window_ms * 1000 - now : 0;

    algo_set_numbers(res, lim->limit - count, left);
    if (cost > lim->limit) {
        res->allowed = 0;
        res->retry_after_ms = -1;
    } else if (count + cost <= lim->limit) {
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
    if (fw_count(lim, st, now) == 0) {
        st->fw.count = 0;
        st->fw.start_us = lim->align == RL_ALIGN_EPOCH ? algo_epoch_window_start(lim, now)
                                                       : now;
    }
    st->fw.count += cost;
    algo_set_numbers(res, lim->limit - st->fw.count,
                     st->fw.start_us + lim->window_ms * 1000 - now);
}

static void
fw_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    int64_t count = fw_count(lim, st, now);

    /* a closed window is left as it is, as the script leaves its key: a
     * clock that steps back sees it again either way */
    if (count == 0)
        return;
    if (count > units) {
        st->fw.count = count - units;
    } else {
        st->fw.count = 0;
        st->fw.start_us = 0;
    }
}

static int64_t
fw_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    return fw_count(lim, st, now) > 0 ? st->fw.start_us + lim->window_ms * 1000 - now : 0;
}

const struct rl_algo_def rl_algo_fixed_window = {
    .name = "fixed_window",
    .tag = "fw",
    .aligned_tag = "fwa",
    .uses_burst = 0,
    .peek = fw_peek,
    .commit = fw_commit,
    .give = fw_give,
    .ttl_us = fw_ttl,
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
};
