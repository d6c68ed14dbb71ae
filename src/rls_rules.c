/* rls_rules.c — see rls_rules.h. */
#include <stdbool.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <yaml.h>

#include "config.h"
#include "rls_rules.h"
#include "util.h"

#define DAY_MS (24LL * 3600 * 1000)
#define HYBRID_SYNC_DEFAULT_MS 250
#define DIR_DEPTH_MAX 8
/* node visits while reading one file: aliases may make a small file a huge
 * tree, walked rather than expanded */
#define VISITS_MAX (4 * RLS_RULES_MAX)

static const struct {
    const char *name;
    int64_t ms;
} units[RLS_UNIT_COUNT] = {
    [RLS_UNIT_UNKNOWN] = {NULL, 0},
    [RLS_UNIT_SECOND] = {"second", 1000},
    [RLS_UNIT_MINUTE] = {"minute", 60 * 1000},
    [RLS_UNIT_HOUR] = {"hour", 3600 * 1000},
    [RLS_UNIT_DAY] = {"day", DAY_MS},
    [RLS_UNIT_MONTH] = {"month", 30 * DAY_MS},
    [RLS_UNIT_YEAR] = {"year", 365 * DAY_MS},
    [RLS_UNIT_WEEK] = {"week", 7 * DAY_MS},
};

const char *
rls_unit_name(enum rls_unit u)
{
    return (unsigned)u < RLS_UNIT_COUNT ? units[u].name : NULL;
}

int64_t
rls_unit_ms(enum rls_unit u)
{
    return (unsigned)u < RLS_UNIT_COUNT ? units[u].ms : 0;
}

/* ---- reading one file ---------------------------------------------------- */

struct yload {
    const char *file;
    yaml_document_t *doc;
    struct rl_errors *errs;
    size_t errs_before;
    size_t visits;
    int too_big;    /* said so once */
    size_t *nrules; /* of the whole set */
    uint64_t (*new_uid)(void);
    struct rls_domain *domain;
};

static void RL_PRINTF(4, 5)
    ybad(struct yload *y, const yaml_node_t *at, const char *path, const char *fmt, ...)
{
    va_list ap;
    char *what;

    va_start(ap, fmt);
    what = xvasprintf(fmt, ap);
    va_end(ap);
    if (*path)
        errors_add(y->errs, "%s:%zu: %s: %s", y->file, at ? at->start_mark.line + 1 : 1, path,
                   what);
    else
        errors_add(y->errs, "%s:%zu: %s", y->file, at ? at->start_mark.line + 1 : 1, what);
    free(what);
}

static char *
join(const char *path, const char *name)
{
    return *path ? xasprintf("%s.%s", path, name) : xstrdup(name);
}

static yaml_node_t *
node(struct yload *y, int id)
{
    y->visits++;
    return yaml_document_get_node(y->doc, id);
}

/* A plain ~, null or empty scalar: YAML's null, the field left out. */
static bool
is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    const char *v;

    if (n == NULL)
        return true;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    v = (const char *)n->data.scalar.value;
    for (size_t i = 0; i < RL_ARRAY_LEN(nulls); i++)
        if (strcmp(v, nulls[i]) == 0 && n->data.scalar.length == strlen(nulls[i]))
            return true;
    return false;
}

/* A string field: any scalar as written (a number or true too, as
 * envoyproxy/ratelimit's YAML decoder reads them into strings). */
static int
get_str(struct yload *y, const yaml_node_t *n, const char *path, struct rls_str *out)
{
    out->p = NULL;
    out->len = 0;
    if (is_null(n))
        return RL_OK;
    if (n->type != YAML_SCALAR_NODE) {
        ybad(y, n, path, "must be a string");
        return RL_ERR;
    }
    out->p = (const char *)n->data.scalar.value;
    out->len = n->data.scalar.length;
    return RL_OK;
}

/* A C string field: no NUL inside. */
static int
get_cstr(struct yload *y, const yaml_node_t *n, const char *path, const char **out)
{
    struct rls_str s;

    *out = NULL;
    if (get_str(y, n, path, &s) != RL_OK)
        return RL_ERR;
    if (s.p != NULL && memchr(s.p, '\0', s.len) != NULL) {
        ybad(y, n, path, "must not hold a NUL byte");
        return RL_ERR;
    }
    *out = s.p;
    return RL_OK;
}

/* YAML 1.1's booleans, as envoyproxy/ratelimit's decoder reads them. */
static int
get_bool(struct yload *y, const yaml_node_t *n, const char *path, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "y"};
    static const char *const no[] = {"false", "no", "off", "n"};
    const char *v;

    *out = 0;
    if (is_null(n))
        return RL_OK;
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        v = (const char *)n->data.scalar.value;
        for (size_t i = 0; i < RL_ARRAY_LEN(yes); i++) {
            if (strcasecmp(v, yes[i]) == 0) {
                *out = 1;
                return RL_OK;
            }
            if (strcasecmp(v, no[i]) == 0)
                return RL_OK;
        }
    }
    ybad(y, n, path, "must be true or false");
    return RL_ERR;
}

/*
 * A non-negative integer up to max, as YAML 1.1 writes one: decimal, 0x hex,
 * 0b binary or 0-led octal, '_' between digits.  *out stays 0 when null.
 */
static int
yuint(struct yload *y, const yaml_node_t *n, const char *path, uint64_t max, uint64_t *out)
{
    const char *v;
    unsigned base = 10;
    uint64_t acc = 0;
    int digits = 0;

    *out = 0;
    if (is_null(n))
        return RL_OK;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        goto bad;
    v = (const char *)n->data.scalar.value;
    if (*v == '+')
        v++;
    if (v[0] == '0' && (v[1] == 'x' || v[1] == 'X'))
        base = 16, v += 2;
    else if (v[0] == '0' && (v[1] == 'b' || v[1] == 'B'))
        base = 2, v += 2;
    else if (v[0] == '0' && v[1] != '\0')
        base = 8, v += 1;
    for (; *v; v++) {
        int d;

        if (*v == '_' && digits > 0)
            continue;
        if (!hex_digit((unsigned char)*v, &d) || (unsigned)d >= base)
            goto bad;
        if (acc > (max - (uint64_t)d) / base)
            goto range;
        acc = acc * base + (uint64_t)d;
        digits++;
    }
    if (digits == 0 && base == 10)
        goto bad;
    *out = acc;
    return RL_OK;
range:
    ybad(y, n, path, "must be at most %llu", (unsigned long long)max);
    return RL_ERR;
bad:
    ybad(y, n, path, "must be an integer 0..%llu", (unsigned long long)max);
    return RL_ERR;
}

/* A duration: "500ms", "10s", "1m", "1h", "1d" or an integer of ms. */
static int
yduration(struct yload *y, const yaml_node_t *n, const char *path, int64_t min, int64_t max,
          int64_t *out)
{
    const char *v;
    size_t len;
    int64_t ms;

    *out = 0;
    if (is_null(n))
        return RL_OK;
    if (n->type != YAML_SCALAR_NODE)
        goto bad;
    v = (const char *)n->data.scalar.value;
    len = n->data.scalar.length;
    if (len > 1 && v[len - 1] == 'd' && strspn(v, "0123456789") == len - 1 && len < 12) {
        ms = strtoll(v, NULL, 10) * DAY_MS;
    } else if (schema_parse_duration_ms(v, &ms) != RL_OK) {
        if (len == 0 || len > 15 || strspn(v, "0123456789") != len)
            goto bad;
        ms = strtoll(v, NULL, 10);
    }
    if (ms < min || ms > max) {
        ybad(y, n, path, "must be between %lldms and %lldd", (long long)min,
             (long long)(max / DAY_MS));
        return RL_ERR;
    }
    *out = ms;
    return RL_OK;
bad:
    ybad(y, n, path,
         "must be a duration like \"500ms\", \"10s\", \"1m\", \"1h\", \"1d\" or milliseconds");
    return RL_ERR;
}

/* One of names (case as written, or any case with icase), as an index. */
static int
get_enum(struct yload *y, const yaml_node_t *n, const char *path, const char *const *names,
         size_t nnames, int icase, const char *what, int *out)
{
    const char *v;

    if (get_cstr(y, n, path, &v) != RL_OK)
        return RL_ERR;
    for (size_t i = 0; v != NULL && i < nnames; i++) {
        if (names[i] != NULL && (icase ? strcasecmp(v, names[i]) : strcmp(v, names[i])) == 0) {
            *out = (int)i;
            return RL_OK;
        }
    }
    ybad(y, n, path, "%s", what);
    return RL_ERR;
}

/* A rate algorithm by its name in algo.c's table (a rule's descriptors hold
 * no leases: not concurrency). */
static int
get_algo(struct yload *y, const yaml_node_t *n, const char *path, int *out)
{
    const char *v;
    enum rl_algo a;
    char list[256];

    if (get_cstr(y, n, path, &v) != RL_OK)
        return RL_ERR;
    if (v != NULL && algo_by_name(v, &a) && a < RL_ALGO_RATES) {
        *out = (int)a;
        return RL_OK;
    }
    algo_name_list(list, sizeof(list), RL_ALGO_RATES);
    ybad(y, n, path, "must be one of %s", list);
    return RL_ERR;
}

/* A mapping's keys: known ones to fields, the rest problems.  at[i] is the
 * value of names[i] (NULL: absent), *keys[i] the key node. */
static int
yfields(struct yload *y, const yaml_node_t *map, const char *path, const char *const *names,
        size_t n, yaml_node_t **at, yaml_node_t **keys, const char *hint)
{
    int ok = RL_OK;

    memset(at, 0, n * sizeof(*at));
    memset(keys, 0, n * sizeof(*keys));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(y, p->key), *v = node(y, p->value);
        const char *name;
        size_t i;

        if (k == NULL || k->type != YAML_SCALAR_NODE) {
            ybad(y, k, path, "a key must be a string");
            ok = RL_ERR;
            continue;
        }
        name = (const char *)k->data.scalar.value;
        for (i = 0; i < n; i++)
            if (strcmp(name, names[i]) == 0 && k->data.scalar.length == strlen(names[i]))
                break;
        if (i == n) {
            char *fp = join(path, name);
            ybad(y, k, fp, "unknown key: %s", hint);
            free(fp);
            ok = RL_ERR;
        } else if (keys[i] != NULL) {
            char *fp = join(path, name);
            ybad(y, k, fp, "given twice (line %zu too)", keys[i]->start_mark.line + 1);
            free(fp);
            ok = RL_ERR;
        } else {
            keys[i] = k;
            at[i] = v;
        }
    }
    return ok;
}

/* ---- descriptors ------------------------------------------------------------ */

enum {
    D_KEY,
    D_VALUE,
    D_RATE_LIMIT,
    D_RATE_LIMITS,
    D_DESCRIPTORS,
    D_SHADOW_MODE,
    D_QUOTA_MODE,
    D_DETAILED_METRIC,
    D_VALUE_TO_METRIC,
    D_SHARE_THRESHOLD,
    D_METADATA,
    D_MODE,
    D_SYNC_INTERVAL,
    D_COUNT
};
static const char *const d_names[D_COUNT] = {
    "key",         "value",      "rate_limit",      "rate_limits",     "descriptors",
    "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold",
    "metadata",    "mode",       "sync_interval",
};
#define D_HINT \
    "a descriptor has key, value, rate_limit (or rate_limits), descriptors, shadow_mode, " \
    "quota_mode, detailed_metric, value_to_metric, share_threshold, metadata, mode, " \
    "sync_interval"

enum {
    L_UNIT,
    L_REQUESTS,
    L_UNLIMITED,
    L_NAME,
    L_REPLACES,
    L_ALGORITHM,
    L_WINDOW,
    L_BURST,
    L_ALIGN,
    L_COUNT
};
static const char *const l_names[L_COUNT] = {
    "unit",     "requests_per_unit", "unlimited", "name",
    "replaces", "algorithm",         "window",    "burst",
    "align",
};
#define L_HINT \
    "a rate limit has unit (or window), requests_per_unit, unlimited, name, replaces, " \
    "algorithm, burst, align"

static char *
dup_str(struct rls_str s)
{
    char *p = xmalloc(s.len + 1);

    memcpy(p, s.p, s.len);
    p[s.len] = '\0';
    return p;
}

static void
push_name(char ***v, size_t *n, const char *s)
{
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = xstrdup(s);
}

/* The limit a rule's policy needs of rate limit `m` (a mapping) at path. */
static int
load_limit(struct yload *y, yaml_node_t *m, const char *path, int in_list, struct rls_rule *r,
           struct rl_limit *lim, struct rls_rule_limit *rl)
{
    static const char *const align_names[] = {"first", "epoch"};
    yaml_node_t *at[L_COUNT], *keys[L_COUNT];
    int ok = yfields(y, m, path, l_names, L_COUNT, at, keys, L_HINT);
    int unlimited = 0, algo = RL_ALGO_FIXED_WINDOW, align = RL_ALIGN_EPOCH;
    uint64_t requests = 0, burst = 0;
    int64_t window = 0;
    const char *name = NULL, *why, *field;
    char *fp;

    memset(lim, 0, sizeof(*lim));
    memset(rl, 0, sizeof(*rl));
#define FIELD(i, call) \
    do { \
        /* an absent field is its default: no path needed */ \
        fp = at[i] != NULL ? join(path, l_names[i]) : NULL; \
        if ((call) != RL_OK) \
            ok = RL_ERR; \
        free(fp); \
    } while (0)
    FIELD(L_UNLIMITED, get_bool(y, at[L_UNLIMITED], fp, &unlimited));
    if (in_list && keys[L_UNLIMITED] != NULL) {
        ybad(y, keys[L_UNLIMITED], path, "unlimited: only in rate_limit, not in rate_limits");
        ok = RL_ERR;
    }
    FIELD(L_NAME, get_cstr(y, at[L_NAME], fp, &name));
    FIELD(L_REQUESTS, yuint(y, at[L_REQUESTS], fp, UINT32_MAX, &requests));
    FIELD(L_WINDOW, yduration(y, at[L_WINDOW], fp, 1, 366 * DAY_MS, &window));
    FIELD(L_BURST, yuint(y, at[L_BURST], fp, 1000000000, &burst));
    if (at[L_ALGORITHM] != NULL)
        FIELD(L_ALGORITHM, get_algo(y, at[L_ALGORITHM], fp, &algo));
    if (at[L_ALIGN] != NULL)
        FIELD(L_ALIGN, get_enum(y, at[L_ALIGN], fp, align_names, 2, 0,
                                "must be first or epoch", &align));
    /* the unit: any case, as envoyproxy/ratelimit reads it; "unknown" is
     * none */
    if (!is_null(at[L_UNIT])) {
        static const char *const unit_names[RLS_UNIT_COUNT] = {
            NULL, "second", "minute", "hour", "day", "month", "year", "week"};
        int u = 0;

        fp = join(path, l_names[L_UNIT]);
        if (get_enum(y, at[L_UNIT], fp, unit_names, RLS_UNIT_COUNT, 1,
                     "invalid rate limit unit: use second, minute, hour, day, week, month or "
                     "year",
                     &u) != RL_OK) {
            ok = RL_ERR;
        } else if (unlimited) {
            ybad(y, at[L_UNIT], fp, "should not specify rate limit unit when unlimited");
            ok = RL_ERR;
        } else {
            rl->unit = (enum rls_unit)u;
        }
        free(fp);
    }
    /* replaces: [{name: x}] */
    if (!is_null(at[L_REPLACES])) {
        fp = join(path, l_names[L_REPLACES]);
        if (at[L_REPLACES]->type != YAML_SEQUENCE_NODE) {
            ybad(y, at[L_REPLACES], fp, "must be a list of {name: NAME}");
            ok = RL_ERR;
        } else {
            size_t i = 0;
            for (yaml_node_item_t *it = at[L_REPLACES]->data.sequence.items.start;
                 it < at[L_REPLACES]->data.sequence.items.top; it++, i++) {
                yaml_node_t *e = node(y, *it), *eat[1], *ekeys[1];
                static const char *const rn[] = {"name"};
                char *ip = xasprintf("%s[%zu]", fp, i), *np = join(ip, "name");
                const char *rname = NULL;

                if (e == NULL || e->type != YAML_MAPPING_NODE) {
                    ybad(y, e, ip, "must be a mapping {name: NAME}");
                    ok = RL_ERR;
                } else if (yfields(y, e, ip, rn, 1, eat, ekeys, "a replaces entry has name") !=
                               RL_OK ||
                           get_cstr(y, eat[0], np, &rname) != RL_OK) {
                    ok = RL_ERR;
                } else if (rname == NULL || *rname == '\0') {
                    ybad(y, e, np, "should not have an empty replaces entry");
                    ok = RL_ERR;
                } else if (name != NULL && strcmp(rname, name) == 0) {
                    ybad(y, e, np, "replaces should not contain name of same descriptor");
                    ok = RL_ERR;
                } else {
                    push_name(&r->replaces, &r->nreplaces, rname);
                }
                free(np);
                free(ip);
            }
        }
        free(fp);
    }
#undef FIELD
    if (unlimited) {
        r->unlimited = 1;
        /* requests_per_unit is ignored, as envoyproxy/ratelimit ignores it */
        if (keys[L_WINDOW] || keys[L_ALGORITHM] || keys[L_BURST] || keys[L_ALIGN]) {
            ybad(y, m, path,
                 "an unlimited rate limit counts nothing: no window, algorithm, burst or "
                 "align");
            ok = RL_ERR;
        }
        if (name != NULL)
            push_name(&r->names, &r->nnames, name);
        return ok;
    }
    if (rl->unit != RLS_UNIT_UNKNOWN && window != 0) {
        ybad(y, m, path, "give unit or window, not both");
        return RL_ERR;
    }
    if (rl->unit == RLS_UNIT_UNKNOWN && window == 0) {
        if (ok == RL_OK && is_null(at[L_UNIT]))
            ybad(y, m, path,
                 "invalid rate limit unit '': give unit (second, minute, hour, day, week, "
                 "month, year), window, or unlimited: true");
        return RL_ERR;
    }
    if (ok != RL_OK)
        return RL_ERR;
    lim->algo = (enum rl_algo)algo;
    lim->window_ms = window != 0 ? window : rls_unit_ms(rl->unit);
    lim->limit = (int64_t)requests;
    lim->align = algo == RL_ALGO_FIXED_WINDOW ? (enum rl_align)align : RL_ALIGN_FIRST;
    lim->burst = (int64_t)burst;
    rl->requests_per_unit = (uint32_t)requests;
    rl->name = name != NULL ? xstrdup(name) : NULL;
    rl->unit_form = window == 0 && lim->algo == RL_ALGO_FIXED_WINDOW &&
                    lim->align == RL_ALIGN_EPOCH;
    if (window != 0)
        for (int u = RLS_UNIT_SECOND; u < RLS_UNIT_COUNT; u++)
            if (rls_unit_ms((enum rls_unit)u) == window)
                rl->unit = (enum rls_unit)u;
    if (name != NULL)
        push_name(&r->names, &r->nnames, name);
    if (at[L_ALIGN] != NULL && lim->algo != RL_ALGO_FIXED_WINDOW) {
        ybad(y, at[L_ALIGN], path, "align: only fixed_window has windows to align");
        return RL_ERR;
    }
    if ((why = algo_limit_problem(lim, &field)) != NULL) {
        ybad(y, at[L_BURST] ? at[L_BURST] : m, path, "%s: %s", field, why);
        return RL_ERR;
    }
    if (lim->algo != RL_ALGO_FIXED_WINDOW && requests > 1000000000) {
        ybad(y, at[L_REQUESTS], path,
             "requests_per_unit: at most 1000000000 with %s (up to 4294967295 with "
             "fixed_window)",
             algo_def(lim->algo)->name);
        return RL_ERR;
    }
    if (lim->burst == 0)
        lim->burst = lim->limit;
    return RL_OK;
}

static void free_node(struct rls_node *n);

static void
free_rule(struct rls_rule *r)
{
    free((char *)r->key.p);
    free((char *)r->value.p);
    free(r->parts);
    for (size_t i = 0; i < r->nlimits; i++)
        free(r->limits[i].name);
    free(r->limits);
    for (size_t i = 0; i < r->nnames; i++)
        free(r->names[i]);
    free(r->names);
    for (size_t i = 0; i < r->nreplaces; i++)
        free(r->replaces[i]);
    free(r->replaces);
    if (r->policy != NULL) {
        free(r->policy->limits);
        free(r->policy->name);
        free(r->policy);
    }
    free(r->label);
    free_node(&r->node);
}

static void
free_node(struct rls_node *n)
{
    for (size_t i = 0; i < n->nrules; i++)
        free_rule(&n->rules[i]);
    free(n->rules);
    free(n->exact);
    free(n->bykey);
    free(n->wild);
    memset(n, 0, sizeof(*n));
}

static bool
valid_policy_name(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= RL_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* The policy check.c decides a rule's limits by. */
static void
make_policy(struct yload *y, struct rls_rule *r, struct rl_limit *lims, size_t n, int mode,
            int64_t sync_ms)
{
    struct rl_policy *p = xcalloc(1, sizeof(*p));

    /* its name is what the RateLimit headers and logs show; its keys are
     * named by rls.c */
    p->name = xstrdup(r->nnames > 0 && valid_policy_name(r->names[0]) ? r->names[0] : "rls");
    p->limits = xmalloc(n * sizeof(*lims));
    memcpy(p->limits, lims, n * sizeof(*lims));
    p->nlimits = n;
    p->shadow = r->shadow_mode;
    p->uid = y->new_uid();
    p->mode = (enum rl_policy_mode)mode;
    p->sync_interval_ms = sync_ms != 0 ? sync_ms : HYBRID_SYNC_DEFAULT_MS;
    r->policy = p;
}

/* "key" or "key_value": envoyproxy/ratelimit's name of a rule's level. */
static char *
level_label(const struct rls_rule *r, const char *parent)
{
    const char *sep = parent != NULL ? "." : "";

    if (parent == NULL)
        parent = "";
    if (r->value.p == NULL)
        return xasprintf("%s%s%.*s", parent, sep, (int)r->key.len, r->key.p);
    return xasprintf("%s%s%.*s_%.*s", parent, sep, (int)r->key.len, r->key.p,
                     (int)r->value.len, r->value.p);
}

/* A value with '*' cut into its literal runs. */
static void
split_glob(struct rls_rule *r)
{
    size_t n = 1;

    for (size_t i = 0; i < r->value.len; i++)
        n += r->value.p[i] == '*';
    r->parts = xcalloc(n, sizeof(*r->parts));
    r->nparts = 0;
    for (size_t s = 0, i = 0; i <= r->value.len; i++) {
        if (i == r->value.len || r->value.p[i] == '*') {
            r->parts[r->nparts].p = r->value.p + s;
            r->parts[r->nparts++].len = i - s;
            s = i + 1;
        }
    }
}

static int load_descriptors(struct yload *y, yaml_node_t *seq, const char *path,
                            struct rls_node *into, struct rls_rule *parent, size_t depth);

/* The limits of rule r: rate_limit (one) or rate_limits (a list). */
static int
load_rule_limits(struct yload *y, yaml_node_t **at, const char *path, struct rls_rule *r,
                 int mode, int64_t sync_ms)
{
    struct rl_limit lims[RL_LIMITS_MAX];
    size_t n = 0;
    int ok = RL_OK;

    if (!is_null(at[D_RATE_LIMIT]) && !is_null(at[D_RATE_LIMITS])) {
        ybad(y, at[D_RATE_LIMITS], path, "give rate_limit or rate_limits, not both");
        return RL_ERR;
    }
    if (!is_null(at[D_RATE_LIMIT])) {
        char *fp = join(path, "rate_limit");
        r->has_limit = 1;
        r->limits = xcalloc(1, sizeof(*r->limits));
        if (at[D_RATE_LIMIT]->type != YAML_MAPPING_NODE) {
            ybad(y, at[D_RATE_LIMIT], fp, "must be a mapping (unit, requests_per_unit, ...)");
            ok = RL_ERR;
        } else if (load_limit(y, at[D_RATE_LIMIT], fp, 0, r, &lims[0], &r->limits[0]) !=
                   RL_OK) {
            ok = RL_ERR;
        } else if (!r->unlimited) {
            n = r->nlimits = 1;
        }
        free(fp);
    } else if (!is_null(at[D_RATE_LIMITS])) {
        char *fp = join(path, "rate_limits");
        yaml_node_t *seq = at[D_RATE_LIMITS];
        size_t cnt = seq->type == YAML_SEQUENCE_NODE ? (size_t)(seq->data.sequence.items.top -
                                                                seq->data.sequence.items.start)
                                                     : 0;
        r->has_limit = 1;
        if (cnt == 0 || cnt > RL_LIMITS_MAX) {
            ybad(y, seq, fp, "must be a list of 1..%d rate limits", RL_LIMITS_MAX);
            free(fp);
            return RL_ERR;
        }
        r->limits = xcalloc(cnt, sizeof(*r->limits));
        for (size_t i = 0; i < cnt; i++) {
            yaml_node_t *m = node(y, seq->data.sequence.items.start[i]);
            char *ip = xasprintf("%s[%zu]", fp, i);
            if (m == NULL || m->type != YAML_MAPPING_NODE) {
                ybad(y, m, ip, "must be a mapping (unit, requests_per_unit, ...)");
                ok = RL_ERR;
            } else if (load_limit(y, m, ip, 1, r, &lims[n], &r->limits[n]) != RL_OK) {
                ok = RL_ERR;
            } else {
                for (size_t j = 0; j < n; j++) {
                    if (lims[j].algo == lims[n].algo &&
                        lims[j].window_ms == lims[n].window_ms) {
                        ybad(y, m, ip,
                             "same algorithm and window as rate_limits[%zu]: they would "
                             "share one counter",
                             j);
                        ok = RL_ERR;
                    }
                }
                n++;
            }
            free(ip);
        }
        r->nlimits = n;
        free(fp);
    }
    if (ok != RL_OK)
        return RL_ERR;
    for (size_t i = 0; i < n; i++)
        if (lims[i].limit == 0 && r->zero == 0)
            r->zero = i + 1;
    if (n > 0)
        make_policy(y, r, lims, n, mode, sync_ms);
    return RL_OK;
}

/* One descriptor of the file into r (zeroed), at path. */
static int
load_rule(struct yload *y, yaml_node_t *m, const char *path, struct rls_rule *r,
          struct rls_rule *parent, size_t depth)
{
    static const char *const mode_names[] = {"exact", "hybrid"};
    yaml_node_t *at[D_COUNT], *keys[D_COUNT];
    int ok = yfields(y, m, path, d_names, D_COUNT, at, keys, D_HINT);
    struct rls_str key, value;
    int mode = RL_MODE_EXACT;
    int64_t sync_ms = 0;
    char *fp;

    r->line = m->start_mark.line + 1;
    r->parent = parent;
    r->domain = y->domain;
    r->stat_id = -1;
#define FIELD(i, call) \
    do { \
        fp = at[i] != NULL ? join(path, d_names[i]) : NULL; \
        if ((call) != RL_OK) \
            ok = RL_ERR; \
        free(fp); \
    } while (0)
    FIELD(D_KEY, get_str(y, at[D_KEY], fp, &key));
    FIELD(D_VALUE, get_str(y, at[D_VALUE], fp, &value));
    FIELD(D_SHADOW_MODE, get_bool(y, at[D_SHADOW_MODE], fp, &r->shadow_mode));
    FIELD(D_QUOTA_MODE, get_bool(y, at[D_QUOTA_MODE], fp, &r->quota_mode));
    FIELD(D_DETAILED_METRIC, get_bool(y, at[D_DETAILED_METRIC], fp, &r->detailed_metric));
    FIELD(D_VALUE_TO_METRIC, get_bool(y, at[D_VALUE_TO_METRIC], fp, &r->value_to_metric));
    FIELD(D_SHARE_THRESHOLD, get_bool(y, at[D_SHARE_THRESHOLD], fp, &r->share_threshold));
    if (at[D_MODE] != NULL)
        FIELD(D_MODE,
              get_enum(y, at[D_MODE], fp, mode_names, 2, 0, "must be exact or hybrid", &mode));
    FIELD(D_SYNC_INTERVAL, yduration(y, at[D_SYNC_INTERVAL], fp, 10, 60000, &sync_ms));
#undef FIELD
    /* metadata: Envoy's dynamic metadata for a response; any YAML, read
     * by nobody here */
    if (key.p == NULL || key.len == 0) {
        ybad(y, m, path, "descriptor has empty key");
        ok = RL_ERR;
    } else {
        r->key.p = dup_str(key);
        r->key.len = key.len;
    }
    /* an empty value is none, as envoyproxy/ratelimit reads it */
    if (value.p != NULL && value.len > 0) {
        r->value.p = dup_str(value);
        r->value.len = value.len;
        if (memchr(value.p, '*', value.len) != NULL)
            split_glob(r);
    }
    if (r->share_threshold && r->parts == NULL) {
        ybad(y, keys[D_SHARE_THRESHOLD], path,
             "share_threshold can only be used with wildcard values (containing '*')");
        ok = RL_ERR;
    }
    if (sync_ms != 0 && mode != RL_MODE_HYBRID) {
        ybad(y, keys[D_SYNC_INTERVAL], path,
             "sync_interval: only a rule with mode: hybrid syncs");
        ok = RL_ERR;
    }
    if (load_rule_limits(y, at, path, r, mode, sync_ms) != RL_OK)
        ok = RL_ERR;
    if (mode != RL_MODE_EXACT && r->policy == NULL && ok == RL_OK) {
        ybad(y, keys[D_MODE], path, "mode: only a rule that counts (a rate limit) has a mode");
        ok = RL_ERR;
    }
    if (r->key.p != NULL) {
        const struct rls_rule *p;
        r->label = level_label(r, parent != NULL ? parent->label : NULL);
        for (p = r; p != NULL; p = p->parent)
            if (p->value_to_metric)
                break;
        r->dynamic_label = r->detailed_metric || p != NULL;
    }
    if (++*y->nrules > RLS_RULES_MAX) {
        if (*y->nrules == RLS_RULES_MAX + 1)
            ybad(y, m, path, "more than %d rules", RLS_RULES_MAX);
        return RL_ERR;
    }
    if (!is_null(at[D_DESCRIPTORS])) {
        char *np = join(path, "descriptors");
        if (depth + 1 >= RLS_DEPTH_MAX) {
            ybad(y, at[D_DESCRIPTORS], np, "descriptors nested deeper than %d levels",
                 RLS_DEPTH_MAX);
            ok = RL_ERR;
        } else if (load_descriptors(y, at[D_DESCRIPTORS], np, &r->node, r, depth + 1) !=
                   RL_OK) {
            ok = RL_ERR;
        }
        free(np);
    }
    return ok;
}

static int
cmp_str(struct rls_str a, struct rls_str b)
{
    int c = memcmp(a.p, b.p, a.len < b.len ? a.len : b.len);

    return c != 0 ? c : (a.len > b.len) - (a.len < b.len);
}

static int
cmp_exact(const void *x, const void *y)
{
    const struct rls_rule *a = *(struct rls_rule *const *)x, *b = *(struct rls_rule *const *)y;
    int c = cmp_str(a->key, b->key);

    return c != 0 ? c : cmp_str(a->value, b->value);
}

static int
cmp_key(const void *x, const void *y)
{
    const struct rls_rule *a = *(struct rls_rule *const *)x, *b = *(struct rls_rule *const *)y;

    return cmp_str(a->key, b->key);
}

/* Neighbours of a sorted table that compare equal: one key and value given
 * twice, named at the later line. */
static int
report_twins(struct yload *y, struct rls_rule **v, size_t n,
             int (*cmp)(const void *, const void *), const char *path)
{
    int ok = RL_OK;

    for (size_t i = 1; i < n; i++) {
        const struct rls_rule *a = v[i - 1], *b = v[i];
        if (cmp(&v[i - 1], &v[i]) != 0)
            continue;
        if (a->line > b->line) {
            const struct rls_rule *t = a;
            a = b;
            b = t;
        }
        errors_add(y->errs,
                   "%s:%zu: %s: duplicate descriptor composite key '%s' (line %zu too)",
                   y->file, b->line, path, b->label, a->line);
        ok = RL_ERR;
    }
    return ok;
}

/* The lookup tables of a node whose rules are loaded; a key and value
 * given twice is a problem (envoyproxy/ratelimit's "duplicate composite
 * key"). */
static int
index_node(struct yload *y, struct rls_node *n, const char *path)
{
    int ok = RL_OK;

    n->exact = xcalloc(n->nrules ? n->nrules : 1, sizeof(*n->exact));
    n->bykey = xcalloc(n->nrules ? n->nrules : 1, sizeof(*n->bykey));
    n->wild = xcalloc(n->nrules ? n->nrules : 1, sizeof(*n->wild));
    for (size_t i = 0; i < n->nrules; i++) {
        struct rls_rule *r = &n->rules[i];
        if (r->key.p == NULL)
            continue;
        if (r->value.p == NULL)
            n->bykey[n->nbykey++] = r;
        else if (r->parts == NULL)
            n->exact[n->nexact++] = r;
        else
            n->wild[n->nwild++] = r;
    }
    qsort(n->exact, n->nexact, sizeof(*n->exact), cmp_exact);
    qsort(n->bykey, n->nbykey, sizeof(*n->bykey), cmp_key);
    ok = report_twins(y, n->exact, n->nexact, cmp_exact, path);
    if (report_twins(y, n->bykey, n->nbykey, cmp_key, path) != RL_OK)
        ok = RL_ERR;
    for (size_t i = 0; i < n->nwild; i++) {
        for (size_t j = 0; j < i; j++) {
            if (cmp_exact(&n->wild[j], &n->wild[i]) == 0) {
                errors_add(
                    y->errs,
                    "%s:%zu: %s: duplicate descriptor composite key '%s' (line %zu too)",
                    y->file, n->wild[i]->line, path, n->wild[i]->label, n->wild[j]->line);
                ok = RL_ERR;
            }
        }
    }
    return ok;
}

static int
load_descriptors(struct yload *y, yaml_node_t *seq, const char *path, struct rls_node *into,
                 struct rls_rule *parent, size_t depth)
{
    size_t cnt;
    int ok = RL_OK;

    if (seq->type != YAML_SEQUENCE_NODE) {
        ybad(y, seq, path, "must be a list of descriptors (key, value, rate_limit, ...)");
        return RL_ERR;
    }
    cnt = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    into->rules = xcalloc(cnt ? cnt : 1, sizeof(*into->rules));
    for (size_t i = 0; i < cnt; i++) {
        yaml_node_t *m = node(y, seq->data.sequence.items.start[i]);
        char *ip = xasprintf("%s[%zu]", path, i);

        if (y->visits > VISITS_MAX || *y->nrules > RLS_RULES_MAX) {
            if (y->visits > VISITS_MAX && !y->too_big)
                ybad(y, m, ip, "the file expands to more than %d nodes (aliases?)",
                     VISITS_MAX);
            y->too_big = 1;
            free(ip);
            return RL_ERR;
        }
        if (m == NULL || m->type != YAML_MAPPING_NODE) {
            ybad(y, m, ip, "must be a mapping (key, value, rate_limit, ...), not a %s",
                 m != NULL && m->type == YAML_SEQUENCE_NODE ? "list" : "scalar");
            ok = RL_ERR;
        } else {
            struct rls_rule *r = &into->rules[into->nrules++];
            if (load_rule(y, m, ip, r, parent, depth) != RL_OK)
                ok = RL_ERR;
        }
        free(ip);
    }
    if (index_node(y, into, path) != RL_OK)
        ok = RL_ERR;
    return ok;
}

/* ---- files ------------------------------------------------------------------- */

enum { T_DOMAIN, T_DESCRIPTORS, T_COUNT };
static const char *const t_names[T_COUNT] = {"domain", "descriptors"};

/* The domain of one file into *d (zeroed); RL_ERR with problems added. */
static int
load_doc(struct yload *y, struct rls_domain *d)
{
    yaml_node_t *root = yaml_document_get_root_node(y->doc), *at[T_COUNT], *keys[T_COUNT];
    struct rls_str name;
    int ok;

    if (root == NULL || is_null(root)) {
        ybad(y, root, "", "config file cannot have empty domain: it is empty");
        return RL_ERR;
    }
    if (root->type != YAML_MAPPING_NODE) {
        ybad(y, root, "", "must be a mapping of domain and descriptors");
        return RL_ERR;
    }
    ok = yfields(y, root, "", t_names, T_COUNT, at, keys,
                 "a rule file has domain, descriptors");
    if (get_str(y, at[T_DOMAIN], "domain", &name) != RL_OK)
        return RL_ERR;
    if (name.p == NULL || name.len == 0) {
        ybad(y, at[T_DOMAIN] ? at[T_DOMAIN] : root, "domain",
             "config file cannot have empty domain");
        ok = RL_ERR;
    } else {
        d->name.p = dup_str(name);
        d->name.len = name.len;
    }
    d->file = xstrdup(y->file);
    y->domain = d;
    if (!is_null(at[T_DESCRIPTORS]) &&
        load_descriptors(y, at[T_DESCRIPTORS], "descriptors", &d->node, NULL, 0) != RL_OK)
        ok = RL_ERR;
    if (d->node.exact == NULL)
        index_node(y, &d->node, "descriptors");
    return ok;
}

static void
free_domain(struct rls_domain *d)
{
    free((char *)d->name.p);
    free(d->file);
    free_node(&d->node);
}

struct loading {
    struct rls_rules *r;
    size_t cap;
    uint64_t (*new_uid)(void);
    struct rl_errors *errs;
};

static void
yaml_problem(struct rl_errors *errs, const char *file, const yaml_parser_t *p)
{
    const yaml_mark_t *m = p->problem != NULL ? &p->problem_mark : &p->context_mark;

    errors_add(errs, "%s:%zu:%zu: not YAML: %s%s%s", file, m->line + 1, m->column + 1,
               p->problem ? p->problem : "cannot be read", p->context ? " " : "",
               p->context ? p->context : "");
}

/* A file of the set: its first document is its domain; further documents
 * must be empty (envoyproxy/ratelimit reads only the first). */
static int
load_file(struct loading *l, const char *file)
{
    yaml_parser_t parser;
    yaml_document_t doc, more;
    struct yload y = {.file = file, .errs = l->errs, .new_uid = l->new_uid};
    struct rls_domain d;
    size_t len;
    char *text;
    int ok;

    if (l->r->nfiles >= RLS_FILES_MAX) {
        errors_add(l->errs, "%s: more than %d rule files", file, RLS_FILES_MAX);
        return RL_ERR;
    }
    if (errors_read_file(l->errs, file, RLS_FILE_MAX, &text, &len) != RL_OK)
        return RL_ERR;
    l->r->nfiles++;
    l->r->hash = fnv1a(fnv1a(l->r->hash, file, strlen(file) + 1), text, len);
    if (!yaml_parser_initialize(&parser)) {
        free(text);
        errors_add(l->errs, "%s: cannot start the YAML parser", file);
        return RL_ERR;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_problem(l->errs, file, &parser);
        yaml_parser_delete(&parser);
        free(text);
        return RL_ERR;
    }
    y.doc = &doc;
    y.nrules = &l->r->nrules;
    memset(&d, 0, sizeof(d));
    ok = load_doc(&y, &d);
    yaml_document_delete(&doc);
    /* a stream of several documents: the rest must be empty */
    while (ok == RL_OK) {
        yaml_node_t *root;
        if (!yaml_parser_load(&parser, &more)) {
            yaml_problem(l->errs, file, &parser);
            ok = RL_ERR;
            break;
        }
        root = yaml_document_get_root_node(&more);
        if (root == NULL) {
            yaml_document_delete(&more);
            break;
        }
        if (!is_null(root)) {
            errors_add(l->errs,
                       "%s:%zu: a second YAML document: put each domain in a file of its own "
                       "(envoyproxy/ratelimit would read only the first)",
                       file, root->start_mark.line + 1);
            ok = RL_ERR;
        }
        yaml_document_delete(&more);
    }
    yaml_parser_delete(&parser);
    free(text);
    if (ok == RL_OK && d.name.p != NULL) {
        for (size_t i = 0; i < l->r->ndomains; i++) {
            if (cmp_str(l->r->domains[i].name, d.name) == 0) {
                errors_add(l->errs,
                           "%s: domain: duplicate domain '%s' in config file (%s has it)",
                           file, d.name.p, l->r->domains[i].file);
                ok = RL_ERR;
            }
        }
    }
    if (ok != RL_OK) {
        free_domain(&d);
        return RL_ERR;
    }
    if (l->r->ndomains == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->r->domains = xrealloc(l->r->domains, l->cap * sizeof(*l->r->domains));
    }
    l->r->domains[l->r->ndomains++] = d;
    return RL_OK;
}

static bool
yaml_name(const char *n)
{
    size_t len = strlen(n);

    return n[0] != '.' && ((len > 5 && strcmp(n + len - 5, ".yaml") == 0) ||
                           (len > 4 && strcmp(n + len - 4, ".yml") == 0));
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.yaml / *.yml files of dir, in name order, subdirectories after
 * the files of theirs; names starting with '.' are skipped (a ConfigMap's
 * ..data and timestamped directories). */
static int
load_dir(struct loading *l, const char *dir, int depth)
{
    DIR *dp;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int ok = RL_OK;

    if (depth > DIR_DEPTH_MAX) {
        errors_add(l->errs, "%s: directories nested deeper than %d levels", dir,
                   DIR_DEPTH_MAX);
        return RL_ERR;
    }
    if ((dp = opendir(dir)) == NULL) {
        errors_add(l->errs, "%s: %s", dir, strerror(errno));
        return RL_ERR;
    }
    while ((de = readdir(dp)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            names = xrealloc(names, cap * sizeof(*names));
        }
        names[n++] = xstrdup(de->d_name);
        if (n > RLS_FILES_MAX)
            break;
    }
    closedir(dp);
    qsort(names, n, sizeof(*names), cmp_names);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            char *path = xasprintf("%s/%s", dir, names[i]);
            struct stat st;

            if (stat(path, &st) != 0) {
                /* a dangling link of a ConfigMap being swapped: say so */
                errors_add(l->errs, "%s: %s", path, strerror(errno));
                ok = RL_ERR;
            } else if (pass == 0 && S_ISREG(st.st_mode) && yaml_name(names[i])) {
                if (load_file(l, path) != RL_OK)
                    ok = RL_ERR;
            } else if (pass == 1 && S_ISDIR(st.st_mode)) {
                if (load_dir(l, path, depth + 1) != RL_OK)
                    ok = RL_ERR;
            }
            free(path);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ok;
}

static int
cmp_domain(const void *a, const void *b)
{
    return cmp_str(((const struct rls_domain *)a)->name, ((const struct rls_domain *)b)->name);
}

int
rls_rules_load(const char *where, uint64_t (*new_uid)(void), struct rls_rules **out,
               struct rl_errors *errs)
{
    struct loading l = {.new_uid = new_uid, .errs = errs};
    size_t before = errs->n;
    struct stat st;

    *out = NULL;
    l.r = xcalloc(1, sizeof(*l.r));
    l.r->hash = FNV1A_INIT;
    if (stat(where, &st) != 0)
        errors_add(errs, "%s: %s", where, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        (void)load_dir(&l, where, 0);
    else
        (void)load_file(&l, where);
    if (errs->n != before) {
        rls_rules_free(l.r);
        return RL_ERR;
    }
    qsort(l.r->domains, l.r->ndomains, sizeof(*l.r->domains), cmp_domain);
    *out = l.r;
    return RL_OK;
}

void
rls_rules_free(struct rls_rules *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->ndomains; i++)
        free_domain(&r->domains[i]);
    free(r->domains);
    free(r);
}

static void
set_ids(struct rls_node *n, int id)
{
    for (size_t i = 0; i < n->nrules; i++) {
        if (n->rules[i].policy != NULL)
            n->rules[i].policy->metrics_id = id;
        set_ids(&n->rules[i].node, id);
    }
}

void
rls_rules_set_metrics_id(struct rls_rules *r, int id)
{
    for (size_t i = 0; r != NULL && i < r->ndomains; i++)
        set_ids(&r->domains[i].node, id);
}

/* ---- matching -------------------------------------------------------------- */

const struct rls_domain *
rls_rules_domain(const struct rls_rules *r, const char *name, size_t len)
{
    struct rls_str want = {name, len};
    size_t lo = 0, hi = r != NULL ? r->ndomains : 0;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_str(r->domains[mid].name, want);
        if (c == 0)
            return &r->domains[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

bool
rls_rules_glob(const struct rls_str *parts, size_t nparts, const char *s, size_t len)
{
    const struct rls_str *first = &parts[0], *last = &parts[nparts - 1];
    size_t lo, hi;

    if (nparts == 1)
        return len == first->len && memcmp(s, first->p, len) == 0;
    if (len < first->len + last->len || memcmp(s, first->p, first->len) != 0 ||
        memcmp(s + len - last->len, last->p, last->len) != 0)
        return false;
    /* the middle runs in order, each at its first place, between the two */
    lo = first->len;
    hi = len - last->len;
    for (size_t i = 1; i + 1 < nparts; i++) {
        const char *at;
        if (parts[i].len == 0)
            continue;
        if (hi - lo < parts[i].len)
            return false;
        at = memmem(s + lo, hi - lo, parts[i].p, parts[i].len);
        if (at == NULL)
            return false;
        lo = (size_t)(at - s) + parts[i].len;
    }
    return true;
}

static struct rls_rule *
find_exact(const struct rls_node *n, const struct rls_entry *e)
{
    size_t lo = 0, hi = n->nexact;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_str(n->exact[mid]->key, e->key);
        if (c == 0)
            c = cmp_str(n->exact[mid]->value, e->value);
        if (c == 0)
            return n->exact[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static struct rls_rule *
find_key(const struct rls_node *n, const struct rls_str *key)
{
    size_t lo = 0, hi = n->nbykey;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_str(n->bykey[mid]->key, *key);
        if (c == 0)
            return n->bykey[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct rls_rule *
rls_rules_match(const struct rls_domain *d, const struct rls_entry *e, size_t n,
                const struct rls_str **shared)
{
    const struct rls_node *at = &d->node;
    const struct rls_rule *found = NULL;

    for (size_t i = 0; i < n; i++)
        shared[i] = NULL;
    for (size_t i = 0; i < n; i++) {
        struct rls_rule *next = e[i].value.len > 0 ? find_exact(at, &e[i]) : NULL;

        for (size_t w = 0; next == NULL && w < at->nwild; w++) {
            struct rls_rule *r = at->wild[w];
            if (cmp_str(r->key, e[i].key) == 0 &&
                rls_rules_glob(r->parts, r->nparts, e[i].value.p, e[i].value.len)) {
                next = r;
                if (r->share_threshold)
                    shared[i] = &r->value;
            }
        }
        if (next == NULL)
            next = find_key(at, &e[i].key);
        if (next == NULL)
            break;
        /* a rule answers only for a descriptor as deep as it is */
        if (next->has_limit && i == n - 1)
            found = next;
        if (next->node.nrules == 0)
            break;
        at = &next->node;
    }
    return found;
}
