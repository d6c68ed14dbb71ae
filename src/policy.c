/* policy.c — see policy.h.  The policy model's tables (one row per field,
 * walked by schema.c), their cross-field checks, and what is derived from
 * them (policy_finalize): config.c holds the options around them. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "algo.h"
#include "pathnorm.h"
#include "period.h"
#include "policy.h"
#include "policy_text.h"
#include "util.h"

#define DAY_MS (24LL * 3600 * 1000)

#define LEASE_DEFAULT_MS (60LL * 1000)
#define LEASE_SLOTS_MAX 100000
#define HYBRID_SYNC_DEFAULT_MS 250

/* ---- the identity chain, method sets, periods ------------------------------ */

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

static const struct {
    const char *name;
    unsigned bit;
} method_bits[] = {
    {"GET", RL_M_GET},         {"HEAD", RL_M_HEAD},       {"POST", RL_M_POST},
    {"PUT", RL_M_PUT},         {"DELETE", RL_M_DELETE},   {"PATCH", RL_M_PATCH},
    {"OPTIONS", RL_M_OPTIONS}, {"CONNECT", RL_M_CONNECT}, {"TRACE", RL_M_TRACE},
};

unsigned
policy_method_bit(const char *name)
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
        unsigned bit = s ? policy_method_bit(s) : 0;
        if (bit == 0)
            schema_bad_item(ctx, path, i,
                            "must be an HTTP method: GET, HEAD, POST, PUT, "
                            "DELETE, PATCH, OPTIONS, CONNECT or TRACE");
        *out |= bit;
    }
}

static void
free_nothing(void *at)
{
    (void)at;
}

/* "day", "week", ...: a calendar period (period.h), stored as its kind */
/* An algorithm by its name in algo.c's table, stored as its enum rl_algo. */
static void
parse_algorithm(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    enum rl_algo *out = at;
    const char *s = json_string_value(v);
    char list[256];

    if (s != NULL && algo_by_name(s, out))
        return;
    algo_name_list(list, sizeof(list), RL_ALGO_COUNT);
    schema_bad(ctx, path, "must be one of %s", list);
}

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

const struct schema_custom policy_identity_type = {parse_identity, free_identity, 1};
static const struct schema_custom identity_ptr_type = {parse_identity_ptr, free_identity_ptr,
                                                       1};
static const struct schema_custom methods_type = {parse_methods, free_nothing, 1};
static const struct schema_custom algorithm_type = {parse_algorithm, free_nothing, 0};
static const struct schema_custom period_type = {parse_period, free_nothing, 0};
static const struct schema_custom timezone_type = {parse_timezone, free_nothing, 0};
static const struct schema_custom week_start_type = {parse_week_start, free_nothing, 0};

/* ---- the tables --------------------------------------------------------- */

/* one row per field; clang-format would put each field of a row on a line of its own */
/* clang-format off */

static const char *const mode_names[] = {"exact", "hybrid", NULL};
static const char *const align_names[] = {"first", "epoch", NULL};

static void check_limit(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_match(const void *obj, const char *path, struct schema_ctx *ctx);
static void check_override(const void *obj, const char *path, struct schema_ctx *ctx);
static void clear_override(void *obj);
static void check_policy(const void *obj, const char *path, struct schema_ctx *ctx);

/* What finalize derived and owns beside the fields: the answers' text. */
static void
clear_policy(void *obj)
{
    struct rl_policy *p = obj;

    free(p->text);
    p->text = NULL;
}

/* offsetof in the struct a table describes */
#define LIMIT(m) offsetof(struct rl_limit, m)
#define MATCH(m) offsetof(struct rl_match, m)
#define OVERRIDE(m) offsetof(struct rl_override, m)
#define POLICY(m) offsetof(struct rl_policy, m)

_Static_assert(RL_COST_MAX == 1000000000000000, "limit_fields' bounds say RL_COST_MAX");

static const struct schema_field limit_fields[] = {
    {.name = "algorithm", .type = SCHEMA_CUSTOM, .off = LIMIT(algo), .custom = &algorithm_type,
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
     .custom = &policy_identity_type},
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
    /* how long a reservation ("reserve") may be settled */
    {.name = "reservation_ttl", .type = SCHEMA_DURATION, .off = POLICY(reservation_ttl_ms),
     .def = "\"10m\"", .min = 1000, .max = 24 * 3600 * 1000},
    /* absent (0): the top-level values */
    {.name = "ipv4_prefix", .type = SCHEMA_INT, .off = POLICY(ipv4_prefix), .min = 8,
     .max = 32},
    {.name = "ipv6_prefix", .type = SCHEMA_INT, .off = POLICY(ipv6_prefix), .min = 16,
     .max = 128},
};
const struct schema policy_schema = {
    SCHEMA_FIELDS(policy_fields), sizeof(struct rl_policy), check_policy, clear_policy
};

/* clang-format on */

/* ---- checks: they read, never write ----------------------------------------- */

static void
check_limit(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct rl_limit *l = obj;
    const struct rl_algo_def *d = algo_def(l->algo);
    int period = algo_has_period(l);
    const char *why, *field;

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
    if ((why = algo_limit_problem(l, &field)) != NULL)
        schema_bad_field(ctx, path, field, "%s", why);
    if (l->align != RL_ALIGN_FIRST && d->aligned_tag == NULL)
        schema_bad_field(ctx, path, "align", "only fixed_window has windows to align");
    else if (l->align != RL_ALIGN_FIRST && period)
        schema_bad_field(ctx, path, "align", "a period is aligned to the calendar already");
    /* the log holds an entry per allowed check (at most `limit` of them) */
    if (l->algo == RL_ALGO_SLIDING_WINDOW_LOG && l->limit > 1000000000)
        schema_bad_field(ctx, path, "limit",
                         "at most 1000000000 with sliding_window_log: it keeps an entry per "
                         "check (its memory); a larger budget takes sliding_window_counter");
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

/* ---- finalize: what is derived from the fields ------------------------------ */

/* A policy's identity for caches that outlive a reload: its address may be
 * reused by the next config, its uid never. */
static uint64_t
next_uid(void)
{
    static uint64_t last;

    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

uint64_t
policy_new_uid(void)
{
    return next_uid();
}

static void
clear_override(void *obj)
{
    struct rl_override *o = obj;

    if (o->as_policy != NULL)
        free(o->as_policy->text);
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
 * become the keys and addresses policy_for() looks up.  A uid once
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
    o->as_policy->text = NULL; /* the parent's */
    policy_text_build(o->as_policy);
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

void
policy_finalize(struct rl_policy *p, size_t i, const struct rl_policy_defaults *d,
                struct schema_ctx *ctx)
{
    normalise_pattern(&p->match.path, d->pathflags, d->path_fold, i, "path", ctx);
    normalise_pattern(&p->match.path_prefix, d->pathflags, d->path_fold, i, "path_prefix",
                      ctx);
    normalise_pattern(&p->match.path_glob, d->pathflags, d->path_fold, i, "path_glob", ctx);
    if (p->uid == 0)
        p->uid = next_uid();
    if (p->sync_interval_ms == 0)
        p->sync_interval_ms = HYBRID_SYNC_DEFAULT_MS;
    p->fold4 = (int)(p->ipv4_prefix != 0 ? p->ipv4_prefix : d->ipv4_prefix);
    p->fold6 = (int)(p->ipv6_prefix != 0 ? p->ipv6_prefix : d->ipv6_prefix);
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
    policy_text_build(p);
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
policy_warnings(const struct rl_policy *p, const char *path, const char *file,
                struct rl_errors *warns)
{
    warn_limits(p->limits, p->nlimits, path, file, warns);
    /* request_limits_max bounds each limit a caller sends, not what it is
     * admitted: one varying its windows gets a fresh key each time. */
    if (p->request_limits && p->ncaps == 0)
        errors_add(warns,
                   "%s: %s: request_limits without request_limits_cap: a caller that varies "
                   "its limits (window, algorithm, period, zone) is not bounded by "
                   "request_limits_max, only each limit's size is",
                   file, path);
    for (size_t k = 0; k < p->noverrides; k++) {
        char *op = xasprintf("%s.overrides[%zu]", path, k);
        warn_limits(p->overrides[k].limits, p->overrides[k].nlimits, op, file, warns);
        free(op);
    }
}

/* ---- lookups and a check's own limits -------------------------------------- */

int
policy_parse_limits(json_t *v, struct rl_limit *out, size_t *n, char **cause)
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
policy_for(const struct rl_policy *p, const char *id, size_t idlen)
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

bool
policy_lease_limit(const struct rl_policy *p, size_t *index)
{
    for (size_t i = 0; i < p->nlimits; i++) {
        if (p->limits[i].algo == RL_ALGO_CONCURRENCY) {
            *index = i;
            return true;
        }
    }
    return false;
}

/* ---- matching ------------------------------------------------------------------ */

bool
policy_glob(const char *p, const char *s, size_t len)
{
    const char *star = NULL;
    size_t i = 0, mark = 0;

    /* Iterative with one backtrack point: linear-ish, no recursion to blow. */
    while (i < len) {
        if (*p == '*') {
            star = p++;
            mark = i;
        } else if (*p != '\0' && (*p == '?' || *p == s[i])) {
            p++;
            i++;
        } else if (star != NULL) {
            p = star + 1;
            i = ++mark;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

/* s (n bytes) and path (len) equal, or equal but for one trailing '/' of
 * one of them (path_fold "trailing_slash"). */
static bool
same_but_slash(const char *s, size_t n, const char *path, size_t len)
{
    if (n == len + 1 && s[n - 1] == '/')
        n--;
    else if (len == n + 1 && path[len - 1] == '/')
        len--;
    return n == len && memcmp(s, path, n) == 0;
}

static bool
match_fits(const struct rl_match *m, const char *path, size_t len, unsigned method,
           unsigned folds)
{
    if (m->methods != 0 && (m->methods & method) == 0)
        return false;
    if (m->path != NULL) {
        size_t n = strlen(m->path);
        if (folds & RL_PATHFOLD_SLASH)
            return same_but_slash(m->path, n, path, len);
        return n == len && memcmp(m->path, path, len) == 0;
    }
    if (m->path_prefix != NULL) {
        size_t n = strlen(m->path_prefix);
        /* "/api/" meets "/api" when the slash does not count */
        if ((folds & RL_PATHFOLD_SLASH) && n > 1 && m->path_prefix[n - 1] == '/' &&
            len == n - 1 && memcmp(m->path_prefix, path, len) == 0)
            return true;
        return n <= len && memcmp(m->path_prefix, path, n) == 0;
    }
    if (m->path_glob != NULL)
        return policy_glob(m->path_glob, path, len);
    return true;
}

const struct rl_policy *
policy_match(const struct rl_policy *policies, size_t n, unsigned path_fold, const char *path,
             size_t len, unsigned method)
{
    for (size_t i = 0; i < n; i++)
        if (match_fits(&policies[i].match, path, len, method, path_fold))
            return &policies[i];
    return NULL;
}
