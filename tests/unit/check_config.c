/*
 * check_config.c — the configuration: built-in defaults, a full file read
 * into the struct, every problem of a bad file reported with its exact path,
 * malformed JSON, options set from flags and environment, lookups and
 * reference counting.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"

#include "algo.h"
#include "config.h"
#include "period.h"
#include "netaddr.h"

/* ---- helpers ---------------------------------------------------------------- */

/* Write json to a fresh temporary file; the caller unlinks and frees. */
static char *
write_temp(const char *json)
{
    char tmpl[] = "/tmp/rl-check-config-XXXXXX";
    int fd = mkstemp(tmpl);
    size_t n = strlen(json);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, json, n), (ssize_t)n);
    ck_assert_int_eq(close(fd), 0);
    return strdup(tmpl);
}

/* Load json from a temporary file; *file keeps its name for messages. */
static int
load(const char *json, struct rl_config **cfg, struct rl_errors *errs, char **file)
{
    *file = write_temp(json);
    int rc = config_load_file(*file, cfg, errs);
    unlink(*file);
    if (rc != RL_OK)
        ck_assert_ptr_null(*cfg);
    return rc;
}

/* What `ratelimitd -t` does with a file: load it, then validate what loaded. */
static int
load_and_validate(const char *json, struct rl_config **cfg, struct rl_errors *errs,
                  char **file)
{
    if (load(json, cfg, errs, file) != RL_OK)
        return RL_ERR;
    if (config_validate(*cfg, errs) != RL_OK) {
        config_unref(*cfg);
        *cfg = NULL;
        return RL_ERR;
    }
    return RL_OK;
}

static void
dump_errors(const struct rl_errors *e)
{
    for (size_t i = 0; i < e->n; i++)
        fprintf(stderr, "  [%zu] %s\n", i, e->msg[i]);
}

struct want {
    const char *path;       /* exactly as reported */
    const char *what;       /* a fragment of the message after the path */
};

/*
 * Every message is "FILE: path: what"; each wanted path is reported exactly
 * once and nothing else is.
 */
static void
expect_errors(const struct rl_errors *e, const char *file, const struct want *w,
              size_t nw)
{
    char prefix[512];

    if (e->n != nw)
        dump_errors(e);
    ck_assert_msg(e->n == nw, "%zu problems reported, expected %zu", e->n, nw);
    snprintf(prefix, sizeof(prefix), "%s: ", file);
    for (size_t i = 0; i < e->n; i++)
        ck_assert_msg(strncmp(e->msg[i], prefix, strlen(prefix)) == 0,
                      "message does not start with the file: %s", e->msg[i]);
    for (size_t k = 0; k < nw; k++) {
        size_t hits = 0, at = 0;
        snprintf(prefix, sizeof(prefix), "%s: %s: ", file, w[k].path);
        for (size_t i = 0; i < e->n; i++) {
            if (strncmp(e->msg[i], prefix, strlen(prefix)) == 0) {
                hits++;
                at = i;
            }
        }
        if (hits != 1)
            dump_errors(e);
        ck_assert_msg(hits == 1, "\"%s\" reported %zu times, expected once", w[k].path,
                      hits);
        ck_assert_msg(strstr(e->msg[at] + strlen(prefix), w[k].what) != NULL,
                      "\"%s\" does not say \"%s\"", e->msg[at], w[k].what);
    }
}

/* json does not load: exactly the problems w say. */
static void
expect_refused(const char *json, const struct want *w, size_t nw)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, nw);
    errors_free(&errs);
    free(file);
}

static void
expect_cidr(const struct rl_cidr *c, int family, const char *addr, int prefix)
{
    uint8_t a[16] = {0};

    ck_assert_int_eq(inet_pton(family, addr, a), 1);
    ck_assert_int_eq(c->family, family);
    ck_assert_int_eq(c->prefix, prefix);
    ck_assert_mem_eq(c->addr, a, family == AF_INET ? 4 : 16);
}

static void
expect_limit(const struct rl_limit *l, enum rl_algo algo, int64_t limit,
             int64_t window_ms, int64_t burst)
{
    ck_assert_int_eq(l->algo, algo);
    ck_assert_int_eq(l->limit, limit);
    ck_assert_int_eq(l->window_ms, window_ms);
    ck_assert_int_eq(l->burst, burst);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The config `json` is refused with exactly the problems w says. */
static void
refused_with(const char *json, const struct want *w, size_t nw)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, nw);
    errors_free(&errs);
    free(file);
}

/* ---- defaults ------------------------------------------------------------------ */

static void
expect_defaults(const struct rl_config *cfg)
{
    ck_assert_str_eq(cfg->listen, "127.0.0.1:8080");
    ck_assert_int_eq(cfg->workers, 1);
    ck_assert_int_eq(cfg->backend, RL_BACKEND_REDIS);
    ck_assert_str_eq(cfg->redis.url, "redis://127.0.0.1:6379/0");
    ck_assert_int_eq(cfg->redis.timeout_ms, 50);
    ck_assert_int_eq(cfg->redis.connect_timeout_ms, 1000);
    ck_assert_str_eq(cfg->redis.key_prefix, "rl:");
    ck_assert_ptr_null(cfg->redis.username);
    ck_assert_ptr_null(cfg->redis.password);
    ck_assert_int_eq(cfg->failure_mode, RL_FAIL_OPEN);
    ck_assert_uint_eq(cfg->identity.n, 4);
    ck_assert_int_eq(cfg->identity.v[0].kind, RL_ID_BODY);
    ck_assert_int_eq(cfg->identity.v[1].kind, RL_ID_HEADER);
    ck_assert_str_eq(cfg->identity.v[1].header, "X-Api-Key");
    ck_assert_int_eq(cfg->identity.v[2].kind, RL_ID_FORWARDED);
    ck_assert_int_eq(cfg->identity.v[3].kind, RL_ID_PEER);
    ck_assert_uint_eq(cfg->trusted_proxies.n, 2);
    expect_cidr(&cfg->trusted_proxies.v[0], AF_INET, "127.0.0.0", 8);
    expect_cidr(&cfg->trusted_proxies.v[1], AF_INET6, "::1", 128);
    ck_assert_int_eq(cfg->max_body, 65536);
    ck_assert_int_eq(cfg->max_inflight, 10000);
    ck_assert_int_eq(cfg->shutdown_grace_ms, 10000);
    ck_assert_int_eq(cfg->log_level, RL_LOG_INFO);
    ck_assert_uint_eq(cfg->npolicies, 0);
}

START_TEST(defaults_built_in)
{
    struct rl_config *cfg = config_new_defaults();
    struct rl_errors errs = {0};

    expect_defaults(cfg);
    ck_assert_ptr_null(cfg->file);
    ck_assert_int_eq(cfg->refs, 1);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    ck_assert_uint_eq(errs.n, 0);
    config_unref(cfg);
}
END_TEST

START_TEST(defaults_empty_file)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate("{}\n", &cfg, &errs, &file), RL_OK);
    ck_assert_uint_eq(errs.n, 0);
    expect_defaults(cfg);
    ck_assert_str_eq(cfg->file, file);
    config_unref(cfg);
    free(file);
}
END_TEST

/* ---- a full valid file ---------------------------------------------------------------- */

static const char full_json[] =
    "{\n"
    "  \"listen\": \"[::1]:9090\",\n"
    "  \"workers\": 4,\n"
    "  \"backend\": \"memory\",\n"
    "  \"redis\": { \"url\": \"redis://svc:pw@10.0.0.1:6380/2\", \"timeout\": \"100ms\",\n"
    "             \"connect_timeout\": 2500, \"key_prefix\": \"app:\",\n"
    "             \"username\": \"svc2\", \"password\": \"pw2\" },\n"
    "  \"failure_mode\": \"local\",\n"
    "  \"identity\": [\"header:X-Client-Id\", \"peer\"],\n"
    "  \"trusted_proxies\": [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.168.1.1\"],\n"
    "  \"max_body\": \"1m\",\n"
    "  \"shutdown_grace\": \"2m\",\n"
    "  \"log_level\": \"debug\",\n"
    "  \"policies\": [\n"
    "    { \"name\": \"login\",\n"
    "      \"match\": { \"path_prefix\": \"/login\", \"methods\": [\"POST\"] },\n"
    "      \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": 5, \"window\": \"1s\", \"burst\": 10 },\n"
    "                  { \"algorithm\": \"fixed_window\", \"limit\": 100, \"window\": \"1h\" } ] },\n"
    "    { \"name\": \"api.v2_read-only\",\n"
    "      \"match\": { \"path_glob\": \"/api/*/items/?\", \"methods\": [\"get\", \"Head\", \"OPTIONS\"] },\n"
    "      \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 50, \"window\": 1500 },\n"
    "                  { \"algorithm\": \"sliding_window_log\", \"limit\": 7, \"window\": \"10s\" },\n"
    "                  { \"algorithm\": \"sliding_window_counter\", \"limit\": 1000, \"window\": \"1m\" } ],\n"
    "      \"shadow\": true,\n"
    "      \"identity\": [\"body\", \"header:X-User\", \"forwarded\"] },\n"
    "    { \"name\": \"exact\", \"match\": { \"path\": \"/health\" },\n"
    "      \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 1, \"window\": \"10s\" },\n"
    "                  { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1m\" } ],\n"
    "      \"shadow\": false },\n"
    "    { \"name\": \"default\",\n"
    "      \"limits\": [ { \"algorithm\": \"sliding_window_counter\", \"limit\": 100, \"window\": \"60s\" } ] }\n"
    "  ]\n"
    "}\n";

START_TEST(full_config_round_trips)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;
    const struct rl_policy *p;

    if (load_and_validate(full_json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_uint_eq(errs.n, 0);

    ck_assert_str_eq(cfg->file, file);
    ck_assert_str_eq(cfg->listen, "[::1]:9090");
    ck_assert_int_eq(cfg->workers, 4);
    ck_assert_int_eq(cfg->backend, RL_BACKEND_MEMORY);
    ck_assert_str_eq(cfg->redis.url, "redis://svc:pw@10.0.0.1:6380/2");
    ck_assert_int_eq(cfg->redis.timeout_ms, 100);
    ck_assert_int_eq(cfg->redis.connect_timeout_ms, 2500);
    ck_assert_str_eq(cfg->redis.key_prefix, "app:");
    ck_assert_str_eq(cfg->redis.username, "svc2");
    ck_assert_str_eq(cfg->redis.password, "pw2");
    ck_assert_int_eq(cfg->failure_mode, RL_FAIL_LOCAL);
    ck_assert_uint_eq(cfg->identity.n, 2);
    ck_assert_int_eq(cfg->identity.v[0].kind, RL_ID_HEADER);
    ck_assert_str_eq(cfg->identity.v[0].header, "X-Client-Id");
    ck_assert_int_eq(cfg->identity.v[1].kind, RL_ID_PEER);
    ck_assert_uint_eq(cfg->trusted_proxies.n, 3);
    expect_cidr(&cfg->trusted_proxies.v[0], AF_INET, "10.0.0.0", 8);
    expect_cidr(&cfg->trusted_proxies.v[1], AF_INET6, "2001:db8::", 32);
    expect_cidr(&cfg->trusted_proxies.v[2], AF_INET, "192.168.1.1", 32);
    ck_assert_int_eq(cfg->max_body, 1048576);
    ck_assert_int_eq(cfg->shutdown_grace_ms, 120000);
    ck_assert_int_eq(cfg->log_level, RL_LOG_DEBUG);

    ck_assert_uint_eq(cfg->npolicies, 4);

    p = &cfg->policies[0];
    ck_assert_str_eq(p->name, "login");
    ck_assert_ptr_null(p->match.path);
    ck_assert_str_eq(p->match.path_prefix, "/login");
    ck_assert_ptr_null(p->match.path_glob);
    ck_assert_uint_eq(p->match.methods, RL_M_POST);
    ck_assert_uint_eq(p->nlimits, 2);
    expect_limit(&p->limits[0], RL_ALGO_TOKEN_BUCKET, 5, 1000, 10);
    expect_limit(&p->limits[1], RL_ALGO_FIXED_WINDOW, 100, 3600000, 100);
    ck_assert_int_eq(p->shadow, 0);
    ck_assert_uint_eq(p->identity.n, 0);

    p = &cfg->policies[1];
    ck_assert_str_eq(p->name, "api.v2_read-only");
    ck_assert_ptr_null(p->match.path);
    ck_assert_ptr_null(p->match.path_prefix);
    ck_assert_str_eq(p->match.path_glob, "/api/*/items/?");
    ck_assert_uint_eq(p->match.methods, RL_M_GET | RL_M_HEAD | RL_M_OPTIONS);
    ck_assert_uint_eq(p->nlimits, 3);
    expect_limit(&p->limits[0], RL_ALGO_GCRA, 50, 1500, 50);          /* burst = limit */
    expect_limit(&p->limits[1], RL_ALGO_SLIDING_WINDOW_LOG, 7, 10000, 7);
    expect_limit(&p->limits[2], RL_ALGO_SLIDING_WINDOW_COUNTER, 1000, 60000, 1000);
    ck_assert_int_eq(p->shadow, 1);
    ck_assert_uint_eq(p->identity.n, 3);
    ck_assert_int_eq(p->identity.v[0].kind, RL_ID_BODY);
    ck_assert_int_eq(p->identity.v[1].kind, RL_ID_HEADER);
    ck_assert_str_eq(p->identity.v[1].header, "X-User");
    ck_assert_int_eq(p->identity.v[2].kind, RL_ID_FORWARDED);

    p = &cfg->policies[2];
    ck_assert_str_eq(p->name, "exact");
    ck_assert_str_eq(p->match.path, "/health");
    ck_assert_ptr_null(p->match.path_prefix);
    ck_assert_ptr_null(p->match.path_glob);
    ck_assert_uint_eq(p->match.methods, 0);
    ck_assert_uint_eq(p->nlimits, 2);
    expect_limit(&p->limits[0], RL_ALGO_FIXED_WINDOW, 1, 10000, 1);
    expect_limit(&p->limits[1], RL_ALGO_FIXED_WINDOW, 10, 60000, 10);
    ck_assert_int_eq(p->shadow, 0);

    p = &cfg->policies[3];
    ck_assert_str_eq(p->name, "default");
    ck_assert_ptr_null(p->match.path);
    ck_assert_ptr_null(p->match.path_prefix);
    ck_assert_ptr_null(p->match.path_glob);
    ck_assert_uint_eq(p->match.methods, 0);
    ck_assert_uint_eq(p->nlimits, 1);
    expect_limit(&p->limits[0], RL_ALGO_SLIDING_WINDOW_COUNTER, 100, 60000, 100);
    ck_assert_int_eq(p->shadow, 0);
    ck_assert_uint_eq(p->identity.n, 0);

    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(api_md_example_loads)
{
    /* The example of docs/API.md, verbatim: it must stay valid. */
    static const char json[] =
        "{\n"
        "  \"listen\": \"127.0.0.1:8080\",\n"
        "  \"workers\": 1,\n"
        "  \"backend\": \"redis\",\n"
        "  \"redis\": { \"url\": \"redis://127.0.0.1:6379/0\", \"timeout\": \"50ms\", \"connect_timeout\": \"1s\", \"key_prefix\": \"rl:\" },\n"
        "  \"failure_mode\": \"open\",\n"
        "  \"identity\": [\"body\", \"header:X-Api-Key\", \"forwarded\", \"peer\"],\n"
        "  \"trusted_proxies\": [\"127.0.0.0/8\", \"::1/128\"],\n"
        "  \"max_body\": \"64k\",\n"
        "  \"shutdown_grace\": \"10s\",\n"
        "  \"policies\": [\n"
        "    { \"name\": \"login\",\n"
        "      \"match\": { \"path_prefix\": \"/login\", \"methods\": [\"POST\"] },\n"
        "      \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": 5, \"window\": \"1s\", \"burst\": 10 },\n"
        "                  { \"algorithm\": \"fixed_window\", \"limit\": 100, \"window\": \"1h\" } ] },\n"
        "    { \"name\": \"default\",\n"
        "      \"limits\": [ { \"algorithm\": \"sliding_window_counter\", \"limit\": 100, \"window\": \"60s\" } ],\n"
        "      \"shadow\": false }\n"
        "  ]\n"
        "}\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    if (load_and_validate(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_uint_eq(cfg->npolicies, 2);
    ck_assert_str_eq(cfg->policies[1].name, "default");
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(comment_keys_skipped)
{
    static const char json[] =
        "{ \"_comment\": \"JSON has no comments\", \"workers\": 2,\n"
        "  \"redis\": { \"_why\": [1, 2], \"timeout\": \"20ms\" },\n"
        "  \"policies\": [ { \"_note\": {\"x\": 1}, \"name\": \"p\",\n"
        "    \"limits\": [ { \"_\": null, \"algorithm\": \"gcra\", \"limit\": 3, \"window\": \"1s\" } ] } ] }\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    if (load_and_validate(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(cfg->workers, 2);
    ck_assert_int_eq(cfg->redis.timeout_ms, 20);
    ck_assert_uint_eq(cfg->npolicies, 1);
    expect_limit(&cfg->policies[0].limits[0], RL_ALGO_GCRA, 3, 1000, 3);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(overrides_parsed)
{
    static const char json[] =
        "{ \"policies\": [ { \"name\": \"api\", \"match\": { \"path_prefix\": \"/api\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ],\n"
        "    \"overrides\": [\n"
        "      { \"identities\": [\"key:gold-key\", \"ip:10.0.0.7\", \"ip:2001:db8::/32\"],\n"
        "        \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 100, \"window\": \"1s\" },\n"
        "                    { \"algorithm\": \"fixed_window\", \"limit\": 5000, \"window\": \"1h\" } ] },\n"
        "      { \"identities\": [\"key:free\", \"ip:10.1.0.0/16\", \"key:10.0.0.7\"],\n"
        "        \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": 1, \"window\": \"1m\", \"burst\": 3 } ] } ] } ] }\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;
    const struct rl_policy *p, *o;

    if (load_and_validate(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    p = &cfg->policies[0];
    ck_assert_uint_eq(p->noverrides, 2);
    ck_assert_uint_eq(p->overrides[0].identities.n, 3);
    ck_assert_str_eq(p->overrides[0].identities.v[0], "key:gold-key");
    ck_assert_str_eq(p->overrides[0].identities.v[1], "ip:10.0.0.7");

    /* looked up by the typed identity of identity_resolve */
    o = policy_for(p, "k:gold-key", 10);
    ck_assert_ptr_ne(o, p);
    ck_assert_str_eq(o->name, "api");                   /* same name, same hash tag */
    ck_assert_str_eq(o->match.path_prefix, "/api");
    ck_assert_uint_eq(o->nlimits, 2);
    expect_limit(&o->limits[0], RL_ALGO_GCRA, 100, 1000, 100);
    expect_limit(&o->limits[1], RL_ALGO_FIXED_WINDOW, 5000, 3600000, 5000);
    ck_assert_uint_eq(o->noverrides, 0);
    ck_assert_ptr_eq(policy_for(p, "ip:10.0.0.7", 11), o);
    ck_assert_ptr_eq(policy_for(p, "ip:2001:db8:1::5", 16), o);

    const struct rl_policy *free_tier = policy_for(p, "k:free", 6);
    ck_assert_ptr_ne(free_tier, p);
    ck_assert_ptr_ne(free_tier, o);
    ck_assert_uint_eq(free_tier->nlimits, 1);
    expect_limit(&free_tier->limits[0], RL_ALGO_TOKEN_BUCKET, 1, 60000, 3);
    ck_assert_ptr_eq(policy_for(p, "ip:10.1.200.3", 13), free_tier);

    /* a key that looks like an address is a key: the address's override is
     * not its to claim (nor the other way round) */
    ck_assert_ptr_eq(policy_for(p, "k:10.0.0.7", 10), free_tier);
    ck_assert_ptr_eq(policy_for(p, "k:ip:10.0.0.7", 13), p);
    ck_assert_ptr_eq(policy_for(p, "ip:10.0.0.8", 11), p);
    ck_assert_ptr_eq(policy_for(p, "k:10.1.2.3", 10), p);
    ck_assert_ptr_eq(policy_for(p, "gold-key", 8), p);

    /* exact bytes only */
    ck_assert_ptr_eq(policy_for(p, "k:gold-ke", 9), p);
    ck_assert_ptr_eq(policy_for(p, "k:gold-keys", 11), p);
    ck_assert_ptr_eq(policy_for(p, "k:GOLD-KEY", 10), p);
    ck_assert_ptr_eq(policy_for(p, "k:free\0x", 8), p);
    ck_assert_ptr_eq(policy_for(p, "k:", 2), p);
    ck_assert_ptr_eq(policy_for(p, "", 0), p);
    /* the parent keeps its own limits */
    ck_assert_uint_eq(p->nlimits, 1);
    expect_limit(&p->limits[0], RL_ALGO_GCRA, 10, 1000, 10);
    config_unref(cfg);
    free(file);
}
END_TEST

/* Issue 24: address identities are networks, limits may key on identities
 * of their own, identity sources may be compound or trusted-only. */
START_TEST(networks_and_limit_identities_parsed)
{
    static const char json[] =
        "{ \"ipv6_prefix\": 56,\n"
        "  \"identity\": [\"trusted_header:X-User\", \"forwarded+body\", \"peer\"],\n"
        "  \"policies\": [ { \"name\": \"login\", \"ipv4_prefix\": 24,\n"
        "    \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 5, \"window\": \"1m\" },\n"
        "                { \"algorithm\": \"sliding_window_counter\", \"limit\": 3, \"window\": \"1m\",\n"
        "                  \"identity\": [\"forwarded+header:X-User+body\", \"peer+body\"] } ],\n"
        "    \"overrides\": [ { \"identities\": [\"ip:2001:db8::7\", \"ip:203.0.113.9\"],\n"
        "        \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 50, \"window\": \"1m\" } ] } ] },\n"
        "    { \"name\": \"plain\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] } ] }\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;
    const struct rl_policy *p, *o;
    const struct rl_identity_chain *li;

    if (load_and_validate(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(cfg->ipv4_prefix, 32);
    ck_assert_int_eq(cfg->ipv6_prefix, 56);
    ck_assert_uint_eq(cfg->identity.n, 3);
    ck_assert_int_eq(cfg->identity.v[0].kind, RL_ID_TRUSTED_HEADER);
    ck_assert_str_eq(cfg->identity.v[0].header, "X-User");
    ck_assert_ptr_null(cfg->identity.v[0].also);
    ck_assert_int_eq(cfg->identity.v[1].kind, RL_ID_FORWARDED);
    ck_assert_ptr_nonnull(cfg->identity.v[1].also);
    ck_assert_int_eq(cfg->identity.v[1].also->kind, RL_ID_BODY);
    ck_assert_ptr_null(cfg->identity.v[1].also->also);
    p = &cfg->policies[0];
    ck_assert_int_eq(p->fold4, 24);
    ck_assert_int_eq(p->fold6, 56);
    ck_assert_int_eq(p->limit_ids, 1);
    ck_assert_ptr_null(p->limits[0].identity);
    li = p->limits[1].identity;
    ck_assert_ptr_nonnull(li);
    ck_assert_uint_eq(li->n, 2);
    ck_assert_int_eq(li->v[0].kind, RL_ID_FORWARDED);
    ck_assert_int_eq(li->v[0].also->kind, RL_ID_HEADER);
    ck_assert_str_eq(li->v[0].also->header, "X-User");
    ck_assert_int_eq(li->v[0].also->also->kind, RL_ID_BODY);
    /* the other policy: the top-level networks, one identity */
    ck_assert_int_eq(cfg->policies[1].fold4, 32);
    ck_assert_int_eq(cfg->policies[1].fold6, 56);
    ck_assert_int_eq(cfg->policies[1].limit_ids, 0);
    /* override entries cut like the callers: an address stands for its network */
    o = policy_for(p, "ip:2001:db8::/56", 16);
    ck_assert_ptr_ne(o, p);
    ck_assert_int_eq(o->limit_ids, 1);
    ck_assert_int_eq(o->fold6, 56);
    ck_assert_ptr_eq(policy_for(p, "ip:203.0.113.0/24", 17), o);
    ck_assert_ptr_eq(policy_for(p, "ip:203.0.114.0/24", 17), p);
    ck_assert_ptr_eq(policy_for(p, "ip:2001:db8:0:100::/56", 22), p);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(networks_and_limit_identities_problems)
{
    static const char json[] =
        "{ \"ipv6_prefix\": 8, \"ipv4_prefix\": 33,\n"
        "  \"identity\": [\"body+\", \"peer+body+forwarded+header:X\", \"trusted_header:\"],\n"
        "  \"policies\": [ { \"name\": \"h\", \"mode\": \"hybrid\", \"ipv6_prefix\": 129,\n"
        "    \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 5, \"window\": \"1m\",\n"
        "                  \"identity\": [\"peer\"] } ] } ] }\n";
    static const struct want w[] = {
        {"ipv6_prefix", "between 16 and 128"},
        {"ipv4_prefix", "between 8 and 32"},
        {"identity[0]", "unknown identity source \"body+\""},
        {"identity[1]", "up to 3 of them joined by '+'"},
        {"identity[2]", "unknown identity source \"trusted_header:\""},
        {"policies[0].ipv6_prefix", "between 16 and 128"},
        {"policies[0].limits[0].identity", "a hybrid policy decides all its limits"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, RL_ARRAY_LEN(w));
    errors_free(&errs);
    free(file);
}
END_TEST

/* Patterns are matched against normalised paths: normalised at load too. */
START_TEST(patterns_normalised)
{
    static const char json[] =
        "{ \"policies\": [\n"
        "  { \"name\": \"a\", \"match\": { \"path\": \"//%61pi/./v1/x/../items\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ],\n"
        "    \"overrides\": [ { \"identities\": [\"key:k\"],\n"
        "      \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] } ] },\n"
        "  { \"name\": \"b\", \"match\": { \"path_prefix\": \"/v%31//\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"c\", \"match\": { \"path_glob\": \"/%7e*/x\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"d\", \"match\": { \"path_glob\": \"*.png\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] } ] }\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    if (load_and_validate(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_str_eq(cfg->policies[0].match.path, "/api/v1/items");
    /* the override's policy shares the normalised pattern */
    ck_assert_str_eq(cfg->policies[0].overrides[0].as_policy->match.path, "/api/v1/items");
    ck_assert_str_eq(cfg->policies[1].match.path_prefix, "/v1/");
    ck_assert_str_eq(cfg->policies[2].match.path_glob, "/~*/x");
    ck_assert_str_eq(cfg->policies[3].match.path_glob, "*.png");   /* not a path */
    /* the defaults of the request options */
    ck_assert_int_eq(cfg->request_headers, RL_REQHDR_AUTO);
    ck_assert_int_eq(config_request_headers(cfg), RL_REQHDR_ORIGINAL);
    /* forward_auth: what Traefik and Caddy send (issue 24) */
    cfg->forward_auth = 1;
    ck_assert_int_eq(config_request_headers(cfg), RL_REQHDR_FORWARDED);
    cfg->request_headers = RL_REQHDR_ORIGINAL;
    ck_assert_int_eq(config_request_headers(cfg), RL_REQHDR_ORIGINAL);
    ck_assert_int_eq(cfg->merge_slashes, 1);
    ck_assert_int_eq(cfg->bad_path, RL_BADPATH_REJECT);
    ck_assert_int_eq(cfg->reset_format, RL_RESET_DELTA);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(patterns_unnormalisable)
{
    static const char json[] =
        "{ \"merge_slashes\": false, \"policies\": [\n"
        "  { \"name\": \"a\", \"match\": { \"path\": \"/a%2Fb\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"b\", \"match\": { \"path_prefix\": \"/../b\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"c\", \"match\": { \"path_glob\": \"/c%\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"d\", \"match\": { \"path\": \"//d\" },\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] } ],\n"
        "  \"forwarded_request_headers\": \"x-original\", \"unnormalizable_path\": \"keep\",\n"
        "  \"x_ratelimit_reset\": \"unix\", \"partition_key\": \"short\" }\n";
    static const struct want w[] = {
        {"policies[0].match.path", "\"/a%2Fb\" cannot be normalised: an encoded '/' (%2F)"},
        {"policies[1].match.path_prefix", "cannot be normalised: a \"..\" above the root"},
        {"policies[2].match.path_glob", "cannot be normalised: a '%' not followed by two hex"},
        {"forwarded_request_headers", "must be one of original, forwarded"},
        {"unnormalizable_path", "must be one of reject, raw"},
        {"x_ratelimit_reset", "must be one of delta, epoch"},
        {"partition_key", "must be a secret of at least 16 bytes"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    config_unref(cfg);
    free(file);
}
END_TEST

/* What finalize derives: built at load, rebuilt by validate with the same
 * uids; metrics ids reach the overrides' policies. */
static int
name_length(const char *name)
{
    return (int)strlen(name);
}

START_TEST(derived_data_rebuilt)
{
    static const char json[] =
        "{ \"policies\": [ { \"name\": \"api\", \"mode\": \"hybrid\",\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ],\n"
        "    \"overrides\": [ { \"identities\": [\"key:gold\", \"ip:10.0.0.0/8\"],\n"
        "      \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": 5, \"window\": \"1s\" } ] } ] } ] }\n";
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    if (load(json, &cfg, &errs, &file) != RL_OK)
        dump_errors(&errs);
    ck_assert_ptr_nonnull(cfg);
    const struct rl_policy *p = &cfg->policies[0];
    uint64_t uid = p->uid, ouid = p->overrides[0].as_policy->uid;
    ck_assert_uint_ne(uid, 0);
    ck_assert_uint_ne(ouid, 0);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    const struct rl_policy *o = p->overrides[0].as_policy;
    ck_assert_uint_eq(p->uid, uid);
    ck_assert_uint_eq(o->uid, ouid);
    ck_assert_int_eq(p->sync_interval_ms, 250);
    ck_assert_int_eq(o->sync_interval_ms, 250);
    ck_assert_int_eq(o->limits[0].burst, 5);
    ck_assert_ptr_eq(policy_for(p, "k:gold", 6), o);
    ck_assert_ptr_eq(policy_for(p, "ip:10.1.2.3", 11), o);
    config_set_metrics_ids(cfg, name_length);
    ck_assert_int_eq(p->metrics_id, 3);
    ck_assert_int_eq(o->metrics_id, 3);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(overrides_problems)
{
    static const char json[] =
        "{ \"policies\": [ { \"name\": \"api\",\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ],\n"
        "    \"overrides\": [\n"
        "      { \"identities\": [\"key:ok\", \"\", 7] },\n"
        "      { \"identities\": [],\n"
        "        \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 1, \"window\": \"1s\", \"burst\": 2 },\n"
        "                    { \"algorithm\": \"fixed_window\", \"limit\": 2, \"window\": 1000 } ] },\n"
        "      { \"limits\": [], \"colour\": 1 },\n"
        "      { \"identities\": [\"key:ok\", \"10.0.0.7\", \"ip:10.0.0.300\", \"key:\", \"ip:\"],\n"
        "        \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] } ] } ] }\n";
    static const struct want w[] = {
        {"policies[0].overrides[0].identities[1]", "must be a string of 1..512 bytes"},
        {"policies[0].overrides[0].identities[2]", "must be a string of 1..512 bytes"},
        {"policies[0].overrides[3].identities[1]",
         "\"10.0.0.7\" has no type: write \"key:10.0.0.7\" for an API key (from the body "
         "or a header) or \"ip:10.0.0.7\" for a client address or CIDR"},
        {"policies[0].overrides[3].identities[2]", "\"10.0.0.300\" is not an address or CIDR"},
        {"policies[0].overrides[3].identities[3]", "\"key:\" has no type"},
        {"policies[0].overrides[3].identities[4]", "\"\" is not an address or CIDR"},
        {"policies[0].overrides[0].limits", "is required"},
        {"policies[0].overrides[1].identities", "must be a non-empty list of strings"},
        {"policies[0].overrides[1].limits[0].burst", "only token_bucket and gcra"},
        {"policies[0].overrides[1].limits[1]", "same algorithm and window as limits[0]"},
        {"policies[0].overrides[2].colour", "unknown option"},
        {"policies[0].overrides[2].identities", "is required"},
        {"policies[0].overrides[2].limits", "must hold 1..8 limits"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

/* ---- every problem, each with its path ------------------------------------------------- */

static const char many_problems_json[] =
    "{\n"
    "  \"listen\": 8080,\n"
    "  \"bogus\": true,\n"
    "  \"workers\": -1,\n"
    "  \"failure_mode\": \"maybe\",\n"
    "  \"max_body\": \"lots\",\n"
    "  \"redis\": { \"timeout\": \"fast\", \"url\": \"http://x\", \"key_prefix\": \"{x}\" },\n"
    "  \"identity\": [\"body\", \"cookie:x\"],\n"
    "  \"trusted_proxies\": [\"10.0.0.0/8\", \"10.0.0.0/33\"],\n"
    "  \"policies\": [\n"
    "    { \"name\": \"a\", \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1s\", \"burst\": 5 } ] },\n"
    "    { \"name\": \"b\", \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": 5, \"window\": \"1d\" } ] },\n"
    "    { \"name\": \"c\", \"limits\": [ { \"algorithm\": \"leaky_bucket\", \"limit\": 5, \"window\": \"1s\" } ] },\n"
    "    { \"name\": \"d\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": -5, \"window\": \"1s\" } ] },\n"
    "    { \"name\": \"e\", \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 1, \"window\": \"1s\" },\n"
    "                                { \"algorithm\": \"fixed_window\", \"limit\": 2, \"window\": 1000 } ] },\n"
    "    { \"name\": \"f\", \"match\": { \"path\": \"/x\", \"path_prefix\": \"/y\" },\n"
    "      \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] },\n"
    "    { \"name\": \"g\", \"shadow\": \"yes\" },\n"
    "    { \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\", \"colour\": \"red\" } ],\n"
    "      \"identity\": [\"peer\", 5], \"match\": { \"methods\": [\"GET\", \"FETCH\"] } },\n"
    "    { \"name\": \"bad name!\", \"limits\": [] },\n"
    "    { \"name\": \"h\", \"limits\": [ { \"algorithm\": \"token_bucket\", \"limit\": \"5\", \"window\": 0 } ] }\n"
    "  ]\n"
    "}\n";

static const struct want many_problems[] = {
    {"listen", "must be a string"},
    {"bogus", "unknown option"},
    {"workers", "must be between 0 and 256"},
    {"failure_mode", "must be one of open, closed, local"},
    {"max_body", "must be a size like \"64k\", \"1m\" or a number of bytes"},
    {"redis.timeout", "must be a duration like \"500ms\", \"10s\", \"1m\", \"1h\""},
    {"redis.url", "must be redis://[user:password@]host:port[/db]"},
    {"redis.key_prefix", "without '{' or '}'"},
    {"identity[1]", "unknown identity source \"cookie:x\""},
    {"trusted_proxies[1]", "must be a CIDR"},
    {"policies[0].limits[0].burst", "only token_bucket and gcra take a burst"},
    {"policies[1].limits[0].window",
     "must be a duration like \"500ms\", \"10s\", \"1m\", \"1h\""},
    {"policies[2].limits[0].algorithm",
     "must be one of fixed_window, sliding_window_log, sliding_window_counter, "
     "token_bucket, gcra"},
    {"policies[3].limits[0].limit", "must be between 1 and 1000000000"},
    {"policies[4].limits[1]", "same algorithm and window as limits[0]"},
    {"policies[5].match", "give one of path, path_prefix, path_glob"},
    {"policies[6].shadow", "must be true or false"},
    {"policies[6].limits", "is required"},
    {"policies[7].name", "is required"},
    {"policies[7].limits[0].colour", "unknown option"},
    {"policies[7].identity[1]", "must be a string"},
    {"policies[7].match.methods[1]", "must be an HTTP method"},
    {"policies[8].name", "must be 1..64 of A-Z a-z 0-9 _ . -"},
    {"policies[8].limits", "must hold 1..8 limits"},
    {"policies[9].limits[0].limit", "must be an integer"},
    {"policies[9].limits[0].window", "must be between 1ms and"},
};

START_TEST(many_problems_all_reported)
{
    struct rl_config *cfg = (struct rl_config *)1;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load(many_problems_json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, many_problems, N_OF(many_problems));
    /* the spec's own example, whole */
    char want[512];
    snprintf(want, sizeof(want), "%s: policies[1].limits[0].window: must be a duration "
             "like \"500ms\", \"10s\", \"1m\", \"1h\"", file);
    int seen = 0;
    for (size_t i = 0; i < errs.n; i++)
        seen += strcmp(errs.msg[i], want) == 0;
    ck_assert_msg(seen == 1, "no message is exactly: %s", want);
    errors_free(&errs);
    ck_assert_uint_eq(errs.n, 0);
    ck_assert_ptr_null(errs.msg);
    free(file);
}
END_TEST

/* align: where a fixed window's windows start; only fixed_window has one. */
START_TEST(limit_align)
{
    static const char ok[] =
        "{ \"policies\": [ { \"name\": \"a\", \"limits\": [\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1m\", \"align\": \"epoch\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1s\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1h\", \"align\": \"first\" } ] } ] }\n";
    static const char bad[] =
        "{ \"policies\": [ { \"name\": \"a\", \"limits\": [\n"
        "    { \"algorithm\": \"token_bucket\", \"limit\": 10, \"window\": \"1m\", \"align\": \"epoch\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1s\", \"align\": \"calendar\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1m\", \"align\": \"epoch\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": 60000 } ] } ] }\n";
    static const struct want w[] = {
        {"policies[0].limits[0].align", "only fixed_window has windows to align"},
        {"policies[0].limits[1].align", "must be one of first, epoch"},
        /* aligned or not, one algorithm and window is one key */
        {"policies[0].limits[3]", "same algorithm and window as limits[2]"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(ok, &cfg, &errs, &file), RL_OK);
    ck_assert_int_eq(cfg->policies[0].limits[0].align, RL_ALIGN_EPOCH);
    ck_assert_int_eq(cfg->policies[0].limits[1].align, RL_ALIGN_FIRST);
    ck_assert_int_eq(cfg->policies[0].limits[2].align, RL_ALIGN_FIRST);
    config_unref(cfg);
    free(file);
    expect_refused(bad, w, N_OF(w));
}
END_TEST

/*
 * Problems only found across fields (duplicate names, a listen address that
 * does not parse) are reported together with the problems of single fields:
 * `-t` must print them all at once (docs/API.md), not one batch per run.
 */
/* period, timezone, week_start: calendar periods (issue 22) */
START_TEST(limit_periods)
{
    static const char ok[] =
        "{ \"policies\": [ { \"name\": \"a\", \"limits\": [\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 500, \"period\": \"day\", \"timezone\": \"Europe/Berlin\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 500, \"period\": \"day\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 50, \"window\": \"1m\" },\n"
        "    { \"algorithm\": \"sliding_window_counter\", \"limit\": 9000, \"period\": \"month\", \"timezone\": \"UTC\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 3000, \"period\": \"week\", \"week_start\": \"sunday\", \"timezone\": \"America/New_York\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 3000, \"period\": \"week\", \"timezone\": \"America/New_York\" } ] } ] }\n";
    static const char bad[] =
        "{ \"policies\": [ { \"name\": \"a\", \"limits\": [\n"
        "    { \"algorithm\": \"token_bucket\", \"limit\": 10, \"period\": \"day\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1m\", \"period\": \"day\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10 },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"day\", \"timezone\": \"Europe/Berln\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"window\": \"1h\", \"timezone\": \"Europe/Berlin\" },\n"
        "    { \"algorithm\": \"sliding_window_counter\", \"limit\": 10, \"period\": \"month\", \"week_start\": \"sunday\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"fortnight\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"week\", \"align\": \"epoch\" } ] },\n"
        "  { \"name\": \"b\", \"limits\": [\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"week\", \"week_start\": \"monday\", \"timezone\": \"UTC\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 20, \"period\": \"week\" },\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 20, \"period\": \"week\", \"week_start\": \"someday\", \"timezone\": \"../../etc/passwd\" } ] },\n"
        "  { \"name\": \"c\", \"mode\": \"hybrid\", \"limits\": [\n"
        "    { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"day\" } ] } ] }\n";
    static const struct want w[] = {
        {"policies[0].limits[0].period", "only fixed_window and sliding_window_counter"},
        {"policies[0].limits[1].period", "give window or period, not both"},
        {"policies[0].limits[2]", "give \"window\" (a duration like \"1m\") or \"period\""},
        {"policies[0].limits[3].timezone", "unknown time zone \"Europe/Berln\""},
        {"policies[0].limits[4].timezone", "only a limit of a period has a time zone"},
        {"policies[0].limits[5].week_start", "only a \"week\" period starts on a day"},
        {"policies[0].limits[6].period", "must be \"minute\", \"hour\", \"day\", \"week\""},
        {"policies[0].limits[7].align", "a period is aligned to the calendar already"},
        /* monday is the default: one week, one key */
        {"policies[1].limits[1]", "same algorithm and period as limits[0]"},
        {"policies[1].limits[2].week_start", "must be a day"},
        {"policies[1].limits[2].timezone", "must be an IANA name"},
        {"policies[2].mode", "cannot have a period"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;
    const struct rl_limit *l;

    ck_assert_int_eq(load_and_validate(ok, &cfg, &errs, &file), RL_OK);
    l = cfg->policies[0].limits;
    ck_assert_int_eq(l[0].period.kind, RL_PERIOD_DAY);
    ck_assert_str_eq(period_tz_name(l[0].period.tz), "Europe/Berlin");
    ck_assert_ptr_null(l[1].period.tz);
    ck_assert_int_eq(l[1].window_ms, 0);
    ck_assert_int_eq(l[3].period.kind, RL_PERIOD_MONTH);
    ck_assert_str_eq(period_tz_name(l[3].period.tz), "UTC");
    ck_assert_int_eq(l[4].period.week_start, 1);
    ck_assert_int_eq(l[5].period.week_start, 0);
    config_unref(cfg);
    free(file);
    expect_refused(bad, w, N_OF(w));
}
END_TEST

/* request_limits, request_limits_max: a policy's permission to take limits
 * from the caller, and its cap */
START_TEST(policy_request_limits)
{
    static const char ok[] =
        "{ \"policies\": [ { \"name\": \"a\", \"request_limits\": true, \"request_limits_max\": 100000,\n"
        "    \"limits\": [ { \"algorithm\": \"fixed_window\", \"limit\": 10, \"period\": \"day\" } ] },\n"
        "  { \"name\": \"b\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] } ] }\n";
    static const char bad[] =
        "{ \"policies\": [ { \"name\": \"a\", \"request_limits_max\": 10,\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] },\n"
        "  { \"name\": \"b\", \"mode\": \"hybrid\", \"request_limits\": true, \"request_limits_max\": 0,\n"
        "    \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 10, \"window\": \"1s\" } ] } ] }\n";
    static const struct want w[] = {
        {"policies[0].request_limits_max", "needs \"request_limits\": true"},
        {"policies[1].request_limits_max", "must be between 1"},
        {"policies[1].request_limits", "not with \"mode\": \"hybrid\""},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(ok, &cfg, &errs, &file), RL_OK);
    ck_assert(cfg->policies[0].request_limits);
    ck_assert_int_eq(cfg->policies[0].request_limits_max, 100000);
    ck_assert(!cfg->policies[1].request_limits);
    ck_assert_int_eq(cfg->policies[1].request_limits_max, 0);
    config_unref(cfg);
    free(file);
    expect_refused(bad, w, N_OF(w));
}
END_TEST

START_TEST(cross_field_problems_reported_with_the_rest)
{
    static const char json[] =
        "{ \"listen\": \"localhost:80\",\n"
        "  \"policies\": [\n"
        "    { \"name\": \"a\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1d\" } ] },\n"
        "    { \"name\": \"a\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] }\n"
        "  ] }\n";
    static const struct want w[] = {
        {"listen", "must be an address like"},
        {"policies[0].limits[0].window", "must be a duration like"},
        {"policies[1].name", "\"a\" is already the name of policies[0]"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

/* rls.all_or_nothing decides a request's descriptors in one script call:
 * on a Cluster their keys live in several slots, so the config says no
 * (standalone, Sentinel and the memory backend take it). */
START_TEST(rls_all_or_nothing_not_on_a_cluster)
{
    static const char json[] =
        "{ \"redis\": {\"cluster\": [\"127.0.0.1:7000\"]},\n"
        "  \"rls\": {\"all_or_nothing\": true} }\n";
    static const struct want w[] = {
        {"rls.all_or_nothing", "different Redis Cluster slots"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    refused_with(json, w, N_OF(w));
    ck_assert_int_eq(load_and_validate("{ \"rls\": {\"all_or_nothing\": true} }", &cfg, &errs,
                                       &file),
                     RL_OK);
    ck_assert_int_eq(cfg->rls.all_or_nothing, 1);
    config_unref(cfg);
    free(file);
    ck_assert_int_eq(load_and_validate("{ \"backend\": \"memory\", \"redis\": {\"cluster\": "
                                       "[\"127.0.0.1:7000\"]}, \"rls\": {\"all_or_nothing\": "
                                       "true} }",
                                       &cfg, &errs, &file),
                     RL_OK);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(duplicate_policy_names)
{
    static const char json[] =
        "{ \"policies\": [\n"
        "    { \"name\": \"a\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] },\n"
        "    { \"name\": \"b\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] },\n"
        "    { \"name\": \"a\", \"limits\": [ { \"algorithm\": \"gcra\", \"limit\": 1, \"window\": \"1s\" } ] }\n"
        "  ] }\n";
    static const struct want w[] = {
        {"policies[2].name", "\"a\" is already the name of policies[0]"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(redis_tls_parsed)
{
    static const char json[] =
        "{ \"redis\": { \"url\": \"rediss://r:6380/0\", \"tls\": {\n"
        "    \"ca_file\": \"/ca.pem\", \"cert_file\": \"/c.pem\", \"key_file\": \"/k.pem\",\n"
        "    \"server_name\": \"redis.internal\", \"verify\": false } } }\n";
    struct rl_config *cfg, *def = config_new_defaults();
    struct rl_errors errs = {0};
    char *file;

    /* off and verifying unless told otherwise */
    ck_assert_int_eq(def->redis.tls.enabled, 0);
    ck_assert_int_eq(def->redis.tls.verify, 1);
    ck_assert_ptr_null(def->redis.tls.ca_file);
    config_unref(def);
    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_OK);
    ck_assert_str_eq(cfg->redis.tls.ca_file, "/ca.pem");
    ck_assert_str_eq(cfg->redis.tls.cert_file, "/c.pem");
    ck_assert_str_eq(cfg->redis.tls.key_file, "/k.pem");
    ck_assert_str_eq(cfg->redis.tls.server_name, "redis.internal");
    ck_assert_int_eq(cfg->redis.tls.verify, 0);
    config_unref(cfg);
    free(file);
}
END_TEST

START_TEST(redis_tls_problems)
{
    static const char json[] =
        "{ \"redis\": { \"tls\": { \"cert_file\": \"/c.pem\", \"verify\": \"no\",\n"
        "    \"ca_file\": \"\", \"sni\": \"x\" } } }\n";
    static const struct want w[] = {
        {"redis.tls.verify", "must be true or false"},
        {"redis.tls.ca_file", "must not be empty"},
        {"redis.tls.sni", "unknown option"},
        {"redis.tls", "give cert_file and key_file together"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load_and_validate(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(too_many_limits)
{
    char json[4096];
    size_t o = 0;
    static const struct want w[] = {{"policies[0].limits", "must hold 1..8 limits"}};
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    o += (size_t)snprintf(json + o, sizeof(json) - o,
                          "{\"policies\":[{\"name\":\"p\",\"limits\":[");
    for (int i = 1; i <= RL_LIMITS_MAX + 1; i++)
        o += (size_t)snprintf(json + o, sizeof(json) - o,
                              "%s{\"algorithm\":\"fixed_window\",\"limit\":1,\"window\":\"%ds\"}",
                              i > 1 ? "," : "", i);
    snprintf(json + o, sizeof(json) - o, "]}]}");
    ck_assert_int_eq(load(json, &cfg, &errs, &file), RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(policies_wrong_type)
{
    static const struct want w[] = {
        {"policies", "must be a list of objects"},
        {"identity", "must be a non-empty list"},
        {"trusted_proxies", "must be a list of CIDRs"},
        {"redis", "must be an object"},
    };
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load("{\"policies\": {}, \"identity\": [], \"trusted_proxies\": "
                          "\"10.0.0.0/8\", \"redis\": \"redis://h\"}", &cfg, &errs, &file),
                     RL_ERR);
    expect_errors(&errs, file, w, N_OF(w));
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(errors_are_appended)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    errors_add(&errs, "earlier: %d", 1);
    ck_assert_int_eq(load("{\"workers\": \"two\"}", &cfg, &errs, &file), RL_ERR);
    ck_assert_uint_eq(errs.n, 2);
    ck_assert_str_eq(errs.msg[0], "earlier: 1");
    char want[512];
    snprintf(want, sizeof(want), "%s: workers: must be an integer", file);
    ck_assert_str_eq(errs.msg[1], want);
    errors_free(&errs);
    free(file);
}
END_TEST

/* ---- malformed files --------------------------------------------------------------------- */

/* "FILE:LINE:COL: text" with the given line and some positive column. */
static void
expect_json_error(const struct rl_errors *e, const char *file, int line)
{
    char prefix[512];
    int col = -1, used = 0;

    ck_assert_uint_eq(e->n, 1);
    snprintf(prefix, sizeof(prefix), "%s:%d:", file, line);
    ck_assert_msg(strncmp(e->msg[0], prefix, strlen(prefix)) == 0,
                  "\"%s\" does not start with \"%s\"", e->msg[0], prefix);
    ck_assert_int_eq(sscanf(e->msg[0] + strlen(prefix), "%d: %n", &col, &used), 1);
    ck_assert_int_gt(col, 0);
    ck_assert_int_gt(used, 0);
    ck_assert_msg(e->msg[0][strlen(prefix) + (size_t)used] != '\0',
                  "\"%s\" says nothing after the position", e->msg[0]);
}

START_TEST(malformed_json)
{
    struct rl_config *cfg = (struct rl_config *)1;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load("{\n  \"listen\": \"127.0.0.1:8080\",\n  \"workers\": 1,,\n}\n",
                          &cfg, &errs, &file), RL_ERR);
    expect_json_error(&errs, file, 3);
    errors_free(&errs);
    free(file);

    ck_assert_int_eq(load("// a comment\n{}\n", &cfg, &errs, &file), RL_ERR);
    expect_json_error(&errs, file, 1);
    errors_free(&errs);
    free(file);

    ck_assert_int_eq(load("{\n\n\n\n  \"workers\": 1\n", &cfg, &errs, &file), RL_ERR);
    ck_assert_uint_eq(errs.n, 1);
    ck_assert_msg(strncmp(errs.msg[0], file, strlen(file)) == 0 &&
                  errs.msg[0][strlen(file)] == ':', "%s", errs.msg[0]);
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(duplicate_keys_rejected)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load("{\"listen\": \"127.0.0.1:1\",\n \"listen\": \"127.0.0.1:2\"}",
                          &cfg, &errs, &file), RL_ERR);
    expect_json_error(&errs, file, 2);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], "duplicate"));
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(not_an_object)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;
    char want[512];

    ck_assert_int_eq(load("[1, 2]\n", &cfg, &errs, &file), RL_ERR);
    ck_assert_uint_eq(errs.n, 1);
    snprintf(want, sizeof(want), "%s: the configuration must be a JSON object", file);
    ck_assert_str_eq(errs.msg[0], want);
    errors_free(&errs);
    free(file);
}
END_TEST

START_TEST(missing_file)
{
    struct rl_config *cfg = (struct rl_config *)1;
    struct rl_errors errs = {0};
    const char *file = "/nonexistent/dir/ratelimitd.json";
    char prefix[256];

    ck_assert_int_eq(config_load_file(file, &cfg, &errs), RL_ERR);
    ck_assert_ptr_null(cfg);
    ck_assert_uint_eq(errs.n, 1);
    snprintf(prefix, sizeof(prefix), "%s: ", file);
    ck_assert_msg(strncmp(errs.msg[0], prefix, strlen(prefix)) == 0, "%s", errs.msg[0]);
    errors_free(&errs);
}
END_TEST

/* ---- options from flags and environment ---------------------------------------------------- */

START_TEST(set_option_good)
{
    struct rl_config *cfg = config_new_defaults();
    struct rl_errors errs = {0};

    ck_assert_int_eq(config_set_option(cfg, "listen", "[::1]:8081", "-l", &errs), RL_OK);
    ck_assert_str_eq(cfg->listen, "[::1]:8081");
    ck_assert_int_eq(config_set_option(cfg, "listen", "unix:/run/rl.sock",
                                       "RATELIMITD_LISTEN", &errs), RL_OK);
    ck_assert_str_eq(cfg->listen, "unix:/run/rl.sock");
    ck_assert_int_eq(config_set_option(cfg, "redis.url", "redis://10.0.0.7:6390/5", "-r",
                                       &errs), RL_OK);
    ck_assert_str_eq(cfg->redis.url, "redis://10.0.0.7:6390/5");
    ck_assert_int_eq(config_set_option(cfg, "workers", "8", "-w", &errs), RL_OK);
    ck_assert_int_eq(cfg->workers, 8);
    ck_assert_int_eq(config_set_option(cfg, "workers", "0", "-w", &errs), RL_OK);
    ck_assert_int_eq(cfg->workers, 0);
    ck_assert_int_eq(config_set_option(cfg, "backend", "memory", "-b", &errs), RL_OK);
    ck_assert_int_eq(cfg->backend, RL_BACKEND_MEMORY);
    ck_assert_int_eq(config_set_option(cfg, "backend", "redis", "-b", &errs), RL_OK);
    ck_assert_int_eq(cfg->backend, RL_BACKEND_REDIS);
    ck_assert_int_eq(config_set_option(cfg, "log_level", "debug", "-L", &errs), RL_OK);
    ck_assert_int_eq(cfg->log_level, RL_LOG_DEBUG);
    ck_assert_int_eq(config_set_option(cfg, "log_level", "error", "RATELIMITD_LOG_LEVEL",
                                       &errs), RL_OK);
    ck_assert_int_eq(cfg->log_level, RL_LOG_ERROR);
    ck_assert_int_eq(config_set_option(cfg, "redis.timeout", "250ms", "x", &errs), RL_OK);
    ck_assert_int_eq(cfg->redis.timeout_ms, 250);
    ck_assert_int_eq(config_set_option(cfg, "redis.timeout", "75", "x", &errs), RL_OK);
    ck_assert_int_eq(cfg->redis.timeout_ms, 75);
    ck_assert_int_eq(config_set_option(cfg, "max_body", "1m", "x", &errs), RL_OK);
    ck_assert_int_eq(cfg->max_body, 1048576);
    ck_assert_int_eq(config_set_option(cfg, "trusted_proxies", "[\"10.0.0.0/8\"]", "x",
                                       &errs), RL_OK);
    ck_assert_uint_eq(cfg->trusted_proxies.n, 1);
    expect_cidr(&cfg->trusted_proxies.v[0], AF_INET, "10.0.0.0", 8);
    ck_assert_uint_eq(errs.n, 0);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    config_unref(cfg);
}
END_TEST

START_TEST(set_option_overrides_file)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load("{\"listen\": \"127.0.0.1:1\", \"workers\": 3, "
                          "\"log_level\": \"warn\"}", &cfg, &errs, &file), RL_OK);
    ck_assert_int_eq(config_set_option(cfg, "listen", "0.0.0.0:2", "-l", &errs), RL_OK);
    ck_assert_str_eq(cfg->listen, "0.0.0.0:2");
    ck_assert_int_eq(cfg->workers, 3);
    ck_assert_int_eq(cfg->log_level, RL_LOG_WARN);
    ck_assert_int_eq(config_validate(cfg, &errs), RL_OK);
    config_unref(cfg);
    free(file);
}
END_TEST

struct bad_option {
    const char *name, *text, *origin;
    const char *path;       /* as reported */
    const char *what;
};

static const struct bad_option bad_options[] = {
    {"nosuch", "1", "-x", "nosuch", "not an option that can be set here"},
    {"redis", "{}", "-x", "redis", "not an option that can be set here"},
    {"policies", "[]", "-x", "policies", "not an option that can be set here"},
    {"redis.nosuch", "1", "-x", "redis.nosuch", "not an option that can be set here"},
    {"listen.port", "1", "-x", "listen.port", "not an option that can be set here"},
    {"workers", "many", "-w", "workers", "must be an integer"},
    {"workers", "", "-w", "workers", "must be an integer"},
    {"workers", "-1", "-w", "workers", "must be"},
    {"workers", "257", "-w", "workers", "must be between 0 and 256"},
    {"backend", "mysql", "-b", "backend", "must be one of redis, memory"},
    {"log_level", "verbose", "-L", "log_level", "must be one of error, warn, info, debug"},
    {"log_level", "DEBUG", "RATELIMITD_LOG_LEVEL", "log_level", "must be one of"},
    {"listen", "", "-l", "listen", "must not be empty"},
    {"redis.url", "http://h", "-r", "redis.url", "must be redis://"},
    {"redis.url", "redis://h:0", "RATELIMITD_REDIS_URL", "redis.url", "must be redis://"},
    {"redis.key_prefix", "{x}", "-x", "redis.key_prefix", "without '{' or '}'"},
    {"redis.timeout", "soon", "-x", "redis.timeout", "must be a duration like"},
};

START_TEST(set_option_bad)
{
    const struct bad_option *b = &bad_options[_i];
    struct rl_config *cfg = config_new_defaults();
    struct rl_errors errs = {0};
    struct want w = {b->path, b->what};

    ck_assert_msg(config_set_option(cfg, b->name, b->text, b->origin, &errs) == RL_ERR,
                  "%s=\"%s\" accepted", b->name, b->text);
    expect_errors(&errs, b->origin, &w, 1);
    errors_free(&errs);
    config_unref(cfg);
}
END_TEST

START_TEST(set_option_bad_listen_caught_by_validate)
{
    struct rl_config *cfg = config_new_defaults();
    struct rl_errors errs = {0};
    int rc;

    rc = config_set_option(cfg, "listen", "localhost:8080", "-l", &errs);
    if (rc == RL_OK)
        rc = config_validate(cfg, &errs);
    ck_assert_int_eq(rc, RL_ERR);
    ck_assert_uint_eq(errs.n, 1);
    ck_assert_ptr_nonnull(strstr(errs.msg[0], ": listen: must be an address like"));
    errors_free(&errs);
    config_unref(cfg);
}
END_TEST

/* ---- lookups and lifetime ------------------------------------------------------------------------ */

START_TEST(policy_lookup)
{
    struct rl_config *cfg;
    struct rl_errors errs = {0};
    char *file;

    ck_assert_int_eq(load(full_json, &cfg, &errs, &file), RL_OK);
    ck_assert_ptr_eq(config_policy(cfg, "login"), &cfg->policies[0]);
    ck_assert_ptr_eq(config_policy(cfg, "api.v2_read-only"), &cfg->policies[1]);
    ck_assert_ptr_eq(config_policy(cfg, "default"), &cfg->policies[3]);
    ck_assert_ptr_null(config_policy(cfg, "LOGIN"));
    ck_assert_ptr_null(config_policy(cfg, "logi"));
    ck_assert_ptr_null(config_policy(cfg, "login "));
    ck_assert_ptr_null(config_policy(cfg, ""));
    config_unref(cfg);
    free(file);

    cfg = config_new_defaults();
    ck_assert_ptr_null(config_policy(cfg, "login"));
    config_unref(cfg);
}
END_TEST

START_TEST(method_bits)
{
    ck_assert_uint_eq(policy_method_bit("GET"), RL_M_GET);
    ck_assert_uint_eq(policy_method_bit("get"), RL_M_GET);
    ck_assert_uint_eq(policy_method_bit("Head"), RL_M_HEAD);
    ck_assert_uint_eq(policy_method_bit("POST"), RL_M_POST);
    ck_assert_uint_eq(policy_method_bit("put"), RL_M_PUT);
    ck_assert_uint_eq(policy_method_bit("DELETE"), RL_M_DELETE);
    ck_assert_uint_eq(policy_method_bit("patch"), RL_M_PATCH);
    ck_assert_uint_eq(policy_method_bit("OPTIONS"), RL_M_OPTIONS);
    ck_assert_uint_eq(policy_method_bit("connect"), RL_M_CONNECT);
    ck_assert_uint_eq(policy_method_bit("TRACE"), RL_M_TRACE);
    ck_assert_uint_eq(policy_method_bit("FETCH"), 0);
    ck_assert_uint_eq(policy_method_bit(""), 0);
    ck_assert_uint_eq(policy_method_bit("GETS"), 0);
    ck_assert_uint_eq(policy_method_bit("GE"), 0);
}
END_TEST

START_TEST(ref_unref)
{
    struct rl_config *cfg = config_new_defaults();

    ck_assert_int_eq(cfg->refs, 1);
    ck_assert_ptr_eq(config_ref(cfg), cfg);
    ck_assert_int_eq(cfg->refs, 2);
    ck_assert_ptr_eq(config_ref(cfg), cfg);
    ck_assert_int_eq(cfg->refs, 3);
    config_unref(cfg);
    ck_assert_int_eq(cfg->refs, 2);
    config_unref(cfg);
    ck_assert_int_eq(cfg->refs, 1);
    /* still whole while a reference is held */
    ck_assert_str_eq(cfg->listen, "127.0.0.1:8080");
    config_unref(cfg);          /* frees it */
    config_unref(NULL);         /* harmless */
}
END_TEST

static Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

    tc = tcase_create("defaults");
    tcase_add_test(tc, defaults_built_in);
    tcase_add_test(tc, defaults_empty_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("valid");
    tcase_add_test(tc, full_config_round_trips);
    tcase_add_test(tc, api_md_example_loads);
    tcase_add_test(tc, comment_keys_skipped);
    tcase_add_test(tc, overrides_parsed);
    tcase_add_test(tc, overrides_problems);
    tcase_add_test(tc, networks_and_limit_identities_parsed);
    tcase_add_test(tc, networks_and_limit_identities_problems);
    tcase_add_test(tc, patterns_normalised);
    tcase_add_test(tc, patterns_unnormalisable);
    suite_add_tcase(s, tc);

    tc = tcase_create("problems");
    tcase_add_test(tc, many_problems_all_reported);
    tcase_add_test(tc, limit_align);
    tcase_add_test(tc, limit_periods);
    tcase_add_test(tc, policy_request_limits);
    tcase_add_test(tc, cross_field_problems_reported_with_the_rest);
    tcase_add_test(tc, duplicate_policy_names);
    tcase_add_test(tc, rls_all_or_nothing_not_on_a_cluster);
    tcase_add_test(tc, too_many_limits);
    tcase_add_test(tc, policies_wrong_type);
    tcase_add_test(tc, errors_are_appended);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_test(tc, malformed_json);
    tcase_add_test(tc, duplicate_keys_rejected);
    tcase_add_test(tc, not_an_object);
    tcase_add_test(tc, missing_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("set_option");
    tcase_add_test(tc, set_option_good);
    tcase_add_test(tc, set_option_overrides_file);
    tcase_add_loop_test(tc, set_option_bad, 0, (int)N_OF(bad_options));
    tcase_add_test(tc, set_option_bad_listen_caught_by_validate);
    suite_add_tcase(s, tc);

    tc = tcase_create("lookup");
    tcase_add_test(tc, policy_lookup);
    tcase_add_test(tc, method_bits);
    tcase_add_test(tc, derived_data_rebuilt);
    tcase_add_test(tc, ref_unref);
    tcase_add_test(tc, redis_tls_parsed);
    tcase_add_test(tc, redis_tls_problems);
    suite_add_tcase(s, tc);

    return s;
}

int
main(void)
{
    return rl_unit_run(config_suite(), CK_FORK_GETENV);
}
