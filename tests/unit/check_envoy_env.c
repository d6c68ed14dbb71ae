/*
 * check_envoy_env.c — envoyproxy/ratelimit's environment as our options:
 * Go's booleans and durations as its envconfig reads them, the table holding
 * every variable of its src/settings/settings.go, Envoy Gateway's
 * environment read into the options it means, its Redis URL forms, and the
 * notes and errors a start reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"

#include "envoy_env.h"
#include "util.h"

/* Every variable of envoyproxy/ratelimit's settings.go, in its order. */
static const char *const settings_go[] = {
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_UDS",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "USE_STATSD",
    "STATSD_HOST",
    "STATSD_PORT",
    "EXTRA_TAGS",
    "STATS_FLUSH_INTERVAL",
    "DISABLE_STATS",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "NEAR_LIMIT_RATIO",
    "CACHE_KEY_PREFIX",
    "BACKEND_TYPE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_POOL_SIZE",
    "REDIS_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_SENTINEL_AUTH",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
};

struct got {
    struct {
        char option[64], text[256], origin[64];
    } v[64];
    size_t n;
};

static void
collect(const char *option, const char *text, const char *origin, void *arg)
{
    struct got *g = arg;

    ck_assert_uint_lt(g->n, RL_ARRAY_LEN(g->v));
    snprintf(g->v[g->n].option, sizeof(g->v[g->n].option), "%s", option);
    snprintf(g->v[g->n].text, sizeof(g->v[g->n].text), "%s", text);
    snprintf(g->v[g->n].origin, sizeof(g->v[g->n].origin), "%s", origin);
    g->n++;
}

/* The last text given to option, NULL when none. */
static const char *
got_text(const struct got *g, const char *option)
{
    const char *t = NULL;

    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->v[i].option, option) == 0)
            t = g->v[i].text;
    return t;
}

static int
has_note(const struct rl_errors *e, const char *var)
{
    size_t n = strlen(var);

    for (size_t i = 0; i < e->n; i++)
        if (strncmp(e->msg[i], var, n) == 0 && e->msg[i][n] == ':')
            return 1;
    return 0;
}

/* Directories of rule files as RUNTIME_ROOT/ratelimit/config and, without
 * RUNTIME_SUBDIRECTORY, RUNTIME_ROOT/config. */
static char root[64];

static void
make_root(void)
{
    char dir[128];

    snprintf(root, sizeof(root), "/tmp/rl-envoy-env-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(dir, sizeof(dir), "%s/ratelimit", root);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(dir, sizeof(dir), "%s/ratelimit/config", root);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(dir, sizeof(dir), "%s/config", root);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
}

static void
drop_root(void)
{
    char dir[128];

    snprintf(dir, sizeof(dir), "%s/ratelimit/config", root);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/ratelimit", root);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/config", root);
    rmdir(dir);
    rmdir(root);
}

/* Read env (NULL-terminated "NAME=value") with RUNTIME_ROOT=root added. */
static int
read_env(const char *const *env, struct got *g, struct rl_errors *notes, struct rl_errors *errs)
{
    char *envp[96];
    char rootvar[96];
    struct envoy_env ee = {0};
    size_t n = 0;
    int rc;

    snprintf(rootvar, sizeof(rootvar), "RUNTIME_ROOT=%s", root);
    envp[n++] = rootvar;
    for (; *env != NULL; env++)
        envp[n++] = (char *)*env;
    envp[n] = NULL;
    rc = envoy_env_read(&ee, envp, collect, g, notes, errs);
    envoy_env_free(&ee);
    return rc;
}

START_TEST(go_booleans)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    static const char *const bad[] = {"", "yes", "on", "tRUE", "true ", "2"};
    bool b;

    for (size_t i = 0; i < RL_ARRAY_LEN(yes); i++) {
        ck_assert_int_eq(envoy_env_bool(yes[i], &b), RL_OK);
        ck_assert_msg(b, "%s", yes[i]);
        ck_assert_int_eq(envoy_env_bool(no[i], &b), RL_OK);
        ck_assert_msg(!b, "%s", no[i]);
    }
    for (size_t i = 0; i < RL_ARRAY_LEN(bad); i++)
        ck_assert_msg(envoy_env_bool(bad[i], &b) == RL_ERR, "'%s' taken", bad[i]);
}
END_TEST

START_TEST(go_durations)
{
    static const struct {
        const char *s;
        int64_t ms;
    } ok[] = {
        {"10s", 10000},  {"0", 0},           {"300ms", 300},     {"1.5s", 1500},
        {"1h30m", 5400000}, {"24h", 86400000}, {"1us", 1},         {"2500000ns", 3},
        {"1m0.5s", 60500}, {"+5s", 5000},     {".5s", 500},       {"1\xc2\xb5s", 1},
    };
    static const char *const bad[] = {"", "10", "-1s", "s", "1x", "1e3s", "1..5s", ".s",
                                      "1s ", " 1s", "0x10s"};
    int64_t ms;

    for (size_t i = 0; i < RL_ARRAY_LEN(ok); i++) {
        ck_assert_msg(envoy_env_duration_ms(ok[i].s, &ms) == RL_OK, "'%s' refused", ok[i].s);
        ck_assert_msg(ms == ok[i].ms, "%s: %lld ms, expected %lld", ok[i].s, (long long)ms,
                      (long long)ok[i].ms);
    }
    for (size_t i = 0; i < RL_ARRAY_LEN(bad); i++)
        ck_assert_msg(envoy_env_duration_ms(bad[i], &ms) == RL_ERR, "'%s' taken", bad[i]);
}
END_TEST

/* Every variable of settings.go has a row; no row is there twice. */
START_TEST(table_holds_settings_go)
{
    const char *option, *name;
    bool read;

    for (size_t i = 0; i < RL_ARRAY_LEN(settings_go); i++) {
        size_t j;
        for (j = 0; (name = envoy_env_row(j, &option, &read)) != NULL; j++)
            if (strcmp(name, settings_go[i]) == 0)
                break;
        ck_assert_msg(name != NULL, "%s: no row", settings_go[i]);
    }
    for (size_t i = 0; (name = envoy_env_row(i, &option, &read)) != NULL; i++) {
        const char *other, *o2;
        for (size_t j = i + 1; (other = envoy_env_row(j, &o2, &read)) != NULL; j++)
            ck_assert_msg(strcmp(name, other) != 0, "%s: two rows", name);
    }
}
END_TEST

/* Envoy Gateway's environment (its ratelimit Deployment), with files. */
static const char *const gateway[] = {
    "RUNTIME_SUBDIRECTORY=ratelimit",
    "RUNTIME_IGNOREDOTFILES=true",
    "RUNTIME_WATCH_ROOT=false",
    "LOG_LEVEL=info",
    "USE_STATSD=false",
    "CONFIG_TYPE=GRPC_XDS_SOTW",
    "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001",
    "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
    "GRPC_SERVER_USE_TLS=true",
    "GRPC_SERVER_TLS_CERT=/certs/tls.crt",
    "GRPC_SERVER_TLS_KEY=/certs/tls.key",
    "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt",
    "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
    "REDIS_SOCKET_TYPE=tcp",
    "REDIS_URL=redis.redis-system.svc.cluster.local:6379",
    "USE_PROMETHEUS=true",
    "PROMETHEUS_ADDR=:19001",
    "HOME=/root",
    NULL,
};

START_TEST(envoy_gateway)
{
    struct got g = {0};
    struct rl_errors notes = {0}, errs = {0};
    char dir[128];

    make_root();
    ck_assert_int_eq(read_env(gateway, &g, &notes, &errs), RL_OK);
    ck_assert_str_eq(got_text(&g, "listen"), "0.0.0.0:8080");
    ck_assert_str_eq(got_text(&g, "rls.listen"), "0.0.0.0:8081");
    ck_assert_str_eq(got_text(&g, "rls.tls.cert_file"), "/certs/tls.crt");
    ck_assert_str_eq(got_text(&g, "rls.tls.key_file"), "/certs/tls.key");
    /* not a variable of envoyproxy/ratelimit: no client certificates */
    ck_assert_ptr_null(got_text(&g, "rls.tls.client_ca_file"));
    ck_assert_str_eq(got_text(&g, "log_level"), "info");
    ck_assert_str_eq(got_text(&g, "redis.url"), "redis://redis.redis-system.svc.cluster.local:6379");
    snprintf(dir, sizeof(dir), "%s/ratelimit/config", root);
    ck_assert_str_eq(got_text(&g, "rls.config"), dir);
    ck_assert_ptr_null(got_text(&g, "rls.response_headers"));
    /* USE_PROMETHEUS=true: its own listener at PROMETHEUS_ADDR, every address */
    ck_assert_str_eq(got_text(&g, "metrics_listen"), "0.0.0.0:19001");
    /* its defaults: GOAWAY at 24 hours, closed an hour later */
    ck_assert_str_eq(got_text(&g, "rls.max_connection_age"), "86400000");
    ck_assert_str_eq(got_text(&g, "rls.max_connection_age_grace"), "3600000");
    /* its debug port, on every address as there */
    ck_assert_str_eq(got_text(&g, "debug_listen"), "0.0.0.0:6070");
    ck_assert_str_eq(got_text(&g, "debug_allow_remote"), "true");
    /* without effect, each told by name once; USE_STATSD=false asks nothing */
    static const char *const told[] = {
        "GRPC_SERVER_TLS_CA_CERT", "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL",
        "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES",
    };
    for (size_t i = 0; i < RL_ARRAY_LEN(told); i++)
        ck_assert_msg(has_note(&notes, told[i]), "%s not told", told[i]);
    ck_assert_uint_eq(notes.n, RL_ARRAY_LEN(told));
    for (size_t i = 0; i < notes.n; i++)
        ck_assert_msg(strstr(notes.msg[i], "/certs") == NULL && strstr(notes.msg[i], "18001") == NULL,
                      "a value in a note: %s", notes.msg[i]);
    errors_free(&notes);
    errors_free(&errs);
    drop_root();
}
END_TEST

START_TEST(redis_forms)
{
    static const char *const sentinel[] = {"REDIS_TYPE=sentinel",
                                           "REDIS_URL=mymaster,host1:26379,host2:26379",
                                           "REDIS_AUTH=user:pa:ss",
                                           "REDIS_SENTINEL_AUTH=sent", NULL};
    static const char *const cluster[] = {"REDIS_TYPE=CLUSTER", "REDIS_SOCKET_TYPE=tcp",
                                          "REDIS_URL=a:7000,b:7001,c:7002",
                                          "REDIS_SENTINEL_AUTH=ignored",
                                          "REDIS_AUTH=secret", NULL};
    static const char *const unixsock[] = {"REDIS_TLS=true", "REDIS_TLS_CACERT=/ca.pem",
                                           "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true", NULL};
    static const char *const bad[] = {"REDIS_TYPE=sentinel", "REDIS_URL=mymaster", NULL};
    struct got g = {0};
    struct rl_errors notes = {0}, errs = {0};

    make_root();
    ck_assert_int_eq(read_env(sentinel, &g, &notes, &errs), RL_OK);
    ck_assert_str_eq(got_text(&g, "redis.sentinel.master"), "mymaster");
    ck_assert_str_eq(got_text(&g, "redis.sentinel.nodes"), "[\"host1:26379\",\"host2:26379\"]");
    ck_assert_ptr_null(got_text(&g, "redis.url"));
    ck_assert_str_eq(got_text(&g, "redis.username"), "user");
    ck_assert_str_eq(got_text(&g, "redis.password"), "pa:ss");
    ck_assert_str_eq(got_text(&g, "redis.sentinel.password"), "sent");

    memset(&g, 0, sizeof(g));
    ck_assert_int_eq(read_env(cluster, &g, &notes, &errs), RL_OK);
    ck_assert_str_eq(got_text(&g, "redis.cluster"), "[\"a:7000\",\"b:7001\",\"c:7002\"]");
    ck_assert_ptr_null(got_text(&g, "redis.username"));
    ck_assert_str_eq(got_text(&g, "redis.password"), "secret");
    ck_assert_ptr_null(got_text(&g, "redis.sentinel.password"));

    /* its defaults: a unix socket of nutcracker */
    memset(&g, 0, sizeof(g));
    ck_assert_int_eq(read_env(unixsock, &g, &notes, &errs), RL_OK);
    ck_assert_str_eq(got_text(&g, "redis.url"), "unix:///var/run/nutcracker/ratelimit.sock");
    ck_assert_str_eq(got_text(&g, "redis.tls.enabled"), "true");
    ck_assert_str_eq(got_text(&g, "redis.tls.ca_file"), "/ca.pem");
    ck_assert_str_eq(got_text(&g, "redis.tls.verify"), "false");
    ck_assert_uint_eq(errs.n, 0);

    ck_assert_int_eq(read_env(bad, &g, &notes, &errs), RL_ERR);
    ck_assert_uint_eq(errs.n, 1);
    ck_assert_msg(strstr(errs.msg[0], "REDIS_URL: ") == errs.msg[0], "%s", errs.msg[0]);
    errors_free(&notes);
    errors_free(&errs);
    drop_root();
}
END_TEST

START_TEST(listeners_headers_and_values)
{
    static const char *const env[] = {
        "HOST=::1", "PORT=0x1F91", "GRPC_UDS=/run/rl.sock", "LIMIT_RESPONSE_HEADERS_ENABLED=1",
        "LIMIT_RESET_HEADER=X-Reset", "NEAR_LIMIT_RATIO=0.9", "REDIS_TIMEOUT=1m30s",
        "SHADOW_MODE=T", "LOG_LEVEL=Trace", "QUOTA_MODE=false", "MERGE_DOMAIN_CONFIG=true",
        "LOG_FORMAT=json", "GRPC_MAX_CONNECTION_AGE=0", "GRPC_MAX_CONNECTION_AGE_GRACE=0s", NULL};
    struct got g = {0};
    struct rl_errors notes = {0}, errs = {0};

    make_root();
    ck_assert_int_eq(read_env(env, &g, &notes, &errs), RL_OK);
    ck_assert_str_eq(got_text(&g, "listen"), "[::1]:8081");
    ck_assert_str_eq(got_text(&g, "rls.listen"), "unix:/run/rl.sock");
    ck_assert_str_eq(got_text(&g, "rls.response_headers"), "true");
    ck_assert_str_eq(got_text(&g, "rls.header_names.limit"), "RateLimit-Limit");
    ck_assert_str_eq(got_text(&g, "rls.header_names.remaining"), "RateLimit-Remaining");
    ck_assert_str_eq(got_text(&g, "rls.header_names.reset"), "X-Reset");
    /* the names before the switch: rls is checked (all three) when it is set */
    for (size_t i = 0; i < g.n; i++)
        if (strcmp(g.v[i].option, "rls.response_headers") == 0)
            ck_assert_str_eq(g.v[i - 1].option, "rls.header_names.reset");
    ck_assert_str_eq(got_text(&g, "rls.near_limit_ratio"), "0.9");
    ck_assert_str_eq(got_text(&g, "redis.timeout"), "90000");
    ck_assert_str_eq(got_text(&g, "rls.shadow_mode"), "true");
    ck_assert_str_eq(got_text(&g, "log_level"), "debug");
    ck_assert_str_eq(got_text(&g, "log_format"), "json");
    /* 0 is forever in grpc-go: no age, the longest grace */
    ck_assert_str_eq(got_text(&g, "rls.max_connection_age"), "0");
    ck_assert_str_eq(got_text(&g, "rls.max_connection_age_grace"), "2592000000");
    /* QUOTA_MODE=false asks what ratelimitd does; MERGE_DOMAIN_CONFIG=true does not */
    ck_assert(!has_note(&notes, "QUOTA_MODE"));
    ck_assert(has_note(&notes, "MERGE_DOMAIN_CONFIG"));
    /* no USE_PROMETHEUS: no listener of its own, as there */
    ck_assert_ptr_null(got_text(&g, "metrics_listen"));
    errors_free(&notes);
    memset(&g, 0, sizeof(g));
    {
        static const char *const prom[] = {"USE_PROMETHEUS=1", "PROMETHEUS_ADDR=localhost:9102",
                                           "PROMETHEUS_PATH=/stats/prometheus",
                                           "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=16070", NULL};
        ck_assert_int_eq(read_env(prom, &g, &notes, &errs), RL_OK);
        ck_assert_str_eq(got_text(&g, "metrics_listen"), "127.0.0.1:9102");
        ck_assert_str_eq(got_text(&g, "debug_listen"), "127.0.0.1:16070");
        /* another path is told: /metrics it stays */
        ck_assert(has_note(&notes, "PROMETHEUS_PATH"));
        errors_free(&notes);
    }
    errors_free(&errs);
    drop_root();
}
END_TEST

START_TEST(refused_and_unknown)
{
    static const char *const env[] = {
        "GRPC_SERVER_USE_TLS=yes", "PORT=80800", "REDIS_TIMEOUT=10", "LOG_LEVEL=loud",
        "CONFIG_TYPE=XDS", "BACKEND_TYPE=memcache", "REDIS_POOL_SIZ=5", "LIMIT_FOO=1",
        "HOSTNAME=x", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=9090", "DEBUG_PORT=0", NULL};
    struct got g = {0};
    struct rl_errors notes = {0}, errs = {0};
    static const char *const wrong[] = {"GRPC_SERVER_USE_TLS", "PORT", "REDIS_TIMEOUT",
                                        "LOG_LEVEL", "CONFIG_TYPE", "BACKEND_TYPE",
                                        "PROMETHEUS_ADDR", "DEBUG_PORT"};

    make_root();
    ck_assert_int_eq(read_env(env, &g, &notes, &errs), RL_ERR);
    for (size_t i = 0; i < RL_ARRAY_LEN(wrong); i++)
        ck_assert_msg(has_note(&errs, wrong[i]), "%s not refused", wrong[i]);
    ck_assert_uint_eq(errs.n, RL_ARRAY_LEN(wrong));
    ck_assert(has_note(&notes, "REDIS_POOL_SIZ"));
    ck_assert(has_note(&notes, "LIMIT_FOO"));
    ck_assert(!has_note(&notes, "HOSTNAME"));
    errors_free(&notes);
    errors_free(&errs);
    /* no directory of rule files: nothing to serve */
    drop_root();
    memset(&g, 0, sizeof(g));
    ck_assert_int_eq(read_env((const char *const[]){NULL}, &g, &notes, &errs), RL_ERR);
    ck_assert(has_note(&errs, "RUNTIME_ROOT"));
    errors_free(&notes);
    errors_free(&errs);
}
END_TEST

START_TEST(command_name)
{
    ck_assert(envoy_env_command("ratelimit"));
    ck_assert(envoy_env_command("/bin/ratelimit"));
    ck_assert(!envoy_env_command("ratelimitd"));
    ck_assert(!envoy_env_command("/usr/bin/ratelimitd"));
    ck_assert(!envoy_env_command("ratelimit.sh"));
}
END_TEST

static Suite *
envoy_env_suite(void)
{
    Suite *s = suite_create("envoy_env");
    TCase *tc = tcase_create("envoy_env");

    tcase_add_test(tc, go_booleans);
    tcase_add_test(tc, go_durations);
    tcase_add_test(tc, table_holds_settings_go);
    tcase_add_test(tc, envoy_gateway);
    tcase_add_test(tc, redis_forms);
    tcase_add_test(tc, listeners_headers_and_values);
    tcase_add_test(tc, refused_and_unknown);
    tcase_add_test(tc, command_name);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(envoy_env_suite(), CK_FORK_GETENV);
}
