/* cluster_op.c — see cluster_op.h (and backend_cluster.c for the whole picture). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster_op.h"
#include "config.h"
#include "log.h"
#include "util.h"

/* How often a sent RL_CHECK_SETTLE check past its deadline looks for a stall. */
#define SETTLE_POLL_MS 250
/* A check follows at most this many MOVED/ASK, and retries TRYAGAIN and
 * CLUSTERDOWN at most this many times, each bounded by its deadline. */
#define MAX_REDIRECTS 5
#define MAX_RETRIES 10
#define RETRY_MIN_MS 5
#define RETRY_MAX_MS 100
/* How often a check waiting for a connecting node looks again. */
#define WAIT_POLL_MS 2

/* One check until it is answered and hiredis owes it nothing. */
struct cop {
    struct cops *o;
    struct cop *prev, *next;
    struct rl_script_wait w; /* the check: req, cb, answered */
    struct event *deadline;
    struct event *retry_ev; /* created on first use */
    struct cnode *sent;     /* the node owing the reply, while inflight */
    struct cnode *wait;     /* waiting for this node (holds a ref) */
    int wait_asking;
    int slot;
    size_t nlimits; /* its part of a reply, once req is gone */
    int inflight;   /* replies hiredis owes this check: 0 or 1 */
    int asking;     /* the last send was preceded by ASKING */
    int sent_eval;  /* EVAL sent on the current node */
    int redirects;
    int retries;
};

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* ---- answering checks ------------------------------------------------------ */

static void
cop_free(struct cop *op)
{
    struct cops *o = op->o;

    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        o->live = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    event_free(op->deadline);
    if (op->retry_ev != NULL)
        event_free(op->retry_ev);
    if (op->wait != NULL)
        cnode_unref(op->wait);
    free(op);
}

/*
 * The one place a check is freed: answered and owed nothing by hiredis.  Each
 * entry point (check, reply, retry, deadline) calls it last and never touches
 * op afterwards; the functions they call never free op.
 */
static void
op_release(struct cop *op)
{
    if (op->w.answered && op->inflight == 0)
        cop_free(op);
}

/* ---- sending ------------------------------------------------------------------ */

/* The reply to a command no check waits for (ASKING). */
static void
on_aux(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cnode *n = cnode_of(ac);

    rconn_replied(&n->c, ac, reply);
    cnode_settle(n);
    (void)privdata;
}

/* How a call to n names the script: EVAL to resend it whole. */
static enum script_cmd
script_cmd(const struct cnode *n, int eval)
{
    return eval ? SCRIPT_EVAL : n->c.functions ? SCRIPT_FCALL : SCRIPT_EVALSHA;
}

/* FCALL (EVALSHA, EVAL) of the check script on n, after ASKING when asked to. */
static int
op_send(struct cop *op, struct cnode *n, int asking)
{
    struct rl_script_call *c = &op->o->call;

    /* as backend_redis.c: past redis.max_pending fail fast, do not queue */
    if (n->pending_checks + 1 > op->o->max_pending ||
        script_call_build(c, &op->w.req, 1, script_cmd(n, op->sent_eval)) != RL_OK)
        return RL_ERR;
    /* Both on one connection, so they arrive back to back. */
    if (asking && rconn_sendf(&n->c, on_aux, NULL, "ASKING") != RL_OK)
        return RL_ERR;
    if (rconn_send(&n->c, on_reply, op, op->w.req->timeout_ms, c->buf, c->len) != RL_OK)
        return RL_ERR;
    n->pending_checks++;
    op->inflight++;
    op->sent = n;
    op->asking = asking;
    return RL_OK;
}

static void
op_arm_retry(struct cop *op, int64_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    evtimer_add(op->retry_ev, &tv);
}

/* Wait (polling) for n to finish connecting, then send there. */
static void
op_wait_for(struct cop *op, struct cnode *n, int asking)
{
    if (op->wait != n) {
        n->refs++;
        if (op->wait != NULL)
            cnode_unref(op->wait);
        op->wait = n;
    }
    op->wait_asking = asking;
    op_arm_retry(op, WAIT_POLL_MS);
}

/* Send to n now, wait for it while it first connects, or answer DOWN. */
static void
op_send_to(struct cop *op, struct cnode *n, int asking)
{
    if (n->c.st.state == RCONN_READY && n->c.ac != NULL) {
        if (op_send(op, n, asking) != RL_OK)
            script_answer_status(&op->w, RL_BACKEND_ERROR, "cannot queue the command");
        return;
    }
    if (cnode_connecting(n)) {
        op_wait_for(op, n, asking);
        return;
    }
    script_answer_status(&op->w, RL_BACKEND_DOWN,
                         n->c.st.down_reason ? n->c.st.down_reason : "node not connected");
}

/* Send per the slot map. */
static void
op_route(struct cop *op)
{
    struct cops *o = op->o;
    struct cnode *n = o->map->loaded ? o->map->owner[op->slot] : NULL;

    if (n == NULL && cnodes_map_coming(o->nodes)) {
        op_arm_retry(op, WAIT_POLL_MS); /* then by the map, when it comes */
        return;
    }
    if (n == NULL) {
        cluster_map_refresh(o->map);
        script_answer_status(&op->w, RL_BACKEND_DOWN, "cluster slot not covered");
        return;
    }
    op_send_to(op, n, 0);
}

static bool
is_error(const char *msg, const char *code)
{
    size_t n = strlen(code);

    return strncmp(msg, code, n) == 0 && (msg[n] == ' ' || msg[n] == '\0');
}

/* An error reply to the script from node n. */
static void
op_on_error(struct cop *op, struct cnode *n, const char *msg)
{
    struct cops *o = op->o;
    bool moved = is_error(msg, "MOVED"), ask = is_error(msg, "ASK");

    rconn_error(&n->c.errs, &n->c.st, n->name, msg, 1);

    if (moved || ask) {
        char host[CLUSTER_HOST_MAX];
        int slot, port;
        struct cnode *to;

        if (cluster_parse_redirect(msg, n->host, &slot, host, sizeof(host), &port) != RL_OK) {
            log_warn("msg=\"bad redirection from redis cluster\" node=%s error=\"%.200s\"",
                     n->name, msg);
            script_answer_status(&op->w, RL_BACKEND_ERROR,
                                 "bad redirection from redis cluster");
            return;
        }
        if (++op->redirects > MAX_REDIRECTS) {
            script_answer_status(&op->w, RL_BACKEND_ERROR, "too many cluster redirections");
            return;
        }
        to = cnode_get(o->nodes, host, port);
        log_debug("msg=\"redis cluster redirection\" kind=%s slot=%d from=%s to=%s",
                  moved ? "moved" : "ask", slot, n->name, to->name);
        if (moved) {
            /* The slot has a new owner for good: use it now, and let a
             * refresh bring the rest of the map up to date. */
            if (o->map->owner[slot] == NULL)
                o->map->covered++;
            o->map->owner[slot] = to;
            to->master = true;
            cluster_map_refresh(o->map);
        }
        op->sent_eval = 0; /* a new connection: FCALL or EVALSHA first */
        op_send_to(op, to, ask);
        return;
    }
    if (is_error(msg, "TRYAGAIN") || is_error(msg, "CLUSTERDOWN")) {
        int64_t ms;

        if (++op->retries > MAX_RETRIES) {
            script_answer_status(&op->w, RL_BACKEND_ERROR,
                                 "redis cluster kept asking to retry");
            return;
        }
        if (msg[0] == 'C')
            cluster_map_refresh(o->map);
        ms = (int64_t)RETRY_MIN_MS << (op->retries - 1 < 5 ? op->retries - 1 : 5);
        if (ms > RETRY_MAX_MS)
            ms = RETRY_MAX_MS;
        if (op->wait != NULL) {
            cnode_unref(op->wait);
            op->wait = NULL;
        }
        op_arm_retry(op, ms); /* then by the map again */
        return;
    }
    if (rconn_unusable(msg) != NULL) {
        /* Nothing ran, and nothing will there until it is a master again:
         * drop the connection, ask for the map (a failover moves masters) */
        script_answer_status(&op->w, RL_BACKEND_DOWN, rconn_unusable(msg));
        rconn_drop(&n->c, rconn_unusable(msg));
        cluster_map_refresh(o->map);
        return;
    }
    if (!op->sent_eval && rconn_script_missing(&n->c, n->c.ac, msg)) {
        /* This node forgot the script or the library (restart, SCRIPT or
         * FUNCTION FLUSH): send it whole once. */
        op->sent_eval = 1;
        op_send_to(op, n, op->asking);
        return;
    }
    script_answer_status(&op->w, RL_BACKEND_ERROR, "error reply from redis");
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cop *op = privdata;
    struct cnode *n = cnode_of(ac);
    redisReply *r = reply;
    const char *why;

    rconn_replied(&n->c, ac, reply);
    n->pending_checks--;
    op->inflight--;
    op->sent = NULL;
    if (r == NULL) {
        /* The connection died or is being freed.  Not resent anywhere: the
         * script may have run. */
        script_answer_status(&op->w, RL_BACKEND_DOWN, "connection lost");
    } else {
        if (op->w.answered)
            ; /* late: the deadline answered it */
        else if (r->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->str);
        else if ((why = script_reply_problem(r, script_reply_len(op->nlimits))) != NULL) {
            rconn_bad_reply(&n->c.errs, &n->c.st, n->name, why, 1);
            script_answer_status(&op->w, RL_BACKEND_ERROR, why);
        } else if (r->element[0]->type == REDIS_REPLY_ERROR) {
            op_on_error(op, n, r->element[0]->str); /* failed inside the script */
        } else {
            rconn_errlog_end(&n->c.errs, &n->c.st, n->name);
            script_answer_reply(&op->w, r, 0, op->nlimits);
        }
    }
    cnode_settle(n);
    op_release(op);
}

/* ---- coalescing ------------------------------------------------------------- */

/* Checks of one slot sent as one script call; each stays a check of its own
 * (deadline, redirections, retries) the moment the call is answered. */
struct cbatch {
    size_t n;
    struct cop *ops[];
};

static void
on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cbatch *b = privdata;
    struct cnode *n = cnode_of(ac);
    redisReply *r = reply;
    const char *why = NULL;
    size_t len = 0, at = 0;

    rconn_replied(&n->c, ac, reply);
    n->pending_checks -= (unsigned)b->n;
    for (size_t i = 0; i < b->n; i++) {
        b->ops[i]->inflight--;
        b->ops[i]->sent = NULL;
        len += script_reply_len(b->ops[i]->nlimits);
    }
    if (r != NULL) {
        if (r->type != REDIS_REPLY_ERROR && (why = script_reply_problem(r, len)) != NULL) {
            rconn_bad_reply(&n->c.errs, &n->c.st, n->name, why, b->n);
        } else if (r->type != REDIS_REPLY_ERROR) {
            /* the log's error ends only when no check failed inside */
            size_t failed = 0;
            for (size_t i = 0, e = 0; i < b->n; e += script_reply_len(b->ops[i]->nlimits), i++)
                failed += r->element[e]->type == REDIS_REPLY_ERROR;
            if (failed == 0)
                rconn_errlog_end(&n->c.errs, &n->c.st, n->name);
        }
    }
    for (size_t i = 0; i < b->n; i++) {
        struct cop *op = b->ops[i];

        if (r == NULL)
            script_answer_status(&op->w, RL_BACKEND_DOWN, "connection lost");
        else if (op->w.answered)
            ; /* late: the deadline answered it */
        else if (r->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->str); /* one slot: the same for each */
        else if (why != NULL)
            script_answer_status(&op->w, RL_BACKEND_ERROR, why);
        else if (r->element[at]->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->element[at]->str); /* failed inside the script */
        else
            script_answer_reply(&op->w, r, at, op->nlimits);
        at += script_reply_len(op->nlimits);
    }
    cnode_settle(n);
    for (size_t i = 0; i < b->n; i++)
        op_release(b->ops[i]);
    free(b);
}

/* ops[0..k), all of one slot owned by the ready node n, as one call. */
static void
batch_send(struct cops *o, struct cnode *n, struct cop **ops, size_t k)
{
    struct cbatch *b;
    int64_t wait_ms = 0;

    if (k == 1) {
        op_send_to(ops[0], n, 0);
        return;
    }
    for (size_t i = 0; i < k; i++)
        o->reqs[i] = ops[i]->w.req;
    if (n->pending_checks + k > o->max_pending ||
        script_call_build(&o->call, o->reqs, k, script_cmd(n, 0)) != RL_OK)
        goto fail;
    b = xcalloc(1, sizeof(*b) + k * sizeof(b->ops[0]));
    for (size_t i = 0; i < k; i++)
        if (ops[i]->w.req->timeout_ms > wait_ms)
            wait_ms = ops[i]->w.req->timeout_ms;
    if (rconn_send(&n->c, on_batch_reply, b, wait_ms, o->call.buf, o->call.len) != RL_OK) {
        free(b);
        goto fail;
    }
    n->pending_checks += (unsigned)k;
    b->n = k;
    for (size_t i = 0; i < k; i++) {
        b->ops[i] = ops[i];
        ops[i]->inflight++;
        ops[i]->sent = n;
        ops[i]->asking = 0;
    }
    return;
fail:
    for (size_t i = 0; i < k; i++)
        script_answer_status(&ops[i]->w, RL_BACKEND_ERROR, "cannot queue the command");
}

/*
 * rconn_flush_fn: send the checks queued in this pass: those of one slot
 * whose owner is ready together, in their order; any other goes its own way
 * (waiting for a node that is connecting, or answered DOWN).  The queue holds
 * each check (inflight), so a deadline in the same pass cannot free it under
 * us.
 */
static void
cops_flush(void *owner, void *const *items, size_t n)
{
    struct cops *o = owner;
    /* Our own copy: answering a check runs its callback, which may queue
     * (and flush) new checks. */
    struct cop **q = xcalloc(2 * n + 1, sizeof(*q)), **group = q + n;

    for (size_t i = 0; i < n; i++)
        q[i] = items[i];
    for (size_t i = 0; i < n; i++)
        q[i]->inflight--;
    for (size_t i = 0; i < n; i++) {
        struct cop *op = q[i];
        struct cnode *node;
        size_t k = 1;

        if (op == NULL)
            continue;
        if (op->w.answered) {
            op_release(op);
            continue;
        }
        node = o->map->loaded ? o->map->owner[op->slot] : NULL;
        if (node == NULL || node->c.st.state != RCONN_READY || node->c.ac == NULL) {
            op_route(op);
            op_release(op);
            continue;
        }
        /* gather the rest of this slot behind op, keeping their order */
        group[0] = op;
        for (size_t j = i + 1; j < n; j++) {
            if (q[j] != NULL && q[j]->slot == op->slot && !q[j]->w.answered) {
                group[k++] = q[j];
                q[j] = NULL;
            }
        }
        batch_send(o, node, group, k);
        for (size_t j = 0; j < k; j++)
            op_release(group[j]);
    }
    free(q);
}

static void
on_op_retry(evutil_socket_t fd, short what, void *arg)
{
    struct cop *op = arg;
    struct cnode *n = op->wait;

    if (!op->w.answered) {
        if (n != NULL) {
            op->wait = NULL; /* our ref moves to this frame */
            op_send_to(op, n, op->wait_asking);
            cnode_unref(n);
        } else {
            op_route(op);
        }
    }
    op_release(op);
    (void)fd;
    (void)what;
}

static void
on_op_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct cop *op = arg;
    struct cnode *n = op->sent;
    int stalled = op->inflight && n != NULL && rconn_stalled(&n->c, now_monotonic_us());

    if (stalled)
        rconn_drop(&n->c, "redis stalled"); /* from a fresh stack: it answers op */
    if (n != NULL && !op->w.answered && (op->w.req->flags & RL_CHECK_SETTLE)) {
        /* Sent: only its reply or the loss of its connection settles it.
         * Look again until one of them comes. */
        struct timeval tv = {0, SETTLE_POLL_MS * 1000};

        if (!stalled)
            evtimer_add(op->deadline, &tv);
    } else {
        script_answer_status(&op->w, RL_BACKEND_TIMEOUT, "redis did not answer in time");
    }
    /* Still owed a reply: freed when hiredis hands it back (or NULL). */
    op_release(op);
    (void)fd;
    (void)what;
}

void
cop_start(struct cops *o, const struct rl_check_req *req, rl_check_cb cb, void *arg, int slot)
{
    struct cop *op;
    struct timeval tv;

    op = xcalloc(1, sizeof(*op));
    op->o = o;
    op->w.req = req;
    op->w.cb = cb;
    op->w.arg = arg;
    op->slot = slot;
    op->nlimits = req->policy->nlimits;
    op->next = o->live;
    if (o->live != NULL)
        o->live->prev = op;
    o->live = op;
    op->deadline = evtimer_new(o->evb, on_op_deadline, op);
    op->retry_ev = evtimer_new(o->evb, on_op_retry, op);
    tv.tv_sec = req->timeout_ms / 1000;
    tv.tv_usec = (req->timeout_ms % 1000) * 1000;
    evtimer_add(op->deadline, &tv);
    /* held by the queue until the flush at the end of this pass */
    op->inflight++;
    rconn_queue_add(&o->queue, op);
}

void
cops_init(struct cops *o, struct event_base *evb, struct cluster_map *map,
          struct cnodes *nodes, unsigned max_pending, size_t coalesce)
{
    memset(o, 0, sizeof(*o));
    o->evb = evb;
    o->map = map;
    o->nodes = nodes;
    o->max_pending = max_pending;
    rconn_queue_init(&o->queue, evb, coalesce, cops_flush, o);
    o->reqs = xcalloc(coalesce, sizeof(*o->reqs));
}

void
cops_close(struct cops *o)
{
    while (o->live != NULL) {
        script_answer_status(&o->live->w, RL_BACKEND_DOWN, "shutting down");
        cop_free(o->live);
    }
    rconn_queue_free(&o->queue);
    free(o->reqs);
    script_call_free(&o->call);
    memset(o, 0, sizeof(*o));
}
