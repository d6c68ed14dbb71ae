/*
 * worker.h — one thread, one event_base, one listener, one backend
 * connection.  Workers share nothing mutable but the memory backend's store:
 * each holds its own reference to the config, handed over by an event on
 * reload, so no check takes a lock and N workers scale across cores.
 */
#ifndef RL_WORKER_H
#define RL_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "grpc.h"
#include "http.h"

struct event;
struct evbuffer;
struct rl_backend;
struct rl_backend_ops;
struct rl_check_env;
struct rl_check_req;
struct rl_check_res;
struct rl_config;
struct rl_metrics;
struct rl_top;
/* Private to worker.c: the doors (api.c, admin.c, rls_grpc.c) reach a
 * worker through the functions below, and the worker knows them only as
 * the handlers daemon.c passes in. */
struct rl_worker;

/*
 * Set up a worker on an already listening socket (it takes the fd), whose
 * checks go to a `backend` of its own, made on its loop (the one cfg asks
 * for: daemon.c chooses), and whose requests go to `checks` (arg: the
 * worker).  *out is set whatever the outcome: worker_free it.
 */
int worker_init(struct rl_worker **out, int id, int listen_fd, struct rl_config *cfg,
                const struct rl_backend_ops *backend, http_handler checks,
                char **cause) RL_WUR;
/* Serve an operator's listener (the admin API, metrics_listen,
 * debug_listen: worker 0 alone) on listening socket fd (taken) too, with
 * handler (arg: the worker). */
int worker_serve_side(struct rl_worker *w, int fd, http_handler handler, char **cause) RL_WUR;
/* Serve Envoy's rate limit service over gRPC on listening socket fd (taken)
 * too, with handler and its arg, the door's own state for this worker: the
 * worker keeps it, whatever the outcome, and frees it with arg_free after
 * its server, in worker_free. */
int worker_serve_rls(struct rl_worker *w, int fd, grpc_handler handler, void *arg,
                     void (*arg_free)(void *), char **cause) RL_WUR;
/* Before worker_start: every worker (peers[i], this one included), whose
 * readiness and counters this one reads. */
void worker_set_peers(struct rl_worker *w, struct rl_worker **peers, size_t n);
/* Before worker_start: ev (on the main thread's base) is activated when
 * w's loop has ended; worker_free frees it. */
void worker_on_exit(struct rl_worker *w, struct event *ev);
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

/* Every worker's heavy-caller tables (top.h; NULL ones with top_k 0), at
 * most max: how many.  On w's thread. */
size_t worker_tops(const struct rl_worker *w, struct rl_top **out, size_t max);
/* Every worker's counters (read them with relaxed atomics), at most max:
 * how many.  On w's thread. */
size_t worker_all_counters(const struct rl_worker *w, struct rl_metrics **out, size_t max);

/* From any thread: why w's backend is not ready as w last published it
 * (at most READY_PUBLISH_MS ago), NULL when it is. */
const char *worker_published_readiness(const struct rl_worker *w);

/* ---- for the doors, on w's thread ---- */

int worker_id(const struct rl_worker *w);
/* The config in force on w (its reference: take your own to keep it past
 * this loop pass). */
struct rl_config *worker_config(const struct rl_worker *w);
/* w's counters (metrics.h). */
struct rl_metrics *worker_counters(const struct rl_worker *w);
/* What w lends each check (check.h). */
struct rl_check_env *worker_env(struct rl_worker *w);
struct rl_backend *worker_backend(const struct rl_worker *w);
bool worker_draining(const struct rl_worker *w);
/*
 * Admission under max_inflight, the one for every door: a backend that
 * slows down must not grow a queue without bound.  False past the cap,
 * counted as overloaded: the door answers at once (503, UNAVAILABLE) and
 * lets the caller decide.
 */
bool worker_admit(struct rl_worker *w);
/* Whether this check is one access_log samples (every access_log-th of
 * w's). */
bool worker_access_sampled(struct rl_worker *w);

#endif
