/*
 * check_rls_rules.c — envoyproxy/ratelimit's rule files read by
 * src/rls_rules.c: its example files load and match as it matches them
 * (exact, then wildcards in file order, then the key alone, at full depth
 * only), every validation error of its loader and of ours names the file,
 * the YAML path and the line, a directory is read as a ConfigMap mounts it,
 * and config_validate reads the files of rls.config with the rest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "config.h"
#include "rls_rules.h"
#include "schema.h"
#include "unit.h"

static uint64_t
uid(void)
{
    static uint64_t n;
    return ++n;
}

/* A temporary directory holding files name -> text (NULL-terminated pairs). */
static char *
mkdir_with(const char *const *files)
{
    char tmpl[] = "/tmp/rl-rls-XXXXXX";
    char *dir = mkdtemp(tmpl);

    ck_assert_ptr_nonnull(dir);
    dir = strdup(dir);
    for (size_t i = 0; files[i] != NULL; i += 2) {
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        if (files[i + 1] == NULL) { /* a directory */
            ck_assert_int_eq(mkdir(path, 0700), 0);
            continue;
        }
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(files[i + 1], f);
        fclose(f);
    }
    return dir;
}

static void
rm_rf(const char *dir)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The rules of one file of `text`; NULL when refused (errs says why). */
static struct rls_rules *
load_text(const char *text, struct rl_errors *errs, char **file)
{
    const char *files[] = {"rules.yaml", text, NULL};
    char *dir = mkdir_with(files);
    struct rls_rules *r = NULL;

    *file = malloc(strlen(dir) + 16);
    sprintf(*file, "%s/rules.yaml", dir);
    if (rls_rules_load(*file, uid, &r, errs) != RL_OK)
        ck_assert_ptr_null(r);
    rm_rf(dir);
    free(dir);
    return r;
}

static struct rls_rules *
load_ok(const char *text)
{
    struct rl_errors errs = {0};
    char *file;
    struct rls_rules *r = load_text(text, &errs, &file);

    for (size_t i = 0; i < errs.n; i++)
        fprintf(stderr, "  %s\n", errs.msg[i]);
    ck_assert_msg(r != NULL, "refused: %s", errs.n ? errs.msg[0] : "?");
    errors_free(&errs);
    free(file);
    return r;
}

/* Every problem of a file is one of want ("LINE: path: text" after the
 * file's name), each said once. */
static void
expect_errors(const char *text, const char *const *want, size_t n)
{
    struct rl_errors errs = {0};
    char *file;
    struct rls_rules *r = load_text(text, &errs, &file);

    ck_assert_ptr_null(r);
    for (size_t i = 0; i < errs.n; i++)
        fprintf(stderr, "    got: %s\n", errs.msg[i]);
    for (size_t k = 0; k < n; k++) {
        char full[1024];
        int seen = 0;
        snprintf(full, sizeof(full), "%s:%s", file, want[k]);
        for (size_t i = 0; i < errs.n; i++)
            seen += strncmp(errs.msg[i], full, strlen(full)) == 0;
        ck_assert_msg(seen == 1, "want once: %s", full);
    }
    ck_assert_uint_eq(errs.n, n);
    errors_free(&errs);
    free(file);
}

/* ---- matching -------------------------------------------------------------- */

struct kv {
    const char *k, *v;
};

/* The rule of the descriptor kv[0..n) under domain, NULL when none. */
static const struct rls_rule *
match(const struct rls_rules *r, const char *domain, const struct kv *kv, size_t n,
      const struct rls_str **shared)
{
    struct rls_entry e[8];
    const struct rls_str *sh[8];
    const struct rls_domain *d = rls_rules_domain(r, domain, strlen(domain));

    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        e[i].key.p = kv[i].k;
        e[i].key.len = strlen(kv[i].k);
        e[i].value.p = kv[i].v;
        e[i].value.len = strlen(kv[i].v);
    }
    if (d == NULL)
        return NULL;
    return rls_rules_match(d, e, n, shared != NULL ? shared : sh);
}

#define M1(r, k, v) match((r), "test-domain", (struct kv[]){{k, v}}, 1, NULL)
#define M2(r, k, v, k2, v2) match((r), "test-domain", (struct kv[]){{k, v}, {k2, v2}}, 2, NULL)

static uint32_t
rpu(const struct rls_rule *r)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_ge(r->nlimits, 1);
    return r->limits[0].requests_per_unit;
}

/* envoyproxy/ratelimit's test/config/basic_config.yaml, as it is */
static const char basic_config[] =
    "# Basic configuration for testing.\n"
    "domain: test-domain\n"
    "descriptors:\n"
    "  # Top level key/value with no default rate limit.\n"
    "  - key: key1\n"
    "    value: value1\n"
    "    descriptors:\n"
    "      # 2nd level key only with default rate limit.\n"
    "      - key: subkey1\n"
    "        rate_limit:\n"
    "          unit: second\n"
    "          requests_per_unit: 5\n"
    "\n"
    "      # 2nd level key/value with limit. Specific override at 2nd level.\n"
    "      - key: subkey1\n"
    "        value: subvalue1\n"
    "        rate_limit:\n"
    "          unit: second\n"
    "          requests_per_unit: 10\n"
    "\n"
    "  # Top level key only with default rate limit.\n"
    "  - key: key2\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 20\n"
    "\n"
    "  # Top level key/value with limit. Specific override at 1st level.\n"
    "  - key: key2\n"
    "    value: value2\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 30\n"
    "\n"
    "  # First level override with no limit. This effectively whitelists the value.\n"
    "  - key: key2\n"
    "    value: value3\n"
    "\n"
    "  - key: key3\n"
    "    rate_limit:\n"
    "      unit: hour\n"
    "      requests_per_unit: 1\n"
    "\n"
    "  - key: key4\n"
    "    rate_limit:\n"
    "      name: key4_rate_limit\n"
    "      unit: day\n"
    "      requests_per_unit: 1\n"
    "\n"
    "  - key: key5\n"
    "    value: value5\n"
    "    rate_limit:\n"
    "      unit: day\n"
    "      requests_per_unit: 15\n"
    "    descriptors:\n"
    "      - key: subkey5\n"
    "        value: subvalue5\n"
    "        rate_limit:\n"
    "          unit: day\n"
    "          requests_per_unit: 25\n"
    "\n"
    "  - key: key6\n"
    "    rate_limit:\n"
    "      unlimited: true\n"
    "\n"
    "  # Top level key only with default rate limit.\n"
    "\n"
    "  - key: key7\n"
    "    detailed_metric: true\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 70\n";

START_TEST(basic_config_matches_as_envoyproxy_ratelimit)
{
    struct rls_rules *r = load_ok(basic_config);
    const struct rls_rule *m;

    ck_assert_uint_eq(r->ndomains, 1);
    ck_assert_ptr_null(rls_rules_domain(r, "foo_domain", 10));
    ck_assert_ptr_null(match(r, "foo_domain", (struct kv[]){{"key2", "x"}}, 1, NULL));
    /* no entries: nothing */
    ck_assert_ptr_null(match(r, "test-domain", NULL, 0, NULL));
    ck_assert_ptr_null(M1(r, "key1", "something"));
    /* a node without rate_limit answers nothing itself */
    ck_assert_ptr_null(M1(r, "key1", "value1"));
    /* deeper than the rules go: nothing */
    ck_assert_ptr_null(M2(r, "key2", "value2", "subkey", "subvalue"));
    /* key5/value5 has children, none for this value: nothing, not key5's */
    ck_assert_ptr_null(M2(r, "key5", "value5", "subkey5", "subvalue"));
    m = M2(r, "key1", "value1", "subkey1", "something");
    ck_assert_uint_eq(rpu(m), 5);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_SECOND);
    ck_assert_str_eq(m->label, "key1_value1.subkey1");
    m = M2(r, "key1", "value1", "subkey1", "subvalue1");
    ck_assert_uint_eq(rpu(m), 10);
    ck_assert_str_eq(m->label, "key1_value1.subkey1_subvalue1");
    m = M1(r, "key2", "something");
    ck_assert_uint_eq(rpu(m), 20);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_MINUTE);
    ck_assert_str_eq(m->label, "key2");
    m = M1(r, "key2", "value2");
    ck_assert_uint_eq(rpu(m), 30);
    ck_assert_str_eq(m->label, "key2_value2");
    /* an exact value without a limit shadows the key's: no limit */
    ck_assert_ptr_null(M1(r, "key2", "value3"));
    m = M1(r, "key3", "foo");
    ck_assert_uint_eq(rpu(m), 1);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_HOUR);
    ck_assert_ptr_null(m->limits[0].name);
    m = M1(r, "key4", "foo");
    ck_assert_str_eq(m->limits[0].name, "key4_rate_limit");
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_DAY);
    /* key5/value5's own limit at depth 1, its child's at depth 2 */
    ck_assert_uint_eq(rpu(M1(r, "key5", "value5")), 15);
    ck_assert_uint_eq(rpu(M2(r, "key5", "value5", "subkey5", "subvalue5")), 25);
    m = M1(r, "key6", "foo");
    ck_assert_ptr_nonnull(m);
    ck_assert(m->unlimited);
    ck_assert_ptr_null(m->policy);
    m = M1(r, "key7", "unspecified_value");
    ck_assert(m->detailed_metric && m->dynamic_label);
    /* a rule written with a unit: a fixed window of it, aligned to the epoch */
    m = M1(r, "key2", "x");
    ck_assert_ptr_nonnull(m->policy);
    ck_assert_uint_eq(m->policy->nlimits, 1);
    ck_assert_int_eq(m->policy->limits[0].algo, RL_ALGO_FIXED_WINDOW);
    ck_assert_int_eq(m->policy->limits[0].align, RL_ALIGN_EPOCH);
    ck_assert_int_eq(m->policy->limits[0].window_ms, 60000);
    ck_assert_int_eq(m->policy->limits[0].limit, 20);
    ck_assert(m->limits[0].unit_form);
    /* a key is matched as a whole: "key" is not "key2" */
    ck_assert_ptr_null(M1(r, "key", "2"));
    ck_assert_ptr_null(M1(r, "key2_value2", ""));
    rls_rules_free(r);
}
END_TEST

/* envoyproxy/ratelimit's test/config/wildcard.yaml */
static const char wildcard_config[] = "domain: test-domain\n"
                                      "descriptors:\n"
                                      "  - key: wild\n"
                                      "    value: foo*\n"
                                      "    rate_limit:\n"
                                      "      unit: minute\n"
                                      "      requests_per_unit: 20\n"
                                      "  - key: noWild\n"
                                      "    value: foo\n"
                                      "    rate_limit:\n"
                                      "      unit: minute\n"
                                      "      requests_per_unit: 20\n"
                                      "  - key: noVal\n"
                                      "    rate_limit:\n"
                                      "      unit: minute\n"
                                      "      requests_per_unit: 20\n"
                                      "  - key: midWild\n"
                                      "    value: bar*b\n"
                                      "    rate_limit:\n"
                                      "      unit: minute\n"
                                      "      requests_per_unit: 20\n"
                                      "  - key: multiWild\n"
                                      "    value: foo*bar*baz\n"
                                      "    rate_limit:\n"
                                      "      unit: minute\n"
                                      "      requests_per_unit: 10\n"
                                      "  - key: nestedWild\n"
                                      "    value: val1\n"
                                      "    descriptors:\n"
                                      "      - key: wild\n"
                                      "        value: goo*\n"
                                      "        rate_limit:\n"
                                      "          unit: minute\n"
                                      "          requests_per_unit: 20\n";

START_TEST(wildcards_match_as_envoyproxy_ratelimit)
{
    struct rls_rules *r = load_ok(wildcard_config);
    const struct rls_rule *w1 = M1(r, "wild", "foo1");

    ck_assert_ptr_nonnull(w1);
    ck_assert_ptr_eq(w1, M1(r, "wild", "foo2"));
    ck_assert_ptr_eq(w1, M1(r, "wild", "foo"));
    ck_assert_str_eq(w1->label, "wild_foo*");
    ck_assert_str_eq(M2(r, "nestedWild", "val1", "wild", "goo2")->label,
                     "nestedWild_val1.wild_goo*");
    ck_assert_ptr_null(M1(r, "wild", "bar"));
    ck_assert_ptr_null(M1(r, "wild", "xfoo"));
    /* a value without '*' is literal */
    ck_assert_ptr_null(M1(r, "noWild", "foo1"));
    ck_assert_ptr_nonnull(M1(r, "noWild", "foo"));
    /* middle: prefix and suffix, '*' may be empty */
    ck_assert_ptr_nonnull(M1(r, "midWild", "barab"));
    ck_assert_ptr_nonnull(M1(r, "midWild", "bar123b"));
    ck_assert_ptr_nonnull(M1(r, "midWild", "barb"));
    ck_assert_ptr_null(M1(r, "midWild", "bara"));
    ck_assert_ptr_null(M1(r, "midWild", "xbarb"));
    /* prefix and suffix may not overlap */
    ck_assert_ptr_null(M1(r, "midWild", "bar"));
    /* several: in order */
    ck_assert_ptr_nonnull(M1(r, "multiWild", "foo123bar456baz"));
    ck_assert_ptr_nonnull(M1(r, "multiWild", "foobarbaz"));
    ck_assert_ptr_null(M1(r, "multiWild", "foo123baz"));
    ck_assert_ptr_null(M1(r, "multiWild", "bar456baz"));
    ck_assert_ptr_null(M1(r, "multiWild", "foobazbar"));
    rls_rules_free(r);
}
END_TEST

/* Exact first, then wildcards in file order, then the key alone; a wildcard
 * with share_threshold names its pattern for the count. */
START_TEST(exact_then_wildcards_in_order_then_key)
{
    static const char y[] = "domain: test-domain\n"
                            "descriptors:\n"
                            "  - {key: path, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
                            "  - {key: path, value: /api/*, rate_limit: {unit: minute, "
                            "requests_per_unit: 2}}\n"
                            "  - {key: path, value: /api/v1*, share_threshold: true,\n"
                            "     rate_limit: {unit: minute, requests_per_unit: 3}}\n"
                            "  - {key: path, value: /api/v1/health, rate_limit: {unit: minute, "
                            "requests_per_unit: 4}}\n";
    struct rls_rules *r = load_ok(y);
    const struct rls_str *shared[1];
    const struct rls_rule *m;

    ck_assert_uint_eq(rpu(M1(r, "path", "/api/v1/health")), 4);
    /* the first wildcard of the file wins, though the second is longer */
    m = match(r, "test-domain", (struct kv[]){{"path", "/api/v1/users"}}, 1, shared);
    ck_assert_uint_eq(rpu(m), 2);
    ck_assert_ptr_null(shared[0]);
    ck_assert_uint_eq(rpu(M1(r, "path", "/other")), 1);
    ck_assert_uint_eq(rpu(M1(r, "path", "")), 1);
    rls_rules_free(r);

    r = load_ok("domain: test-domain\n"
                "descriptors:\n"
                "  - {key: path, value: /api/v1*, share_threshold: true,\n"
                "     rate_limit: {unit: minute, requests_per_unit: 3}}\n");
    m = match(r, "test-domain", (struct kv[]){{"path", "/api/v1/users"}}, 1, shared);
    ck_assert_uint_eq(rpu(m), 3);
    ck_assert_ptr_nonnull(shared[0]);
    ck_assert_int_eq((int)shared[0]->len, 8);
    ck_assert(memcmp(shared[0]->p, "/api/v1*", 8) == 0);
    rls_rules_free(r);
}
END_TEST

/* A nested rule only at the depth of the descriptor; a shared wildcard at a
 * parent level names its pattern for the rule found below it. */
START_TEST(nested_rules_only_at_full_depth)
{
    static const char y[] =
        "domain: test-domain\n"
        "descriptors:\n"
        "  - key: tenant\n"
        "    value: t*\n"
        "    share_threshold: true\n"
        "    rate_limit: {unit: hour, requests_per_unit: 100}\n"
        "    descriptors:\n"
        "      - key: user\n"
        "        rate_limit: {unit: minute, requests_per_unit: 10}\n"
        "        descriptors:\n"
        "          - {key: op, value: write, rate_limit: {unit: second, requests_per_unit: 1}}\n";
    struct rls_rules *r = load_ok(y);
    const struct rls_str *shared[3];
    const struct rls_rule *m;

    ck_assert_uint_eq(rpu(M1(r, "tenant", "t1")), 100);
    m = match(r, "test-domain", (struct kv[]){{"tenant", "t1"}, {"user", "u"}}, 2, shared);
    ck_assert_uint_eq(rpu(m), 10);
    ck_assert_ptr_nonnull(shared[0]);
    ck_assert_ptr_null(shared[1]);
    ck_assert_uint_eq(rpu(match(r, "test-domain",
                                (struct kv[]){{"tenant", "t1"}, {"user", "u"}, {"op", "write"}},
                                3, NULL)),
                      1);
    /* no rule for op=read at depth 3; depth 2's does not apply */
    ck_assert_ptr_null(match(r, "test-domain",
                             (struct kv[]){{"tenant", "t1"}, {"user", "u"}, {"op", "read"}}, 3,
                             NULL));
    /* entries in another order are another descriptor */
    ck_assert_ptr_null(M2(r, "user", "u", "tenant", "t1"));
    ck_assert_ptr_null(M2(r, "tenant", "x1", "user", "u"));
    rls_rules_free(r);
}
END_TEST

/* GET /admin/status's limits of a metrics name: the one rule that has it,
 * by its metrics id once known; none for a name of a request's values. */
START_TEST(a_rule_found_by_its_metrics_name)
{
    static const char y[] =
        "domain: test-domain\n"
        "descriptors:\n"
        "  - key: tenant\n"
        "    descriptors:\n"
        "      - key: user\n"
        "        rate_limit: {unit: minute, requests_per_unit: 10}\n"
        "  - key: tag\n"
        "    detailed_metric: true\n"
        "    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    struct rls_rules *r = load_ok(y);
    const struct rls_domain *d = rls_rules_domain(r, "test-domain", 11);
    struct rls_rule *m = (struct rls_rule *)M2(r, "tenant", "t", "user", "u");
    const struct rls_rule *tag = M1(r, "tag", "x");

    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_eq(rls_rules_by_label(d, m->label, strlen(m->label), -1), m);
    /* its parent counts nothing: no limit, never found */
    ck_assert_ptr_null(rls_rules_by_label(d, m->parent->label, strlen(m->parent->label), -1));
    ck_assert_ptr_null(rls_rules_by_label(d, "tenant.nope", 11, -1));
    ck_assert_ptr_null(rls_rules_by_label(NULL, m->label, strlen(m->label), -1));
    /* a detailed_metric rule's names are its requests' */
    ck_assert_ptr_nonnull(tag);
    ck_assert_ptr_null(rls_rules_by_label(d, tag->label, strlen(tag->label), -1));
    /* its metrics id known: found by it, whatever the name asked */
    m->stat_id = 7;
    ck_assert_ptr_eq(rls_rules_by_label(d, "", 0, 7), m);
    ck_assert_ptr_null(rls_rules_by_label(d, m->label, strlen(m->label), 8));
    rls_rules_free(r);
}
END_TEST

/* Beyond envoyproxy/ratelimit, in the same files. */
START_TEST(algorithm_window_burst_and_several_limits)
{
    static const char y[] =
        "domain: d\n"
        "descriptors:\n"
        "  - key: a\n"
        "    rate_limit: {algorithm: token_bucket, window: 90s, requests_per_unit: 30, burst: "
        "60}\n"
        "  - key: b\n"
        "    mode: hybrid\n"
        "    sync_interval: 100ms\n"
        "    rate_limits:\n"
        "      - {unit: second, requests_per_unit: 10, name: per_second}\n"
        "      - {algorithm: sliding_window_log, unit: minute, requests_per_unit: 100}\n"
        "      - {window: 1d, requests_per_unit: 1000, align: first}\n"
        "  - key: c\n"
        "    rate_limit: {window: 60000, requests_per_unit: 5}\n"
        "  - key: z\n"
        "    rate_limit: {unit: WEEK}\n"
        "  - key: u\n"
        "    count_over_limit: false\n"
        "    rate_limit: {unit: hour, requests_per_unit: 1000000000000000}\n"
        "  - key: t\n"
        "    count_over_limit: true\n"
        "    rate_limit: {algorithm: token_bucket, window: 1h, requests_per_unit: 10}\n";
    struct rls_rules *r = load_ok(y);
    const struct rls_rule *m;

    m = match(r, "d", (struct kv[]){{"a", "x"}}, 1, NULL);
    ck_assert_int_eq(m->policy->limits[0].algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert_int_eq(m->policy->limits[0].window_ms, 90000);
    ck_assert_int_eq(m->policy->limits[0].burst, 60);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_UNKNOWN);
    ck_assert(!m->limits[0].unit_form);
    m = match(r, "d", (struct kv[]){{"b", "x"}}, 1, NULL);
    ck_assert_uint_eq(m->policy->nlimits, 3);
    ck_assert_int_eq(m->policy->mode, RL_MODE_HYBRID);
    ck_assert_int_eq(m->policy->sync_interval_ms, 100);
    ck_assert_str_eq(m->policy->name, "per_second");
    ck_assert_int_eq(m->policy->limits[1].algo, RL_ALGO_SLIDING_WINDOW_LOG);
    ck_assert_int_eq(m->policy->limits[2].window_ms, 86400000);
    ck_assert_int_eq(m->policy->limits[2].align, RL_ALIGN_FIRST);
    ck_assert_int_eq(m->limits[2].unit, RLS_UNIT_DAY);
    ck_assert_uint_eq(m->nnames, 1);
    /* a window of one unit is reported in it */
    m = match(r, "d", (struct kv[]){{"c", "x"}}, 1, NULL);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_MINUTE);
    ck_assert_int_eq(m->policy->limits[0].align, RL_ALIGN_EPOCH);
    /* no requests_per_unit: 0, every hit over (a way to block) */
    m = match(r, "d", (struct kv[]){{"z", "x"}}, 1, NULL);
    ck_assert_uint_eq(m->zero, 1);
    ck_assert_int_eq(m->limits[0].unit, RLS_UNIT_WEEK);
    ck_assert_int_eq(m->policy->limits[0].window_ms, 7 * 86400000LL);
    /* count_over_limit: by default, only where every limit is a unit's */
    ck_assert(m->count_over && !m->count_set);
    ck_assert(!match(r, "d", (struct kv[]){{"a", "x"}}, 1, NULL)->count_over);
    ck_assert(!match(r, "d", (struct kv[]){{"b", "x"}}, 1, NULL)->count_over);
    ck_assert(!match(r, "d", (struct kv[]){{"c", "x"}}, 1, NULL)->count_over);
    m = match(r, "d", (struct kv[]){{"u", "x"}}, 1, NULL);
    ck_assert(!m->count_over && m->count_set);
    ck_assert_uint_eq(m->limits[0].requests_per_unit, 1000000000000000ULL);
    ck_assert_int_eq(m->policy->limits[0].limit, 1000000000000000LL);
    m = match(r, "d", (struct kv[]){{"t", "x"}}, 1, NULL);
    ck_assert(m->count_over && m->count_set);
    rls_rules_free(r);
}
END_TEST

/* ---- validation: envoyproxy/ratelimit's errors, then ours ------------------- */

START_TEST(its_validation_errors)
{
    /* test/config/misspelled_key.yaml, misspelled_key2.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
                  (const char *const[]){"5: descriptors[0].ratelimit: unknown key"}, 1);
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
                  (const char *const[]){
                      "7: descriptors[0].rate_limit.requestsperunit: unknown key"},
                  1);
    /* duplicate_key.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n"
                  "  - key: key1\n    value: value1\n",
                  (const char *const[]){"6: descriptors: duplicate descriptor composite key "
                                        "'key1_value1' (line 3 too)"},
                  1);
    /* the key alone twice, a nested pair twice */
    expect_errors("domain: d\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n"
                  "      - {key: c, value: '*x'}\n      - {key: c, value: '*x'}\n  - key: a\n",
                  (const char *const[]){
                      "7: descriptors[1].descriptors: duplicate descriptor composite key "
                      "'b.c_*x' (line 6 too)",
                      "8: descriptors: duplicate descriptor composite key 'a' (line 3 too)"},
                  2);
    /* unlimited_with_unit.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n"
                  "      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
                  (const char *const[]){
                      "6: descriptors[0].rate_limit.unit: should not specify rate limit unit "
                      "when unlimited"},
                  1);
    expect_errors("domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n"
                  "      unlimited: true\n      window: 1m\n",
                  (const char *const[]){
                      "5: descriptors[0].rate_limit: an unlimited rate limit counts nothing"},
                  1);
    /* empty_domain.yaml, a domain of "" */
    expect_errors("descriptors:\n",
                  (const char *const[]){"1: domain: config file cannot have empty domain"}, 1);
    expect_errors("domain: \"\"\ndescriptors: []\n",
                  (const char *const[]){"1: domain: config file cannot have empty domain"}, 1);
    expect_errors("", (const char *const[]){"1: config file cannot have empty domain"}, 1);
    /* empty_key.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - value: value1\n",
                  (const char *const[]){"3: descriptors[0]: descriptor has empty key"}, 1);
    /* replaces_empty.yaml, replaces_self.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    descriptors:\n      - key: subkey1\n        rate_limit:\n"
                  "          name: self\n          replaces:\n            - name:\n"
                  "          unit: second\n          requests_per_unit: 5\n",
                  (const char *const[]){"10: descriptors[0].descriptors[0].rate_limit."
                                        "replaces[0].name: should not have an empty replaces "
                                        "entry"},
                  1);
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    descriptors:\n      - key: subkey1\n        rate_limit:\n"
                  "          name: self\n          replaces:\n            - name: self\n"
                  "          unit: second\n          requests_per_unit: 5\n",
                  (const char *const[]){"10: descriptors[0].descriptors[0].rate_limit."
                                        "replaces[0].name: replaces should not contain name of "
                                        "same descriptor"},
                  1);
    /* bad_limit_unit.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
                  (const char *const[]){"6: descriptors[0].rate_limit.unit: invalid rate "
                                        "limit unit"},
                  1);
    /* bad_yaml.yaml */
    expect_errors("'''\n", (const char *const[]){"2:1: not YAML: "}, 1);
    /* non_map_list.yaml */
    expect_errors("domain: test-domain\ndescriptors:\n  - a\n  - b\n",
                  (const char *const[]){"3: descriptors[0]: must be a mapping",
                                        "4: descriptors[1]: must be a mapping"},
                  2);
    /* non_string_key.yaml: 0.25 is no key of ours */
    expect_errors("0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                  "    rate_limit:\n      unit: day\n      requests_per_unit: 5\n",
                  (const char *const[]){"1: 0.25: unknown key",
                                        "1: domain: config file cannot have empty domain"},
                  2);
    /* share_threshold.yaml's rule: only with a wildcard */
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    value: b\n"
                  "    share_threshold: true\n",
                  (const char *const[]){"5: descriptors[0]: share_threshold can only be used "
                                        "with wildcard values"},
                  1);
}
END_TEST

START_TEST(our_validation_errors)
{
    expect_errors("domain: d\ndescriptors:\n  - key: a\n"
                  "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                  "    rate_limits: [{unit: hour, requests_per_unit: 9}]\n",
                  (const char *const[]){"5: descriptors[0]: give rate_limit or rate_limits"},
                  1);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n"
                  "    rate_limit: {unit: minute, window: 1m, requests_per_unit: 5}\n",
                  (const char *const[]){"4: descriptors[0].rate_limit: give unit or window"},
                  1);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n",
                  (const char *const[]){"4: descriptors[0].rate_limit: invalid rate limit unit "
                                        "'': give unit"},
                  1);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n"
                  "      - {unit: minute, requests_per_unit: 5}\n"
                  "      - {window: 60s, requests_per_unit: 9}\n"
                  "      - {unlimited: true}\n",
                  (const char *const[]){"6: descriptors[0].rate_limits[1]: same algorithm and "
                                        "window as rate_limits[0]",
                                        "7: descriptors[0].rate_limits[2]: unlimited: only in "
                                        "rate_limit"},
                  2);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    rate_limits: []\n",
                  (const char *const[]){"4: descriptors[0].rate_limits: must be a list of 1..8"},
                  1);
    expect_errors(
        "domain: d\ndescriptors:\n"
        "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, burst: 9}\n"
        "  - key: b\n    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 5, "
        "align: epoch}\n"
        "  - key: c\n    rate_limit: {algorithm: leaky, unit: minute}\n"
        "  - key: d\n    rate_limit: {unit: minute, requests_per_unit: -1}\n"
        "  - key: e\n    rate_limit: {unit: minute, requests_per_unit: 1000000000000001}\n"
        "  - key: f\n    rate_limit: {unit: minute, requests_per_unit: '5'}\n"
        "  - key: g\n    rate_limit: {window: 5x, requests_per_unit: 5}\n"
        "  - key: h\n    shadow_mode: maybe\n"
        "  - key: i\n    rate_limit: {algorithm: sliding_window_log, unit: minute, "
        "requests_per_unit: 2000000000}\n"
        "  - key: j\n    count_over_limit: maybe\n",
        (const char *const[]){
            "4: descriptors[0].rate_limit: burst: only token_bucket and gcra",
            "6: descriptors[1].rate_limit: align: only fixed_window",
            "8: descriptors[2].rate_limit.algorithm: must be one of fixed_window",
            "10: descriptors[3].rate_limit.requests_per_unit: must be an integer "
            "0..1000000000000000",
            "12: descriptors[4].rate_limit.requests_per_unit: must be at most 1000000000000000",
            "14: descriptors[5].rate_limit.requests_per_unit: must be an integer",
            "16: descriptors[6].rate_limit.window: must be a duration",
            "18: descriptors[7].shadow_mode: must be true or false",
            "20: descriptors[8].rate_limit: requests_per_unit: at most 1000000000 with "
            "sliding_window_log",
            "22: descriptors[9].count_over_limit: must be true or false",
        },
        10);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    mode: hybrid\n"
                  "  - key: b\n    sync_interval: 1s\n"
                  "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                  "  - {key: c, mode: fast}\n",
                  (const char *const[]){
                      "4: descriptors[0]: mode: only a rule that counts",
                      "6: descriptors[1]: sync_interval: only a rule with mode: hybrid",
                      "8: descriptors[2].mode: must be exact or hybrid"},
                  3);
    /* a known key in the wrong place (envoyproxy/ratelimit's flat list of
     * keys lets it pass, and ignores it) */
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    unit: minute\n"
                  "    rate_limit: {unit: hour, requests_per_unit: 1, shadow_mode: true}\n",
                  (const char *const[]){"4: descriptors[0].unit: unknown key",
                                        "5: descriptors[0].rate_limit.shadow_mode: unknown key"},
                  2);
    /* keys twice, a key that is not a string, a top level that is a list */
    expect_errors("domain: d\ndomain: e\n",
                  (const char *const[]){"2: domain: given twice (line 1 too)"}, 1);
    expect_errors("domain: d\ndescriptors:\n  - key: a\n    ? [x]\n    : 1\n",
                  (const char *const[]){"4: descriptors[0]: a key must be a string"}, 1);
    expect_errors("- a\n- b\n", (const char *const[]){"1: must be a mapping of domain"}, 1);
    /* a second document: one domain per file */
    expect_errors("domain: d\n---\ndomain: e\n",
                  (const char *const[]){"3: a second YAML document"}, 1);
    /* an empty one after it is nothing */
    rls_rules_free(load_ok("domain: d\n---\n"));
}
END_TEST

/* Aliases make a tree of a small file: walked up to a bound, never expanded
 * without one; nesting too deep is refused by name. */
START_TEST(aliases_and_depth_are_bounded)
{
    char *y = malloc(1 << 20), *p = y;
    struct rl_errors errs = {0};
    char *file;

    /* 2^40 descriptors through 40 levels of aliases */
    p += sprintf(p, "domain: d\nx0: &a0 [{key: k, rate_limit: {unit: second}}, "
                    "{key: l, rate_limit: {unit: second}}]\n");
    for (int i = 1; i < 40; i++)
        p += sprintf(p, "x%d: &a%d [{key: k, descriptors: *a%d}, {key: l, descriptors: *a%d}]\n",
                     i, i, i - 1, i - 1);
    p += sprintf(p, "descriptors: *a39\n");
    ck_assert_ptr_null(load_text(y, &errs, &file));
    ck_assert_uint_ge(errs.n, 1);
    /* the x keys are unknown, and the walk stops at its bound */
    {
        int bounded = 0;
        for (size_t i = 0; i < errs.n; i++)
            bounded |= strstr(errs.msg[i], "nested deeper than 32") != NULL ||
                       strstr(errs.msg[i], "more than") != NULL;
        ck_assert(bounded);
    }
    errors_free(&errs);
    free(file);

    p = y;
    p += sprintf(p, "domain: d\ndescriptors:\n");
    for (int i = 0; i < 40; i++)
        p += sprintf(p, "%*s- key: k%d\n%*s  descriptors:\n", 2 * i + 2, "", i, 2 * i + 2, "");
    ck_assert_ptr_null(load_text(y, &errs, &file));
    ck_assert_uint_eq(errs.n, 1);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "descriptors nested deeper than 32 levels"));
    errors_free(&errs);
    free(file);
    free(y);
}
END_TEST

/* YAML's scalars as envoyproxy/ratelimit's decoder reads them: numbers and
 * booleans into strings as written, YAML 1.1 integers and booleans. */
START_TEST(scalars_as_yaml_reads_them)
{
    struct rls_rules *r = load_ok("domain: 123\n"
                                  "descriptors:\n"
                                  "  - {key: code, value: 404, rate_limit: {unit: Minute, "
                                  "requests_per_unit: 0x10}}\n"
                                  "  - {key: flag, value: true, shadow_mode: yes, rate_limit: "
                                  "{unit: HOUR, requests_per_unit: 1_000}}\n"
                                  "  - {key: oct, value: ~, rate_limit: {unit: day, "
                                  "requests_per_unit: 010}}\n");
    ck_assert_ptr_nonnull(rls_rules_domain(r, "123", 3));
    ck_assert_uint_eq(rpu(match(r, "123", (struct kv[]){{"code", "404"}}, 1, NULL)), 16);
    ck_assert_uint_eq(rpu(match(r, "123", (struct kv[]){{"flag", "true"}}, 1, NULL)), 1000);
    ck_assert(match(r, "123", (struct kv[]){{"flag", "true"}}, 1, NULL)->shadow_mode);
    /* a null value is no value: the key alone, 010 is octal */
    ck_assert_uint_eq(rpu(match(r, "123", (struct kv[]){{"oct", "x"}}, 1, NULL)), 8);
    rls_rules_free(r);
}
END_TEST

/* ---- files ------------------------------------------------------------------- */

/* A directory: *.yaml and *.yml, subdirectories too, names starting with '.'
 * skipped (a ConfigMap's ..data and its timestamped directory), one domain
 * in two files refused, naming both. */
START_TEST(a_directory_as_a_configmap_mounts_it)
{
    const char *files[] = {
        "..2024_01_01", NULL,
        "..2024_01_01/a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, "
                               "requests_per_unit: 1}}]\n",
        "b.yml", "domain: b\n",
        "notes.txt", "not: yaml: at all: [\n",
        ".hidden.yaml", "domain: a\n",
        "sub", NULL,
        "sub/c.yaml", "domain: c\n",
        NULL};
    char *dir = mkdir_with(files), link1[512], link2[512], target[512];
    struct rl_errors errs = {0};
    struct rls_rules *r = NULL;

    /* ..data -> ..2024_01_01, a.yaml -> ..data/a.yaml */
    snprintf(link1, sizeof(link1), "%s/..data", dir);
    ck_assert_int_eq(symlink("..2024_01_01", link1), 0);
    snprintf(link2, sizeof(link2), "%s/a.yaml", dir);
    ck_assert_int_eq(symlink("..data/a.yaml", link2), 0);
    ck_assert_int_eq(rls_rules_load(dir, uid, &r, &errs), RL_OK);
    ck_assert_uint_eq(r->ndomains, 3);
    ck_assert_uint_eq(r->nfiles, 3);
    ck_assert_ptr_nonnull(rls_rules_domain(r, "a", 1));
    ck_assert_ptr_nonnull(rls_rules_domain(r, "b", 1));
    ck_assert_ptr_nonnull(rls_rules_domain(r, "c", 1));
    rls_rules_free(r);

    /* duplicate_domain.yaml next to a file of the same domain */
    snprintf(target, sizeof(target), "%s/sub/dup.yaml", dir);
    {
        FILE *f = fopen(target, "w");
        fputs("domain: b\ndescriptors:\n", f);
        fclose(f);
    }
    ck_assert_int_eq(rls_rules_load(dir, uid, &r, &errs), RL_ERR);
    ck_assert_uint_eq(errs.n, 1);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "/sub/dup.yaml: domain: duplicate domain 'b'"));
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "/b.yml has it"));
    errors_free(&errs);
    /* a file that is not there */
    ck_assert_int_eq(rls_rules_load("/nonexistent/rules.yaml", uid, &r, &errs), RL_ERR);
    ck_assert_str_eq(errs.msg[0], "/nonexistent/rules.yaml: No such file or directory");
    errors_free(&errs);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* rls.config is read by config_validate with the rest: its problems come
 * with the config's (`ratelimitd -t` prints them together), a config without
 * it has no rules, and validating again reads the files again. */
START_TEST(config_validate_reads_the_rule_files)
{
    const char *files[] = {"rules.yaml", "domain: d\ndescriptors: [{key: a}]\n", NULL};
    char *dir = mkdir_with(files), cfgpath[600], json[1200];
    struct rl_errors errs = {0};
    struct rl_config *cfg = NULL;
    uint64_t hash;
    FILE *f;

    snprintf(cfgpath, sizeof(cfgpath), "%s/cfg.json", dir);
    snprintf(json, sizeof(json), "{\"rls\": {\"config\": \"%s/rules.yaml\"}}", dir);
    f = fopen(cfgpath, "w");
    fputs(json, f);
    fclose(f);
    ck_assert_int_eq(config_load_file(cfgpath, &cfg, &errs), RL_OK);
    ck_assert_ptr_null(cfg->rls.rules);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    ck_assert_ptr_nonnull(cfg->rls.rules);
    ck_assert_ptr_nonnull(rls_rules_domain(cfg->rls.rules, "d", 1));
    hash = cfg->hash;
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    ck_assert_uint_eq(cfg->hash, hash);
    config_unref(cfg);

    /* a bad rule file and a bad option: both reported */
    snprintf(json, sizeof(json),
             "{\"workers\": -1, \"rls\": {\"config\": \"%s/rules.yaml\", "
             "\"near_limit_ratio\": 2}}",
             dir);
    f = fopen(cfgpath, "w");
    fputs(json, f);
    fclose(f);
    snprintf(cfgpath + strlen(dir), 20, "/rules.yaml");
    f = fopen(cfgpath, "w");
    fputs("domain: d\ndescriptors: [{value: x}]\n", f);
    fclose(f);
    snprintf(cfgpath + strlen(dir), 20, "/cfg.json");
    ck_assert_int_eq(config_load_file(cfgpath, &cfg, &errs), RL_ERR);
    ck_assert_uint_eq(errs.n, 3);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "workers: must be between 0 and 256"));
    ck_assert_ptr_nonnull(strstr(errs.msg[1], "rls.near_limit_ratio: must be a number above 0"));
    ck_assert_ptr_nonnull(strstr(errs.msg[2], "/rules.yaml:2: descriptors[0]: descriptor has "
                                              "empty key"));
    errors_free(&errs);
    snprintf(json, sizeof(json), "{\"workers\": 1, \"rls\": {\"config\": \"%s/rules.yaml\"}}",
             dir);
    f = fopen(cfgpath, "w");
    fputs(json, f);
    fclose(f);
    ck_assert_int_eq(config_load_file(cfgpath, &cfg, &errs), RL_OK);
    ck_assert_int_eq(config_set_option(cfg, "listen", "localhost:1", "-l", &errs), RL_OK);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_ERR);
    ck_assert_uint_eq(errs.n, 2);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "listen: must be an address"));
    ck_assert_ptr_nonnull(strstr(errs.msg[1], "/rules.yaml:2: descriptors[0]: descriptor has "
                                              "empty key"));
    errors_free(&errs);
    config_unref(cfg);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* An alias counts as the nodes it names: a list of 2,000 names given as
 * `replaces` to 5,000 rules is 10,000,000 nodes, refused as it is read
 * (walked, it would keep 10 million names); metadata is skipped, so an
 * anchor in it names nothing. */
START_TEST(aliases_count_what_they_name)
{
    size_t cap = 8 << 20;
    char *y = malloc(cap), *p = y;
    struct rl_errors errs = {0};
    char *file;
    int found = 0;

    p += sprintf(p, "domain: d\nnames: &r [");
    for (int i = 0; i < 2000; i++)
        p += sprintf(p, "%s{name: n%d}", i ? ", " : "", i);
    p += sprintf(p, "]\ndescriptors:\n");
    for (int i = 0; i < 5000; i++)
        p += sprintf(p, "  - {key: k%d, rate_limit: {unit: second, replaces: *r}}\n", i);
    ck_assert_ptr_null(load_text(y, &errs, &file));
    for (size_t i = 0; i < errs.n; i++)
        found |= strstr(errs.msg[i], ": the YAML has more than 8000000 nodes (aliases counted") !=
                 NULL;
    ck_assert_msg(found, "first: %s", errs.n ? errs.msg[0] : "none");
    errors_free(&errs);
    free(file);

    expect_errors("domain: d\ndescriptors:\n  - key: a\n    metadata: &m {x: 1}\n"
                  "  - key: b\n    rate_limit: *m\n",
                  (const char *const[]){"6:17: alias *m names no anchor before it"}, 1);
    free(y);
}
END_TEST

/* Nesting is bounded as it is read, metadata's too: a file nested 100,000
 * deep is refused at the level past the bound, not loaded first. */
START_TEST(yaml_nesting_is_bounded_as_read)
{
    size_t deep = 100000;
    char *y = malloc(2 * deep + 64), *p = y;

    p += sprintf(p, "domain: d\ndescriptors:\n  - key: k\n    metadata: ");
    memset(p, '[', deep);
    memset(p + deep, ']', deep);
    strcpy(p + 2 * deep, "\n");
    expect_errors(y, (const char *const[]){"4:112: the YAML is nested deeper than 100 levels"}, 1);
    /* 100 levels in all are read */
    p = y + sprintf(y, "domain: d\ndescriptors:\n  - key: k\n    metadata: ");
    memset(p, '[', 97);
    memset(p + 97, ']', 97);
    strcpy(p + 2 * 97, "\n");
    rls_rules_free(load_ok(y));
    free(y);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("rls_rules");
    TCase *m = tcase_create("match"), *v = tcase_create("validate"), *f = tcase_create("files");

    /* the alias bomb walks to its bound: slow under valgrind */
    tcase_set_timeout(v, 300);
    tcase_add_test(m, basic_config_matches_as_envoyproxy_ratelimit);
    tcase_add_test(m, wildcards_match_as_envoyproxy_ratelimit);
    tcase_add_test(m, exact_then_wildcards_in_order_then_key);
    tcase_add_test(m, nested_rules_only_at_full_depth);
    tcase_add_test(m, algorithm_window_burst_and_several_limits);
    tcase_add_test(m, a_rule_found_by_its_metrics_name);
    tcase_add_test(v, its_validation_errors);
    tcase_add_test(v, our_validation_errors);
    tcase_add_test(v, aliases_and_depth_are_bounded);
    tcase_add_test(v, aliases_count_what_they_name);
    tcase_add_test(v, yaml_nesting_is_bounded_as_read);
    tcase_add_test(v, scalars_as_yaml_reads_them);
    tcase_add_test(f, a_directory_as_a_configmap_mounts_it);
    tcase_add_test(f, config_validate_reads_the_rule_files);
    suite_add_tcase(s, m);
    suite_add_tcase(s, v);
    suite_add_tcase(s, f);
    return rl_unit_run(s, CK_FORK_GETENV);
}
