/* pending.c — see pending.h. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "pending.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "policy.h"
#include "util.h"

/* Kept operations in flight at once while a queue is sent again: enough to
 * fill a round trip, few enough that a failure sends little twice. */
#define PENDING_WINDOW 64
/* Entries done with, kept for the next charge (no malloc per charge): those
 * whose keys take at most SPARE_KEYS bytes, at most SPARE_MAX of them. */
#define SPARE_KEYS 256
#define SPARE_MAX 64

#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define SUB(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_RELAXED)

/* One kept operation: its request and what it points at, in one block. */
struct pentry {
    struct pentry *prev, *next; /* in the queue, oldest first */
    struct rl_pending *p;
    struct rl_config *cfg; /* a reference: the policy's strings live in it */
    rl_pending_cb cb;      /* NULL once the caller is answered */
    void *arg;
    int metrics_id;
    int sent;     /* the backend owes its callback */
    int deferred; /* its caller was answered "kept" */
    int errors;   /* WRONGTYPE replies in a row */
    size_t room;  /* bytes of buf */
    /* from here on written before read: not zeroed */
    struct event deadline; /* the caller's answer, while cb is set */
    struct rl_check_req req;
    struct rl_policy policy; /* req.policy: a copy, limits below */
    struct rl_limit limits[RL_LIMITS_MAX];
    const char *lkey[RL_LIMITS_MAX]; /* req.limit_key, when it has one */
    size_t lklen[RL_LIMITS_MAX];
    char buf[]; /* the key, then each limit key, then a settle's claim */
};

struct rl_pending {
    struct event_base *base;
    struct rl_backend *be;
    struct rl_metrics *m;
    struct pentry *head, *tail;
    size_t count;    /* entries */
    size_t nsent;    /* entries sent, callback owed */
    size_t nwaiting; /* entries not sent: sent again in order */
    int64_t units;
    uint64_t writer, seq; /* RL_CHECK_ONCE: this queue's id, the last seq */
    struct event *retry;
    struct pentry *spare; /* SPARE_KEYS of room each, by next */
    size_t nspare;
    int flushing; /* in flush() */
    int closing, draining;
    void (*idle_cb)(void *arg);
    void *idle_arg;
};

static void on_retry(evutil_socket_t fd, short what, void *arg);

struct rl_pending *
pending_new(struct event_base *base, struct rl_backend *be, struct rl_metrics *m)
{
    struct rl_pending *p = xcalloc(1, sizeof(*p));

    p->base = base;
    p->be = be;
    p->m = m;
    /* a writer of its own, never a hybrid table's: a writer's seqs for one
     * key must only grow, and each counts its own */
    if (getrandom(&p->writer, sizeof(p->writer), GRND_NONBLOCK) != sizeof(p->writer))
        p->writer = ((uint64_t)random() << 32) ^ (uint64_t)random() ^
                    (uint64_t)now_monotonic_us();
    p->retry = evtimer_new(base, on_retry, p);
    return p;
}

size_t
pending_count(const struct rl_pending *p)
{
    return p != NULL ? p->count : 0;
}

int64_t
pending_units(const struct rl_pending *p)
{
    return p != NULL ? p->units : 0;
}

bool
pending_idle(const struct rl_pending *p)
{
    return p == NULL || p->count == 0;
}

static void
arm_retry(struct rl_pending *p)
{
    struct timeval tv = {0, PENDING_RETRY_MS * 1000};

    if (!p->closing && p->nwaiting > 0 && !evtimer_pending(p->retry, NULL))
        evtimer_add(p->retry, &tv);
}

/* The caller hears "kept": a 202. */
static void
defer(struct pentry *e)
{
    rl_pending_cb cb = e->cb;

    if (cb == NULL)
        return;
    e->cb = NULL;
    evtimer_del(&e->deadline);
    e->deferred = 1;
    ADD(&e->p->m->charges_deferred, 1);
    ADD(&e->p->m->charges_pending, 1);
    ADD(&e->p->m->charges_pending_units, (uint64_t)e->req.cost);
    cb(NULL, e->arg);
}

static void
entry_free(struct pentry *e)
{
    struct rl_pending *p = e->p;

    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        p->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        p->tail = e->prev;
    p->count--;
    p->units -= e->req.cost;
    if (e->deferred) {
        SUB(&p->m->charges_pending, 1);
        SUB(&p->m->charges_pending_units, (uint64_t)e->req.cost);
    }
    if (e->cb != NULL)
        evtimer_del(&e->deadline);
    config_unref(e->cfg);
    if (e->room == SPARE_KEYS && p->nspare < SPARE_MAX) {
        e->next = p->spare;
        p->spare = e;
        p->nspare++;
    } else {
        free(e);
    }
}

static void flush(struct rl_pending *p);

static void
maybe_idle(struct rl_pending *p)
{
    if (p->draining && !p->closing && p->count == 0 && p->idle_cb != NULL)
        p->idle_cb(p->idle_arg);
}

/* What an applied settle found, counted as a settle answered at once is
 * (check.c's finish_settle: a kept one's caller counts nothing). */
static void
settle_metrics(const struct pentry *e, const struct rl_check_res *res)
{
    int64_t diff = e->req.cost - e->req.rsv_estimate;

    if (res->rsv != RL_RSV_SETTLED) {
        metrics_reservation(e->p->m,
                            res->rsv == RL_RSV_EXPIRED ? RL_RSV_M_EXPIRED : RL_RSV_M_UNKNOWN);
        return;
    }
    metrics_reservation(e->p->m, RL_RSV_M_SETTLED);
    if (diff > 0)
        metrics_charge(e->p->m, e->metrics_id, diff);
}

/* The backend's answer to a sent entry: applied, or kept to go again. */
static void
on_sent(const struct rl_check_res *res, void *arg)
{
    struct pentry *e = arg;
    struct rl_pending *p = e->p;

    e->sent = 0;
    p->nsent--;
    if (res->status == RL_BACKEND_OK && res->nlimits == e->policy.nlimits) {
        /* applied (or, sent again after it ran, found applied: once) */
        rl_pending_cb cb = e->cb;

        if (e->req.flags & RL_CHECK_RSV_SETTLE)
            settle_metrics(e, res);
        else
            metrics_charge(p->m, e->metrics_id, e->req.cost);
        if (cb != NULL) {
            e->cb = NULL;
            evtimer_del(&e->deadline);
            cb(res, e->arg);
        }
        entry_free(e);
        if (p->nwaiting > 0 && !p->flushing)
            flush(p);
        maybe_idle(p);
        return;
    }
    /* not known to have run: kept, sent again in its place (the once key
     * reads a resend of one that ran) */
    p->nwaiting++;
    /* only an error that no wait mends counts towards giving up: a Cluster
     * slot that moves (TRYAGAIN, CLUSTERDOWN), a failover (READONLY), OOM
     * or LOADING end, and the charge with them */
    e->errors = res->status == RL_BACKEND_ERROR && res->error != NULL &&
                        strncmp(res->error, "WRONGTYPE", 9) == 0
                    ? e->errors + 1
                    : 0;
    log_debug(LOG_MSG("charge kept"), LOG_S("policy", e->policy.name),
              LOG_I("units", e->req.cost), LOG_Q("error", res->error ? res->error : ""));
    if (e->errors >= PENDING_ERRORS_MAX) {
        /* an error Redis gives every time (a key of the wrong type): never
         * applied, and it must not hold a place for ever */
        log_warn(LOG_MSG("charge given up"), LOG_S("policy", e->policy.name),
                 LOG_I("units", e->req.cost), LOG_I("attempts", e->errors),
                 LOG_Q("error", res->error ? res->error : ""));
        ADD(&p->m->charges_lost, 1);
        p->nwaiting--;
        defer(e);
        entry_free(e);
        maybe_idle(p);
        return;
    }
    defer(e);
    arm_retry(p);
}

static void
send_entry(struct pentry *e)
{
    struct rl_pending *p = e->p;

    e->sent = 1;
    p->nsent++;
    p->nwaiting--;
    p->be->ops->check(p->be, &e->req, on_sent, e);
}

/* Send waiting entries in order, at most PENDING_WINDOW in flight.  Not
 * gated on not_ready: a backend answers what it cannot take at once (a
 * Cluster master down: its keys' only, the others' are applied), and one
 * key's entries fail or pass together (one connection, in order). */
static void
flush(struct rl_pending *p)
{
    struct pentry *e, *next;

    if (p->closing || p->flushing || p->nwaiting == 0)
        return;
    p->flushing = 1;
    for (e = p->head; e != NULL && p->nwaiting > 0; e = next) {
        next = e->next; /* a callback frees only its own entry */
        if (e->sent)
            continue;
        if (p->nsent >= PENDING_WINDOW)
            break; /* the next answer goes on */
        send_entry(e);
    }
    p->flushing = 0;
    arm_retry(p);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    flush(arg);
    (void)fd;
    (void)what;
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct pentry *e = arg;

    /* still in flight: its reply, however late, applies it (settle) */
    defer(e);
    (void)fd;
    (void)what;
}

/* A copy of req and what it points at. */
static struct pentry *
entry_new(struct rl_pending *p, struct rl_config *cfg, const struct rl_check_req *req)
{
    const struct rl_policy *pol = req->policy;
    size_t n = pol->nlimits, total = req->key_len + 1, room, o;
    struct pentry *e;

    if (req->limit_key != NULL)
        for (size_t i = 0; i < n; i++)
            total += req->limit_key[i] != NULL ? req->limit_key_len[i] + 1 : 0;
    if (req->flags & RL_CHECK_RSV_SETTLE)
        total += req->rsv_claim_len + 1;
    room = total < SPARE_KEYS ? SPARE_KEYS : total;
    if (room == SPARE_KEYS && p->spare != NULL) {
        e = p->spare;
        p->spare = e->next;
        p->nspare--;
    } else {
        /* not calloc: most of it is the limits' room, written as far as used */
        e = xmalloc(sizeof(*e) + room);
    }
    memset(e, 0, offsetof(struct pentry, deadline));
    e->room = room;
    e->p = p;
    e->cfg = config_ref(cfg);
    e->policy = *pol;
    memcpy(e->limits, pol->limits, n * sizeof(*e->limits));
    e->policy.limits = e->limits;
    e->req = *req;
    e->req.policy = &e->policy;
    memcpy(e->buf, req->key, req->key_len);
    e->buf[req->key_len] = '\0';
    e->req.key = e->buf;
    o = req->key_len + 1;
    if (req->limit_key != NULL) {
        for (size_t i = 0; i < n; i++) {
            e->lkey[i] = NULL;
            e->lklen[i] = 0;
            if (req->limit_key[i] == NULL)
                continue;
            memcpy(e->buf + o, req->limit_key[i], req->limit_key_len[i]);
            e->buf[o + req->limit_key_len[i]] = '\0';
            e->lkey[i] = e->buf + o;
            e->lklen[i] = req->limit_key_len[i];
            o += req->limit_key_len[i] + 1;
        }
        e->req.limit_key = e->lkey;
        e->req.limit_key_len = e->lklen;
    }
    if (req->flags & RL_CHECK_RSV_SETTLE) {
        /* the claim names the record with the nonce (req.rsv, a copy) */
        memcpy(e->buf + o, req->rsv_claim, req->rsv_claim_len);
        e->buf[o + req->rsv_claim_len] = '\0';
        e->req.rsv_claim = e->buf + o;
        /* applied once by itself: it deletes the record it reads, so a
         * resend after it ran finds none and changes nothing (no once key) */
        e->req.flags |= RL_CHECK_SETTLE;
    } else {
        /* applied once, answered only by its reply or its connection's loss */
        e->req.flags |= RL_CHECK_ONCE | RL_CHECK_SETTLE;
        e->req.writer = p->writer;
        e->req.seq = ++p->seq;
    }
    e->req.timeout_ms = cfg->redis.timeout_ms;
    evtimer_assign(&e->deadline, p->base, on_deadline, e);
    return e;
}

int
pending_submit(struct rl_pending *p, struct rl_config *cfg, const struct rl_check_req *req,
               int metrics_id, rl_pending_cb cb, void *arg)
{
    struct pentry *e;
    struct timeval tv;

    if ((int64_t)p->count >= cfg->max_pending_charges) {
        ADD(&p->m->charges_refused, 1);
        return RL_ERR;
    }
    e = entry_new(p, cfg, req);
    e->cb = cb;
    e->arg = arg;
    e->metrics_id = metrics_id;
    e->prev = p->tail;
    if (p->tail != NULL)
        p->tail->next = e;
    else
        p->head = e;
    p->tail = e;
    p->count++;
    p->units += req->cost;
    p->nwaiting++;
    /* behind older ones kept: kept now (a backend that cannot take it
     * answers at once: a Cluster master down fails its own keys only) */
    if (p->nwaiting > 1 || p->closing) {
        defer(e);
        arm_retry(p);
        return RL_OK;
    }
    tv.tv_sec = cfg->redis.timeout_ms / 1000;
    tv.tv_usec = (cfg->redis.timeout_ms % 1000) * 1000;
    evtimer_add(&e->deadline, &tv);
    send_entry(e);
    return RL_OK;
}

void
pending_drain(struct rl_pending *p, void (*idle)(void *arg), void *arg)
{
    if (p == NULL)
        return;
    p->draining = 1;
    p->idle_cb = idle;
    p->idle_arg = arg;
    flush(p);
}

void
pending_close(struct rl_pending *p)
{
    if (p == NULL)
        return;
    p->closing = 1;
    evtimer_del(p->retry);
}

void
pending_free(struct rl_pending *p)
{
    int64_t units = p != NULL ? p->units : 0;
    size_t n = p != NULL ? p->count : 0;

    if (p == NULL)
        return;
    /* every backend callback has run: what is left was never applied, or
     * (lost with its connection at the end) may have been */
    while (p->head != NULL) {
        struct pentry *e = p->head;

        ADD(&p->m->charges_lost, 1);
        entry_free(e);
    }
    if (n > 0)
        log_warn(LOG_MSG("charges not applied before exit"), LOG_U("charges", n),
                 LOG_I("units", units));
    while (p->spare != NULL) {
        struct pentry *e = p->spare;

        p->spare = e->next;
        free(e);
    }
    event_free(p->retry);
    free(p);
}
