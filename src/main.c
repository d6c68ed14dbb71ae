/*
 * main.c — the command line (docs/API.md): flags beat environment, environment
 * beats the file, the file beats built-in defaults.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ac_config.h"
#include "config.h"
#include "daemon.h"
#include "envoy_env.h"
#include "grpc_tls.h"
#include "log.h"
#include "redis_tls.h"
#include "util.h"

static void
usage(FILE *f)
{
    fprintf(f, "usage: ratelimitd [-c FILE] [-l ADDR:PORT] [-r REDIS_URL] [-b redis|memory]\n"
               "                  [-w N] [-L LEVEL] [-t] [-V] [-h] [--envoy-env]\n"
               "  -c FILE   JSON config file (env RATELIMITD_CONFIG)\n"
               "  -l ADDR   listen address: 127.0.0.1:8080, [::1]:8080, unix:/path.sock\n"
               "            (env RATELIMITD_LISTEN)\n"
               "  -r URL    redis[s]://[user:password@]host:port[/db] or unix:///path.sock\n"
               "            (env RATELIMITD_REDIS_URL)\n"
               "  -b NAME   backend: redis (shared, default) or memory (one instance)\n"
               "            (env RATELIMITD_BACKEND)\n"
               "  -w N      worker threads (default 1; 0 = one per CPU)\n"
               "  -L LEVEL  log level: error, warn, info, debug (env RATELIMITD_LOG_LEVEL)\n"
               "  -t        check the configuration and exit\n"
               "  --envoy-env  read envoyproxy/ratelimit's environment\n"
               "            (also when started as `ratelimit`; docs/envoy.md)\n"
               "  -V        print the version and exit\n"
               "  -h        print this help and exit\n"
               "signals: HUP reloads the config; TERM/INT drain and stop (twice: now)\n");
}

static void
add_override(struct rl_options *o, const char *name, const char *text, const char *origin)
{
    /* a later source of the same option replaces the earlier one */
    for (size_t i = 0; i < o->nov; i++) {
        if (strcmp(o->ov[i].name, name) == 0) {
            o->ov[i].text = text;
            o->ov[i].origin = origin;
            return;
        }
    }
    if (o->nov < RL_SETTINGS_MAX)
        o->ov[o->nov++] = (struct rl_setting){name, text, origin};
}

static void
set_from_env(const char *name, const char *text, const char *origin, void *arg)
{
    add_override(arg, name, text, origin);
}

/* envoyproxy/ratelimit's environment, below ours (RATELIMITD_*) and the
 * flags; RL_ERR (told) for a value it would refuse too. */
static int
read_envoy_env(struct rl_options *opts, struct envoy_env *ee, struct rl_errors *notes)
{
    extern char **environ;
    struct rl_errors errs = {0};

    if (envoy_env_read(ee, environ, set_from_env, opts, notes, &errs) == RL_OK)
        return RL_OK;
    for (size_t i = 0; i < errs.n; i++)
        fprintf(stderr, "%s\n", errs.msg[i]);
    fprintf(stderr, "ratelimitd: %zu problem%s in envoyproxy/ratelimit's environment\n",
            errs.total, errs.total == 1 ? "" : "s");
    errors_free(&errs);
    return RL_ERR;
}

/* An argument envoyproxy/ratelimit would ignore: told by name (what comes
 * before '=', never a value). */
static void
ignored_argument(const char *arg, struct rl_errors *notes)
{
    errors_add(notes, "%.*s: an argument envoyproxy/ratelimit ignores: ignored",
               (int)strcspn(arg, "="), arg);
}

/* The environment's settings (envoyproxy/ratelimit's first, in its mode:
 * the lowest source), then the command line's over them: the exit code when
 * the command line says to stop now (-V, -h, a bad argument), -1 to go on. */
static int
read_options(int argc, char **argv, struct rl_options *opts, int *test, struct envoy_env *ee,
             struct rl_errors *notes)
{
    static const struct option longopts[] = {
        {"envoy-env", no_argument, NULL, 'E'},
        {NULL, 0, NULL, 0},
    };
    static const struct {
        const char *env, *name;
    } envs[] = {
        {"RATELIMITD_LISTEN", "listen"},         {"RATELIMITD_REDIS_URL", "redis.url"},
        {"RATELIMITD_BACKEND", "backend"},       {"RATELIMITD_LOG_LEVEL", "log_level"},
        {"RATELIMITD_RLS_CONFIG", "rls.config"},
    };
    int envoy = envoy_env_command(argv[0]), c;
    /* by its name, as envoyproxy/ratelimit, which reads no arguments (Envoy
     * AI Gateway's quota Deployment passes it one): one not ours is told
     * and ignored, not refused */
    int lenient = envoy;

    for (int i = 1; i < argc; i++) /* before the rest: it is the lowest source */
        envoy |= strcmp(argv[i], "--envoy-env") == 0;
    if (envoy && read_envoy_env(opts, ee, notes) != RL_OK)
        return 1;
    opts->config_file = getenv("RATELIMITD_CONFIG");
    if (opts->config_file != NULL && *opts->config_file == '\0')
        opts->config_file = NULL;
    for (size_t i = 0; i < RL_ARRAY_LEN(envs); i++) {
        const char *v = getenv(envs[i].env);
        if (v != NULL && *v != '\0')
            add_override(opts, envs[i].name, v, envs[i].env);
    }
    opterr = !lenient;
    while ((c = getopt_long(argc, argv, "c:l:r:b:w:L:tVh", longopts, NULL)) != -1) {
        if (c == '?' && lenient) {
            ignored_argument(argv[optind - 1], notes);
            continue;
        }
        switch (c) {
        case 'c': opts->config_file = optarg; break;
        case 'l': add_override(opts, "listen", optarg, "-l"); break;
        case 'r': add_override(opts, "redis.url", optarg, "-r"); break;
        case 'b': add_override(opts, "backend", optarg, "-b"); break;
        case 'w': add_override(opts, "workers", optarg, "-w"); break;
        case 'L': add_override(opts, "log_level", optarg, "-L"); break;
        case 't': *test = 1; break;
        case 'E': break; /* read above */
        case 'V': printf("ratelimitd %s\n", PACKAGE_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    for (; lenient && optind < argc; optind++)
        ignored_argument(argv[optind], notes);
    if (optind != argc) {
        fprintf(stderr, "ratelimitd: unexpected argument: %s\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    return -1;
}

/* The configuration, or NULL with every problem printed. */
static struct rl_config *
load(const struct rl_options *opts)
{
    struct rl_errors errs = {0};
    struct rl_config *cfg;

    if (daemon_load_config(opts, &cfg, &errs) != RL_OK) {
        for (size_t i = 0; i < errs.n; i++)
            fprintf(stderr, "%s\n", errs.msg[i]);
        fprintf(stderr, "ratelimitd: %zu problem%s in the configuration\n", errs.total,
                errs.total == 1 ? "" : "s");
        errors_free(&errs);
        return NULL;
    }
    return cfg;
}

/* -t: what the start would read besides the configuration. */
static int
test_files(const struct rl_config *cfg)
{
    char *cause = NULL;

    if ((cfg->backend == RL_BACKEND_REDIS && rtls_check(&cfg->redis, &cause) != RL_OK) ||
        grpc_tls_check(&cfg->rls.tls, &cause) != RL_OK) {
        fprintf(stderr, "%s\nratelimitd: 1 problem in the configuration\n", cause);
        free(cause);
        return RL_ERR;
    }
    return RL_OK;
}

/* On stderr with -t, else in the log; notes: envoyproxy/ratelimit's
 * variables without effect, once, by name, never a value (REDIS_AUTH is one
 * of them). */
static void
report_warnings(const struct rl_config *cfg, int test, struct rl_errors *notes)
{
    struct rl_errors warns = {0};

    log_set_format(cfg->log_format); /* the lines below already */

    config_warnings(cfg, &warns);
    for (size_t i = 0; i < warns.n; i++) {
        if (test)
            fprintf(stderr, "warning: %s\n", warns.msg[i]);
        else
            log_warn(LOG_MSG("configuration warning"), LOG_S("warning", warns.msg[i]));
    }
    errors_free(&warns);
    for (size_t i = 0; i < notes->n; i++) {
        if (test)
            fprintf(stderr, "note: %s\n", notes->msg[i]);
        else
            log_warn(LOG_MSG("envoyproxy/ratelimit variable without effect"),
                     LOG_Q("variable", notes->msg[i]));
    }
    errors_free(notes);
}

/* The built-in defaults have no policy: every check would be a 200 with
 * "policy": null, which looks like a working limiter (rules of rls.config
 * alone are a limiter: Envoy's rate limit service). */
static void
warn_unlimited(const struct rl_options *opts, const struct rl_config *cfg)
{
    if (cfg->npolicies != 0 || cfg->rls.rules != NULL)
        return;
    log_set_level(cfg->log_level);
    log_warn(
        LOG_MSG("no policies: every check is allowed, nothing is limited"),
        LOG_S("config", opts->config_file != NULL ? opts->config_file : "(built-in defaults)"),
        LOG_Q("hint", "give a file with policies or rls.config: -c FILE or "
                      "RATELIMITD_CONFIG"));
}

int
main(int argc, char **argv)
{
    struct rl_options opts = {0};
    struct rl_errors notes = {0};
    /* static: its texts are read again at every reload, until exit */
    static struct envoy_env ee;
    struct rl_config *cfg = NULL;
    int test = 0, rc;

    if ((rc = read_options(argc, argv, &opts, &test, &ee, &notes)) >= 0)
        goto out;
    rc = 1;
    if ((cfg = load(&opts)) == NULL || (test && test_files(cfg) != RL_OK))
        goto out;
    report_warnings(cfg, test, &notes);
    if (test) {
        printf("configuration OK\n");
        rc = 0;
        goto out;
    }
    warn_unlimited(&opts, cfg);
    rc = daemon_run(&opts, cfg); /* it owns cfg */
    cfg = NULL;
out:
    if (cfg != NULL)
        config_unref(cfg);
    errors_free(&notes);
    envoy_env_free(&ee);
    return rc;
}
