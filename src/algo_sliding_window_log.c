/*
 * algo_sliding_window_log.c — the exact log: every allowed check is kept with
 * its time and cost until it leaves the window, so no edge of any window can
 * admit more than `limit` units.  The price is memory: O(limit) per key.
 * Mirrors scripts/lua/sliding_window_log.lua.
 *
 * State (st->swl): the units in the ring; the ring holds (time, cost) pairs,
 * oldest first, two int64_t slots per entry (ring_cap/head/len count
 * entries).
 * peek() only reads, so entries that have left the window are skipped there
 * and dropped by the next commit().  Times in the ring never decrease: a
 * clock that stepped back (possible with Redis TIME) logs at the newest time,
 * exactly as the script does, so both keep index order = time order.
 *
 * Memory stays bounded by `limit` entries.  An allowed commit cannot pass it
 * (every entry holds at least one unit), but a forced one can (a hybrid sync
 * reporting counts admitted elsewhere): it keeps only the newest `limit`
 * entries, like the script's ZREMRANGEBYRANK.  The units of the entries it
 * forgets stop counting early; that is the price of the bound, paid only
 * when a key is already over its limit.
 *
 * A commit drops at most SWL_DROP_MAX entries that have left the window,
 * as the script must (one call dropping a million members stalled Redis):
 * the same entries stay behind here, so that both count the same ones
 * should the clock step back.  The trim to `limit` waits until none is left.
 */
#include <stdlib.h>

#include "algo.h"
#include "util.h"

/* Expired entries one commit drops at most (sliding_window_log.lua). */
#define SWL_DROP_MAX 1000

static int64_t
swl_ts(const struct rl_algo_state *st, uint32_t i)
{
    return st->ring[2 * (size_t)((st->ring_head + i) % st->ring_cap)];
}

static int64_t
swl_cost(const struct rl_algo_state *st, uint32_t i)
{
    return st->ring[2 * (size_t)((st->ring_head + i) % st->ring_cap) + 1];
}

/* The entries still inside the window (now - W, now]. */
struct swl_view {
    uint32_t first; /* index of the oldest entry that still counts */
    int64_t n;      /* units that still count */
    int64_t newest; /* time of the newest entry, when n > 0 */
};

static void
swl_view(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
         struct swl_view *v)
{
    int64_t cutoff = now - lim->window_ms * 1000;
    int64_t gone = 0;
    uint32_t i = 0;

    while (i < st->ring_len && swl_ts(st, i) <= cutoff)
        gone += swl_cost(st, i++);
    v->first = i;
    v->n = st->swl.units - gone;
    v->newest = i < st->ring_len ? swl_ts(st, st->ring_len - 1) : 0;
}

static void
swl_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
         struct rl_limit_result *res)
{
    int64_t W = lim->window_ms * 1000;
    struct swl_view v;

    swl_view(lim, st, now, &v);
    algo_set_numbers(res, lim->limit - v.n, v.n > 0 ? v.newest + W - now : 0);
    if (cost > lim->limit) {
        res->allowed = 0;
        res->retry_after_ms = -1;
    } else if (v.n + cost <= lim->limit) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        /* The oldest entries must leave until `need` units have gone. */
        int64_t need = v.n + cost - lim->limit, freed = 0;
        uint32_t j = v.first;

        while (freed < need)
            freed += swl_cost(st, j++);
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(swl_ts(st, j - 1) + W - now);
    }
}

/* Forget the k oldest entries and their units. */
static void
swl_drop(struct rl_algo_state *st, uint32_t k)
{
    if (k == 0)
        return;
    for (uint32_t i = 0; i < k; i++)
        st->swl.units -= swl_cost(st, i);
    st->ring_head = (st->ring_head + k) % st->ring_cap;
    st->ring_len -= k;
}

/* Room for one more entry; swl_commit keeps ring_len below limit first. */
static void
swl_reserve(const struct rl_limit *lim, struct rl_algo_state *st)
{
    uint64_t cap;
    int64_t *ring;

    if (st->ring_len < st->ring_cap)
        return;
    cap = st->ring_cap < 4 ? 8 : (uint64_t)st->ring_cap * 2;
    if (cap > (uint64_t)lim->limit)
        cap = (uint64_t)lim->limit;
    if (cap < (uint64_t)st->ring_len + 1)
        cap = (uint64_t)st->ring_len + 1;
    if (cap > UINT32_MAX / 2)
        abort(); /* limits are at most 1e9: cannot happen */
    ring = xmalloc(cap * 2 * sizeof(*ring));
    for (uint32_t i = 0; i < st->ring_len; i++) {
        ring[2 * i] = swl_ts(st, i);
        ring[2 * i + 1] = swl_cost(st, i);
    }
    free(st->ring);
    st->ring = ring;
    st->ring_cap = (uint32_t)cap;
    st->ring_head = 0;
}

/* Log an entry of `cost` at ts, the newest; its units count. */
static void
swl_append(const struct rl_limit *lim, struct rl_algo_state *st, int64_t ts, int64_t cost)
{
    uint32_t slot;

    swl_reserve(lim, st);
    slot = (st->ring_head + st->ring_len) % st->ring_cap;
    st->ring[2 * (size_t)slot] = ts;
    st->ring[2 * (size_t)slot + 1] = cost;
    st->ring_len++;
    st->swl.units += cost;
}

static void
swl_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
           struct rl_limit_result *res)
{
    int64_t W = lim->window_ms * 1000;
    int64_t ts, n0, room;
    struct swl_view v;

    swl_view(lim, st, now, &v);
    n0 = v.n;
    swl_drop(st, v.first < SWL_DROP_MAX ? v.first : SWL_DROP_MAX);
    ts = st->ring_len > 0 && v.newest > now ? v.newest : now;
    /* only a forced commit finds `limit` entries here (an allowed one adds
     * to at most limit - cost units): keep the newest limit - 1, then this */
    if (v.first <= SWL_DROP_MAX && st->ring_len >= lim->limit)
        swl_drop(st, st->ring_len - (uint32_t)lim->limit + 1);
    swl_append(lim, st, ts, cost);

    /* the units still inside the window: not those left behind; a forced
     * commit into a log at its limit may have forgotten some, so its
     * overdraft is not known and none is said (as the script) */
    swl_view(lim, st, now, &v);
    room = lim->limit - v.n;
    if (room < 0 && n0 >= lim->limit)
        room = 0;
    algo_set_numbers(res, room, ts + W - now);
}

/*
 * A charge: one entry of its weight, nothing forgotten.  Into a log at or
 * over its limit (no check can add an entry until it is under again) it
 * joins the newest entry, moved to the charge's time, so the ring keeps at
 * most `limit` live entries (sliding_window_log.lua).
 */
static void
swl_charge(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
           struct rl_limit_result *res)
{
    int64_t W = lim->window_ms * 1000, ts;
    struct swl_view v;
    uint32_t slot;

    swl_view(lim, st, now, &v);
    swl_drop(st, v.first < SWL_DROP_MAX ? v.first : SWL_DROP_MAX);
    ts = st->ring_len > 0 && v.newest > now ? v.newest : now;
    if (v.n + cost > ALGO_UNITS_MAX)
        cost = ALGO_UNITS_MAX - v.n;
    if (v.n >= lim->limit) {
        slot = (st->ring_head + st->ring_len - 1) % st->ring_cap;
        st->ring[2 * (size_t)slot] = ts;
        st->ring[2 * (size_t)slot + 1] += cost;
        st->swl.units += cost;
    } else {
        swl_append(lim, st, ts, cost);
    }
    swl_view(lim, st, now, &v);
    algo_set_numbers(res, lim->limit - v.n, ts + W - now);
}

/* Forget the newest `units` entries (all there are, at most). */
static void
swl_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    /* the newest entries whole, then part of the next (the script's give) */
    while (units > 0 && st->ring_len > 0) {
        int64_t *c =
            &st->ring[2 * (size_t)((st->ring_head + st->ring_len - 1) % st->ring_cap) + 1];

        if (*c > units) {
            *c -= units;
            st->swl.units -= units;
            break;
        }
        units -= *c;
        st->swl.units -= *c;
        st->ring_len--;
    }
}

static int64_t
swl_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    struct swl_view v;

    swl_view(lim, st, now, &v);
    return v.n > 0 ? v.newest + lim->window_ms * 1000 - now : 0;
}

const struct rl_algo_def rl_algo_sliding_window_log = {
    .name = "sliding_window_log",
    .tag = "swl",
    .uses_burst = 0,
    .peek = swl_peek,
    .commit = swl_commit,
    .give = swl_give,
    .ttl_us = swl_ttl,
    .estimate = algo_estimate_window,
    .estimate_take = algo_estimate_take_window,
    .charge = swl_charge,
};
