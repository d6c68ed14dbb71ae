/*
 * backend_redis.c — counts in Redis, decided by the embedded check script.
 *
 * One async hiredis connection per worker, on the worker's event_base.  The
 * checks that arrive in one pass of the event loop are coalesced into one
 * EVALSHA of the check script (EVAL once when the server answers NOSCRIPT,
 * e.g. after a restart or SCRIPT FLUSH), up to redis.coalesce of them, and
 * hiredis pipelines the calls.  hiredis 0.14 has no async timeouts, so each
 * check owns a timer: when it fires the check is answered TIMEOUT and its part
 * of the late reply, when it comes, is dropped.
 *
 * Connection states: DOWN -> CONNECTING -> HANDSHAKE (AUTH, SELECT, SCRIPT
 * LOAD) -> READY.  Lost connections come back with exponential backoff and
 * jitter.  Checks that arrive while a connection is being made (CONNECTING,
 * HANDSHAKE: the first one, or a reconnect attempt under way) wait for it,
 * each under its own deadline; checks that arrive while DOWN (between
 * attempts) are answered DOWN at once, so a dead Redis never queues work.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend.h"
#include "log.h"
#include "script.h"
#include "metrics.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_url.h"
#include "util.h"

/* A connection whose oldest outstanding request is this old (or older than
 * its own deadline, when longer) is presumed hung (SIGSTOP, a dead network
 * path, a server too slow to keep up) and dropped: late answers are worthless
 * and the queue behind them must not grow. */
#define STALL_MIN_MS 1000
/* An idle connection is PINGed this often, so /readyz notices a hung Redis
 * even when no check is waiting. */
#define HEARTBEAT_MS 250
#define IDLE_PING_MS 1000
/* The ring of send times holds this many; redis.max_pending (<= it) is the
 * real cap: past it a check fails fast instead of joining a queue that Redis
 * would only reach after the check's deadline (a timed-out request still runs
 * in Redis, so an unbounded queue means working for nobody). */
#define PENDING_MAX 65536

struct redis_backend {
    struct rl_backend base;
    struct event_base *evb;
    struct rl_redis_url url;
    char *display;              /* the URL without credentials, for logs */
    int64_t connect_timeout_ms;
    unsigned max_pending;
    /* Checks waiting for the end of this event-loop pass (flush_ev), to go
     * to Redis as one script call. */
    struct redis_op **queue;
    size_t nqueued, coalesce;
    struct event *flush_ev;
    struct rl_script_call call;     /* scratch argv, reused */
    const struct rl_check_req **reqs;
    redisAsyncContext *ac;
    struct rconn_status st;     /* state, down_reason, for the log */
    struct rconn_errlog errs;   /* error replies, logged once per distinct one */
    struct event *retry_ev;     /* reconnect after backoff */
    struct event *connect_ev;   /* connect/handshake deadline */
    struct event *drop_ev;      /* drop a stalled connection, off-callback */
    struct evdns_base *dns;     /* only when a host is named, not numbered */
    struct rconn_lookup *lookup;    /* a name being resolved */
    const char *drop_reason;
    /* Sentinel: the master's address comes from the sentinels, asked again
     * before every connection and whenever they announce a switch. */
    struct rsentinel *sentinel;
    int master_port;            /* as the sentinels last said */
    int64_t backoff_ms;
    int64_t last_reply_us;
    unsigned pending;           /* replies hiredis still owes us */
    unsigned pending_checks;    /* checks in those replies: max_pending counts these */
    /* Send times of the outstanding requests, oldest first: replies come
     * back in order, so the head is the one that has waited longest. */
    int64_t *sent;
    unsigned sent_head;
    struct event *heartbeat_ev;
    /* Checks that came while the connection was being made: sent when it is
     * ready, answered DOWN when it fails.  At most max_pending. */
    struct redis_op **waiting;
    size_t nwaiting, waiting_cap;
    int ping_plain;             /* ROLE denied by an ACL: heartbeats PING */
    int destroying;
};

struct redis_op {
    struct rl_script_wait w;    /* the check: req, cb, answered */
    struct event timer;         /* inline: one allocation per check, not two */
    size_t nlimits;             /* its part of the reply, once req is gone */
};

/* One script call: the checks coalesced into it, answered in order. */
struct redis_batch {
    struct redis_backend *rb;
    int sent_eval;
    unsigned counted;           /* its share of rb->pending_checks */
    size_t n;
    struct redis_op *ops[];
};

static void redis_connect(struct redis_backend *rb);
static void waiting_end(struct redis_backend *rb, int ready, const char *why);
static void fail_connect(struct redis_backend *rb, const char *why);
static void drop_soon(struct redis_backend *rb, const char *why);

static void
set_state(struct redis_backend *rb, enum rconn_state s, const char *reason)
{
    /* A new connection may be to a server that lost or never had our keys
     * (restart, failover): what was learnt before is void. */
    if (s == RCONN_DOWN)
        rconn_errlog_end(&rb->errs, &rb->st, rb->display);
    if (rconn_set_state(&rb->st, s, reason, rb->display, rb->destroying))
        rb->base.epoch++;
    if (rb->nwaiting > 0 && (s == RCONN_READY || s == RCONN_DOWN))
        waiting_end(rb, s == RCONN_READY, rb->st.down_reason);
}

/* ---- answering checks ---------------------------------------------------- */

static void
op_free(struct redis_op *op)
{
    event_del(&op->timer);
    free(op);
}

/* ---- the outstanding-request queue -------------------------------------------- */

/*
 * Remember when waiting for this reply stops making sense: its own deadline
 * (a check's redis.timeout), but never sooner than a second or the connect
 * timeout, so one slow script does not cost the connection.
 */
static void
sent_push(struct redis_backend *rb, int64_t wait_ms)
{
    int64_t floor_ms = rb->connect_timeout_ms > STALL_MIN_MS ? rb->connect_timeout_ms
                                                             : STALL_MIN_MS;

    if (wait_ms < floor_ms)
        wait_ms = floor_ms;
    rb->sent[(rb->sent_head + rb->pending) % PENDING_MAX] = now_monotonic_us() + wait_ms * 1000;
    rb->pending++;
}

static void
sent_pop(struct redis_backend *rb)
{
    if (rb->pending == 0)
        return;
    rb->sent_head = (rb->sent_head + 1) % PENDING_MAX;
    rb->pending--;
}

/* The oldest outstanding request is past the point of waiting for it. */
static int
stalled(const struct redis_backend *rb, int64_t now)
{
    return rb->pending > 0 && now > rb->sent[rb->sent_head];
}

/* Every command goes through here so the queue stays in step with hiredis. */
static int
send_resp(struct redis_backend *rb, redisCallbackFn *fn, void *priv, int64_t wait_ms,
          const char *cmd, size_t len)
{
    if (rb->ac == NULL || rb->pending >= rb->max_pending ||
        redisAsyncFormattedCommand(rb->ac, fn, priv, cmd, len) != REDIS_OK)
        return RL_ERR;
    sent_push(rb, wait_ms);
    return RL_OK;
}

/* rconn_send_fn: a handshake command, counted like every other. */
static int
send_fmt(void *owner, redisCallbackFn *fn, void *priv, const char *fmt, ...)
{
    struct redis_backend *rb = owner;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = redisvAsyncCommand(rb->ac, fn, priv, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK)
        return RL_ERR;
    sent_push(rb, 0);
    return RL_OK;
}

/* ---- sending --------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);
static void schedule_reconnect(struct redis_backend *rb);

static void
batch_free(struct redis_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        op_free(b->ops[i]);
    free(b);
}

/* Answer every check of b that still waits. */
static void
batch_answer_status(struct redis_batch *b, enum rl_backend_status st, const char *why)
{
    for (size_t i = 0; i < b->n; i++)
        script_answer_status(&b->ops[i]->w, st, why);
}

/* Drop the checks already answered (their deadline passed): they have no
 * request left to send again. */
static void
batch_compact(struct redis_batch *b)
{
    size_t k = 0;

    for (size_t i = 0; i < b->n; i++) {
        if (b->ops[i]->w.answered)
            op_free(b->ops[i]);
        else
            b->ops[k++] = b->ops[i];
    }
    b->n = k;
}

/* Queue the check script for the batch; RL_ERR when the connection refused it. */
static int
send_batch(struct redis_batch *b, int eval)
{
    struct redis_backend *rb = b->rb;
    int64_t wait_ms = 0;

    for (size_t i = 0; i < b->n; i++) {
        rb->reqs[i] = b->ops[i]->w.req;
        if (rb->reqs[i]->timeout_ms > wait_ms)
            wait_ms = rb->reqs[i]->timeout_ms;
    }
    if (script_call_build(&rb->call, rb->reqs, b->n, eval) != RL_OK ||
        send_resp(rb, on_reply, b, wait_ms, rb->call.buf, rb->call.len) != RL_OK)
        return RL_ERR;
    b->counted = (unsigned)b->n;
    rb->pending_checks += b->counted;
    return RL_OK;
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_batch *b = privdata;
    struct redis_backend *rb = b->rb;
    redisReply *r = reply;
    const char *why;
    size_t len = 0;

    sent_pop(rb);
    rb->pending_checks -= b->counted;
    b->counted = 0;
    if (r == NULL) {
        /* The connection died or is being freed: every pending callback
         * runs once with NULL. */
        batch_answer_status(b, RL_BACKEND_DOWN, "connection lost");
        batch_free(b);
        return;
    }
    rb->last_reply_us = now_monotonic_us();
    for (size_t i = 0; i < b->n; i++)
        len += script_reply_len(b->ops[i]->nlimits);
    if (r->type == REDIS_REPLY_ERROR)
        rconn_error(&rb->errs, &rb->st, rb->display, r->str, b->n);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 &&
        !b->sent_eval) {
        /* The server forgot the script (restart, SCRIPT FLUSH): send it
         * whole once; EVAL also caches it for the next EVALSHA. */
        b->sent_eval = 1;
        batch_compact(b);
        if (b->n == 0) {
            free(b);
            return;
        }
        if (rb->st.state == RCONN_READY && send_batch(b, 1) == RL_OK)
            return;
        batch_answer_status(b, RL_BACKEND_ERROR, "cannot resend the check script");
    } else if (r->type == REDIS_REPLY_ERROR && rconn_unusable(r->str) != NULL) {
        /* Nothing ran, and nothing will on this server: leave it */
        batch_answer_status(b, RL_BACKEND_DOWN, rconn_unusable(r->str));
        if (rb->ac == ac)
            drop_soon(rb, rconn_unusable(r->str));
    } else if (r->type == REDIS_REPLY_ERROR) {
        batch_answer_status(b, RL_BACKEND_ERROR, "error reply from redis");
    } else if (script_reply_check(r, len, &why) != RL_OK) {
        rconn_bad_reply(&rb->errs, &rb->st, rb->display, why, b->n);
        batch_answer_status(b, RL_BACKEND_ERROR, why);
    } else {
        size_t at = 0;

        rconn_errlog_end(&rb->errs, &rb->st, rb->display);

        for (size_t i = 0; i < b->n; i++) {
            script_answer_reply(&b->ops[i]->w, r, at, b->ops[i]->nlimits);
            at += script_reply_len(b->ops[i]->nlimits);
        }
    }
    batch_free(b);
}

/* Send what the queue holds as one script call. */
static void
flush(struct redis_backend *rb)
{
    size_t n = rb->nqueued;
    struct redis_batch *b;

    if (n == 0)
        return;
    b = xcalloc(1, sizeof(*b) + n * sizeof(b->ops[0]));
    b->rb = rb;
    b->n = n;
    memcpy(b->ops, rb->queue, n * sizeof(b->ops[0]));
    rb->nqueued = 0;
    batch_compact(b);       /* a check may have timed out in this same pass */
    /* redis.max_pending counts checks, not calls: past it the newest fail
     * fast rather than queue behind work Redis would reach after their
     * deadline (a timed-out check still runs in Redis). */
    while (b->n > 0 && rb->pending_checks + b->n > rb->max_pending) {
        struct redis_op *op = b->ops[--b->n];
        script_answer_status(&op->w, RL_BACKEND_ERROR, "too many checks waiting for redis");
        op_free(op);
    }
    if (b->n == 0) {
        free(b);
    } else if (rb->st.state != RCONN_READY) {
        batch_answer_status(b, RL_BACKEND_DOWN, rb->st.down_reason);
        batch_free(b);
    } else if (send_batch(b, 0) != RL_OK) {
        batch_answer_status(b, RL_BACKEND_ERROR, "cannot queue the command");
        batch_free(b);
    }
}

static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    flush(arg);
    (void)fd;
    (void)what;
}

static void
on_drop(evutil_socket_t fd, short what, void *arg)
{
    struct redis_backend *rb = arg;
    redisAsyncContext *ac = rb->ac;

    if (ac == NULL)
        return;
    log_warn("msg=\"dropping the redis connection\" redis=%s reason=\"%s\" pending=%u",
             rb->display, rb->drop_reason, rb->pending);
    set_state(rb, RCONN_DOWN, rb->drop_reason);
    /* Free, not Disconnect: Disconnect waits for replies a hung server will
     * never send.  Every pending callback runs now with NULL. */
    rb->ac = NULL;
    redisAsyncFree(ac);
    schedule_reconnect(rb);
    (void)fd;
    (void)what;
}

/* Drop the connection from a fresh stack (never inside its own callback);
 * checks that arrive meanwhile fail fast with `why`. */
static void
drop_soon(struct redis_backend *rb, const char *why)
{
    rb->drop_reason = why;
    set_state(rb, RCONN_DOWN, why);
    event_active(rb->drop_ev, EV_TIMEOUT, 0);
}

static void
on_op_timeout(evutil_socket_t fd, short what, void *arg)
{
    /* op stays until hiredis hands back its reply (or NULL); the heartbeat
     * drops a connection whose replies stopped coming. */
    struct redis_op *op = arg;

    script_answer_status(&op->w, RL_BACKEND_TIMEOUT, "redis did not answer in time");
    (void)fd;
    (void)what;
}

static void
on_ping(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_backend *rb = ac->data;
    redisReply *r = reply;

    sent_pop(rb);
    if (r == NULL)
        return;
    rb->last_reply_us = now_monotonic_us();
    if (r->type == REDIS_REPLY_ERROR) {
        rb->ping_plain = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
               r->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(r->element[0]->str, "master") != 0 && rb->ac == ac &&
               rb->st.state == RCONN_READY) {
        /* demoted while idle: PING would still answer, checks would not */
        log_warn("msg=\"redis is no longer a master\" redis=%s role=%.20s", rb->display,
                 r->element[0]->str);
        drop_soon(rb, "redis is no longer a master");
    }
    (void)privdata;
}

static void
on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    struct redis_backend *rb = arg;
    int64_t now = now_monotonic_us();

    if (rb->ac != NULL && stalled(rb, now)) {
        rb->drop_reason = "redis stalled";
        event_active(rb->drop_ev, EV_TIMEOUT, 0);
    } else if (rb->st.state == RCONN_READY && rb->pending == 0 &&
               now - rb->last_reply_us > IDLE_PING_MS * 1000LL) {
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        static const char role[] = "*1\r\n$4\r\nROLE\r\n";
        /* ROLE: also tells a master demoted since the handshake */
        if (rb->ping_plain ? send_resp(rb, on_ping, NULL, 0, ping, sizeof(ping) - 1) == RL_OK
                           : send_resp(rb, on_ping, NULL, 0, role, sizeof(role) - 1) == RL_OK)
            rb->last_reply_us = now;    /* one at a time */
    }
    (void)fd;
    (void)what;
}

static void
enqueue(struct redis_backend *rb, struct redis_op *op)
{
    /* The first check of this pass schedules the flush; event_active puts it
     * behind the callbacks already active, so the other requests read in
     * this pass join the same call. */
    rb->queue[rb->nqueued++] = op;
    if (rb->nqueued == rb->coalesce)
        flush(rb);
    else if (rb->nqueued == 1)
        event_active(rb->flush_ev, EV_TIMEOUT, 1);
}

/* Room for one more waiting check: those their deadline answered go first. */
static int
waiting_room(struct redis_backend *rb)
{
    size_t k = 0;

    if (rb->nwaiting < rb->waiting_cap)
        return 1;
    for (size_t i = 0; i < rb->nwaiting; i++) {
        if (rb->waiting[i]->w.answered)
            op_free(rb->waiting[i]);
        else
            rb->waiting[k++] = rb->waiting[i];
    }
    rb->nwaiting = k;
    if (k < rb->waiting_cap)
        return 1;
    if (rb->waiting_cap >= rb->max_pending)
        return 0;
    rb->waiting_cap = rb->waiting_cap == 0 ? 16 : rb->waiting_cap * 2;
    if (rb->waiting_cap > rb->max_pending)
        rb->waiting_cap = rb->max_pending;
    rb->waiting = xrealloc(rb->waiting, rb->waiting_cap * sizeof(*rb->waiting));
    return 1;
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
            op_free(op);
        } else if (!ready) {
            script_answer_status(&op->w, RL_BACKEND_DOWN, why ? why : "redis not connected");
            op_free(op);
        } else {
            /* sent now: from here on only its reply settles it */
            if (op->w.req->flags & RL_CHECK_SETTLE)
                event_del(&op->timer);
            enqueue(rb, op);
        }
    }
    free(w);
}

static void
redis_check(struct rl_backend *be, const struct rl_check_req *req,
            rl_check_cb cb, void *arg)
{
    struct redis_backend *rb = (struct redis_backend *)be;
    struct redis_op *op;
    struct timeval tv;
    int wait = rb->st.state == RCONN_CONNECTING || rb->st.state == RCONN_HANDSHAKE;

    if (rb->st.state == RCONN_DOWN || (wait && !waiting_room(rb))) {
        struct rl_check_res res = {.status = RL_BACKEND_DOWN, .error = rb->st.down_reason};
        if (wait)
            res.error = "too many checks waiting for redis";
        cb(&res, arg);
        return;
    }
    op = xcalloc(1, sizeof(*op));
    op->w.req = req;
    op->w.cb = cb;
    op->w.arg = arg;
    op->nlimits = req->policy->nlimits;
    evtimer_assign(&op->timer, rb->evb, on_op_timeout, op);
    /* A settling check has no deadline once sent (the heartbeat bounds that
     * wait: it drops a stalled connection), but one while it waits for a
     * connection: a TIMEOUT then says it never reached Redis. */
    if (wait || !(req->flags & RL_CHECK_SETTLE)) {
        tv.tv_sec = req->timeout_ms / 1000;
        tv.tv_usec = (req->timeout_ms % 1000) * 1000;
        evtimer_add(&op->timer, &tv);
    }
    if (wait)
        rb->waiting[rb->nwaiting++] = op;
    else
        enqueue(rb, op);
}

/* ---- connection ------------------------------------------------------------- */

static void
schedule_reconnect(struct redis_backend *rb)
{
    struct timeval tv;

    if (rb->destroying || evtimer_pending(rb->retry_ev, NULL))
        return;
    tv = rconn_backoff(&rb->backoff_ms);
    evtimer_add(rb->retry_ev, &tv);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    redis_connect(arg);
    (void)fd;
    (void)what;
}

static void
on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct redis_backend *rb = arg;

    if (rb->lookup != NULL) {
        rconn_abandon(rb->lookup);
        rb->lookup = NULL;
        log_debug("msg=\"redis host resolution timed out\" redis=%s", rb->display);
        set_state(rb, RCONN_DOWN, "resolve timeout");
        schedule_reconnect(rb);
    } else if (rb->sentinel != NULL && rsentinel_cancel(rb->sentinel)) {
        set_state(rb, RCONN_DOWN, "sentinel did not answer");
        schedule_reconnect(rb);
    } else if (rb->ac != NULL && rb->st.state != RCONN_READY) {
        log_debug("msg=\"redis connect timed out\" redis=%s", rb->display);
        set_state(rb, RCONN_DOWN, "connect timeout");
        /* Not inside a hiredis callback: freeing here is safe, and it runs
         * on_disconnect only for established connections. */
        redisAsyncContext *ac = rb->ac;
        rb->ac = NULL;
        redisAsyncFree(ac);
        schedule_reconnect(rb);
    }
    (void)fd;
    (void)what;
}

static void
on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_backend *rb = ac->data;
    redisReply *r = reply;
    const char *step = privdata, *why;

    sent_pop(rb);
    if (r == NULL || rb->st.state != RCONN_HANDSHAKE)
        return;
    switch (rconn_step(r, step, rb->display, &why)) {
    case RCONN_STEP_WAIT:
        break;
    case RCONN_STEP_FAILED:
        if (r->type == REDIS_REPLY_ERROR)   /* what the server said, never the credentials */
            log_error("msg=\"redis handshake failed\" redis=%s step=%s error=\"%.200s\"",
                      rb->display, step, r->str);
        else if (rb->sentinel != NULL)
            log_warn("msg=\"the sentinels' master is not a master, asking again\" redis=%s",
                     rb->display);
        else if (!rb->st.announced_down)
            log_warn("msg=\"redis is not a master, retrying\" redis=%s", rb->display);
        /* ours no more: its on_disconnect must not say "disconnected"
         * where /readyz should say why */
        rb->ac = NULL;
        redisAsyncDisconnect(ac);
        fail_connect(rb, why);
        break;
    case RCONN_STEP_READY:
        evtimer_del(rb->connect_ev);
        rb->backoff_ms = RCONN_BACKOFF_MIN_MS;
        rb->last_reply_us = now_monotonic_us();
        set_state(rb, RCONN_READY, NULL);
        break;
    }
}

static void
on_connect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    struct redis_backend *rb = ac->data;

    if (status != REDIS_OK) {
        /* hiredis frees the context after this returns */
        log_debug("msg=\"redis connect failed\" redis=%s error=\"%s\"",
                  rb->display, ac->errstr);
        rb->ac = NULL;
        evtimer_del(rb->connect_ev);
        set_state(rb, RCONN_DOWN, "connection refused");
        schedule_reconnect(rb);
        return;
    }
    set_state(rb, RCONN_HANDSHAKE, NULL);
    {
        /* a sentinel's answer can be stale, and a URL can name a replica */
        struct rconn_login login = {rb->url.username, rb->url.password, rb->url.db,
                                    rb->sentinel != NULL ? RCONN_ROLE_MUST
                                                                : RCONN_ROLE_IF_ALLOWED};
        /* a command not queued leaves the handshake to its deadline */
        (void)rconn_handshake(&login, send_fmt, rb, on_handshake);
    }
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_backend *rb = ac->data;

    /* hiredis frees the context after this returns.  A context we dropped
     * on purpose is no longer rb->ac: whoever dropped it set the state. */
    if (rb->ac != ac)
        return;
    rb->ac = NULL;
    evtimer_del(rb->connect_ev);
    set_state(rb, RCONN_DOWN, status == REDIS_OK ? "disconnected" : "connection lost");
    schedule_reconnect(rb);
}

static void
fail_connect(struct redis_backend *rb, const char *why)
{
    evtimer_del(rb->connect_ev);
    set_state(rb, RCONN_DOWN, why);
    schedule_reconnect(rb);
}

static void
connect_to(void *arg, const char *ip, const char *why)
{
    struct redis_backend *rb = arg;
    redisAsyncContext *ac;

    rb->lookup = NULL;
    if (ip == NULL) {
        log_debug("msg=\"cannot resolve a host\" redis=%s error=\"%s\"", rb->display, why);
        fail_connect(rb, "cannot resolve the redis host");
        return;
    }
    ac = rconn_open(rb->evb, ip, rb->sentinel ? rb->master_port : rb->url.port,
                    rb->url.path, rb, on_connect, on_disconnect, &why);
    if (ac == NULL) {
        fail_connect(rb, why);
        return;
    }
    rb->ac = ac;
    rb->pending = 0;        /* the last connection's callbacks all ran */
    rb->sent_head = 0;
}

/* `then` gets an address for host (a name is resolved under the connect
 * deadline) or NULL. */
static void
resolve(struct redis_backend *rb, const char *host, rconn_resolved_cb then)
{
    struct rconn_lookup *l = rconn_resolve(&rb->dns, rb->evb, host, then, rb);

    if (l != NULL)
        rb->lookup = l;     /* else `then` ran already, and may have started another */
}

/* ---- Sentinel ---------------------------------------------------------------- */

/* rsentinel_found_cb */
static void
sentinel_found(void *arg, const char *host, int port, const char *why)
{
    struct redis_backend *rb = arg;

    if (host == NULL) {
        fail_connect(rb, why);
        return;
    }
    rb->master_port = port;
    resolve(rb, host, connect_to);
}

/* rsentinel_switch_cb */
static void
sentinel_switched(void *arg)
{
    struct redis_backend *rb = arg;

    if (rb->ac != NULL) {
        rb->drop_reason = "sentinel switched the master";
        event_active(rb->drop_ev, EV_TIMEOUT, 0);
    }
}

static void
redis_connect(struct redis_backend *rb)
{
    struct timeval tv;

    set_state(rb, RCONN_CONNECTING, NULL);
    tv.tv_sec = rb->connect_timeout_ms / 1000;
    tv.tv_usec = (rb->connect_timeout_ms % 1000) * 1000;
    evtimer_add(rb->connect_ev, &tv);
    if (rb->sentinel != NULL)
        rsentinel_ask(rb->sentinel);
    else if (rb->url.path != NULL)
        connect_to(rb, "", NULL);
    else
        resolve(rb, rb->url.host, connect_to);
}

/* ---- the backend interface ---------------------------------------------------- */

static int
redis_create(struct rl_backend **out, struct event_base *evb,
             const struct rl_config *cfg, char **cause)
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
    rb->display = cfg->redis.sentinel.master != NULL
                  ? xasprintf("sentinel:%s", cfg->redis.sentinel.master)
                  : redis_url_display(&rb->url);
    if (cfg->redis.sentinel.master != NULL)
        rb->sentinel = rsentinel_new(evb, &rb->dns, &cfg->redis.sentinel, rb->display,
                                     sentinel_found, sentinel_switched, rb);
    rb->connect_timeout_ms = cfg->redis.connect_timeout_ms;
    rb->max_pending = (unsigned)cfg->redis.max_pending;
    rb->coalesce = (size_t)cfg->redis.coalesce;
    rb->queue = xcalloc(rb->coalesce, sizeof(*rb->queue));
    rb->reqs = xcalloc(rb->coalesce, sizeof(*rb->reqs));
    rb->flush_ev = event_new(evb, -1, 0, on_flush, rb);
    rb->backoff_ms = RCONN_BACKOFF_MIN_MS;
    rb->st.down_reason = "not connected yet";
    rb->st.what = "redis";
    rb->st.field = "redis";
    rb->retry_ev = evtimer_new(evb, on_retry, rb);
    rb->connect_ev = evtimer_new(evb, on_connect_timeout, rb);
    rb->drop_ev = evtimer_new(evb, on_drop, rb);
    rb->sent = xcalloc(PENDING_MAX, sizeof(*rb->sent));
    rb->heartbeat_ev = event_new(evb, -1, EV_PERSIST, on_heartbeat, rb);
    {
        struct timeval hb = {0, HEARTBEAT_MS * 1000};
        event_add(rb->heartbeat_ev, &hb);
    }
    redis_connect(rb);
    *out = &rb->base;
    return RL_OK;
}

static void
redis_destroy(struct rl_backend *be)
{
    struct redis_backend *rb = (struct redis_backend *)be;

    rb->destroying = 1;
    /* checks not sent yet end like those in flight: answered, then freed */
    for (size_t i = 0; i < rb->nqueued; i++) {
        script_answer_status(&rb->queue[i]->w, RL_BACKEND_DOWN, "shutting down");
        op_free(rb->queue[i]);
    }
    rb->nqueued = 0;
    waiting_end(rb, 0, "shutting down");
    rconn_abandon(rb->lookup);
    rb->lookup = NULL;
    if (rb->ac != NULL) {
        redisAsyncContext *ac = rb->ac;
        rb->ac = NULL;
        redisAsyncFree(ac);     /* pending callbacks run with NULL */
    }
    rsentinel_free(rb->sentinel);
    event_free(rb->retry_ev);
    event_free(rb->connect_ev);
    event_free(rb->drop_ev);
    event_free(rb->heartbeat_ev);
    event_free(rb->flush_ev);
    free(rb->queue);
    free(rb->reqs);
    script_call_free(&rb->call);
    free(rb->sent);
    rconn_dns_free(rb->dns);
    free(rb->display);
    redis_url_clear(&rb->url);
    free(rb);
}

static int
redis_ready(struct rl_backend *be, const char **reason)
{
    struct redis_backend *rb = (struct redis_backend *)be;

    if (rb->st.state == RCONN_READY && !stalled(rb, now_monotonic_us()))
        return RL_OK;
    if (rb->st.state == RCONN_READY) {
        *reason = "redis stalled";
        return RL_ERR;
    }
    *reason = rb->st.down_reason ? rb->st.down_reason : "redis not connected";
    return RL_ERR;
}

const struct rl_backend_ops rl_backend_redis_ops = {
    .name = "redis",
    .create = redis_create,
    .destroy = redis_destroy,
    .check = redis_check,
    .ready = redis_ready,
};
