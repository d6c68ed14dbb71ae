/*
 * envoy_env.c — envoyproxy/ratelimit's environment as ratelimitd's options:
 * one table, one row per variable of its src/settings/settings.go (and the
 * few Envoy Gateway sets that it does not know), read the way its
 * envconfig reads them.
 *
 * A row names the option it sets and a converter; a row without a
 * converter is a variable without effect here, and its note says why.  A
 * variable that several rows combine (HOST and PORT into `listen`) is read
 * by the first row's converter, the others pointing at it.  A variable
 * unset or empty takes envoyproxy/ratelimit's default (`def`), when the row
 * gives one: its defaults are what a container started with its image gets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "envoy_env.h"
#include "util.h"

struct ev_ctx {
    struct envoy_env *ee;
    char *const *envp;
    envoy_env_set_fn set;
    void *arg;
    struct rl_errors *notes, *errs;
};

struct ev_row;
typedef void (*ev_conv)(struct ev_ctx *c, const struct ev_row *r, const char *value);

struct ev_row {
    const char *name;   /* the variable */
    const char *option; /* our option(s) it sets; NULL: none */
    ev_conv conv;       /* reads it (value: as set, else def); NULL: no effect */
    const char *def;    /* envoyproxy/ratelimit's default, applied here; NULL: none */
    const char *note;   /* no converter: why it has no effect (logged when set) */
};

/* ---- the environment ------------------------------------------------------ */

/* value of NAME in envp; NULL when unset.  An empty value is unset: its
 * envconfig would take the default for most and refuse it for the rest. */
static const char *
env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);

    for (char *const *e = envp; *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return (*e)[n + 1] != '\0' ? *e + n + 1 : NULL;
    return NULL;
}

static const struct ev_row *find_row(const char *name, size_t n);

/* A variable as the row of that name reads it: set, else its default. */
static const char *
value_of(struct ev_ctx *c, const char *name)
{
    const struct ev_row *r = find_row(name, strlen(name));
    const char *v = env_get(c->envp, name);

    return v != NULL ? v : r != NULL ? r->def : NULL;
}

static void
set(struct ev_ctx *c, const char *option, const char *origin, char *text)
{
    c->ee->owned = xrealloc(c->ee->owned, (c->ee->n + 1) * sizeof(*c->ee->owned));
    c->ee->owned[c->ee->n++] = text;
    c->set(option, text, origin, c->arg);
}

static void
note(struct ev_ctx *c, const char *name, const char *what)
{
    errors_add(c->notes, "%s: %s", name, what);
}

/* ---- Go's readers ----------------------------------------------------------- */

int
envoy_env_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};

    for (size_t i = 0; i < RL_ARRAY_LEN(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = true;
            return RL_OK;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = false;
            return RL_OK;
        }
    }
    return RL_ERR;
}

int
envoy_env_duration_ms(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {
        /* longest first: "ms" before "m" */
        {"ns", 1},   {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
        {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},        {"h", 3600e9},
    };
    double total = 0;
    const char *p = s;

    if (*p == '+')
        p++;
    if (strcmp(p, "0") == 0) {
        *ms = 0;
        return RL_OK;
    }
    if (*p == '\0')
        return RL_ERR;
    while (*p != '\0') {
        size_t len = strspn(p, "0123456789."), dots = 0, i;
        char num[64];
        double v;

        for (i = 0; i < len; i++)
            dots += p[i] == '.';
        /* digits with at most one '.' ("1.5", ".5", "5."), no exponent */
        if (len == 0 || len >= sizeof(num) || dots > 1 || dots == len)
            return RL_ERR;
        memcpy(num, p, len);
        num[len] = '\0';
        v = strtod(num, NULL);
        p += len;
        for (i = 0; i < RL_ARRAY_LEN(units); i++) {
            size_t n = strlen(units[i].unit);
            if (strncmp(p, units[i].unit, n) == 0) {
                total += v * units[i].ns;
                p += n;
                break;
            }
        }
        if (i == RL_ARRAY_LEN(units)) /* a number without a unit */
            return RL_ERR;
    }
    /* Go's durations are int64 nanoseconds: about 292 years */
    if (total > 9.2e18)
        return RL_ERR;
    *ms = (int64_t)(total / 1e6);
    if ((double)*ms * 1e6 < total)
        (*ms)++;
    return RL_OK;
}

/* Go's strconv.ParseInt(s, 0, 64) as its envconfig reads an int: a sign,
 * then decimal, 0x hex, 0o or 0 octal, 0b binary. */
static int
go_int(const char *s, int64_t *out)
{
    char *end;
    int base = 10;
    const char *p = s;
    int neg = 0;
    long long v;

    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, p += 2;
    else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
        base = 8, p += 2;
    else if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
        base = 2, p += 2;
    else if (p[0] == '0' && p[1] != '\0')
        base = 8, p += 1;
    if (*p < '0' || *p > 'z')
        return RL_ERR;
    errno = 0;
    v = strtoll(p, &end, base);
    if (errno != 0 || *end != '\0' || end == p)
        return RL_ERR;
    *out = neg ? -v : v;
    return RL_OK;
}

static bool
bool_of(struct ev_ctx *c, const char *name, const char *value)
{
    bool b = false;

    if (envoy_env_bool(value, &b) != RL_OK)
        errors_add(c->errs, "%s: not a boolean: use true or false (or 1, t, 0, f, ...)", name);
    return b;
}

/* ---- converters --------------------------------------------------------------- */

/* the value as it is */
static void
cv_string(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    set(c, r->option, r->name, xstrdup(value));
}

static void
cv_bool(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    set(c, r->option, r->name, xstrdup(bool_of(c, r->name, value) ? "true" : "false"));
}

/* a boolean that asks for something not built here when true; false (its
 * default) is what ratelimitd does */
static void
cv_off_only(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    if (bool_of(c, r->name, value))
        note(c, r->name, r->note);
}

static void
cv_duration(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    int64_t ms;

    if (envoy_env_duration_ms(value, &ms) != RL_OK || ms == 0)
        errors_add(c->errs,
                   "%s: not a duration ratelimitd can take: use a Go duration above "
                   "0, like \"10s\", \"250ms\" or \"1m30s\"",
                   r->name);
    else
        set(c, r->option, r->name, xasprintf("%lld", (long long)ms));
}

/* GRPC_MAX_CONNECTION_AGE(_GRACE), as grpc-go's keepalive takes them: 0
 * is forever (for the age, ours is 0 too; for the grace, our longest),
 * longer than 30 days is 30 days (a connection is never that old) */
static void
cv_age(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const int64_t month = 30LL * 24 * 3600 * 1000;
    bool grace = strstr(r->name, "_GRACE") != NULL;
    int64_t ms;

    if (envoy_env_duration_ms(value, &ms) != RL_OK) {
        errors_add(c->errs, "%s: not a duration: use a Go duration like \"24h\" or \"30m\"",
                   r->name);
        return;
    }
    if (ms > month || (ms == 0 && grace))
        ms = month;
    set(c, r->option, r->name, xasprintf("%lld", (long long)ms));
}

/* host and port into "host:port" ("[v6]:port"), as net.Listen takes them */
static char *
host_port(struct ev_ctx *c, const char *hvar, const char *pvar)
{
    const char *host = value_of(c, hvar), *port = value_of(c, pvar);
    int64_t p;

    if (port == NULL || go_int(port, &p) != RL_OK || p < 1 || p > 65535) {
        errors_add(c->errs, "%s: not a port: use 1..65535", pvar);
        return NULL;
    }
    if (host == NULL)
        host = "0.0.0.0"; /* Go's "" : every address */
    return xasprintf(strchr(host, ':') != NULL ? "[%s]:%lld" : "%s:%lld", host, (long long)p);
}

/* HOST, PORT: the HTTP listener (/json, /healthcheck, /metrics) */
static void
cv_http_listen(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    char *hp = host_port(c, "HOST", "PORT");

    (void)value;
    if (hp != NULL)
        set(c, r->option, r->name, hp);
}

/* DEBUG_HOST, DEBUG_PORT: the debug listener (/rlconfig), on every address
 * by default as there (debug_allow_remote) */
static void
cv_debug_listen(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    char *hp = host_port(c, "DEBUG_HOST", "DEBUG_PORT");

    (void)value;
    if (hp == NULL)
        return;
    set(c, "debug_allow_remote", r->name, xstrdup("true"));
    set(c, r->option, r->name, hp);
}

/*
 * USE_PROMETHEUS with PROMETHEUS_ADDR (net/http's "host:port", ":9090"
 * every address): metrics_listen.  Its PROMETHEUS_PATH is taken as
 * /metrics only: the listener serves that path.
 */
static void
cv_prometheus(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const char *addr = value_of(c, "PROMETHEUS_ADDR");
    const char *path = env_get(c->envp, "PROMETHEUS_PATH");
    const char *colon = strrchr(addr, ':');
    int64_t port;

    if (!bool_of(c, r->name, value))
        return;
    if (colon == NULL || go_int(colon + 1, &port) != RL_OK || port < 1 || port > 65535) {
        errors_add(c->errs, "PROMETHEUS_ADDR: use host:port or :port, like :9090");
        return;
    }
    if (path != NULL && strcmp(path, "/metrics") != 0)
        note(c, "PROMETHEUS_PATH", "not built: the metrics are served at /metrics");
    if (colon == addr)
        set(c, r->option, "PROMETHEUS_ADDR", xasprintf("0.0.0.0:%lld", (long long)port));
    else if (strncmp(addr, "localhost:", 10) == 0)
        set(c, r->option, "PROMETHEUS_ADDR", xasprintf("127.0.0.1:%lld", (long long)port));
    else
        set(c, r->option, "PROMETHEUS_ADDR", xstrdup(addr));
}

/* GRPC_UDS, else GRPC_HOST and GRPC_PORT */
static void
cv_grpc_listen(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const char *uds = env_get(c->envp, "GRPC_UDS");
    char *hp;

    (void)value;
    if (uds != NULL) {
        set(c, r->option, "GRPC_UDS", xasprintf("unix:%s", uds));
        return;
    }
    if ((hp = host_port(c, "GRPC_HOST", "GRPC_PORT")) != NULL)
        set(c, r->option, r->name, hp);
}

/* GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT, _KEY and
 * GRPC_CLIENT_TLS_CACERT (read only with TLS on, as there) */
static void
cv_grpc_tls(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    static const struct {
        const char *var, *option;
    } files[] = {
        {"GRPC_SERVER_TLS_CERT", "rls.tls.cert_file"},
        {"GRPC_SERVER_TLS_KEY", "rls.tls.key_file"},
        {"GRPC_CLIENT_TLS_CACERT", "rls.tls.client_ca_file"},
    };

    if (!bool_of(c, r->name, value))
        return;
    for (size_t i = 0; i < RL_ARRAY_LEN(files); i++) {
        const char *v = env_get(c->envp, files[i].var);
        if (v != NULL)
            set(c, files[i].option, files[i].var, xstrdup(v));
        else if (i < 2)
            errors_add(c->errs, "%s: needed with GRPC_SERVER_USE_TLS=true", files[i].var);
    }
}

/* LOG_LEVEL as logrus names them, any case */
static void
cv_log_level(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    static const struct {
        const char *logrus, *ours;
    } levels[] = {
        {"panic", "error"},  {"fatal", "error"}, {"error", "error"}, {"warn", "warn"},
        {"warning", "warn"}, {"info", "info"},   {"debug", "debug"}, {"trace", "debug"},
    };

    for (size_t i = 0; i < RL_ARRAY_LEN(levels); i++) {
        if (strcasecmp(value, levels[i].logrus) == 0) {
            set(c, r->option, r->name, xstrdup(levels[i].ours));
            return;
        }
    }
    errors_add(c->errs,
               "%s: not a log level: use panic, fatal, error, warn, info, debug or "
               "trace",
               r->name);
}

static void
cv_log_format(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    if (strcasecmp(value, "json") == 0)
        set(c, r->option, r->name, xstrdup("json"));
    else if (strcasecmp(value, "text") != 0)
        errors_add(c->errs, "%s: use text or json", r->name);
}

/* a float32 of (0, 1]: ours takes the same range */
static void
cv_ratio(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    char *end;
    double d;

    errno = 0;
    d = strtod(value, &end);
    if (errno != 0 || *end != '\0' || end == value || !(d > 0 && d <= 1))
        errors_add(c->errs, "%s: use a number above 0 and at most 1, like 0.8", r->name);
    else
        set(c, r->option, r->name, xasprintf("%.9g", d));
}

static void
cv_config_type(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    if (strcmp(value, "GRPC_XDS_SOTW") == 0)
        note(c, r->name,
             "GRPC_XDS_SOTW: rules over xDS are not built yet (CONFIG_GRPC_XDS_* are "
             "not read): the rules are read from the files under RUNTIME_ROOT instead");
    else if (strcmp(value, "FILE") != 0)
        errors_add(c->errs, "%s: use FILE or GRPC_XDS_SOTW", r->name);
}

/* RUNTIME_ROOT / RUNTIME_SUBDIRECTORY / RUNTIME_APPDIRECTORY: the
 * directory of rule files, when there is one */
static void
cv_runtime(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const char *sub = value_of(c, "RUNTIME_SUBDIRECTORY");
    const char *app = value_of(c, "RUNTIME_APPDIRECTORY");
    char *dir = xasprintf("%s%s%s/%s", value, sub != NULL ? "/" : "", sub != NULL ? sub : "",
                          app != NULL ? app : "config");
    struct stat st;

    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        /* rls.listen serves the rules of rls.config: without them, nothing
         * to serve (rules over xDS, which would come later, are not built) */
        errors_add(c->errs,
                   "%s: no directory of rule files at %s (RUNTIME_ROOT/"
                   "RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY)",
                   r->name, dir);
        free(dir);
        return;
    }
    set(c, r->option, r->name, dir);
}

/* REDIS_AUTH: "password" or "user:password" */
static void
cv_redis_auth(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const char *colon = strchr(value, ':');

    (void)r;
    if (colon == NULL) {
        set(c, "redis.password", "REDIS_AUTH", xstrdup(value));
        return;
    }
    set(c, "redis.username", "REDIS_AUTH", xstrndup(value, (size_t)(colon - value)));
    set(c, "redis.password", "REDIS_AUTH", xstrdup(colon + 1));
}

/* The nodes of a comma-separated list as a JSON list. */
static char *
json_list(const char *s)
{
    char *out = xstrdup("[");

    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char *next = xasprintf("%s%s\"%.*s\"", out, out[1] != '\0' ? "," : "", (int)n, p);

        free(out);
        out = next;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    {
        char *next = xasprintf("%s]", out);
        free(out);
        return next;
    }
}

/*
 * REDIS_URL as REDIS_TYPE and REDIS_SOCKET_TYPE say: single "host:port" (tcp)
 * or a socket path (unix); sentinel "master,host1:26379,host2:26379";
 * cluster "host1:6379,host2:6379".  A redis:// URL is taken as it is.
 * REDIS_SENTINEL_AUTH: the sentinels' password (not the master's:
 * REDIS_AUTH), read with a sentinel URL only, as there.
 */
static void
cv_redis_url(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    const char *type = value_of(c, "REDIS_TYPE");
    const char *sock = value_of(c, "REDIS_SOCKET_TYPE");
    const char *auth = env_get(c->envp, "REDIS_SENTINEL_AUTH");

    if (strpbrk(value, "\"\\") != NULL) {
        errors_add(c->errs, "%s: a quote or a backslash is not a host", r->name);
        return;
    }
    if (strcasecmp(type, "sentinel") == 0) {
        const char *comma = strchr(value, ',');
        if (comma == NULL || comma == value || comma[1] == '\0') {
            errors_add(c->errs,
                       "%s: with REDIS_TYPE=sentinel, give the master's name and the "
                       "sentinels: mymaster,host1:26379,host2:26379",
                       r->name);
            return;
        }
        set(c, "redis.sentinel.master", r->name, xstrndup(value, (size_t)(comma - value)));
        set(c, "redis.sentinel.nodes", r->name, json_list(comma + 1));
        if (auth != NULL)
            set(c, "redis.sentinel.password", "REDIS_SENTINEL_AUTH", xstrdup(auth));
    } else if (strcasecmp(type, "cluster") == 0) {
        set(c, "redis.cluster", r->name, json_list(value));
    } else if (strcasecmp(type, "single") != 0) {
        errors_add(c->errs, "REDIS_TYPE: use single, sentinel or cluster");
    } else if (strstr(value, "://") != NULL) {
        set(c, "redis.url", r->name, xstrdup(value));
    } else if (strcasecmp(sock, "unix") == 0) {
        set(c, "redis.url", r->name, xasprintf("unix://%s", value));
    } else if (strcasecmp(sock, "tcp") == 0) {
        set(c, "redis.url", r->name, xasprintf("redis://%s", value));
    } else {
        errors_add(c->errs, "REDIS_SOCKET_TYPE: use tcp or unix");
    }
}

/* REDIS_TLS with its files (read only with it on, as there) */
static void
cv_redis_tls(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    static const struct {
        const char *var, *option;
    } files[] = {
        {"REDIS_TLS_CLIENT_CERT", "redis.tls.cert_file"},
        {"REDIS_TLS_CLIENT_KEY", "redis.tls.key_file"},
        {"REDIS_TLS_CACERT", "redis.tls.ca_file"},
    };
    const char *skip = env_get(c->envp, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION");

    if (!bool_of(c, r->name, value))
        return;
    set(c, r->option, r->name, xstrdup("true"));
    for (size_t i = 0; i < RL_ARRAY_LEN(files); i++) {
        const char *v = env_get(c->envp, files[i].var);
        if (v != NULL)
            set(c, files[i].option, files[i].var, xstrdup(v));
    }
    if (skip != NULL && bool_of(c, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", skip))
        set(c, "redis.tls.verify", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", xstrdup("false"));
}

static void
cv_backend(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    (void)r;
    if (strcasecmp(value, "redis") != 0)
        errors_add(c->errs, "BACKEND_TYPE: only redis is built (memcache is not)");
}

/* LOCAL_CACHE_SIZE_IN_BYTES: over-limit keys kept in the process */
static void
cv_local_cache(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    int64_t n;

    if (go_int(value, &n) != RL_OK || n < 0)
        errors_add(c->errs, "%s: not a size in bytes", r->name);
    else
        set(c, r->option, r->name, xstrdup(n > 0 ? "true" : "false"));
}

/* LIMIT_RESPONSE_HEADERS_ENABLED: its three headers, its names */
static void
cv_headers(struct ev_ctx *c, const struct ev_row *r, const char *value)
{
    static const struct {
        const char *var, *option;
    } names[] = {
        {"LIMIT_LIMIT_HEADER", "rls.header_names.limit"},
        {"LIMIT_REMAINING_HEADER", "rls.header_names.remaining"},
        {"LIMIT_RESET_HEADER", "rls.header_names.reset"},
    };

    if (!bool_of(c, r->name, value))
        return;
    /* the names first: rls is checked (all three names) when it is set */
    for (size_t i = 0; i < RL_ARRAY_LEN(names); i++)
        set(c, names[i].option, names[i].var, xstrdup(value_of(c, names[i].var)));
    set(c, r->option, r->name, xstrdup("true"));
}

/* a variable without effect, noted when set */
#define NONE(var, why) \
    { \
        .name = var, .note = why \
    }
/* read by another row's converter */
#define PART(var, opt, by) \
    { \
        .name = var, .option = opt, .note = "read with " by \
    }

#define XDS_LATER "rules over xDS are not built yet"
#define STATS_PROM \
    "metrics are Prometheus only: GET /metrics on HOST:PORT, and on PROMETHEUS_ADDR with " \
    "USE_PROMETHEUS=true"
#define PERSECOND "a second Redis for per-second limits is not built: one backend"
#define MEMCACHE "memcache is not built"
#define NO_POOL \
    "no pool: one connection per worker (workers), checks coalesced (redis.coalesce)"
#define TRACING "tracing is not built"

/* clang-format off */
static const struct ev_row rows[] = {
    /* rule files first: rls.listen is checked against rls.config when set */
    {.name = "RUNTIME_ROOT", .option = "rls.config", .conv = cv_runtime,
     .def = "/srv/runtime_data/current"},
    PART("RUNTIME_SUBDIRECTORY", "rls.config", "RUNTIME_ROOT"),
    {.name = "RUNTIME_APPDIRECTORY", .option = "rls.config", .def = "config",
     .note = "read with RUNTIME_ROOT"},
    /* listeners */
    {.name = "HOST", .option = "listen", .conv = cv_http_listen, .def = "0.0.0.0"},
    {.name = "PORT", .option = "listen", .def = "8080", .note = "read with HOST"},
    {.name = "DEBUG_HOST", .option = "debug_listen", .conv = cv_debug_listen,
     .def = "0.0.0.0"},
    {.name = "DEBUG_PORT", .option = "debug_listen", .def = "6070",
     .note = "read with DEBUG_HOST"},
    {.name = "GRPC_HOST", .option = "rls.listen", .conv = cv_grpc_listen, .def = "0.0.0.0"},
    {.name = "GRPC_PORT", .option = "rls.listen", .def = "8081", .note = "read with GRPC_HOST"},
    PART("GRPC_UDS", "rls.listen", "GRPC_HOST"),
    {.name = "GRPC_MAX_CONNECTION_AGE", .option = "rls.max_connection_age", .conv = cv_age,
     .def = "24h"},
    {.name = "GRPC_MAX_CONNECTION_AGE_GRACE", .option = "rls.max_connection_age_grace",
     .conv = cv_age, .def = "1h"},
    {.name = "GRPC_SERVER_USE_TLS", .option = "rls.tls", .conv = cv_grpc_tls, .def = "false"},
    PART("GRPC_SERVER_TLS_CERT", "rls.tls.cert_file", "GRPC_SERVER_USE_TLS"),
    PART("GRPC_SERVER_TLS_KEY", "rls.tls.key_file", "GRPC_SERVER_USE_TLS"),
    PART("GRPC_CLIENT_TLS_CACERT", "rls.tls.client_ca_file", "GRPC_SERVER_USE_TLS"),
    NONE("GRPC_CLIENT_TLS_SAN", "not built: any client certificate the CA signed is taken"),
    /* Envoy Gateway sets it; envoyproxy/ratelimit reads no such variable */
    NONE("GRPC_SERVER_TLS_CA_CERT", "envoyproxy/ratelimit does not read it either (its "
         "variable is GRPC_CLIENT_TLS_CACERT): clients are not asked for a certificate"),
    /* logs */
    {.name = "LOG_LEVEL", .option = "log_level", .conv = cv_log_level, .def = "WARN"},
    {.name = "LOG_FORMAT", .option = "log_format", .conv = cv_log_format},
    /* rules */
    {.name = "CONFIG_TYPE", .conv = cv_config_type},
    NONE("FORCE_START_WITHOUT_INITIAL_CONFIG", "the daemon starts at once anyway"),
    NONE("CONFIG_GRPC_XDS_NODE_ID", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_NODE_METADATA", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_SERVER_URL", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_SERVER_USE_TLS", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", XDS_LATER),
    NONE("CONFIG_GRPC_XDS_SERVER_TLS_SAN", XDS_LATER),
    NONE("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", XDS_LATER),
    NONE("XDS_CLIENT_BACKOFF_MAX_INTERVAL", XDS_LATER),
    NONE("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", XDS_LATER),
    NONE("XDS_CLIENT_BACKOFF_JITTER", XDS_LATER),
    NONE("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", XDS_LATER),
    NONE("RUNTIME_IGNOREDOTFILES", "names starting with '.' are always skipped"),
    NONE("RUNTIME_WATCH_ROOT", "the files are watched either way (watch_files): their "
         "directories, a ConfigMap's ..data swap included"),
    NONE("MERGE_DOMAIN_CONFIG", "not built: a domain in two files is an error"),
    NONE("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "not built: /healthcheck follows "
         "failure_mode and the backend"),
    /* stats */
    {.name = "USE_STATSD", .conv = cv_off_only, .note = "statsd is not built: " STATS_PROM},
    NONE("STATSD_HOST", "statsd is not built"),
    NONE("STATSD_PORT", "statsd is not built"),
    {.name = "USE_DOG_STATSD", .conv = cv_off_only, .note = "statsd is not built"},
    NONE("USE_DOG_STATSD_MOGRIFIERS", "statsd is not built"),
    NONE("EXTRA_TAGS", "not built: " STATS_PROM),
    NONE("STATS_FLUSH_INTERVAL", "Prometheus reads the counters when it scrapes"),
    {.name = "DISABLE_STATS", .conv = cv_off_only, .note = "not built: metrics are always "
     "kept"},
    {.name = "USE_PROMETHEUS", .option = "metrics_listen", .conv = cv_prometheus,
     .def = "false"},
    {.name = "PROMETHEUS_ADDR", .option = "metrics_listen", .def = ":9090",
     .note = "read with USE_PROMETHEUS"},
    {.name = "PROMETHEUS_PATH", .option = "metrics_listen", .note = "read with USE_PROMETHEUS"},
    NONE("PROMETHEUS_MAPPER_YAML", "not built: the metrics are its default mapper's names "
         "(rls.envoy_metrics) beside ours; rename them in Prometheus (metric_relabel_configs)"),
    NONE("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "not built: its response time "
         "histogram has no counterpart (ratelimitd_check_duration_seconds is ours)"),
    /* counting */
    NONE("EXPIRATION_JITTER_MAX_SECONDS", "not built: a key expires at its window's end "
         "(its window is the clock's, and no two rules share one)"),
    {.name = "LOCAL_CACHE_SIZE_IN_BYTES", .option = "deny_cache", .conv = cv_local_cache},
    {.name = "NEAR_LIMIT_RATIO", .option = "rls.near_limit_ratio", .conv = cv_ratio},
    {.name = "CACHE_KEY_PREFIX", .option = "redis.key_prefix", .conv = cv_string},
    {.name = "BACKEND_TYPE", .option = "backend", .conv = cv_backend},
    {.name = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", .option = "rls.all_or_nothing",
     .conv = cv_bool},
    {.name = "SHADOW_MODE", .option = "rls.shadow_mode", .conv = cv_bool},
    {.name = "QUOTA_MODE", .conv = cv_off_only, .note = "not built globally: quota_mode per "
     "rule"},
    {.name = "RESPONSE_DYNAMIC_METADATA", .conv = cv_off_only, .note = "not built: no "
     "dynamic metadata is sent"},
    /* headers */
    {.name = "LIMIT_RESPONSE_HEADERS_ENABLED", .option = "rls.response_headers",
     .conv = cv_headers},
    {.name = "LIMIT_LIMIT_HEADER", .option = "rls.header_names.limit", .def = "RateLimit-Limit",
     .note = "read with LIMIT_RESPONSE_HEADERS_ENABLED"},
    {.name = "LIMIT_REMAINING_HEADER", .option = "rls.header_names.remaining",
     .def = "RateLimit-Remaining", .note = "read with LIMIT_RESPONSE_HEADERS_ENABLED"},
    {.name = "LIMIT_RESET_HEADER", .option = "rls.header_names.reset", .def = "RateLimit-Reset",
     .note = "read with LIMIT_RESPONSE_HEADERS_ENABLED"},
    /* Redis */
    {.name = "REDIS_SOCKET_TYPE", .option = "redis.url", .def = "unix",
     .note = "read with REDIS_URL"},
    {.name = "REDIS_TYPE", .option = "redis.url", .def = "SINGLE", .note = "read with REDIS_URL"},
    {.name = "REDIS_URL", .option = "redis.url", .conv = cv_redis_url,
     .def = "/var/run/nutcracker/ratelimit.sock"},
    NONE("REDIS_POOL_SIZE", NO_POOL),
    {.name = "REDIS_AUTH", .option = "redis.password", .conv = cv_redis_auth},
    {.name = "REDIS_TLS", .option = "redis.tls.enabled", .conv = cv_redis_tls},
    PART("REDIS_TLS_CLIENT_CERT", "redis.tls.cert_file", "REDIS_TLS"),
    PART("REDIS_TLS_CLIENT_KEY", "redis.tls.key_file", "REDIS_TLS"),
    PART("REDIS_TLS_CACERT", "redis.tls.ca_file", "REDIS_TLS"),
    PART("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "redis.tls.verify", "REDIS_TLS"),
    NONE("REDIS_PIPELINE_WINDOW", NO_POOL),
    NONE("REDIS_PIPELINE_LIMIT", NO_POOL),
    NONE("REDIS_CLUSTER_PIPELINE_PARALLELISM", NO_POOL),
    PART("REDIS_SENTINEL_AUTH", "redis.sentinel.password", "REDIS_URL"),
    NONE("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "/healthcheck follows the backend under "
         "failure_mode closed"),
    {.name = "REDIS_TIMEOUT", .option = "redis.timeout", .conv = cv_duration},
    NONE("REDIS_POOL_ON_EMPTY_BEHAVIOR", NO_POOL),
    NONE("REDIS_STARTUP_INITIAL_INTERVAL", "the daemon serves at once and connects in the "
         "background"),
    NONE("REDIS_STARTUP_MAX_INTERVAL", "the daemon serves at once and connects in the "
         "background"),
    NONE("REDIS_STARTUP_MAX_ELAPSED_TIME", "the daemon serves at once and connects in the "
         "background"),
    NONE("REDIS_PERSECOND", PERSECOND),
    NONE("REDIS_PERSECOND_SOCKET_TYPE", PERSECOND),
    NONE("REDIS_PERSECOND_TYPE", PERSECOND),
    NONE("REDIS_PERSECOND_URL", PERSECOND),
    NONE("REDIS_PERSECOND_POOL_SIZE", PERSECOND),
    NONE("REDIS_PERSECOND_AUTH", PERSECOND),
    NONE("REDIS_PERSECOND_TLS", PERSECOND),
    NONE("REDIS_PERSECOND_SENTINEL_AUTH", PERSECOND),
    NONE("REDIS_PERSECOND_PIPELINE_WINDOW", PERSECOND),
    NONE("REDIS_PERSECOND_PIPELINE_LIMIT", PERSECOND),
    NONE("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", PERSECOND),
    NONE("REDIS_PERSECOND_TIMEOUT", PERSECOND),
    NONE("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", PERSECOND),
    /* memcache */
    NONE("MEMCACHE_HOST_PORT", MEMCACHE),
    NONE("MEMCACHE_MAX_IDLE_CONNS", MEMCACHE),
    NONE("MEMCACHE_SRV", MEMCACHE),
    NONE("MEMCACHE_SRV_REFRESH", MEMCACHE),
    NONE("MEMCACHE_TLS", MEMCACHE),
    NONE("MEMCACHE_TLS_CLIENT_CERT", MEMCACHE),
    NONE("MEMCACHE_TLS_CLIENT_KEY", MEMCACHE),
    NONE("MEMCACHE_TLS_CACERT", MEMCACHE),
    NONE("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", MEMCACHE),
    /* tracing */
    {.name = "TRACING_ENABLED", .conv = cv_off_only, .note = TRACING},
    NONE("TRACING_SERVICE_NAME", TRACING),
    NONE("TRACING_SERVICE_NAMESPACE", TRACING),
    NONE("TRACING_SERVICE_INSTANCE_ID", TRACING),
    NONE("TRACING_EXPORTER_PROTOCOL", TRACING),
    NONE("TRACING_SAMPLING_RATE", TRACING),
    NONE("OTEL_EXPORTER_OTLP_ENDPOINT", TRACING),
};
/* clang-format on */

/* A variable with one of these and no row: a typo, or a setting of a
 * newer envoyproxy/ratelimit; told by name. */
static const char *const prefixes[] = {
    "BACKEND_",     "CACHE_",  "CONFIG_",   "DEBUG_",      "GRPC_",       "LIMIT_",
    "LOCAL_CACHE_", "LOG_",    "MEMCACHE_", "NEAR_LIMIT_", "PROMETHEUS_", "REDIS_",
    "RUNTIME_",     "STATSD_", "TRACING_",  "USE_",        "XDS_CLIENT_",
};

static const struct ev_row *
find_row(const char *name, size_t n)
{
    for (size_t i = 0; i < RL_ARRAY_LEN(rows); i++)
        if (strlen(rows[i].name) == n && memcmp(rows[i].name, name, n) == 0)
            return &rows[i];
    return NULL;
}

const char *
envoy_env_row(size_t i, const char **option, bool *read)
{
    if (i >= RL_ARRAY_LEN(rows))
        return NULL;
    *option = rows[i].option;
    *read = rows[i].conv != NULL ||
            (rows[i].note != NULL && strncmp(rows[i].note, "read with ", 10) == 0);
    return rows[i].name;
}

int
envoy_env_read(struct envoy_env *ee, char *const *envp, envoy_env_set_fn setfn, void *arg,
               struct rl_errors *notes, struct rl_errors *errs)
{
    struct ev_ctx c = {ee, envp, setfn, arg, notes, errs};
    size_t before = errs->total;

    /* its metric names beside ours: its dashboards and queries read them;
     * it watches its rule files (RUNTIME_WATCH_ROOT only says which
     * directory), and so do we, the TLS files too */
    set(&c, "rls.envoy_metrics", "--envoy-env", xstrdup("true"));
    set(&c, "watch_files", "--envoy-env", xstrdup("true"));
    for (size_t i = 0; i < RL_ARRAY_LEN(rows); i++) {
        const struct ev_row *r = &rows[i];
        const char *v = env_get(envp, r->name);

        if (r->conv != NULL) {
            if (v != NULL || r->def != NULL)
                r->conv(&c, r, v != NULL ? v : r->def);
        } else if (v != NULL && r->option == NULL) {
            note(&c, r->name, r->note);
        }
    }
    for (char *const *e = envp; *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        size_t n = eq != NULL ? (size_t)(eq - *e) : strlen(*e);

        if (find_row(*e, n) != NULL)
            continue;
        for (size_t i = 0; i < RL_ARRAY_LEN(prefixes); i++) {
            if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
                errors_add(notes, "%.*s: not a variable of envoyproxy/ratelimit: ignored",
                           (int)n, *e);
                break;
            }
        }
    }
    return errs->total == before ? RL_OK : RL_ERR;
}

void
envoy_env_free(struct envoy_env *ee)
{
    for (size_t i = 0; i < ee->n; i++)
        free(ee->owned[i]);
    free(ee->owned);
    ee->owned = NULL;
    ee->n = 0;
}

bool
envoy_env_command(const char *argv0)
{
    const char *base = strrchr(argv0, '/');

    return strcmp(base != NULL ? base + 1 : argv0, "ratelimit") == 0;
}
