/*
 * config.c — ratelimitd's options: the tables (one row per option, walked by
 * schema.c), their cross-field checks, and the one pass that builds what is
 * derived from them (finalize); the files they come from and reload.  The
 * policies' own rows, checks and finalisation are policy.c's.
 *
 * A new option is one row in the table of the object holding it, written
 * with designated initialisers; a check of several fields goes in that
 * table's check hook, which only reads; anything computed from the values
 * goes in finalize().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <jansson.h>

#include "config.h"
#include "algo.h"
#include "netaddr.h"
#include "pathnorm.h"
#include "policy.h"
#include "redis_url.h"
#include "rls_rules.h"
#include "util.h"

#define SECRET_MAX 4096 /* bytes of a password read from a file */
/* ---- types of our own: CIDR lists, path folds, ratios --------------------- */

static void
free_cidrs(void *at)
{
    struct rl_cidr_list *l = at;

    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void
parse_cidrs(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    struct rl_cidr_list *out = at;
    size_t i;
    json_t *e;

    free_cidrs(out);
    if (!json_is_array(v)) {
        schema_bad(ctx, path, "must be a list of CIDRs like \"10.0.0.0/8\", \"::1/128\"");
        return;
    }
    out->v = xcalloc(json_array_size(v), sizeof(*out->v));
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        if (s == NULL || cidr_parse(s, &out->v[out->n]) != RL_OK)
            schema_bad_item(ctx, path, i, "must be a CIDR like \"10.0.0.0/8\" or \"::1/128\"");
        else
            out->n++;
    }
}

/* path_fold: a list of "case", "params", "trailing_slash". */
static void
parse_folds(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    static const struct {
        const char *name;
        unsigned bit;
    } folds[] = {
        {"case", RL_PATHFOLD_CASE},
        {"params", RL_PATHFOLD_PARAMS},
        {"trailing_slash", RL_PATHFOLD_SLASH},
    };
    unsigned *out = at;
    size_t i;
    json_t *e;

    *out = 0;
    if (!json_is_array(v)) {
        schema_bad(ctx, path,
                   "must be a list of \"case\", \"params\", \"trailing_slash\" (or [])");
        return;
    }
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        unsigned bit = 0;

        for (size_t k = 0; s != NULL && k < RL_ARRAY_LEN(folds); k++)
            if (strcmp(s, folds[k].name) == 0)
                bit = folds[k].bit;
        if (bit == 0)
            schema_bad_item(ctx, path, i,
                            "must be \"case\" (letters in any case), \"params\" (\";...\" "
                            "in a segment) or \"trailing_slash\"");
        *out |= bit;
    }
}

static void
free_nothing(void *at)
{
    (void)at;
}

/* A share of a limit: a number in (0, 1]. */
static void
parse_ratio(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    double *out = at;
    double d = json_number_value(v);

    if (!json_is_number(v) || !(d > 0 && d <= 1)) {
        schema_bad(ctx, path, "must be a number above 0 and at most 1, like 0.8");
        return;
    }
    *out = d;
}

static const struct schema_custom ratio_type = {parse_ratio, free_nothing, 1};
static const struct schema_custom cidrs_type = {parse_cidrs, free_cidrs, 1};
static const struct schema_custom folds_type = {parse_folds, free_nothing, 1};

/* ---- the tables --------------------------------------------------------- */

/* one row per option; clang-format would put each field of a row on a line of its own */
/* clang-format off */

static const char *const backend_names[] = {"redis", "memory", NULL};
static const char *const failure_names[] = {"open", "closed", "local", NULL};
static const char *const fwd_header_names[] = {"x-forwarded-for", "forwarded", NULL};
static const char *const reqhdr_names[] = {"original", "forwarded", "auto", NULL};
static const char *const badpath_names[] = {"reject", "raw", NULL};
static const char *const reset_names[] = {"delta", "epoch", NULL};

static void check_sentinel(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_tls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_redis(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_rls_tls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_header_names(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_rls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_top(const void *obj, const char *path, struct schema_ctx *ctx);

/* offsetof in the struct a table describes */
#define SENTINEL(m) offsetof(struct rl_sentinel_conf, m)
#define TLS(m) offsetof(struct rl_tls_conf, m)
#define REDIS(m) offsetof(struct rl_redis_conf, m)
#define HTTP(m) offsetof(struct rl_http_conf, m)
#define RLS_TLS(m) offsetof(struct rl_rls_tls_conf, m)
#define RLS(m) offsetof(struct rl_rls_conf, m)
#define HNAMES(m) offsetof(struct rl_rls_header_names, m)
#define TOP(m) offsetof(struct rl_config, m)

static const struct schema_field sentinel_fields[] = {
    {.name = "master", .type = SCHEMA_STRING, .off = SENTINEL(master),
     .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "nodes", .type = SCHEMA_STRLIST, .off = SENTINEL(nodes),
     .flags = SCHEMA_REQUIRED | SCHEMA_RESTART},
    {.name = "password", .type = SCHEMA_STRING, .off = SENTINEL(password),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
};
static const struct schema sentinel_schema = {
    SCHEMA_FIELDS(sentinel_fields), sizeof(struct rl_sentinel_conf), check_sentinel, NULL
};

/* File names are reloadable: a reload reads them again (rotation). */
static const struct schema_field tls_fields[] = {
    {.name = "enabled", .type = SCHEMA_BOOL, .off = TLS(enabled), .def = "false",
     .flags = SCHEMA_RESTART},
    {.name = "ca_file", .type = SCHEMA_STRING, .off = TLS(ca_file), .flags = SCHEMA_NONEMPTY},
    {.name = "cert_file", .type = SCHEMA_STRING, .off = TLS(cert_file),
     .flags = SCHEMA_NONEMPTY},
    {.name = "key_file", .type = SCHEMA_STRING, .off = TLS(key_file), .flags = SCHEMA_NONEMPTY},
    {.name = "server_name", .type = SCHEMA_STRING, .off = TLS(server_name),
     .flags = SCHEMA_NONEMPTY},
    {.name = "verify", .type = SCHEMA_BOOL, .off = TLS(verify), .def = "true"},
};
static const struct schema tls_schema = {
    SCHEMA_FIELDS(tls_fields), sizeof(struct rl_tls_conf), check_tls, NULL
};

static const struct schema_field redis_fields[] = {
    {.name = "url", .type = SCHEMA_STRING, .off = REDIS(url),
     .def = "\"redis://127.0.0.1:6379/0\"", .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "cluster", .type = SCHEMA_STRLIST, .off = REDIS(cluster), .flags = SCHEMA_RESTART},
    {.name = "sentinel", .type = SCHEMA_OBJECT, .off = REDIS(sentinel), .sub = &sentinel_schema},
    {.name = "timeout", .type = SCHEMA_DURATION, .off = REDIS(timeout_ms), .def = "\"50ms\"",
     .min = 1, .max = 60000},
    {.name = "connect_timeout", .type = SCHEMA_DURATION, .off = REDIS(connect_timeout_ms),
     .def = "\"1s\"", .min = 1, .max = 600000, .flags = SCHEMA_RESTART},
    {.name = "max_pending", .type = SCHEMA_INT, .off = REDIS(max_pending), .def = "1000",
     .min = 16, .max = 65536, .flags = SCHEMA_RESTART},
    {.name = "coalesce", .type = SCHEMA_INT, .off = REDIS(coalesce), .def = "64", .min = 1,
     .max = 1024, .flags = SCHEMA_RESTART},
    {.name = "key_prefix", .type = SCHEMA_STRING, .off = REDIS(key_prefix), .def = "\"rl:\""},
    {.name = "username", .type = SCHEMA_STRING, .off = REDIS(username), .flags = SCHEMA_RESTART},
    {.name = "password", .type = SCHEMA_STRING, .off = REDIS(password), .flags = SCHEMA_RESTART},
    /* read into password by finalize, at every load */
    {.name = "password_file", .type = SCHEMA_STRING, .off = REDIS(password_file),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "tls", .type = SCHEMA_OBJECT, .off = REDIS(tls), .sub = &tls_schema},
};
static const struct schema redis_schema = {
    SCHEMA_FIELDS(redis_fields), sizeof(struct rl_redis_conf), check_redis, NULL
};

static const struct schema_field http_fields[] = {
    {.name = "header_timeout", .type = SCHEMA_DURATION, .off = HTTP(header_timeout_ms),
     .def = "\"10s\"", .min = 10, .max = 3600 * 1000},
    {.name = "body_timeout", .type = SCHEMA_DURATION, .off = HTTP(body_timeout_ms),
     .def = "\"10s\"", .min = 10, .max = 3600 * 1000},
    {.name = "idle_timeout", .type = SCHEMA_DURATION, .off = HTTP(idle_timeout_ms),
     .def = "\"60s\"", .min = 10, .max = 3600 * 1000},
    {.name = "max_header_bytes", .type = SCHEMA_SIZE, .off = HTTP(max_header_bytes),
     .def = "\"16k\"", .min = 256, .max = 1024 * 1024},
    {.name = "max_pipelined", .type = SCHEMA_INT, .off = HTTP(max_pipelined), .def = "32",
     .min = 1, .max = 1024},
    {.name = "max_connections", .type = SCHEMA_INT, .off = HTTP(max_connections),
     .def = "10000", .min = 1, .max = 10000000},
    /* after SIGTERM, how long a keep-alive connection between requests
     * may still bring one (a busy client's next, maybe in the kernel's
     * buffer already) before its lingering close */
    {.name = "drain_idle", .type = SCHEMA_DURATION, .off = HTTP(drain_idle_ms),
     .def = "\"1s\"", .min = 0, .max = 60 * 1000},
    /* request bytes buffered, the whole daemon, both listeners (bufpool.h):
     * slow bodies and declared messages cannot hold memory without bound */
    {.name = "max_buffered", .type = SCHEMA_SIZE, .off = HTTP(max_buffered), .def = "\"64m\"",
     .min = 64 * 1024, .max = 16LL * 1024 * 1024 * 1024},
};
static const struct schema http_schema = {
    SCHEMA_FIELDS(http_fields), sizeof(struct rl_http_conf), NULL, NULL
};

/* File names are reloadable: a reload reads them again (rotation). */
static const struct schema_field rls_tls_fields[] = {
    {.name = "cert_file", .type = SCHEMA_STRING, .off = RLS_TLS(cert_file),
     .flags = SCHEMA_NONEMPTY},
    {.name = "key_file", .type = SCHEMA_STRING, .off = RLS_TLS(key_file),
     .flags = SCHEMA_NONEMPTY},
    {.name = "client_ca_file", .type = SCHEMA_STRING, .off = RLS_TLS(client_ca_file),
     .flags = SCHEMA_NONEMPTY},
};
static const struct schema rls_tls_schema = {
    SCHEMA_FIELDS(rls_tls_fields), sizeof(struct rl_rls_tls_conf), check_rls_tls, NULL
};

static const struct schema_field header_names_fields[] = {
    {.name = "limit", .type = SCHEMA_STRING, .off = HNAMES(limit), .flags = SCHEMA_NONEMPTY},
    {.name = "remaining", .type = SCHEMA_STRING, .off = HNAMES(remaining),
     .flags = SCHEMA_NONEMPTY},
    {.name = "reset", .type = SCHEMA_STRING, .off = HNAMES(reset), .flags = SCHEMA_NONEMPTY},
};
static const struct schema header_names_schema = {
    SCHEMA_FIELDS(header_names_fields), sizeof(struct rl_rls_header_names), check_header_names,
    NULL
};

static const struct schema_field rls_fields[] = {
    {.name = "listen", .type = SCHEMA_STRING, .off = RLS(listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "tls", .type = SCHEMA_OBJECT, .off = RLS(tls), .sub = &rls_tls_schema},
    {.name = "config", .type = SCHEMA_STRING, .off = RLS(config), .flags = SCHEMA_NONEMPTY},
    {.name = "response_headers", .type = SCHEMA_BOOL, .off = RLS(response_headers),
     .def = "false"},
    {.name = "header_names", .type = SCHEMA_OBJECT, .off = RLS(header_names),
     .sub = &header_names_schema},
    {.name = "shadow_mode", .type = SCHEMA_BOOL, .off = RLS(shadow_mode), .def = "false"},
    {.name = "envoy_metrics", .type = SCHEMA_BOOL, .off = RLS(envoy_metrics), .def = "false"},
    {.name = "all_or_nothing", .type = SCHEMA_BOOL, .off = RLS(all_or_nothing), .def = "false"},
    {.name = "near_limit_ratio", .type = SCHEMA_CUSTOM, .off = RLS(near_limit_ratio),
     .def = "0.8", .custom = &ratio_type},
    /* a descriptor's own limit, as POST /check's "limits" under a policy's
     * request_limits; true: Envoy's RateLimitOverride counts, as in
     * envoyproxy/ratelimit */
    {.name = "request_limits", .type = SCHEMA_BOOL, .off = RLS(request_limits),
     .def = "true"},
    /* 0 (absent): no cap */
    {.name = "request_limits_max", .type = SCHEMA_INT, .off = RLS(request_limits_max),
     .min = 1, .max = 1000000000000000LL}, /* RL_COST_MAX, written out for docs/API.md's test */
    {.name = "max_message", .type = SCHEMA_SIZE, .off = RLS(max_message), .def = "\"64k\"",
     .min = 256, .max = 4 * 1024 * 1024},
    {.name = "max_concurrent_streams", .type = SCHEMA_INT, .off = RLS(max_concurrent_streams),
     .def = "100", .min = 1, .max = 65536},
    {.name = "max_header_list", .type = SCHEMA_SIZE, .off = RLS(max_header_list),
     .def = "\"16k\"", .min = 1024, .max = 1024 * 1024},
    {.name = "max_connections", .type = SCHEMA_INT, .off = RLS(max_connections),
     .def = "10000", .min = 1, .max = 10000000},
    {.name = "idle_timeout", .type = SCHEMA_DURATION, .off = RLS(idle_timeout_ms),
     .def = "\"5m\"", .min = 10, .max = 24 * 3600 * 1000},
    {.name = "max_connection_age", .type = SCHEMA_DURATION, .off = RLS(max_connection_age_ms),
     .def = "\"0s\"", .min = 0, .max = 30LL * 24 * 3600 * 1000},
    {.name = "max_connection_age_grace", .type = SCHEMA_DURATION,
     .off = RLS(max_connection_age_grace_ms), .def = "\"1h\"", .min = 0,
     .max = 30LL * 24 * 3600 * 1000},
};
static const struct schema rls_schema = {
    SCHEMA_FIELDS(rls_fields), sizeof(struct rl_rls_conf), check_rls, NULL
};

static const struct schema_field top_fields[] = {
    {.name = "listen", .type = SCHEMA_STRING, .off = TOP(listen), .def = "\"127.0.0.1:8080\"",
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "workers", .type = SCHEMA_INT, .off = TOP(workers), .def = "1", .min = 0,
     .max = 256, .flags = SCHEMA_RESTART},
    {.name = "backend", .type = SCHEMA_ENUM, .off = TOP(backend), .def = "\"redis\"",
     .names = backend_names, .flags = SCHEMA_RESTART},
    {.name = "redis", .type = SCHEMA_OBJECT, .off = TOP(redis), .sub = &redis_schema},
    {.name = "failure_mode", .type = SCHEMA_ENUM, .off = TOP(failure_mode), .def = "\"open\"",
     .names = failure_names},
    {.name = "identity", .type = SCHEMA_CUSTOM, .off = TOP(identity),
     .def = "[\"body\", \"header:X-Api-Key\", \"forwarded\", \"peer\"]",
     .custom = &policy_identity_type},
    {.name = "trusted_proxies", .type = SCHEMA_CUSTOM, .off = TOP(trusted_proxies),
     .def = "[\"127.0.0.0/8\", \"::1/128\"]", .custom = &cidrs_type},
    {.name = "forwarded_header", .type = SCHEMA_ENUM, .off = TOP(forwarded_rfc7239),
     .def = "\"x-forwarded-for\"", .names = fwd_header_names},
    /* an address identity is its network: one subscriber line or VM holds
     * a whole IPv6 /64 */
    {.name = "ipv4_prefix", .type = SCHEMA_INT, .off = TOP(ipv4_prefix), .def = "32", .min = 8,
     .max = 32},
    {.name = "ipv6_prefix", .type = SCHEMA_INT, .off = TOP(ipv6_prefix), .def = "64",
     .min = 16, .max = 128},
    {.name = "forwarded_request_headers", .type = SCHEMA_ENUM, .off = TOP(request_headers),
     .def = "\"auto\"", .names = reqhdr_names},
    {.name = "merge_slashes", .type = SCHEMA_BOOL, .off = TOP(merge_slashes), .def = "true"},
    {.name = "path_fold", .type = SCHEMA_CUSTOM, .off = TOP(path_fold), .def = "[]",
     .custom = &folds_type},
    {.name = "unnormalizable_path", .type = SCHEMA_ENUM, .off = TOP(bad_path),
     .def = "\"reject\"", .names = badpath_names},
    {.name = "x_ratelimit_reset", .type = SCHEMA_ENUM, .off = TOP(reset_format),
     .def = "\"delta\"", .names = reset_names},
    {.name = "partition_key", .type = SCHEMA_STRING, .off = TOP(partition_key),
     .flags = SCHEMA_NONEMPTY},
    {.name = "max_body", .type = SCHEMA_SIZE, .off = TOP(max_body), .def = "\"64k\"", .min = 2,
     .max = 64 * 1024 * 1024, .flags = SCHEMA_RESTART},
    {.name = "max_delayed", .type = SCHEMA_INT, .off = TOP(max_delayed), .def = "1000",
     .min = 1, .max = 1000000},
    {.name = "max_inflight", .type = SCHEMA_INT, .off = TOP(max_inflight), .def = "10000",
     .min = 1, .max = 10000000},
    {.name = "max_pending_charges", .type = SCHEMA_INT, .off = TOP(max_pending_charges),
     .def = "10000", .min = 1, .max = 1000000},
    {.name = "access_log", .type = SCHEMA_INT, .off = TOP(access_log), .def = "0", .min = 0,
     .max = 1000000},
    {.name = "forward_auth", .type = SCHEMA_BOOL, .off = TOP(forward_auth), .def = "false"},
    {.name = "deny_cache", .type = SCHEMA_BOOL, .off = TOP(deny_cache), .def = "true"},
    {.name = "deny_cache_size", .type = SCHEMA_INT, .off = TOP(deny_cache_size),
     .def = "65536", .min = 16, .max = 16 * 1024 * 1024, .flags = SCHEMA_RESTART},
    {.name = "top_k", .type = SCHEMA_INT, .off = TOP(top_k), .def = "32", .min = 0, .max = 64,
     .flags = SCHEMA_RESTART},
    {.name = "hybrid_table_size", .type = SCHEMA_INT, .off = TOP(hybrid_table_size),
     .def = "65536", .min = 16, .max = 16 * 1024 * 1024, .flags = SCHEMA_RESTART},
    {.name = "shutdown_grace", .type = SCHEMA_DURATION, .off = TOP(shutdown_grace_ms),
     .def = "\"10s\"", .min = 0, .max = 3600 * 1000},
    {.name = "http", .type = SCHEMA_OBJECT, .off = TOP(http), .sub = &http_schema},
    {.name = "rls", .type = SCHEMA_OBJECT, .off = TOP(rls), .sub = &rls_schema},
    {.name = "log_level", .type = SCHEMA_ENUM, .off = TOP(log_level), .def = "\"info\"",
     .names = log_level_names},
    {.name = "watch_files", .type = SCHEMA_BOOL, .off = TOP(watch_files), .def = "false"},
    {.name = "log_format", .type = SCHEMA_ENUM, .off = TOP(log_format), .def = "\"logfmt\"",
     .names = log_format_names},
    {.name = "policies", .type = SCHEMA_ARRAY, .off = TOP(policies), .sub = &policy_schema,
     .count_off = TOP(npolicies)},
    {.name = "admin_listen", .type = SCHEMA_STRING, .off = TOP(admin_listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "admin_allow_remote", .type = SCHEMA_BOOL, .off = TOP(admin_allow_remote),
     .def = "false", .flags = SCHEMA_RESTART},
    /* read into admin_token by finalize, at every load (SIGHUP rotates it) */
    {.name = "admin_token_file", .type = SCHEMA_STRING, .off = TOP(admin_token_file),
     .flags = SCHEMA_NONEMPTY},
    {.name = "metrics_listen", .type = SCHEMA_STRING, .off = TOP(metrics_listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "debug_listen", .type = SCHEMA_STRING, .off = TOP(debug_listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "debug_allow_remote", .type = SCHEMA_BOOL, .off = TOP(debug_allow_remote),
     .def = "false", .flags = SCHEMA_RESTART},
};
static const struct schema top_schema = {
    SCHEMA_FIELDS(top_fields), sizeof(struct rl_config), check_top, NULL
};
/* clang-format on */

const char *
config_failure_mode_name(enum rl_failure_mode m)
{
    return (size_t)m < RL_ARRAY_LEN(failure_names) - 1 ? failure_names[m] : "?";
}

/* ---- cross-field checks: they read, never write ------------------------- */

/* "host:port", "[v6]:port": what seed nodes and sentinels look like */
static bool
valid_host_port(const char *s)
{
    char *host;
    int port;

    if (redis_url_hostport(s, &host, &port) != RL_OK)
        return false;
    free(host);
    return true;
}

static void
check_host_ports(const struct rl_strlist *l, const char *path, const char *name,
                 struct schema_ctx *ctx)
{
    char *fp = *path ? xasprintf("%s.%s", path, name) : xstrdup(name);

    for (size_t i = 0; i < l->n; i++)
        if (!valid_host_port(l->v[i]))
            schema_bad_item(ctx, fp, i, "must be \"host:port\" or \"[v6]:port\"");
    free(fp);
}

static void
check_sentinel(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_sentinel_conf *s = obj;

    check_host_ports(&s->nodes, path, "nodes", ctx);
}

static void
check_tls(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_tls_conf *t = obj;

    if ((t->cert_file == NULL) != (t->key_file == NULL))
        schema_bad(ctx, path, "give cert_file and key_file together");
}

static void
check_rls_tls(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_rls_tls_conf *t = obj;

    if ((t->cert_file == NULL) != (t->key_file == NULL))
        schema_bad(ctx, path, "give cert_file and key_file together");
    if (t->client_ca_file != NULL && t->cert_file == NULL)
        schema_bad_field(ctx, path, "client_ca_file",
                         "verifying clients needs TLS: give cert_file and key_file");
}

/* A listener needs rules to serve, and an address that parses. */
/* Header field names (RFC 9110 tokens); all three or none: check_rls. */
static void
check_header_names(const void *obj, const char *path, struct schema_ctx *ctx)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const struct rl_rls_header_names *h = obj;
    const char *const v[] = {h->limit, h->remaining, h->reset};
    const char *const names[] = {"limit", "remaining", "reset"};

    for (size_t i = 0; i < RL_ARRAY_LEN(v); i++) {
        if (v[i] != NULL && (strlen(v[i]) > 128 || strspn(v[i], tchar) != strlen(v[i])))
            schema_bad_field(ctx, path, names[i],
                             "must be a header name (letters, digits, '-'...) of at most 128 "
                             "bytes");
    }
}

static void
check_rls(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_rls_conf *r = obj;
    struct rl_listen_addr la;
    char *cause = NULL;
    int names = (r->header_names.limit != NULL) + (r->header_names.remaining != NULL) +
                (r->header_names.reset != NULL);

    if (r->request_limits_max != 0 && !r->request_limits)
        schema_bad_field(ctx, path, "request_limits_max",
                         "caps the limits descriptors bring: needs \"request_limits\": true");
    if (names != 0 && names != 3)
        schema_bad_field(ctx, path, "header_names",
                         "give limit, remaining and reset, or none of them");
    if (r->listen == NULL)
        return;
    if (listen_addr_parse(r->listen, &la, &cause) != RL_OK) {
        schema_bad_field(ctx, path, "listen", "%s", cause);
        free(cause);
        return;
    }
    listen_addr_clear(&la);
    if (r->config == NULL)
        schema_bad_field(ctx, path, "config",
                         "rls.listen serves the rules of rls.config: give a YAML file or a "
                         "directory of them");
}

/* The URL parses, and names database 0 when it seeds a Cluster. */
static void
check_redis_url(const struct rl_redis_conf *r, const char *path, struct schema_ctx *ctx)
{
    struct rl_redis_url u;
    char *cause = NULL;

    if (r->url == NULL)
        return;
    if (redis_url_parse(r->url, &u, &cause) != RL_OK) {
        schema_bad_field(ctx, path, "url", "%s", cause);
        free(cause);
        return;
    }
    if (r->cluster.n > 0 && u.db != 0)
        schema_bad_field(ctx, path, "url", "Redis Cluster has only database 0");
    redis_url_clear(&u);
}

static void
check_redis(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_redis_conf *r = obj;

    check_host_ports(&r->cluster, path, "cluster", ctx);
    if (r->cluster.n > 0 && r->sentinel.master != NULL)
        schema_bad(ctx, path, "give redis.cluster or redis.sentinel, not both");
    if (r->key_prefix != NULL &&
        (strlen(r->key_prefix) > RL_NAME_MAX || strpbrk(r->key_prefix, "{}") != NULL))
        schema_bad_field(ctx, path, "key_prefix",
                         "must be at most %d bytes without '{' or '}'", RL_NAME_MAX);
    /* a password read from password_file by an earlier load is not "given" */
    if (r->password_file != NULL && r->password != NULL && !r->password_from_file)
        schema_bad_field(ctx, path, "password_file",
                         "give redis.password or redis.password_file, not both");
    check_redis_url(r, path, ctx);
}

static bool
is_loopback(const struct rl_listen_addr *a)
{
    const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&a->ss;
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&a->ss;

    if (a->family == AF_UNIX)
        return true;
    if (a->family == AF_INET)
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) && sin6->sin6_addr.s6_addr[12] == 127);
}

/*
 * The admin API changes any caller's counts: only where the operator put it
 * (a unix socket or loopback), elsewhere only when asked for and behind a
 * token (its file is read by finalize).
 */
static void
check_admin(const struct rl_config *cfg, struct schema_ctx *ctx)
{
    struct rl_listen_addr la;
    char *cause = NULL;

    if (cfg->admin_listen == NULL)
        return;
    if (listen_addr_parse(cfg->admin_listen, &la, &cause) != RL_OK) {
        schema_bad(ctx, "admin_listen", "%s", cause);
        free(cause);
        return;
    }
    if (cfg->listen != NULL && strcmp(cfg->admin_listen, cfg->listen) == 0)
        schema_bad(ctx, "admin_listen", "must not be the check listener's address");
    else if (!is_loopback(&la) && !cfg->admin_allow_remote)
        schema_bad(ctx, "admin_listen",
                   "not a loopback address or unix socket: set "
                   "admin_allow_remote to true to serve the admin API there");
    else if (!is_loopback(&la) && cfg->admin_token_file == NULL)
        schema_bad(ctx, "admin_listen", "off loopback, the admin API needs admin_token_file");
    listen_addr_clear(&la);
}

/*
 * The read-only listeners (metrics_listen, debug_listen): an address each,
 * none of them another listener's; the debug port shows the rules (tenant
 * names, limits), so off loopback only when asked for.
 */
static void
check_side_listeners(const struct rl_config *cfg, struct schema_ctx *ctx)
{
    const struct {
        const char *name, *addr;
    } all[] = {
        {"listen", cfg->listen},
        {"admin_listen", cfg->admin_listen},
        {"rls.listen", cfg->rls.listen},
        {"metrics_listen", cfg->metrics_listen},
        {"debug_listen", cfg->debug_listen},
    };

    for (size_t i = 3; i < RL_ARRAY_LEN(all); i++) {
        struct rl_listen_addr la;
        char *cause = NULL;

        if (all[i].addr == NULL)
            continue;
        if (listen_addr_parse(all[i].addr, &la, &cause) != RL_OK) {
            schema_bad(ctx, all[i].name, "%s", cause);
            free(cause);
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (all[j].addr != NULL && strcmp(all[i].addr, all[j].addr) == 0)
                schema_bad(ctx, all[i].name, "must differ from %s", all[j].name);
        if (i == 4 && !is_loopback(&la) && !cfg->debug_allow_remote)
            schema_bad(ctx, "debug_listen",
                       "not a loopback address or unix socket: set debug_allow_remote to "
                       "true to show the rules there");
        listen_addr_clear(&la);
    }
}

/* What involves several top-level options, or an address to parse. */
static void
check_top(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_config *cfg = obj;
    struct rl_listen_addr la;
    char *cause = NULL;

    if (cfg->listen != NULL && listen_addr_parse(cfg->listen, &la, &cause) != RL_OK) {
        /* a flag's or variable's value is its own problem, not the file's */
        struct schema_ctx own = {cfg->listen_origin ? cfg->listen_origin : ctx->origin,
                                 ctx->errs};
        schema_bad(&own, "listen", "%s", cause);
        free(cause);
    } else if (cfg->listen != NULL) {
        listen_addr_clear(&la);
    }
    for (size_t i = 0; i < cfg->npolicies; i++) {
        for (size_t j = 0; j < i; j++) {
            if (cfg->policies[i].name && cfg->policies[j].name &&
                strcmp(cfg->policies[i].name, cfg->policies[j].name) == 0) {
                char *p = xasprintf("policies[%zu].name", i);
                schema_bad(ctx, p, "\"%s\" is already the name of policies[%zu]",
                           cfg->policies[i].name, j);
                free(p);
            }
        }
    }
    if (cfg->rls.listen != NULL &&
        ((cfg->listen != NULL && strcmp(cfg->rls.listen, cfg->listen) == 0) ||
         (cfg->admin_listen != NULL && strcmp(cfg->rls.listen, cfg->admin_listen) == 0)))
        schema_bad(ctx, "rls.listen", "must differ from listen and admin_listen");
    if (cfg->rls.all_or_nothing && cfg->backend == RL_BACKEND_REDIS &&
        cfg->redis.cluster.n > 0)
        schema_bad(ctx, "rls.all_or_nothing",
                   "needs one Redis (standalone or Sentinel) or the memory backend: a "
                   "request's descriptors count under keys in different Redis Cluster slots, "
                   "which one script call cannot decide together");
    if (cfg->http.max_buffered < cfg->max_body)
        schema_bad(
            ctx, "http.max_buffered",
            "must be at least max_body (%lld bytes): a body of that size could never be "
            "read",
            (long long)cfg->max_body);
    /* the gRPC listener's messages come from the same pool (bufpool.h) */
    if (cfg->rls.listen != NULL && cfg->http.max_buffered < cfg->rls.max_message)
        schema_bad(ctx, "http.max_buffered",
                   "must be at least rls.max_message (%lld bytes): the gRPC listener buffers "
                   "its messages from the same pool, and one of that size could never be read",
                   (long long)cfg->rls.max_message);
    if (cfg->partition_key != NULL && strlen(cfg->partition_key) < 16)
        schema_bad(ctx, "partition_key", "must be a secret of at least 16 bytes");
    check_admin(cfg, ctx);
    check_side_listeners(cfg, ctx);
    (void)path;
}

/* ---- finalize: what is derived from the options ---------------------------- */

/*
 * A secret kept in a file only the daemon reads (systemd's LoadCredential=, a
 * Kubernetes Secret volume), read at every load so a reload sees a rotated
 * file.  One trailing newline is dropped (editors and `echo` add one).  The
 * errors name the file, never its content.
 */
static char *
read_secret_file(const char *file, const char *path, struct schema_ctx *ctx)
{
    char buf[SECRET_MAX + 2];
    size_t n;
    FILE *f = fopen(file, "re");

    if (f == NULL) {
        schema_bad(ctx, path, "cannot read %s: %s", file, strerror(errno));
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        schema_bad(ctx, path, "cannot read %s: %s", file, strerror(errno));
        fclose(f);
        return NULL;
    }
    fclose(f);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n == 0 || n > SECRET_MAX || memchr(buf, '\0', n) != NULL ||
        memchr(buf, '\n', n) != NULL) {
        explicit_bzero(buf, sizeof(buf));
        schema_bad(ctx, path, "%s must hold one line of 1..%d bytes (the secret)", file,
                   SECRET_MAX);
        return NULL;
    }
    char *secret = xstrndup(buf, n);
    explicit_bzero(buf, sizeof(buf));
    return secret;
}

/*
 * Builds, after every source is applied, all that is derived from the
 * options.  Runs after the file and again after flags, so it rebuilds
 * rather than adds; it may find problems (a pattern that cannot be
 * normalised, an unreadable password file) and reports them like a check.
 */
static void
finalize(struct rl_config *cfg, struct schema_ctx *ctx)
{
    struct rl_redis_conf *r = &cfg->redis;
    const struct rl_policy_defaults pd = {
        .pathflags = cfg->merge_slashes ? 0 : RL_PATHNORM_KEEP_SLASHES,
        .path_fold = cfg->path_fold,
        .ipv4_prefix = cfg->ipv4_prefix,
        .ipv6_prefix = cfg->ipv6_prefix,
    };

    for (size_t i = 0; i < cfg->npolicies; i++)
        policy_finalize(&cfg->policies[i], i, &pd, ctx);
    if (r->password_file != NULL && (r->password == NULL || r->password_from_file)) {
        free(r->password);
        r->password = read_secret_file(r->password_file, "redis.password_file", ctx);
        r->password_from_file = 1;
    }
    if (cfg->admin_token != NULL)
        explicit_bzero(cfg->admin_token, strlen(cfg->admin_token));
    free(cfg->admin_token);
    cfg->admin_token = cfg->admin_token_file == NULL
                           ? NULL
                           : read_secret_file(cfg->admin_token_file, "admin_token_file", ctx);
    /* Every instance with the same secret names a caller's partition the
     * same way; without the secret no pk leads back to its identity. */
    if (cfg->partition_key != NULL) {
        size_t n = strlen(cfg->partition_key);
        cfg->pk_k0 = fnv1a(FNV1A_INIT, cfg->partition_key, n);
        cfg->pk_k1 = fnv1a(cfg->pk_k0 ^ 0x9e3779b97f4a7c15ULL, cfg->partition_key, n);
    }
}

/* ---- warnings -------------------------------------------------------------- */

void
config_warnings(const struct rl_config *cfg, struct rl_errors *warns)
{
    const char *file = cfg->file != NULL ? cfg->file : "configuration";

    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct rl_policy *p = &cfg->policies[i];
        char *path = xasprintf("policies[%zu]", i);

        policy_warnings(p, path, file, warns);
        free(path);
    }
}

/* ---- public API ------------------------------------------------------------ */

const struct rl_policy *
config_policy(const struct rl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->npolicies; i++)
        if (strcmp(cfg->policies[i].name, name) == 0)
            return &cfg->policies[i];
    return NULL;
}

struct rl_config *
config_new_defaults(void)
{
    struct rl_config *cfg = xcalloc(1, sizeof(*cfg));

    schema_defaults(&top_schema, cfg);
    cfg->refs = 1;
    return cfg;
}

static void
config_free(struct rl_config *cfg)
{
    rls_rules_free(cfg->rls.rules);
    schema_free(&top_schema, cfg);
    if (cfg->admin_token != NULL)
        explicit_bzero(cfg->admin_token, strlen(cfg->admin_token));
    free(cfg->admin_token);
    free(cfg->file);
    free(cfg);
}

struct rl_config *
config_ref(struct rl_config *cfg)
{
    __atomic_add_fetch(&cfg->refs, 1, __ATOMIC_RELAXED);
    return cfg;
}

void
config_unref(struct rl_config *cfg)
{
    if (cfg != NULL && __atomic_sub_fetch(&cfg->refs, 1, __ATOMIC_ACQ_REL) == 0)
        config_free(cfg);
}

/* Config files are small: read whole, bounded, so the hash sees the bytes. */
#define CONFIG_FILE_MAX (16 * 1024 * 1024)

/* The file's text as JSON; NULL with the problem added to errs. */
static json_t *
load_json(const char *file, struct rl_errors *errs, uint64_t *hash)
{
    json_error_t jerr;
    json_t *root;
    size_t len;
    char *text;

    if (errors_read_file(errs, file, CONFIG_FILE_MAX, &text, &len) != RL_OK)
        return NULL;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    *hash = fnv1a(FNV1A_INIT, text, len);
    free(text);
    if (root == NULL && jerr.line > 0)
        errors_add(errs, "%s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
    else if (root == NULL)
        errors_add(errs, "%s: %s", file, jerr.text);
    return root;
}

/*
 * The rule files of rls.config, read again at every validation (a reload
 * sees edited files); their hash joins the config's, so ratelimitd_config_info
 * changes with them.  Read here, after flags and environment, not by
 * config_load_file: a flag may name other files.
 */
static void
load_rules(struct rl_config *cfg, struct rl_errors *errs)
{
    if (cfg->rls.rules != NULL)
        cfg->hash ^= cfg->rls.rules->hash;
    rls_rules_free(cfg->rls.rules);
    cfg->rls.rules = NULL;
    if (cfg->rls.config == NULL)
        return;
    if (rls_rules_load(cfg->rls.config, policy_new_uid, &cfg->rls.rules, errs) == RL_OK)
        cfg->hash ^= cfg->rls.rules->hash;
}

int
config_load_file(const char *file, struct rl_config **out, struct rl_errors *errs)
{
    struct schema_ctx ctx = {file, errs};
    struct rl_config *cfg;
    size_t before = errs->total;
    uint64_t hash;
    json_t *root;

    *out = NULL;
    if ((root = load_json(file, errs, &hash)) == NULL)
        return RL_ERR;
    cfg = config_new_defaults();
    cfg->file = xstrdup(file);
    cfg->hash = hash;
    if (!json_is_object(root))
        errors_add(errs, "%s: the configuration must be a JSON object", file);
    else
        schema_parse(&top_schema, cfg, root, "", &ctx);
    json_decref(root);
    finalize(cfg, &ctx);
    if (errs->total != before) {
        /* the rule files' problems too, so that -t reports them all at
         * once (a good file reads them in config_validate) */
        load_rules(cfg, errs);
        config_unref(cfg);
        return RL_ERR;
    }
    *out = cfg;
    return RL_OK;
}

static int
set_option(struct rl_config *cfg, const char *name, const char *text, const char *origin,
           int defer, struct rl_errors *errs)
{
    struct schema_ctx ctx = {origin, errs};

    if ((defer ? schema_set_deferred(&top_schema, cfg, name, text, &ctx)
               : schema_set(&top_schema, cfg, name, text, &ctx)) != RL_OK)
        return RL_ERR;
    if (strcmp(name, "listen") == 0) /* checked with the top level, later */
        cfg->listen_origin = origin;
    return RL_OK;
}

int
config_set_option(struct rl_config *cfg, const char *name, const char *text,
                  const char *origin, struct rl_errors *errs)
{
    return set_option(cfg, name, text, origin, 0, errs);
}

int
config_set_option_deferred(struct rl_config *cfg, const char *name, const char *text,
                           const char *origin, struct rl_errors *errs)
{
    return set_option(cfg, name, text, origin, 1, errs);
}

int
config_check_option(struct rl_config *cfg, const char *name, const char *origin,
                    struct rl_errors *errs)
{
    struct schema_ctx ctx = {origin, errs};

    return schema_check_parent(&top_schema, cfg, name, &ctx);
}

int
config_validate(struct rl_config *cfg, struct rl_errors *errs)
{
    struct schema_ctx ctx = {cfg->file ? cfg->file : "configuration", errs};
    size_t before = errs->total;

    check_top(cfg, "", &ctx);
    finalize(cfg, &ctx);
    load_rules(cfg, errs);
    return errs->total == before ? RL_OK : RL_ERR;
}

void
config_set_metrics_ids(struct rl_config *cfg, int (*id_of)(const char *name))
{
    for (size_t i = 0; i < cfg->npolicies; i++) {
        struct rl_policy *p = &cfg->policies[i];
        p->metrics_id = id_of(p->name);
        for (size_t j = 0; j < p->noverrides; j++)
            p->overrides[j].as_policy->metrics_id = p->metrics_id;
    }
    if (cfg->rls.rules != NULL)
        rls_rules_set_metrics_id(cfg->rls.rules, id_of("rls"));
}

void
config_keep_restart_options(struct rl_config *next, const struct rl_config *running,
                            struct rl_errors *changed)
{
    schema_keep_restart(&top_schema, next, running, "", changed);
}
