/*
 * cluster_op.h — what the Cluster backend's two halves share:
 * backend_cluster.c (the backend: nodes, the slot map's hooks, routing a new
 * check) and cluster_op.c (a check from its queueing to its answer: calls,
 * coalescing per slot, redirections, retries, deadlines).  Private to them.
 */
#ifndef RL_CLUSTER_OP_H
#define RL_CLUSTER_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>
#include <hiredis/async.h>

#include "backend.h"
#include "cluster_slots.h"
#include "redis_conn.h"
#include "script.h"

struct cluster;
struct cnode;

struct cnode {
    struct cluster *cl;
    struct cnode *next;
    char *host; /* IP or name, without brackets */
    int port;
    char *name;              /* "host:port" for logs */
    struct rconn c;          /* the connection, its state and replies owed */
    unsigned pending_checks; /* checks in those replies: redis.max_pending counts these */
    unsigned refs;           /* checks waiting for this node */
    int master;              /* owns slots in the current map */
};

/* One check until it is answered and hiredis owes it nothing. */
struct cop {
    struct cluster *cl;
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
    struct cluster_map map; /* slot -> master */
    struct cop *ops;        /* every live check */
    /* Checks of this event-loop pass, sent in one script call per hash slot
     * (Redis runs a script only on keys of one slot). */
    struct rconn_queue queue;
    unsigned max_pending;       /* requests outstanding per node at most */
    struct rl_script_call call; /* scratch argv, reused */
    const struct rl_check_req **reqs;
    struct evdns_base *dns;
    struct event *tidy_ev; /* zero timer: drop stalled, free unused */
    unsigned rr;           /* spreads refreshes over nodes */
    int destroying;
};

/* ---- backend_cluster.c ---- */

/* The node at host:port, created and connecting when new. */
struct cnode *cnode_get(struct cluster *cl, const char *host, int port);
/* After a callback: a node nobody needs any more goes at the next tidy. */
void cnode_settle(struct cnode *n);
/* A check stopped waiting for n. */
void cnode_unref(struct cnode *n);
/* A connection being made: a check may wait for it. */
bool cnode_connecting(const struct cnode *n);
/* No slot map yet, but one is on its way. */
bool cluster_awaits_map(const struct cluster *cl);

/* The node of a hiredis callback. */
static inline struct cnode *
cnode_of(const redisAsyncContext *ac)
{
    return ((struct rconn *)ac->data)->owner;
}

/* ---- cluster_op.c ---- */

/* A check for `slot` the router accepted: queued for this pass's flush (one
 * call per slot), under its deadline; answered exactly once from then on. */
void cop_start(struct cluster *cl, const struct rl_check_req *req, rl_check_cb cb, void *arg,
               int slot);
/* cl->queue's rconn_flush_fn: send what this pass queued. */
void cop_flush(void *owner, void *const *items, size_t n);
/* Unlink and free a check (answered, owed nothing; or at destroy). */
void cop_free(struct cop *op);

#endif
