/*
 * cluster_op.h — a check on the Cluster backend from the moment the router
 * (backend_cluster.c) accepted it to its answer: the checks of one
 * event-loop pass sent as one script call per hash slot, each under its own
 * deadline; MOVED and ASK followed, TRYAGAIN and CLUSTERDOWN retried on a
 * short timer, a forgotten script or library sent again as EVAL, a node
 * still connecting waited for (polled).  Whatever happens, the check is
 * answered exactly once and its request never touched afterwards.  It uses
 * the nodes (cluster_nodes.h) and the slot map; neither calls into it.
 */
#ifndef RL_CLUSTER_OP_H
#define RL_CLUSTER_OP_H

#include <stddef.h>

#include "backend.h"
#include "cluster_nodes.h"
#include "redis_conn.h"
#include "script.h"

struct cop;
struct event_base;

/* The checks of one worker's Cluster backend. */
struct cops {
    struct event_base *evb;
    struct cluster_map *map;
    struct cnodes *nodes;
    unsigned max_pending; /* checks outstanding per node at most */
    /* Checks of this event-loop pass, sent in one script call per hash slot
     * (Redis runs a script only on keys of one slot). */
    struct rconn_queue queue;
    struct rl_script_call call; /* scratch argv, reused */
    const struct rl_check_req **reqs;
    struct cop *live; /* every check not freed yet */
};

void cops_init(struct cops *o, struct event_base *evb, struct cluster_map *map,
               struct cnodes *nodes, unsigned max_pending, size_t coalesce);
/* A check for `slot` the router accepted: queued for this pass's flush (one
 * call per slot), under its deadline; answered exactly once from then on. */
void cop_start(struct cops *o, const struct rl_check_req *req, rl_check_cb cb, void *arg,
               int slot);
/* Shutdown, after cnodes_close (which answered the checks in flight): the
 * checks still waiting (for a node, a retry) are answered DOWN and every
 * one freed. */
void cops_close(struct cops *o);

#endif
