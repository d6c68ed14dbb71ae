/* daemon.c — see daemon.h. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "ac_config.h"
#include "admin.h"
#include "api.h"
#include "backend.h"
#include "backend_cluster.h"
#include "backend_redis.h"
#include "config.h"
#include "daemon.h"
#include "debug.h"
#include "grpc_tls.h"
#include "log.h"
#include "metrics.h"
#include "netaddr.h"
#include "notify.h"
#include "redis_tls.h"
#include "redis_tls_reload.h"
#include "rls_grpc.h"
#include "watch.h"
#include "rls_rules.h"
#include "util.h"
#include "worker.h"

#define LISTEN_BACKLOG 1024

/* The main thread's config: what reloads compare with and hand over.  Each
 * worker holds its own reference (worker_set_config), so no lock. */
static struct rl_config *current;

static struct rl_worker **workers;
static size_t nworkers;

static void
set_config(struct rl_config *cfg)
{
    struct rl_config *old = current;

    current = cfg;
    for (size_t i = 0; cfg != NULL && i < nworkers; i++)
        worker_set_config(workers[i], cfg);
    /* In-flight checks hold their own reference: they finish on the old one. */
    config_unref(old);
}

int
daemon_load_config(const struct rl_options *o, struct rl_config **out, struct rl_errors *errs)
{
    struct rl_config *cfg;
    size_t before = errs->total;

    if (o->config_file != NULL) {
        if (config_load_file(o->config_file, &cfg, errs) != RL_OK)
            return RL_ERR;
    } else {
        cfg = config_new_defaults();
    }
    /* Every problem is collected in errs, so keep going after one.  The
     * objects are checked once all are set: a source may set two fields of
     * one (envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT and _KEY), each
     * object once, as told by the last source that set a field of it. */
    for (size_t i = 0; i < o->nov; i++)
        if (config_set_option_deferred(cfg, o->ov[i].name, o->ov[i].text, o->ov[i].origin,
                                       errs) != RL_OK)
            continue;
    for (size_t i = 0; i < o->nov && errs->total == before; i++) {
        const char *dot = strrchr(o->ov[i].name, '.');
        size_t plen = dot != NULL ? (size_t)(dot - o->ov[i].name) : 0;
        bool later = false;

        for (size_t j = i + 1; j < o->nov && !later; j++)
            later = strncmp(o->ov[j].name, o->ov[i].name, plen) == 0 &&
                    strrchr(o->ov[j].name, '.') == o->ov[j].name + plen;
        if (!later && config_check_option(cfg, o->ov[i].name, o->ov[i].origin, errs) != RL_OK)
            continue;
    }
    if (config_validate(cfg, errs) != RL_OK || errs->total != before) {
        config_unref(cfg);
        *out = NULL;
        return RL_ERR;
    }
    config_set_metrics_ids(cfg, metrics_policy_id);
    *out = cfg;
    return RL_OK;
}

/* ---- listening sockets ---------------------------------------------------- */

static int
set_nonblock_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return RL_ERR;
    return RL_OK;
}

/* RL_ERR with errno's words as the cause; fd (when one) is closed. */
static int
fail_socket(int fd, char **cause)
{
    *cause = xasprintf("%s", strerror(errno));
    if (fd >= 0)
        close(fd);
    return RL_ERR;
}

/* fd bound to a and listening: *out; on RL_ERR fd is closed. */
static int
bind_listen(int fd, const struct rl_listen_addr *a, int *out, char **cause)
{
    if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 ||
        listen(fd, LISTEN_BACKLOG) < 0 || set_nonblock_cloexec(fd) != RL_OK)
        return fail_socket(fd, cause);
    *out = fd;
    return RL_OK;
}

/* *out: a socket listening at a (with SO_REUSEPORT when asked). */
static int
open_tcp(const struct rl_listen_addr *a, int reuseport, int *out, char **cause)
{
    int one = 1;
    int fd = socket(a->family, SOCK_STREAM, 0);

    if (fd < 0)
        goto fail;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* Accepted sockets inherit it: answers go out at once, no Nagle wait. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
        goto fail;
    return bind_listen(fd, a, out, cause);
fail:
    return fail_socket(fd, cause);
}

/*
 * With SO_REUSEPORT a second daemon on the same port would silently share
 * it.  Binding once without the option first fails when anyone holds the
 * port, so "address in use" is still reported.
 */
static int
probe_tcp(const struct rl_listen_addr *a, char **cause)
{
    int fd;

    if (open_tcp(a, 0, &fd, cause) != RL_OK)
        return RL_ERR;
    close(fd);
    return RL_OK;
}

/* *out: a socket listening at the path of a. */
static int
open_unix(const struct rl_listen_addr *a, int *out, char **cause)
{
    struct stat st;
    int fd;

    /* connect() to a regular file says ECONNREFUSED too: without this a
     * mistyped -l would delete whatever file it named. */
    if (lstat(a->path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
        *cause = xasprintf("%s exists and is not a socket: refusing to replace it", a->path);
        return RL_ERR;
    }
    if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
        goto fail;
    /* A stale socket file from a dead daemon is replaced; a live one is not. */
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0) {
        errno = EADDRINUSE;
        goto fail;
    }
    if (errno == ECONNREFUSED)
        unlink(a->path);
    return bind_listen(fd, a, out, cause);
fail:
    return fail_socket(fd, cause);
}

/* One socket per worker: SO_REUSEPORT lets the kernel spread connections. */
static int
open_listeners(const struct rl_listen_addr *a, int *fds, size_t n, char **cause)
{
    if (a->family == AF_UNIX) {
        if (open_unix(a, &fds[0], cause) != RL_OK)
            return RL_ERR;
        for (size_t i = 1; i < n; i++)
            fds[i] = fcntl(fds[0], F_DUPFD_CLOEXEC, 0);
        return RL_OK;
    }
    if (n > 1 && probe_tcp(a, cause) != RL_OK)
        return RL_ERR;
    for (size_t i = 0; i < n; i++) {
        if (open_tcp(a, n > 1, &fds[i], cause) != RL_OK) {
            while (i-- > 0)
                close(fds[i]);
            return RL_ERR;
        }
    }
    return RL_OK;
}

/* ---- signals -------------------------------------------------------------- */

struct run_state {
    struct event_base *base;
    struct event *ready_ev; /* READY=1 still owed to systemd */
    struct event *sigs[3];  /* SIGTERM, SIGINT, SIGHUP */
    int64_t ready_by_us;
    const struct rl_options *opts;
    int stopping;
    size_t exited;
    /* admin_listen, metrics_listen, debug_listen, once open */
    struct rl_listen_addr side[3];
    struct rl_listen_addr rls; /* rls.listen, once open */
    int *rls_fds;              /* one per worker, until each takes its own */
    struct rl_watch *watch;    /* watch_files: NULL when off */
};

/* watch_files: the files a reload reads, watched (by their directories)
 * while the option is on; set again after every reload. */
static void on_files_changed(void *arg);

static void
watch_config(struct run_state *rs, const struct rl_config *cfg)
{
    const char *paths[] = {
        rs->opts->config_file,       cfg->rls.config,
        cfg->rls.tls.cert_file,      cfg->rls.tls.key_file,
        cfg->rls.tls.client_ca_file, cfg->redis.tls.ca_file,
        cfg->redis.tls.cert_file,    cfg->redis.tls.key_file,
        cfg->redis.password_file,    cfg->admin_token_file,
    };

    if (!cfg->watch_files) {
        watch_free(rs->watch);
        rs->watch = NULL;
        return;
    }
    if (rs->watch == NULL)
        rs->watch = watch_new(rs->base, on_files_changed, rs);
    watch_set(rs->watch, paths, RL_ARRAY_LEN(paths));
}

static void reload(struct run_state *rs);

/* A file a reload reads changed on disk: the reload SIGHUP makes. */
static void
on_files_changed(void *arg)
{
    struct run_state *rs = arg;

    log_info(LOG_MSG("files changed on disk, reloading"));
    reload(rs);
}

static void
reload(struct run_state *rs)
{
    struct rl_errors errs = {0};
    struct rl_config *cfg, *old;
    char *cause = NULL;

    notify_systemd("RELOADING=1");
    log_info(LOG_MSG("reloading configuration"),
             LOG_S("file", rs->opts->config_file ? rs->opts->config_file : "(built-in)"));
    if (daemon_load_config(rs->opts, &cfg, &errs) != RL_OK) {
        for (size_t i = 0; i < errs.n; i++)
            log_error(LOG_MSG("reload rejected, keeping the running configuration"),
                      LOG_Q("problem", errs.msg[i]));
        errors_free(&errs);
        metrics_reload(0, 0);
        notify_systemd("READY=1");
        return;
    }
    old = current;
    config_keep_restart_options(cfg, old, &errs);
    for (size_t i = 0; i < errs.n; i++)
        log_warn(LOG_MSG("option changes only on restart; the running value stays"),
                 LOG_S("option", errs.msg[i]));
    errors_free(&errs);
    /* TLS files are read again (rotated in place or renamed); connections
     * open keep theirs, new handshakes use the new ones.  The gRPC
     * listener's are checked first, so a bad one changes nothing. */
    if (grpc_tls_check(&cfg->rls.tls, &cause) != RL_OK ||
        (cfg->backend == RL_BACKEND_REDIS && rtls_reload(&cfg->redis, &cause) != RL_OK) ||
        grpc_tls_configure(&cfg->rls.tls, &cause) != RL_OK) {
        log_error(LOG_MSG("reload rejected, keeping the running configuration"),
                  LOG_Q("problem", cause));
        free(cause);
        config_unref(cfg);
        metrics_reload(0, 0);
        notify_systemd("READY=1");
        return;
    }
    log_set_level(cfg->log_level);
    log_set_format(cfg->log_format);
    config_warnings(cfg, &errs);
    for (size_t i = 0; i < errs.n; i++)
        log_warn(LOG_MSG("configuration warning"), LOG_S("warning", errs.msg[i]));
    errors_free(&errs);
    metrics_reload(1, cfg->hash);
    set_config(cfg);
    watch_config(rs, cfg);
    log_info(LOG_MSG("configuration reloaded"), LOG_U("policies", cfg->npolicies),
             LOG_U("rls_rules", cfg->rls.rules != NULL ? cfg->rls.rules->nrules : 0));
    notify_systemd("READY=1");
}

/* A worker's loop ended (drained, or failed): when all have, stop. */
static void
on_worker_exit(evutil_socket_t fd, short what, void *arg)
{
    struct run_state *rs = arg;

    if (++rs->exited == nworkers)
        event_base_loopexit(rs->base, NULL);
    (void)fd;
    (void)what;
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct run_state *rs = arg;

    if (sig == SIGHUP) {
        reload(rs);
        return;
    }
    if (rs->stopping) {
        log_warn(LOG_MSG("second signal, exiting now"));
        _exit(0);
    }
    rs->stopping = 1;
    notify_systemd("STOPPING=1");
    log_info(LOG_MSG("stopping: draining in-flight checks"),
             LOG_I("grace_ms", current->shutdown_grace_ms));
    for (size_t i = 0; i < nworkers; i++)
        worker_drain(workers[i], current->shutdown_grace_ms);
    /* The workers end on their own; on_worker_exit ends this loop. */
    (void)what;
}

/* ---- workers and the admin listener ---------------------------------------- */

/* The backend a config asks for (redis.cluster picks Cluster): the workers
 * host it without knowing which. */
static const struct rl_backend_ops *
backend_for(const struct rl_config *cfg)
{
    if (cfg->backend == RL_BACKEND_MEMORY)
        return &rl_backend_memory_ops;
    return cfg->redis.cluster.n > 0 ? &rl_backend_cluster_ops : &rl_backend_redis_ops;
}

/* Each worker takes its listening socket; on failure the rest are closed. */
static int
init_workers(struct run_state *rs, struct rl_config *cfg, int *fds)
{
    char *cause = NULL;

    for (size_t i = 0; i < nworkers; i++) {
        if (worker_init(&workers[i], (int)i, fds[i], cfg, backend_for(cfg), api_handle,
                        &cause) != RL_OK) {
            log_error(LOG_MSG("cannot start worker"), LOG_U("worker", i),
                      LOG_Q("error", cause));
            free(cause);
            for (size_t j = i + 1; j < nworkers; j++)
                close(fds[j]);
            nworkers = i + 1;
            return RL_ERR;
        }
        worker_on_exit(workers[i], event_new(rs->base, -1, 0, on_worker_exit, rs));
        worker_set_peers(workers[i], workers, nworkers);
    }
    return RL_OK;
}

/*
 * The operator's listeners are served by worker 0 alone, on its loop: the
 * admin API needs a backend connection and a hybrid table, which live per
 * worker (the other workers hear of its changes through
 * worker_forget_key), and their traffic is an operator's or a scraper's, a
 * handful of requests.  `option` names the address in the log lines.
 */
static int
serve_side(struct rl_listen_addr *la, const char *option, const char *addr,
           http_handler handler)
{
    char *cause = NULL;
    int fd = -1, rc;

    if (addr == NULL)
        return RL_OK;
    if (listen_addr_parse(addr, la, &cause) == RL_OK) {
        rc = la->family == AF_UNIX ? open_unix(la, &fd, &cause) : open_tcp(la, 0, &fd, &cause);
        /* a socket worker_serve_side refuses is closed: it takes it */
        if (rc == RL_OK && worker_serve_side(workers[0], fd, handler, &cause) == RL_OK)
            return RL_OK;
    }
    log_error(LOG_MSG("cannot listen"), LOG_S(option, addr), LOG_Q("error", cause));
    free(cause);
    /* nothing bound: a Unix path is not ours to remove */
    listen_addr_clear(la);
    memset(la, 0, sizeof(*la));
    return RL_ERR;
}

static int
serve_sides(struct run_state *rs, const struct rl_config *cfg)
{
    if (serve_side(&rs->side[0], "admin_listen", cfg->admin_listen, admin_handle) != RL_OK ||
        serve_side(&rs->side[1], "metrics_listen", cfg->metrics_listen, api_metrics_handle) !=
            RL_OK ||
        serve_side(&rs->side[2], "debug_listen", cfg->debug_listen, debug_handle) != RL_OK)
        return RL_ERR;
    if (cfg->admin_listen != NULL)
        log_info(LOG_MSG("admin API listening"), LOG_S("admin_listen", cfg->admin_listen),
                 LOG_S("token", cfg->admin_token != NULL ? "required" : "none"));
    if (cfg->metrics_listen != NULL)
        log_info(LOG_MSG("metrics listening"), LOG_S("metrics_listen", cfg->metrics_listen));
    if (cfg->debug_listen != NULL)
        log_info(LOG_MSG("debug listener listening"),
                 LOG_S("debug_listen", cfg->debug_listen));
    return RL_OK;
}

/*
 * The gRPC listener (rls.listen) on every worker, as the check listener:
 * one SO_REUSEPORT socket each, or one Unix socket shared.
 */
static int
serve_rls(struct run_state *rs, const struct rl_config *cfg)
{
    char *cause = NULL;
    size_t i = 0;

    if (cfg->rls.listen == NULL)
        return RL_OK;
    rs->rls_fds = xcalloc(nworkers, sizeof(*rs->rls_fds));
    if (listen_addr_parse(cfg->rls.listen, &rs->rls, &cause) != RL_OK ||
        open_listeners(&rs->rls, rs->rls_fds, nworkers, &cause) != RL_OK) {
        log_error(LOG_MSG("cannot listen"), LOG_S("rls.listen", cfg->rls.listen),
                  LOG_Q("error", cause));
        free(cause);
        /* nothing bound: a Unix path is not ours to remove */
        listen_addr_clear(&rs->rls);
        memset(&rs->rls, 0, sizeof(rs->rls));
        return RL_ERR;
    }
    for (; i < nworkers; i++) {
        if (worker_serve_rls(workers[i], rs->rls_fds[i], rls_grpc_handle,
                             rls_grpc_new(workers[i]), rls_grpc_free, &cause) != RL_OK) {
            log_error(LOG_MSG("cannot serve rls.listen"), LOG_U("worker", i),
                      LOG_Q("error", cause));
            free(cause);
            for (size_t j = i + 1; j < nworkers; j++)
                close(rs->rls_fds[j]);
            return RL_ERR;
        }
    }
    log_info(LOG_MSG("rate limit service (gRPC) listening"),
             LOG_S("rls.listen", cfg->rls.listen),
             LOG_S("tls", cfg->rls.tls.cert_file == NULL        ? "off"
                          : cfg->rls.tls.client_ca_file != NULL ? "mutual"
                                                                : "on"));
    return RL_OK;
}

/* ---- run --------------------------------------------------------------------- */

/* How often the start looks whether every worker's backend is ready. */
#define READY_POLL_MS 10

/*
 * READY=1 once every worker's backend has made its first connection (its
 * handshake done), or at redis.connect_timeout when one has not: a unit
 * ordered after this one finds checks decided by Redis, and systemd is
 * never held up longer than a connection attempt.
 */
static void
on_ready_poll(evutil_socket_t fd, short what, void *arg)
{
    struct run_state *rs = arg;
    const char *reason = NULL;
    struct timeval tv = {0, READY_POLL_MS * 1000};

    if (rs->stopping)
        return; /* STOPPING=1 said already */
    for (size_t i = 0; i < nworkers && reason == NULL; i++)
        reason = worker_published_readiness(workers[i]);
    if (reason != NULL && now_monotonic_us() < rs->ready_by_us) {
        evtimer_add(rs->ready_ev, &tv);
        return;
    }
    if (reason != NULL)
        log_warn(LOG_MSG("backend not ready within connect_timeout, telling systemd ready"),
                 LOG_Q("reason", reason));
    notify_systemd("READY=1");
    (void)fd;
    (void)what;
}

static size_t
worker_count(const struct rl_config *cfg)
{
    long ncpu;

    if (cfg->workers != 0)
        return (size_t)cfg->workers;
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 ? (size_t)ncpu : 1;
}

/* The workers on their sockets (the fds are theirs from here on), their
 * threads running, the operator's listeners on worker 0 when set, and
 * the signals turned into events on the main loop.
 * *started counts the threads to join, whatever the outcome. */
static int
start_workers(struct run_state *rs, struct rl_config *cfg, int *fds, size_t *started)
{
    static const int signums[RL_ARRAY_LEN(rs->sigs)] = {SIGTERM, SIGINT, SIGHUP};
    sigset_t block, old;

    workers = xcalloc(nworkers, sizeof(*workers));
    if (init_workers(rs, cfg, fds) != RL_OK || serve_sides(rs, cfg) != RL_OK ||
        serve_rls(rs, cfg) != RL_OK)
        return RL_ERR;

    /* Workers never see these signals: the main loop turns them into events. */
    sigemptyset(&block);
    for (size_t i = 0; i < RL_ARRAY_LEN(signums); i++)
        sigaddset(&block, signums[i]);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (; *started < nworkers; (*started)++) {
        if (worker_start(workers[*started]) != RL_OK) {
            log_error(LOG_MSG("cannot start worker thread"), LOG_U("worker", *started));
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            for (size_t i = 0; i < *started; i++)
                worker_drain(workers[i], 0);
            return RL_ERR;
        }
    }
    for (size_t i = 0; i < RL_ARRAY_LEN(signums); i++) {
        rs->sigs[i] = evsignal_new(rs->base, signums[i], on_signal, rs);
        evsignal_add(rs->sigs[i], NULL);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return RL_OK;
}

/* Until the last worker's loop has ended. */
static void
serve(struct run_state *rs, const struct rl_config *cfg)
{
    metrics_started();
    log_info(LOG_MSG("ratelimitd started"), LOG_S("version", PACKAGE_VERSION),
             LOG_S("listen", cfg->listen), LOG_U("workers", nworkers),
             LOG_S("backend", backend_for(cfg)->name));
    /* Ready means listening (the sockets are bound, every worker runs) and
     * the backend connected: see on_ready_poll. */
    rs->ready_ev = evtimer_new(rs->base, on_ready_poll, rs);
    rs->ready_by_us = now_monotonic_us() + cfg->redis.connect_timeout_ms * 1000;
    on_ready_poll(-1, 0, rs);

    watch_config(rs, cfg);
    event_base_dispatch(rs->base);
    watch_free(rs->watch);
    rs->watch = NULL;
    for (size_t i = 0; i < RL_ARRAY_LEN(rs->sigs); i++)
        event_free(rs->sigs[i]);
    event_free(rs->ready_ev);
}

static void
stop_workers(size_t started)
{
    for (size_t i = 0; i < started; i++)
        worker_join(workers[i]);
    for (size_t i = 0; i < nworkers; i++)
        worker_free(workers[i]);
    free(workers);
    workers = NULL;
    nworkers = 0;
}

int
daemon_run(const struct rl_options *opts, struct rl_config *cfg)
{
    struct rl_listen_addr la;
    struct run_state rs = {0};
    char *cause = NULL;
    int *fds, rc = 2;
    size_t started = 0;

    rs.opts = opts;
    log_set_level(cfg->log_level);
    log_set_format(cfg->log_format);
    metrics_set_config_hash(cfg->hash);
    set_config(cfg);
    nworkers = worker_count(cfg);
    if (listen_addr_parse(cfg->listen, &la, &cause) != RL_OK) {
        log_error(LOG_MSG("bad listen address"), LOG_S("listen", cfg->listen),
                  LOG_Q("error", cause));
        free(cause);
        return 1;
    }
    if (cfg->backend == RL_BACKEND_REDIS && rtls_configure(&cfg->redis, &cause) != RL_OK) {
        log_error(LOG_MSG("cannot set up Redis TLS"), LOG_Q("error", cause));
        free(cause);
        return 1;
    }
    if (grpc_tls_configure(&cfg->rls.tls, &cause) != RL_OK) {
        log_error(LOG_MSG("cannot set up the gRPC listener's TLS"), LOG_Q("error", cause));
        free(cause);
        rtls_shutdown();
        return 1;
    }
    fds = xcalloc(nworkers, sizeof(*fds));
    if (open_listeners(&la, fds, nworkers, &cause) != RL_OK) {
        log_error(LOG_MSG("cannot listen"), LOG_S("listen", cfg->listen),
                  LOG_Q("error", cause));
        free(cause);
        free(fds);
        listen_addr_clear(&la);
        return 2;
    }
    evthread_use_pthreads();
    signal(SIGPIPE, SIG_IGN);
    srandom((unsigned)time(NULL) ^ (unsigned)getpid());

    rs.base = event_base_new();
    if (start_workers(&rs, cfg, fds, &started) == RL_OK) {
        serve(&rs, cfg);
        rc = 0;
    }
    stop_workers(started);
    event_base_free(rs.base);
    free(fds);
    if (la.family == AF_UNIX && la.path != NULL)
        unlink(la.path);
    listen_addr_clear(&la);
    for (size_t i = 0; i < RL_ARRAY_LEN(rs.side); i++) {
        if (rs.side[i].family == AF_UNIX && rs.side[i].path != NULL)
            unlink(rs.side[i].path);
        listen_addr_clear(&rs.side[i]);
    }
    if (rs.rls.family == AF_UNIX && rs.rls.path != NULL)
        unlink(rs.rls.path);
    listen_addr_clear(&rs.rls);
    free(rs.rls_fds);
    set_config(NULL);
    rtls_shutdown();
    grpc_tls_shutdown();
    log_info(LOG_MSG("ratelimitd stopped"), LOG_I("exit", rc));
    return rc;
}
