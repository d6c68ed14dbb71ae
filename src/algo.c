/*
 * algo.c — the algorithm table: names, tags and the C implementations, one
 * file per algorithm (algo_*.c); and the two hybrid estimates they share.
 */
#include <stdlib.h>
#include <string.h>

#include "algo.h"

static const struct rl_algo_def *const algos[RL_ALGO_COUNT] = {
    [RL_ALGO_FIXED_WINDOW] = &rl_algo_fixed_window,
    [RL_ALGO_SLIDING_WINDOW_LOG] = &rl_algo_sliding_window_log,
    [RL_ALGO_SLIDING_WINDOW_COUNTER] = &rl_algo_sliding_window_counter,
    [RL_ALGO_TOKEN_BUCKET] = &rl_algo_token_bucket,
    [RL_ALGO_GCRA] = &rl_algo_gcra,
    [RL_ALGO_CONCURRENCY] = &rl_algo_concurrency,
};

const struct rl_algo_def *
algo_def(enum rl_algo algo)
{
    return algos[algo];
}

const char *
algo_script_tag(const struct rl_limit *l)
{
    const struct rl_algo_def *d = algos[l->algo];

    return l->align == RL_ALIGN_EPOCH && d->aligned_tag != NULL ? d->aligned_tag : d->tag;
}

void
algo_state_release(struct rl_algo_state *st)
{
    free(st->ring);
    memset(st, 0, sizeof(*st));
}

/* ---- hybrid estimates ------------------------------------------------------ */

/* ceil(a * b / c), a >= 0 */
static int64_t
muldiv_ceil(int64_t a, int64_t b, int64_t c)
{
    int64_t rem, q = algo_muldiv(a, b, c, &rem);

    return q + (rem != 0);
}

/* What is left now out of `cap`, and until when: a limit past its reset is
 * whole again.  Not allowed yet, no retry time yet. */
static void
seen_now(const struct rl_algo_seen *seen, int64_t cap, struct rl_limit_result *res)
{
    res->allowed = 0;
    res->retry_after_ms = 0;
    if (seen->elapsed_ms >= seen->reset_ms) {
        res->remaining = cap - seen->used;
        res->reset_ms = 0;
    } else {
        res->remaining = seen->remaining - seen->used;
        res->reset_ms = seen->reset_ms - seen->elapsed_ms;
    }
}

void
algo_estimate_window(const struct rl_limit *lim, const struct rl_algo_seen *seen, int64_t cost,
                     struct rl_limit_result *res)
{
    seen_now(seen, lim->limit, res);
    if (cost > lim->limit)
        res->retry_after_ms = -1;
    else if (cost <= res->remaining)
        res->allowed = 1;
    else
        res->retry_after_ms = res->reset_ms > 0 ? res->reset_ms : lim->window_ms;
}

void
algo_estimate_take_window(const struct rl_limit *lim, int64_t cost,
                          struct rl_limit_result *res)
{
    res->remaining -= cost;
    /* a window starts with the first cost taken in it */
    if (res->reset_ms == 0)
        res->reset_ms = lim->window_ms;
}

void
algo_estimate_refill(const struct rl_limit *lim, const struct rl_algo_seen *seen, int64_t cost,
                     struct rl_limit_result *res)
{
    seen_now(seen, lim->burst, res);
    if (cost > lim->burst) {
        res->retry_after_ms = -1;
    } else if (cost <= res->remaining) {
        res->allowed = 1;
    } else {
        /* the missing units at the refill rate */
        int64_t ms = muldiv_ceil(cost - res->remaining, lim->window_ms, lim->limit);
        res->retry_after_ms = ms > 0 ? ms : 1;
    }
}

void
algo_estimate_take_refill(const struct rl_limit *lim, int64_t cost,
                          struct rl_limit_result *res)
{
    int64_t ms;

    res->remaining -= cost;
    /* until what is now used is back */
    ms = muldiv_ceil(lim->burst - res->remaining, lim->window_ms, lim->limit);
    if (ms > res->reset_ms)
        res->reset_ms = ms;
}
