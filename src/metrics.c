/* metrics.c — see metrics.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "ac_config.h"
#include "bufpool.h"
#include "metrics.h"
#include "period.h"
#include "redis_conn.h"
#include "util.h"

#define ADD(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *reg_names[RL_METRICS_POLICIES];
static int reg_n = 1; /* id 0: no policy */

/* RLS label pairs "<domain>\0<rule>", found by hash: a detailed_metric
 * rule looks its request's pair up on every hit. */
#define RLS_LABEL_MAX 256
#define RLS_SLOTS (2 * RL_METRICS_RLS_RULES)
static pthread_mutex_t rls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *domain, *rule;
    size_t dlen, rlen;
} rls_names[RL_METRICS_RLS_RULES];
static int rls_slot[RLS_SLOTS]; /* id + 1; 0: free */
static int rls_n;

static uint64_t reloads_ok, reloads_failed, config_hash;
/* the last reload's outcome (1 ok, 0 failed, -1 none yet) and time (Unix us) */
static int64_t reload_last = -1, reload_last_us, started_us;
static const char *const redis_error_kinds[RL_RERR_COUNT] = {
    "oom",      "readonly",  "masterdown", "loading",   "busy",
    "noscript", "wrongtype", "cluster",    "bad_reply", "other"};

static const char *const admin_actions[RL_ADM_ACTION_COUNT] = {"inspect", "reset",  "block",
                                                               "unblock", "reward", "penalty"};
static const char *const admin_results[RL_ADM_RESULT_COUNT] = {"ok", "invalid", "unauthorized",
                                                               "error"};

/* Upper bounds in microseconds; the text form is seconds. */
static const int64_t lat_le_us[RL_LAT_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 5000000};

int
metrics_policy_id(const char *name)
{
    int id;

    pthread_mutex_lock(&reg_lock);
    for (id = 1; id < reg_n; id++)
        if (strcmp(reg_names[id], name) == 0)
            goto out;
    if (reg_n < RL_METRICS_POLICIES - 1) {
        reg_names[reg_n] = xstrdup(name);
        id = reg_n++;
    } else {
        id = RL_METRICS_POLICIES - 1; /* "other" */
    }
out:
    pthread_mutex_unlock(&reg_lock);
    return id;
}

int
metrics_rls_id(const char *domain, size_t dlen, const char *rule, size_t rlen)
{
    uint64_t h;
    size_t slot;
    int id;

    /* long labels are cut: they are for people, and bounded */
    dlen = dlen > RLS_LABEL_MAX ? RLS_LABEL_MAX : dlen;
    rlen = rlen > RLS_LABEL_MAX ? RLS_LABEL_MAX : rlen;
    h = fnv1a(fnv1a(FNV1A_INIT, domain, dlen) ^ 0xff, rule, rlen);
    pthread_mutex_lock(&rls_lock);
    for (slot = h % RLS_SLOTS; rls_slot[slot] != 0; slot = (slot + 1) % RLS_SLOTS) {
        id = rls_slot[slot] - 1;
        if (rls_names[id].dlen == dlen && rls_names[id].rlen == rlen &&
            memcmp(rls_names[id].domain, domain, dlen) == 0 &&
            memcmp(rls_names[id].rule, rule, rlen) == 0)
            goto out;
    }
    if (rls_n < RL_METRICS_RLS_RULES - 1) {
        id = rls_n++;
        rls_names[id].domain = xstrndup(domain, dlen);
        rls_names[id].rule = xstrndup(rule, rlen);
        rls_names[id].dlen = dlen;
        rls_names[id].rlen = rlen;
        rls_slot[slot] = id + 1;
    } else {
        id = RL_METRICS_RLS_RULES - 1; /* "(other)" */
    }
out:
    pthread_mutex_unlock(&rls_lock);
    return id;
}

int
metrics_rls_find(const char *domain, size_t dlen, const char *rule, size_t rlen)
{
    uint64_t h;
    int id = -1;

    if (dlen > RLS_LABEL_MAX || rlen > RLS_LABEL_MAX)
        return -1;
    h = fnv1a(fnv1a(FNV1A_INIT, domain, dlen) ^ 0xff, rule, rlen);
    pthread_mutex_lock(&rls_lock);
    for (size_t slot = h % RLS_SLOTS; rls_slot[slot] != 0; slot = (slot + 1) % RLS_SLOTS) {
        int i = rls_slot[slot] - 1;
        if (rls_names[i].dlen == dlen && rls_names[i].rlen == rlen &&
            memcmp(rls_names[i].domain, domain, dlen) == 0 &&
            memcmp(rls_names[i].rule, rule, rlen) == 0) {
            id = i;
            break;
        }
    }
    pthread_mutex_unlock(&rls_lock);
    return id;
}

int
metrics_rls_count(void)
{
    int n;

    pthread_mutex_lock(&rls_lock);
    n = rls_n;
    pthread_mutex_unlock(&rls_lock);
    return n;
}

void
metrics_rls_name(int id, const char **domain, size_t *dlen, const char **rule, size_t *rlen)
{
    /* written before rls_n counted it (under rls_lock), never again */
    *domain = rls_names[id].domain;
    *dlen = rls_names[id].dlen;
    *rule = rls_names[id].rule;
    *rlen = rls_names[id].rlen;
}

void
metrics_rls(struct rl_metrics *m, int id, enum rl_rls_stat s, uint64_t n)
{
    if (id < 0 || id >= RL_METRICS_RLS_RULES)
        id = RL_METRICS_RLS_RULES - 1;
    if (n > 0)
        __atomic_add_fetch(&m->rls_rules[id][s], n, __ATOMIC_RELAXED);
}

void
metrics_check(struct rl_metrics *m, int id, enum rl_outcome o)
{
    if (id < 0 || id >= RL_METRICS_POLICIES)
        id = RL_METRICS_POLICIES - 1;
    ADD(&m->checks[id][o]);
}

void
metrics_charge(struct rl_metrics *m, int id, int64_t units)
{
    if (id < 0 || id >= RL_METRICS_POLICIES)
        id = RL_METRICS_POLICIES - 1;
    __atomic_add_fetch(&m->charged[id], (uint64_t)units, __ATOMIC_RELAXED);
}

void
metrics_reservation(struct rl_metrics *m, enum rl_rsv_metric r)
{
    ADD(&m->reservations[r]);
}

void
metrics_reject(struct rl_metrics *m, enum rl_reject r)
{
    ADD(&m->rejected[r]);
}

static void
observe(struct rl_histogram *h, int64_t us)
{
    size_t i;

    for (i = 0; i < RL_LAT_BUCKETS && us > lat_le_us[i]; i++)
        ;
    if (i < RL_LAT_BUCKETS)
        ADD(&h->bucket[i]);
    else
        ADD(&h->inf);
    ADD(&h->count);
    __atomic_add_fetch(&h->sum_us, (uint64_t)(us > 0 ? us : 0), __ATOMIC_RELAXED);
}

void
metrics_backend(struct rl_metrics *m, enum rl_backend_status st, int64_t us)
{
    ADD(&m->backend_status[st]);
    observe(&m->backend_latency, us);
}

void
metrics_check_duration(struct rl_metrics *m, int64_t us)
{
    observe(&m->check_duration, us);
}

void
metrics_delayed(struct rl_metrics *m, int64_t us)
{
    ADD(&m->delayed);
    observe(&m->delay, us);
}

void
metrics_set_config_hash(uint64_t hash)
{
    __atomic_store_n(&config_hash, hash, __ATOMIC_RELAXED);
}

void
metrics_admin(struct rl_metrics *m, enum rl_admin_action a, enum rl_admin_result r)
{
    ADD(&m->admin[a][r]);
}

const char *
metrics_admin_action_name(enum rl_admin_action a)
{
    return admin_actions[a];
}

const char *
metrics_admin_result_name(enum rl_admin_result r)
{
    return admin_results[r];
}

/* rls.xds: written by the main thread, read by /metrics on the workers */
static int xds_up, xds_loaded;
static uint64_t xds_accepted, xds_rejected;
static char xds_version[256];
static pthread_mutex_t xds_lock = PTHREAD_MUTEX_INITIALIZER;

void
metrics_xds_connected(int up)
{
    __atomic_store_n(&xds_up, up, __ATOMIC_RELAXED);
}

void
metrics_xds_update(int accepted, const char *version)
{
    if (!accepted) {
        ADD(&xds_rejected);
        return;
    }
    ADD(&xds_accepted);
    pthread_mutex_lock(&xds_lock);
    snprintf(xds_version, sizeof(xds_version), "%s", version);
    xds_loaded = 1;
    pthread_mutex_unlock(&xds_lock);
}

/* The version as a label value: '"', '\\' and newlines escaped. */
static void
format_xds(struct evbuffer *out)
{
    char v[sizeof(xds_version) * 2];
    size_t j = 0;
    int loaded;

    pthread_mutex_lock(&xds_lock);
    for (size_t i = 0; xds_version[i] != '\0'; i++) {
        char c = xds_version[i];
        if (c == '"' || c == '\\' || c == '\n') {
            v[j++] = '\\';
            c = c == '\n' ? 'n' : c;
        }
        v[j++] = c;
    }
    v[j] = '\0';
    loaded = xds_loaded;
    pthread_mutex_unlock(&xds_lock);
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_rls_xds_connected The stream to the xDS server (rls.xds) is open.\n"
        "# TYPE ratelimitd_rls_xds_connected gauge\n"
        "ratelimitd_rls_xds_connected %d\n"
        "# HELP ratelimitd_rls_xds_updates_total Rule updates from the xDS server, by result.\n"
        "# TYPE ratelimitd_rls_xds_updates_total counter\n"
        "ratelimitd_rls_xds_updates_total{result=\"accepted\"} %llu\n"
        "ratelimitd_rls_xds_updates_total{result=\"rejected\"} %llu\n"
        "# HELP ratelimitd_rls_xds_rules_loaded Rules from the xDS server are in force.\n"
        "# TYPE ratelimitd_rls_xds_rules_loaded gauge\n"
        "ratelimitd_rls_xds_rules_loaded %d\n"
        "# HELP ratelimitd_rls_xds_version_info The version of the rules in force "
        "(version_info; empty: none).\n"
        "# TYPE ratelimitd_rls_xds_version_info gauge\n"
        "ratelimitd_rls_xds_version_info{version=\"%s\"} 1\n",
        __atomic_load_n(&xds_up, __ATOMIC_RELAXED), (unsigned long long)LOAD(&xds_accepted),
        (unsigned long long)LOAD(&xds_rejected), loaded, v);
}

void
metrics_started(void)
{
    __atomic_store_n(&started_us, now_monotonic_us(), __ATOMIC_RELAXED);
}

void
metrics_reloads(struct rl_reload_state *out)
{
    out->ok = __atomic_load_n(&reloads_ok, __ATOMIC_RELAXED);
    out->failed = __atomic_load_n(&reloads_failed, __ATOMIC_RELAXED);
    out->last = (int)__atomic_load_n(&reload_last, __ATOMIC_RELAXED);
    out->last_unix_us = __atomic_load_n(&reload_last_us, __ATOMIC_RELAXED);
    out->config_hash = __atomic_load_n(&config_hash, __ATOMIC_RELAXED);
    out->started_us = __atomic_load_n(&started_us, __ATOMIC_RELAXED);
}

void
metrics_reload(int ok, uint64_t hash)
{
    __atomic_store_n(&reload_last, ok ? 1 : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&reload_last_us, now_unix_us(), __ATOMIC_RELAXED);
    if (ok) {
        ADD(&reloads_ok);
        metrics_set_config_hash(hash);
    } else {
        ADD(&reloads_failed);
    }
}

static uint64_t
sum(struct rl_metrics *const *ms, size_t n, size_t off)
{
    uint64_t s = 0;

    for (size_t i = 0; i < n; i++)
        s += LOAD((const uint64_t *)(const void *)((const char *)ms[i] + off));
    return s;
}

#define SUM(field) sum(ms, n, offsetof(struct rl_metrics, field))

/* Checks answered, by policy and result. */
static void
format_checks(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    static const char *const outcomes[RL_OUT_COUNT] = {"allowed", "denied", "shadow_denied",
                                                       "degraded", "error"};
    int names;

    evbuffer_add_printf(
        out, "# HELP ratelimitd_checks_total Checks answered, by policy and result.\n"
             "# TYPE ratelimitd_checks_total counter\n");
    pthread_mutex_lock(&reg_lock);
    names = reg_n;
    pthread_mutex_unlock(&reg_lock);
    for (int id = 0; id < RL_METRICS_POLICIES; id++) {
        const char *name = id == 0                         ? ""
                           : id < names                    ? reg_names[id]
                           : id == RL_METRICS_POLICIES - 1 ? "(other)"
                                                           : NULL;
        if (name == NULL)
            continue;
        for (int o = 0; o < RL_OUT_COUNT; o++) {
            uint64_t v = SUM(checks[id][o]);
            /* a policy shows every result once it has any; unused ids stay quiet */
            if (v == 0 && (id == 0 || id == RL_METRICS_POLICIES - 1))
                continue;
            evbuffer_add_printf(out,
                                "ratelimitd_checks_total{policy=\"%s\",result=\"%s\"} %llu\n",
                                name, outcomes[o], (unsigned long long)v);
        }
    }
    evbuffer_add_printf(out, "# HELP ratelimitd_charged_units_total Units counted by POST "
                             "/charge, by policy.\n"
                             "# TYPE ratelimitd_charged_units_total counter\n");
    for (int id = 1; id < RL_METRICS_POLICIES; id++) {
        const char *name = id < names                      ? reg_names[id]
                           : id == RL_METRICS_POLICIES - 1 ? "(other)"
                                                           : NULL;
        uint64_t v = SUM(charged[id]);

        if (name == NULL || (v == 0 && id == RL_METRICS_POLICIES - 1))
            continue;
        evbuffer_add_printf(out, "ratelimitd_charged_units_total{policy=\"%s\"} %llu\n", name,
                            (unsigned long long)v);
    }
    {
        static const char *const results[RL_RSV_M_COUNT] = {"taken", "settled", "expired",
                                                            "unknown"};

        evbuffer_add_printf(out, "# HELP ratelimitd_reservations_total Reservations taken by "
                                 "checks, and settles by what they found.\n"
                                 "# TYPE ratelimitd_reservations_total counter\n");
        for (int r = 0; r < RL_RSV_M_COUNT; r++)
            evbuffer_add_printf(out, "ratelimitd_reservations_total{result=\"%s\"} %llu\n",
                                results[r], (unsigned long long)SUM(reservations[r]));
    }
    /* charges kept for the backend (pending.h) */
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_charges_pending Charges answered 202 and not applied yet.\n"
        "# TYPE ratelimitd_charges_pending gauge\n"
        "ratelimitd_charges_pending %llu\n"
        "# HELP ratelimitd_charges_pending_units Units of the charges answered 202 and not applied yet.\n"
        "# TYPE ratelimitd_charges_pending_units gauge\n"
        "ratelimitd_charges_pending_units %llu\n"
        "# HELP ratelimitd_charges_deferred_total Charges answered 202, kept for the backend.\n"
        "# TYPE ratelimitd_charges_deferred_total counter\n"
        "ratelimitd_charges_deferred_total %llu\n"
        "# HELP ratelimitd_charges_lost_total Kept charges given up (at exit, or refused by Redis).\n"
        "# TYPE ratelimitd_charges_lost_total counter\n"
        "ratelimitd_charges_lost_total %llu\n"
        "# HELP ratelimitd_charges_refused_total Charges answered 503: backlog full.\n"
        "# TYPE ratelimitd_charges_refused_total counter\n"
        "ratelimitd_charges_refused_total %llu\n",
        (unsigned long long)SUM(charges_pending),
        (unsigned long long)SUM(charges_pending_units),
        (unsigned long long)SUM(charges_deferred), (unsigned long long)SUM(charges_lost),
        (unsigned long long)SUM(charges_refused));
}

/* Requests refused before a check, and the check listener's connections. */
static void
format_requests(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    static const char *const rejects[RL_REJ_COUNT] = {"bad_request", "too_large",
                                                      "overloaded",  "draining",
                                                      "not_found",   "method_not_allowed"};

    evbuffer_add_printf(
        out, "# HELP ratelimitd_requests_rejected_total Requests refused before a check ran.\n"
             "# TYPE ratelimitd_requests_rejected_total counter\n");
    for (int r = 0; r < RL_REJ_COUNT; r++) {
        /* the HTTP layer refuses malformed and oversize requests itself */
        uint64_t v = SUM(rejected[r]) + (r == RL_REJ_BAD_REQUEST  ? SUM(http.bad_request)
                                         : r == RL_REJ_TOO_LARGE  ? SUM(http.too_large)
                                         : r == RL_REJ_OVERLOADED ? SUM(http.overloaded)
                                                                  : 0);
        evbuffer_add_printf(out, "ratelimitd_requests_rejected_total{reason=\"%s\"} %llu\n",
                            rejects[r], (unsigned long long)v);
    }
    evbuffer_add_printf(
        out,
        "ratelimitd_requests_rejected_total{reason=\"timeout\"} %llu\n"
        "# HELP ratelimitd_connections_accepted_total Connections accepted on the check listener.\n"
        "# TYPE ratelimitd_connections_accepted_total counter\n"
        "ratelimitd_connections_accepted_total %llu\n"
        "# HELP ratelimitd_connections_open Connections open on the check listener.\n"
        "# TYPE ratelimitd_connections_open gauge\n"
        "ratelimitd_connections_open %llu\n"
        "# HELP ratelimitd_http_buffered_bytes Request bytes both listeners buffer past each HTTP/1.1 connection's first 4 KiB and each gRPC message's first 512 bytes (http.max_buffered bounds it).\n"
        "# TYPE ratelimitd_http_buffered_bytes gauge\n"
        "ratelimitd_http_buffered_bytes %lld\n",
        (unsigned long long)SUM(http.timeouts), (unsigned long long)SUM(http.accepted),
        (unsigned long long)SUM(http.open), (long long)bufpool_bytes());
}

/* One histogram family, summed over the workers; `off` is its offset in
 * struct rl_metrics. */
static void
format_histogram(struct evbuffer *out, struct rl_metrics *const *ms, size_t n,
                 const char *name, const char *help, size_t off)
{
    uint64_t cum = 0;

    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int b = 0; b < RL_LAT_BUCKETS; b++) {
        cum += sum(ms, n,
                   off + offsetof(struct rl_histogram, bucket) + (size_t)b * sizeof(uint64_t));
        evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name,
                            (double)lat_le_us[b] / 1e6, (unsigned long long)cum);
    }
    cum += sum(ms, n, off + offsetof(struct rl_histogram, inf));
    evbuffer_add_printf(
        out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)cum, name,
        (double)sum(ms, n, off + offsetof(struct rl_histogram, sum_us)) / 1e6, name,
        (unsigned long long)sum(ms, n, off + offsetof(struct rl_histogram, count)));
}

/* The gRPC listener (rls.listen): connections, streams, answers by status,
 * what the transport turned away itself. */
static void
format_grpc(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_rls_connections_accepted_total Connections accepted on the gRPC listener (rls.listen).\n"
        "# TYPE ratelimitd_rls_connections_accepted_total counter\n"
        "ratelimitd_rls_connections_accepted_total %llu\n"
        "# HELP ratelimitd_rls_connections_open Connections open on the gRPC listener.\n"
        "# TYPE ratelimitd_rls_connections_open gauge\n"
        "ratelimitd_rls_connections_open %llu\n"
        "# HELP ratelimitd_rls_idle_closes_total gRPC connections closed after rls.idle_timeout unused (or unread).\n"
        "# TYPE ratelimitd_rls_idle_closes_total counter\n"
        "ratelimitd_rls_idle_closes_total %llu\n"
        "# HELP ratelimitd_rls_connections_aged_total gRPC connections told GOAWAY at rls.max_connection_age.\n"
        "# TYPE ratelimitd_rls_connections_aged_total counter\n"
        "ratelimitd_rls_connections_aged_total %llu\n"
        "# HELP ratelimitd_rls_streams_total gRPC calls (HTTP/2 streams) opened.\n"
        "# TYPE ratelimitd_rls_streams_total counter\n"
        "ratelimitd_rls_streams_total %llu\n"
        "# HELP ratelimitd_rls_streams_cancelled_total gRPC calls the client reset (or lost) before their answer.\n"
        "# TYPE ratelimitd_rls_streams_cancelled_total counter\n"
        "ratelimitd_rls_streams_cancelled_total %llu\n"
        "# HELP ratelimitd_rls_responses_total gRPC answers, by grpc-status.\n"
        "# TYPE ratelimitd_rls_responses_total counter\n",
        (unsigned long long)SUM(grpc.accepted), (unsigned long long)SUM(grpc.open),
        (unsigned long long)SUM(grpc.idle), (unsigned long long)SUM(grpc.aged),
        (unsigned long long)SUM(grpc.calls), (unsigned long long)SUM(grpc.cancelled));
    for (int s = 0; s < GRPC_STATUS_COUNT; s++)
        evbuffer_add_printf(out, "ratelimitd_rls_responses_total{grpc_status=\"%s\"} %llu\n",
                            grpc_status_name((enum grpc_status)s),
                            (unsigned long long)SUM(grpc.status[s]));
    evbuffer_add_printf(out,
                        "# HELP ratelimitd_rls_refused_total Connections and requests the "
                        "gRPC listener turned away itself, by reason.\n"
                        "# TYPE ratelimitd_rls_refused_total counter\n");
    for (int r = 0; r < GRPC_REF_COUNT; r++)
        evbuffer_add_printf(out, "ratelimitd_rls_refused_total{reason=\"%s\"} %llu\n",
                            grpc_refusal_name((enum grpc_refusal)r),
                            (unsigned long long)SUM(grpc.refused[r]));
}

/* Backend calls by outcome, and how long they took. */
static void
format_backend(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    static const char *const statuses[4] = {"ok", "down", "timeout", "error"};

    evbuffer_add_printf(out,
                        "# HELP ratelimitd_backend_requests_total Backend calls by outcome.\n"
                        "# TYPE ratelimitd_backend_requests_total counter\n");
    for (int st = 0; st < 4; st++)
        evbuffer_add_printf(out, "ratelimitd_backend_requests_total{status=\"%s\"} %llu\n",
                            statuses[st], (unsigned long long)SUM(backend_status[st]));
    format_histogram(out, ms, n, "ratelimitd_backend_latency_seconds",
                     "Time from asking the backend to its answer.",
                     offsetof(struct rl_metrics, backend_latency));
}

/* A label value as the text format takes it: printable ASCII, \\ and \"
 * escaped, any other byte '_' (a request's values may hold anything). */
static void
add_label(struct evbuffer *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '"')
            evbuffer_add_printf(out, "\\%c", c);
        else
            evbuffer_add(out, c >= 0x20 && c < 0x7f ? (const char *)&s[i] : "_", 1);
    }
}

/* Envoy's rate limit service: requests, and hits per domain and rule. */
static void
format_rls_rules(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    static const char *const results[RL_RLS_RESULT_COUNT] = {"ok", "over_limit", "invalid",
                                                             "unavailable"};
    static const struct {
        const char *name, *help;
    } stats[RL_RLS_STAT_COUNT] = {
        {"ratelimitd_rls_hits_total", "Hits asked for (hits_addend), by domain and rule."},
        {"ratelimitd_rls_within_limit_total", "Hits within the rule's limit."},
        {"ratelimitd_rls_near_limit_total",
         "Hits that landed past rls.near_limit_ratio of the limit and within it."},
        {"ratelimitd_rls_over_limit_total", "Hits over the rule's limit."},
        {"ratelimitd_rls_shadow_mode_total",
         "Hits over the limit of a shadow_mode rule (answered OK)."},
        {"ratelimitd_rls_charged_units_total",
         "Hits counted as charges, over the limit too (count_over_limit)."},
    };
    int names;

    evbuffer_add_printf(
        out, "# HELP ratelimitd_rls_requests_total ShouldRateLimit requests (gRPC and "
             "POST /json), by result.\n"
             "# TYPE ratelimitd_rls_requests_total counter\n");
    for (int r = 0; r < RL_RLS_RESULT_COUNT; r++)
        evbuffer_add_printf(out, "ratelimitd_rls_requests_total{result=\"%s\"} %llu\n",
                            results[r], (unsigned long long)SUM(rls_requests[r]));
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_rls_domain_not_found_total Descriptors of a domain no rule file has.\n"
        "# TYPE ratelimitd_rls_domain_not_found_total counter\n"
        "ratelimitd_rls_domain_not_found_total %llu\n"
        "# HELP ratelimitd_rls_global_shadow_mode_total Requests over a limit answered OK by rls.shadow_mode.\n"
        "# TYPE ratelimitd_rls_global_shadow_mode_total counter\n"
        "ratelimitd_rls_global_shadow_mode_total %llu\n",
        (unsigned long long)SUM(rls_domain_not_found),
        (unsigned long long)SUM(rls_global_shadow));
    pthread_mutex_lock(&rls_lock);
    names = rls_n;
    pthread_mutex_unlock(&rls_lock);
    for (int s = 0; s < RL_RLS_STAT_COUNT; s++) {
        evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n", stats[s].name,
                            stats[s].help, stats[s].name);
        for (int id = 0; id < RL_METRICS_RLS_RULES; id++) {
            uint64_t v = SUM(rls_rules[id][s]);
            /* the gathering series always, so every family has a sample */
            if (id >= names && id != RL_METRICS_RLS_RULES - 1)
                continue;
            evbuffer_add_printf(out, "%s{domain=\"", stats[s].name);
            if (id < names)
                add_label(out, rls_names[id].domain, rls_names[id].dlen);
            evbuffer_add_printf(out, "\",rule=\"");
            if (id < names)
                add_label(out, rls_names[id].rule, rls_names[id].rlen);
            else
                evbuffer_add_printf(out, "(other)");
            evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)v);
        }
    }
}

/* Bounds on what callers bring: the zones they name, the caps on their
 * own limits (docs/API.md, "Limits from the caller"). */
static void
format_caller_bounds(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    struct period_tz_stats tz;

    period_tz_stats(&tz);
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_time_zones_loaded Time zones loaded, named by configurations and only by requests.\n"
        "# TYPE ratelimitd_time_zones_loaded gauge\n"
        "ratelimitd_time_zones_loaded{table=\"configured\"} %zu\n"
        "ratelimitd_time_zones_loaded{table=\"requested\"} %zu\n"
        "# HELP ratelimitd_time_zones_refused_total Requests' zones refused: the requests' table was full.\n"
        "# TYPE ratelimitd_time_zones_refused_total counter\n"
        "ratelimitd_time_zones_refused_total %llu\n"
        "# HELP ratelimitd_request_limits_capped_total Checks their own limits allowed and a request_limits_cap denied.\n"
        "# TYPE ratelimitd_request_limits_capped_total counter\n"
        "ratelimitd_request_limits_capped_total %llu\n",
        tz.configured, tz.requested, (unsigned long long)tz.refused,
        (unsigned long long)SUM(request_limits_capped));
}

void
metrics_format(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    evbuffer_add_printf(out,
                        "# HELP ratelimitd_build_info Build information.\n"
                        "# TYPE ratelimitd_build_info gauge\n"
                        "ratelimitd_build_info{version=\"%s\"} 1\n",
                        PACKAGE_VERSION);
    format_checks(out, ms, n);
    format_requests(out, ms, n);
    format_grpc(out, ms, n);
    format_backend(out, ms, n);
    evbuffer_add_printf(out,
                        "# HELP ratelimitd_checks_delayed_total Checks held for max_delay "
                        "before their 200.\n"
                        "# TYPE ratelimitd_checks_delayed_total counter\n"
                        "ratelimitd_checks_delayed_total %llu\n"
                        "# HELP ratelimitd_checks_delayed_waiting Checks held now.\n"
                        "# TYPE ratelimitd_checks_delayed_waiting gauge\n"
                        "ratelimitd_checks_delayed_waiting %llu\n",
                        (unsigned long long)SUM(delayed),
                        (unsigned long long)SUM(delayed_waiting));
    format_histogram(out, ms, n, "ratelimitd_check_delay_seconds",
                     "How long held checks waited (max_delay).",
                     offsetof(struct rl_metrics, delay));
    format_histogram(out, ms, n, "ratelimitd_check_duration_seconds",
                     "Time from the first byte of a check's request read to its answer.",
                     offsetof(struct rl_metrics, check_duration));
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_local_cache_hits_total Checks answered from the local cache.\n"
        "# TYPE ratelimitd_local_cache_hits_total counter\n"
        "ratelimitd_local_cache_hits_total %llu\n"
        "# HELP ratelimitd_hybrid_local_decisions_total Checks of hybrid policies decided in the worker, without Redis.\n"
        "# TYPE ratelimitd_hybrid_local_decisions_total counter\n"
        "ratelimitd_hybrid_local_decisions_total %llu\n"
        "# HELP ratelimitd_hybrid_syncs_total Syncs of hybrid counts sent to the backend.\n"
        "# TYPE ratelimitd_hybrid_syncs_total counter\n"
        "ratelimitd_hybrid_syncs_total %llu\n"
        "# HELP ratelimitd_hybrid_sync_failures_total Syncs that failed or timed out (their counts are sent again).\n"
        "# TYPE ratelimitd_hybrid_sync_failures_total counter\n"
        "ratelimitd_hybrid_sync_failures_total %llu\n"
        "# HELP ratelimitd_hybrid_pending_units Cost units admitted by hybrid policies and not yet acknowledged by the backend.\n"
        "# TYPE ratelimitd_hybrid_pending_units gauge\n"
        "ratelimitd_hybrid_pending_units %llu\n"
        "# HELP ratelimitd_hybrid_keys Keys of hybrid policies known locally.\n"
        "# TYPE ratelimitd_hybrid_keys gauge\n"
        "ratelimitd_hybrid_keys %llu\n"
        "# HELP ratelimitd_inflight_checks Checks waiting for the backend.\n"
        "# TYPE ratelimitd_inflight_checks gauge\n"
        "ratelimitd_inflight_checks %llu\n"
        "# HELP ratelimitd_backend_reconnects_total Connections to the backend re-established.\n"
        "# TYPE ratelimitd_backend_reconnects_total counter\n"
        "ratelimitd_backend_reconnects_total %llu\n"
        "# HELP ratelimitd_config_reloads_total Configuration reloads by result.\n"
        "# TYPE ratelimitd_config_reloads_total counter\n"
        "ratelimitd_config_reloads_total{result=\"ok\"} %llu\n"
        "ratelimitd_config_reloads_total{result=\"failed\"} %llu\n"
        "# HELP ratelimitd_config_info The loaded configuration (FNV-1a hash of the file).\n"
        "# TYPE ratelimitd_config_info gauge\n"
        "ratelimitd_config_info{hash=\"%016llx\"} 1\n",
        (unsigned long long)SUM(local_cache_hits), (unsigned long long)SUM(hybrid_local),
        (unsigned long long)SUM(hybrid_syncs), (unsigned long long)SUM(hybrid_sync_failures),
        (unsigned long long)SUM(hybrid_pending), (unsigned long long)SUM(hybrid_entries),
        (unsigned long long)SUM(inflight), (unsigned long long)rconn_reconnects_total(),
        (unsigned long long)LOAD(&reloads_ok), (unsigned long long)LOAD(&reloads_failed),
        (unsigned long long)LOAD(&config_hash));
    format_caller_bounds(out, ms, n);
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_redis_errors_total Checks answered by an error reply from Redis, by kind.\n"
        "# TYPE ratelimitd_redis_errors_total counter\n");
    for (int k = 0; k < RL_RERR_COUNT; k++)
        evbuffer_add_printf(out, "ratelimitd_redis_errors_total{kind=\"%s\"} %llu\n",
                            redis_error_kinds[k],
                            (unsigned long long)rconn_errors_total((enum rl_redis_error)k));
    format_rls_rules(out, ms, n);
    format_xds(out);
}

/* A rule's label split as envoyproxy/ratelimit's stat name is: the first
 * level, and the second (absent: *k2 NULL); the rest is not a label. */
static void
envoy_keys(int id, const char **k1, size_t *l1, const char **k2, size_t *l2)
{
    const char *r = rls_names[id].rule, *end = r + rls_names[id].rlen;
    const char *dot = memchr(r, '.', rls_names[id].rlen), *dot2;

    *k1 = r;
    *l1 = dot != NULL ? (size_t)(dot - r) : rls_names[id].rlen;
    *k2 = NULL;
    *l2 = 0;
    if (dot == NULL)
        return;
    *k2 = dot + 1;
    dot2 = memchr(*k2, '.', (size_t)(end - *k2));
    *l2 = dot2 != NULL ? (size_t)(dot2 - *k2) : (size_t)(end - *k2);
}

/* The order of rules a and b by envoyproxy/ratelimit's labels (domain,
 * key1, key2; no key2 first): 0 when they count under one series. */
static int
envoy_cmp(int a, int b)
{
    const char *a1, *a2, *b1, *b2;
    size_t al1, al2, bl1, bl2;
    int c;

    if (rls_names[a].dlen != rls_names[b].dlen)
        return rls_names[a].dlen < rls_names[b].dlen ? -1 : 1;
    if ((c = memcmp(rls_names[a].domain, rls_names[b].domain, rls_names[a].dlen)) != 0)
        return c;
    envoy_keys(a, &a1, &al1, &a2, &al2);
    envoy_keys(b, &b1, &bl1, &b2, &bl2);
    if (al1 != bl1)
        return al1 < bl1 ? -1 : 1;
    if ((c = memcmp(a1, b1, al1)) != 0)
        return c;
    if ((a2 == NULL) != (b2 == NULL))
        return a2 == NULL ? -1 : 1;
    if (al2 != bl2)
        return al2 < bl2 ? -1 : 1;
    return a2 == NULL ? 0 : memcmp(a2, b2, al2);
}

static int
envoy_qsort_cmp(const void *a, const void *b)
{
    return envoy_cmp(*(const int *)a, *(const int *)b);
}

void
metrics_format_envoy(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    static const char *const names[RL_RLS_ENVOY_STATS][2] = {
        {"ratelimit_service_rate_limit_total_hits", "ratelimitd_rls_hits_total"},
        {"ratelimit_service_rate_limit_within_limit", "ratelimitd_rls_within_limit_total"},
        {"ratelimit_service_rate_limit_near_limit", "ratelimitd_rls_near_limit_total"},
        {"ratelimit_service_rate_limit_over_limit", "ratelimitd_rls_over_limit_total"},
        {"ratelimit_service_rate_limit_shadow_mode", "ratelimitd_rls_shadow_mode_total"},
    };
    int order[RL_METRICS_RLS_RULES];
    int count;

    pthread_mutex_lock(&rls_lock);
    count = rls_n;
    pthread_mutex_unlock(&rls_lock);
    /* sorted by label set: rules deeper than two levels that differ below
     * the second are neighbours, summed into one series as its mapper sums
     * them */
    for (int i = 0; i < count; i++)
        order[i] = i;
    qsort(order, (size_t)count, sizeof(order[0]), envoy_qsort_cmp);
    for (int s = 0; s < RL_RLS_ENVOY_STATS; s++) {
        evbuffer_add_printf(out,
                            "# HELP %s %s under envoyproxy/ratelimit's name and labels.\n"
                            "# TYPE %s counter\n",
                            names[s][0], names[s][1], names[s][0]);
        for (int i = 0; i < count;) {
            int id = order[i];
            const char *k1, *k2;
            size_t l1, l2;
            uint64_t v = 0;

            for (; i < count && envoy_cmp(order[i], id) == 0; i++)
                v += SUM(rls_rules[order[i]][s]);
            envoy_keys(id, &k1, &l1, &k2, &l2);
            evbuffer_add_printf(out, "%s{domain=\"", names[s][0]);
            add_label(out, rls_names[id].domain, rls_names[id].dlen);
            evbuffer_add_printf(out, "\",key1=\"");
            add_label(out, k1, l1);
            if (k2 != NULL) {
                evbuffer_add_printf(out, "\",key2=\"");
                add_label(out, k2, l2);
            }
            evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)v);
        }
    }
}

void
metrics_format_admin(struct evbuffer *out, struct rl_metrics *const *ms, size_t n)
{
    evbuffer_add_printf(
        out,
        "# HELP ratelimitd_admin_actions_total Admin API requests, by action and result.\n"
        "# TYPE ratelimitd_admin_actions_total counter\n");
    for (int a = 0; a < RL_ADM_ACTION_COUNT; a++)
        for (int r = 0; r < RL_ADM_RESULT_COUNT; r++)
            evbuffer_add_printf(
                out, "ratelimitd_admin_actions_total{action=\"%s\",result=\"%s\"} %llu\n",
                admin_actions[a], admin_results[r], (unsigned long long)SUM(admin[a][r]));
}
