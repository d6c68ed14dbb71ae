/*
 * top.h — who is being limited: each worker's heaviest callers of every
 * policy (GET /admin/top, docs/API.md "Admin API"), by denied checks and by
 * units allowed, over the recent minutes.
 *
 * A worker keeps, per policy (by its metrics id, stable across reloads),
 * TOP_SLOTS sketches of each kind (sketch.h), one per minute of its
 * monotonic clock, reused round robin: the current minute and the 15
 * before it.  A check is counted in the sketch of its minute, on its own
 * worker, without a lock; a read merges the minutes it asks for across
 * every worker (the readers copy entries through their sequence numbers).
 * The memory of a policy is taken on its first check on a worker, and kept:
 * top_policy_bytes(k) per worker, whatever the number of callers.
 */
#ifndef RL_TOP_H
#define RL_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "rl.h"

struct evbuffer;
struct rl_config;

#define TOP_SLOT_US 60000000LL
#define TOP_SLOTS 16
/* top_k's bounds and default (docs/API.md) */
#define TOP_K_DEFAULT 32
#define TOP_K_MAX 64

/* Ids past the policies' (RL_METRICS_POLICIES): an RLS rule's, by its
 * metrics id (metrics_rls_id); at most TOP_RLS_RULES_MAX of them take
 * sketches on a worker, the others' checks counted as refused. */
#define TOP_RLS_RULES_MAX 32
#define TOP_IDS (RL_METRICS_POLICIES + RL_METRICS_RLS_RULES)
#define TOP_RLS_ID(stat_id) (RL_METRICS_POLICIES + (stat_id))

enum top_by { TOP_BY_DENIED = 0, TOP_BY_UNITS, TOP_BY_COUNT };

/* One worker's: private to top.c. */
struct rl_top;

/* k counters per sketch (1..TOP_K_MAX). */
struct rl_top *top_new(uint32_t k);
void top_free(struct rl_top *t);
/* What one policy's sketches take on one worker. */
size_t top_policy_bytes(uint32_t k);

/*
 * On t's worker: a check of the policy `policy_id` by the caller whose
 * escaped identity (as its key shows it: identity.h) is id, at now_us
 * (monotonic): denied, or allowed with `units` (0: nothing counted).  hash:
 * a keyed hash naming that caller the check computed already (the deny
 * cache's), or 0: the identity's is computed.  A caller named by two hashes
 * (its policy reloaded) is one caller again when read.
 */
void top_record(struct rl_top *t, int policy_id, const char *id, size_t len, uint64_t hash,
                bool denied, int64_t units, int64_t now_us);

/* One caller of a merged answer. */
struct top_caller {
    char identity[RL_IDENTITY_MAX + 1]; /* typed, unescaped; NUL-terminated */
    size_t identity_len;
    bool cut;                      /* the name was longer than was kept */
    uint64_t figure[TOP_BY_COUNT]; /* each the most it can be */
    uint64_t error_bound;          /* of the figure ranked by */
};

struct top_answer {
    uint64_t total;      /* of the figure ranked by, every caller */
    int64_t interval_us; /* the time the answer covers */
    size_t n;
    struct top_caller *callers; /* n, heaviest first */
};

/*
 * From any thread: the `max` heaviest callers of policy_id by `by` over
 * the last `minutes` (1..TOP_SLOTS-1) whole minutes and the current one,
 * merged over the n workers' tables (NULL ones skipped).  top_answer_free
 * it.
 */
void top_read(struct rl_top *const *tops, size_t n, int policy_id, enum top_by by, int minutes,
              size_t max, int64_t now_us, struct top_answer *out);
void top_answer_free(struct top_answer *a);
/* Whether any of the n workers keeps sketches for id (an RLS rule's may
 * have none: TOP_RLS_RULES_MAX). */
bool top_counted(struct rl_top *const *tops, size_t n, int id);

/* ratelimitd_top_caller_share: for each policy of cfg, the heaviest
 * caller's share of its denials over the last minute. */
/* ratelimitd_top_rls_refused_total too. */
void top_format_metrics(struct evbuffer *out, struct rl_top *const *tops, size_t n,
                        const struct rl_config *cfg, int64_t now_us);

#endif
