/*
 * backend_cluster.c — counts in a Redis Cluster (redis.cluster seed nodes).
 *
 * The same check script as backend_redis.c, routed the way the Redis Cluster
 * specification says: every key of one check shares one hash tag, so the
 * CRC16 of that tag names one of the 16384 slots and the slot map names the
 * master that owns it.  No sharding of our own: the cluster decides.
 *
 * Per worker (one instance on the worker's event_base):
 *
 *   - a slot map, slot -> node (cluster_slots.c: loaded with CLUSTER SLOTS
 *     from any node that answers, the seeds at first, refreshed every 30 s,
 *     after a MOVED and when a master's connection is lost).
 *   - one connection per node we talk to (the masters, and the seeds until
 *     the first map names the masters), a struct rconn (redis_conn.c) with
 *     its own state, handshake, reconnect backoff and replies owed; a node
 *     whose oldest reply is overdue is dropped.  Nodes that are no longer
 *     masters are closed from a zero timer, never inside their own callback.
 *   - one struct cop per check: its deadline timer (req->timeout_ms) and the
 *     state of its redirections.  MOVED updates that slot, asks for a
 *     refresh and resends to the new owner; ASK sends ASKING then the script
 *     to the named node on one connection, the map unchanged; TRYAGAIN and
 *     CLUSTERDOWN are retried a few times on a short timer; NOSCRIPT (or a
 *     forgotten function library) is answered with EVAL once per connection
 *     tried.  A redirection to a node
 *     still connecting waits for it (polled) until the deadline.  Whatever
 *     happens, the check is answered exactly once and its request is never
 *     touched afterwards; a late reply is dropped.
 *
 * A check whose master is known down (between reconnect attempts) is
 * answered DOWN at once, as backend_redis does: a dead node never queues
 * work; one whose master is connecting waits for it, under its deadline.
 * Replies lost with a connection are never replayed elsewhere, since the
 * script may have run.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend.h"
#include "cluster_slots.h"
#include "log.h"
#include "script.h"
#include "metrics.h"
#include "redis_conn.h"
#include "redis_url.h"
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

struct cluster;
struct cnode;

struct cnode {
    struct cluster *cl;
    struct cnode *next;
    char *host;                 /* IP or name, without brackets */
    int port;
    char *name;                 /* "host:port" for logs */
    struct rconn c;             /* the connection, its state and replies owed */
    unsigned pending_checks;    /* checks in those replies: redis.max_pending counts these */
    unsigned refs;              /* checks waiting for this node */
    int master;                 /* owns slots in the current map */
};

/* One check until it is answered and hiredis owes it nothing. */
struct cop {
    struct cluster *cl;
    struct cop *prev, *next;
    struct rl_script_wait w;    /* the check: req, cb, answered */
    struct event *deadline;
    struct event *retry_ev;     /* created on first use */
    struct cnode *sent;         /* the node owing the reply, while inflight */
    struct cnode *wait;         /* waiting for this node (holds a ref) */
    int wait_asking;
    int slot;
    size_t nlimits;             /* its part of a reply, once req is gone */
    int inflight;               /* replies hiredis owes this check: 0 or 1 */
    int asking;                 /* the last send was preceded by ASKING */
    int sent_eval;              /* EVAL sent on the current node */
    int redirects;
    int retries;
};

struct seed {
    char *host;
    int port;
};

struct cluster {
    struct rl_backend base;
    struct event_base *evb;
    char *username;
    char *password;
    int64_t connect_timeout_ms;
    struct seed *seeds;
    size_t nseeds;
    struct cnode *nodes;
    struct cluster_map map;     /* slot -> master */
    struct cop *ops;            /* every live check */
    /* Checks of this event-loop pass, sent by flush_ev in one script call per
     * hash slot (Redis runs a script only on keys of one slot). */
    struct cop **queue;
    size_t nqueued, coalesce;
    unsigned max_pending;       /* requests outstanding per node at most */
    struct event *flush_ev;
    struct rl_script_call call; /* scratch argv, reused */
    const struct rl_check_req **reqs;
    struct evdns_base *dns;
    struct event *tidy_ev;      /* zero timer: drop stalled, free unused */
    unsigned rr;                /* spreads refreshes over nodes */
    int destroying;
};

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* ---- nodes ------------------------------------------------------------------- */

static void
schedule_tidy(struct cluster *cl)
{
    static const struct timeval zero = {0, 0};

    if (!cl->destroying && !evtimer_pending(cl->tidy_ev, NULL))
        evtimer_add(cl->tidy_ev, &zero);
}

/* After a callback: a node nobody needs any more goes at the next tidy. */
static void
node_settle(struct cnode *n)
{
    if (!n->master && n->c.pending == 0 && n->refs == 0)
        schedule_tidy(n->cl);
}

static void
node_unref(struct cnode *n)
{
    n->refs--;
    node_settle(n);
}

/* The node of a hiredis callback. */
static struct cnode *
of(const redisAsyncContext *ac)
{
    return ((struct rconn *)ac->data)->owner;
}

static void
node_ready(struct rconn *c, int again)
{
    struct cnode *n = c->owner;

    cluster_map_ready(&n->cl->map);
    (void)again;
}

static void
node_down(struct rconn *c)
{
    struct cnode *n = c->owner;

    if (n->master)
        cluster_map_refresh(&n->cl->map);     /* a failover moves masters */
    node_settle(n);
}

static const struct rconn_hooks node_hooks = {
    .ready = node_ready,
    .down = node_down,
};

static struct cnode *
node_find(struct cluster *cl, const char *host, int port)
{
    for (struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (n->port == port && strcmp(n->host, host) == 0)
            return n;
    return NULL;
}

/* The node at host:port, created and connecting when new. */
static struct cnode *
node_get(struct cluster *cl, const char *host, int port)
{
    struct cnode *n = node_find(cl, host, port);

    if (n != NULL)
        return n;
    n = xcalloc(1, sizeof(*n));
    n->cl = cl;
    n->host = xstrdup(host);
    n->port = port;
    n->name = strchr(host, ':') != NULL ? xasprintf("[%s]:%d", host, port)
                                        : xasprintf("%s:%d", host, port);
    {
        /* The cluster has database 0 only: no SELECT; a replica answers
         * MOVED, so no ROLE either. */
        struct rconn_conf conf = {
            .evb = cl->evb, .dns = &cl->dns, .host = n->host, .port = port,
            .name = n->name, .what = "redis cluster node", .field = "node",
            .login = {cl->username, cl->password, 0, RCONN_ROLE_NONE},
            .connect_timeout_ms = cl->connect_timeout_ms, .max_pending = cl->max_pending,
            .heartbeat = 1,
            .hooks = &node_hooks, .owner = n,
        };
        rconn_init(&n->c, &conf);
    }
    n->next = cl->nodes;
    cl->nodes = n;
    rconn_start(&n->c);
    return n;
}

/* Never from one of n's own callbacks; with pending == 0 no callback of a
 * check runs here (destroy answers those first). */
static void
node_free(struct cnode *n)
{
    rconn_close(&n->c);
    free(n->host);
    free(n->name);
    free(n);
}

/* ---- answering checks ------------------------------------------------------ */

static void
op_free(struct cop *op)
{
    struct cluster *cl = op->cl;

    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        cl->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    event_free(op->deadline);
    if (op->retry_ev != NULL)
        event_free(op->retry_ev);
    if (op->wait != NULL)
        node_unref(op->wait);
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
        op_free(op);
}

/* ---- sending ------------------------------------------------------------------ */

/* The reply to a command no check waits for (ASKING). */
static void
on_aux(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cnode *n = of(ac);

    rconn_replied(&n->c, ac, reply);
    node_settle(n);
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
    struct rl_script_call *c = &op->cl->call;

    /* as backend_redis.c: past redis.max_pending fail fast, do not queue */
    if (n->pending_checks + 1 > op->cl->max_pending ||
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
            node_unref(op->wait);
        op->wait = n;
    }
    op->wait_asking = asking;
    op_arm_retry(op, WAIT_POLL_MS);
}

/* A node a check may wait for: a connection being made (the first one, a
 * new owner named by MOVED, ASK or a new map, or a reconnect attempt under
 * way).  One known down (between attempts) answers DOWN at once instead, as
 * backend_redis.c: a dead node never queues work. */
static int
node_worth_waiting(const struct cnode *n)
{
    return n->c.st.state == RCONN_CONNECTING || n->c.st.state == RCONN_HANDSHAKE;
}

/* No map yet, but one is on its way: a seed connecting, asked, or about to
 * be asked (not after failed refreshes: then the cluster is known down). */
static int
map_coming(const struct cluster *cl)
{
    if (cl->map.loaded)
        return 0;
    if (cluster_map_coming(&cl->map))
        return 1;
    for (const struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (node_worth_waiting(n))
            return 1;
    return 0;
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
    if (node_worth_waiting(n)) {
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
    struct cluster *cl = op->cl;
    struct cnode *n = cl->map.loaded ? cl->map.owner[op->slot] : NULL;

    if (n == NULL && map_coming(cl)) {
        op_arm_retry(op, WAIT_POLL_MS);     /* then by the map, when it comes */
        return;
    }
    if (n == NULL) {
        cluster_map_refresh(&cl->map);
        script_answer_status(&op->w, RL_BACKEND_DOWN, "cluster slot not covered");
        return;
    }
    op_send_to(op, n, 0);
}

static int
is_error(const char *msg, const char *code)
{
    size_t n = strlen(code);

    return strncmp(msg, code, n) == 0 && (msg[n] == ' ' || msg[n] == '\0');
}

/* An error reply to the script from node n. */
static void
op_on_error(struct cop *op, struct cnode *n, const char *msg)
{
    struct cluster *cl = op->cl;
    int moved = is_error(msg, "MOVED"), ask = is_error(msg, "ASK");

    rconn_error(&n->c.errs, &n->c.st, n->name, msg, 1);

    if (moved || ask) {
        char host[CLUSTER_HOST_MAX];
        int slot, port;
        struct cnode *to;

        if (cluster_parse_redirect(msg, n->host, &slot, host, sizeof(host), &port) != RL_OK) {
            log_warn("msg=\"bad redirection from redis cluster\" node=%s error=\"%.200s\"",
                     n->name, msg);
            script_answer_status(&op->w, RL_BACKEND_ERROR, "bad redirection from redis cluster");
            return;
        }
        if (++op->redirects > MAX_REDIRECTS) {
            script_answer_status(&op->w, RL_BACKEND_ERROR, "too many cluster redirections");
            return;
        }
        to = node_get(cl, host, port);
        log_debug("msg=\"redis cluster redirection\" kind=%s slot=%d from=%s to=%s",
                  moved ? "moved" : "ask", slot, n->name, to->name);
        if (moved) {
            /* The slot has a new owner for good: use it now, and let a
             * refresh bring the rest of the map up to date. */
            if (cl->map.owner[slot] == NULL)
                cl->map.covered++;
            cl->map.owner[slot] = to;
            to->master = 1;
            cluster_map_refresh(&cl->map);
        }
        op->sent_eval = 0;      /* a new connection: FCALL or EVALSHA first */
        op_send_to(op, to, ask);
        return;
    }
    if (is_error(msg, "TRYAGAIN") || is_error(msg, "CLUSTERDOWN")) {
        int64_t ms;

        if (++op->retries > MAX_RETRIES) {
            script_answer_status(&op->w, RL_BACKEND_ERROR, "redis cluster kept asking to retry");
            return;
        }
        if (msg[0] == 'C')
            cluster_map_refresh(&cl->map);
        ms = (int64_t)RETRY_MIN_MS << (op->retries - 1 < 5 ? op->retries - 1 : 5);
        if (ms > RETRY_MAX_MS)
            ms = RETRY_MAX_MS;
        if (op->wait != NULL) {
            node_unref(op->wait);
            op->wait = NULL;
        }
        op_arm_retry(op, ms);   /* then by the map again */
        return;
    }
    if (rconn_unusable(msg) != NULL) {
        /* Nothing ran, and nothing will there until it is a master again:
         * drop the connection, ask for the map (a failover moves masters) */
        script_answer_status(&op->w, RL_BACKEND_DOWN, rconn_unusable(msg));
        rconn_drop(&n->c, rconn_unusable(msg));
        cluster_map_refresh(&cl->map);
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
    struct cnode *n = of(ac);
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
            ;                   /* late: the deadline answered it */
        else if (r->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->str);
        else if (script_reply_check(r, script_reply_len(op->nlimits), &why) != RL_OK) {
            rconn_bad_reply(&n->c.errs, &n->c.st, n->name, why, 1);
            script_answer_status(&op->w, RL_BACKEND_ERROR, why);
        } else if (r->element[0]->type == REDIS_REPLY_ERROR) {
            op_on_error(op, n, r->element[0]->str);     /* failed inside the script */
        } else {
            rconn_errlog_end(&n->c.errs, &n->c.st, n->name);
            script_answer_reply(&op->w, r, 0, op->nlimits);
        }
    }
    node_settle(n);
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
    struct cnode *n = of(ac);
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
        if (r->type != REDIS_REPLY_ERROR && script_reply_check(r, len, &why) != RL_OK) {
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
            ;                   /* late: the deadline answered it */
        else if (r->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->str);     /* one slot: the same for each */
        else if (why != NULL)
            script_answer_status(&op->w, RL_BACKEND_ERROR, why);
        else if (r->element[at]->type == REDIS_REPLY_ERROR)
            op_on_error(op, n, r->element[at]->str);    /* failed inside the script */
        else
            script_answer_reply(&op->w, r, at, op->nlimits);
        at += script_reply_len(op->nlimits);
    }
    node_settle(n);
    for (size_t i = 0; i < b->n; i++)
        op_release(b->ops[i]);
    free(b);
}

/* ops[0..k), all of one slot owned by the ready node n, as one call. */
static void
batch_send(struct cluster *cl, struct cnode *n, struct cop **ops, size_t k)
{
    struct cbatch *b;
    int64_t wait_ms = 0;

    if (k == 1) {
        op_send_to(ops[0], n, 0);
        return;
    }
    for (size_t i = 0; i < k; i++)
        cl->reqs[i] = ops[i]->w.req;
    if (n->pending_checks + k > cl->max_pending ||
        script_call_build(&cl->call, cl->reqs, k, script_cmd(n, 0)) != RL_OK)
        goto fail;
    b = xcalloc(1, sizeof(*b) + k * sizeof(b->ops[0]));
    for (size_t i = 0; i < k; i++)
        if (ops[i]->w.req->timeout_ms > wait_ms)
            wait_ms = ops[i]->w.req->timeout_ms;
    if (rconn_send(&n->c, on_batch_reply, b, wait_ms, cl->call.buf, cl->call.len) != RL_OK) {
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
 * Send the checks queued in this pass: those of one slot whose owner is ready
 * together, in their order; any other goes its own way (waiting for a node
 * that is connecting, or answered DOWN).  The queue holds each check
 * (inflight), so a deadline in the same pass cannot free it under us.
 */
static void
flush(struct cluster *cl)
{
    size_t n = cl->nqueued;
    /* Our own copy: answering a check runs its callback, which may queue
     * (and flush) new checks. */
    struct cop **q = xcalloc(2 * n + 1, sizeof(*q)), **group = q + n;

    memcpy(q, cl->queue, n * sizeof(*q));
    cl->nqueued = 0;
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
        node = cl->map.loaded ? cl->map.owner[op->slot] : NULL;
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
        batch_send(cl, node, group, k);
        for (size_t j = 0; j < k; j++)
            op_release(group[j]);
    }
    free(q);
}

static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    flush(arg);
    (void)fd;
    (void)what;
}

static void
on_op_retry(evutil_socket_t fd, short what, void *arg)
{
    struct cop *op = arg;
    struct cnode *n = op->wait;

    if (!op->w.answered) {
        if (n != NULL) {
            op->wait = NULL;    /* our ref moves to this frame */
            op_send_to(op, n, op->wait_asking);
            node_unref(n);
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
        rconn_drop(&n->c, "redis stalled");     /* from a fresh stack: it answers op */
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

/* ---- the slot map's hooks ------------------------------------------------------ */

/* cluster_node_fn */
static void *
map_node(void *arg, const char *host, int port)
{
    return node_get(arg, host, port);
}

/* The nodes that own slots are the masters. */
static void
map_applied(void *arg, const char *from, int changed)
{
    struct cluster *cl = arg;
    int masters = 0;

    for (struct cnode *n = cl->nodes; n != NULL; n = n->next)
        n->master = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        struct cnode *n = cl->map.owner[s];

        if (n != NULL && !n->master) {
            masters++;
            n->master = 1;
        }
    }
    if (changed)
        log_info("msg=\"redis cluster slot map loaded\" from=%s masters=%d slots_covered=%d",
                 from, masters, cl->map.covered);
    else
        log_debug("msg=\"redis cluster slot map unchanged\" from=%s", from);
}

static int
map_master_down(void *arg)
{
    struct cluster *cl = arg;

    for (const struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (n->master && n->c.st.state == RCONN_DOWN)
            return 1;
    return 0;
}

/* A ready node to ask, masters first, taking turns. */
static struct rconn *
map_pick(void *arg)
{
    struct cluster *cl = arg;

    for (int want_master = 1; want_master >= 0; want_master--) {
        unsigned count = 0, i = 0;
        struct cnode *n;

        for (n = cl->nodes; n != NULL; n = n->next)
            if (n->c.st.state == RCONN_READY && n->c.ac != NULL && (!want_master || n->master))
                count++;
        if (count == 0)
            continue;
        i = cl->rr++ % count;
        for (n = cl->nodes; n != NULL; n = n->next)
            if (n->c.st.state == RCONN_READY && n->c.ac != NULL && (!want_master || n->master) &&
                i-- == 0)
                return &n->c;
    }
    return NULL;
}

static void
map_connect_seeds(void *arg)
{
    struct cluster *cl = arg;

    for (size_t i = 0; i < cl->nseeds; i++)
        (void)node_get(cl, cl->seeds[i].host, cl->seeds[i].port);
}

/* Old masters nobody waits for go at the next tidy. */
static void
map_replied(void *arg, struct rconn *c)
{
    schedule_tidy(arg);
    (void)c;
}

static const struct cluster_map_hooks map_hooks = {
    .node = map_node,
    .pick = map_pick,
    .connect_seeds = map_connect_seeds,
    .applied = map_applied,
    .master_down = map_master_down,
    .replied = map_replied,
};

/* Off every hiredis callback: free the nodes that are no longer masters and
 * that nothing waits for. */
static void
on_tidy(evutil_socket_t fd, short what, void *arg)
{
    struct cluster *cl = arg;
    struct cnode **pp = &cl->nodes, *n;
    /* While a refresh is wanted, the seeds may be all we can ask. */
    int keep_others = !cl->map.loaded || cluster_map_busy(&cl->map);

    while ((n = *pp) != NULL) {
        if (!keep_others && !n->master && n->c.pending == 0 && n->refs == 0) {
            log_debug("msg=\"redis cluster node closed\" node=%s", n->name);
            *pp = n->next;
            node_free(n);
            continue;
        }
        pp = &n->next;
    }
    (void)fd;
    (void)what;
}

/* ---- the backend interface ---------------------------------------------------- */

static void
cluster_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb,
              void *arg)
{
    struct cluster *cl = (struct cluster *)be;
    char key[RL_LIMIT_KEY_MAX];
    int klen = backend_limit_key(req, 0, key, sizeof(key));
    struct cnode *n = NULL;
    struct rl_check_res res;
    struct timeval tv;
    struct cop *op;
    int slot = 0;

    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_DOWN;
    if (klen >= 0) {
        slot = cluster_key_slot(key, (size_t)klen);
        n = cl->map.owner[slot];
    }
    if (klen < 0) {
        res.status = RL_BACKEND_ERROR;
        res.error = "key too long";
    } else if (!cl->map.loaded && !map_coming(cl)) {
        res.error = "cluster slot map not loaded";
    } else if (!cl->map.loaded) {
        ;                       /* waits for the map under its deadline */
    } else if (n == NULL) {
        res.error = "cluster slot not covered";
        cluster_map_refresh(&cl->map);
    } else if (n->c.st.state != RCONN_READY && !node_worth_waiting(n)) {
        res.error = n->c.st.down_reason ? n->c.st.down_reason : "cluster master not connected";
    }
    if (res.error != NULL) {
        cb(&res, arg);
        return;
    }
    op = xcalloc(1, sizeof(*op));
    op->cl = cl;
    op->w.req = req;
    op->w.cb = cb;
    op->w.arg = arg;
    op->slot = slot;
    op->nlimits = req->policy->nlimits;
    op->next = cl->ops;
    if (cl->ops != NULL)
        cl->ops->prev = op;
    cl->ops = op;
    op->deadline = evtimer_new(cl->evb, on_op_deadline, op);
    op->retry_ev = evtimer_new(cl->evb, on_op_retry, op);
    tv.tv_sec = req->timeout_ms / 1000;
    tv.tv_usec = (req->timeout_ms % 1000) * 1000;
    evtimer_add(op->deadline, &tv);
    /* Held by the queue until the flush at the end of this pass; event_active
     * puts the flush behind the callbacks already active, so the other
     * requests read in this pass join it. */
    op->inflight++;
    cl->queue[cl->nqueued++] = op;
    if (cl->nqueued == cl->coalesce)
        flush(cl);
    else if (cl->nqueued == 1)
        event_active(cl->flush_ev, EV_TIMEOUT, 1);
}

static int
cluster_ready(struct rl_backend *be, const char **reason)
{
    struct cluster *cl = (struct cluster *)be;

    if (!cl->map.loaded) {
        *reason = "cluster slot map not loaded";
        return RL_ERR;
    }
    if (cl->map.covered < CLUSTER_SLOTS) {
        *reason = "not every cluster slot has a master";
        return RL_ERR;
    }
    for (struct cnode *n = cl->nodes; n != NULL; n = n->next) {
        if (n->master && n->c.st.state != RCONN_READY) {
            *reason = "a cluster master is not connected";
            return RL_ERR;
        }
    }
    return RL_OK;
}

/* "host:port" or "[v6]:port" (config.c validated the shape). */
static int
parse_seed(const char *s, struct seed *out)
{
    const char *colon = strrchr(s, ':');
    size_t hlen;

    if (colon == NULL || colon == s)
        return RL_ERR;
    hlen = (size_t)(colon - s);
    if (s[0] == '[' && hlen > 2 && s[hlen - 1] == ']') {
        out->host = xstrndup(s + 1, hlen - 2);
    } else {
        out->host = xstrndup(s, hlen);
    }
    out->port = atoi(colon + 1);
    if (out->port < 1 || out->port > 65535) {
        free(out->host);
        out->host = NULL;
        return RL_ERR;
    }
    return RL_OK;
}

static void cluster_destroy(struct rl_backend *be);

static int
cluster_create(struct rl_backend **out, struct event_base *evb,
               const struct rl_config *cfg, char **cause)
{
    struct cluster *cl = xcalloc(1, sizeof(*cl));
    struct rl_redis_url url;

    cl->base.ops = &rl_backend_cluster_ops;
    cl->evb = evb;
    cl->connect_timeout_ms = cfg->redis.connect_timeout_ms;
    cl->max_pending = (unsigned)cfg->redis.max_pending;
    cl->tidy_ev = evtimer_new(evb, on_tidy, cl);
    cl->coalesce = (size_t)cfg->redis.coalesce;
    cl->queue = xcalloc(cl->coalesce, sizeof(*cl->queue));
    cl->reqs = xcalloc(cl->coalesce, sizeof(*cl->reqs));
    cl->flush_ev = event_new(evb, -1, 0, on_flush, cl);
    /* Credentials as backend_redis.c: the URL's, completed or overridden by
     * redis.username / redis.password.  Its host, port and db are not used. */
    memset(&url, 0, sizeof(url));
    if (cfg->redis.url != NULL && redis_url_parse(cfg->redis.url, &url, cause) != RL_OK) {
        cluster_destroy(&cl->base);
        return RL_ERR;
    }
    cl->username = cfg->redis.username ? xstrdup(cfg->redis.username) : url.username;
    cl->password = cfg->redis.password ? xstrdup(cfg->redis.password) : url.password;
    if (cl->username != url.username)
        free(url.username);
    if (cl->password != url.password)
        free(url.password);
    url.username = url.password = NULL;
    redis_url_clear(&url);

    cl->seeds = xcalloc(cfg->redis.cluster.n, sizeof(*cl->seeds));
    for (size_t i = 0; i < cfg->redis.cluster.n; i++) {
        if (parse_seed(cfg->redis.cluster.v[i], &cl->seeds[cl->nseeds]) != RL_OK) {
            *cause = xasprintf("redis.cluster[%zu]: must be \"host:port\" or \"[v6]:port\"", i);
            cluster_destroy(&cl->base);
            return RL_ERR;
        }
        cl->nseeds++;
    }
    if (cl->nseeds == 0) {
        *cause = xstrdup("redis.cluster: no seed node");
        cluster_destroy(&cl->base);
        return RL_ERR;
    }
    /* Connect every seed; the first ready one is asked for the map. */
    cluster_map_init(&cl->map, evb, cl->connect_timeout_ms, &map_hooks, cl);
    *out = &cl->base;
    return RL_OK;
}

static void
cluster_destroy(struct rl_backend *be)
{
    struct cluster *cl = (struct cluster *)be;
    struct cnode *n;

    cl->destroying = 1;
    /* 1. Close every connection: hiredis runs each pending callback once with
     *    NULL, which answers the checks in flight (DOWN) and frees them. */
    for (n = cl->nodes; n != NULL; n = n->next)
        rconn_close(&n->c);
    /* 2. Checks waiting for a node or a retry: answered now. */
    while (cl->ops != NULL) {
        struct cop *op = cl->ops;
        script_answer_status(&op->w, RL_BACKEND_DOWN, "shutting down");
        op_free(op);
    }
    /* 3. The nodes, nobody refers to them any more. */
    while ((n = cl->nodes) != NULL) {
        cl->nodes = n->next;
        node_free(n);
    }
    cluster_map_close(&cl->map);
    if (cl->tidy_ev != NULL)
        event_free(cl->tidy_ev);
    if (cl->flush_ev != NULL)
        event_free(cl->flush_ev);
    free(cl->queue);
    free(cl->reqs);
    script_call_free(&cl->call);
    rconn_dns_free(cl->dns);
    for (size_t i = 0; i < cl->nseeds; i++)
        free(cl->seeds[i].host);
    free(cl->seeds);
    free(cl->username);
    free(cl->password);
    free(cl);
}

const struct rl_backend_ops rl_backend_cluster_ops = {
    .name = "redis-cluster",
    .create = cluster_create,
    .destroy = cluster_destroy,
    .check = cluster_check,
    .ready = cluster_ready,
};
