/*
 * config.c — the option table and the one walker that applies it.
 *
 * Every option is a row: name, type, where it lands in the struct, its
 * default (as JSON text, parsed by the same code as the file), bounds, and
 * whether a reload can change it.  Objects (redis, a policy, a limit, a match)
 * are tables of their own, so `policies[2].limits[0].window` is found, parsed
 * and reported by the same code as `listen`.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "config.h"
#include "netaddr.h"
#include "pathnorm.h"
#include "redis_url.h"
#include "util.h"

enum ftype {
    T_STRING, T_INT, T_DURATION, T_SIZE, T_BOOL, T_ENUM,
    T_IDENTITY, T_CIDRS, T_METHODS, T_STRLIST, T_OBJECT, T_ARRAY
};

#define F_REQUIRED 0x1  /* must be present in its object */
#define F_RESTART 0x2   /* a reload cannot change it; logged when it differs */
#define F_NONEMPTY 0x4  /* T_STRING: "" is not a value */

#define SECRET_MAX 4096 /* bytes of a password read from a file */

struct schema;

struct field {
    const char *name;
    enum ftype type;
    size_t off;
    const char *def;            /* default as JSON text; NULL: zero */
    int64_t min, max;           /* T_INT, T_DURATION, T_SIZE */
    const char *const *names;   /* T_ENUM: by value, NULL-terminated */
    const struct schema *sub;   /* T_OBJECT, T_ARRAY */
    size_t count_off;           /* T_ARRAY: its size_t count */
    unsigned flags;
    const char *hint;           /* how a valid value looks, for messages */
};

struct load_ctx {
    const char *origin;         /* file name, "-l", "RATELIMITD_LISTEN", ... */
    struct rl_errors *errs;
};

struct schema {
    const struct field *fields;
    size_t nfields;
    size_t size;                /* of one element, for T_ARRAY */
    void (*check)(void *obj, const char *path, struct load_ctx *ctx);
};

/* ---- errors -------------------------------------------------------- */

void
errors_add(struct rl_errors *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    e->msg = xrealloc(e->msg, (e->n + 1) * sizeof(*e->msg));
    e->msg[e->n++] = xvasprintf(fmt, ap);
    va_end(ap);
}

void
errors_free(struct rl_errors *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->msg[i]);
    free(e->msg);
    e->msg = NULL;
    e->n = 0;
}

static void RL_PRINTF(3, 4)
bad(struct load_ctx *ctx, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *what = xvasprintf(fmt, ap);
    va_end(ap);
    errors_add(ctx->errs, "%s: %s: %s", ctx->origin, path, what);
    free(what);
}

/* ---- scalar parsers (exported for the command line and tests) ---------- */

int
parse_duration_ms(const char *s, int64_t *out)
{
    char *end;
    int64_t mult;

    if (!isdigit((unsigned char)s[0]))
        return RL_ERR;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0)
        return RL_ERR;
    if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "m") == 0)
        mult = 60 * 1000;
    else if (strcmp(end, "h") == 0)
        mult = 3600 * 1000;
    else
        return RL_ERR;
    if (v > INT64_MAX / mult)
        return RL_ERR;
    *out = (int64_t)v * mult;
    return RL_OK;
}

int
parse_size(const char *s, int64_t *out)
{
    char *end;
    int64_t mult = 1;

    if (!isdigit((unsigned char)s[0]))
        return RL_ERR;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0)
        return RL_ERR;
    if (*end == 'k' || *end == 'K')
        mult = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1024 * 1024, end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || v > INT64_MAX / mult)
        return RL_ERR;
    *out = (int64_t)v * mult;
    return RL_OK;
}

int
parse_cidr(const char *s, struct rl_cidr *out)
{
    return cidr_parse(s, out);
}

static const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};

int
parse_log_level(const char *s, enum rl_log_level *out)
{
    for (int i = 0; log_level_names[i] != NULL; i++) {
        if (strcmp(s, log_level_names[i]) == 0) {
            *out = (enum rl_log_level)i;
            return RL_OK;
        }
    }
    return RL_ERR;
}

const char *
log_level_name(enum rl_log_level l)
{
    return (unsigned)l < RL_ARRAY_LEN(log_level_names) - 1 ? log_level_names[l] : "?";
}

/* ---- the tables ---------------------------------------------------------- */

static const char *const backend_names[] = {"redis", "memory", NULL};
static const char *const failure_names[] = {"open", "closed", "local", NULL};
static const char *const fwd_header_names[] = {"x-forwarded-for", "forwarded", NULL};
static const char *const mode_names[] = {"exact", "hybrid", NULL};
static const char *const reqhdr_names[] = {"original", "forwarded", NULL};
static const char *const badpath_names[] = {"reject", "raw", NULL};
static const char *const reset_names[] = {"delta", "epoch", NULL};
static const char *const algo_name_list[] = {
    "fixed_window", "sliding_window_log", "sliding_window_counter",
    "token_bucket", "gcra", NULL
};

#define DURATION_HINT "a duration like \"500ms\", \"10s\", \"1m\", \"1h\""
#define SIZE_HINT "a size like \"64k\", \"1m\" or a number of bytes"
#define DAY_MS (24LL * 3600 * 1000)
#define HYBRID_SYNC_DEFAULT_MS 250

static void check_limit(void *obj, const char *path, struct load_ctx *ctx);
static void check_policy(void *obj, const char *path, struct load_ctx *ctx);
static void check_redis(void *obj, const char *path, struct load_ctx *ctx);
static void check_match(void *obj, const char *path, struct load_ctx *ctx);

#define FIELDS(a) (a), RL_ARRAY_LEN(a)

static const struct field limit_fields[] = {
    {"algorithm", T_ENUM, offsetof(struct rl_limit, algo), NULL, 0, 0,
     algo_name_list, NULL, 0, F_REQUIRED, NULL},
    {"limit", T_INT, offsetof(struct rl_limit, limit), NULL, 1, 1000000000,
     NULL, NULL, 0, F_REQUIRED, NULL},
    {"window", T_DURATION, offsetof(struct rl_limit, window_ms), NULL, 1,
     366 * DAY_MS, NULL, NULL, 0, F_REQUIRED, DURATION_HINT},
    {"burst", T_INT, offsetof(struct rl_limit, burst), NULL, 1, 1000000000,
     NULL, NULL, 0, 0, NULL},
};
static const struct schema limit_schema = {
    FIELDS(limit_fields), sizeof(struct rl_limit), check_limit
};

static const struct field match_fields[] = {
    {"path", T_STRING, offsetof(struct rl_match, path), NULL, 0, 0, NULL,
     NULL, 0, F_NONEMPTY, NULL},
    {"path_prefix", T_STRING, offsetof(struct rl_match, path_prefix), NULL, 0,
     0, NULL, NULL, 0, F_NONEMPTY, NULL},
    {"path_glob", T_STRING, offsetof(struct rl_match, path_glob), NULL, 0, 0,
     NULL, NULL, 0, F_NONEMPTY, NULL},
    {"methods", T_METHODS, offsetof(struct rl_match, methods), NULL, 0, 0,
     NULL, NULL, 0, 0, NULL},
};
static const struct schema match_schema = {
    FIELDS(match_fields), sizeof(struct rl_match), check_match
};

static void check_override(void *obj, const char *path, struct load_ctx *ctx);

static const struct field override_fields[] = {
    {"identities", T_STRLIST, offsetof(struct rl_override, identities), NULL, 0, 0,
     NULL, NULL, 0, F_REQUIRED, NULL},
    {"limits", T_ARRAY, offsetof(struct rl_override, limits), NULL, 0, 0, NULL,
     &limit_schema, offsetof(struct rl_override, nlimits), F_REQUIRED, NULL},
};
static const struct schema override_schema = {
    FIELDS(override_fields), sizeof(struct rl_override), check_override
};

static const struct field policy_fields[] = {
    {"name", T_STRING, offsetof(struct rl_policy, name), NULL, 0, 0, NULL, NULL,
     0, F_REQUIRED | F_NONEMPTY, NULL},
    {"match", T_OBJECT, offsetof(struct rl_policy, match), NULL, 0, 0, NULL,
     &match_schema, 0, 0, NULL},
    {"limits", T_ARRAY, offsetof(struct rl_policy, limits), NULL, 0, 0, NULL,
     &limit_schema, offsetof(struct rl_policy, nlimits), F_REQUIRED, NULL},
    {"shadow", T_BOOL, offsetof(struct rl_policy, shadow), "false", 0, 0,
     NULL, NULL, 0, 0, NULL},
    {"identity", T_IDENTITY, offsetof(struct rl_policy, identity), NULL, 0, 0,
     NULL, NULL, 0, 0, NULL},
    {"overrides", T_ARRAY, offsetof(struct rl_policy, overrides), NULL, 0, 0, NULL,
     &override_schema, offsetof(struct rl_policy, noverrides), 0, NULL},
    {"mode", T_ENUM, offsetof(struct rl_policy, mode), "\"exact\"", 0, 0,
     mode_names, NULL, 0, 0, NULL},
    /* no default here: given without "mode": "hybrid" it is an error, so
     * check_policy sets HYBRID_SYNC_DEFAULT_MS when it is absent */
    {"sync_interval", T_DURATION, offsetof(struct rl_policy, sync_interval_ms), NULL,
     10, 60 * 1000, NULL, NULL, 0, 0, DURATION_HINT},
};
static const struct schema policy_schema = {
    FIELDS(policy_fields), sizeof(struct rl_policy), check_policy
};

static void check_sentinel(void *obj, const char *path, struct load_ctx *ctx);

static const struct field sentinel_fields[] = {
    {"master", T_STRING, offsetof(struct rl_sentinel_conf, master), NULL, 0, 0, NULL,
     NULL, 0, F_REQUIRED | F_NONEMPTY | F_RESTART, NULL},
    {"nodes", T_STRLIST, offsetof(struct rl_sentinel_conf, nodes), NULL, 0, 0, NULL,
     NULL, 0, F_REQUIRED | F_RESTART, NULL},
};
static const struct schema sentinel_schema = {
    FIELDS(sentinel_fields), sizeof(struct rl_sentinel_conf), check_sentinel
};

static void check_tls(void *obj, const char *path, struct load_ctx *ctx);

/* File names are reloadable: a reload reads them again (rotation). */
static const struct field tls_fields[] = {
    {"enabled", T_BOOL, offsetof(struct rl_tls_conf, enabled), "false", 0, 0, NULL,
     NULL, 0, F_RESTART, NULL},
    {"ca_file", T_STRING, offsetof(struct rl_tls_conf, ca_file), NULL, 0, 0, NULL,
     NULL, 0, F_NONEMPTY, NULL},
    {"cert_file", T_STRING, offsetof(struct rl_tls_conf, cert_file), NULL, 0, 0, NULL,
     NULL, 0, F_NONEMPTY, NULL},
    {"key_file", T_STRING, offsetof(struct rl_tls_conf, key_file), NULL, 0, 0, NULL,
     NULL, 0, F_NONEMPTY, NULL},
    {"server_name", T_STRING, offsetof(struct rl_tls_conf, server_name), NULL, 0, 0,
     NULL, NULL, 0, F_NONEMPTY, NULL},
    {"verify", T_BOOL, offsetof(struct rl_tls_conf, verify), "true", 0, 0, NULL,
     NULL, 0, 0, NULL},
};
static const struct schema tls_schema = {
    FIELDS(tls_fields), sizeof(struct rl_tls_conf), check_tls
};

static const struct field redis_fields[] = {
    {"url", T_STRING, offsetof(struct rl_redis_conf, url),
     "\"redis://127.0.0.1:6379/0\"", 0, 0, NULL, NULL, 0, F_NONEMPTY | F_RESTART, NULL},
    {"cluster", T_STRLIST, offsetof(struct rl_redis_conf, cluster), NULL, 0, 0, NULL,
     NULL, 0, F_RESTART, NULL},
    {"sentinel", T_OBJECT, offsetof(struct rl_redis_conf, sentinel), NULL, 0, 0, NULL,
     &sentinel_schema, 0, 0, NULL},
    {"timeout", T_DURATION, offsetof(struct rl_redis_conf, timeout_ms), "\"50ms\"",
     1, 60000, NULL, NULL, 0, 0, DURATION_HINT},
    {"connect_timeout", T_DURATION, offsetof(struct rl_redis_conf, connect_timeout_ms),
     "\"1s\"", 1, 600000, NULL, NULL, 0, F_RESTART, DURATION_HINT},
    {"max_pending", T_INT, offsetof(struct rl_redis_conf, max_pending), "1000", 16,
     65536, NULL, NULL, 0, F_RESTART, NULL},
    {"coalesce", T_INT, offsetof(struct rl_redis_conf, coalesce), "64", 1, 1024, NULL,
     NULL, 0, F_RESTART, NULL},
    {"key_prefix", T_STRING, offsetof(struct rl_redis_conf, key_prefix), "\"rl:\"",
     0, 0, NULL, NULL, 0, 0, NULL},
    {"username", T_STRING, offsetof(struct rl_redis_conf, username), NULL, 0, 0,
     NULL, NULL, 0, F_RESTART, NULL},
    {"password", T_STRING, offsetof(struct rl_redis_conf, password), NULL, 0, 0,
     NULL, NULL, 0, F_RESTART, NULL},
    {"password_file", T_STRING, offsetof(struct rl_redis_conf, password_file), NULL,
     0, 0, NULL, NULL, 0, F_NONEMPTY | F_RESTART, NULL},
    {"tls", T_OBJECT, offsetof(struct rl_redis_conf, tls), NULL, 0, 0, NULL,
     &tls_schema, 0, 0, NULL},
};
static const struct schema redis_schema = {
    FIELDS(redis_fields), sizeof(struct rl_redis_conf), check_redis
};

static const struct field http_fields[] = {
    {"header_timeout", T_DURATION, offsetof(struct rl_http_conf, header_timeout_ms),
     "\"10s\"", 10, 3600 * 1000, NULL, NULL, 0, 0, DURATION_HINT},
    {"body_timeout", T_DURATION, offsetof(struct rl_http_conf, body_timeout_ms),
     "\"10s\"", 10, 3600 * 1000, NULL, NULL, 0, 0, DURATION_HINT},
    {"idle_timeout", T_DURATION, offsetof(struct rl_http_conf, idle_timeout_ms),
     "\"60s\"", 10, 3600 * 1000, NULL, NULL, 0, 0, DURATION_HINT},
    {"max_header_bytes", T_SIZE, offsetof(struct rl_http_conf, max_header_bytes),
     "\"16k\"", 256, 1024 * 1024, NULL, NULL, 0, 0, SIZE_HINT},
    {"max_pipelined", T_INT, offsetof(struct rl_http_conf, max_pipelined), "32", 1,
     1024, NULL, NULL, 0, 0, NULL},
    {"max_connections", T_INT, offsetof(struct rl_http_conf, max_connections),
     "10000", 1, 10000000, NULL, NULL, 0, 0, NULL},
};
static const struct schema http_schema = {
    FIELDS(http_fields), sizeof(struct rl_http_conf), NULL
};

static const struct field top_fields[] = {
    {"listen", T_STRING, offsetof(struct rl_config, listen), "\"127.0.0.1:8080\"",
     0, 0, NULL, NULL, 0, F_NONEMPTY | F_RESTART, NULL},
    {"workers", T_INT, offsetof(struct rl_config, workers), "1", 0, 256, NULL,
     NULL, 0, F_RESTART, NULL},
    {"backend", T_ENUM, offsetof(struct rl_config, backend), "\"redis\"", 0, 0,
     backend_names, NULL, 0, F_RESTART, NULL},
    {"redis", T_OBJECT, offsetof(struct rl_config, redis), NULL, 0, 0, NULL,
     &redis_schema, 0, 0, NULL},
    {"failure_mode", T_ENUM, offsetof(struct rl_config, failure_mode), "\"open\"",
     0, 0, failure_names, NULL, 0, 0, NULL},
    {"identity", T_IDENTITY, offsetof(struct rl_config, identity),
     "[\"body\", \"header:X-Api-Key\", \"forwarded\", \"peer\"]", 0, 0, NULL,
     NULL, 0, 0, NULL},
    {"trusted_proxies", T_CIDRS, offsetof(struct rl_config, trusted_proxies),
     "[\"127.0.0.0/8\", \"::1/128\"]", 0, 0, NULL, NULL, 0, 0, NULL},
    {"forwarded_header", T_ENUM, offsetof(struct rl_config, forwarded_rfc7239),
     "\"x-forwarded-for\"", 0, 0, fwd_header_names, NULL, 0, 0, NULL},
    {"forwarded_request_headers", T_ENUM, offsetof(struct rl_config, request_headers),
     "\"original\"", 0, 0, reqhdr_names, NULL, 0, 0, NULL},
    {"merge_slashes", T_BOOL, offsetof(struct rl_config, merge_slashes), "true", 0, 0,
     NULL, NULL, 0, 0, NULL},
    {"unnormalizable_path", T_ENUM, offsetof(struct rl_config, bad_path), "\"reject\"",
     0, 0, badpath_names, NULL, 0, 0, NULL},
    {"x_ratelimit_reset", T_ENUM, offsetof(struct rl_config, reset_format), "\"delta\"",
     0, 0, reset_names, NULL, 0, 0, NULL},
    {"partition_key", T_STRING, offsetof(struct rl_config, partition_key), NULL, 0, 0,
     NULL, NULL, 0, F_NONEMPTY, NULL},
    {"max_body", T_SIZE, offsetof(struct rl_config, max_body), "\"64k\"", 2,
     64 * 1024 * 1024, NULL, NULL, 0, F_RESTART, SIZE_HINT},
    {"max_inflight", T_INT, offsetof(struct rl_config, max_inflight), "10000", 1,
     10000000, NULL, NULL, 0, 0, NULL},
    {"access_log", T_INT, offsetof(struct rl_config, access_log), "0", 0, 1000000,
     NULL, NULL, 0, 0, NULL},
    {"forward_auth", T_BOOL, offsetof(struct rl_config, forward_auth), "false", 0, 0,
     NULL, NULL, 0, 0, NULL},
    {"deny_cache", T_BOOL, offsetof(struct rl_config, deny_cache), "true", 0, 0,
     NULL, NULL, 0, 0, NULL},
    {"deny_cache_size", T_INT, offsetof(struct rl_config, deny_cache_size), "65536",
     16, 16 * 1024 * 1024, NULL, NULL, 0, F_RESTART, NULL},
    {"hybrid_table_size", T_INT, offsetof(struct rl_config, hybrid_table_size),
     "65536", 16, 16 * 1024 * 1024, NULL, NULL, 0, F_RESTART, NULL},
    {"shutdown_grace", T_DURATION, offsetof(struct rl_config, shutdown_grace_ms),
     "\"10s\"", 0, 3600 * 1000, NULL, NULL, 0, 0, DURATION_HINT},
    {"http", T_OBJECT, offsetof(struct rl_config, http), NULL, 0, 0, NULL,
     &http_schema, 0, 0, NULL},
    {"log_level", T_ENUM, offsetof(struct rl_config, log_level), "\"info\"", 0, 0,
     log_level_names, NULL, 0, 0, NULL},
    {"policies", T_ARRAY, offsetof(struct rl_config, policies), NULL, 0, 0, NULL,
     &policy_schema, offsetof(struct rl_config, npolicies), 0, NULL},
    {"admin_listen", T_STRING, offsetof(struct rl_config, admin_listen), NULL, 0, 0,
     NULL, NULL, 0, F_NONEMPTY | F_RESTART, NULL},
    {"admin_allow_remote", T_BOOL, offsetof(struct rl_config, admin_allow_remote),
     "false", 0, 0, NULL, NULL, 0, F_RESTART, NULL},
    {"admin_token_file", T_STRING, offsetof(struct rl_config, admin_token_file), NULL,
     0, 0, NULL, NULL, 0, F_NONEMPTY, NULL},
};
static void check_top(void *obj, const char *path, struct load_ctx *ctx);
static const struct schema top_schema = {
    FIELDS(top_fields), sizeof(struct rl_config), check_top
};

/* ---- the walker ----------------------------------------------------------- */

#define AT(obj, off, type) ((type *)(void *)((char *)(obj) + (off)))

static void free_object(const struct schema *s, void *obj);
static void override_clear(struct rl_override *o);
static void parse_object(const struct schema *s, void *obj, json_t *j,
                         const char *path, struct load_ctx *ctx);
static void set_defaults(const struct schema *s, void *obj);

static char *
join_path(const char *path, const char *name)
{
    return *path ? xasprintf("%s.%s", path, name) : xstrdup(name);
}

static void
free_identity(struct rl_identity_chain *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i].header);
    free(c->v);
    c->v = NULL;
    c->n = 0;
}

static void
free_field(const struct field *f, void *obj)
{
    switch (f->type) {
    case T_STRING: {
        char **sp = AT(obj, f->off, char *);
        free(*sp);
        *sp = NULL;
        break;
    }
    case T_IDENTITY:
        free_identity(AT(obj, f->off, struct rl_identity_chain));
        break;
    case T_CIDRS: {
        struct rl_cidr_list *l = AT(obj, f->off, struct rl_cidr_list);
        free(l->v);
        l->v = NULL;
        l->n = 0;
        break;
    }
    case T_STRLIST: {
        struct rl_strlist *l = AT(obj, f->off, struct rl_strlist);
        for (size_t i = 0; i < l->n; i++)
            free(l->v[i]);
        free(l->v);
        l->v = NULL;
        l->n = 0;
        break;
    }
    case T_OBJECT:
        free_object(f->sub, AT(obj, f->off, char));
        break;
    case T_ARRAY: {
        char **arr = AT(obj, f->off, char *);
        size_t *n = AT(obj, f->count_off, size_t);
        for (size_t i = 0; i < *n; i++) {
            if (f->sub == &override_schema)
                override_clear((struct rl_override *)(void *)(*arr + i * f->sub->size));
            free_object(f->sub, *arr + i * f->sub->size);
        }
        free(*arr);
        *arr = NULL;
        *n = 0;
        break;
    }
    default:
        break;
    }
}

/* What check_override builds from the identities; not fields. */
static void
override_clear(struct rl_override *o)
{
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
free_object(const struct schema *s, void *obj)
{
    for (size_t i = 0; i < s->nfields; i++)
        free_field(&s->fields[i], obj);
}

static int
get_int_like(const struct field *f, json_t *v, int64_t *out, const char *path,
             struct load_ctx *ctx)
{
    const char *what = f->type == T_DURATION ? DURATION_HINT
                     : f->type == T_SIZE ? SIZE_HINT : NULL;

    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_string(v) && f->type == T_DURATION &&
               parse_duration_ms(json_string_value(v), out) == RL_OK) {
        /* parsed */
    } else if (json_is_string(v) && f->type == T_SIZE &&
               parse_size(json_string_value(v), out) == RL_OK) {
        /* parsed */
    } else {
        if (what != NULL)
            bad(ctx, path, "must be %s", what);
        else
            bad(ctx, path, "must be an integer");
        return RL_ERR;
    }
    if (*out < f->min || *out > f->max) {
        if (f->type == T_DURATION)
            bad(ctx, path, "must be between %lldms and %lldms",
                (long long)f->min, (long long)f->max);
        else
            bad(ctx, path, "must be between %lld and %lld",
                (long long)f->min, (long long)f->max);
        return RL_ERR;
    }
    return RL_OK;
}

static void
parse_identity(json_t *v, struct rl_identity_chain *out, const char *path,
               struct load_ctx *ctx)
{
    size_t i;
    json_t *e;

    free_identity(out);
    if (!json_is_array(v) || json_array_size(v) == 0) {
        bad(ctx, path, "must be a non-empty list of \"body\", \"header:NAME\", "
            "\"forwarded\", \"peer\"");
        return;
    }
    out->v = xcalloc(json_array_size(v), sizeof(*out->v));
    json_array_foreach(v, i, e) {
        char *ep = xasprintf("%s[%zu]", path, i);
        const char *s = json_string_value(e);
        struct rl_id_source *src = &out->v[out->n];
        if (s == NULL) {
            bad(ctx, ep, "must be a string");
        } else if (strcmp(s, "body") == 0) {
            src->kind = RL_ID_BODY, out->n++;
        } else if (strcmp(s, "forwarded") == 0) {
            src->kind = RL_ID_FORWARDED, out->n++;
        } else if (strcmp(s, "peer") == 0) {
            src->kind = RL_ID_PEER, out->n++;
        } else if (strncmp(s, "header:", 7) == 0 && s[7] != '\0' &&
                   strspn(s + 7, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789-_") == strlen(s + 7)) {
            src->kind = RL_ID_HEADER;
            src->header = xstrdup(s + 7);
            out->n++;
        } else {
            bad(ctx, ep, "unknown identity source \"%s\": use \"body\", "
                "\"header:NAME\", \"forwarded\" or \"peer\"", s);
        }
        free(ep);
    }
}

static void
parse_cidrs(json_t *v, struct rl_cidr_list *out, const char *path,
            struct load_ctx *ctx)
{
    size_t i;
    json_t *e;

    free(out->v);
    out->v = NULL;
    out->n = 0;
    if (!json_is_array(v)) {
        bad(ctx, path, "must be a list of CIDRs like \"10.0.0.0/8\", \"::1/128\"");
        return;
    }
    out->v = xcalloc(json_array_size(v), sizeof(*out->v));
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        if (s == NULL || cidr_parse(s, &out->v[out->n]) != RL_OK) {
            char *ep = xasprintf("%s[%zu]", path, i);
            bad(ctx, ep, "must be a CIDR like \"10.0.0.0/8\" or \"::1/128\"");
            free(ep);
            continue;
        }
        out->n++;
    }
}

static const struct { const char *name; unsigned bit; } method_bits[] = {
    {"GET", RL_M_GET}, {"HEAD", RL_M_HEAD}, {"POST", RL_M_POST},
    {"PUT", RL_M_PUT}, {"DELETE", RL_M_DELETE}, {"PATCH", RL_M_PATCH},
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
parse_methods(json_t *v, unsigned *out, const char *path, struct load_ctx *ctx)
{
    size_t i;
    json_t *e;

    *out = 0;
    if (!json_is_array(v) || json_array_size(v) == 0) {
        bad(ctx, path, "must be a non-empty list of methods like [\"GET\", \"POST\"]");
        return;
    }
    json_array_foreach(v, i, e) {
        const char *s = json_string_value(e);
        unsigned bit = s ? config_method_bit(s) : 0;
        if (bit == 0) {
            char *ep = xasprintf("%s[%zu]", path, i);
            bad(ctx, ep, "must be an HTTP method: GET, HEAD, POST, PUT, DELETE, "
                "PATCH, OPTIONS, CONNECT or TRACE");
            free(ep);
        }
        *out |= bit;
    }
}

static void
parse_field(const struct field *f, void *obj, json_t *v, const char *path,
            struct load_ctx *ctx)
{
    int64_t iv;

    switch (f->type) {
    case T_STRING: {
        char **sp = AT(obj, f->off, char *);
        if (!json_is_string(v)) {
            bad(ctx, path, "must be a string");
        } else if ((f->flags & F_NONEMPTY) && json_string_length(v) == 0) {
            bad(ctx, path, "must not be empty");
        } else if (strlen(json_string_value(v)) != json_string_length(v)) {
            bad(ctx, path, "must not contain NUL bytes");
        } else {
            free(*sp);
            *sp = xstrdup(json_string_value(v));
        }
        break;
    }
    case T_INT:
    case T_DURATION:
    case T_SIZE:
        if (get_int_like(f, v, &iv, path, ctx) == RL_OK)
            *AT(obj, f->off, int64_t) = iv;
        break;
    case T_BOOL:
        if (!json_is_boolean(v))
            bad(ctx, path, "must be true or false");
        else
            *AT(obj, f->off, int) = json_is_true(v);
        break;
    case T_ENUM: {
        const char *s = json_string_value(v);
        int found = -1;
        for (int i = 0; s != NULL && f->names[i] != NULL; i++)
            if (strcmp(s, f->names[i]) == 0)
                found = i;
        if (found < 0) {
            char list[256] = "";
            for (int i = 0; f->names[i] != NULL; i++) {
                strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
                strncat(list, f->names[i], sizeof(list) - strlen(list) - 1);
            }
            bad(ctx, path, "must be one of %s", list);
        } else {
            *AT(obj, f->off, int) = found;
        }
        break;
    }
    case T_IDENTITY:
        parse_identity(v, AT(obj, f->off, struct rl_identity_chain), path, ctx);
        break;
    case T_CIDRS:
        parse_cidrs(v, AT(obj, f->off, struct rl_cidr_list), path, ctx);
        break;
    case T_METHODS:
        parse_methods(v, AT(obj, f->off, unsigned), path, ctx);
        break;
    case T_STRLIST: {
        struct rl_strlist *l = AT(obj, f->off, struct rl_strlist);
        size_t i;
        json_t *e;
        free_field(f, obj);
        if (!json_is_array(v) || json_array_size(v) == 0) {
            bad(ctx, path, "must be a non-empty list of strings");
            break;
        }
        l->v = xcalloc(json_array_size(v), sizeof(*l->v));
        json_array_foreach(v, i, e) {
            if (!json_is_string(e) || json_string_length(e) == 0 ||
                json_string_length(e) > RL_KEY_MAX ||
                strlen(json_string_value(e)) != json_string_length(e)) {
                char *ep = xasprintf("%s[%zu]", path, i);
                bad(ctx, ep, "must be a string of 1..%d bytes", RL_KEY_MAX);
                free(ep);
                continue;
            }
            l->v[l->n++] = xstrdup(json_string_value(e));
        }
        break;
    }
    case T_OBJECT:
        if (!json_is_object(v))
            bad(ctx, path, "must be an object");
        else
            parse_object(f->sub, AT(obj, f->off, char), v, path, ctx);
        break;
    case T_ARRAY: {
        char **arr = AT(obj, f->off, char *);
        size_t *n = AT(obj, f->count_off, size_t);
        size_t i;
        json_t *e;
        if (!json_is_array(v)) {
            bad(ctx, path, "must be a list of objects");
            break;
        }
        free_field(f, obj);
        *arr = xcalloc(json_array_size(v), f->sub->size);
        json_array_foreach(v, i, e) {
            char *ep = xasprintf("%s[%zu]", path, i);
            void *elem = *arr + i * f->sub->size;
            set_defaults(f->sub, elem);
            if (!json_is_object(e))
                bad(ctx, ep, "must be an object");
            else
                parse_object(f->sub, elem, e, ep, ctx);
            *n = i + 1;
            free(ep);
        }
        break;
    }
    }
}

static const struct field *
find_field(const struct schema *s, const char *name)
{
    for (size_t i = 0; i < s->nfields; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return &s->fields[i];
    return NULL;
}

static void
parse_object(const struct schema *s, void *obj, json_t *j, const char *path,
             struct load_ctx *ctx)
{
    const char *name;
    json_t *v;

    json_object_foreach(j, name, v) {
        /* JSON has no comments: keys starting with '_' are ours to skip. */
        if (name[0] == '_')
            continue;
        const struct field *f = find_field(s, name);
        char *fp = join_path(path, name);
        if (f == NULL)
            bad(ctx, fp, "unknown option");
        else
            parse_field(f, obj, v, fp, ctx);
        free(fp);
    }
    for (size_t i = 0; i < s->nfields; i++) {
        if ((s->fields[i].flags & F_REQUIRED) &&
            json_object_get(j, s->fields[i].name) == NULL) {
            char *fp = join_path(path, s->fields[i].name);
            bad(ctx, fp, "is required");
            free(fp);
        }
    }
    if (s->check != NULL)
        s->check(obj, path, ctx);
}

static void
set_defaults(const struct schema *s, void *obj)
{
    struct rl_errors errs = {0};
    struct load_ctx ctx = {"built-in default", &errs};

    for (size_t i = 0; i < s->nfields; i++) {
        const struct field *f = &s->fields[i];
        if (f->type == T_OBJECT)
            set_defaults(f->sub, AT(obj, f->off, char));
        if (f->def == NULL)
            continue;
        json_t *v = json_loads(f->def, JSON_DECODE_ANY, NULL);
        parse_field(f, obj, v, f->name, &ctx);
        json_decref(v);
    }
    /* The defaults are ours: a broken one is a bug, not a user error. */
    if (errs.n != 0) {
        fprintf(stderr, "%s\n", errs.msg[0]);
        abort();
    }
}

/* ---- cross-field checks --------------------------------------------------- */

static void
check_limit(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_limit *l = obj;
    const struct rl_algo_def *d = algo_def(l->algo);

    if (l->burst != 0 && !d->uses_burst) {
        char *p = join_path(path, "burst");
        bad(ctx, p, "only token_bucket and gcra take a burst");
        free(p);
    }
    if (l->burst == 0)
        l->burst = l->limit;
    /* time to refill a whole bucket = burst/limit x window: bounded so the
     * algorithms' exact integer arithmetic cannot overflow */
    if (d->uses_burst && l->limit > 0 && l->window_ms > 0 &&
        (unsigned __int128)l->burst * (unsigned __int128)l->window_ms >
        (unsigned __int128)l->limit * (unsigned __int128)(366 * DAY_MS)) {
        char *p = join_path(path, "burst");
        bad(ctx, p, "the bucket must refill within 366 days (burst / limit x window)");
        free(p);
    }
}

static int
valid_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= RL_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_.-") == n;
}

static void
check_match(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_match *m = obj;
    int n = (m->path != NULL) + (m->path_prefix != NULL) + (m->path_glob != NULL);

    if (n > 1)
        bad(ctx, path, "give one of path, path_prefix, path_glob");
}

static void
check_limit_list(const struct rl_limit *l, size_t n, const char *path,
                 struct load_ctx *ctx)
{
    if (l != NULL && (n == 0 || n > RL_LIMITS_MAX)) {
        char *fp = join_path(path, "limits");
        bad(ctx, fp, "must hold 1..%d limits", RL_LIMITS_MAX);
        free(fp);
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (l[i].algo == l[j].algo && l[i].window_ms == l[j].window_ms) {
                char *fp = xasprintf("%s.limits[%zu]", path, i);
                bad(ctx, fp, "same algorithm and window as limits[%zu]: they "
                    "would share one counter", j);
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
check_override(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_override *o = obj;
    struct rl_policy *keep = o->as_policy;

    check_limit_list(o->limits, o->nlimits, path, ctx);
    o->as_policy = NULL;
    override_clear(o);
    o->as_policy = keep;
    o->keys = xcalloc(o->identities.n ? o->identities.n : 1, sizeof(*o->keys));
    o->ips.v = xcalloc(o->identities.n ? o->identities.n : 1, sizeof(*o->ips.v));
    for (size_t i = 0; i < o->identities.n; i++) {
        const char *v = o->identities.v[i];
        char *fp = xasprintf("%s.identities[%zu]", path, i);
        if (strncmp(v, "key:", 4) == 0 && v[4] != '\0') {
            o->keys[o->nkeys++] = o->identities.v[i] + 4;
        } else if (strncmp(v, "ip:", 3) == 0) {
            if (cidr_parse(v + 3, &o->ips.v[o->ips.n]) == RL_OK)
                o->ips.n++;
            else
                bad(ctx, fp, "\"%s\" is not an address or CIDR: write \"ip:10.0.0.7\", "
                    "\"ip:10.1.0.0/16\" or \"ip:2001:db8::/32\"", v + 3);
        } else {
            bad(ctx, fp, "\"%s\" has no type: write \"key:%s\" for an API key (from "
                "the body or a header) or \"ip:%s\" for a client address or CIDR",
                v, v, v);
        }
        free(fp);
    }
}

/* A policy's identity for caches that outlive a reload: its address may be
 * reused by the next config, its uid never. */
static uint64_t
next_uid(void)
{
    static uint64_t last;

    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

static void
check_policy(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_policy *p = obj;

    p->uid = next_uid();

    if (p->name != NULL && !valid_name(p->name)) {
        char *fp = join_path(path, "name");
        bad(ctx, fp, "must be 1..%d of A-Z a-z 0-9 _ . -", RL_NAME_MAX);
        free(fp);
    }
    check_limit_list(p->limits, p->nlimits, path, ctx);
    if (p->sync_interval_ms != 0 && p->mode != RL_MODE_HYBRID) {
        char *fp = join_path(path, "sync_interval");
        bad(ctx, fp, "only a policy with \"mode\": \"hybrid\" syncs");
        free(fp);
    }
    if (p->sync_interval_ms == 0)
        p->sync_interval_ms = HYBRID_SYNC_DEFAULT_MS;
    /* Each override becomes a policy of its own that shares the parent's
     * name (and so its keys' hash tag and its metrics). */
    for (size_t i = 0; i < p->noverrides; i++) {
        struct rl_override *o = &p->overrides[i];
        free(o->as_policy);
        o->as_policy = xcalloc(1, sizeof(*o->as_policy));
        *o->as_policy = *p;
        o->as_policy->limits = o->limits;
        o->as_policy->nlimits = o->nlimits;
        o->as_policy->overrides = NULL;
        o->as_policy->noverrides = 0;
        o->as_policy->uid = next_uid();
    }
}

const struct rl_policy *
config_policy_for(const struct rl_policy *p, const char *id, size_t idlen)
{
    int family;
    uint8_t addr[16];

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
    } else if (idlen > 3 && memcmp(id, "ip:", 3) == 0 &&
               ip_parse(id + 3, idlen - 3, &family, addr) == RL_OK) {
        for (size_t i = 0; i < p->noverrides; i++)
            if (cidr_list_contains(&p->overrides[i].ips, family, addr))
                return p->overrides[i].as_policy;
    }
    return p;
}

/* "host:port", "[v6]:port": what seed nodes and sentinels look like */
static int
valid_host_port(const char *s)
{
    const char *colon = strrchr(s, ':');
    size_t hlen;

    if (colon == NULL || colon == s || colon[1] == '\0' ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) < 1 ||
        atoi(colon + 1) > 65535)
        return 0;
    hlen = (size_t)(colon - s);
    if (s[0] == '[')
        return hlen > 2 && s[hlen - 1] == ']';
    return memchr(s, ':', hlen) == NULL;
}

static void
check_host_ports(const struct rl_strlist *l, const char *path, struct load_ctx *ctx)
{
    for (size_t i = 0; i < l->n; i++) {
        if (!valid_host_port(l->v[i])) {
            char *fp = xasprintf("%s[%zu]", path, i);
            bad(ctx, fp, "must be \"host:port\" or \"[v6]:port\"");
            free(fp);
        }
    }
}

static void
check_sentinel(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_sentinel_conf *s = obj;
    char *fp = join_path(path, "nodes");

    check_host_ports(&s->nodes, fp, ctx);
    free(fp);
}

/*
 * A secret kept in a file only the daemon reads (systemd's LoadCredential=, a
 * Kubernetes Secret volume), read at every load so a reload sees a rotated
 * file.  One trailing newline is dropped (editors and `echo` add one).  The
 * errors name the file, never its content.
 */
static char *
read_secret_file(const char *file, const char *path, struct load_ctx *ctx)
{
    char buf[SECRET_MAX + 2];
    size_t n;
    FILE *f = fopen(file, "re");

    if (f == NULL) {
        bad(ctx, path, "cannot read %s: %s", file, strerror(errno));
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        bad(ctx, path, "cannot read %s: %s", file, strerror(errno));
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
        bad(ctx, path, "%s must hold one line of 1..%d bytes (the secret)", file,
            SECRET_MAX);
        return NULL;
    }
    char *secret = xstrndup(buf, n);
    explicit_bzero(buf, sizeof(buf));
    return secret;
}

static void
check_tls(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_tls_conf *t = obj;

    if ((t->cert_file == NULL) != (t->key_file == NULL))
        bad(ctx, path, "give cert_file and key_file together");
}

static void
check_redis(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_redis_conf *r = obj;
    struct rl_redis_url u;
    char *cause = NULL;
    char *fp;

    fp = join_path(path, "cluster");
    check_host_ports(&r->cluster, fp, ctx);
    free(fp);
    if (r->cluster.n > 0 && r->sentinel.master != NULL)
        bad(ctx, path, "give redis.cluster or redis.sentinel, not both");
    if (r->cluster.n > 0 && r->url != NULL && redis_url_parse(r->url, &u, &cause) == RL_OK) {
        if (u.db != 0) {
            fp = join_path(path, "url");
            bad(ctx, fp, "Redis Cluster has only database 0");
            free(fp);
        }
        redis_url_clear(&u);
    }
    free(cause);
    cause = NULL;

    if (r->key_prefix != NULL &&
        (strlen(r->key_prefix) > RL_NAME_MAX || strpbrk(r->key_prefix, "{}") != NULL)) {
        fp = join_path(path, "key_prefix");
        bad(ctx, fp, "must be at most %d bytes without '{' or '}'", RL_NAME_MAX);
        free(fp);
    }
    if (r->password_file != NULL) {
        fp = join_path(path, "password_file");
        /* checked again after each command-line override: read again then */
        if (r->password != NULL && !r->password_from_file) {
            bad(ctx, fp, "give redis.password or redis.password_file, not both");
        } else {
            free(r->password);
            r->password = read_secret_file(r->password_file, fp, ctx);
            r->password_from_file = 1;
        }
        free(fp);
    }
    if (r->url == NULL)
        return;
    if (redis_url_parse(r->url, &u, &cause) != RL_OK) {
        fp = join_path(path, "url");
        bad(ctx, fp, "%s", cause);
        free(fp);
        free(cause);
        return;
    }
    redis_url_clear(&u);
}

/* ---- public API ------------------------------------------------------------ */

struct rl_config *
config_new_defaults(void)
{
    struct rl_config *cfg = xcalloc(1, sizeof(*cfg));

    set_defaults(&top_schema, cfg);
    cfg->refs = 1;
    return cfg;
}

static void
config_free(struct rl_config *cfg)
{
    free_object(&top_schema, cfg);
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

static int
read_file(const char *file, char **text, size_t *len, struct rl_errors *errs)
{
    FILE *f = fopen(file, "rb");
    size_t cap = 4096, n = 0, r;
    char *buf;

    if (f == NULL) {
        errors_add(errs, "%s: %s", file, strerror(errno));
        return RL_ERR;
    }
    buf = xmalloc(cap);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            if (cap >= CONFIG_FILE_MAX) {
                errors_add(errs, "%s: larger than %d bytes", file, CONFIG_FILE_MAX);
                fclose(f);
                free(buf);
                return RL_ERR;
            }
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
    }
    if (ferror(f)) {
        errors_add(errs, "%s: %s", file, strerror(errno));
        fclose(f);
        free(buf);
        return RL_ERR;
    }
    fclose(f);
    *text = buf;
    *len = n;
    return RL_OK;
}


int
config_load_file(const char *file, struct rl_config **out, struct rl_errors *errs)
{
    struct load_ctx ctx = {file, errs};
    struct rl_config *cfg;
    json_error_t jerr;
    json_t *root;
    size_t before = errs->n, len;
    char *text;

    *out = NULL;
    if (read_file(file, &text, &len, errs) != RL_OK)
        return RL_ERR;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        free(text);
        if (jerr.line > 0)
            errors_add(errs, "%s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
        else
            errors_add(errs, "%s: %s", file, jerr.text);
        return RL_ERR;
    }
    cfg = config_new_defaults();
    cfg->file = xstrdup(file);
    cfg->hash = fnv1a(FNV1A_INIT, text, len);
    free(text);
    if (!json_is_object(root))
        errors_add(errs, "%s: the configuration must be a JSON object", file);
    else
        parse_object(&top_schema, cfg, root, "", &ctx);
    json_decref(root);
    if (errs->n != before) {
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
    struct load_ctx ctx = {origin, errs};
    const struct schema *s = &top_schema;
    const struct field *f = NULL;
    void *obj = cfg;
    char *copy = xstrdup(name), *part, *save = NULL;
    size_t before = errs->n;
    json_t *v;

    for (part = strtok_r(copy, ".", &save); part != NULL;
         part = strtok_r(NULL, ".", &save)) {
        if (f != NULL) {
            if (f->type != T_OBJECT) {
                f = NULL;
                break;
            }
            obj = AT(obj, f->off, char);
            s = f->sub;
        }
        if ((f = find_field(s, part)) == NULL)
            break;
    }
    free(copy);
    if (f == NULL || f->type == T_OBJECT || f->type == T_ARRAY) {
        bad(&ctx, name, "not an option that can be set here");
        return RL_ERR;
    }
    if ((f->type == T_INT || f->type == T_DURATION || f->type == T_SIZE) &&
        text[0] != '\0' && strspn(text, "0123456789") == strlen(text))
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    else if (f->type == T_BOOL && (strcmp(text, "true") == 0 || strcmp(text, "false") == 0))
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    else if (f->type == T_IDENTITY || f->type == T_CIDRS || f->type == T_METHODS)
        v = json_loads(text, JSON_DECODE_ANY, NULL);   /* a JSON list */
    else
        v = json_string(text);
    if (v == NULL)
        v = json_string(text);
    parse_field(f, obj, v, name, &ctx);
    json_decref(v);
    /* sub-objects re-check here, at their own path ("redis" for
     * "redis.url"); the top level waits for config_validate */
    if (s != &top_schema && s->check != NULL && errs->n == before) {
        const char *dot = strrchr(name, '.');
        char *parent = xstrndup(name, dot ? (size_t)(dot - name) : 0);
        s->check(obj, parent, &ctx);
        free(parent);
    }
    return errs->n == before ? RL_OK : RL_ERR;
}

/*
 * A pattern is matched against normalised paths, so it is normalised the
 * same way: "/%61pi/" and "/api/" are one pattern.  Run again after flags
 * (config_validate): normalising a normalised pattern changes nothing.
 */
static void
normalise_pattern(char **pat, unsigned flags, const char *path, struct load_ctx *ctx)
{
    const char *cause;
    size_t len, n;
    char *out;

    /* a glob may start with '*': it is not a path, and is matched as written */
    if (*pat == NULL || (*pat)[0] != '/')
        return;
    len = strlen(*pat);
    out = xmalloc(len + 1);
    if (pathnorm(*pat, len, flags, out, &n, &cause) != RL_OK) {
        bad(ctx, path, "\"%s\" cannot be normalised: %s", *pat, cause);
        free(out);
        return;
    }
    free(*pat);
    *pat = out;
}

static void
normalise_patterns(struct rl_config *cfg, struct load_ctx *ctx)
{
    unsigned flags = cfg->merge_slashes ? 0 : RL_PATHNORM_KEEP_SLASHES;

    for (size_t i = 0; i < cfg->npolicies; i++) {
        struct rl_match *m = &cfg->policies[i].match;
        char *p = xasprintf("policies[%zu].match.path", i);
        normalise_pattern(&m->path, flags, p, ctx);
        free(p);
        p = xasprintf("policies[%zu].match.path_prefix", i);
        normalise_pattern(&m->path_prefix, flags, p, ctx);
        free(p);
        p = xasprintf("policies[%zu].match.path_glob", i);
        normalise_pattern(&m->path_glob, flags, p, ctx);
        free(p);
        /* the overrides' policies share the parent's match strings */
        for (size_t k = 0; k < cfg->policies[i].noverrides; k++)
            if (cfg->policies[i].overrides[k].as_policy != NULL)
                cfg->policies[i].overrides[k].as_policy->match = *m;
    }
}

static int
is_loopback(const struct rl_listen_addr *a)
{
    const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&a->ss;
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&a->ss;

    if (a->family == AF_UNIX)
        return 1;
    if (a->family == AF_INET)
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) && sin6->sin6_addr.s6_addr[12] == 127);
}

/*
 * The admin API changes any caller's counts: only where the operator put it
 * (a unix socket or loopback), elsewhere only when asked for and behind a
 * token.  The token file is read at every load, so SIGHUP rotates it.
 */
static void
check_admin(struct rl_config *cfg, struct load_ctx *ctx)
{
    struct rl_listen_addr la;
    char *cause = NULL;

    if (cfg->admin_token != NULL)
        explicit_bzero(cfg->admin_token, strlen(cfg->admin_token));
    free(cfg->admin_token);
    cfg->admin_token = cfg->admin_token_file == NULL ? NULL
        : read_secret_file(cfg->admin_token_file, "admin_token_file", ctx);
    if (cfg->admin_listen == NULL)
        return;
    if (listen_addr_parse(cfg->admin_listen, &la, &cause) != RL_OK) {
        bad(ctx, "admin_listen", "%s", cause);
        free(cause);
        return;
    }
    if (cfg->listen != NULL && strcmp(cfg->admin_listen, cfg->listen) == 0)
        bad(ctx, "admin_listen", "must not be the check listener's address");
    else if (!is_loopback(&la) && !cfg->admin_allow_remote)
        bad(ctx, "admin_listen", "not a loopback address or unix socket: set "
            "admin_allow_remote to true to serve the admin API there");
    else if (!is_loopback(&la) && cfg->admin_token == NULL)
        bad(ctx, "admin_listen", "off loopback, the admin API needs admin_token_file");
    listen_addr_clear(&la);
}

/* What involves several top-level options, or an address to parse. */
static void
check_top(void *obj, const char *path, struct load_ctx *ctx)
{
    struct rl_config *cfg = obj;
    struct rl_listen_addr la;
    char *cause = NULL;

    if (cfg->listen != NULL && listen_addr_parse(cfg->listen, &la, &cause) != RL_OK) {
        bad(ctx, "listen", "%s", cause);
        free(cause);
    } else if (cfg->listen != NULL) {
        listen_addr_clear(&la);
    }
    for (size_t i = 0; i < cfg->npolicies; i++) {
        for (size_t j = 0; j < i; j++) {
            if (cfg->policies[i].name && cfg->policies[j].name &&
                strcmp(cfg->policies[i].name, cfg->policies[j].name) == 0) {
                char *p = xasprintf("policies[%zu].name", i);
                bad(ctx, p, "\"%s\" is already the name of policies[%zu]",
                    cfg->policies[i].name, j);
                free(p);
            }
        }
    }
    normalise_patterns(cfg, ctx);
    check_admin(cfg, ctx);
    /* Every instance with the same secret names a caller's partition the
     * same way; without the secret no pk leads back to its identity. */
    if (cfg->partition_key != NULL) {
        size_t n = strlen(cfg->partition_key);
        cfg->pk_k0 = fnv1a(FNV1A_INIT, cfg->partition_key, n);
        cfg->pk_k1 = fnv1a(cfg->pk_k0 ^ 0x9e3779b97f4a7c15ULL, cfg->partition_key, n);
        if (n < 16)
            bad(ctx, "partition_key", "must be a secret of at least 16 bytes");
    }
    (void)path;
}

int
config_validate(struct rl_config *cfg, struct rl_errors *errs)
{
    struct load_ctx ctx = {cfg->file ? cfg->file : "configuration", errs};
    size_t before = errs->n;

    check_top(cfg, "", &ctx);
    return errs->n == before ? RL_OK : RL_ERR;
}

/*
 * Restart-only options keep their running values on reload: copy them from
 * the running config and name those that the new file wanted to change.
 */
static void
keep_restart(const struct schema *s, void *nobj, const void *oobj,
             const char *path, struct rl_errors *changed)
{
    for (size_t i = 0; i < s->nfields; i++) {
        const struct field *f = &s->fields[i];
        char *fp = join_path(path, f->name);
        if (f->type == T_OBJECT) {
            keep_restart(f->sub, AT(nobj, f->off, char),
                         AT((void *)(uintptr_t)oobj, f->off, char), fp, changed);
        } else if (f->flags & F_RESTART) {
            void *np = AT(nobj, f->off, char);
            const void *op = AT((void *)(uintptr_t)oobj, f->off, char);
            if (f->type == T_STRING) {
                char **ns = np;
                char *const *os = op;
                if ((*ns == NULL) != (*os == NULL) ||
                    (*ns != NULL && strcmp(*ns, *os) != 0))
                    errors_add(changed, "%s", fp);
                free(*ns);
                *ns = *os ? xstrdup(*os) : NULL;
            } else if (f->type == T_STRLIST) {
                struct rl_strlist *nl = np;
                const struct rl_strlist *ol = op;
                int same = nl->n == ol->n;
                for (size_t k = 0; same && k < nl->n; k++)
                    same = strcmp(nl->v[k], ol->v[k]) == 0;
                if (!same)
                    errors_add(changed, "%s", fp);
                free_field(f, nobj);
                nl->v = xcalloc(ol->n ? ol->n : 1, sizeof(*nl->v));
                for (size_t k = 0; k < ol->n; k++)
                    nl->v[k] = xstrdup(ol->v[k]);
                nl->n = ol->n;
            } else if (f->type == T_ENUM || f->type == T_BOOL) {
                if (*(int *)np != *(const int *)op)
                    errors_add(changed, "%s", fp);
                *(int *)np = *(const int *)op;
            } else {
                if (*(int64_t *)np != *(const int64_t *)op)
                    errors_add(changed, "%s", fp);
                *(int64_t *)np = *(const int64_t *)op;
            }
        }
        free(fp);
    }
}

void
config_keep_restart_options(struct rl_config *next, const struct rl_config *running,
                            struct rl_errors *changed)
{
    keep_restart(&top_schema, next, running, "", changed);
}

const struct rl_policy *
config_policy(const struct rl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->npolicies; i++)
        if (strcmp(cfg->policies[i].name, name) == 0)
            return &cfg->policies[i];
    return NULL;
}
