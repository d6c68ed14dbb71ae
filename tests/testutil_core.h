/*
 * testutil_core.h — what the unit tests of hybrid.c and check.c share: a
 * config loaded from JSON text by the real loader, a clock the test moves,
 * and the real memory backend asked synchronously.
 */
#ifndef RL_TESTUTIL_CORE_H
#define RL_TESTUTIL_CORE_H

#include "backend.h"
#include "config.h"

#define TU_MS 1000LL            /* microseconds */
#define TU_S (1000 * TU_MS)

/* The test's clock: starts far from 0, moves only when the test moves it. */
extern int64_t tu_now_us;
int64_t tu_clock(void);

/* The config the loader makes of `json` (the test fails when it refuses). */
struct rl_config *tu_config(const char *json);

/* What a backend answered, and how often (exactly once is owed). */
struct tu_answer {
    int calls;
    struct rl_check_res res;
};
void tu_on_answer(const struct rl_check_res *res, void *arg);

/* A memory backend (the process's one store), and one check answered by it
 * before the call returns, once, OK and for every limit of the policy. */
struct rl_backend *tu_memory(void);
struct rl_check_res tu_check(struct rl_backend *be, const struct rl_policy *policy,
                             const char *key, int64_t cost, unsigned flags);

#endif
