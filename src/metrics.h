/*
 * metrics.h — counters for GET /metrics (Prometheus text format 0.0.4).
 *
 * Each worker owns a struct rl_metrics and bumps it with relaxed atomics, so
 * the hot path never takes a lock or shares a cache line with another
 * worker; a scrape sums the workers.  Policies are counted by name through
 * a small registry whose ids survive reloads, so counters do not reset when
 * the config does.
 */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stdint.h>

#include "backend.h"
#include "grpc.h"
#include "http.h"

struct evbuffer;

enum rl_outcome {
    RL_OUT_ALLOWED = 0,
    RL_OUT_DENIED,
    RL_OUT_SHADOW_DENIED,
    RL_OUT_DEGRADED,
    RL_OUT_ERROR,
    RL_OUT_COUNT
};

/* Requests refused before any check ran. */
enum rl_reject {
    RL_REJ_BAD_REQUEST = 0,
    RL_REJ_TOO_LARGE,
    RL_REJ_OVERLOADED,
    RL_REJ_DRAINING, /* none since issue 24: checks are decided while draining;
                      * the label stays for the dashboards that read it */
    RL_REJ_NOT_FOUND,
    RL_REJ_METHOD,
    RL_REJ_COUNT
};

/* Distinct policy names counted; id 0 is "no policy matched", the last id
 * gathers every name past the registry's end. */
#define RL_METRICS_POLICIES 256
#define RL_METRICS_NO_POLICY 0
#define RL_LAT_BUCKETS 13

/* Admin API actions (admin.h) and how they ended. */
enum rl_admin_action {
    RL_ADM_INSPECT = 0,
    RL_ADM_RESET,
    RL_ADM_BLOCK,
    RL_ADM_UNBLOCK,
    RL_ADM_REWARD,
    RL_ADM_PENALTY,
    RL_ADM_ACTION_COUNT
};
enum rl_admin_result {
    RL_ADM_OK = 0,
    RL_ADM_INVALID,
    RL_ADM_UNAUTHORIZED,
    RL_ADM_ERROR,
    RL_ADM_RESULT_COUNT
};

/* A latency histogram: counts per bucket (cumulative on output only). */
struct rl_histogram {
    uint64_t bucket[RL_LAT_BUCKETS];
    uint64_t inf, count, sum_us;
};

/*
 * Envoy's rate limit service (rls.c), per domain and rule as
 * envoyproxy/ratelimit counts: hits asked for, hits within the limit, hits
 * past near_limit_ratio of it (within or not), hits over it, and over-limit
 * hits answered OK by shadow_mode.  Labels come from the rule files (a
 * request's values only under detailed_metric or value_to_metric), bounded:
 * the last id gathers every label pair past the registry's end.
 */
enum rl_rls_stat {
    RL_RLS_HITS = 0,
    RL_RLS_WITHIN_LIMIT,
    RL_RLS_NEAR_LIMIT,
    RL_RLS_OVER_LIMIT,
    RL_RLS_SHADOW_MODE,
    /* hits of a rule that counts over its limit (count_over_limit): charged */
    RL_RLS_CHARGED,
    RL_RLS_STAT_COUNT
};
/* envoyproxy/ratelimit's stats: the ones before RL_RLS_CHARGED */
#define RL_RLS_ENVOY_STATS RL_RLS_CHARGED
#define RL_METRICS_RLS_RULES 1024

/* How a ShouldRateLimit request ended. */
enum rl_rls_result {
    RL_RLS_OK = 0,
    RL_RLS_OVER,
    RL_RLS_INVALID,     /* refused: a bad request */
    RL_RLS_UNAVAILABLE, /* failure_mode closed and no backend */
    RL_RLS_RESULT_COUNT
};

/* What became of reservations (POST /check "reserve", POST /settle). */
enum rl_rsv_metric {
    RL_RSV_M_TAKEN = 0, /* an allowed check answered one */
    RL_RSV_M_SETTLED,   /* a settle applied it */
    RL_RSV_M_EXPIRED,   /* a settle came after its reservation_ttl */
    RL_RSV_M_UNKNOWN,   /* a settle of none held: twice, never given, forged */
    RL_RSV_M_COUNT
};

struct rl_metrics {
    uint64_t checks[RL_METRICS_POLICIES][RL_OUT_COUNT];
    uint64_t charged[RL_METRICS_POLICIES]; /* units counted by POST /charge */
    uint64_t reservations[RL_RSV_M_COUNT];
    uint64_t rejected[RL_REJ_COUNT];
    struct rl_histogram backend_latency; /* asking the backend to its answer */
    struct rl_histogram check_duration;  /* a check's first byte read to its answer */
    struct rl_histogram delay;           /* a held check's wait (max_delay) */
    uint64_t delayed;                    /* checks held for max_delay */
    uint64_t delayed_waiting;            /* gauge: held now */
    uint64_t backend_status[4];          /* by enum rl_backend_status */
    uint64_t local_cache_hits;
    uint64_t request_limits_capped; /* checks a request_limits_cap denied (check.c) */
    uint64_t inflight;
    struct http_counters http; /* the check listener's connections */
    struct grpc_counters grpc; /* the gRPC listener's (rls.listen) */
    /* hybrid policies (hybrid.h) */
    uint64_t hybrid_local; /* checks decided from the local view */
    uint64_t hybrid_syncs, hybrid_sync_failures;
    uint64_t hybrid_pending; /* gauge: units not acknowledged yet */
    uint64_t hybrid_entries; /* gauge: keys in the table */
    /* charges kept for the backend (pending.h) */
    uint64_t charges_pending, charges_pending_units; /* gauges: answered 202, not applied */
    uint64_t charges_deferred, charges_lost, charges_refused;
    uint64_t admin[RL_ADM_ACTION_COUNT][RL_ADM_RESULT_COUNT];
    uint64_t rls_rules[RL_METRICS_RLS_RULES][RL_RLS_STAT_COUNT];
    uint64_t rls_requests[RL_RLS_RESULT_COUNT];
    uint64_t rls_domain_not_found; /* descriptors of a domain no file has */
    uint64_t rls_global_shadow;    /* OVER_LIMIT answered OK by rls.shadow_mode */
};

/* The stable id of a policy name (registering it on first sight). */
int metrics_policy_id(const char *name);

void metrics_check(struct rl_metrics *m, int policy_id, enum rl_outcome o);
/* A charge counted `units` under the policy (POST /charge). */
void metrics_charge(struct rl_metrics *m, int policy_id, int64_t units);
void metrics_reservation(struct rl_metrics *m, enum rl_rsv_metric r);

/* The stable id of an RLS label pair (registering it on first sight). */
int metrics_rls_id(const char *domain, size_t dlen, const char *rule, size_t rlen);
/* The id of that pair, -1 when none was registered (it registers none). */
int metrics_rls_find(const char *domain, size_t dlen, const char *rule, size_t rlen);
void metrics_rls(struct rl_metrics *m, int id, enum rl_rls_stat s, uint64_t n);
/* The label pairs registered so far: ids 0..n-1 (GET /admin/status). */
int metrics_rls_count(void);
/* Id's pair (id < metrics_rls_count()): registered once, never freed. */
void metrics_rls_name(int id, const char **domain, size_t *dlen, const char **rule,
                      size_t *rlen);
void metrics_reject(struct rl_metrics *m, enum rl_reject r);
void metrics_backend(struct rl_metrics *m, enum rl_backend_status st, int64_t us);
/* A check answered `us` after its request's first byte was read. */
void metrics_check_duration(struct rl_metrics *m, int64_t us);
/* A check held `us` before its answer (max_delay). */
void metrics_delayed(struct rl_metrics *m, int64_t us);
void metrics_admin(struct rl_metrics *m, enum rl_admin_action a, enum rl_admin_result r);
/* "inspect", "reset", ... */
const char *metrics_admin_action_name(enum rl_admin_action a);
const char *metrics_admin_result_name(enum rl_admin_result r);

/* Process-wide events (Redis's error replies and reconnections are counted
 * where they happen, redis_conn.c, and read from there). */
void metrics_reload(int ok, uint64_t config_hash);
void metrics_set_config_hash(uint64_t hash);
/* The daemon started (now, for uptime). */
void metrics_started(void);
/* Reloads so far, and the last one's outcome (GET /admin/status). */
struct rl_reload_state {
    uint64_t ok, failed, config_hash;
    int last;             /* 1 ok, 0 failed, -1 none yet */
    int64_t last_unix_us; /* when */
    int64_t started_us;   /* monotonic: metrics_started */
};
void metrics_reloads(struct rl_reload_state *out);
/* Rules over xDS (xds.c), always served (0 without rls.xds).  connected:
 * the stream is open; an update accepted (its version) or rejected; loaded:
 * the rules in force came from the server (false until the first). */
void metrics_xds_connected(int up);
void metrics_xds_update(int accepted, const char *version);

/* Everything, summed over `n` workers' metrics. */
void metrics_format(struct evbuffer *out, struct rl_metrics *const *per_worker, size_t n);
/* rls.envoy_metrics: the rules' counts again under envoyproxy/ratelimit's
 * names (ratelimit_service_rate_limit_total_hits, ...) and labels (domain,
 * key1, key2), as its default statsd mapper makes them. */
void metrics_format_envoy(struct evbuffer *out, struct rl_metrics *const *per_worker,
                          size_t n);
/* The admin API's counters, after metrics_format's. */
void metrics_format_admin(struct evbuffer *out, struct rl_metrics *const *per_worker,
                          size_t n);

#endif
