/* worker.c — see worker.h. */
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "backend.h"
#include "caller_limits.h"
#include "check.h"
#include "config.h"
#include "deny_cache.h"
#include "grpc.h"
#include "http.h"
#include "hybrid.h"
#include "pending.h"
#include "log.h"
#include "metrics.h"
#include "slab.h"
#include "top.h"
#include "util.h"
#include "worker.h"

/* How often a worker tells the others whether its backend is ready. */
#define READY_PUBLISH_MS 100
/* Blocks the worker's slab keeps per size: the calls in flight at once
 * (rls.c's state of a call), past which a burst gives its blocks back. */
#define WORKER_SLAB_KEEP 256
/* idle check ops a worker keeps (4 KB each): what a burst took past it is
 * given back */
#define WORKER_OPS_KEEP 64

/* The operator's listeners worker 0 serves besides the check listener. */
#define WORKER_SIDE_MAX 3

struct worker_news;
struct worker_held;

struct rl_worker {
    int id;
    pthread_t thread;
    struct event_base *base;
    struct http_server *http; /* the check listener */
    /* worker 0 only: admin_listen, metrics_listen, debug_listen */
    struct http_server *side[WORKER_SIDE_MAX];
    size_t nside;
    struct grpc_server *rls; /* rls.listen, Envoy's rate limit service */
    void *rls_door;          /* its handler's state (worker_serve_rls) */
    void (*rls_door_free)(void *);
    struct rl_config *cfg;      /* in force on this worker (a reference) */
    struct rl_config *next_cfg; /* handed over by worker_set_config (atomic) */
    int listen_fd;
    struct rl_backend *backend;
    struct rl_backend *local; /* the memory backend that failure_mode
                                     * local falls back on: made whenever the
                                     * backend is Redis, whatever the mode;
                                     * NULL with the memory backend */
    struct rl_check_env env;
    struct slab slab; /* env.slab */
    /* The one way in from other threads (the base has no lock): they set
     * a WAKE_* bit in wake and write to wake_fd, whose event runs them. */
    unsigned wake;
    int wake_fd;
    struct event *wake_ev;
    struct event *grace_ev;     /* end of shutdown_grace */
    struct event *exited_ev;    /* on the main base: this loop ended */
    struct rl_metrics *metrics; /* this worker's counters */
    int draining;
    int64_t grace_ms;
    uint64_t access_seq; /* checks seen, for access_log sampling */
    /* Readiness is the daemon's, not one worker's: a probe lands on any
     * worker, and a check on any other.  Each worker publishes its own. */
    struct rl_worker **peers; /* every worker, this one included */
    size_t npeers;
    struct event *ready_ev;   /* republishes ready_reason */
    const char *ready_reason; /* NULL: ready; static text (atomic) */
    /* Answers of admin actions for this worker's local views: pushed by
     * worker 0 (a lock-free stack), taken whole on this thread (WAKE_NEWS). */
    struct worker_news *news;
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

/*
 * What other threads ask of a worker: a bit each, run on its own thread.
 * Its base is made without libevent's lock (EVENT_BASE_FLAG_NOLOCK: what
 * the lock cost, docs/BENCHMARKS.md, "Measurements behind the code"), so
 * nothing but wake() may reach it from another thread.
 */
enum {
    WAKE_CONFIG = 1, /* worker_set_config */
    WAKE_NEWS = 2,   /* push_news */
    WAKE_DRAIN = 4,  /* worker_drain */
};

/* Thread-safe: the bit first, then the eventfd, which on_wake reads
 * before it takes the bits (a bit set after that read writes again). */
static void
wake(struct rl_worker *w, unsigned bit)
{
    uint64_t one = 1;

    __atomic_fetch_or(&w->wake, bit, __ATOMIC_ACQ_REL);
    /* EAGAIN only when the counter is full: a wake is pending anyway */
    if (write(w->wake_fd, &one, sizeof(one)) < 0) {
    }
}

/* Draining ends when every connection got its answers and closed, no check
 * waits for the backend, and every count a hybrid policy admitted has
 * reached it (or shutdown_grace is over).  A connection closes only after
 * its last answer was written, so nothing is left to flush. */
static bool
drained(const struct rl_worker *w)
{
    for (size_t i = 0; i < w->nside; i++)
        if (http_server_connections(w->side[i]) != 0)
            return false;
    return http_server_connections(w->http) == 0 && w->metrics->inflight == 0 &&
           (w->rls == NULL || grpc_server_connections(w->rls) == 0) &&
           hybrid_idle(w->env.hybrid) && pending_idle(w->env.pending);
}

static void
stop_if_drained(void *arg)
{
    struct rl_worker *w = arg;

    if (w->draining && drained(w))
        event_base_loopexit(w->base, NULL);
}

static void
on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct rl_worker *w = arg;

    log_warn(LOG_MSG("shutdown grace over"), LOG_I("worker", w->id),
             LOG_U("abandoned", w->metrics->inflight));
    event_base_loopexit(w->base, NULL);
    (void)fd;
    (void)what;
}

/* ---- checks held for max_delay ------------------------------------------ */

/* One held answer: in w->held until its timer fires (answered or not),
 * then in w->held_spare for the next one; freed by worker_free. */
struct worker_held {
    struct worker_held *prev, *next;
    struct rl_worker *w;
    struct http_req *r; /* NULL once answered */
    struct event timer; /* assigned once, added once per held answer */
    int64_t ms;
    int status;
    size_t hlen, blen, cap;
    char *bytes; /* cap bytes: headers, then body */
};

static void
held_unlink(struct worker_held *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        h->w->held = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
}

/* Done with h (its timer not pending): kept for the next held answer. */
static void
held_spare(struct worker_held *h)
{
    h->next = h->w->held_spare;
    h->w->held_spare = h;
}

/* Answer h's check (its own answer, or 503 when draining); h stays listed
 * until its timer. */
static void
held_answer(struct worker_held *h, bool draining)
{
    struct rl_worker *w = h->w;
    struct http_response resp = {.status = h->status,
                                 .headers = h->bytes,
                                 .headers_len = h->hlen,
                                 .body = h->bytes + h->hlen,
                                 .body_len = h->blen};
    static const char bye[] = "{\"error\":\"shutting down\"}";

    if (draining) {
        resp.status = 503;
        resp.headers = "Retry-After: 1\r\n";
        resp.headers_len = strlen(resp.headers);
        resp.body = bye;
        resp.body_len = sizeof(bye) - 1;
    } else {
        metrics_delayed(w->metrics, h->ms * 1000);
    }
    __atomic_sub_fetch(&w->metrics->delayed_waiting, 1, __ATOMIC_RELAXED);
    http_respond(h->r, &resp);
    h->r = NULL;
    check_delay_done(&w->env);
    worker_check_done(w);
}

static void
on_held(evutil_socket_t fd, short what, void *arg)
{
    struct worker_held *h = arg;

    if (h->r != NULL)
        held_answer(h, false);
    held_unlink(h);
    held_spare(h); /* kept, not freed: this is its own timer's callback */
    (void)fd;
    (void)what;
}

/* A spare held answer with room for n bytes, or a new one. */
static struct worker_held *
held_get(struct rl_worker *w, size_t n)
{
    struct worker_held *h = w->held_spare;

    if (h != NULL) {
        w->held_spare = h->next;
    } else {
        h = xcalloc(1, sizeof(*h));
        h->w = w;
        evtimer_assign(&h->timer, w->base, on_held, h);
    }
    if (h->cap < n) {
        free(h->bytes);
        h->bytes = xmalloc(n);
        h->cap = n;
    }
    return h;
}

void
worker_hold(struct rl_worker *w, struct http_req *r, int status, const char *headers,
            size_t hlen, const char *body, size_t blen, int64_t ms)
{
    struct worker_held *h = held_get(w, hlen + blen);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    h->r = r;
    h->ms = ms;
    h->status = status;
    h->hlen = hlen;
    h->blen = blen;
    memcpy(h->bytes, headers, hlen);
    memcpy(h->bytes + hlen, body, blen);
    h->prev = NULL;
    h->next = w->held;
    if (w->held != NULL)
        w->held->prev = h;
    w->held = h;
    __atomic_add_fetch(&w->metrics->delayed_waiting, 1, __ATOMIC_RELAXED);
    if (w->draining || evtimer_add(&h->timer, &tv) != 0) {
        held_answer(h, true);
        held_unlink(h);
        held_spare(h);
    }
}

static void
on_drain(evutil_socket_t fd, short what, void *arg)
{
    struct rl_worker *w = arg;
    int64_t ms = __atomic_load_n(&w->grace_ms, __ATOMIC_ACQUIRE);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (w->draining)
        return;
    w->draining = 1;
    /* a held check is answered at once: its caller goes elsewhere */
    for (struct worker_held *h = w->held; h != NULL; h = h->next)
        if (h->r != NULL)
            held_answer(h, true);
    if (w->env.hybrid != NULL)
        hybrid_drain(w->env.hybrid, stop_if_drained, w);
    /* kept charges go now; what the grace cannot send is logged at exit */
    pending_drain(w->env.pending, stop_if_drained, w);
    http_server_drain(w->http, stop_if_drained, w);
    for (size_t i = 0; i < w->nside; i++)
        http_server_drain(w->side[i], stop_if_drained, w);
    if (w->rls != NULL)
        grpc_server_drain(w->rls, stop_if_drained, w);
    if (drained(w)) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    w->grace_ev = evtimer_new(w->base, on_grace, w);
    evtimer_add(w->grace_ev, &tv);
    (void)fd;
    (void)what;
}

/* The reason a draining worker gives; told apart from the backend's by
 * address (worker_serving). */
static const char shutting_down[] = "shutting down";
/* rls.xds.wait_for_rules and none yet: not serving, whatever failure_mode */
static const char no_rules[] = "waiting for the first rules over xDS (rls.xds.wait_for_rules)";

static const char *
own_readiness(struct rl_worker *w)
{
    if (w->draining)
        return shutting_down;
    if (w->cfg->rls.xds.wait_for_rules && w->cfg->rls.rules == NULL)
        return no_rules;
    return w->backend->ops->not_ready(w->backend);
}

static void
on_ready_publish(evutil_socket_t fd, short what, void *arg)
{
    struct rl_worker *w = arg;

    __atomic_store_n(&w->ready_reason, own_readiness(w), __ATOMIC_RELEASE);
    (void)fd;
    (void)what;
}

const char *
worker_readiness(struct rl_worker *w, int *which)
{
    const char *reason = own_readiness(w);

    *which = w->id;
    __atomic_store_n(&w->ready_reason, reason, __ATOMIC_RELEASE);
    for (size_t i = 0; reason == NULL && i < w->npeers; i++) {
        if (w->peers[i] == w)
            continue;
        reason = worker_published_readiness(w->peers[i]);
        *which = w->peers[i]->id;
    }
    return reason;
}

bool
worker_serving(struct rl_worker *w, const char **reason, int *which)
{
    int who;

    *reason = worker_readiness(w, which != NULL ? which : &who);
    if (*reason == NULL)
        return true;
    if (*reason == shutting_down || *reason == no_rules)
        return false;
    /* open and local answer every check without the backend; closed would
     * answer each with a 503 */
    return w->cfg->failure_mode != RL_FAIL_CLOSED;
}

/* The config handed over by worker_set_config, swapped in on this thread. */
static void
on_config(evutil_socket_t fd, short what, void *arg)
{
    struct rl_worker *w = arg;
    struct rl_config *cfg = __atomic_exchange_n(&w->next_cfg, NULL, __ATOMIC_ACQ_REL);
    struct rl_config *old = w->cfg;
    size_t n = w->npeers > 0 ? w->npeers : 1;

    if (cfg == NULL)
        return;
    w->cfg = cfg;
    http_server_set_limits(w->http, &cfg->http, &cfg->max_body);
    http_server_set_conn_cap(w->http, ((size_t)cfg->http.max_connections + n - 1) / n);
    for (size_t i = 0; i < w->nside; i++)
        http_server_set_limits(w->side[i], &cfg->http, &cfg->max_body);
    if (w->rls != NULL) {
        grpc_server_set_limits(w->rls, &cfg->rls, &cfg->http.max_buffered);
        grpc_server_set_conn_cap(w->rls, ((size_t)cfg->rls.max_connections + n - 1) / n);
    }
    config_unref(old);
    /* rules over xDS arriving change it (rls.xds.wait_for_rules) */
    __atomic_store_n(&w->ready_reason, own_readiness(w), __ATOMIC_RELEASE);
    (void)fd;
    (void)what;
}

void
worker_set_config(struct rl_worker *w, struct rl_config *cfg)
{
    struct rl_config *stale = __atomic_exchange_n(&w->next_cfg, config_ref(cfg),
                                                  __ATOMIC_ACQ_REL);

    config_unref(stale); /* one the worker never took: superseded */
    wake(w, WAKE_CONFIG);
}

/* An admin action's answer, on its way to a worker's local views. */
struct worker_news {
    struct worker_news *next;
    struct rl_config *cfg;   /* a reference: the policy lives in it */
    struct rl_check_req req; /* req.key points at key below */
    struct rl_check_res res;
    int64_t sent_us;
    char key[];
};

static void
apply_news(struct rl_worker *w, struct rl_config *cfg, const struct rl_check_req *req,
           int64_t sent_us, const struct rl_check_res *res)
{
    if (w->env.deny != NULL)
        deny_cache_forget_hashed(w->env.deny,
                                 check_key_hash(req->policy, req->key, req->key_len),
                                 req->policy->uid, req->key, req->key_len);
    if (w->env.hybrid != NULL && req->policy->mode == RL_MODE_HYBRID)
        hybrid_admin_done(w->env.hybrid, cfg, req->policy, req->key, req->key_len, sent_us,
                          req, res);
}

/* Take what was pushed, oldest first (two actions on one key in a row must
 * land in their order); apply it unless the worker is going away. */
static void
take_news(struct rl_worker *w, int apply)
{
    struct worker_news *n = __atomic_exchange_n(&w->news, NULL, __ATOMIC_ACQ_REL);
    struct worker_news *fifo = NULL;

    while (n != NULL) {
        struct worker_news *next = n->next;
        n->next = fifo;
        fifo = n;
        n = next;
    }
    while (fifo != NULL) {
        struct worker_news *next = fifo->next;
        if (apply)
            apply_news(w, fifo->cfg, &fifo->req, fifo->sent_us, &fifo->res);
        config_unref(fifo->cfg);
        free(fifo);
        fifo = next;
    }
}

/* wake()'s bits, in the order a reload, an admin action and a stop
 * are best taken when they come together */
static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct rl_worker *w = arg;
    uint64_t n;
    unsigned bits;

    if (read(fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: another pass read it; the bits say what is left */
    }
    bits = __atomic_exchange_n(&w->wake, 0, __ATOMIC_ACQ_REL);
    if (bits & WAKE_CONFIG)
        on_config(-1, 0, w);
    if (bits & WAKE_NEWS)
        take_news(w, 1);
    if (bits & WAKE_DRAIN)
        on_drain(-1, 0, w);
    (void)what;
}

static void
push_news(struct rl_worker *p, struct rl_config *cfg, const struct rl_check_req *req,
          int64_t sent_us, const struct rl_check_res *res)
{
    struct worker_news *n = xmalloc(sizeof(*n) + req->key_len);

    n->cfg = config_ref(cfg);
    n->req = *req;
    memcpy(n->key, req->key, req->key_len);
    n->req.key = n->key;
    n->res = *res;
    n->res.error = NULL;
    n->sent_us = sent_us;
    n->next = __atomic_load_n(&p->news, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&p->news, &n->next, n, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    wake(p, WAKE_NEWS);
}

void
worker_admin_done(struct rl_worker *w, struct rl_config *cfg, const struct rl_check_req *req,
                  int64_t sent_us, const struct rl_check_res *res)
{
    apply_news(w, cfg, req, sent_us, res);
    for (size_t i = 0; i < w->npeers; i++)
        if (w->peers[i] != w)
            push_news(w->peers[i], cfg, req, sent_us, res);
}

int
worker_serve_side(struct rl_worker *w, int fd, http_handler handler, char **cause)
{
    if (w->nside == WORKER_SIDE_MAX) {
        close(fd);
        *cause = xasprintf("at most %d side listeners", WORKER_SIDE_MAX);
        return RL_ERR;
    }
    if (http_server_new(&w->side[w->nside], w->base, fd, &w->cfg->http, &w->cfg->max_body,
                        handler, w, NULL, cause) != RL_OK) {
        close(fd); /* taken, whatever the outcome */
        return RL_ERR;
    }
    w->nside++;
    return RL_OK;
}

int
worker_serve_rls(struct rl_worker *w, int fd, grpc_handler handler, void *arg,
                 void (*arg_free)(void *), char **cause)
{
    w->rls_door = arg;
    w->rls_door_free = arg_free;
    return grpc_server_new(&w->rls, w->base, fd, &w->cfg->rls, &w->cfg->http.max_buffered,
                           handler, arg, &w->metrics->grpc, cause);
}

void
worker_set_peers(struct rl_worker *w, struct rl_worker **peers, size_t n)
{
    w->peers = peers;
    w->npeers = n;
}

void
worker_on_exit(struct rl_worker *w, struct event *ev)
{
    w->exited_ev = ev;
}

const char *
worker_published_readiness(const struct rl_worker *w)
{
    return __atomic_load_n(&w->ready_reason, __ATOMIC_ACQUIRE);
}

void
worker_metrics(struct rl_worker *w, struct evbuffer *out)
{
    struct rl_metrics *ms[256];
    size_t n = w->npeers < RL_ARRAY_LEN(ms) ? w->npeers : RL_ARRAY_LEN(ms);

    for (size_t i = 0; i < n; i++)
        ms[i] = w->peers[i]->metrics;
    metrics_format(out, ms, n);
    if (w->cfg->rls.envoy_metrics)
        metrics_format_envoy(out, ms, n);
    metrics_format_admin(out, ms, n);
    {
        struct rl_top *tops[256];

        worker_tops(w, tops, RL_ARRAY_LEN(tops));
        top_format_metrics(out, tops, n, w->cfg, now_monotonic_us());
    }
}

size_t
worker_all_counters(const struct rl_worker *w, struct rl_metrics **out, size_t max)
{
    size_t n = w->npeers < max ? w->npeers : max;

    for (size_t i = 0; i < n; i++)
        out[i] = w->peers[i]->metrics;
    return n;
}

size_t
worker_tops(const struct rl_worker *w, struct rl_top **out, size_t max)
{
    size_t n = w->npeers < max ? w->npeers : max;

    for (size_t i = 0; i < n; i++)
        out[i] = w->peers[i]->env.top;
    return n;
}

int
worker_init(struct rl_worker **out, int id, int listen_fd, struct rl_config *cfg,
            const struct rl_backend_ops *backend, http_handler checks, char **cause)
{
    struct rl_worker *w = *out = xcalloc(1, sizeof(*w));

    w->id = id;
    w->listen_fd = listen_fd;
    w->cfg = config_ref(cfg);
    w->metrics = xcalloc(1, sizeof(*w->metrics));
    w->wake_fd = -1;
    /* The changelist folds the add/del pairs of a loop pass (hiredis's write
     * interest around each batch, a connection's write interest when a
     * client reads slowly) into one epoll_ctl.  No lock: only this thread
     * touches the base once it runs (other threads go through wake()). */
    struct event_config *ec = event_config_new();
    if (ec != NULL)
        event_config_set_flag(ec,
                              EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST | EVENT_BASE_FLAG_NOLOCK);
    w->base = ec != NULL ? event_base_new_with_config(ec) : NULL;
    if (ec != NULL)
        event_config_free(ec);
    if (w->base == NULL)
        w->base = event_base_new();
    if (w->base == NULL) {
        *cause = xstrdup("event_base_new failed");
        return RL_ERR;
    }
    if (backend->create(&w->backend, w->base, cfg, cause) != RL_OK)
        return RL_ERR;
    if (cfg->backend == RL_BACKEND_REDIS &&
        rl_backend_memory_ops.create(&w->local, w->base, cfg, cause) != RL_OK)
        return RL_ERR;
    w->env.backend = w->backend;
    w->env.local = w->local;
    w->env.metrics = w->metrics;
    slab_init(&w->slab, WORKER_SLAB_KEEP);
    w->env.slab = &w->slab;
    w->env.ops = check_ops_new(WORKER_OPS_KEEP);
    /* a tenant sends the same "limits" with every check: read them once */
    w->env.caller_limits = caller_limits_new();
    w->env.delayed = &w->delayed;
    /* the heaviest callers of each policy (GET /admin/top) */
    if (cfg->top_k > 0)
        w->env.top = top_new((uint32_t)cfg->top_k);
    /* only worth it when the answer costs a round trip */
    if (cfg->backend == RL_BACKEND_REDIS) {
        w->env.deny = deny_cache_new((size_t)cfg->deny_cache_size);
        /* the memory backend is in-process already: nothing to sync */
        w->env.hybrid = hybrid_new(w->base, w->backend, w->metrics,
                                   (size_t)cfg->hybrid_table_size);
        w->env.pending = pending_new(w->base, w->backend, w->metrics);
    }
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wake_fd < 0) {
        *cause = xstrdup("eventfd failed");
        return RL_ERR;
    }
    w->wake_ev = event_new(w->base, w->wake_fd, EV_READ | EV_PERSIST, on_wake, w);
    if (w->wake_ev == NULL || event_add(w->wake_ev, NULL) != 0) {
        *cause = xstrdup("cannot add the worker's wake event");
        return RL_ERR;
    }
    w->ready_reason = own_readiness(w);
    w->ready_ev = event_new(w->base, -1, EV_PERSIST, on_ready_publish, w);
    {
        struct timeval tv = {0, READY_PUBLISH_MS * 1000};
        event_add(w->ready_ev, &tv);
    }
    if (http_server_new(&w->http, w->base, listen_fd, &w->cfg->http, &w->cfg->max_body, checks,
                        w, &w->metrics->http, cause) != RL_OK)
        return RL_ERR;
    w->listen_fd = -1; /* the server owns it now */
    return RL_OK;
}

static void *
worker_main(void *arg)
{
    struct rl_worker *w = arg;

    log_debug(LOG_MSG("worker running"), LOG_I("worker", w->id));
    event_base_dispatch(w->base);
    log_debug(LOG_MSG("worker stopped"), LOG_I("worker", w->id));
    if (w->exited_ev != NULL)
        event_active(w->exited_ev, EV_READ, 0);
    return NULL;
}

int
worker_start(struct rl_worker *w)
{
    size_t n = w->npeers > 0 ? w->npeers : 1;

    /* the daemon's max_connections, shared by its workers */
    http_server_set_conn_cap(w->http, ((size_t)w->cfg->http.max_connections + n - 1) / n);
    if (w->rls != NULL)
        grpc_server_set_conn_cap(w->rls, ((size_t)w->cfg->rls.max_connections + n - 1) / n);
    return pthread_create(&w->thread, NULL, worker_main, w) == 0 ? RL_OK : RL_ERR;
}

void
worker_drain(struct rl_worker *w, int64_t grace_ms)
{
    __atomic_store_n(&w->grace_ms, grace_ms, __ATOMIC_RELEASE);
    wake(w, WAKE_DRAIN);
}

void
worker_join(struct rl_worker *w)
{
    pthread_join(w->thread, NULL);
}

void
worker_free(struct rl_worker *w)
{
    if (w == NULL)
        return;
    take_news(w, 0); /* what was pushed and never taken */
    /* held answers whose timers never fired (answered when draining
     * began), then the spares */
    while (w->held != NULL) {
        struct worker_held *h = w->held;

        evtimer_del(&h->timer);
        held_unlink(h);
        held_spare(h);
    }
    while (w->held_spare != NULL) {
        struct worker_held *h = w->held_spare;

        w->held_spare = h->next;
        free(h->bytes);
        free(h);
    }
    /* Backends first: their pending callbacks may still answer requests
     * (and hand back hybrid syncs, which must not be sent again). */
    hybrid_close(w->env.hybrid);
    pending_close(w->env.pending);
    if (w->backend != NULL)
        w->backend->ops->destroy(w->backend);
    if (w->local != NULL)
        w->local->ops->destroy(w->local);
    hybrid_free(w->env.hybrid); /* its timer lives on the base */
    /* logs what it could not apply */
    pending_free(w->env.pending);
    http_server_free(w->http);
    for (size_t i = 0; i < w->nside; i++)
        http_server_free(w->side[i]);
    grpc_server_free(w->rls); /* calls still owed were answered above */
    if (w->rls_door_free != NULL)
        w->rls_door_free(w->rls_door);
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    if (w->wake_ev != NULL)
        event_free(w->wake_ev);
    if (w->ready_ev != NULL)
        event_free(w->ready_ev);
    if (w->grace_ev != NULL)
        event_free(w->grace_ev);
    if (w->base != NULL)
        event_base_free(w->base);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    free(w->metrics);
    deny_cache_free(w->env.deny);
    slab_purge(&w->slab); /* after the backends answered every call */
    check_ops_free(w->env.ops);
    caller_limits_free(w->env.caller_limits);
    top_free(w->env.top);
    config_unref(__atomic_exchange_n(&w->next_cfg, NULL, __ATOMIC_ACQ_REL));
    config_unref(w->cfg);
    if (w->exited_ev != NULL)
        event_free(w->exited_ev);
    free(w);
}

void
worker_check_begin(struct rl_worker *w)
{
    /* atomic only because /metrics reads it from another thread */
    __atomic_add_fetch(&w->metrics->inflight, 1, __ATOMIC_RELAXED);
}

void
worker_check_done(struct rl_worker *w)
{
    if (__atomic_sub_fetch(&w->metrics->inflight, 1, __ATOMIC_RELAXED) == 0)
        stop_if_drained(w);
}

int
worker_id(const struct rl_worker *w)
{
    return w->id;
}

struct rl_config *
worker_config(const struct rl_worker *w)
{
    return w->cfg;
}

struct rl_metrics *
worker_counters(const struct rl_worker *w)
{
    return w->metrics;
}

struct rl_check_env *
worker_env(struct rl_worker *w)
{
    return &w->env;
}

struct rl_backend *
worker_backend(const struct rl_worker *w)
{
    return w->backend;
}

bool
worker_draining(const struct rl_worker *w)
{
    return w->draining != 0;
}

bool
worker_admit(struct rl_worker *w)
{
    if ((int64_t)__atomic_load_n(&w->metrics->inflight, __ATOMIC_RELAXED) >=
        w->cfg->max_inflight) {
        metrics_reject(w->metrics, RL_REJ_OVERLOADED);
        return false;
    }
    return true;
}

bool
worker_access_sampled(struct rl_worker *w)
{
    return w->cfg->access_log > 0 && ++w->access_seq % (uint64_t)w->cfg->access_log == 0;
}
