/*
 * config.c — ratelimitd's options: the tables (one row per option, walked by
 * schema.c), their cross-field checks, and the one pass that builds what is
 * derived from them (finalize).
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
#include "period.h"
#include "pathnorm.h"
#include "redis_url.h"
#include "rls_rules.h"
#include "util.h"

#define SECRET_MAX 4096 /* bytes of a password read from a file */
#define DAY_MS (24LL * 3600 * 1000)
/* a concurrency limit's lease by default, and its most slots */
#define LEASE_DEFAULT_MS (60LL * 1000)
#define LEASE_SLOTS_MAX 100000
#define HYBRID_SYNC_DEFAULT_MS 250

/* ---- types of our own: identity chains, CIDR lists, method sets ---------- */

static void
free_source(struct rl_id_source *src)
{
    struct rl_id_source *next;

    free(src->header);
    for (struct rl_id_source *p = src->also; p != NULL; p = next) {
        next = p->also;
        free(p->header);
        free(p);
    }
    memset(src, 0, sizeof(*src));
}

static void
free_identity(void *at)
{
    struct rl_identity_chain *c = at;

    for (size_t i = 0; i < c->n; i++)
        free_source(&c->v[i]);
    free(c->v);
    c->v = NULL;
    c->n = 0;
}

/* One part of a source, s[0..n); RL_ERR when it names none. */
static int
id_part(const char *s, size_t n, struct rl_id_source *src)
{
    static const struct {
        const char *name;
        enum rl_id_kind kind;
    } plain[] = {
        {"body", RL_ID_BODY},
        {"forwarded", RL_ID_FORWARDED},
        {"peer", RL_ID_PEER},
        {"header:", RL_ID_HEADER},
        {"trusted_header:", RL_ID_TRUSTED_HEADER},
    };
    static const char header_bytes[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_";

    for (size_t i = 0; i < RL_ARRAY_LEN(plain); i++) {
        size_t len = strlen(plain[i].name);
        int header = plain[i].name[len - 1] == ':';

        if (!header && n == len && memcmp(s, plain[i].name, n) == 0) {
            src->kind = plain[i].kind;
            return RL_OK;
        }
        if (header && n > len && memcmp(s, plain[i].name, len) == 0) {
            for (size_t j = len; j < n; j++)
                if (strchr(header_bytes, s[j]) == NULL || s[j] == '\0')
                    return RL_ERR;
            src->kind = plain[i].kind;
            src->header = xstrndup(s + len, n - len);
            return RL_OK;
        }
    }
    return RL_ERR;
}

/* A source of an identity chain: one part, or up to RL_ID_PARTS_MAX joined
 * by '+' ("forwarded+body": every part must give a value); RL_ERR when s
 * names none. */
static int
id_source(const char *s, struct rl_id_source *src)
{
    struct rl_id_source *last = src;
    size_t parts = 0;

    memset(src, 0, sizeof(*src));
    for (const char *p = s;; p++) {
        const char *plus = strchr(p, '+');
        size_t n = plus != NULL ? (size_t)(plus - p) : strlen(p);
        struct rl_id_source *part = parts == 0 ? src : xcalloc(1, sizeof(*part));

        if (parts > 0)
            last = last->also = part;
        if (++parts > RL_ID_PARTS_MAX || id_part(p, n, part) != RL_OK) {
            free_source(src);
            return RL_ERR;
        }
        if (plus == NULL)
            return RL_OK;
        p = plus;
    }
}

static void
parse_identity(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    struct rl_identity_chain *out = at;
    size_t i;
    json_t *e;

    free_identity(out);
    if (!json_is_array(v) || json_array_size(v) == 0) {
        schema_bad(ctx, path,
                   "must be a non-empty list of \"body\", \"header:NAME\", "
                   "\"trusted_header:NAME\", \"forwarded\", \"peer\" or such sources "
                   "joined by '+'");
        return;
    }
    out->v = xcalloc(json_array_size(v), sizeof(*out->v));
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        if (s == NULL)
            schema_bad_item(ctx, path, i, "must be a string");
        else if (id_source(s, &out->v[out->n]) == RL_OK)
            out->n++;
        else
            schema_bad_item(ctx, path, i,
                            "unknown identity source \"%s\": use \"body\", "
                            "\"header:NAME\", \"trusted_header:NAME\", \"forwarded\" or "
                            "\"peer\", or up to %d of them joined by '+' "
                            "(\"forwarded+body\")",
                            s, RL_ID_PARTS_MAX);
    }
}

/* limits[i].identity: a chain of the limit's own, NULL when absent. */
static void
free_identity_ptr(void *at)
{
    struct rl_identity_chain **c = at;

    if (*c != NULL)
        free_identity(*c);
    free(*c);
    *c = NULL;
}

static void
parse_identity_ptr(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    struct rl_identity_chain **c = at;

    free_identity_ptr(at);
    *c = xcalloc(1, sizeof(**c));
    parse_identity(v, *c, path, ctx);
}

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

static const struct {
    const char *name;
    unsigned bit;
} method_bits[] = {
    {"GET", RL_M_GET},         {"HEAD", RL_M_HEAD},       {"POST", RL_M_POST},
    {"PUT", RL_M_PUT},         {"DELETE", RL_M_DELETE},   {"PATCH", RL_M_PATCH},
    {"OPTIONS", RL_M_OPTIONS}, {"CONNECT", RL_M_CONNECT}, {"TRACE", RL_M_TRACE},
};

unsigned
config_method_bit(const char *name)
{
    for (size_t i = 0; i < RL_ARRAY_LEN(method_bits); i++)
        if (strcasecmp(name, method_bits[i].name) == 0)
            return method_bits[i].bit;
    return 0;
}

static void
parse_methods(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    unsigned *out = at;
    size_t i;
    json_t *e;

    *out = 0;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        schema_bad(ctx, path, "must be a non-empty list of methods like [\"GET\", \"POST\"]");
        return;
    }
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        unsigned bit = s ? config_method_bit(s) : 0;
        if (bit == 0)
            schema_bad_item(ctx, path, i,
                            "must be an HTTP method: GET, HEAD, POST, PUT, "
                            "DELETE, PATCH, OPTIONS, CONNECT or TRACE");
        *out |= bit;
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

/* "day", "week", ...: a calendar period (period.h), stored as its kind */
static void
parse_period(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    int *out = at;
    const char *s = json_string_value(v);
    int kind = s != NULL ? period_kind_of(s) : RL_PERIOD_NONE;

    if (kind == RL_PERIOD_NONE) {
        schema_bad(ctx, path,
                   "must be \"minute\", \"hour\", \"day\", \"week\", \"month\" or \"year\"");
        return;
    }
    *out = kind;
}

/*
 * An IANA time zone, read from the tz database.  A configuration (its
 * origin given) reads the zone's file again, so that a reload sees an
 * upgraded tzdata; a request's limits take the zone as loaded.
 */
static void
parse_timezone(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    const struct rl_tz **out = at;
    const char *s = json_string_value(v);
    char *cause = NULL;

    if (s == NULL || strlen(s) != json_string_length(v)) {
        schema_bad(ctx, path, "must be a time zone like \"Europe/Berlin\" or \"UTC\"");
        return;
    }
    if ((*out = period_tz(s, ctx->origin != NULL, &cause)) == NULL) {
        schema_bad(ctx, path, "%s", cause);
        free(cause);
    }
}

/* "monday".."sunday", stored as 1 + the day (sunday 0); 0 when absent */
static void
parse_week_start(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    int *out = at;
    const char *s = json_string_value(v);

    if (s == NULL || (*out = period_week_start_of(s)) == 0)
        schema_bad(ctx, path, "must be a day: \"monday\", \"tuesday\", ... or \"sunday\"");
}

static const struct schema_custom identity_type = {parse_identity, free_identity, 1};
static const struct schema_custom identity_ptr_type = {parse_identity_ptr, free_identity_ptr,
                                                       1};
static const struct schema_custom ratio_type = {parse_ratio, free_nothing, 1};
static const struct schema_custom cidrs_type = {parse_cidrs, free_cidrs, 1};
static const struct schema_custom methods_type = {parse_methods, free_nothing, 1};
static const struct schema_custom period_type = {parse_period, free_nothing, 0};
static const struct schema_custom timezone_type = {parse_timezone, free_nothing, 0};
static const struct schema_custom week_start_type = {parse_week_start, free_nothing, 0};
static const struct schema_custom folds_type = {parse_folds, free_nothing, 1};

/* ---- the tables --------------------------------------------------------- */

/* one row per option; clang-format would put each field of a row on a line of its own */
/* clang-format off */

static const char *const backend_names[] = {"redis", "memory", NULL};
static const char *const failure_names[] = {"open", "closed", "local", NULL};
static const char *const fwd_header_names[] = {"x-forwarded-for", "forwarded", NULL};
static const char *const mode_names[] = {"exact", "hybrid", NULL};
static const char *const reqhdr_names[] = {"original", "forwarded", "auto", NULL};
static const char *const badpath_names[] = {"reject", "raw", NULL};
static const char *const reset_names[] = {"delta", "epoch", NULL};
static const char *const align_names[] = {"first", "epoch", NULL};
static const char *const algo_name_list[] = {
    "fixed_window", "sliding_window_log", "sliding_window_counter",
    "token_bucket", "gcra", "concurrency", NULL
};

static void check_limit(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_match(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_override(const void *obj, const char *path, struct schema_ctx *ctx);
static void clear_override(void *obj);
static void check_policy(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_sentinel(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_tls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_redis(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_rls_tls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_rls(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_top(const void *obj, const char *path, struct schema_ctx *ctx);

/* offsetof in the struct a table describes */
#define LIMIT(m) offsetof(struct rl_limit, m)
#define MATCH(m) offsetof(struct rl_match, m)
#define OVERRIDE(m) offsetof(struct rl_override, m)
#define POLICY(m) offsetof(struct rl_policy, m)
#define SENTINEL(m) offsetof(struct rl_sentinel_conf, m)
#define TLS(m) offsetof(struct rl_tls_conf, m)
#define REDIS(m) offsetof(struct rl_redis_conf, m)
#define HTTP(m) offsetof(struct rl_http_conf, m)
#define RLS_TLS(m) offsetof(struct rl_rls_tls_conf, m)
#define RLS(m) offsetof(struct rl_rls_conf, m)
#define TOP(m) offsetof(struct rl_config, m)

_Static_assert(RL_COST_MAX == 1000000000000000, "limit_fields' bounds say RL_COST_MAX");

static const struct schema_field limit_fields[] = {
    {.name = "algorithm", .type = SCHEMA_ENUM, .off = LIMIT(algo), .names = algo_name_list,
     .flags = SCHEMA_REQUIRED},
    /* budgets of tokens or micro-dollars: up to RL_COST_MAX, written out for
     * tests/integration/test_api_doc.py (the sliding log, an entry per
     * check, less: check_limit) */
    {.name = "limit", .type = SCHEMA_INT, .off = LIMIT(limit), .min = 1,
     .max = 1000000000000000, .flags = SCHEMA_REQUIRED},
    /* window or period: check_limit; a concurrency limit has its lease instead */
    {.name = "window", .type = SCHEMA_DURATION, .off = LIMIT(window_ms), .min = 1,
     .max = 366 * DAY_MS},
    /* concurrency only; absent (0): LEASE_DEFAULT_MS, set by finalize */
    {.name = "lease", .type = SCHEMA_DURATION, .off = LIMIT(lease_ms), .min = 1,
     .max = DAY_MS},
    /* 0 (absent): the limit, set by finalize */
    {.name = "burst", .type = SCHEMA_INT, .off = LIMIT(burst), .min = 1,
     .max = 1000000000000000},
    {.name = "align", .type = SCHEMA_ENUM, .off = LIMIT(align), .def = "\"first\"",
     .names = align_names},
    {.name = "period", .type = SCHEMA_CUSTOM, .off = LIMIT(period.kind), .custom = &period_type},
    /* absent: UTC (NULL) */
    {.name = "timezone", .type = SCHEMA_CUSTOM, .off = LIMIT(period.tz),
     .custom = &timezone_type},
    /* absent: monday (0) */
    {.name = "week_start", .type = SCHEMA_CUSTOM, .off = LIMIT(period.week_start),
     .custom = &week_start_type},
    /* absent: the policy's caller */
    {.name = "identity", .type = SCHEMA_CUSTOM, .off = LIMIT(identity),
     .custom = &identity_ptr_type},
};
static const struct schema limit_schema = {
    SCHEMA_FIELDS(limit_fields), sizeof(struct rl_limit), check_limit, NULL
};

static const struct schema_field match_fields[] = {
    {.name = "path", .type = SCHEMA_STRING, .off = MATCH(path), .flags = SCHEMA_NONEMPTY},
    {.name = "path_prefix", .type = SCHEMA_STRING, .off = MATCH(path_prefix),
     .flags = SCHEMA_NONEMPTY},
    {.name = "path_glob", .type = SCHEMA_STRING, .off = MATCH(path_glob),
     .flags = SCHEMA_NONEMPTY},
    {.name = "methods", .type = SCHEMA_CUSTOM, .off = MATCH(methods), .custom = &methods_type},
};
static const struct schema match_schema = {
    SCHEMA_FIELDS(match_fields), sizeof(struct rl_match), check_match, NULL
};

static const struct schema_field override_fields[] = {
    {.name = "identities", .type = SCHEMA_STRLIST, .off = OVERRIDE(identities),
     .flags = SCHEMA_REQUIRED},
    {.name = "limits", .type = SCHEMA_ARRAY, .off = OVERRIDE(limits), .sub = &limit_schema,
     .count_off = OVERRIDE(nlimits), .flags = SCHEMA_REQUIRED},
};
static const struct schema override_schema = {
    SCHEMA_FIELDS(override_fields), sizeof(struct rl_override), check_override,
    clear_override
};

static const struct schema_field policy_fields[] = {
    {.name = "name", .type = SCHEMA_STRING, .off = POLICY(name),
     .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY},
    {.name = "match", .type = SCHEMA_OBJECT, .off = POLICY(match), .sub = &match_schema},
    {.name = "limits", .type = SCHEMA_ARRAY, .off = POLICY(limits), .sub = &limit_schema,
     .count_off = POLICY(nlimits), .flags = SCHEMA_REQUIRED},
    {.name = "shadow", .type = SCHEMA_BOOL, .off = POLICY(shadow), .def = "false"},
    {.name = "identity", .type = SCHEMA_CUSTOM, .off = POLICY(identity),
     .custom = &identity_type},
    {.name = "overrides", .type = SCHEMA_ARRAY, .off = POLICY(overrides),
     .sub = &override_schema, .count_off = POLICY(noverrides)},
    {.name = "mode", .type = SCHEMA_ENUM, .off = POLICY(mode), .def = "\"exact\"",
     .names = mode_names},
    /* no default here: given without "mode": "hybrid" it is an error, so
     * finalize sets HYBRID_SYNC_DEFAULT_MS when it is absent */
    {.name = "sync_interval", .type = SCHEMA_DURATION, .off = POLICY(sync_interval_ms),
     .min = 10, .max = 60 * 1000},
    {.name = "request_limits", .type = SCHEMA_BOOL, .off = POLICY(request_limits),
     .def = "false"},
    /* 0 (absent): no cap */
    {.name = "request_limits_max", .type = SCHEMA_INT, .off = POLICY(request_limits_max),
     .min = 1, .max = 1000000000000000},
    {.name = "request_limits_cap", .type = SCHEMA_ARRAY, .off = POLICY(caps),
     .sub = &limit_schema, .count_off = POLICY(ncaps)},
    /* absent (0): a check that does not fit now is denied */
    {.name = "max_delay", .type = SCHEMA_DURATION, .off = POLICY(max_delay_ms), .min = 1,
     .max = 60 * 1000},
    /* absent (0): the top-level values */
    {.name = "ipv4_prefix", .type = SCHEMA_INT, .off = POLICY(ipv4_prefix), .min = 8,
     .max = 32},
    {.name = "ipv6_prefix", .type = SCHEMA_INT, .off = POLICY(ipv6_prefix), .min = 16,
     .max = 128},
};
static const struct schema policy_schema = {
    SCHEMA_FIELDS(policy_fields), sizeof(struct rl_policy), check_policy, NULL
};

static const struct schema_field sentinel_fields[] = {
    {.name = "master", .type = SCHEMA_STRING, .off = SENTINEL(master),
     .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "nodes", .type = SCHEMA_STRLIST, .off = SENTINEL(nodes),
     .flags = SCHEMA_REQUIRED | SCHEMA_RESTART},
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

static const struct schema_field rls_fields[] = {
    {.name = "listen", .type = SCHEMA_STRING, .off = RLS(listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "tls", .type = SCHEMA_OBJECT, .off = RLS(tls), .sub = &rls_tls_schema},
    {.name = "config", .type = SCHEMA_STRING, .off = RLS(config), .flags = SCHEMA_NONEMPTY},
    {.name = "response_headers", .type = SCHEMA_BOOL, .off = RLS(response_headers),
     .def = "false"},
    {.name = "shadow_mode", .type = SCHEMA_BOOL, .off = RLS(shadow_mode), .def = "false"},
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
     .min = 1, .max = 4294967295LL},
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
     .custom = &identity_type},
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
    {.name = "access_log", .type = SCHEMA_INT, .off = TOP(access_log), .def = "0", .min = 0,
     .max = 1000000},
    {.name = "forward_auth", .type = SCHEMA_BOOL, .off = TOP(forward_auth), .def = "false"},
    {.name = "deny_cache", .type = SCHEMA_BOOL, .off = TOP(deny_cache), .def = "true"},
    {.name = "deny_cache_size", .type = SCHEMA_INT, .off = TOP(deny_cache_size),
     .def = "65536", .min = 16, .max = 16 * 1024 * 1024, .flags = SCHEMA_RESTART},
    {.name = "hybrid_table_size", .type = SCHEMA_INT, .off = TOP(hybrid_table_size),
     .def = "65536", .min = 16, .max = 16 * 1024 * 1024, .flags = SCHEMA_RESTART},
    {.name = "shutdown_grace", .type = SCHEMA_DURATION, .off = TOP(shutdown_grace_ms),
     .def = "\"10s\"", .min = 0, .max = 3600 * 1000},
    {.name = "http", .type = SCHEMA_OBJECT, .off = TOP(http), .sub = &http_schema},
    {.name = "rls", .type = SCHEMA_OBJECT, .off = TOP(rls), .sub = &rls_schema},
    {.name = "log_level", .type = SCHEMA_ENUM, .off = TOP(log_level), .def = "\"info\"",
     .names = log_level_names},
    {.name = "policies", .type = SCHEMA_ARRAY, .off = TOP(policies), .sub = &policy_schema,
     .count_off = TOP(npolicies)},
    {.name = "admin_listen", .type = SCHEMA_STRING, .off = TOP(admin_listen),
     .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "admin_allow_remote", .type = SCHEMA_BOOL, .off = TOP(admin_allow_remote),
     .def = "false", .flags = SCHEMA_RESTART},
    /* read into admin_token by finalize, at every load (SIGHUP rotates it) */
    {.name = "admin_token_file", .type = SCHEMA_STRING, .off = TOP(admin_token_file),
     .flags = SCHEMA_NONEMPTY},
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

static void
check_limit(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_limit *l = obj;
    const struct rl_algo_def *d = algo_def(l->algo);
    int64_t burst = l->burst != 0 ? l->burst : l->limit;
    int period = algo_has_period(l);

    if (l->algo == RL_ALGO_CONCURRENCY) {
        if (l->window_ms != 0)
            schema_bad_field(ctx, path, "window",
                             "a concurrency limit has no window: its slots are held until "
                             "released or until their \"lease\" ends");
        if (l->limit > LEASE_SLOTS_MAX)
            schema_bad_field(ctx, path, "limit",
                             "a concurrency limit holds at most %d slots (one sorted-set "
                             "member each)",
                             LEASE_SLOTS_MAX);
    } else if (l->lease_ms != 0) {
        schema_bad_field(ctx, path, "lease", "only a concurrency limit holds leases");
    }

    if (l->algo != RL_ALGO_CONCURRENCY && l->window_ms == 0 && !period &&
        !schema_problem_at(ctx, path, "window") && !schema_problem_at(ctx, path, "period"))
        schema_bad(ctx, path,
                   "give \"window\" (a duration like \"1m\") or \"period\" (a calendar "
                   "period like \"day\")");
    if (l->window_ms != 0 && period)
        schema_bad_field(ctx, path, "period", "give window or period, not both");
    if (period && d->period_tag == NULL)
        schema_bad_field(ctx, path, "period",
                         "only fixed_window and sliding_window_counter count by calendar "
                         "periods; %s needs a window",
                         d->name);
    if (l->period.tz != NULL && !period)
        schema_bad_field(ctx, path, "timezone", "only a limit of a period has a time zone");
    if (l->period.week_start != 0 && l->period.kind != RL_PERIOD_WEEK)
        schema_bad_field(ctx, path, "week_start", "only a \"week\" period starts on a day");
    if (l->burst != 0 && !d->uses_burst)
        schema_bad_field(ctx, path, "burst", "only token_bucket and gcra take a burst");
    if (l->align != RL_ALIGN_FIRST && d->aligned_tag == NULL)
        schema_bad_field(ctx, path, "align", "only fixed_window has windows to align");
    else if (l->align != RL_ALIGN_FIRST && period)
        schema_bad_field(ctx, path, "align", "a period is aligned to the calendar already");
    /* the log holds an entry per allowed check (at most `limit` of them) */
    if (l->algo == RL_ALGO_SLIDING_WINDOW_LOG && l->limit > 1000000000)
        schema_bad_field(ctx, path, "limit",
                         "at most 1000000000 with sliding_window_log: it keeps an entry per "
                         "check (its memory); a larger budget takes sliding_window_counter");
    /* time to refill a whole bucket = burst/limit x window: bounded so the
     * algorithms' exact integer arithmetic cannot overflow */
    if (d->uses_burst && l->limit > 0 && l->window_ms > 0 &&
        (unsigned __int128)burst * (unsigned __int128)l->window_ms >
            (unsigned __int128)l->limit * (unsigned __int128)(366 * DAY_MS))
        schema_bad_field(ctx, path, "burst",
                         "the bucket must refill within 366 days (burst / limit x window)");
}

static bool
valid_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= RL_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_.-") == n;
}

static void
check_match(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_match *m = obj;
    int n = (m->path != NULL) + (m->path_prefix != NULL) + (m->path_glob != NULL);

    if (n > 1)
        schema_bad(ctx, path, "give one of path, path_prefix, path_glob");
}

/* A problem was reported with a field that names limit i's key: it is no
 * duplicate of another then, whatever it reads as. */
static bool
key_unknown(const char *path, size_t i, struct schema_ctx *ctx)
{
    static const char *const names[] = {"algorithm", "window", "period", "timezone",
                                        "week_start"};
    char *ip = *path ? xasprintf("%s.limits[%zu]", path, i) : xasprintf("limits[%zu]", i);
    bool bad = false;

    for (size_t k = 0; k < RL_ARRAY_LEN(names) && !bad; k++)
        bad = schema_problem_at(ctx, ip, names[k]);
    free(ip);
    return bad;
}

static void
check_limit_list(const struct rl_limit *l, size_t n, const char *path, struct schema_ctx *ctx)
{
    size_t leases = 0;

    if (l != NULL && (n == 0 || n > RL_LIMITS_MAX))
        schema_bad_field(ctx, path, "limits", "must hold 1..%d limits", RL_LIMITS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (l[i].algo == RL_ALGO_CONCURRENCY && leases++ > 0) {
            char *fp = xasprintf("%s.limits", path);
            schema_bad_item(ctx, fp, i,
                            "a second concurrency limit: a check answers one lease, so a "
                            "policy has at most one");
            free(fp);
        }
        for (size_t j = 0; j < i; j++) {
            if (algo_same_key(&l[i], &l[j]) && !key_unknown(path, i, ctx) &&
                !key_unknown(path, j, ctx)) {
                char *fp = *path ? xasprintf("%s.limits", path) : xstrdup("limits");
                schema_bad_item(ctx, fp, i,
                                "same algorithm and %s as limits[%zu]: "
                                "they would share one counter",
                                algo_has_period(&l[i]) ? "period" : "window", j);
                free(fp);
            }
        }
    }
}

/*
 * Identities are typed, as the identity chain types them: an override for
 * the address 10.0.0.7 must not be claimed by an API key "10.0.0.7".
 */
static void
check_override(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_override *o = obj;
    char *ip = xasprintf("%s.identities", path);
    struct rl_cidr c;

    check_limit_list(o->limits, o->nlimits, path, ctx);
    for (size_t i = 0; i < o->identities.n; i++) {
        const char *v = o->identities.v[i];
        if (strncmp(v, "key:", 4) == 0 && v[4] != '\0')
            continue;
        if (strncmp(v, "ip:", 3) == 0 && cidr_parse(v + 3, &c) == RL_OK)
            continue;
        if (strncmp(v, "ip:", 3) == 0)
            schema_bad_item(ctx, ip, i,
                            "\"%s\" is not an address or CIDR: write "
                            "\"ip:10.0.0.7\", \"ip:10.1.0.0/16\" or \"ip:2001:db8::/32\"",
                            v + 3);
        else
            schema_bad_item(ctx, ip, i,
                            "\"%s\" has no type: write \"key:%s\" for an API "
                            "key (from the body or a header) or \"ip:%s\" for a client "
                            "address or CIDR",
                            v, v, v);
    }
    free(ip);
}

static bool
limits_have_period(const struct rl_limit *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (algo_has_period(&l[i]))
            return true;
    return false;
}

static bool
policy_has_period(const struct rl_policy *p)
{
    if (limits_have_period(p->limits, p->nlimits))
        return true;
    for (size_t i = 0; i < p->noverrides; i++)
        if (limits_have_period(p->overrides[i].limits, p->overrides[i].nlimits))
            return true;
    return false;
}

/* request_limits_cap: counted with a caller's own limits, in one call of
 * at most RL_LIMITS_MAX, and by the policy's identity (the caller's). */
static void
check_caps(const struct rl_policy *p, const char *path, struct schema_ctx *ctx)
{
    if (p->ncaps == 0)
        return;
    if (!p->request_limits)
        schema_bad_field(
            ctx, path, "request_limits_cap",
            "caps what callers' own limits admit: needs \"request_limits\": true");
    if (p->ncaps > RL_CAPS_MAX)
        schema_bad_field(ctx, path, "request_limits_cap", "must be a list of 1..%d limits",
                         RL_CAPS_MAX);
    for (size_t i = 0; i < p->ncaps && i < RL_LIMITS_MAX; i++) {
        char *ip = xasprintf("%s%srequest_limits_cap[%zu]", path, *path ? "." : "", i);

        if (p->caps[i].identity != NULL)
            schema_bad_field(ctx, ip, "identity", "a cap counts by the policy's identity");
        if (p->caps[i].algo == RL_ALGO_CONCURRENCY)
            schema_bad_field(ctx, ip, "algorithm",
                             "a cap counts what is admitted: not concurrency");
        for (size_t j = 0; j < i; j++)
            if (algo_same_key(&p->caps[i], &p->caps[j]))
                schema_bad(ctx, ip,
                           "same algorithm and window as request_limits_cap[%zu]: "
                           "one key, counted twice",
                           j);
        free(ip);
    }
}

static void
check_policy(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_policy *p = obj;

    if (p->name != NULL && !valid_name(p->name))
        schema_bad_field(ctx, path, "name", "must be 1..%d of A-Z a-z 0-9 _ . -", RL_NAME_MAX);
    check_limit_list(p->limits, p->nlimits, path, ctx);
    if (p->sync_interval_ms != 0 && p->mode != RL_MODE_HYBRID)
        schema_bad_field(ctx, path, "sync_interval",
                         "only a policy with \"mode\": \"hybrid\" syncs");
    if (p->request_limits_max != 0 && !p->request_limits)
        schema_bad_field(ctx, path, "request_limits_max",
                         "caps the limits callers send: needs \"request_limits\": true");
    check_caps(p, path, ctx);
    if (p->mode == RL_MODE_HYBRID && p->request_limits)
        schema_bad_field(ctx, path, "request_limits",
                         "a hybrid policy decides from the limits it knows: not with "
                         "\"mode\": \"hybrid\"");
    if (p->mode == RL_MODE_HYBRID && policy_has_period(p))
        schema_bad_field(ctx, path, "mode",
                         "a hybrid policy's estimates need windows of a fixed length: "
                         "its limits (and its overrides') cannot have a period");
    /* a delay is exact only where the future admission is: the buckets */
    for (size_t k = 0; p->max_delay_ms > 0 && k <= p->noverrides; k++) {
        const struct rl_limit *l = k == 0 ? p->limits : p->overrides[k - 1].limits;
        size_t n = k == 0 ? p->nlimits : p->overrides[k - 1].nlimits;
        const char *where = k == 0 ? "" : "an override's ";

        if (p->mode == RL_MODE_HYBRID) {
            schema_bad_field(ctx, path, "max_delay",
                             "a hybrid policy decides in the worker: it cannot hold a check");
            break;
        }
        bool bucket = false;

        for (size_t i = 0; i < n; i++) {
            bucket |= l[i].algo == RL_ALGO_TOKEN_BUCKET || l[i].algo == RL_ALGO_GCRA;
            /* a concurrency limit beside: held only with a slot free */
            if (l[i].algo != RL_ALGO_TOKEN_BUCKET && l[i].algo != RL_ALGO_GCRA &&
                l[i].algo != RL_ALGO_CONCURRENCY)
                schema_bad_field(
                    ctx, path, "max_delay",
                    "only token_bucket and gcra know exactly when a check will fit: "
                    "%slimits[%zu] is %s",
                    where, i, algo_def(l[i].algo)->name);
        }
        if (!bucket)
            schema_bad_field(ctx, path, "max_delay",
                             "%slimits have no token_bucket or gcra to smooth", where);
    }
    /* leases live in the backend: a hybrid policy decides in the worker */
    for (size_t k = 0; p->mode == RL_MODE_HYBRID && k <= p->noverrides; k++) {
        const struct rl_limit *l = k == 0 ? p->limits : p->overrides[k - 1].limits;
        size_t n = k == 0 ? p->nlimits : p->overrides[k - 1].nlimits;

        for (size_t i = 0; i < n; i++) {
            if (l[i].algo != RL_ALGO_CONCURRENCY)
                continue;
            char *lp = k == 0 ? xasprintf("%s.limits[%zu]", path, i)
                              : xasprintf("%s.overrides[%zu].limits[%zu]", path, k - 1, i);
            schema_bad_field(ctx, lp, "algorithm",
                             "a hybrid policy cannot hold leases: \"concurrency\" needs "
                             "\"mode\": \"exact\"");
            free(lp);
        }
    }
    /* a hybrid entry is one key's counts: one identity for every limit */
    for (size_t i = 0; p->mode == RL_MODE_HYBRID && i < p->nlimits; i++) {
        if (p->limits[i].identity != NULL) {
            char *lp = xasprintf("%s.limits[%zu]", path, i);
            schema_bad_field(ctx, lp, "identity",
                             "a hybrid policy decides all its limits for the policy's "
                             "caller: give the identity to the policy, or use \"mode\": "
                             "\"exact\"");
            free(lp);
        }
    }
}

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
static void
check_rls(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_rls_conf *r = obj;
    struct rl_listen_addr la;
    char *cause = NULL;

    if (r->request_limits_max != 0 && !r->request_limits)
        schema_bad_field(ctx, path, "request_limits_max",
                         "caps the limits descriptors bring: needs \"request_limits\": true");
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
    (void)path;
}

/* ---- finalize: what is derived from the options ---------------------------- */

/* A policy's identity for caches that outlive a reload: its address may be
 * reused by the next config, its uid never. */
static uint64_t
next_uid(void)
{
    static uint64_t last;

    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

uint64_t
config_new_uid(void)
{
    return next_uid();
}

static void
clear_override(void *obj)
{
    struct rl_override *o = obj;

    free(o->as_policy);
    o->as_policy = NULL;
    free(o->ips.v);
    o->ips.v = NULL;
    o->ips.n = 0;
    free(o->keys);
    o->keys = NULL;
    o->nkeys = 0;
}

static void
finalize_limits(struct rl_limit *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (l[i].burst == 0)
            l[i].burst = l[i].limit;
        /* the lease is the concurrency limit's window: its key's name and
         * its state's lifetime */
        if (l[i].algo == RL_ALGO_CONCURRENCY) {
            if (l[i].lease_ms == 0)
                l[i].lease_ms = LEASE_DEFAULT_MS;
            l[i].window_ms = l[i].lease_ms;
        }
    }
}

/*
 * An override becomes a policy of its own that shares the parent's name (and
 * so its keys' hash tag and its metrics) and match; its typed identities
 * become the keys and addresses config_policy_for() looks up.  A uid once
 * given is kept: finalize runs again after flags.
 */
static void
finalize_override(struct rl_override *o, const struct rl_policy *parent)
{
    uint64_t uid = o->as_policy != NULL ? o->as_policy->uid : next_uid();
    size_t n = o->identities.n ? o->identities.n : 1;

    clear_override(o);
    finalize_limits(o->limits, o->nlimits);
    o->keys = xcalloc(n, sizeof(*o->keys));
    o->ips.v = xcalloc(n, sizeof(*o->ips.v));
    for (size_t i = 0; i < o->identities.n; i++) {
        const char *v = o->identities.v[i];
        if (strncmp(v, "key:", 4) == 0 && v[4] != '\0')
            o->keys[o->nkeys++] = o->identities.v[i] + 4;
        else if (strncmp(v, "ip:", 3) == 0 && cidr_parse(v + 3, &o->ips.v[o->ips.n]) == RL_OK)
            /* a caller is its network (ipv6_prefix): an entry for one
             * address of it stands for all of it */
            cidr_fold(&o->ips.v[o->ips.n++], parent->fold4, parent->fold6);
    }
    o->as_policy = xcalloc(1, sizeof(*o->as_policy));
    *o->as_policy = *parent;
    o->as_policy->limits = o->limits;
    o->as_policy->nlimits = o->nlimits;
    o->as_policy->overrides = NULL;
    o->as_policy->noverrides = 0;
    o->as_policy->uid = uid;
}

/*
 * A pattern is matched against normalised paths, so it is normalised the
 * same way: "/%61pi/" and "/api/" are one pattern.  Normalising a normalised
 * pattern changes nothing, so running again after flags is harmless.
 */
static void
normalise_pattern(char **pat, unsigned flags, unsigned folds, size_t policy, const char *name,
                  struct schema_ctx *ctx)
{
    char *cause = NULL;
    size_t len, n;
    char *out;

    /* a glob may start with '*': it is not a path, and is matched as
     * written, folded like the paths */
    if (*pat != NULL && (*pat)[0] != '/')
        pathnorm_fold(*pat, strlen(*pat), folds);
    if (*pat == NULL || (*pat)[0] != '/')
        return;
    len = strlen(*pat);
    out = xmalloc(len + 1);
    if (pathnorm(*pat, len, flags, out, &n, &cause) != RL_OK) {
        char *p = xasprintf("policies[%zu].match.%s", policy, name);
        schema_bad(ctx, p, "\"%s\" cannot be normalised: %s", *pat, cause);
        free(cause);
        free(p);
        free(out);
        return;
    }
    free(*pat);
    /* folded like the paths (a glob's '*' and '?' have no letter to fold) */
    pathnorm_fold(out, n, folds);
    *pat = out;
}

static int
has_limit_ids(const struct rl_limit *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (l[i].identity != NULL)
            return 1;
    return 0;
}

static void
finalize_policy(const struct rl_config *cfg, struct rl_policy *p, size_t i, unsigned pathflags,
                struct schema_ctx *ctx)
{
    normalise_pattern(&p->match.path, pathflags, cfg->path_fold, i, "path", ctx);
    normalise_pattern(&p->match.path_prefix, pathflags, cfg->path_fold, i, "path_prefix", ctx);
    normalise_pattern(&p->match.path_glob, pathflags, cfg->path_fold, i, "path_glob", ctx);
    if (p->uid == 0)
        p->uid = next_uid();
    if (p->sync_interval_ms == 0)
        p->sync_interval_ms = HYBRID_SYNC_DEFAULT_MS;
    p->fold4 = (int)(p->ipv4_prefix != 0 ? p->ipv4_prefix : cfg->ipv4_prefix);
    p->fold6 = (int)(p->ipv6_prefix != 0 ? p->ipv6_prefix : cfg->ipv6_prefix);
    /* the key layout of every caller of the policy, overrides included */
    p->limit_ids = has_limit_ids(p->limits, p->nlimits);
    for (size_t k = 0; k < p->noverrides; k++)
        p->limit_ids |= has_limit_ids(p->overrides[k].limits, p->overrides[k].nlimits);
    finalize_limits(p->limits, p->nlimits);
    finalize_limits(p->caps, p->ncaps);
    for (size_t k = 0; k < p->ncaps; k++)
        p->caps[k].cap = 1;
    for (size_t k = 0; k < p->noverrides; k++)
        finalize_override(&p->overrides[k], p);
}

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
    unsigned pathflags = cfg->merge_slashes ? 0 : RL_PATHNORM_KEEP_SLASHES;

    for (size_t i = 0; i < cfg->npolicies; i++)
        finalize_policy(cfg, &cfg->policies[i], i, pathflags, ctx);
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

/*
 * A sliding log keeps one entry per admitted check inside its window: a
 * caller at the limit holds `limit` entries.  Measured with Redis 7.0 and
 * the packed members: 118-129 bytes per entry once a key has more than 128
 * (a skiplist; ~31 below), so 10,000 entries make a key of about 1.2 MB;
 * the memory backend holds 16 bytes per entry.
 */
#define SWL_WARN_ENTRIES 10000
#define SWL_BYTES_PER_ENTRY 120

static void
warn_limits(const struct rl_limit *l, size_t n, const char *path, const char *file,
            struct rl_errors *warns)
{
    for (size_t i = 0; i < n; i++) {
        if (l[i].algo != RL_ALGO_SLIDING_WINDOW_LOG || l[i].limit <= SWL_WARN_ENTRIES)
            continue;
        errors_add(warns,
                   "%s: %s.limits[%zu]: a sliding_window_log of limit %lld keeps up to %lld "
                   "entries per caller: about %.1f MB per key in Redis (~%d bytes an entry), "
                   "%.1f MB in the memory backend; sliding_window_counter keeps one small key",
                   file, path, i, (long long)l[i].limit, (long long)l[i].limit,
                   (double)l[i].limit * SWL_BYTES_PER_ENTRY / 1e6, SWL_BYTES_PER_ENTRY,
                   (double)l[i].limit * 16 / 1e6);
    }
}

void
config_warnings(const struct rl_config *cfg, struct rl_errors *warns)
{
    const char *file = cfg->file != NULL ? cfg->file : "configuration";

    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct rl_policy *p = &cfg->policies[i];
        char *path = xasprintf("policies[%zu]", i);

        warn_limits(p->limits, p->nlimits, path, file, warns);
        /* request_limits_max bounds each limit a caller sends, not what it
         * is admitted: one varying its windows gets a fresh key each time. */
        if (p->request_limits && p->ncaps == 0)
            errors_add(
                warns,
                "%s: %s: request_limits without request_limits_cap: a caller that varies "
                "its limits (window, algorithm, period, zone) is not bounded by "
                "request_limits_max, only each limit's size is",
                file, path);
        for (size_t k = 0; k < p->noverrides; k++) {
            char *op = xasprintf("policies[%zu].overrides[%zu]", i, k);
            warn_limits(p->overrides[k].limits, p->overrides[k].nlimits, op, file, warns);
            free(op);
        }
        free(path);
    }
}

/* ---- public API ------------------------------------------------------------ */

int
config_parse_limits(json_t *v, struct rl_limit *out, size_t *n, char **cause)
{
    struct rl_errors errs = {0};
    struct schema_ctx ctx = {NULL, &errs};
    size_t k = json_array_size(v);
    int rc;

    /* a list longer than a policy may hold is not read at all */
    if (!json_is_array(v) || k == 0 || k > RL_LIMITS_MAX) {
        *cause = xasprintf("limits: must be a list of 1..%d limits", RL_LIMITS_MAX);
        return RL_ERR;
    }
    /* each element by the rows of a policy's limits, then the list by its
     * rules: one set of checks and messages for both */
    for (size_t i = 0; i < k; i++) {
        json_t *e = json_array_get(v, i);
        char *ip = xasprintf("limits[%zu]", i);

        memset(&out[i], 0, sizeof(out[i])); /* fields without a default: 0 */
        schema_defaults(&limit_schema, &out[i]);
        if (!json_is_object(e))
            schema_bad(&ctx, ip, "must be an object");
        else
            schema_parse(&limit_schema, &out[i], e, ip, &ctx);
        /* the keys of a check's own limits are the policy's (its
         * identity's): what lets a plan change keep its counts */
        if (out[i].identity != NULL)
            schema_bad_field(&ctx, ip, "identity",
                             "a check's own limits count by the policy's identity");
        free(ip);
    }
    check_limit_list(out, k, "", &ctx);
    rc = errs.n == 0 ? RL_OK : RL_ERR;
    if (rc == RL_OK) {
        finalize_limits(out, k);
        *n = k;
    } else {
        *cause = xstrdup(errs.msg[0]);
    }
    for (size_t i = 0; i < k; i++)
        if (rc != RL_OK || out[i].identity != NULL)
            schema_free(&limit_schema, &out[i]);
    errors_free(&errs);
    return rc;
}

const struct rl_policy *
config_policy_for(const struct rl_policy *p, const char *id, size_t idlen)
{
    char net[64];
    struct rl_cidr c;

    /* Linear: overrides are for a handful of tiers or partners, not for a
     * customer database. */
    if (idlen > 2 && memcmp(id, "k:", 2) == 0) {
        for (size_t i = 0; i < p->noverrides; i++) {
            const struct rl_override *o = &p->overrides[i];
            for (size_t j = 0; j < o->nkeys; j++)
                if (strlen(o->keys[j]) == idlen - 2 &&
                    memcmp(o->keys[j], id + 2, idlen - 2) == 0)
                    return o->as_policy;
        }
    } else if (idlen > 3 && idlen - 3 < sizeof(net) && memcmp(id, "ip:", 3) == 0) {
        /* "ip:203.0.113.7", "ip:2001:db8:1:2::/64": the caller's network,
         * in the override's (folded the same way at load) */
        memcpy(net, id + 3, idlen - 3);
        net[idlen - 3] = '\0';
        if (cidr_parse(net, &c) != RL_OK)
            return p;
        for (size_t i = 0; i < p->noverrides; i++)
            if (cidr_list_contains(&p->overrides[i].ips, c.family, c.addr))
                return p->overrides[i].as_policy;
    }
    return p;
}

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
    if (rls_rules_load(cfg->rls.config, next_uid, &cfg->rls.rules, errs) == RL_OK)
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

int
config_set_option(struct rl_config *cfg, const char *name, const char *text,
                  const char *origin, struct rl_errors *errs)
{
    struct schema_ctx ctx = {origin, errs};

    if (schema_set(&top_schema, cfg, name, text, &ctx) != RL_OK)
        return RL_ERR;
    if (strcmp(name, "listen") == 0) /* checked with the top level, later */
        cfg->listen_origin = origin;
    return RL_OK;
}

bool
config_lease_limit(const struct rl_policy *p, size_t *index)
{
    for (size_t i = 0; i < p->nlimits; i++) {
        if (p->limits[i].algo == RL_ALGO_CONCURRENCY) {
            *index = i;
            return true;
        }
    }
    return false;
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
