/*
 * algo.c — the algorithm table: names, tags and the C implementations, one
 * file per algorithm (algo_*.c).
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
};

const struct rl_algo_def *
algo_def(enum rl_algo algo)
{
    return algos[algo];
}

int
algo_by_name(const char *name, enum rl_algo *out)
{
    for (size_t i = 0; i < RL_ALGO_COUNT; i++) {
        if (algos[i] != NULL && strcmp(algos[i]->name, name) == 0) {
            *out = (enum rl_algo)i;
            return RL_OK;
        }
    }
    return RL_ERR;
}

const char *
algo_names(void)
{
    return "fixed_window, sliding_window_log, sliding_window_counter, "
           "token_bucket, gcra";
}

void
algo_state_release(struct rl_algo_state *st)
{
    free(st->ring);
    memset(st, 0, sizeof(*st));
}
