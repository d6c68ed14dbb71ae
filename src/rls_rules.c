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

#include "arena.h"
#include "config.h"
#include "rls_rules.h"
#include "util.h"
#include "ytree.h"

#define DAY_MS (24LL * 3600 * 1000)
#define HYBRID_SYNC_DEFAULT_MS 250
#define DIR_DEPTH_MAX 8

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
    const struct ytree *tree;
    struct rl_errors *errs;
    struct arena *mem; /* the rule set's: what its rules keep */
    char *rls_name;    /* the policy name of a rule with none of its own */
    size_t *nrules;    /* of the whole set */
    uint64_t (*new_uid)(void);
    struct rls_domain *domain;
    /* the top-level descriptors one at a time (struct rls_doc) */
    const struct ytree *(*item)(void *item_arg, size_t i, const char **cause);
    void *item_arg;
};

static void RL_PRINTF(4, 5)
    ybad(struct yload *y, const struct ynode *at, const char *path, const char *fmt, ...)
{
    va_list ap;
    char *what;

    va_start(ap, fmt);
    what = xvasprintf(fmt, ap);
    va_end(ap);
    if (at != NULL && at->line == 0) /* a tree that is no file's: no lines */
        errors_add(y->errs, "%s: %s%s%s", y->file, path, *path ? ": " : "", what);
    else if (*path)
        errors_add(y->errs, "%s:%zu: %s: %s", y->file, at ? (size_t)at->line : 1, path, what);
    else
        errors_add(y->errs, "%s:%zu: %s", y->file, at ? (size_t)at->line : 1, what);
    free(what);
}

static char *
join(const char *path, const char *name)
{
    return *path ? xasprintf("%s.%s", path, name) : xstrdup(name);
}

/* n bytes of the rule set's memory, zeroed. */
static void *
mem_zalloc(struct yload *y, size_t n)
{
    void *p = arena_alloc(y->mem, n > 0 ? n : 1);

    return memset(p, 0, n);
}

/* len bytes of p kept by the rule set, NUL-terminated. */
static char *
mem_str(struct yload *y, const char *p, size_t len)
{
    char *s = arena_alloc(y->mem, len + 1);

    memcpy(s, p, len);
    s[len] = '\0';
    return s;
}

/* A plain ~, null or empty scalar: YAML's null, the field left out. */
static bool
is_null(const struct yload *y, const struct ynode *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    const char *v;

    if (n == NULL)
        return true;
    if (n->kind != YT_SCALAR || !n->plain)
        return false;
    v = ytree_str(y->tree, n);
    for (size_t i = 0; i < RL_ARRAY_LEN(nulls); i++)
        if (strcmp(v, nulls[i]) == 0 && n->n == strlen(nulls[i]))
            return true;
    return false;
}

/* A string field: any scalar as written (a number or true too, as
 * envoyproxy/ratelimit's YAML decoder reads them into strings). */
static int
get_str(struct yload *y, const struct ynode *n, const char *path, struct rls_str *out)
{
    out->p = NULL;
    out->len = 0;
    if (is_null(y, n))
        return RL_OK;
    if (n->kind != YT_SCALAR) {
        ybad(y, n, path, "must be a string");
        return RL_ERR;
    }
    out->p = ytree_str(y->tree, n);
    out->len = n->n;
    return RL_OK;
}

/* A C string field: no NUL inside. */
static int
get_cstr(struct yload *y, const struct ynode *n, const char *path, const char **out)
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
get_bool(struct yload *y, const struct ynode *n, const char *path, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "y"};
    static const char *const no[] = {"false", "no", "off", "n"};
    const char *v;

    *out = 0;
    if (is_null(y, n))
        return RL_OK;
    if (n->kind == YT_SCALAR && n->plain) {
        v = ytree_str(y->tree, n);
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
yuint(struct yload *y, const struct ynode *n, const char *path, uint64_t max, uint64_t *out)
{
    const char *v;
    unsigned base = 10;
    uint64_t acc = 0;
    int digits = 0;

    *out = 0;
    if (is_null(y, n))
        return RL_OK;
    if (n->kind != YT_SCALAR || !n->plain)
        goto bad;
    v = ytree_str(y->tree, n);
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
yduration(struct yload *y, const struct ynode *n, const char *path, int64_t min, int64_t max,
          int64_t *out)
{
    const char *v;
    size_t len;
    int64_t ms;

    *out = 0;
    if (is_null(y, n))
        return RL_OK;
    if (n->kind != YT_SCALAR)
        goto bad;
    v = ytree_str(y->tree, n);
    len = n->n;
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
get_enum(struct yload *y, const struct ynode *n, const char *path, const char *const *names,
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
get_algo(struct yload *y, const struct ynode *n, const char *path, int *out)
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
yfields(struct yload *y, const struct ynode *map, const char *path, const char *const *names,
        size_t n, const struct ynode **at, const struct ynode **keys, const char *hint)
{
    int ok = RL_OK;

    memset(at, 0, n * sizeof(*at));
    memset(keys, 0, n * sizeof(*keys));
    for (size_t j = 0; j < map->n; j++) {
        const struct ynode *k = ytree_pair(y->tree, map, j, 0),
                           *v = ytree_pair(y->tree, map, j, 1);
        const char *name;
        size_t i;

        if (k->kind != YT_SCALAR) {
            ybad(y, k, path, "a key must be a string");
            ok = RL_ERR;
            continue;
        }
        name = ytree_str(y->tree, k);
        for (i = 0; i < n; i++)
            if (strcmp(name, names[i]) == 0 && k->n == strlen(names[i]))
                break;
        if (i == n) {
            char *fp = join(path, name);
            ybad(y, k, fp, "unknown key: %s", hint);
            free(fp);
            ok = RL_ERR;
        } else if (keys[i] != NULL) {
            char *fp = join(path, name);
            ybad(y, k, fp, "given twice (line %zu too)", (size_t)keys[i]->line);
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
    D_COUNT_OVER_LIMIT,
    D_COUNT
};
static const char *const d_names[D_COUNT] = {
    "key",         "value",      "rate_limit",      "rate_limits",      "descriptors",
    "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric",  "share_threshold",
    "metadata",    "mode",       "sync_interval",   "count_over_limit",
};
#define D_HINT \
    "a descriptor has key, value, rate_limit (or rate_limits), descriptors, shadow_mode, " \
    "quota_mode, detailed_metric, value_to_metric, share_threshold, metadata, mode, " \
    "sync_interval, count_over_limit"

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

/* s kept by the rule set. */
static struct rls_str
keep_str(struct yload *y, struct rls_str s)
{
    struct rls_str k = {mem_str(y, s.p, s.len), s.len};

    return k;
}

/* A name appended to v, both kept by the rule set: the array's capacity is
 * the power of two at or above *n, grown by copying. */
static void
push_name(struct yload *y, char ***v, size_t *n, const char *s)
{
    if ((*n & (*n - 1)) == 0) {
        char **nv = arena_alloc(y->mem, (*n ? 2 * *n : 1) * sizeof(*nv));
        if (*n > 0)
            memcpy(nv, *v, *n * sizeof(*nv));
        *v = nv;
    }
    (*v)[(*n)++] = mem_str(y, s, strlen(s));
}

/* A rate limit's fields as written. */
struct limit_in {
    int unlimited, algo, align, unit;
    uint64_t requests, burst;
    int64_t window;
    const char *name;
};

/* The scalar fields of a rate limit but its unit. */
static int
limit_scalars(struct yload *y, const struct ynode **at, const struct ynode **keys,
              const char *path, int in_list, struct limit_in *in)
{
    static const char *const align_names[] = {"first", "epoch"};
    int ok = RL_OK;
    char *fp;

#define FIELD(i, call) \
    do { \
        /* an absent field is its default: no path needed */ \
        fp = at[i] != NULL ? join(path, l_names[i]) : NULL; \
        if ((call) != RL_OK) \
            ok = RL_ERR; \
        free(fp); \
    } while (0)
    FIELD(L_UNLIMITED, get_bool(y, at[L_UNLIMITED], fp, &in->unlimited));
    if (in_list && keys[L_UNLIMITED] != NULL) {
        ybad(y, keys[L_UNLIMITED], path, "unlimited: only in rate_limit, not in rate_limits");
        ok = RL_ERR;
    }
    FIELD(L_NAME, get_cstr(y, at[L_NAME], fp, &in->name));
    /* budgets of tokens or micro-dollars, as a policy's limit */
    FIELD(L_REQUESTS, yuint(y, at[L_REQUESTS], fp, RL_COST_MAX, &in->requests));
    FIELD(L_WINDOW, yduration(y, at[L_WINDOW], fp, 1, 366 * DAY_MS, &in->window));
    FIELD(L_BURST, yuint(y, at[L_BURST], fp, 1000000000, &in->burst));
    if (at[L_ALGORITHM] != NULL)
        FIELD(L_ALGORITHM, get_algo(y, at[L_ALGORITHM], fp, &in->algo));
    if (at[L_ALIGN] != NULL)
        FIELD(L_ALIGN, get_enum(y, at[L_ALIGN], fp, align_names, 2, 0,
                                "must be first or epoch", &in->align));
#undef FIELD
    return ok;
}

/* The unit: any case, as envoyproxy/ratelimit reads it; "unknown" is none. */
static int
limit_unit(struct yload *y, const struct ynode *u, const char *path, struct limit_in *in)
{
    static const char *const unit_names[RLS_UNIT_COUNT] = {NULL,  "second", "minute", "hour",
                                                           "day", "month",  "year",   "week"};
    char *fp;
    int v = 0, ok = RL_OK;

    if (is_null(y, u))
        return RL_OK;
    fp = join(path, l_names[L_UNIT]);
    if (get_enum(y, u, fp, unit_names, RLS_UNIT_COUNT, 1,
                 "invalid rate limit unit: use second, minute, hour, day, week, month or year",
                 &v) != RL_OK) {
        ok = RL_ERR;
    } else if (in->unlimited) {
        ybad(y, u, fp, "should not specify rate limit unit when unlimited");
        ok = RL_ERR;
    } else {
        in->unit = v;
    }
    free(fp);
    return ok;
}

/* One entry of replaces, {name: x}, at ip. */
static int
limit_replace(struct yload *y, const struct ynode *e, const char *ip, const char *own,
              struct rls_rule *r)
{
    static const char *const rn[] = {"name"};
    const struct ynode *eat[1], *ekeys[1];
    char *np = join(ip, "name");
    const char *rname = NULL;
    int ok = RL_ERR;

    if (e->kind != YT_MAP)
        ybad(y, e, ip, "must be a mapping {name: NAME}");
    else if (yfields(y, e, ip, rn, 1, eat, ekeys, "a replaces entry has name") != RL_OK ||
             get_cstr(y, eat[0], np, &rname) != RL_OK)
        ;
    else if (rname == NULL || *rname == '\0')
        ybad(y, e, np, "should not have an empty replaces entry");
    else if (own != NULL && strcmp(rname, own) == 0)
        ybad(y, e, np, "replaces should not contain name of same descriptor");
    else
        ok = RL_OK;
    if (ok == RL_OK)
        push_name(y, &r->replaces, &r->nreplaces, rname);
    free(np);
    return ok;
}

/* replaces: [{name: x}] */
static int
limit_replaces(struct yload *y, const struct ynode *seq, const char *path, const char *own,
               struct rls_rule *r)
{
    char *fp;
    int ok = RL_OK;

    if (is_null(y, seq))
        return RL_OK;
    fp = join(path, l_names[L_REPLACES]);
    if (seq->kind != YT_SEQ) {
        ybad(y, seq, fp, "must be a list of {name: NAME}");
        ok = RL_ERR;
    }
    for (size_t i = 0; seq->kind == YT_SEQ && i < seq->n; i++) {
        char *ip = xasprintf("%s[%zu]", fp, i);
        if (limit_replace(y, ytree_item(y->tree, seq, i), ip, own, r) != RL_OK)
            ok = RL_ERR;
        free(ip);
    }
    free(fp);
    return ok;
}

/* The limit check.c decides and what the answer reports of it. */
static void
limit_build(struct yload *y, const struct limit_in *in, struct rl_limit *lim,
            struct rls_rule_limit *rl)
{
    lim->algo = (enum rl_algo)in->algo;
    lim->window_ms = in->window != 0 ? in->window : rls_unit_ms((enum rls_unit)in->unit);
    lim->limit = (int64_t)in->requests;
    lim->align = lim->algo == RL_ALGO_FIXED_WINDOW ? (enum rl_align)in->align : RL_ALIGN_FIRST;
    lim->burst = (int64_t)in->burst;
    rl->unit = (enum rls_unit)in->unit;
    rl->requests_per_unit = in->requests;
    rl->name = in->name != NULL ? mem_str(y, in->name, strlen(in->name)) : NULL;
    rl->unit_form = in->window == 0 && lim->algo == RL_ALGO_FIXED_WINDOW &&
                    lim->align == RL_ALIGN_EPOCH;
    if (in->window != 0)
        for (int u = RLS_UNIT_SECOND; u < RLS_UNIT_COUNT; u++)
            if (rls_unit_ms((enum rls_unit)u) == in->window)
                rl->unit = (enum rls_unit)u;
}

/* What a limit's algorithm allows of its burst, align and size. */
static int
limit_check(struct yload *y, const struct ynode *m, const struct ynode **at, const char *path,
            struct rl_limit *lim)
{
    const char *why, *field;

    if (at[L_ALIGN] != NULL && lim->algo != RL_ALGO_FIXED_WINDOW) {
        ybad(y, at[L_ALIGN], path, "align: only fixed_window has windows to align");
        return RL_ERR;
    }
    if ((why = algo_limit_problem(lim, &field)) != NULL) {
        ybad(y, at[L_BURST] ? at[L_BURST] : m, path, "%s: %s", field, why);
        return RL_ERR;
    }
    /* the log holds an entry per allowed hit (policy.c says the same) */
    if (lim->algo == RL_ALGO_SLIDING_WINDOW_LOG && lim->limit > 1000000000) {
        ybad(
            y, at[L_REQUESTS], path,
            "requests_per_unit: at most 1000000000 with sliding_window_log: it keeps an entry "
            "per hit (its memory); a larger budget takes sliding_window_counter");
        return RL_ERR;
    }
    if (lim->burst == 0)
        lim->burst = lim->limit;
    return RL_OK;
}

/* unlimited: true counts nothing (requests_per_unit is ignored, as
 * envoyproxy/ratelimit ignores it). */
static int
limit_unlimited(struct yload *y, const struct ynode *m, const struct ynode **keys,
                const char *path, const struct limit_in *in, struct rls_rule *r)
{
    r->unlimited = 1;
    if (in->name != NULL)
        push_name(y, &r->names, &r->nnames, in->name);
    if (keys[L_WINDOW] || keys[L_ALGORITHM] || keys[L_BURST] || keys[L_ALIGN]) {
        ybad(y, m, path,
             "an unlimited rate limit counts nothing: no window, algorithm, burst or align");
        return RL_ERR;
    }
    return RL_OK;
}

/* The limit a rule's policy needs of rate limit `m` (a mapping) at path. */
static int
load_limit(struct yload *y, const struct ynode *m, const char *path, int in_list,
           struct rls_rule *r, struct rl_limit *lim, struct rls_rule_limit *rl)
{
    const struct ynode *at[L_COUNT], *keys[L_COUNT];
    struct limit_in in = {.algo = RL_ALGO_FIXED_WINDOW, .align = RL_ALIGN_EPOCH};
    int ok = yfields(y, m, path, l_names, L_COUNT, at, keys, L_HINT);

    memset(lim, 0, sizeof(*lim));
    memset(rl, 0, sizeof(*rl));
    if (limit_scalars(y, at, keys, path, in_list, &in) != RL_OK)
        ok = RL_ERR;
    if (limit_unit(y, at[L_UNIT], path, &in) != RL_OK)
        ok = RL_ERR;
    if (limit_replaces(y, at[L_REPLACES], path, in.name, r) != RL_OK)
        ok = RL_ERR;
    if (in.unlimited)
        return limit_unlimited(y, m, keys, path, &in, r) != RL_OK ? RL_ERR : ok;
    if (in.unit != RLS_UNIT_UNKNOWN && in.window != 0) {
        ybad(y, m, path, "give unit or window, not both");
        return RL_ERR;
    }
    if (in.unit == RLS_UNIT_UNKNOWN && in.window == 0) {
        if (ok == RL_OK && is_null(y, at[L_UNIT]))
            ybad(y, m, path,
                 "invalid rate limit unit '': give unit (second, minute, hour, day, week, "
                 "month, year), window, or unlimited: true");
        return RL_ERR;
    }
    if (ok != RL_OK)
        return RL_ERR;
    limit_build(y, &in, lim, rl);
    if (in.name != NULL)
        push_name(y, &r->names, &r->nnames, in.name);
    return limit_check(y, m, at, path, lim);
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
    struct rl_policy *p = mem_zalloc(y, sizeof(*p));

    /* its name is what the RateLimit headers and logs show; its keys are
     * named by rls.c */
    p->name = r->nnames > 0 && valid_policy_name(r->names[0]) ? r->names[0] : y->rls_name;
    p->limits = arena_alloc(y->mem, n * sizeof(*lims));
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
level_label(struct yload *y, const struct rls_rule *r, const char *parent)
{
    const char *sep = parent != NULL ? "." : "";
    int n;
    char *s;

    if (parent == NULL)
        parent = "";
    if (r->value.p == NULL)
        n = snprintf(NULL, 0, "%s%s%.*s", parent, sep, (int)r->key.len, r->key.p);
    else
        n = snprintf(NULL, 0, "%s%s%.*s_%.*s", parent, sep, (int)r->key.len, r->key.p,
                     (int)r->value.len, r->value.p);
    s = arena_alloc(y->mem, (size_t)n + 1);
    if (r->value.p == NULL)
        snprintf(s, (size_t)n + 1, "%s%s%.*s", parent, sep, (int)r->key.len, r->key.p);
    else
        snprintf(s, (size_t)n + 1, "%s%s%.*s_%.*s", parent, sep, (int)r->key.len, r->key.p,
                 (int)r->value.len, r->value.p);
    return s;
}

/* A value with '*' cut into its literal runs. */
static void
split_glob(struct yload *y, struct rls_rule *r)
{
    size_t n = 1;

    for (size_t i = 0; i < r->value.len; i++)
        n += r->value.p[i] == '*';
    r->parts = mem_zalloc(y, n * sizeof(*r->parts));
    r->nparts = 0;
    for (size_t s = 0, i = 0; i <= r->value.len; i++) {
        if (i == r->value.len || r->value.p[i] == '*') {
            r->parts[r->nparts].p = r->value.p + s;
            r->parts[r->nparts++].len = i - s;
            s = i + 1;
        }
    }
}

static int load_descriptors(struct yload *y, const struct ynode *seq, const char *path,
                            struct rls_node *into, struct rls_rule *parent, size_t depth);

/* rate_limit: one limit (or unlimited); into lims[0] and r->limits[0]. */
static int
rule_limit(struct yload *y, const struct ynode *m, const char *path, struct rls_rule *r,
           struct rl_limit *lims, size_t *n)
{
    char *fp = join(path, "rate_limit");
    int ok = RL_ERR;

    r->has_limit = 1;
    r->limits = mem_zalloc(y, sizeof(*r->limits));
    if (m->kind != YT_MAP)
        ybad(y, m, fp, "must be a mapping (unit, requests_per_unit, ...)");
    else
        ok = load_limit(y, m, fp, 0, r, &lims[0], &r->limits[0]);
    if (ok == RL_OK && !r->unlimited)
        *n = r->nlimits = 1;
    free(fp);
    return ok;
}

/* Whether limit n of a list shares its counter with an earlier one. */
static int
limit_twin(struct yload *y, const struct ynode *m, const char *ip, const struct rl_limit *lims,
           size_t n)
{
    int ok = RL_OK;

    for (size_t j = 0; j < n; j++) {
        if (lims[j].algo == lims[n].algo && lims[j].window_ms == lims[n].window_ms) {
            ybad(y, m, ip,
                 "same algorithm and window as rate_limits[%zu]: they would share "
                 "one counter",
                 j);
            ok = RL_ERR;
        }
    }
    return ok;
}

/* rate_limits: a list of 1..RL_LIMITS_MAX limits, decided together. */
static int
rule_limit_list(struct yload *y, const struct ynode *seq, const char *path, struct rls_rule *r,
                struct rl_limit *lims, size_t *n)
{
    char *fp = join(path, "rate_limits");
    size_t cnt = seq->kind == YT_SEQ ? seq->n : 0;
    int ok = RL_OK;

    r->has_limit = 1;
    if (cnt == 0 || cnt > RL_LIMITS_MAX) {
        ybad(y, seq, fp, "must be a list of 1..%d rate limits", RL_LIMITS_MAX);
        free(fp);
        return RL_ERR;
    }
    r->limits = mem_zalloc(y, cnt * sizeof(*r->limits));
    for (size_t i = 0; i < cnt; i++) {
        const struct ynode *m = ytree_item(y->tree, seq, i);
        char *ip = xasprintf("%s[%zu]", fp, i);
        if (m->kind != YT_MAP) {
            ybad(y, m, ip, "must be a mapping (unit, requests_per_unit, ...)");
            ok = RL_ERR;
        } else if (load_limit(y, m, ip, 1, r, &lims[*n], &r->limits[*n]) != RL_OK) {
            ok = RL_ERR;
        } else {
            if (limit_twin(y, m, ip, lims, *n) != RL_OK)
                ok = RL_ERR;
            ++*n;
        }
        free(ip);
    }
    r->nlimits = *n;
    free(fp);
    return ok;
}

/* The limits of rule r: rate_limit (one) or rate_limits (a list). */
static int
load_rule_limits(struct yload *y, const struct ynode **at, const char *path,
                 struct rls_rule *r, int mode, int64_t sync_ms)
{
    struct rl_limit lims[RL_LIMITS_MAX];
    size_t n = 0;
    int ok = RL_OK;

    if (!is_null(y, at[D_RATE_LIMIT]) && !is_null(y, at[D_RATE_LIMITS])) {
        ybad(y, at[D_RATE_LIMITS], path, "give rate_limit or rate_limits, not both");
        return RL_ERR;
    }
    if (!is_null(y, at[D_RATE_LIMIT]))
        ok = rule_limit(y, at[D_RATE_LIMIT], path, r, lims, &n);
    else if (!is_null(y, at[D_RATE_LIMITS]))
        ok = rule_limit_list(y, at[D_RATE_LIMITS], path, r, lims, &n);
    if (ok != RL_OK)
        return RL_ERR;
    for (size_t i = 0; i < n; i++)
        if (lims[i].limit == 0 && r->zero == 0)
            r->zero = i + 1;
    if (n > 0)
        make_policy(y, r, lims, n, mode, sync_ms);
    /* unsaid: every hit counts when each limit is one envoyproxy/ratelimit
     * could write (rls.c decides it with rls.all_or_nothing) */
    if (!r->count_set) {
        r->count_over = n > 0;
        for (size_t i = 0; i < n; i++)
            r->count_over &= (uint8_t)r->limits[i].unit_form;
    }
    return RL_OK;
}

/* A rule's scalar fields but key and value. */
static int
rule_flags(struct yload *y, const struct ynode **at, const char *path, struct rls_rule *r,
           int *mode, int64_t *sync_ms)
{
    static const char *const mode_names[] = {"exact", "hybrid"};
    int shadow = 0, quota = 0, detailed = 0, to_metric = 0, share = 0, over = 0;
    int ok = RL_OK;
    char *fp;

#define FIELD(i, call) \
    do { \
        fp = at[i] != NULL ? join(path, d_names[i]) : NULL; \
        if ((call) != RL_OK) \
            ok = RL_ERR; \
        free(fp); \
    } while (0)
    FIELD(D_SHADOW_MODE, get_bool(y, at[D_SHADOW_MODE], fp, &shadow));
    FIELD(D_QUOTA_MODE, get_bool(y, at[D_QUOTA_MODE], fp, &quota));
    FIELD(D_DETAILED_METRIC, get_bool(y, at[D_DETAILED_METRIC], fp, &detailed));
    FIELD(D_VALUE_TO_METRIC, get_bool(y, at[D_VALUE_TO_METRIC], fp, &to_metric));
    FIELD(D_SHARE_THRESHOLD, get_bool(y, at[D_SHARE_THRESHOLD], fp, &share));
    if (at[D_MODE] != NULL)
        FIELD(D_MODE,
              get_enum(y, at[D_MODE], fp, mode_names, 2, 0, "must be exact or hybrid", mode));
    FIELD(D_SYNC_INTERVAL, yduration(y, at[D_SYNC_INTERVAL], fp, 10, 60000, sync_ms));
    FIELD(D_COUNT_OVER_LIMIT, get_bool(y, at[D_COUNT_OVER_LIMIT], fp, &over));
#undef FIELD
    r->count_set = !is_null(y, at[D_COUNT_OVER_LIMIT]);
    r->count_over = (uint8_t)over;
    r->shadow_mode = (uint8_t)shadow;
    r->quota_mode = (uint8_t)quota;
    r->detailed_metric = (uint8_t)detailed;
    r->value_to_metric = (uint8_t)to_metric;
    r->share_threshold = (uint8_t)share;
    return ok;
}

/* key and value as written. */
static int
rule_strs(struct yload *y, const struct ynode **at, const char *path, struct rls_str *key,
          struct rls_str *value)
{
    int ok = RL_OK;
    char *fp;

    fp = at[D_KEY] != NULL ? join(path, d_names[D_KEY]) : NULL;
    if (get_str(y, at[D_KEY], fp, key) != RL_OK)
        ok = RL_ERR;
    free(fp);
    fp = at[D_VALUE] != NULL ? join(path, d_names[D_VALUE]) : NULL;
    if (get_str(y, at[D_VALUE], fp, value) != RL_OK)
        ok = RL_ERR;
    free(fp);
    return ok;
}

/* key (required) and value (a literal or a glob) kept by rule r. */
static int
rule_key_value(struct yload *y, const struct ynode *m, const struct ynode **keys,
               const char *path, struct rls_rule *r, struct rls_str key, struct rls_str value)
{
    int ok = RL_OK;

    if (key.p == NULL || key.len == 0) {
        ybad(y, m, path, "descriptor has empty key");
        ok = RL_ERR;
    } else {
        r->key = keep_str(y, key);
    }
    /* an empty value is none, as envoyproxy/ratelimit reads it */
    if (value.p != NULL && value.len > 0) {
        r->value = keep_str(y, value);
        if (memchr(value.p, '*', value.len) != NULL)
            split_glob(y, r);
    }
    if (r->share_threshold && r->parts == NULL) {
        ybad(y, keys[D_SHARE_THRESHOLD], path,
             "share_threshold can only be used with wildcard values (containing '*')");
        ok = RL_ERR;
    }
    return ok;
}

/* Its metrics name, and whether a request's values go in instead. */
static void
rule_label(struct yload *y, struct rls_rule *r, const struct rls_rule *parent)
{
    const struct rls_rule *p;

    if (r->key.p == NULL)
        return;
    r->label = level_label(y, r, parent != NULL ? parent->label : NULL);
    for (p = r; p != NULL; p = p->parent)
        if (p->value_to_metric)
            break;
    r->dynamic_label = r->detailed_metric || p != NULL;
}

/* Its nested descriptors, at most RLS_DEPTH_MAX deep. */
static int
rule_nested(struct yload *y, const struct ynode *seq, const char *path, struct rls_rule *r,
            size_t depth)
{
    char *np = join(path, "descriptors");
    int ok = RL_ERR;

    if (depth + 1 >= RLS_DEPTH_MAX) {
        ybad(y, seq, np, "descriptors nested deeper than %d levels", RLS_DEPTH_MAX);
    } else {
        r->node = mem_zalloc(y, sizeof(*r->node));
        ok = load_descriptors(y, seq, np, r->node, r, depth + 1);
    }
    free(np);
    return ok;
}

/* One descriptor of the file into r (zeroed), at path.  metadata (Envoy's
 * dynamic metadata for a response; any YAML) is read by nobody here: the
 * reader skipped it. */
static int
load_rule(struct yload *y, const struct ynode *m, const char *path, struct rls_rule *r,
          struct rls_rule *parent, size_t depth)
{
    const struct ynode *at[D_COUNT], *keys[D_COUNT];
    int ok = yfields(y, m, path, d_names, D_COUNT, at, keys, D_HINT);
    struct rls_str key, value;
    int mode = RL_MODE_EXACT;
    int64_t sync_ms = 0;

    r->line = m->line;
    r->parent = parent;
    r->domain = y->domain;
    r->stat_id = -1;
    if (rule_strs(y, at, path, &key, &value) != RL_OK)
        ok = RL_ERR;
    if (rule_flags(y, at, path, r, &mode, &sync_ms) != RL_OK)
        ok = RL_ERR;
    if (rule_key_value(y, m, keys, path, r, key, value) != RL_OK)
        ok = RL_ERR;
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
    rule_label(y, r, parent);
    if (++*y->nrules > RLS_RULES_MAX) {
        if (*y->nrules == RLS_RULES_MAX + 1)
            ybad(y, m, path, "more than %d rules", RLS_RULES_MAX);
        return RL_ERR;
    }
    if (!is_null(y, at[D_DESCRIPTORS]) &&
        rule_nested(y, at[D_DESCRIPTORS], path, r, depth) != RL_OK)
        ok = RL_ERR;
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
    size_t nexact = 0, nbykey = 0, nwild = 0;
    struct rls_rule **wild;
    int ok;

    for (size_t i = 0; i < n->nrules; i++) {
        const struct rls_rule *r = &n->rules[i];
        if (r->key.p != NULL)
            *(r->value.p == NULL ? &nbykey : r->parts == NULL ? &nexact : &nwild) += 1;
    }
    n->exact = arena_alloc(y->mem, (nexact + 1) * sizeof(*n->exact));
    n->bykey = arena_alloc(y->mem, (nbykey + 1) * sizeof(*n->bykey));
    n->wild = arena_alloc(y->mem, (nwild + 1) * sizeof(*n->wild));
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
    /* globs stay in file order (the first that matches answers): their
     * twins are found in a sorted copy */
    wild = xmalloc((n->nwild + 1) * sizeof(*wild));
    memcpy(wild, n->wild, n->nwild * sizeof(*wild));
    qsort(wild, n->nwild, sizeof(*wild), cmp_exact);
    if (report_twins(y, wild, n->nwild, cmp_exact, path) != RL_OK)
        ok = RL_ERR;
    free(wild);
    return ok;
}

static int
load_descriptors(struct yload *y, const struct ynode *seq, const char *path,
                 struct rls_node *into, struct rls_rule *parent, size_t depth)
{
    int ok = RL_OK;

    if (seq->kind != YT_SEQ) {
        ybad(y, seq, path, "must be a list of descriptors (key, value, rate_limit, ...)");
        return RL_ERR;
    }
    into->rules = mem_zalloc(y, seq->n * sizeof(*into->rules));
    for (size_t i = 0; i < seq->n && *y->nrules <= RLS_RULES_MAX; i++) {
        const struct ytree *own = y->tree;
        const struct ynode *m = NULL;
        const char *cause = NULL;
        char *ip = xasprintf("%s[%zu]", path, i);

        if (depth == 0 && y->item != NULL) {
            y->tree = y->item(y->item_arg, i, &cause);
            if (y->tree != NULL)
                m = ytree_node(y->tree, y->tree->root);
        } else {
            m = ytree_item(y->tree, seq, i);
        }
        if (m == NULL) {
            errors_add(y->errs, "%s: %s: %s", y->file, ip, cause);
            ok = RL_ERR;
        } else if (m->kind != YT_MAP) {
            ybad(y, m, ip, "must be a mapping (key, value, rate_limit, ...), not a %s",
                 m->kind == YT_SEQ ? "list" : "scalar");
            ok = RL_ERR;
        } else if (load_rule(y, m, ip, &into->rules[into->nrules++], parent, depth) != RL_OK) {
            ok = RL_ERR;
        }
        y->tree = own;
        free(ip);
    }
    if (*y->nrules > RLS_RULES_MAX)
        return RL_ERR;
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
    const struct ynode *root, *at[T_COUNT], *keys[T_COUNT];
    struct rls_str name;
    int ok;

    root = y->tree->has_root ? ytree_node(y->tree, y->tree->root) : NULL;
    if (root == NULL || is_null(y, root)) {
        ybad(y, root, "", "config file cannot have empty domain: it is empty");
        return RL_ERR;
    }
    if (root->kind != YT_MAP) {
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
        d->name = keep_str(y, name);
    }
    d->file = mem_str(y, y->file, strlen(y->file));
    y->domain = d;
    if (!is_null(y, at[T_DESCRIPTORS]) &&
        load_descriptors(y, at[T_DESCRIPTORS], "descriptors", &d->node, NULL, 0) != RL_OK)
        ok = RL_ERR;
    if (d->node.exact == NULL)
        (void)index_node(y, &d->node, "descriptors");
    return ok;
}

struct loading {
    struct rls_rules *r;
    size_t cap;
    uint64_t (*new_uid)(void);
    struct rl_errors *errs;
    char *rls_name;
    struct ytree tree; /* one document at a time, its memory reused */
    /* directories entered, by (device, inode): each is walked once */
    struct {
        dev_t dev;
        ino_t ino;
    } * dirs;
    size_t ndirs, capdirs;
};

/* Whether the value of key k is read: a descriptor's metadata (Envoy's, any
 * YAML, used by nobody here) is skipped as it is read, never kept.  Other
 * values are kept even under a key that is a problem: an anchor there may
 * be named later. */
static bool
wanted(const char *k, size_t len)
{
    return !(len == strlen(d_names[D_METADATA]) && memcmp(k, d_names[D_METADATA], len) == 0);
}

static const struct ytree_bounds bounds = {RLS_YAML_DEPTH_MAX, RLS_YAML_NODES_MAX, wanted};

/* The next document of the file into l->tree; its problem added. */
static int
read_doc(struct loading *l, yaml_parser_t *p, const char *file)
{
    char *cause;
    size_t line, column;

    if (ytree_read(p, &bounds, &l->tree, &cause, &line, &column) == RL_OK)
        return RL_OK;
    errors_add(l->errs, "%s:%zu:%zu: %s", file, line, column, cause);
    free(cause);
    return RL_ERR;
}

/* A stream of several documents: the rest must be empty (envoyproxy/ratelimit
 * would read only the first). */
static int
rest_empty(struct loading *l, struct yload *y, yaml_parser_t *p)
{
    for (;;) {
        const struct ynode *root;

        if (read_doc(l, p, y->file) != RL_OK)
            return RL_ERR;
        if (!l->tree.has_root)
            return RL_OK;
        root = ytree_node(&l->tree, l->tree.root);
        if (!is_null(y, root)) {
            errors_add(l->errs,
                       "%s:%zu: a second YAML document: put each domain in a file of its own "
                       "(envoyproxy/ratelimit would read only the first)",
                       y->file, (size_t)root->line);
            return RL_ERR;
        }
    }
}

/* A rule file as the parser asks for it: hashed as it is read, never
 * held whole. */
struct file_in {
    FILE *f;
    size_t n;
    uint64_t hash;
};

static int
read_some(void *data, unsigned char *buf, size_t size, size_t *got)
{
    struct file_in *in = data;

    *got = fread(buf, 1, size, in->f);
    if (*got == 0 && ferror(in->f))
        return 0;
    /* a file that grew past its bound since it was measured */
    in->n += *got;
    if (in->n > RLS_FILE_MAX)
        return 0;
    in->hash = fnv1a(in->hash, (const char *)buf, *got);
    return 1;
}

/* The rules of one file into *d (zeroed). */
static int
parse_file(struct loading *l, const char *file, struct file_in *in, struct rls_domain *d)
{
    yaml_parser_t parser;
    struct yload y = {.file = file,
                      .tree = &l->tree,
                      .errs = l->errs,
                      .mem = &l->r->mem,
                      .rls_name = l->rls_name,
                      .nrules = &l->r->nrules,
                      .new_uid = l->new_uid};
    int ok;

    if (!yaml_parser_initialize(&parser)) {
        errors_add(l->errs, "%s: cannot start the YAML parser", file);
        return RL_ERR;
    }
    yaml_parser_set_input(&parser, read_some, in);
    ok = read_doc(l, &parser, file);
    if (ok == RL_OK)
        ok = load_doc(&y, d);
    if (ok == RL_OK)
        ok = rest_empty(l, &y, &parser);
    yaml_parser_delete(&parser);
    return ok;
}

/* The file opened and measured: at most RLS_FILE_MAX bytes. */
static int
open_rules(struct loading *l, const char *file, struct file_in *in)
{
    struct stat st;

    if ((in->f = fopen(file, "rb")) == NULL || fstat(fileno(in->f), &st) != 0) {
        errors_add(l->errs, "%s: %s", file, strerror(errno));
        if (in->f != NULL)
            fclose(in->f);
        return RL_ERR;
    }
    if (st.st_size > RLS_FILE_MAX) {
        errors_add(l->errs, "%s: larger than %d bytes", file, RLS_FILE_MAX);
        fclose(in->f);
        return RL_ERR;
    }
    return RL_OK;
}

/* A domain that another file has already is a problem. */
static int
domain_unique(struct loading *l, const char *file, const struct rls_domain *d)
{
    int ok = RL_OK;

    for (size_t i = 0; d->name.p != NULL && i < l->r->ndomains; i++) {
        if (cmp_str(l->r->domains[i].name, d->name) == 0) {
            errors_add(l->errs, "%s: domain: duplicate domain '%s' in config file (%s has it)",
                       file, d->name.p, l->r->domains[i].file);
            ok = RL_ERR;
        }
    }
    return ok;
}

/* A domain loaded: one of the set, unless another has its name. */
static int
add_domain(struct loading *l, const char *file, const struct rls_domain *d)
{
    if (domain_unique(l, file, d) != RL_OK)
        return RL_ERR;
    if (l->r->ndomains == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->r->domains = xrealloc(l->r->domains, l->cap * sizeof(*l->r->domains));
    }
    l->r->domains[l->r->ndomains++] = *d;
    return RL_OK;
}

/* A file of the set: its first document is its domain; further documents
 * must be empty.  What a file that fails kept stays in the set's memory
 * until the load ends (failed). */
static int
load_file(struct loading *l, const char *file)
{
    struct rls_domain d;
    struct file_in in = {0};
    int ok;

    if (l->r->nfiles >= RLS_FILES_MAX) {
        errors_add(l->errs, "%s: more than %d rule files", file, RLS_FILES_MAX);
        return RL_ERR;
    }
    if (open_rules(l, file, &in) != RL_OK)
        return RL_ERR;
    l->r->nfiles++;
    in.hash = fnv1a(l->r->hash, file, strlen(file) + 1);
    memset(&d, 0, sizeof(d));
    ok = parse_file(l, file, &in, &d);
    fclose(in.f);
    l->r->hash = in.hash;
    if (ok != RL_OK)
        return RL_ERR;
    return add_domain(l, file, &d);
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

/* Whether dir (st) was entered already: a symlink loop, or a second link
 * to one directory, is a problem named once per link, never walked. */
static bool
dir_seen(struct loading *l, const char *dir, const struct stat *st)
{
    for (size_t i = 0; i < l->ndirs; i++) {
        if (l->dirs[i].dev == st->st_dev && l->dirs[i].ino == st->st_ino) {
            errors_add(l->errs,
                       "%s: a directory read already (a symlink loop, or a second "
                       "link to it): not read again",
                       dir);
            return true;
        }
    }
    if (l->ndirs == l->capdirs) {
        l->capdirs = l->capdirs ? 2 * l->capdirs : 16;
        l->dirs = xrealloc(l->dirs, l->capdirs * sizeof(*l->dirs));
    }
    l->dirs[l->ndirs].dev = st->st_dev;
    l->dirs[l->ndirs].ino = st->st_ino;
    l->ndirs++;
    return false;
}

/* The names of dir's entries, but those starting with '.', sorted; at most
 * RLS_FILES_MAX + 1 of them. */
static int
dir_names(struct loading *l, const char *dir, char ***out, size_t *n)
{
    DIR *dp;
    struct dirent *de;
    char **names = NULL;
    size_t cap = 0;

    *out = NULL;
    *n = 0;
    if ((dp = opendir(dir)) == NULL) {
        errors_add(l->errs, "%s: %s", dir, strerror(errno));
        return RL_ERR;
    }
    while ((de = readdir(dp)) != NULL && *n <= RLS_FILES_MAX) {
        if (de->d_name[0] == '.')
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            names = xrealloc(names, cap * sizeof(*names));
        }
        names[(*n)++] = xstrdup(de->d_name);
    }
    closedir(dp);
    qsort(names, *n, sizeof(*names), cmp_names);
    *out = names;
    return RL_OK;
}

static int load_dir(struct loading *l, const char *dir, const struct stat *st, int depth);

/* Entry `name` of dir: a rule file on pass 0, a directory on pass 1. */
static int
dir_entry(struct loading *l, const char *dir, const char *name, int pass, int depth)
{
    char *path = xasprintf("%s/%s", dir, name);
    struct stat st;
    int ok = RL_OK;

    if (stat(path, &st) != 0) {
        /* a dangling link of a ConfigMap being swapped: say so */
        errors_add(l->errs, "%s: %s", path, strerror(errno));
        ok = RL_ERR;
    } else if (pass == 0 && S_ISREG(st.st_mode) && yaml_name(name)) {
        ok = load_file(l, path);
    } else if (pass == 1 && S_ISDIR(st.st_mode)) {
        ok = load_dir(l, path, &st, depth + 1);
    }
    free(path);
    return ok;
}

/* The *.yaml / *.yml files of dir, in name order, subdirectories after
 * the files of theirs; names starting with '.' are skipped (a ConfigMap's
 * ..data and timestamped directories); each directory is read once. */
static int
load_dir(struct loading *l, const char *dir, const struct stat *st, int depth)
{
    char **names;
    size_t n;
    int ok = RL_OK;

    if (depth > DIR_DEPTH_MAX) {
        errors_add(l->errs, "%s: directories nested deeper than %d levels", dir,
                   DIR_DEPTH_MAX);
        return RL_ERR;
    }
    if (dir_seen(l, dir, st))
        return RL_ERR;
    if (dir_names(l, dir, &names, &n) != RL_OK)
        return RL_ERR;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            if (dir_entry(l, dir, names[i], pass, depth) != RL_OK)
                ok = RL_ERR;
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

/* A rule set being loaded: its memory, and the policy name of rules. */
static void
loading_start(struct loading *l)
{
    l->r = xcalloc(1, sizeof(*l->r));
    l->r->hash = FNV1A_INIT;
    l->r->refs = 1;
    /* strings, rules, limits and policies of the whole set, freed at once */
    arena_init(&l->r->mem, 64 * 1024, 0);
    l->rls_name = arena_alloc(&l->r->mem, 4);
    memcpy(l->rls_name, "rls", 4);
}

/* The set loaded: *out, or NULL and freed when a problem was added. */
static int
loading_end(struct loading *l, size_t before, struct rls_rules **out)
{
    ytree_free(&l->tree);
    free(l->dirs);
    if (l->errs->total != before) {
        rls_rules_free(l->r);
        return RL_ERR;
    }
    if (l->r->ndomains > 0) /* none: domains is NULL, which qsort may not be given */
        qsort(l->r->domains, l->r->ndomains, sizeof(*l->r->domains), cmp_domain);
    *out = l->r;
    return RL_OK;
}

int
rls_rules_load(const char *where, uint64_t (*new_uid)(void), struct rls_rules **out,
               struct rl_errors *errs)
{
    struct loading l = {.new_uid = new_uid, .errs = errs};
    size_t before = errs->total;
    struct stat st;

    *out = NULL;
    loading_start(&l);
    if (stat(where, &st) != 0)
        errors_add(errs, "%s: %s", where, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        (void)load_dir(&l, where, &st, 0);
    else
        (void)load_file(&l, where);
    return loading_end(&l, before, out);
}

int
rls_rules_from_docs(const struct rls_doc *docs, size_t n, uint64_t (*new_uid)(void),
                    struct rls_rules **out, struct rl_errors *errs)
{
    struct loading l = {.new_uid = new_uid, .errs = errs};
    size_t before = errs->total;

    *out = NULL;
    loading_start(&l);
    for (size_t i = 0; i < n; i++) {
        struct yload y = {.file = docs[i].name,
                          .tree = docs[i].tree,
                          .errs = errs,
                          .mem = &l.r->mem,
                          .rls_name = l.rls_name,
                          .nrules = &l.r->nrules,
                          .new_uid = new_uid,
                          .item = docs[i].item,
                          .item_arg = docs[i].item_arg};
        struct rls_domain d;

        memset(&d, 0, sizeof(d));
        l.r->hash = fnv1a(l.r->hash, docs[i].name, strlen(docs[i].name) + 1);
        if (docs[i].src != NULL)
            l.r->hash = fnv1a(l.r->hash, docs[i].src, docs[i].src_len);
        if (load_doc(&y, &d) == RL_OK)
            (void)add_domain(&l, docs[i].name, &d);
    }
    l.r->nfiles = n;
    return loading_end(&l, before, out);
}

struct rls_rules *
rls_rules_ref(struct rls_rules *r)
{
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
    return r;
}

void
rls_rules_free(struct rls_rules *r)
{
    if (r == NULL || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(r->domains);
    arena_free(&r->mem);
    free(r);
}

static void
set_ids(struct rls_node *n, int id)
{
    for (size_t i = 0; i < n->nrules; i++) {
        if (n->rules[i].policy != NULL)
            n->rules[i].policy->metrics_id = id;
        if (n->rules[i].node != NULL)
            set_ids(n->rules[i].node, id);
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

static const struct rls_rule *
node_by_label(const struct rls_node *n, const char *label, size_t len, int stat_id)
{
    for (size_t i = 0; i < n->nrules; i++) {
        const struct rls_rule *r = &n->rules[i], *found;
        int id = __atomic_load_n(&r->stat_id, __ATOMIC_RELAXED);

        if (r->has_limit && !r->dynamic_label && r->label != NULL &&
            (id >= 0 ? id == stat_id
                     : strlen(r->label) == len && memcmp(r->label, label, len) == 0))
            return r;
        if (r->node != NULL && (found = node_by_label(r->node, label, len, stat_id)) != NULL)
            return found;
    }
    return NULL;
}

const struct rls_rule *
rls_rules_by_label(const struct rls_domain *d, const char *label, size_t len, int stat_id)
{
    return d != NULL ? node_by_label(&d->node, label, len, stat_id) : NULL;
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
        if (next->node == NULL || next->node->nrules == 0)
            break;
        at = next->node;
    }
    return found;
}
