/*
 * algo.h — the algorithm table.
 *
 * Every algorithm exists twice: as a Lua module under scripts/lua/ run
 * atomically inside Redis, and here in C for the in-process memory backend
 * (and, later, failure_mode "local").  Both follow spec/ALGORITHMS.md and must
 * give the same decision and the same numbers for the same (time, cost)
 * sequence; tests/unit/check_algo_diff drives both and compares.  A hybrid
 * policy (hybrid.h) decides from Redis's last answer instead, through the
 * algorithm's `estimate`: a coarse model with no state of its own.
 *
 * A decision is two-phase so that all limits of a policy can be decided
 * together: peek() every limit without changing anything, and only when every
 * limit allows (and cost > 0) commit() each one.  A forced check (a hybrid
 * policy reporting counts it already admitted) commits whatever peek() said,
 * so commit() must take a cost that does not fit, even one above the limit:
 * counters go over the limit, a bucket into debt, GCRA's TAT further out, and
 * the sliding log keeps its newest `limit` entries.
 */
#ifndef RL_ALGO_H
#define RL_ALGO_H

#include <stdbool.h>
#include <stdint.h>

#include "period.h"
#include "rl.h"

struct strbuf;

enum rl_algo {
    RL_ALGO_FIXED_WINDOW = 0,
    RL_ALGO_SLIDING_WINDOW_LOG,
    RL_ALGO_SLIDING_WINDOW_COUNTER,
    RL_ALGO_TOKEN_BUCKET,
    RL_ALGO_GCRA,
    /* not a rate: slots held by leases (algo_concurrency.c); the rate
     * algorithms come first, RL_ALGO_RATES of them */
    RL_ALGO_CONCURRENCY,
    RL_ALGO_COUNT
};
#define RL_ALGO_RATES RL_ALGO_CONCURRENCY

struct rl_identity_chain;

/*
 * Where a fixed window's windows start.  FIRST: a window opens at the first
 * counted request and lasts `window`.  EPOCH: windows are the consecutive
 * multiples of `window` since the Unix epoch, [k x window, (k + 1) x window),
 * the same for every key and every instance (envoyproxy/ratelimit's: a
 * minute ends on the clock's minute).  The times an algorithm is given are
 * Unix microseconds for that (Redis TIME; the memory backend's clock).
 */
enum rl_align { RL_ALIGN_FIRST = 0, RL_ALIGN_EPOCH, RL_ALIGN_COUNT };

/*
 * One limit of a policy, as configured: a window of window_ms, or a calendar
 * period in a time zone (period.h; fixed_window and sliding_window_counter,
 * algo_def's period_tag): then window_ms is 0 and the window is the period
 * that holds the time of the check, its length what the calendar says.
 */
struct rl_limit {
    enum rl_algo algo;
    int64_t limit;           /* cost units allowed per window */
    int64_t window_ms;       /* > 0, or 0 with a period */
    int64_t burst;           /* token_bucket, gcra: capacity; defaults to limit */
    enum rl_align align;     /* fixed_window only (algo_def's aligned_tag) */
    struct rl_period period; /* kind RL_PERIOD_NONE: a window of window_ms */
    /* who this limit counts by, when not the policy's caller (config.h);
     * NULL: the policy's identity */
    struct rl_identity_chain *identity;
    /* concurrency: the longest a slot is held, as configured (0: absent);
     * window_ms is set to it (the key's name, the state's TTL) */
    int64_t lease_ms;
    /* a policy's request_limits_cap: counted in a key of its own
     * (":cap-<tag>:..."), never one a limit of the same shape has */
    int cap;
};

/* What one limit says about one check. Times are milliseconds, rounded up. */
struct rl_limit_result {
    int allowed;            /* this limit alone would allow the check */
    int64_t remaining;      /* >= 0 */
    int64_t reset_ms;       /* until this limit is fully available again */
    int64_t retry_after_ms; /* 0 when allowed; -1 when cost can never fit */
    int64_t overdraft;      /* units past the limit (a charge's, a penalty's), >= 0 */
};

/*
 * In-memory state of one key of one limit: the numbers of the algorithm that
 * owns it, named in its member of the union (each algo_*.c says more).  An
 * all-zero state is a key never seen, like a missing Redis key, for every
 * algorithm.  The sliding log's entries sit outside the union, so releasing
 * a state needs no algorithm: a ring of (time, cost) pairs, oldest first.
 */
struct rl_algo_state {
    union {
        struct {
            int64_t count;    /* units counted in the window */
            int64_t start_us; /* when the window opened */
        } fw;                 /* fixed_window */
        struct {
            int64_t window;     /* its index: floor(time / W); a period: its start (us) */
            int64_t count;      /* units counted in it */
            int64_t prev_count; /* in the window before it */
        } swc;                  /* sliding_window_counter */
        struct {
            int64_t owed, owed_frac; /* tokens missing: owed + owed_frac / W */
            int64_t at_us;           /* as of this time */
        } tb;                        /* token_bucket */
        struct {
            int64_t tat_us, tat_frac; /* TAT: tat_us + tat_frac / limit us */
        } gcra;
        struct {
            int64_t units; /* in the ring */
        } swl;             /* sliding_window_log */
    };
    int64_t *ring; /* sliding_window_log's entries */
    uint32_t ring_cap, ring_head, ring_len;
};

/*
 * What a hybrid table (hybrid.h) knows of one limit of one key: the last
 * answer Redis gave and the cost admitted locally since.
 */
struct rl_algo_seen {
    int64_t remaining, reset_ms; /* Redis's last answer */
    int64_t elapsed_ms;          /* since that answer came */
    int64_t used;                /* admitted locally, not yet in it */
};

/*
 * One lease of a concurrency limit within its key: 128 random bits, never
 * all zero (algo_concurrency.c's anonymous slots are), written as 32
 * lower-case hex digits (the script's sorted-set member).
 */
struct rl_lease {
    uint64_t hi, lo;
};
#define RL_LEASE_HEX 32

struct rl_algo_def {
    const char *name; /* config name, e.g. "fixed_window" */
    const char *tag;  /* short id used in Redis keys and script arguments */
    /* The script's module for a limit aligned to the epoch (its keys keep
     * `tag`: the state is the same, only where a window opens differs);
     * NULL: the algorithm has no alignment to choose. */
    const char *aligned_tag;
    /* The script's module for a limit of a calendar period (keys keep
     * `tag`); NULL: the algorithm takes no period. */
    const char *period_tag;
    int uses_burst; /* burst is meaningful (else it must equal limit) */
    /* Fill *res as things stand at now_us for a check of `cost`; no change. */
    void (*peek)(const struct rl_limit *lim, const struct rl_algo_state *st, int64_t now_us,
                 int64_t cost, struct rl_limit_result *res);
    /*
     * Consume `cost` (> 0) at now_us, whether it fits or not (see above).
     * *res holds peek()'s answer for this check: remaining and reset_ms
     * become the numbers after the commit; allowed and retry_after_ms keep
     * the decision (for a forced check that did not fit, it still did not).
     */
    void (*commit)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                   int64_t cost, struct rl_limit_result *res);
    /*
     * Give `units` (> 0) back at now_us (a reward), whatever the state: a
     * counter goes down (never below 0), a bucket fills (never past
     * burst), GCRA's TAT moves back (never before now), the log forgets
     * its newest `units` units (an entry of more, in part).  A state left
     * worth nothing is all zero,
     * like a missing Redis key (the script deletes the key then).
     */
    void (*give)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                 int64_t units);
    /* Microseconds from now_us after which the state is worthless (its TTL). */
    int64_t (*ttl_us)(const struct rl_limit *lim, const struct rl_algo_state *st,
                      int64_t now_us);
    /*
     * The hybrid estimate, from `seen` alone (no state): decide a check of
     * `cost` into *res, whose remaining may be < 0 (what is missing).  When
     * every limit of the policy allows it and cost > 0, estimate_take()
     * then turns *res into the numbers after the cost is taken.
     */
    void (*estimate)(const struct rl_limit *lim, const struct rl_algo_seen *seen, int64_t cost,
                     struct rl_limit_result *res);
    void (*estimate_take)(const struct rl_limit *lim, int64_t cost,
                          struct rl_limit_result *res);
    /*
     * Leases, concurrency only (NULL for the rates).  hold() is commit() for
     * an allowed check that takes a slot under lease `id`; commit() itself
     * takes an anonymous slot (a penalty), none when every slot is held.
     * release() gives lease `id`'s slot back at now_us: true when it was
     * held and had not ended.
     */
    void (*hold)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                 const struct rl_lease *id, struct rl_limit_result *res);
    bool (*release)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                    const struct rl_lease *id);
    /*
     * A reservation (max_delay; token_bucket and gcra only, NULL for the
     * others): commit() without the bound of algo_most_owed, for a check
     * that peek() found to fit within a bounded wait, so the debt it leaves
     * is bounded by that wait (burst + limit x max_delay / window).
     */
    void (*reserve)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                    int64_t cost, struct rl_limit_result *res);
    /*
     * A charge (RL_CHECK_CHARGE; NULL for concurrency, which holds no slot
     * for one): commit() past the limit with nothing of the charge lost,
     * up to ALGO_UNITS_MAX units (token_bucket and gcra: algo_owed_max).
     * The log keeps every unit: a charge into a log at or over its limit
     * joins its newest entry (algo_sliding_window_log.c).  *res as commit's.
     */
    void (*charge)(const struct rl_limit *lim, struct rl_algo_state *st, int64_t now_us,
                   int64_t cost, struct rl_limit_result *res);
};

const struct rl_algo_def *algo_def(enum rl_algo algo);
void algo_state_release(struct rl_algo_state *st);

/* The algorithm named `name` in the table (algo_def's name, as written):
 * found or not. */
bool algo_by_name(const char *name, enum rl_algo *out);
/* The names of the first n algorithms of the table, "fixed_window, ...",
 * for a message that lists them (truncated to size). */
void algo_name_list(char *buf, size_t size, size_t n);

/*
 * The one limit validator of what the algorithm decides, for every reader
 * of limits (the JSON config's policies and a check's own, through
 * policy.c; rls.config's rules): what is wrong with l, as static text, NULL
 * when nothing; *field names the field at fault.  A burst where the
 * algorithm takes none; a bucket that takes more than 366 days to refill
 * (burst / limit x window), which bounds the algorithms' integer arithmetic.
 */
const char *algo_limit_problem(const struct rl_limit *l, const char **field);

/* The module the check script runs for limit l ("fw", "fwa", "fwp", ...). */
const char *algo_script_tag(const struct rl_limit *l);

static inline bool
algo_has_period(const struct rl_limit *l)
{
    return l->period.kind != RL_PERIOD_NONE;
}

/*
 * The part of a limit's key after the check's hash tag: ":<tag>:<window_ms>",
 * or ":<tag>:<period>@<zone>" (a week "week-<start day>@<zone>") for a
 * period, into sb.  Two limits of one check with the same suffix would share
 * a counter (policy.c refuses them).
 */
void algo_key_suffix(const struct rl_limit *l, struct strbuf *sb);
/* Both limits count in the key of the same suffix. */
bool algo_same_key(const struct rl_limit *a, const struct rl_limit *b);

/* A hash of every field of l[0..n) (a zone by its address: zones live as
 * long as the process): what caches of limits are keyed by. */
uint64_t algo_limits_hash(const struct rl_limit *l, size_t n);

/* The window's length in ms at now_us (Unix): window_ms, or the length of
 * the period that holds now_us. */
int64_t algo_window_ms(const struct rl_limit *l, int64_t now_us);

/*
 * The boundaries (us) of a period limit's periods around now_us: b[2] <=
 * now_us < b[3] (period.h's, in microseconds).  What the script is sent,
 * and what the C twins decide by: the period that holds the time, the one
 * before it and the end of the one after it.
 */
void algo_period_bounds(const struct rl_limit *l, int64_t now_us, int64_t b[RL_PERIOD_BOUNDS]);

/*
 * The start of the window that holds `now` for a limit aligned to the epoch:
 * the greatest multiple of the window not after now (us).
 */
static inline int64_t
algo_epoch_window_start(const struct rl_limit *lim, int64_t now)
{
    int64_t w = lim->window_ms * 1000, r = now % w;

    return now - (r < 0 ? r + w : r);
}

/*
 * The two shapes of hybrid estimate the algorithms pick from.  A window is
 * whole again at its reset and nothing in between (fixed window, and both
 * sliding windows: their sliding is not modelled, which is stricter than
 * Redis).  A bucket refills at `limit` per window up to `burst` (token
 * bucket, gcra).
 */
void algo_estimate_window(const struct rl_limit *lim, const struct rl_algo_seen *seen,
                          int64_t cost, struct rl_limit_result *res);
void algo_estimate_take_window(const struct rl_limit *lim, int64_t cost,
                               struct rl_limit_result *res);
void algo_estimate_refill(const struct rl_limit *lim, const struct rl_algo_seen *seen,
                          int64_t cost, struct rl_limit_result *res);
void algo_estimate_take_refill(const struct rl_limit *lim, int64_t cost,
                               struct rl_limit_result *res);

/*
 * The most a token_bucket or gcra key may owe after a forced commit: one
 * bucket of debt below an empty bucket, i.e. 2 x burst units missing (GCRA:
 * TAT at most 2 x tau ahead).  Debt past that is not carried: it would keep
 * the key blocked (and alive) longer than two full refills, and unbounded it
 * would overflow the exact integer arithmetic of both languages.  Counters
 * need no such bound: their windows end whatever they hold.
 */
static inline int64_t
algo_most_owed(const struct rl_limit *lim)
{
    return 2 * lim->burst;
}

/*
 * The most units a count or a debt may hold, 2^51: every count, sum and
 * product of the algorithms then stays exact in the script's doubles
 * (intmath.lua takes divisors up to it), and it is 2.25 x the largest limit
 * or cost (1e15).  A charge past it is held at it.
 */
#define ALGO_UNITS_MAX ((int64_t)1 << 51)

/*
 * The most a token_bucket or gcra key may owe after a charge: ALGO_UNITS_MAX
 * units, and no more than refill pays back in 2^51 us (71 years), so that
 * the time of any debt stays exact (owed_max in scripts/lua/prelude.lua).
 */
static inline int64_t
algo_owed_max(const struct rl_limit *lim)
{
    int64_t W = lim->window_ms * 1000;

    if (lim->limit >= W)
        return ALGO_UNITS_MAX;
    return (int64_t)((unsigned __int128)lim->limit * (uint64_t)ALGO_UNITS_MAX / (uint64_t)W);
}

/* Rounding helpers shared by every algorithm: microseconds to milliseconds. */
static inline int64_t
algo_us_to_ms_ceil(int64_t us)
{
    return us <= 0 ? 0 : (us + 999) / 1000;
}

/* The numbers a limit reports: `room` units left (none when it is owed
 * more: then -room is its overdraft), and the time until it is whole
 * again, in ms rounded up. */
static inline void
algo_set_numbers(struct rl_limit_result *res, int64_t room, int64_t reset_us)
{
    res->remaining = room > 0 ? room : 0;
    res->overdraft = room < 0 ? -room : 0;
    res->reset_ms = algo_us_to_ms_ceil(reset_us);
}

/*
 * floor(a * b / c) and its remainder (when rem is not NULL), for 0 <= a, b
 * and c > 0: limit x window in microseconds reaches 2^66, so the product is
 * 128-bit here (and digit-wise in scripts/lua/intmath.lua, to the same floor).
 */
static inline int64_t
algo_muldiv(int64_t a, int64_t b, int64_t c, int64_t *rem)
{
    unsigned __int128 p = (unsigned __int128)(uint64_t)a * (uint64_t)b;

    if (rem != NULL)
        *rem = (int64_t)(p % (uint64_t)c);
    return (int64_t)(p / (uint64_t)c);
}

extern const struct rl_algo_def rl_algo_fixed_window;
extern const struct rl_algo_def rl_algo_sliding_window_log;
extern const struct rl_algo_def rl_algo_sliding_window_counter;
extern const struct rl_algo_def rl_algo_token_bucket;
extern const struct rl_algo_def rl_algo_gcra;
extern const struct rl_algo_def rl_algo_concurrency;

#endif
