/*
 * worker.h — one thread, one event_base, one listener, one backend
 * connection.  Workers share nothing mutable but the memory backend's store:
 * each holds its own reference to the config, handed over by an event on
 * reload, so no check takes a lock and N workers scale across cores.
 */
#ifndef RL_WORKER_H
#define RL_WORKER_H

#include <pthread.h>
#include <stdbool.h>

#include "arena.h"
#include "check.h"
#include "slab.h"

struct event_base;
struct event;
struct evbuffer;
struct grpc_server;
struct http_server;
struct rl_check_req;
struct rl_check_res;
struct worker_news;
struct worker_held;
struct http_req;

struct rl_worker {
    int id;
    pthread_t thread;
    struct event_base *base;
    struct http_server *http;   /* the check listener */
    struct http_server *admin;  /* admin_listen, on worker 0 only */
    struct grpc_server *rls;    /* rls.listen, Envoy's rate limit service */
    struct arena rls_arena;     /* its services' messages (rls_grpc.c) */
    struct rl_config *cfg;      /* in force on this worker (a reference) */
    struct rl_config *next_cfg; /* handed over by worker_set_config (atomic) */
    struct event *cfg_ev;
    int listen_fd;
    struct rl_backend *backend;
    struct rl_backend *local; /* the memory backend that failure_mode
                                     * local falls back on: made whenever the
                                     * backend is Redis, whatever the mode;
                                     * NULL with the memory backend */
    struct rl_check_env env;
    struct slab slab;           /* env.slab */
    struct event *drain_ev;     /* activated by the main thread */
    struct event *grace_ev;     /* end of shutdown_grace */
    struct event *exited_ev;    /* on the main base: this loop ended */
    struct rl_metrics *metrics; /* this worker's counters */
    int draining;
    int64_t grace_ms;
    uint64_t access_seq; /* checks seen, for access_log sampling */
    /* Readiness is the daemon's, not one worker's: a probe lands on any
     * worker, and a check on any other.  Each worker publishes its own. */
    struct rl_worker *peers; /* every worker, this one included */
    size_t npeers;
    struct event *ready_ev;   /* republishes ready_reason */
    const char *ready_reason; /* NULL: ready; static text (atomic) */
    /* Answers of admin actions for this worker's local views: pushed by
     * worker 0 (a lock-free stack), taken whole on this thread by news_ev. */
    struct worker_news *news;
    struct event *news_ev;
    /* Checks held for max_delay (env.delayed counts them with those sent
     * asking for a reservation); each answered by its timer, or with 503
     * when draining begins. */
    int64_t delayed;
    struct worker_held *held;
    /* Held answers done with, kept for the next (their timer and buffer
     * reused: no allocation per held check); at most as many as were ever
     * held at once, which max_delayed bounds. */
    struct worker_held *held_spare;
};

/* Set up a worker on an already listening socket (it takes the fd). */
int worker_init(struct rl_worker *w, int id, int listen_fd, struct rl_config *cfg,
                char **cause) RL_WUR;
/* Serve the admin API (admin.h) on listening socket fd (taken) too. */
int worker_serve_admin(struct rl_worker *w, int fd, char **cause) RL_WUR;
/* Serve Envoy's rate limit service over gRPC (rls_grpc.h) on listening
 * socket fd (taken) too. */
int worker_serve_rls(struct rl_worker *w, int fd, char **cause) RL_WUR;
/*
 * On w's thread, with the backend's answer res to admin action req (sent at
 * sent_us under cfg): every worker drops its cached denial of the key and
 * takes res as its view of a hybrid key (hybrid_admin_done), w at once, the
 * others on their next loop pass.
 */
void worker_admin_done(struct rl_worker *w, struct rl_config *cfg,
                       const struct rl_check_req *req, int64_t sent_us,
                       const struct rl_check_res *res);
/* After worker_init of every worker: peers set, threads started. */
int worker_start(struct rl_worker *w) RL_WUR;
/* From any thread: the worker takes its own reference to cfg and swaps it
 * in on its own thread; checks in flight finish on the one they started on. */
void worker_set_config(struct rl_worker *w, struct rl_config *cfg);
/* From any thread: stop accepting, finish in-flight checks within grace. */
void worker_drain(struct rl_worker *w, int64_t grace_ms);
void worker_join(struct rl_worker *w);
void worker_free(struct rl_worker *w);

/* Why the daemon is not ready (static text, and the worker that says so),
 * or NULL when every worker is: w's own state read now, the others' as they
 * last published it (at most READY_PUBLISH_MS ago).  On w's thread. */
const char *worker_readiness(struct rl_worker *w, int *which);

/*
 * Whether the daemon can answer checks as configured (GET /serving, gRPC
 * health's SERVING): not while draining; with failure_mode closed, not while
 * a worker's backend is not ready (its checks would be 503s); with open or
 * local, yes even then (they answer without the backend, degraded).
 * *reason: why not, or why the answers are degraded; NULL when every backend
 * is ready (static text).  *which (may be NULL): the worker that says so.
 * On w's thread, as worker_readiness.
 */
bool worker_serving(struct rl_worker *w, const char **reason, int *which);

/* Called by the API around each check; the end may finish a drain. */
void worker_check_begin(struct rl_worker *w);
void worker_check_done(struct rl_worker *w);

/*
 * Answer r (a check begun with worker_check_begin, its decision held for
 * max_delay) with this status, header lines and body after `ms`, from a
 * timer on the worker's loop; at once with 503 when the worker drains.
 * Then its place in env.delayed is given back and the check is done.  The
 * bytes are copied.  A client that closes meanwhile keeps its reservation:
 * it was counted.
 */
void worker_hold(struct rl_worker *w, struct http_req *r, int status, const char *headers,
                 size_t hlen, const char *body, size_t blen, int64_t ms);

/* Prometheus text of every worker's counters, summed (on w's thread). */
void worker_metrics(struct rl_worker *w, struct evbuffer *out);

#endif
