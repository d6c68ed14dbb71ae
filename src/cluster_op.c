/* cluster_op.c — see cluster_op.h (and backend_cluster.c for the whole picture). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster_op.h"
#include "policy.h"
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

/*
 * Checks of one slot sent as one script call; each stays a check of its own
 * (deadline, redirections, retries) the moment the call is answered.  A
 * check sent alone (a redirection, a resend, a slot with one check this
 * pass) is a call of its own, op->solo: no allocation.
 */
struct cbatch {
    size_t n;
    bool eval;                 /* sent as EVAL */
    bool allocated;            /* freed after its reply; else some check's solo */
    struct rl_script_wait **w; /* n checks, each the `w` of a struct cop */
    struct rl_script_wait *one;
};

/* One check until it is answered and hiredis owes it nothing. */
struct cop {
    struct cops *o;
    struct cop *prev, *next;
    struct rl_script_wait w; /* the check: req, cb, answered, nlimits */
    struct cbatch solo;      /* w alone, as a call */
    struct event *deadline;
    struct event *retry_ev; /* created on first use */
    struct cnode *sent;     /* the node owing the reply, while inflight */
    struct cnode *wait;     /* waiting for this node (holds a ref) */
    int wait_asking;
    int slot;
    int inflight;  /* replies hiredis owes this check: 0 or 1 */
    int asking;    /* the last send was preceded by ASKING */
    int sent_eval; /* EVAL sent on the current node */
    int redirects;
    int retries;
};

static void on_call_reply(redisAsyncContext *ac, void *reply, void *privdata);

static struct cop *
cop_of(struct rl_script_wait *w)
{
    return RL_CONTAINER_OF(w, struct cop, w);
}

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
cop_release(struct cop *op)
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

/* FCALL (EVALSHA, EVAL) of the check script for b's checks on n, after
 * ASKING when asked to; RL_ERR when it cannot go. */
static int
cbatch_send(struct cops *o, struct cnode *n, struct cbatch *b, int asking)
{
    int64_t wait_ms = 0;

    for (size_t i = 0; i < b->n; i++) {
        o->reqs[i] = b->w[i]->req;
        if (o->reqs[i]->timeout_ms > wait_ms)
            wait_ms = o->reqs[i]->timeout_ms;
    }
    /* as backend_redis.c: past redis.max_pending fail fast, do not queue */
    if (n->pending_checks + b->n > o->max_pending ||
        script_call_build(&o->call, o->reqs, b->n, script_cmd(n, b->eval)) != RL_OK)
        return RL_ERR;
    /* Both on one connection, so they arrive back to back. */
    if (asking && rconn_sendf(&n->c, on_aux, NULL, "ASKING") != RL_OK)
        return RL_ERR;
    if (rconn_send(&n->c, on_call_reply, b, wait_ms, o->call.buf, o->call.len) != RL_OK)
        return RL_ERR;
    n->pending_checks += (unsigned)b->n;
    for (size_t i = 0; i < b->n; i++) {
        struct cop *op = cop_of(b->w[i]);

        op->inflight++;
        op->sent = n;
        op->asking = asking;
    }
    return RL_OK;
}

/* The check alone, as a call of its own. */
static int
op_send(struct cop *op, struct cnode *n, int asking)
{
    op->solo.eval = op->sent_eval;
    return cbatch_send(op->o, n, &op->solo, asking);
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

/* ---- what a reply says ---------------------------------------------------------- */

/* The errors of the Cluster itself: its own to follow or retry. */
static bool
cluster_error(const char *err)
{
    return rconn_error_is(err, "MOVED") || rconn_error_is(err, "ASK") ||
           rconn_error_is(err, "TRYAGAIN") || rconn_error_is(err, "CLUSTERDOWN");
}

/* A MOVED or an ASK from node n: to the node it names. */
static void
op_redirect(struct cop *op, struct cnode *n, const char *msg)
{
    struct cops *o = op->o;
    bool moved = rconn_error_is(msg, "MOVED");
    char host[CLUSTER_HOST_MAX];
    int slot, port;
    struct cnode *to;

    if (cluster_parse_redirect(msg, n->host, &slot, host, sizeof(host), &port) != RL_OK) {
        log_warn(LOG_MSG("bad redirection from redis cluster"), LOG_S("node", n->name),
                 LOG_QN("error", msg, 200));
        script_answer_status(&op->w, RL_BACKEND_ERROR, "bad redirection from redis cluster");
        return;
    }
    if (++op->redirects > MAX_REDIRECTS) {
        script_answer_status(&op->w, RL_BACKEND_ERROR, "too many cluster redirections");
        return;
    }
    to = cnode_get(o->nodes, host, port);
    log_debug(LOG_MSG("redis cluster redirection"), LOG_S("kind", moved ? "moved" : "ask"),
              LOG_I("slot", slot), LOG_S("from", n->name), LOG_S("to", to->name));
    if (moved) {
        /* The slot has a new owner for good: use it now, and let a refresh
         * bring the rest of the map up to date. */
        if (o->map->owner[slot] == NULL)
            o->map->covered++;
        o->map->owner[slot] = to;
        to->master = true;
        cluster_map_refresh(o->map);
    }
    op->sent_eval = 0; /* a new connection: FCALL or EVALSHA first */
    op_send_to(op, to, !moved);
}

/* TRYAGAIN or CLUSTERDOWN: by the map again, after a short wait. */
static void
op_retry(struct cop *op, const char *msg)
{
    int64_t ms;

    if (++op->retries > MAX_RETRIES) {
        script_answer_status(&op->w, RL_BACKEND_ERROR, "redis cluster kept asking to retry");
        return;
    }
    if (rconn_error_is(msg, "CLUSTERDOWN"))
        cluster_map_refresh(op->o->map);
    ms = (int64_t)RETRY_MIN_MS << (op->retries - 1 < 5 ? op->retries - 1 : 5);
    if (ms > RETRY_MAX_MS)
        ms = RETRY_MAX_MS;
    if (op->wait != NULL) {
        cnode_unref(op->wait);
        op->wait = NULL;
    }
    op_arm_retry(op, ms); /* then by the map again */
}

/* What the walker's hooks need of one reply: its call and the node. */
struct call_reply {
    struct cbatch *b;
    struct cnode *n;
};

/* script_batch's take: a Cluster error for check i. */
static void
reply_take(void *arg, size_t i, const char *err)
{
    struct call_reply *cr = arg;
    struct cop *op = cop_of(cr->b->w[i]);

    if (rconn_error_is(err, "MOVED") || rconn_error_is(err, "ASK"))
        op_redirect(op, cr->n, err);
    else
        op_retry(op, err);
}

/* script_batch's resend: this node forgot the script or the library
 * (restart, SCRIPT or FUNCTION FLUSH): each check sent again, whole. */
static bool
reply_resend(void *arg)
{
    struct call_reply *cr = arg;

    for (size_t i = 0; i < cr->b->n; i++) {
        struct cop *op = cop_of(cr->b->w[i]);

        if (op->w.answered)
            continue;
        op->sent_eval = 1;
        op_send_to(op, cr->n, op->asking);
    }
    return false;
}

/* script_batch's unusable: a failover moves masters, ask for the map. */
static void
reply_unusable(void *arg)
{
    struct call_reply *cr = arg;

    cluster_map_refresh(cr->n->set->map);
}

static void
on_call_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cbatch *b = privdata;
    struct cnode *n = cnode_of(ac);
    struct call_reply cr = {b, n};
    struct script_batch walk = {
        .c = &n->c,
        .ac = ac,
        .w = b->w,
        .n = b->n,
        .eval = b->eval,
        .own = cluster_error,
        .take = reply_take,
        .resend = reply_resend,
        .unusable = reply_unusable,
        .arg = &cr,
    };
    /* read before the checks are released: a solo goes with its check */
    size_t k = b->n;
    bool allocated = b->allocated;

    rconn_replied(&n->c, ac, reply);
    n->pending_checks -= (unsigned)k;
    for (size_t i = 0; i < k; i++) {
        struct cop *op = cop_of(b->w[i]);

        op->inflight--;
        op->sent = NULL;
    }
    (void)script_batch_reply(&walk, reply);
    cnode_settle(n);
    for (size_t i = 0; i < k; i++)
        cop_release(cop_of(b->w[i]));
    if (allocated)
        free(b);
}

/* ops[0..k), all of one slot owned by the ready node n, as one call. */
static void
batch_send(struct cops *o, struct cnode *n, struct cop **ops, size_t k)
{
    struct cbatch *b;

    if (k == 1) {
        op_send_to(ops[0], n, 0);
        return;
    }
    b = xcalloc(1, sizeof(*b) + k * sizeof(b->w[0]));
    b->n = k;
    b->allocated = true;
    b->w = (struct rl_script_wait **)(void *)(b + 1);
    for (size_t i = 0; i < k; i++)
        b->w[i] = &ops[i]->w;
    if (cbatch_send(o, n, b, 0) != RL_OK) {
        for (size_t i = 0; i < k; i++)
            script_answer_status(&ops[i]->w, RL_BACKEND_ERROR, "cannot queue the command");
        free(b);
    }
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
            cop_release(op);
            continue;
        }
        node = o->map->loaded ? o->map->owner[op->slot] : NULL;
        if (node == NULL || node->c.st.state != RCONN_READY || node->c.ac == NULL) {
            op_route(op);
            cop_release(op);
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
            cop_release(group[j]);
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
    cop_release(op);
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
    cop_release(op);
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
    op->w.nlimits = req->policy->nlimits;
    op->w.rsv_list = (req->flags & RL_CHECK_RSV_LIST) != 0;
    op->solo.n = 1;
    op->solo.w = &op->solo.one;
    op->solo.one = &op->w;
    op->slot = slot;
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
