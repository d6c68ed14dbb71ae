/*
 * algo.c — the algorithm table: names, tags and the C implementations, one
 * file per algorithm (algo_*.c); and the two hybrid estimates they share.
 */
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "util.h"

#define ALGO_DAY_MS (24LL * 3600 * 1000)

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

bool
algo_by_name(const char *name, enum rl_algo *out)
{
    for (size_t i = 0; i < RL_ALGO_COUNT; i++) {
        if (strcmp(algos[i]->name, name) == 0) {
            *out = (enum rl_algo)i;
            return true;
        }
    }
    return false;
}

void
algo_name_list(char *buf, size_t size, size_t n)
{
    struct strbuf sb;

    sb_init(&sb, buf, size);
    for (size_t i = 0; i < n && i < RL_ALGO_COUNT; i++) {
        sb_str(&sb, i ? ", " : "");
        sb_str(&sb, algos[i]->name);
    }
}

const char *
algo_limit_problem(const struct rl_limit *l, const char **field)
{
    const struct rl_algo_def *d = algos[l->algo];
    int64_t burst = l->burst != 0 ? l->burst : l->limit;

    *field = "burst";
    if (l->burst != 0 && !d->uses_burst)
        return "only token_bucket and gcra take a burst";
    if (d->uses_burst && l->limit > 0 && l->window_ms > 0 &&
        (unsigned __int128)burst * (unsigned __int128)l->window_ms >
            (unsigned __int128)l->limit * (unsigned __int128)(366 * ALGO_DAY_MS))
        return "the bucket must refill within 366 days (burst / limit x window)";
    return NULL;
}

const char *
algo_script_tag(const struct rl_limit *l)
{
    const struct rl_algo_def *d = algos[l->algo];

    if (algo_has_period(l) && d->period_tag != NULL)
        return d->period_tag;
    return l->align == RL_ALIGN_EPOCH && d->aligned_tag != NULL ? d->aligned_tag : d->tag;
}

void
algo_key_suffix(const struct rl_limit *l, struct strbuf *sb)
{
    sb_str(sb, l->cap ? ":cap-" : ":");
    sb_str(sb, algos[l->algo]->tag);
    sb_str(sb, ":");
    if (!algo_has_period(l)) {
        sb_i64(sb, l->window_ms);
        return;
    }
    sb_str(sb, period_kind_name(l->period.kind));
    if (l->period.kind == RL_PERIOD_WEEK) {
        sb_str(sb, "-");
        sb_str(sb, period_week_start_name(l->period.week_start));
    }
    sb_str(sb, "@");
    sb_str(sb, period_tz_name(l->period.tz));
}

bool
algo_same_key(const struct rl_limit *a, const struct rl_limit *b)
{
    if (a->algo != b->algo || a->cap != b->cap || algo_has_period(a) != algo_has_period(b))
        return false;
    if (!algo_has_period(a))
        return a->window_ms == b->window_ms;
    /* by name: a zone read again after a tzdata upgrade is another object */
    return a->period.kind == b->period.kind &&
           strcmp(period_tz_name(a->period.tz), period_tz_name(b->period.tz)) == 0 &&
           (a->period.kind != RL_PERIOD_WEEK ||
            strcmp(period_week_start_name(a->period.week_start),
                   period_week_start_name(b->period.week_start)) == 0);
}

uint64_t
algo_limits_hash(const struct rl_limit *l, size_t n)
{
    uint64_t h = FNV1A_INIT ^ n;

    for (size_t i = 0; i < n; i++) {
        uint64_t v[] = {(uint64_t)l[i].algo,
                        (uint64_t)l[i].limit,
                        (uint64_t)l[i].window_ms,
                        (uint64_t)l[i].burst,
                        (uint64_t)l[i].cap << 48 | (uint64_t)l[i].align << 32 |
                            (uint64_t)l[i].period.kind << 8 | (uint64_t)l[i].period.week_start,
                        (uint64_t)(uintptr_t)l[i].period.tz};
        for (size_t k = 0; k < RL_ARRAY_LEN(v); k++)
            h = (h ^ v[k]) * 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* Seconds of a Unix time in microseconds, rounded down. */
static int64_t
us_to_s(int64_t us)
{
    return us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000);
}

int64_t
algo_window_ms(const struct rl_limit *l, int64_t now_us)
{
    if (!algo_has_period(l))
        return l->window_ms;
    return period_length(&l->period, us_to_s(now_us)) * 1000;
}

void
algo_period_bounds(const struct rl_limit *l, int64_t now_us, int64_t b[RL_PERIOD_BOUNDS])
{
    period_bounds(&l->period, us_to_s(now_us), b);
    for (int i = 0; i < RL_PERIOD_BOUNDS; i++)
        b[i] *= 1000000;
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
