/*
 * algo_token_bucket.c — `burst` tokens of capacity refilled continuously at
 * `limit` tokens per window: a burst, then a steady rate.
 * Mirrors scripts/lua/token_bucket.lua.
 *
 * State (st->tb): what the bucket misses, D = owed + owed_frac / W tokens (W =
 * window in us, 0 <= owed_frac < W), as of time at_us.  Keeping the deficit
 * rather than the tokens makes an all-zero state a full bucket, like a
 * missing Redis key.  The fraction is
 * exact, so refilling gives the same bucket however often anyone asks.
 * Products reach limit x window (2^66): 128-bit here, digit-wise in the script.
 *
 * A forced commit may take more than the bucket holds: D > burst is a debt
 * that refill pays back before any token is free again, up to
 * algo_most_owed() (D <= 2 x burst); a charge's debt is carried whole, up to
 * algo_owed_max(): D - burst tokens of overdraft, paid back at limit per
 * window, exactly.  D itself never goes below 0, so every
 * product stays of non-negative numbers, as intmath.lua needs.
 */
#include <stdbool.h>

#include "algo.h"

/* Microseconds, rounded up, until the deficit d + f / W falls to x tokens. */
static int64_t
tb_wait(int64_t d, int64_t f, int64_t x, int64_t W, int64_t limit)
{
    int64_t q, r, q2, r2;

    if (d < x || (d == x && f == 0))
        return 0;
    /* ceil(((d - x) * W + f) / limit) */
    q = algo_muldiv(d - x, W, limit, &r);
    q2 = (r + f) / limit;
    r2 = (r + f) % limit;
    return q + q2 + (r2 > 0);
}

/* The bucket as it stands at now. */
struct tb_view {
    int64_t d, f;  /* deficit, after refill */
    int64_t at;    /* the time it is evaluated at: max(now, last) */
    int64_t skew;  /* at - now, > 0 only when a clock stepped back */
    int64_t room;  /* floor(tokens) = burst - ceil(D); may be < 0 */
    int64_t reset; /* us from now until full */
};

static void
tb_view(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now,
        struct tb_view *v)
{
    int64_t W = lim->window_ms * 1000;
    int64_t full = tb_wait(st->tb.owed, st->tb.owed_frac, 0, W, lim->limit);

    v->at = now > st->tb.at_us ? now : st->tb.at_us;
    v->skew = v->at - now;
    if (v->at - st->tb.at_us >= full) {
        v->d = v->f = 0;
    } else {
        int64_t r, q = algo_muldiv(lim->limit, v->at - st->tb.at_us, W, &r);

        v->d = st->tb.owed - q;
        v->f = st->tb.owed_frac - r;
        if (v->f < 0) {
            v->d--;
            v->f += W;
        }
    }
    v->room = lim->burst - v->d - (v->f > 0);
    v->reset = v->d > 0 || v->f > 0 ? tb_wait(v->d, v->f, 0, W, lim->limit) + v->skew : 0;
}

static void
tb_peek(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now, int64_t cost,
        struct rl_limit_result *res)
{
    struct tb_view v;

    tb_view(lim, st, now, &v);
    algo_set_numbers(res, v.room, v.reset);
    if (cost > lim->burst) {
        res->allowed = 0;
        res->retry_after_ms = -1;
    } else if (cost <= v.room) {
        res->allowed = 1;
        res->retry_after_ms = 0;
    } else {
        res->allowed = 0;
        res->retry_after_ms = algo_us_to_ms_ceil(
            tb_wait(v.d, v.f, lim->burst - cost, lim->window_ms * 1000, lim->limit) + v.skew);
    }
}

/* How far a take may leave the bucket owing. */
enum tb_bound {
    TB_MOST_OWED, /* a forced commit: algo_most_owed */
    TB_RESERVE,   /* a reservation: bounded by its wait */
    TB_CHARGE,    /* a charge: all of it, up to algo_owed_max */
};

/* Take cost, the debt bounded as `bound` says. */
static void
tb_take(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
        enum tb_bound bound, struct rl_limit_result *res)
{
    struct tb_view v;
    int64_t room, most = bound == TB_CHARGE ? algo_owed_max(lim) : algo_most_owed(lim);

    tb_view(lim, st, now, &v);
    st->tb.owed = v.d + cost;
    st->tb.owed_frac = v.f;
    st->tb.at_us = v.at;
    if (bound != TB_RESERVE && st->tb.owed >= most) {
        st->tb.owed = most;
        st->tb.owed_frac = 0;
    }
    room = lim->burst - st->tb.owed - (st->tb.owed_frac > 0);
    algo_set_numbers(
        res, room,
        tb_wait(st->tb.owed, st->tb.owed_frac, 0, lim->window_ms * 1000, lim->limit) + v.skew);
}

static void
tb_commit(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
          struct rl_limit_result *res)
{
    tb_take(lim, st, now, cost, TB_MOST_OWED, res);
}

static void
tb_reserve(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
           struct rl_limit_result *res)
{
    tb_take(lim, st, now, cost, TB_RESERVE, res);
}

static void
tb_charge(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t cost,
          struct rl_limit_result *res)
{
    tb_take(lim, st, now, cost, TB_CHARGE, res);
}

static void
tb_give(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now, int64_t units)
{
    struct tb_view v;

    tb_view(lim, st, now, &v);
    if (v.d - units < 0 || (v.d == units && v.f == 0)) {
        /* full: the state of no key at all */
        st->tb.owed = st->tb.owed_frac = st->tb.at_us = 0;
        return;
    }
    st->tb.owed = v.d - units;
    st->tb.owed_frac = v.f;
    st->tb.at_us = v.at;
}

static int64_t
tb_ttl(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now)
{
    struct tb_view v;

    tb_view(lim, st, now, &v);
    return v.reset;
}

const struct rl_algo_def rl_algo_token_bucket = {
    .name = "token_bucket",
    .tag = "tb",
    .uses_burst = 1,
    .peek = tb_peek,
    .commit = tb_commit,
    .give = tb_give,
    .ttl_us = tb_ttl,
    .estimate = algo_estimate_refill,
    .estimate_take = algo_estimate_take_refill,
    .reserve = tb_reserve,
    .charge = tb_charge,
};
