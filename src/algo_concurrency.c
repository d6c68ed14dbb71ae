/*
 * algo_concurrency.c — in-flight limits: `limit` slots, each held by a lease
 * until it is released or its lease (`window_ms`, configured as `lease`)
 * ends, so a holder that crashes never keeps a slot.  An allowed check of
 * cost > 0 takes one slot whatever its cost; cost 0 only asks.
 * Mirrors scripts/lua/concurrency.lua.
 *
 * State: the ring holds (end, id.hi, id.lo) triples, three int64_t slots
 * per lease (ring_cap and ring_len count leases; ring_head stays 0), sorted
 * by end, oldest first, as the script's sorted set is by score.  peek() only
 * reads: leases that have ended are skipped there and dropped by the next
 * write (a commit, a release, a reward).  An anonymous slot (a penalty) has
 * id 0, which no lease has.
 *
 * The numbers: remaining is the free slots; reset_ms the time until every
 * slot is free if nobody releases (the last lease's end, what the key
 * expires with); a denial's retry_after_ms the time until enough leases end
 * for a slot to be free: an upper bound, as a release may come sooner.
 */
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "util.h"

#define CC_WORDS 3 /* int64_t slots per lease in the ring */

static int64_t
cc_end(const struct rl_algo_state *st, uint32_t i)
{
    return st->ring[CC_WORDS * (size_t)i];
}

/* Index of the first lease that has not ended at now (ring_len: none). */
static uint32_t
cc_first_live(const struct rl_algo_state *st, int64_t now)
{
    uint32_t i = 0;

    while (i < st->ring_len && cc_end(st, i) <= now)
        i++;
    return i;
}

static void
cc_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
        struct rl_limit_result *res)
{
    uint32_t first = cc_first_live(st, now);
    int64_t live = st->ring_len - first, need = cost > 0 ? 1 : 0;

    algo_set_numbers(res, lim->limit - live,
                     live > 0 ? cc_end(st, st->ring_len - 1) - now : 0);
    if (live + need <= lim->limit) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        /* the (live + need - limit)th lease to end frees the slot needed */
        int64_t ms = algo_us_to_ms_ceil(
            cc_end(st, first + (uint32_t)(live + need - lim->limit) - 1) - now);

        res->allowed = 0;
        res->retry_after_ms = ms > 0 ? ms : 1;
    }
}

/* Forget the leases that have ended; a state left empty is all zero. */
static void
cc_drop_ended(struct rl_algo_state *st, int64_t now)
{
    uint32_t first = cc_first_live(st, now);

    if (first == st->ring_len) {
        algo_state_release(st);
        return;
    }
    memmove(st->ring, st->ring + CC_WORDS * (size_t)first,
            CC_WORDS * sizeof(int64_t) * (st->ring_len - first));
    st->ring_len -= first;
}

/* Remove lease i, keeping the order; a state left empty is all zero. */
static void
cc_remove(struct rl_algo_state *st, uint32_t i)
{
    memmove(st->ring + CC_WORDS * (size_t)i, st->ring + CC_WORDS * ((size_t)i + 1),
            CC_WORDS * sizeof(int64_t) * (st->ring_len - i - 1));
    if (--st->ring_len == 0)
        algo_state_release(st);
}

/* Add a lease ending at `end`, after every lease ending no later. */
static void
cc_insert(struct rl_algo_state *st, int64_t end, uint64_t hi, uint64_t lo)
{
    uint32_t i = st->ring_len;
    int64_t *e;

    if (st->ring_len == st->ring_cap) {
        st->ring_cap = st->ring_cap ? 2 * st->ring_cap : 4;
        st->ring = xrealloc(st->ring, CC_WORDS * sizeof(int64_t) * st->ring_cap);
    }
    while (i > 0 && cc_end(st, i - 1) > end)
        i--;
    memmove(st->ring + CC_WORDS * ((size_t)i + 1), st->ring + CC_WORDS * (size_t)i,
            CC_WORDS * sizeof(int64_t) * (st->ring_len - i));
    e = st->ring + CC_WORDS * (size_t)i;
    e[0] = end;
    e[1] = (int64_t)hi;
    e[2] = (int64_t)lo;
    st->ring_len++;
}

/* Take a slot for lease (hi, lo), or an anonymous one (0, 0) when a slot is
 * free; the numbers after it. */
static void
cc_take(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, uint64_t hi,
        uint64_t lo, struct rl_limit_result *res)
{
    int64_t newest, end = now + lim->window_ms * 1000;

    cc_drop_ended(st, now);
    newest = st->ring_len > 0 ? cc_end(st, st->ring_len - 1) : 0;
    if ((hi | lo) != 0 || (int64_t)st->ring_len < lim->limit) {
        cc_insert(st, end, hi, lo);
        if (end > newest)
            newest = end;
    }
    algo_set_numbers(res, lim->limit - (int64_t)st->ring_len,
                     st->ring_len > 0 ? newest - now : 0);
}

static void
cc_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
          struct rl_limit_result *res)
{
    cc_take(lim, st, now, 0, 0, res);
}

static void
cc_hold(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
        const struct rl_lease *id, struct rl_limit_result *res)
{
    cc_take(lim, st, now, id->hi, id->lo, res);
}

/* As the script: the ended leases go first, so a lease found is live. */
static bool
cc_release(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now,
           const struct rl_lease *id)
{
    cc_drop_ended(st, now);
    for (uint32_t i = 0; i < st->ring_len; i++) {
        const int64_t *e = st->ring + CC_WORDS * (size_t)i;

        if ((uint64_t)e[1] == id->hi && (uint64_t)e[2] == id->lo && (id->hi | id->lo) != 0) {
            cc_remove(st, i);
            return true;
        }
    }
    return false;
}

/* A reward: the `units` leases that end last give their slots back. */
static void
cc_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    cc_drop_ended(st, now);
    if ((int64_t)st->ring_len <= units)
        algo_state_release(st);
    else
        st->ring_len -= (uint32_t)units;
}

static int64_t
cc_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    int64_t left = st->ring_len > 0 ? cc_end(st, st->ring_len - 1) - now : 0;

    return left > 0 ? left : 0;
}

const struct rl_algo_def rl_algo_concurrency = {
    .name = "concurrency",
    .tag = "cc",
    .uses_burst = 0,
    .peek = cc_peek,
    .commit = cc_commit,
    .give = cc_give,
    .ttl_us = cc_ttl,
    /* never used: a hybrid policy cannot hold leases (policy.c) */
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
    .hold = cc_hold,
    .release = cc_release,
};
