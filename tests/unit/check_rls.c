/*
 * check_rls.c — rls_start's semantics, envoyproxy/ratelimit's where it has
 * them, with the real rule loader, check.c and the memory backend (which
 * answers before rls_start returns): one status per descriptor in order,
 * the overall code, unknown domains and unmatched descriptors, hits_addend
 * of the request and of a descriptor, a descriptor's own limit, unlimited,
 * replaces, shadow_mode (the rule's and rls.shadow_mode), quota_mode, a
 * limit of 0, rate_limits decided atomically, the windows' ends on the
 * clock, failure_mode, the RateLimit headers, and the counts of
 * ratelimitd_rls_* as envoyproxy/ratelimit counts them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>


#include "backend.h"
#include "check.h"
#include "config.h"
#include "deny_cache.h"
#include "identity.h"
#include "metrics.h"
#include "rls.h"
#include "util.h"
#include "../testutil_core.h"
#include "unit.h"
#include "gen.h"

static const char rules_yaml[] =
    "domain: test-domain\n"
    "descriptors:\n"
    "  - key: key1\n"
    "    value: value1\n"
    "    descriptors:\n"
    "      - {key: subkey1, rate_limit: {unit: day, requests_per_unit: 5}}\n"
    "  - {key: key2, rate_limit: {unit: day, requests_per_unit: 20}}\n"
    "  - {key: key2, value: value2, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
    "  - {key: key2, value: value3}\n"
    "  - {key: free, rate_limit: {unlimited: true, name: free}}\n"
    "  - {key: blocked, rate_limit: {unit: hour}}\n"
    "  - {key: ten, rate_limit: {unit: day, requests_per_unit: 10}}\n"
    "  - {key: shadow, shadow_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}\n"
    "  - {key: quota1, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}\n"
    "  - {key: quota2, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}\n"
    "  - {key: wide, rate_limit: {unit: day, requests_per_unit: 9, name: wide}}\n"
    "  - {key: narrow, rate_limit: {unit: day, requests_per_unit: 2, name: narrow,\n"
    "                               replaces: [{name: wide}]}}\n"
    "  - {key: path, value: /api/*, rate_limit: {unit: day, requests_per_unit: 2}}\n"
    "  - {key: path, value: /s/*, share_threshold: true,\n"
    "     rate_limit: {unit: day, requests_per_unit: 2}}\n"
    "  - {key: pair, rate_limits: [{unit: day, requests_per_unit: 5},\n"
    "                              {algorithm: sliding_window_log, unit: hour,\n"
    "                               requests_per_unit: 2, name: hourly}]}\n"
    "  - {key: minute, rate_limit: {unit: minute, requests_per_unit: 100}}\n"
    "  - {key: user, detailed_metric: true, rate_limit: {unit: day, requests_per_unit: 5}}\n"
    "  - {key: charged, count_over_limit: true,\n"
    "     rate_limit: {algorithm: token_bucket, window: 1d, requests_per_unit: 2}}\n"
    "  - {key: spared, count_over_limit: false, rate_limit: {unit: day, requests_per_unit: 2}}\n";

struct fx {
    struct rl_backend *mem;
    struct rl_metrics *m;
    struct rl_check_env env;
    struct rl_config *cfg;
    char dir[64];
};

static void
fx_open(struct fx *f, const char *extra)
{
    char path[128], json[512];
    struct rl_errors errs = {0};
    FILE *out;

    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/rl-rls-unit-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(path, sizeof(path), "%s/rules.yaml", f->dir);
    out = fopen(path, "w");
    fputs(rules_yaml, out);
    fclose(out);
    snprintf(json, sizeof(json), "{\"rls\": {\"config\": \"%s\"%s%s}}", path, extra ? ", " : "",
             extra ? extra : "");
    f->cfg = tu_config(json);
    ck_assert_int_eq(config_validate(f->cfg, &errs), RL_OK);
    config_set_metrics_ids(f->cfg, metrics_policy_id);
    f->mem = tu_memory();
    f->m = calloc(1, sizeof(*f->m));
    f->env.backend = f->mem;
    f->env.metrics = f->m;
    f->env.deny = deny_cache_new(64);
    f->env.now_us = tu_clock;
}

static void
fx_close(struct fx *f)
{
    char cmd[128];

    deny_cache_free(f->env.deny);
    f->mem->ops->destroy(f->mem);
    config_unref(f->cfg);
    free(f->m);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- requests and answers ------------------------------------------------- */

#define DMAX 8

struct answer {
    int calls;
    int grpc_status;
    enum rls_code overall;
    size_t n;
    struct rls_status st[DMAX];
    size_t nheaders;
    char hname[RLS_HEADERS_MAX][32], hvalue[RLS_HEADERS_MAX][160];
};

static void
on_done(const struct rls_response *resp, void *arg)
{
    struct answer *a = arg;

    a->calls++;
    a->grpc_status = resp->grpc_status;
    a->overall = resp->overall_code;
    a->n = resp->nstatuses;
    ck_assert_uint_le(a->n, DMAX);
    memcpy(a->st, resp->statuses, a->n * sizeof(*a->st));
    a->nheaders = resp->nheaders;
    for (size_t i = 0; i < resp->nheaders; i++) {
        snprintf(a->hname[i], sizeof(a->hname[i]), "%s", resp->headers[i].name);
        snprintf(a->hvalue[i], sizeof(a->hvalue[i]), "%s", resp->headers[i].value);
    }
}

/* A descriptor of up to 3 entries "k=v" and its options. */
struct desc {
    const char *kv[3][2];
    int has_hits;
    uint64_t hits;
    int has_limit;
    uint32_t limit;
    enum rls_unit unit;
};

struct reqspec {
    const char *domain;
    uint32_t hits;
    int64_t timeout_ms; /* the transport's deadline; 0: none */
    size_t n;
    struct desc d[DMAX];
};

static struct rls_request
build(const struct reqspec *s, struct rls_descriptor *ds, struct rls_entry (*es)[3])
{
    struct rls_request req = {.domain = {s->domain, strlen(s->domain)},
                              .descriptors = ds,
                              .ndescriptors = s->n,
                              .hits_addend = s->hits,
                              .timeout_ms = s->timeout_ms};

    for (size_t i = 0; i < s->n; i++) {
        size_t n = 0;
        memset(&ds[i], 0, sizeof(ds[i]));
        while (n < 3 && s->d[i].kv[n][0] != NULL) {
            es[i][n].key.p = s->d[i].kv[n][0];
            es[i][n].key.len = strlen(s->d[i].kv[n][0]);
            es[i][n].value.p = s->d[i].kv[n][1];
            es[i][n].value.len = strlen(s->d[i].kv[n][1]);
            n++;
        }
        ds[i].entries = es[i];
        ds[i].nentries = n;
        ds[i].has_hits_addend = s->d[i].has_hits;
        ds[i].hits_addend = s->d[i].hits;
        ds[i].has_limit = s->d[i].has_limit;
        ds[i].limit_requests_per_unit = s->d[i].limit;
        ds[i].limit_unit = s->d[i].unit;
    }
    return req;
}

/* Ask; the memory backend answers before rls_start returns. */
static struct answer
ask(struct fx *f, const struct reqspec *s)
{
    struct rls_descriptor ds[DMAX];
    struct rls_entry es[DMAX][3];
    struct rls_request req = build(s, ds, es);
    struct answer a;
    char *cause = NULL;

    memset(&a, 0, sizeof(a));
    ck_assert_msg(rls_start(&f->env, f->cfg, &req, on_done, &a, &cause) == RL_OK, "refused: %s",
                  cause ? cause : "?");
    ck_assert_int_eq(a.calls, 1);
    ck_assert_uint_eq(a.n, s->n);
    return a;
}

/* One descriptor of one entry. */
static struct answer
ask1(struct fx *f, const char *k, const char *v)
{
    struct reqspec s = {.domain = "test-domain", .n = 1, .d = {{.kv = {{k, v}}}}};

    return ask(f, &s);
}

static char *
refused(struct fx *f, const struct reqspec *s)
{
    struct rls_descriptor ds[DMAX];
    struct rls_entry es[DMAX][3];
    struct rls_request req = build(s, ds, es);
    struct answer a = {0};
    char *cause = NULL;

    ck_assert_int_eq(rls_start(&f->env, f->cfg, &req, on_done, &a, &cause), RL_ERR);
    ck_assert_int_eq(a.calls, 0);
    ck_assert_ptr_nonnull(cause);
    return cause;
}

static uint64_t
stat(struct fx *f, const char *label, enum rl_rls_stat s)
{
    int id = metrics_rls_id("test-domain", 11, label, strlen(label));

    return f->m->rls_rules[id][s];
}

/* ---- the tests ---------------------------------------------------------------- */

START_TEST(statuses_in_order_and_the_overall_code)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain",
                        .n = 4,
                        .d = {{.kv = {{"key2", "value2"}}},
                              {.kv = {{"key1", "value1"}, {"subkey1", "x"}}},
                              {.kv = {{"nothing", "here"}}},
                              {.kv = {{"key2", "other"}}}}};
    struct answer a;

    fx_open(&f, NULL);
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
    ck_assert(a.st[0].has_limit);
    ck_assert_uint_eq(a.st[0].requests_per_unit, 3);
    ck_assert_int_eq(a.st[0].unit, RLS_UNIT_MINUTE);
    ck_assert_uint_eq(a.st[0].limit_remaining, 2);
    ck_assert_uint_eq(a.st[1].requests_per_unit, 5);
    ck_assert_uint_eq(a.st[1].limit_remaining, 4);
    /* no rule: OK, no current_limit, nothing counted */
    ck_assert_int_eq(a.st[2].code, RLS_CODE_OK);
    ck_assert(!a.st[2].has_limit);
    ck_assert_int_lt(a.st[2].until_reset_ms, 0);
    ck_assert_uint_eq(a.st[3].requests_per_unit, 20);
    ck_assert_uint_eq(a.st[3].limit_remaining, 19);
    a = ask(&f, &s);
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert_uint_eq(a.st[0].limit_remaining, 0);
    /* the fourth: value2 is over; every other descriptor still counts */
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(a.st[0].limit_remaining, 0);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OK);
    ck_assert_uint_eq(a.st[1].limit_remaining, 1);
    ck_assert_uint_eq(a.st[3].limit_remaining, 16);
    ck_assert_uint_eq(f.m->rls_requests[RL_RLS_OK], 3);
    ck_assert_uint_eq(f.m->rls_requests[RL_RLS_OVER], 1);
    fx_close(&f);
}
END_TEST

START_TEST(unknown_domain_and_bad_requests)
{
    struct fx f;
    struct reqspec s = {.domain = "other", .n = 2,
                        .d = {{.kv = {{"key2", "x"}}},
                              {.kv = {{"key2", "x"}}, .has_limit = 1, .limit = 1,
                               .unit = RLS_UNIT_SECOND}}};
    struct answer a;
    char *cause;

    fx_open(&f, NULL);
    /* an unknown domain: OK, no limit, even for a descriptor's own limit */
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert(!a.st[0].has_limit && !a.st[1].has_limit);
    ck_assert_uint_eq(f.m->rls_domain_not_found, 2);
    /* an empty domain, no descriptors: the request is refused */
    s.domain = "";
    cause = refused(&f, &s);
    ck_assert_str_eq(cause, "domain: rate limit domain must not be empty");
    free(cause);
    s.domain = "test-domain";
    s.n = 0;
    cause = refused(&f, &s);
    ck_assert_str_eq(cause, "descriptors: rate limit descriptor list must not be empty");
    free(cause);
    /* a descriptor's own limit of no unit */
    s.n = 2;
    s.d[1].unit = RLS_UNIT_UNKNOWN;
    cause = refused(&f, &s);
    ck_assert_str_eq(cause, "descriptors[1].limit.unit: must be SECOND, MINUTE, HOUR, DAY, "
                            "WEEK, MONTH or YEAR");
    free(cause);
    ck_assert_uint_eq(f.m->rls_requests[RL_RLS_INVALID], 3);
    /* no entries: no rule */
    s.n = 1;
    s.d[0].kv[0][0] = NULL;
    a = ask(&f, &s);
    ck_assert(!a.st[0].has_limit);
    fx_close(&f);
}
END_TEST

/* hits_addend of the request (0 means 1) and of a descriptor (a
 * UInt64Value that wins, where 0 only asks). */
START_TEST(hits_addend)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 2,
                        .d = {{.kv = {{"ten", "a"}}}, {.kv = {{"ten", "b"}}}}};
    struct answer a;

    fx_open(&f, NULL);
    s.hits = 0;
    a = ask(&f, &s);
    ck_assert_uint_eq(a.st[0].limit_remaining, 9);
    s.hits = 3;
    a = ask(&f, &s);
    ck_assert_uint_eq(a.st[0].limit_remaining, 6);
    ck_assert_uint_eq(a.st[1].limit_remaining, 6);
    s.d[1].has_hits = 1;
    s.d[1].hits = 5;
    a = ask(&f, &s);
    ck_assert_uint_eq(a.st[0].limit_remaining, 3);
    ck_assert_uint_eq(a.st[1].limit_remaining, 1);
    /* 0 only asks: nothing counted, the answer as things stand */
    s.d[1].hits = 0;
    a = ask(&f, &s);
    ck_assert_uint_eq(a.st[0].limit_remaining, 0);
    ck_assert_uint_eq(a.st[1].limit_remaining, 1);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OK);
    /* more than is left: over, and counted (a unit rule counts every hit,
     * as envoyproxy/ratelimit's INCRBY): an ask after it is over too */
    s.d[1].hits = 2;
    a = ask(&f, &s);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OVER_LIMIT);
    s.d[1].hits = 0;
    a = ask(&f, &s);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(a.st[1].limit_remaining, 0);
    /* hits up to 10^15 (budgets), over and never a wrap; past it refused */
    s.d[1].hits = RL_COST_MAX;
    a = ask(&f, &s);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OVER_LIMIT);
    s.d[1].hits = UINT64_MAX;
    {
        char *cause = refused(&f, &s);
        ck_assert_str_eq(cause, "descriptors[1].hits_addend: at most 1000000000000000");
        free(cause);
    }
    fx_close(&f);
}
END_TEST

/* The key alone counts per value; a wildcard per value, unless it shares. */
START_TEST(per_value_and_shared_counts)
{
    struct fx f;

    fx_open(&f, NULL);
    ck_assert_uint_eq(ask1(&f, "key2", "a").st[0].limit_remaining, 19);
    ck_assert_uint_eq(ask1(&f, "key2", "a").st[0].limit_remaining, 18);
    ck_assert_uint_eq(ask1(&f, "key2", "b").st[0].limit_remaining, 19);
    ck_assert_uint_eq(ask1(&f, "path", "/api/x").st[0].limit_remaining, 1);
    ck_assert_uint_eq(ask1(&f, "path", "/api/y").st[0].limit_remaining, 1);
    ck_assert_uint_eq(ask1(&f, "path", "/s/x").st[0].limit_remaining, 1);
    ck_assert_uint_eq(ask1(&f, "path", "/s/y").st[0].limit_remaining, 0);
    ck_assert_int_eq(ask1(&f, "path", "/s/z").st[0].code, RLS_CODE_OVER_LIMIT);
    /* the exact value whitelists */
    ck_assert(!ask1(&f, "key2", "value3").st[0].has_limit);
    fx_close(&f);
}
END_TEST

/* A descriptor's own limit (Envoy's, from dynamic metadata) wins over the
 * file's; it counts in the key the file's rule of that unit would. */
START_TEST(a_descriptors_own_limit_wins)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 1,
                        .d = {{.kv = {{"key2", "own"}}, .has_limit = 1, .limit = 22,
                               .unit = RLS_UNIT_DAY}}};
    struct answer a;

    fx_open(&f, NULL);
    ck_assert_uint_eq(ask1(&f, "key2", "own").st[0].limit_remaining, 19);
    a = ask(&f, &s);
    ck_assert_uint_eq(a.st[0].requests_per_unit, 22);
    ck_assert_int_eq(a.st[0].unit, RLS_UNIT_DAY);
    ck_assert_ptr_null(a.st[0].name);
    ck_assert_uint_eq(a.st[0].limit_remaining, 20);
    /* for a descriptor no rule matches too */
    s.d[0].kv[0][0] = "nothing";
    s.d[0].limit = 1;
    ck_assert_int_eq(ask(&f, &s).st[0].code, RLS_CODE_OK);
    ck_assert_int_eq(ask(&f, &s).st[0].code, RLS_CODE_OVER_LIMIT);
    /* of 0: every hit over */
    s.d[0].limit = 0;
    a = ask(&f, &s);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert(a.st[0].has_limit);
    fx_close(&f);
}
END_TEST

START_TEST(unlimited_and_a_limit_of_zero)
{
    struct fx f;
    struct answer a;
    int64_t before, after;

    fx_open(&f, NULL);
    for (int i = 0; i < 3; i++) {
        a = ask1(&f, "free", "x");
        ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
        ck_assert(!a.st[0].has_limit);
        ck_assert_uint_eq(a.st[0].limit_remaining, UINT32_MAX);
    }
    ck_assert_uint_eq(stat(&f, "free", RL_RLS_HITS), 0);
    before = now_unix_us() / 1000;
    a = ask1(&f, "blocked", "x");
    after = now_unix_us() / 1000;
    ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(a.st[0].requests_per_unit, 0);
    ck_assert_int_eq(a.st[0].unit, RLS_UNIT_HOUR);
    ck_assert_uint_eq(a.st[0].limit_remaining, 0);
    /* the hour's end on the clock, in whole seconds */
    ck_assert_int_eq(a.st[0].until_reset_ms % 1000, 0);
    ck_assert_int_ge(a.st[0].until_reset_ms, 3600000 - after % 3600000);
    ck_assert_int_le(a.st[0].until_reset_ms, 3600000 - before % 3600000 + 999);
    ck_assert_uint_eq(stat(&f, "blocked", RL_RLS_OVER_LIMIT), 1);
    fx_close(&f);
}
END_TEST

/* A rule named in another matched rule's replaces counts nothing; it counts
 * when that rule is not in the request. */
START_TEST(replaces)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 2,
                        .d = {{.kv = {{"wide", "x"}}}, {.kv = {{"narrow", "x"}}}}};
    struct answer a;

    fx_open(&f, NULL);
    a = ask(&f, &s);
    ck_assert(!a.st[0].has_limit);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
    ck_assert_str_eq(a.st[1].name, "narrow");
    ck_assert_uint_eq(a.st[1].limit_remaining, 1);
    a = ask(&f, &s);
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
    ck_assert_uint_eq(stat(&f, "wide", RL_RLS_HITS), 0);
    a = ask1(&f, "wide", "x");
    ck_assert_uint_eq(a.st[0].limit_remaining, 8);
    fx_close(&f);
}
END_TEST

/* shadow_mode: over the limit is answered OK (counted as shadow);
 * rls.shadow_mode does it for the whole response. */
START_TEST(shadow_modes)
{
    struct fx f;
    struct answer a;

    fx_open(&f, NULL);
    ask1(&f, "shadow", "x");
    a = ask1(&f, "shadow", "x");
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
    ck_assert(a.st[0].has_limit);
    ck_assert_uint_eq(a.st[0].limit_remaining, 0);
    ck_assert_uint_eq(stat(&f, "shadow", RL_RLS_SHADOW_MODE), 1);
    ck_assert_uint_eq(stat(&f, "shadow", RL_RLS_OVER_LIMIT), 1);
    fx_close(&f);

    fx_open(&f, "\"shadow_mode\": true");
    ask1(&f, "key2", "value2");
    ask1(&f, "key2", "value2");
    ask1(&f, "key2", "value2");
    a = ask1(&f, "key2", "value2");
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(f.m->rls_global_shadow, 1);
    fx_close(&f);
}
END_TEST

/* rls.all_or_nothing: a request one of whose descriptors is over counts
 * nothing in any (a limit of 0 included); one that fits counts in every
 * one; without the option each counts alone (envoyproxy/ratelimit's way). */
START_TEST(all_or_nothing)
{
    struct reqspec pair = {.domain = "test-domain", .n = 2,
                           .d = {{.kv = {{"key2", "a"}}}, {.kv = {{"ten", "x"}}}}};
    struct reqspec doomed = {.domain = "test-domain", .n = 2,
                             .d = {{.kv = {{"blocked", "z"}}}, {.kv = {{"key2", "c"}}}}};
    struct reqspec twice = {.domain = "test-domain", .n = 2,
                            .d = {{.kv = {{"key2", "d"}}}, {.kv = {{"key2", "d"}}}}};
    struct answer a;
    struct fx f;

    for (int on = 0; on <= 1; on++) {
        fx_open(&f, on ? "\"all_or_nothing\": true" : NULL);
        /* both fit: both counted */
        a = ask(&f, &pair);
        ck_assert_int_eq(a.overall, RLS_CODE_OK);
        ck_assert_uint_eq(a.st[0].limit_remaining, 19);
        ck_assert_uint_eq(a.st[1].limit_remaining, 9);
        for (int i = 0; i < 9; i++)
            ask1(&f, "ten", "x");
        /* ten=x is over: key2=a counted only without the option */
        a = ask(&f, &pair);
        ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
        ck_assert_int_eq(a.st[0].code, RLS_CODE_OK);
        ck_assert_int_eq(a.st[1].code, RLS_CODE_OVER_LIMIT);
        ck_assert_uint_eq(ask1(&f, "key2", "a").st[0].limit_remaining, (on ? 18 : 17));
        /* a limit of 0 denies the request: key2=c counted only without */
        a = ask(&f, &doomed);
        ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
        ck_assert_int_eq(a.st[1].code, RLS_CODE_OK);
        ck_assert_uint_eq(ask1(&f, "key2", "c").st[0].limit_remaining, (on ? 19 : 18));
        /* a descriptor sent twice counts twice, decided alone */
        ask(&f, &twice);
        ck_assert_uint_eq(ask1(&f, "key2", "d").st[0].limit_remaining, 17);
        /* the over-limit counts: only what was counted */
        ck_assert_uint_eq(stat(&f, "key2", RL_RLS_WITHIN_LIMIT), (on ? 6 : 8));
        fx_close(&f);
    }
}
END_TEST

/* count_over_limit: a unit rule counts every hit (an ask after an
 * overrun is over), an algorithm's only with the option, a unit rule with
 * it false keeps ratelimitd's counting; under rls.all_or_nothing a unit
 * rule counts nothing of a denied request, and a rule that says true is
 * decided alone, charged. */
START_TEST(count_over_limit)
{
    struct reqspec three = {
        .domain = "test-domain",
        .n = 3,
        .d = {{.kv = {{"key2", "g"}}}, {.kv = {{"ten", "g"}}}, {.kv = {{"charged", "g"}}}}};
    struct reqspec one = {.domain = "test-domain", .n = 1};
    struct answer a;
    struct fx f;

    for (int on = 0; on <= 1; on++) {
        fx_open(&f, on ? "\"all_or_nothing\": true" : NULL);
        /* one descriptor: 11 of 10, then an ask */
        one.d[0] = (struct desc){.kv = {{"ten", "o"}}, .has_hits = 1, .hits = 11};
        ck_assert_int_eq(ask(&f, &one).st[0].code, RLS_CODE_OVER_LIMIT);
        one.d[0].hits = 0;
        a = ask(&f, &one);
        ck_assert_int_eq(a.st[0].code, on ? RLS_CODE_OK : RLS_CODE_OVER_LIMIT);
        ck_assert_uint_eq(a.st[0].limit_remaining, on ? 10 : 0);
        ck_assert_uint_eq(stat(&f, "ten", RL_RLS_CHARGED), on ? 0 : 11);
        /* count_over_limit: false on a unit rule: 3 of 2 counts nothing */
        one.d[0] = (struct desc){.kv = {{"spared", "o"}}, .has_hits = 1, .hits = 3};
        ck_assert_int_eq(ask(&f, &one).st[0].code, RLS_CODE_OVER_LIMIT);
        one.d[0].hits = 0;
        ck_assert_uint_eq(ask(&f, &one).st[0].limit_remaining, 2);
        /* ten=g full; the request of three is over: key2 counts without
         * the option only, charged (alone) in both */
        one.d[0] = (struct desc){.kv = {{"ten", "g"}}, .has_hits = 1, .hits = 10};
        ck_assert_int_eq(ask(&f, &one).st[0].code, RLS_CODE_OK);
        a = ask(&f, &three);
        ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
        ck_assert_int_eq(a.st[2].code, RLS_CODE_OK);
        ck_assert_uint_eq(a.st[2].limit_remaining, 1);
        ck_assert_uint_eq(ask1(&f, "key2", "g").st[0].limit_remaining, on ? 19 : 18);
        /* a token bucket charged past empty: over, the ask after it too */
        one.d[0] = (struct desc){.kv = {{"charged", "g"}}, .has_hits = 1, .hits = 3};
        ck_assert_int_eq(ask(&f, &one).st[0].code, RLS_CODE_OVER_LIMIT);
        one.d[0].hits = 0;
        ck_assert_int_eq(ask(&f, &one).st[0].code, RLS_CODE_OVER_LIMIT);
        ck_assert_uint_eq(stat(&f, "charged", RL_RLS_CHARGED), 4);
        fx_close(&f);
    }
}
END_TEST

/* An identity as rls.c made it before it was written eight bytes at a
 * time: a byte at a time, unhashed (the caller hashes past the cap). */
static size_t
ref_identity(char *out, const struct rls_str *domain, const struct rls_descriptor *d,
             const struct rls_str *const *shared)
{
    size_t o = 0;

    out[o++] = 'd', out[o++] = ':';
#define REF_PART(p_, n_)                                                                       \
    for (size_t j = 0; j < (n_); j++) {                                                        \
        unsigned char c = (unsigned char)(p_)[j];                                              \
        if (c >= 0x1c && c <= 0x1f)                                                            \
            out[o++] = 0x1d, out[o++] = (char)('0' + (c - 0x1c));                              \
        else                                                                                   \
            out[o++] = (char)c;                                                                \
    }
    REF_PART(domain->p, domain->len);
    for (size_t i = 0; i < d->nentries; i++) {
        bool sh = shared != NULL && shared[i] != NULL;
        const struct rls_str *v = sh ? shared[i] : &d->entries[i].value;

        out[o++] = 0x1e;
        REF_PART(d->entries[i].key.p, d->entries[i].key.len);
        out[o++] = sh ? 0x1c : 0x1f;
        REF_PART(v->p, v->len);
    }
#undef REF_PART
    return o;
}

/* rls_identity gives the bytes it gave before, on generated descriptors:
 * any byte (the separators often), parts of 0 to 700 bytes on both sides
 * of an eight-byte step, shared patterns; past RL_IDENTITY_MAX the SHA-256
 * of the same bytes.  Also with `size` just the identity's length, where
 * it goes a part at a time. */
START_TEST(identity_same_as_before)
{
    static char bytes[4][8][700], want[16 * 4 * 8 * 700], got[RL_IDENTITY_MAX];
    static const char hex[] = "0123456789abcdef";

    for (uint32_t seed = 1; seed <= 5000; seed++) {
        struct gen g = gen_seeded(seed);
        struct rls_entry e[8];
        struct rls_str dom, pat[8];
        const struct rls_str *sh[8];
        struct rls_descriptor d = {.entries = e, .nentries = 1 + gen_next(&g) % 8};
        bool shared = gen_next(&g) % 4 == 0;
        uint32_t rare = 1 + gen_next(&g) % 40;
        size_t most = 1 + (seed % 7 == 0 ? 700 : 40), n, wn;

        for (size_t k = 0; k < 4; k++)
            for (size_t i = 0; i < 8; i++)
                for (size_t j = 0; j < 700; j++) {
                    uint32_t r = gen_next(&g);
                    bytes[k][i][j] = r % rare == 0 ? (char)(0x1c + (r >> 8) % 4)
                                     : r % 7 == 0  ? (char)(r >> 12)
                                                   : (char)('a' + (r >> 12) % 26);
                }
        dom = (struct rls_str){bytes[3][0], gen_next(&g) % most};
        for (size_t i = 0; i < d.nentries; i++) {
            e[i].key = (struct rls_str){bytes[0][i], gen_next(&g) % most};
            e[i].value = (struct rls_str){bytes[1][i], gen_next(&g) % most};
            pat[i] = (struct rls_str){bytes[2][i], gen_next(&g) % most};
            sh[i] = gen_next(&g) % 3 == 0 ? &pat[i] : NULL;
        }
        wn = ref_identity(want, &dom, &d, shared ? sh : NULL);
        if (wn > RL_IDENTITY_MAX) {
            unsigned char md[32];
            EVP_MD_CTX *c = EVP_MD_CTX_new();

            ck_assert_ptr_nonnull(c);
            ck_assert_int_eq(EVP_DigestInit_ex(c, EVP_sha256(), NULL), 1);
            EVP_DigestUpdate(c, want, wn);
            EVP_DigestFinal_ex(c, md, NULL);
            EVP_MD_CTX_free(c);
            memcpy(want, "h:", 2);
            for (size_t i = 0; i < sizeof(md); i++) {
                want[2 + 2 * i] = hex[md[i] >> 4];
                want[3 + 2 * i] = hex[md[i] & 15];
            }
            wn = 2 + 2 * sizeof(md);
        }
        n = rls_identity(got, sizeof(got), &dom, &d, shared ? sh : NULL);
        ck_assert_msg(n == wn && memcmp(got, want, n) == 0,
                      "seed %u: %zu bytes, before %zu, or other bytes", seed, n, wn);
        if (want[0] == 'd') {
            memset(got, 0, sizeof(got));
            n = rls_identity(got, wn, &dom, &d, shared ? sh : NULL);
            ck_assert_msg(n == wn && memcmp(got, want, n) == 0,
                          "seed %u, size %zu: %zu bytes or other bytes", seed, wn, n);
        }
    }
}
END_TEST

/* A value holding the separators of an identity (0x1c..0x1f), anywhere in
 * it (rls.c looks for them eight bytes at a time), counts apart from every
 * other value, the escaped form of it written out too. */
START_TEST(separators_in_a_value_count_apart)
{
    static const char *const values[] = {
        "0123456789abcdef\x1cX",      "0123456789abcdef\x1d" "0X", "0123456789abcdef\x1fX",
        "0123456789abcdef\x1eX",      "0123456\x1e" "89abcdef\x1cX",  "0123456789abcdef",
        "\x1c",                        "\x1d" "0",                   "01234567\x1f",
        "01234567\x1d" "3",
    };
    struct fx f;

    fx_open(&f, NULL);
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        for (int k = 0; k < 10; k++)
            ck_assert_msg(ask1(&f, "ten", values[i]).st[0].limit_remaining == (uint32_t)(9 - k),
                          "value %zu, hit %d: counted with another value", i, k);
        ck_assert_int_eq(ask1(&f, "ten", values[i]).st[0].code, RLS_CODE_OVER_LIMIT);
    }
    fx_close(&f);
}
END_TEST

/* quota_mode: the request is over only when every quota is (or a plain
 * rule is). */
START_TEST(quota_mode)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 2,
                        .d = {{.kv = {{"quota1", "x"}}}, {.kv = {{"quota2", "x"}}}}};
    struct answer a;

    fx_open(&f, NULL);
    ask1(&f, "quota1", "x");
    a = ask(&f, &s);
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(a.st[1].code, RLS_CODE_OK);
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    a = ask(&f, &s);
    ck_assert_int_eq(a.overall, RLS_CODE_OVER_LIMIT);
    fx_close(&f);
}
END_TEST

/* rate_limits: every limit allows, or nothing is counted in any. */
START_TEST(several_limits_decided_together)
{
    struct fx f;
    struct answer a;

    fx_open(&f, NULL);
    a = ask1(&f, "pair", "x");
    ck_assert_uint_eq(a.st[0].limit_remaining, 1);
    ck_assert_str_eq(a.st[0].name, "hourly");
    ck_assert_int_eq(a.st[0].unit, RLS_UNIT_HOUR);
    ask1(&f, "pair", "x");
    a = ask1(&f, "pair", "x");
    ck_assert_int_eq(a.st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(a.st[0].requests_per_unit, 2);
    /* the daily limit counted 2, not 3: asked alone, it has 3 left */
    {
        static const char id[] = "d:test-domain\x1epair\x1fx";
        const struct rls_domain *d = rls_rules_domain(f.cfg->rls.rules, "test-domain", 11);
        struct rls_entry e = {{"pair", 4}, {"x", 1}};
        const struct rls_str *sh[1];
        const struct rls_rule *r = rls_rules_match(d, &e, 1, sh);
        struct rl_policy p = *r->policy;
        char key[RL_REDIS_KEY_MAX];
        size_t klen = 0;

        p.nlimits = 1;
        ck_assert_int_eq(identity_key("rl:", "rls", id, sizeof(id) - 1, false, key, sizeof(key),
                                      &klen),
                         RL_OK);
        ck_assert_uint_gt(klen, 0);
        ck_assert_str_eq(key, "{rl:rls:d:test-domain%1Epair%1Fx}");
        ck_assert_int_eq(tu_check(f.mem, &p, key, 0, 0).limits[0].remaining, 3);
    }
    fx_close(&f);
}
END_TEST

/* What envoyproxy/ratelimit counts: every hit, hits within, hits past
 * near_limit_ratio (0.8: of 10, the 9th and 10th), hits over. */
START_TEST(counts_as_envoyproxy_ratelimit_counts)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 1, .d = {{.kv = {{"ten", "n"}}}}};

    fx_open(&f, NULL);
    for (int i = 0; i < 12; i++)
        ask(&f, &s);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_HITS), 12);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_WITHIN_LIMIT), 10);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_NEAR_LIMIT), 2);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_OVER_LIMIT), 2);
    fx_close(&f);

    /* 7 in, then 5 at once: 2 of them near (8..10 past 8), 2 over (11, 12) */
    fx_open(&f, NULL);
    s.hits = 7;
    ask(&f, &s);
    s.hits = 5;
    ck_assert_int_eq(ask(&f, &s).st[0].code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_HITS), 12);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_WITHIN_LIMIT), 7);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_NEAR_LIMIT), 2);
    ck_assert_uint_eq(stat(&f, "ten", RL_RLS_OVER_LIMIT), 2);
    fx_close(&f);

    /* detailed_metric: the request's values name the counter */
    fx_open(&f, NULL);
    ask1(&f, "user", "alice");
    ask1(&f, "user", "bob");
    ask1(&f, "user", "bob");
    ck_assert_uint_eq(stat(&f, "user_alice", RL_RLS_HITS), 1);
    ck_assert_uint_eq(stat(&f, "user_bob", RL_RLS_HITS), 2);
    ck_assert_uint_eq(stat(&f, "user", RL_RLS_HITS), 0);
    fx_close(&f);
}
END_TEST

/* A window with counts ends when Redis (here the memory backend) says; an
 * empty one where the clock's unit ends; both in whole seconds. */
START_TEST(the_window_ends_on_the_clock)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 1,
                        .d = {{.kv = {{"minute", "x"}}, .has_hits = 1, .hits = 0}}};
    int64_t before, after;
    struct answer a;

    fx_open(&f, NULL);
    for (int k = 0; k < 2; k++) {
        before = now_unix_us() / 1000;
        a = k == 0 ? ask(&f, &s) : ask1(&f, "minute", "x");
        after = now_unix_us() / 1000;
        ck_assert_int_eq(a.st[0].until_reset_ms % 1000, 0);
        /* ceil to a second of the time left; a minute rolling over between
         * the two readings makes either bound the right one */
        if (after / 60000 == before / 60000) {
            ck_assert_int_ge(a.st[0].until_reset_ms, 60000 - after % 60000);
            ck_assert_int_le(a.st[0].until_reset_ms, 60000 - before % 60000 + 999);
        }
    }
    fx_close(&f);
}
END_TEST

/* A backend that fails every check with its `res`: down (answered at once)
 * or timed out. */
struct failing_backend {
    struct rl_backend base;
    struct rl_check_res res;
};

static void
failing_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    (void)req;
    cb(&((struct failing_backend *)be)->res, arg);
}

static const struct rl_backend_ops failing_ops = {.name = "failing", .check = failing_check};

/* failure_mode as /check has it: open answers OK (no numbers), closed
 * UNAVAILABLE for the request, local counts in the process. */
START_TEST(failure_modes)
{
    struct fx f;
    struct failing_backend down = {.base = {.ops = &failing_ops},
                                   .res = {.status = RL_BACKEND_DOWN, .error = "test: down"}};
    struct answer a;

    fx_open(&f, NULL);
    f.env.backend = &down.base;
    f.env.local = f.mem;
    a = ask1(&f, "key2", "value2");
    ck_assert_int_eq(a.grpc_status, 0);
    ck_assert_int_eq(a.overall, RLS_CODE_OK);
    ck_assert(a.st[0].has_limit);
    ck_assert_int_lt(a.st[0].until_reset_ms, 0);
    f.cfg->failure_mode = RL_FAIL_CLOSED;
    a = ask1(&f, "key2", "value2");
    ck_assert_int_eq(a.grpc_status, 14);
    ck_assert_uint_eq(f.m->rls_requests[RL_RLS_UNAVAILABLE], 1);
    /* nothing to ask: answered anyway */
    a = ask1(&f, "nothing", "x");
    ck_assert_int_eq(a.grpc_status, 0);
    f.cfg->failure_mode = RL_FAIL_LOCAL;
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(ask1(&f, "key2", "value2").st[0].limit_remaining, 2 - i);
    ck_assert_int_eq(ask1(&f, "key2", "value2").st[0].code, RLS_CODE_OVER_LIMIT);
    fx_close(&f);
}
END_TEST

/* A backend that did not answer within the caller's own deadline (shorter
 * than redis.timeout) leaves the call DEADLINE_EXCEEDED whatever
 * failure_mode says: nobody waits for failure_mode's answer, and the
 * transport's own timer answers the same.  Redis's timeout is failure_mode's
 * to answer. */
START_TEST(the_callers_deadline_is_not_failure_mode)
{
    struct fx f;
    struct failing_backend slow = {
        .base = {.ops = &failing_ops},
        .res = {.status = RL_BACKEND_TIMEOUT, .error = "test: no answer in time"}};
    struct reqspec s = {.domain = "test-domain", .n = 1, .d = {{.kv = {{"key2", "value2"}}}}};
    struct answer a;
    enum rl_failure_mode modes[] = {RL_FAIL_OPEN, RL_FAIL_CLOSED, RL_FAIL_LOCAL};

    fx_open(&f, NULL);
    f.env.backend = &slow.base;
    f.env.local = f.mem;
    for (size_t i = 0; i < RL_ARRAY_LEN(modes); i++) {
        f.cfg->failure_mode = modes[i];
        s.timeout_ms = f.cfg->redis.timeout_ms - 1;
        a = ask(&f, &s);
        ck_assert_int_eq(a.grpc_status, 4);
        /* a deadline past redis.timeout: Redis's timeout, failure_mode's */
        s.timeout_ms = f.cfg->redis.timeout_ms + 1;
        a = ask(&f, &s);
        ck_assert_int_eq(a.grpc_status, modes[i] == RL_FAIL_CLOSED ? 14 : 0);
    }
    fx_close(&f);
}
END_TEST

/* rls.response_headers: /check's quota headers of the descriptor nearest
 * its limit, or of one over it. */
START_TEST(response_headers)
{
    struct fx f;
    struct reqspec s = {.domain = "test-domain", .n = 2,
                        .d = {{.kv = {{"ten", "h"}}}, {.kv = {{"narrow", "h"}}}}};
    struct answer a;

    fx_open(&f, NULL);
    ck_assert_uint_eq(ask(&f, &s).nheaders, 0);
    fx_close(&f);
    fx_open(&f, "\"response_headers\": true");
    a = ask(&f, &s);
    ck_assert_uint_eq(a.nheaders, 5);
    ck_assert_str_eq(a.hname[0], "X-RateLimit-Limit");
    ck_assert_str_eq(a.hvalue[0], "2");
    ck_assert_str_eq(a.hvalue[1], "1");
    ck_assert_str_eq(a.hname[3], "RateLimit-Policy");
    ck_assert_str_eq(a.hvalue[3], "\"narrow\";q=2;w=86400");
    ask(&f, &s);
    a = ask(&f, &s);
    ck_assert_uint_eq(a.nheaders, 6);
    ck_assert_str_eq(a.hname[5], "Retry-After");
    ck_assert_str_eq(a.hvalue[1], "0");
    fx_close(&f);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("rls");
    TCase *tc = tcase_create("semantics");

    tcase_add_test(tc, statuses_in_order_and_the_overall_code);
    tcase_add_test(tc, unknown_domain_and_bad_requests);
    tcase_add_test(tc, hits_addend);
    tcase_add_test(tc, all_or_nothing);
    tcase_add_test(tc, count_over_limit);
    tcase_add_test(tc, separators_in_a_value_count_apart);
    tcase_add_test(tc, identity_same_as_before);
    tcase_add_test(tc, per_value_and_shared_counts);
    tcase_add_test(tc, a_descriptors_own_limit_wins);
    tcase_add_test(tc, unlimited_and_a_limit_of_zero);
    tcase_add_test(tc, replaces);
    tcase_add_test(tc, shadow_modes);
    tcase_add_test(tc, quota_mode);
    tcase_add_test(tc, several_limits_decided_together);
    tcase_add_test(tc, counts_as_envoyproxy_ratelimit_counts);
    tcase_add_test(tc, the_window_ends_on_the_clock);
    tcase_add_test(tc, failure_modes);
    tcase_add_test(tc, the_callers_deadline_is_not_failure_mode);
    tcase_add_test(tc, response_headers);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
