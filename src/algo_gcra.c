/*
 * algo_gcra.c — the generic cell rate algorithm: one theoretical arrival
 * time (TAT) per key, the cheapest state that gives a burst and then a
 * steady rate.  Emission interval T = W / limit, tolerance tau = T * burst;
 * a check is allowed when max(TAT, now) + T * cost - now <= tau (equality
 * allows), and then TAT = max(TAT, now) + T * cost.
 * Mirrors scripts/lua/gcra.lua.
 *
 * T is rarely a whole number of microseconds and rounding it would drift, so
 * times are exact pairs i + f / limit (0 <= f < limit): the state (st->gcra)
 * is TAT's, tat_us = i and tat_frac = f.  An all-zero state is a TAT long
 * past, like a missing Redis key.  It decides exactly like the token bucket
 * with the same limit, window and burst, forced commits included (TAT at most
 * 2 x tau ahead: algo_most_owed); the two differ in what they store.
 */
#include <stdbool.h>

#include "algo.h"

/* An exact time i + f / limit microseconds. */
struct gcra_t {
    int64_t i, f;
};

static struct gcra_t
gcra_norm(int64_t i, int64_t f, int64_t limit)
{
    struct gcra_t t = {i, f};

    if (t.f >= limit) {
        t.i++;
        t.f -= limit;
    } else if (t.f < 0) {
        t.i--;
        t.f += limit;
    }
    return t;
}

static int64_t
gcra_ceil(struct gcra_t t)
{
    return t.i + (t.f > 0);
}

/* floor(burst - x / T): the whole units free when TAT is x after now. */
static int64_t
gcra_room(const struct rl_limit *lim, struct gcra_t x)
{
    int64_t W = lim->window_ms * 1000, r;
    int64_t q = algo_muldiv(x.i, lim->limit, W, &r);

    /* ceil(x * limit / W) = ceil((x.i * limit + x.f) / W) */
    q += (r + x.f) / W + ((r + x.f) % W > 0);
    return lim->burst - q;
}

/* max(TAT, now) - now */
static struct gcra_t
gcra_ahead(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    struct gcra_t x = {0, 0};
    int64_t i = st->gcra.tat_us, f = st->gcra.tat_frac;

    if (f >= lim->limit) {
        /* f was kept over an older limit: round TAT up to the microsecond */
        i++;
        f = 0;
    }
    if (i >= now) {
        x.i = i - now;
        x.f = f;
    }
    return x;
}

/* T x units, exactly. */
static struct gcra_t
gcra_units(const struct rl_limit *lim, int64_t units)
{
    struct gcra_t t;

    t.i = algo_muldiv(lim->window_ms * 1000, units, lim->limit, &t.f);
    return t;
}

/* a > b */
static bool
gcra_later(struct gcra_t a, struct gcra_t b)
{
    return a.i > b.i || (a.i == b.i && a.f > b.f);
}

/* Where TAT would be, from now, after a check of `cost` (<= 2 x burst). */
static struct gcra_t
gcra_next(const struct rl_limit *lim, struct gcra_t x, int64_t cost)
{
    struct gcra_t c = gcra_units(lim, cost);

    return gcra_norm(x.i + c.i, x.f + c.f, lim->limit);
}

static void
gcra_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
          int64_t cost, struct rl_limit_result *res)
{
    struct gcra_t x = gcra_ahead(lim, st, now), n, tau;
    int64_t room = gcra_room(lim, x);

    algo_set_numbers(res, room, gcra_ceil(x));
    if (cost > lim->burst) {
        res->allowed = 0;
        res->retry_after_ms = -1;
        return;
    }
    n = gcra_next(lim, x, cost);
    tau = gcra_units(lim, lim->burst);
    if (!gcra_later(n, tau)) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        /* allowed once now has grown by n - tau */
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(
            gcra_ceil(gcra_norm(n.i - tau.i, n.f - tau.f, lim->limit)));
    }
}

/* Take cost; TAT no further than 2 x tau ahead unless `reserving`. */
static void
gcra_take(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
          bool reserving, struct rl_limit_result *res)
{
    int64_t most = algo_most_owed(lim), room;
    struct gcra_t n = gcra_next(lim, gcra_ahead(lim, st, now),
                                cost < most || reserving ? cost : most);
    struct gcra_t cap = gcra_units(lim, most);

    /* a forced commit: TAT no further than 2 x tau ahead */
    if (!reserving && gcra_later(n, cap))
        n = cap;
    room = gcra_room(lim, n);
    st->gcra.tat_us = now + n.i;
    st->gcra.tat_frac = n.f;
    algo_set_numbers(res, room, gcra_ceil(n));
}

static void
gcra_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
            struct rl_limit_result *res)
{
    gcra_take(lim, st, now, cost, false, res);
}

static void
gcra_reserve(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
             struct rl_limit_result *res)
{
    gcra_take(lim, st, now, cost, true, res);
}

/* TAT moved by the whole charge, up to algo_owed_max units ahead. */
static void
gcra_charge(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
            struct rl_limit_result *res)
{
    int64_t most = algo_owed_max(lim);
    struct gcra_t n = gcra_next(lim, gcra_ahead(lim, st, now), cost < most ? cost : most);
    struct gcra_t cap = gcra_units(lim, most);

    if (gcra_later(n, cap))
        n = cap;
    st->gcra.tat_us = now + n.i;
    st->gcra.tat_frac = n.f;
    algo_set_numbers(res, gcra_room(lim, n), gcra_ceil(n));
}

static void
gcra_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    int64_t most = algo_most_owed(lim);
    struct gcra_t x = gcra_ahead(lim, st, now);
    struct gcra_t c = gcra_units(lim, units < most ? units : most);
    struct gcra_t n = gcra_norm(x.i - c.i, x.f - c.f, lim->limit);

    if (n.i < 0 || (n.i == 0 && n.f == 0)) {
        /* TAT not before now: the state of no key at all */
        st->gcra.tat_us = st->gcra.tat_frac = 0;
        return;
    }
    st->gcra.tat_us = now + n.i;
    st->gcra.tat_frac = n.f;
}

static int64_t
gcra_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    return gcra_ceil(gcra_ahead(lim, st, now));
}

const struct rl_algo_def rl_algo_gcra = {
    .name = "gcra",
    .tag = "gcra",
    .uses_burst = 1,
    .peek = gcra_peek,
    .commit = gcra_commit,
    .give = gcra_give,
    .ttl_us = gcra_ttl,
    .estimate = algo_estimate_refill,
    .estimate_take = algo_estimate_take_refill,
    .reserve = gcra_reserve,
    .charge = gcra_charge,
};
