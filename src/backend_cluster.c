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
 *   - one connection per node we talk to (cluster_nodes.c: the masters, and
 *     the seeds until the first map names the masters), a struct rconn
 *     (redis_conn.c) with its own state, handshake, reconnect backoff and
 *     replies owed; a node whose oldest reply is overdue is dropped.  Nodes
 *     that are no longer masters are closed from a zero timer, never inside
 *     their own callback.
 *   - one struct cop per check (cluster_op.c, from the router's queue to
 *     its answer): its deadline timer (req->timeout_ms) and the state of its
 *     redirections.  MOVED updates that slot, asks for a refresh and resends
 *     to the new owner; ASK sends ASKING then the script to the named node
 *     on one connection, the map unchanged; TRYAGAIN and CLUSTERDOWN are
 *     retried a few times on a short timer; NOSCRIPT (or a forgotten
 *     function library) is answered with EVAL once per connection tried.  A
 *     redirection to a node still connecting waits for it (polled) until
 *     the deadline.  Whatever happens, the check is answered exactly once
 *     and its request is never touched afterwards; a late reply is dropped.
 *
 * A check whose master is known down (between reconnect attempts) is
 * answered DOWN at once, as backend_redis does: a dead node never queues
 * work; one whose master is connecting waits for it, under its deadline.
 * Replies lost with a connection are never replayed elsewhere, since the
 * script may have run.
 *
 * This file is the router: it makes the three parts (map, nodes, checks),
 * routes a new check by its slot, and says whether the backend is ready.
 * The calls go one way: router -> checks -> nodes -> map; the map names
 * nodes, and the nodes hear of the map, only through hooks.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cluster.h"
#include "cluster_nodes.h"
#include "cluster_op.h"
#include "cluster_slots.h"
#include "config.h"
#include "util.h"

struct cluster {
    struct rl_backend base;
    struct cluster_map map; /* slot -> master */
    struct cnodes nodes;
    struct cops ops;
};

static void
cluster_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct cluster *cl = (struct cluster *)be;
    char key[RL_LIMIT_KEY_MAX];
    size_t klen;
    bool fits = backend_limit_key(req, 0, key, sizeof(key), &klen) == RL_OK;
    struct cnode *n = NULL;
    struct rl_check_res res;
    int slot = 0;

    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_DOWN;
    if (fits) {
        slot = cluster_key_slot(key, klen);
        n = cl->map.owner[slot];
    }
    /* keys of their own must share the check's slot: one script call */
    for (size_t i = 1; fits && req->limit_key != NULL && i < req->policy->nlimits; i++) {
        char k[RL_LIMIT_KEY_MAX];
        size_t len;

        fits = backend_limit_key(req, i, k, sizeof(k), &len) == RL_OK;
        if (fits && cluster_key_slot(k, len) != slot) {
            res.status = RL_BACKEND_ERROR;
            res.error = "the keys of one check are in different cluster slots";
            cb(&res, arg);
            return;
        }
    }
    if (!fits) {
        res.status = RL_BACKEND_ERROR;
        res.error = "key too long";
    } else if (!cl->map.loaded && !cnodes_map_coming(&cl->nodes)) {
        res.error = "cluster slot map not loaded";
    } else if (!cl->map.loaded) {
        ; /* waits for the map under its deadline */
    } else if (n == NULL) {
        res.error = "cluster slot not covered";
        cluster_map_refresh(&cl->map);
    } else if (n->c.st.state != RCONN_READY && !cnode_connecting(n)) {
        res.error = n->c.st.down_reason ? n->c.st.down_reason : "cluster master not connected";
    }
    if (res.error != NULL) {
        cb(&res, arg);
        return;
    }
    cop_start(&cl->ops, req, cb, arg, slot);
}

static const char *
cluster_not_ready(struct rl_backend *be)
{
    struct cluster *cl = (struct cluster *)be;

    if (!cl->map.loaded)
        return "cluster slot map not loaded";
    if (cl->map.covered < CLUSTER_SLOTS)
        return "not every cluster slot has a master";
    if (!cnodes_masters_ready(&cl->nodes))
        return "a cluster master is not connected";
    return NULL;
}

static int
cluster_create(struct rl_backend **out, struct event_base *evb, const struct rl_config *cfg,
               char **cause)
{
    struct cluster *cl = xcalloc(1, sizeof(*cl));

    cl->base.ops = &rl_backend_cluster_ops;
    if (cnodes_init(&cl->nodes, evb, &cl->map, cfg, cause) != RL_OK) {
        free(cl);
        return RL_ERR;
    }
    cops_init(&cl->ops, evb, &cl->map, &cl->nodes, (unsigned)cfg->redis.max_pending,
              (size_t)cfg->redis.coalesce);
    /* Connect every seed; the first ready one is asked for the map. */
    cluster_map_init(&cl->map, evb, cfg->redis.connect_timeout_ms, &cnodes_map_hooks,
                     &cl->nodes);
    *out = &cl->base;
    return RL_OK;
}

static void
cluster_destroy(struct rl_backend *be)
{
    struct cluster *cl = (struct cluster *)be;

    /* 1. Close every connection: hiredis runs each pending callback once with
     *    NULL, which answers the checks in flight (DOWN) and frees them. */
    cnodes_close(&cl->nodes);
    /* 2. Checks waiting for a node or a retry: answered now. */
    cops_close(&cl->ops);
    /* 3. The nodes, nobody refers to them any more. */
    cnodes_free(&cl->nodes);
    cluster_map_close(&cl->map);
    free(cl);
}

const struct rl_backend_ops rl_backend_cluster_ops = {
    .name = "redis-cluster",
    .create = cluster_create,
    .destroy = cluster_destroy,
    .check = cluster_check,
    .not_ready = cluster_not_ready,
};
