/*
 * backend_redis.c — counts in Redis, decided by the embedded check script.
 *
 * One connection per worker (a struct rconn, redis_conn.c), on the worker's
 * event_base; with Sentinel, redis_sentinel.c says where to.  The
 * checks that arrive in one pass of the event loop are coalesced into one
 * FCALL of the check script's function library (EVALSHA on a server without
 * FUNCTION; EVAL once when the server forgot either, e.g. after a restart or
 * a FUNCTION FLUSH), up to redis.coalesce of them, and
 * hiredis pipelines the calls.  hiredis 0.14 has no async timeouts, so each
 * check has a deadline: one timer of the backend's, at the nearest, answers
 * those whose deadline passed TIMEOUT (their part of the late reply, when it
 * comes, is dropped) and is set again for the next.
 *
 * Connection states: DOWN -> CONNECTING -> HANDSHAKE (AUTH, SELECT, ROLE,
 * SCRIPT LOAD, FUNCTION LOAD) -> READY.  Lost connections come back with exponential backoff
 * and jitter.  Checks that arrive while a connection is being made (CONNECTING,
 * HANDSHAKE: the first one, or a reconnect attempt under way) wait for it,
 * each under its own deadline; checks that arrive while DOWN (between
 * attempts) are answered DOWN at once, so a dead Redis never queues work.
 */
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend.h"
#include "backend_redis.h"
#include "config.h"
#include "log.h"
#include "script.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_url.h"
#include "util.h"

struct redis_backend {
    struct rl_backend base;
    struct event_base *evb;
    struct rl_redis_url url;
    char *display; /* the URL without credentials, for logs */
    unsigned max_pending;
    /* Checks waiting for the end of this event-loop pass, to go to Redis as
     * one script call. */
    struct rconn_queue queue;
    struct rl_script_call call; /* scratch argv, reused */
    const struct rl_check_req **reqs;
    struct rconn c;         /* the connection, its state and replies owed */
    struct evdns_base *dns; /* only when a host is named, not numbered */
    /* Sentinel: the master's address comes from the sentinels, asked again
     * before every connection and whenever they announce a switch. */
    struct rsentinel *sentinel;
    unsigned pending_checks; /* checks in the replies owed: max_pending counts these */
    /* Checks that came while the connection was being made: sent when it is
     * ready, answered DOWN when it fails.  At most max_pending. */
    struct redis_op **waiting;
    size_t nwaiting, waiting_cap;
    /* The checks with a deadline, answered or not, until freed; the timer
     * is due at sweep_us (0: not set), at or before the nearest of theirs.
     * A timer per check was added and deleted with every check
     * (docs/BENCHMARKS.md, "Measurements behind the code"). */
    struct redis_op *timed;
    struct redis_op *cursor; /* the sweep's next, kept right by timed_del */
    struct event *sweep;
    int64_t sweep_us;
    /* Ops and batches freed, kept for the next ones (at most OPS_KEEP and
     * BATCHES_KEEP): each was a malloc and a free (docs/BENCHMARKS.md,
     * "Measurements behind the code").  A batch has room for redis.coalesce
     * checks, as many as a flush hands over. */
    struct redis_op *idle_ops;
    struct redis_batch *idle_batches;
    unsigned nidle_ops, nidle_batches;
};

#define OPS_KEEP 256
#define BATCHES_KEEP 16

struct redis_op {
    struct rl_script_wait w;      /* the check: req, cb, answered, nlimits */
    int64_t due_us;               /* its deadline (monotonic), 0: none */
    struct redis_op *prev, *next; /* in rb->timed while due_us is set */
};

/* One script call: the checks coalesced into it, answered in order. */
struct redis_batch {
    struct redis_backend *rb;
    struct redis_batch *next_idle; /* in rb->idle_batches */
    bool sent_eval;
    unsigned counted; /* its share of rb->pending_checks */
    size_t n;
    struct rl_script_wait *w[]; /* each the `w` of a struct redis_op */
};

static void waiting_end(struct redis_backend *rb, int ready, const char *why);

static struct redis_op *
op_of(struct rl_script_wait *w)
{
    return RL_CONTAINER_OF(w, struct redis_op, w);
}

/* The timer at due_us, unless it is due before. */
static void
sweep_at(struct redis_backend *rb, int64_t due_us)
{
    int64_t wait_us;
    struct timeval tv;

    if (rb->sweep_us != 0 && rb->sweep_us <= due_us)
        return;
    wait_us = due_us - now_monotonic_us();
    if (wait_us < 0)
        wait_us = 0;
    tv.tv_sec = wait_us / 1000000;
    tv.tv_usec = wait_us % 1000000;
    evtimer_add(rb->sweep, &tv);
    rb->sweep_us = due_us;
}

static void
timed_add(struct redis_backend *rb, struct redis_op *op, int64_t due_us)
{
    op->due_us = due_us;
    op->prev = NULL;
    op->next = rb->timed;
    if (rb->timed != NULL)
        rb->timed->prev = op;
    rb->timed = op;
    sweep_at(rb, due_us);
}

/* The timer stays: when it comes it finds the next deadline. */
static void
timed_del(struct redis_backend *rb, struct redis_op *op)
{
    if (op->due_us == 0)
        return;
    if (rb->cursor == op)
        rb->cursor = op->next;
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        rb->timed = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    op->due_us = 0;
}

static struct redis_op *
redis_op_new(struct redis_backend *rb)
{
    struct redis_op *op = rb->idle_ops;

    if (op != NULL) {
        rb->idle_ops = op->next;
        rb->nidle_ops--;
    } else {
        op = xmalloc(sizeof(*op)); /* not calloc: batch_new says why */
    }
    memset(op, 0, sizeof(*op));
    return op;
}

static void
redis_op_free(struct redis_backend *rb, struct redis_op *op)
{
    timed_del(rb, op);
    if (rb->nidle_ops >= OPS_KEEP) {
        free(op);
        return;
    }
    op->next = rb->idle_ops;
    rb->idle_ops = op;
    rb->nidle_ops++;
}

/* ---- sending --------------------------------------------------------------- */

static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* A batch with room for a flush's checks (rb->queue.max). */
static struct redis_batch *
batch_new(struct redis_backend *rb)
{
    struct redis_batch *b = rb->idle_batches;

    if (b != NULL) {
        rb->idle_batches = b->next_idle;
        rb->nidle_batches--;
        return b;
    }
    /* malloc, not calloc: glibc's calloc never takes a chunk from the
     * thread's cache (what that cost: docs/BENCHMARKS.md, "Measurements
     * behind the code"); the caller sets every field */
    return xmalloc(sizeof(*b) + rb->queue.max * sizeof(b->w[0]));
}

static void
batch_drop(struct redis_batch *b)
{
    struct redis_backend *rb = b->rb;

    if (rb->nidle_batches >= BATCHES_KEEP) {
        free(b);
        return;
    }
    b->next_idle = rb->idle_batches;
    rb->idle_batches = b;
    rb->nidle_batches++;
}

static void
batch_free(struct redis_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        redis_op_free(b->rb, op_of(b->w[i]));
    batch_drop(b);
}

/* Answer every check of b that still waits. */
static void
batch_answer_status(struct redis_batch *b, enum rl_backend_status st, const char *why)
{
    for (size_t i = 0; i < b->n; i++)
        script_answer_status(b->w[i], st, why);
}

/* Drop the checks already answered (their deadline passed): they have no
 * request left to send again. */
static void
batch_compact(struct redis_batch *b)
{
    size_t k = 0;

    for (size_t i = 0; i < b->n; i++) {
        if (b->w[i]->answered)
            redis_op_free(b->rb, op_of(b->w[i]));
        else
            b->w[k++] = b->w[i];
    }
    b->n = k;
}

/* Queue the check script for the batch; RL_ERR when the connection refused it. */
static int
send_batch(struct redis_batch *b)
{
    struct redis_backend *rb = b->rb;
    int64_t wait_ms = 0;

    for (size_t i = 0; i < b->n; i++) {
        rb->reqs[i] = b->w[i]->req;
        if (rb->reqs[i]->timeout_ms > wait_ms)
            wait_ms = rb->reqs[i]->timeout_ms;
    }
    if (script_call_build(&rb->call, rb->reqs, b->n,
                          b->sent_eval      ? SCRIPT_EVAL
                          : rb->c.functions ? SCRIPT_FCALL
                                            : SCRIPT_EVALSHA) != RL_OK ||
        rconn_send(&rb->c, on_batch_reply, b, wait_ms, rb->call.buf, rb->call.len) != RL_OK)
        return RL_ERR;
    b->counted = (unsigned)b->n;
    rb->pending_checks += b->counted;
    return RL_OK;
}

/* script_batch's resend: the checks still waiting, as one EVAL. */
static bool
batch_resend(void *arg)
{
    struct redis_batch *b = arg;

    b->sent_eval = true;
    batch_compact(b);
    if (b->n == 0)
        return false;
    if (b->rb->c.st.state == RCONN_READY && send_batch(b) == RL_OK)
        return true;
    batch_answer_status(b, RL_BACKEND_ERROR, "cannot resend the check script");
    return false;
}

static void
on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_batch *b = privdata;
    struct redis_backend *rb = b->rb;
    struct script_batch walk = {
        .c = &rb->c,
        .ac = ac,
        .w = b->w,
        .n = b->n,
        .eval = b->sent_eval,
        .resend = batch_resend,
        .arg = b,
    };

    rconn_replied(&rb->c, ac, reply);
    rb->pending_checks -= b->counted;
    b->counted = 0;
    if (!script_batch_reply(&walk, reply))
        batch_free(b);
}

/* rconn_flush_fn: what the queue held, as one script call. */
static void
redis_flush(void *owner, void *const *items, size_t n)
{
    struct redis_backend *rb = owner;
    struct redis_batch *b = batch_new(rb); /* every field is set here */

    b->rb = rb;
    b->sent_eval = false;
    b->counted = 0;
    b->n = n;
    for (size_t i = 0; i < n; i++)
        b->w[i] = &((struct redis_op *)items[i])->w;
    batch_compact(b); /* a check may have timed out in this same pass */
    /* redis.max_pending counts checks, not calls: past it the newest fail
     * fast rather than queue behind work Redis would reach after their
     * deadline (a timed-out check still runs in Redis). */
    while (b->n > 0 && rb->pending_checks + b->n > rb->max_pending) {
        struct rl_script_wait *w = b->w[--b->n];
        script_answer_status(w, RL_BACKEND_ERROR, "too many checks waiting for redis");
        redis_op_free(rb, op_of(w));
    }
    if (b->n == 0) {
        batch_drop(b);
    } else if (rb->c.st.state != RCONN_READY) {
        batch_answer_status(b, RL_BACKEND_DOWN, rb->c.st.down_reason);
        batch_free(b);
    } else {
        /* written here, not by the write event at the pass's end */
        rconn_hold(&rb->c);
        if (send_batch(b) != RL_OK) {
            batch_answer_status(b, RL_BACKEND_ERROR, "cannot queue the command");
            batch_free(b);
        }
        rconn_release(&rb->c);
    }
}

/*
 * The checks whose deadline passed are answered TIMEOUT; each op stays until
 * hiredis hands back its reply (or NULL): the heartbeat drops a connection
 * whose replies stopped coming.  An answer's callback may check again (a
 * new op goes before the cursor, with a later deadline) or free ops (their
 * timed_del moves the cursor past them).
 */
static void
on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct redis_backend *rb = arg;
    int64_t now = now_monotonic_us(), next = 0;

    rb->sweep_us = 0;
    for (struct redis_op *op = rb->timed; op != NULL; op = rb->cursor) {
        rb->cursor = op->next;
        if (op->w.answered)
            continue;
        if (op->due_us <= now)
            script_answer_status(&op->w, RL_BACKEND_TIMEOUT, "redis did not answer in time");
        else if (next == 0 || op->due_us < next)
            next = op->due_us;
    }
    if (next != 0)
        sweep_at(rb, next);
    (void)fd;
    (void)what;
}

/* Room for one more waiting check: those their deadline answered go first. */
static bool
waiting_room(struct redis_backend *rb)
{
    size_t k = 0;

    if (rb->nwaiting < rb->waiting_cap)
        return true;
    for (size_t i = 0; i < rb->nwaiting; i++) {
        if (rb->waiting[i]->w.answered)
            redis_op_free(rb, rb->waiting[i]);
        else
            rb->waiting[k++] = rb->waiting[i];
    }
    rb->nwaiting = k;
    if (k < rb->waiting_cap)
        return true;
    if (rb->waiting_cap >= rb->max_pending)
        return false;
    rb->waiting_cap = rb->waiting_cap == 0 ? 16 : rb->waiting_cap * 2;
    if (rb->waiting_cap > rb->max_pending)
        rb->waiting_cap = rb->max_pending;
    rb->waiting = xrealloc(rb->waiting, rb->waiting_cap * sizeof(*rb->waiting));
    return true;
}

/* The connection the waiting checks waited for is ready (send them) or
 * failed (answer them DOWN with `why`). */
static void
waiting_end(struct redis_backend *rb, int ready, const char *why)
{
    struct redis_op **w = rb->waiting;
    size_t n = rb->nwaiting;

    /* Answers run callbacks that may check again: those see the new state
     * and never this list. */
    rb->waiting = NULL;
    rb->nwaiting = rb->waiting_cap = 0;
    for (size_t i = 0; i < n; i++) {
        struct redis_op *op = w[i];

        if (op->w.answered) {
            redis_op_free(rb, op);
        } else if (!ready) {
            script_answer_status(&op->w, RL_BACKEND_DOWN, why ? why : "redis not connected");
            redis_op_free(rb, op);
        } else {
            /* sent now: from here on only its reply settles it */
            if (op->w.req->flags & RL_CHECK_SETTLE)
                timed_del(rb, op);
            rconn_queue_add(&rb->queue, op);
        }
    }
    free(w);
}

static void
redis_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct redis_backend *rb = (struct redis_backend *)be;
    struct redis_op *op;
    int wait = rb->c.st.state == RCONN_CONNECTING || rb->c.st.state == RCONN_HANDSHAKE;

    if (rb->c.st.state == RCONN_DOWN || (wait && !waiting_room(rb))) {
        struct rl_check_res res = {.status = RL_BACKEND_DOWN, .error = rb->c.st.down_reason};
        if (wait)
            res.error = "too many checks waiting for redis";
        cb(&res, arg);
        return;
    }
    op = redis_op_new(rb);
    op->w.req = req;
    op->w.cb = cb;
    op->w.arg = arg;
    op->w.nlimits = req->policy->nlimits;
    op->w.rsv_list = (req->flags & RL_CHECK_RSV_LIST) != 0;
    /* A settling check has no deadline once sent (the heartbeat bounds that
     * wait: it drops a stalled connection), but one while it waits for a
     * connection: a TIMEOUT then says it never reached Redis. */
    if (wait || !(req->flags & RL_CHECK_SETTLE))
        timed_add(rb, op, now_monotonic_us() + req->timeout_ms * 1000);
    if (wait)
        rb->waiting[rb->nwaiting++] = op;
    else
        rconn_queue_add(&rb->queue, op);
}

/* ---- the connection's hooks ------------------------------------------------- */

static void
conn_ready(struct rconn *c, int again)
{
    struct redis_backend *rb = c->owner;

    /* A new connection may be to a server that lost or never had our keys
     * (restart, failover): what was learnt before is void. */
    rb->base.epoch++;
    waiting_end(rb, 1, NULL);
    (void)again;
}

static void
conn_down(struct rconn *c)
{
    waiting_end(c->owner, 0, c->st.down_reason);
}

/* Sentinel: where to connect is asked before every attempt. */
static void
sentinel_locate(struct rconn *c)
{
    rsentinel_ask(((struct redis_backend *)c->owner)->sentinel);
}

static bool
sentinel_abandon(struct rconn *c)
{
    return rsentinel_cancel(((struct redis_backend *)c->owner)->sentinel);
}

/* rsentinel_found_cb */
static void
sentinel_found(void *arg, const char *host, int port, const char *why)
{
    struct redis_backend *rb = arg;

    if (host == NULL)
        rconn_fail(&rb->c, why);
    else
        rconn_connect_host(&rb->c, host, port);
}

/* rsentinel_switch_cb */
static void
sentinel_switched(void *arg)
{
    struct redis_backend *rb = arg;

    rconn_drop(&rb->c, "sentinel switched the master");
}

static const struct rconn_hooks direct_hooks = {
    .ready = conn_ready,
    .down = conn_down,
};

static const struct rconn_hooks sentinel_hooks = {
    .locate = sentinel_locate,
    .abandon = sentinel_abandon,
    .ready = conn_ready,
    .down = conn_down,
};

/* ---- the backend interface ---------------------------------------------------- */

static int
redis_create(struct rl_backend **out, struct event_base *evb, const struct rl_config *cfg,
             char **cause)
{
    struct redis_backend *rb = xcalloc(1, sizeof(*rb));

    if (redis_url_parse(cfg->redis.url, &rb->url, cause) != RL_OK) {
        free(rb);
        return RL_ERR;
    }
    /* redis.username / redis.password complete or override the URL's */
    if (cfg->redis.username != NULL) {
        free(rb->url.username);
        rb->url.username = xstrdup(cfg->redis.username);
    }
    if (cfg->redis.password != NULL) {
        free(rb->url.password);
        rb->url.password = xstrdup(cfg->redis.password);
    }
    rb->base.ops = &rl_backend_redis_ops;
    rb->evb = evb;
    rb->sweep = evtimer_new(evb, on_sweep, rb);
    if (rb->sweep == NULL) {
        redis_url_clear(&rb->url);
        free(rb);
        *cause = xstrdup("redis: cannot make a timer");
        return RL_ERR;
    }
    rb->display = cfg->redis.sentinel.master != NULL
                      ? xasprintf("sentinel:%s", cfg->redis.sentinel.master)
                      : redis_url_display(&rb->url);
    if (cfg->redis.sentinel.master != NULL)
        rb->sentinel = rsentinel_new(evb, &rb->dns, &cfg->redis.sentinel, rb->display,
                                     sentinel_found, sentinel_switched, rb);
    rb->max_pending = (unsigned)cfg->redis.max_pending;
    rconn_queue_init(&rb->queue, evb, (size_t)cfg->redis.coalesce, redis_flush, rb);
    rb->reqs = xcalloc((size_t)cfg->redis.coalesce, sizeof(*rb->reqs));
    {
        /* a sentinel's answer can be stale, and a URL can name a replica */
        struct rconn_conf conf = {
            .evb = evb,
            .dns = &rb->dns,
            .host = rb->url.host,
            .port = rb->url.port,
            .path = rb->url.path,
            .name = rb->display,
            .what = "redis",
            .field = "redis",
            .login = {rb->url.username, rb->url.password, rb->url.db,
                      rb->sentinel != NULL ? RCONN_ROLE_MUST : RCONN_ROLE_IF_ALLOWED},
            .connect_timeout_ms = cfg->redis.connect_timeout_ms,
            .max_pending = rb->max_pending,
            .heartbeat = 1,
            .hooks = rb->sentinel != NULL ? &sentinel_hooks : &direct_hooks,
            .owner = rb,
        };
        rconn_init(&rb->c, &conf);
    }
    rconn_start(&rb->c);
    *out = &rb->base;
    return RL_OK;
}

static void
redis_destroy(struct rl_backend *be)
{
    struct redis_backend *rb = (struct redis_backend *)be;

    /* checks not sent yet end like those in flight: answered, then freed */
    for (size_t i = 0; i < rb->queue.n; i++) {
        struct redis_op *op = rb->queue.items[i];

        script_answer_status(&op->w, RL_BACKEND_DOWN, "shutting down");
        redis_op_free(rb, op);
    }
    rb->queue.n = 0;
    waiting_end(rb, 0, "shutting down");
    rconn_close(&rb->c); /* pending callbacks run with NULL */
    while (rb->idle_ops != NULL) {
        struct redis_op *op = rb->idle_ops;

        rb->idle_ops = op->next;
        free(op);
    }
    while (rb->idle_batches != NULL) {
        struct redis_batch *b = rb->idle_batches;

        rb->idle_batches = b->next_idle;
        free(b);
    }
    event_free(rb->sweep);
    rsentinel_free(rb->sentinel);
    rconn_queue_free(&rb->queue);
    free(rb->reqs);
    script_call_free(&rb->call);
    rconn_dns_free(rb->dns);
    free(rb->display);
    redis_url_clear(&rb->url);
    free(rb);
}

static const char *
redis_not_ready(struct rl_backend *be)
{
    struct redis_backend *rb = (struct redis_backend *)be;

    if (rb->c.st.state == RCONN_READY && !rconn_stalled(&rb->c, now_monotonic_us()))
        return NULL;
    if (rb->c.st.state == RCONN_READY)
        return "redis stalled";
    return rb->c.st.down_reason ? rb->c.st.down_reason : "redis not connected";
}

const struct rl_backend_ops rl_backend_redis_ops = {
    .name = "redis",
    .create = redis_create,
    .destroy = redis_destroy,
    .check = redis_check,
    .not_ready = redis_not_ready,
};
