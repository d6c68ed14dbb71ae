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
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>

#include "backend.h"
#include "cluster_slots.h"
#include "config.h"
#include "cluster_op.h"
#include "log.h"
#include "redis_url.h"
#include "util.h"

/* ---- nodes ------------------------------------------------------------------- */

static void
schedule_tidy(struct cluster *cl)
{
    static const struct timeval zero = {0, 0};

    if (!cl->destroying && !evtimer_pending(cl->tidy_ev, NULL))
        evtimer_add(cl->tidy_ev, &zero);
}

/* After a callback: a node nobody needs any more goes at the next tidy. */
void
cnode_settle(struct cnode *n)
{
    if (!n->master && n->c.pending == 0 && n->refs == 0)
        schedule_tidy(n->cl);
}

void
cnode_unref(struct cnode *n)
{
    n->refs--;
    cnode_settle(n);
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
        cluster_map_refresh(&n->cl->map); /* a failover moves masters */
    cnode_settle(n);
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
struct cnode *
cnode_get(struct cluster *cl, const char *host, int port)
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
            .evb = cl->evb,
            .dns = &cl->dns,
            .host = n->host,
            .port = port,
            .name = n->name,
            .what = "redis cluster node",
            .field = "node",
            .login = {cl->username, cl->password, 0, RCONN_ROLE_NONE},
            .connect_timeout_ms = cl->connect_timeout_ms,
            .max_pending = cl->max_pending,
            .heartbeat = 1,
            .hooks = &node_hooks,
            .owner = n,
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

/* A node a check may wait for: a connection being made (the first one, a
 * new owner named by MOVED, ASK or a new map, or a reconnect attempt under
 * way).  One known down (between attempts) answers DOWN at once instead, as
 * backend_redis.c: a dead node never queues work. */
bool
cnode_connecting(const struct cnode *n)
{
    return n->c.st.state == RCONN_CONNECTING || n->c.st.state == RCONN_HANDSHAKE;
}

/* No map yet, but one is on its way: a seed connecting, asked, or about to
 * be asked (not after failed refreshes: then the cluster is known down). */
bool
cluster_awaits_map(const struct cluster *cl)
{
    if (cl->map.loaded)
        return false;
    if (cluster_map_coming(&cl->map))
        return true;
    for (const struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (cnode_connecting(n))
            return true;
    return false;
}

/* ---- the slot map's hooks ------------------------------------------------------ */

/* cluster_node_fn */
static void *
map_node(void *arg, const char *host, int port)
{
    return cnode_get(arg, host, port);
}

/* The nodes that own slots are the masters. */
static void
map_applied(void *arg, const char *from, bool changed)
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

static bool
map_master_down(void *arg)
{
    struct cluster *cl = arg;

    for (const struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (n->master && n->c.st.state == RCONN_DOWN)
            return true;
    return false;
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
            if (n->c.st.state == RCONN_READY && n->c.ac != NULL &&
                (!want_master || n->master) && i-- == 0)
                return &n->c;
    }
    return NULL;
}

static void
map_connect_seeds(void *arg)
{
    struct cluster *cl = arg;

    for (size_t i = 0; i < cl->nseeds; i++)
        (void)cnode_get(cl, cl->seeds[i].host, cl->seeds[i].port);
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
cluster_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct cluster *cl = (struct cluster *)be;
    char key[RL_LIMIT_KEY_MAX];
    int klen = backend_limit_key(req, 0, key, sizeof(key));
    struct cnode *n = NULL;
    struct rl_check_res res;
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
    } else if (!cl->map.loaded && !cluster_awaits_map(cl)) {
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
    cop_start(cl, req, cb, arg, slot);
}

static const char *
cluster_not_ready(struct rl_backend *be)
{
    struct cluster *cl = (struct cluster *)be;

    if (!cl->map.loaded)
        return "cluster slot map not loaded";
    if (cl->map.covered < CLUSTER_SLOTS)
        return "not every cluster slot has a master";
    for (struct cnode *n = cl->nodes; n != NULL; n = n->next)
        if (n->master && n->c.st.state != RCONN_READY)
            return "a cluster master is not connected";
    return NULL;
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
cluster_create(struct rl_backend **out, struct event_base *evb, const struct rl_config *cfg,
               char **cause)
{
    struct cluster *cl = xcalloc(1, sizeof(*cl));
    struct rl_redis_url url;

    cl->base.ops = &rl_backend_cluster_ops;
    cl->evb = evb;
    cl->connect_timeout_ms = cfg->redis.connect_timeout_ms;
    cl->max_pending = (unsigned)cfg->redis.max_pending;
    cl->tidy_ev = evtimer_new(evb, on_tidy, cl);
    rconn_queue_init(&cl->queue, evb, (size_t)cfg->redis.coalesce, cop_flush, cl);
    cl->reqs = xcalloc((size_t)cfg->redis.coalesce, sizeof(*cl->reqs));
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
            *cause = xasprintf("redis.cluster[%zu]: must be \"host:port\" or \"[v6]:port\"",
                               i);
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
        cop_free(op);
    }
    /* 3. The nodes, nobody refers to them any more. */
    while ((n = cl->nodes) != NULL) {
        cl->nodes = n->next;
        node_free(n);
    }
    cluster_map_close(&cl->map);
    if (cl->tidy_ev != NULL)
        event_free(cl->tidy_ev);
    rconn_queue_free(&cl->queue);
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
    .not_ready = cluster_not_ready,
};
