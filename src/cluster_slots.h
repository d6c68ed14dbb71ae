/*
 * cluster_slots.h — the Redis Cluster slot map and what names slots, apart
 * from the per-check router (backend_cluster.c): the key hash (CRC16 of the
 * hash tag), MOVED/ASK redirections, and the map slot -> owner loaded from
 * CLUSTER SLOTS.  The owners are the router's nodes; this file only names
 * them by host and port.
 */
#ifndef RL_CLUSTER_SLOTS_H
#define RL_CLUSTER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS 16384
#define CLUSTER_HOST_MAX 256

/* The slot of a key: the CRC16 of its hash tag (the bytes between the first
 * '{' and the next '}', when not empty), else of the whole key. */
int cluster_key_slot(const char *key, size_t len);

/* "MOVED 3999 127.0.0.1:6381" / "ASK ..." -> slot, host, port; an empty host
 * (an endpoint the server does not know) means from_host, the node that
 * answered.  RL_ERR when malformed. */
int cluster_parse_redirect(const char *msg, const char *from_host, int *slot, char *host,
                           size_t hsize, int *port);

struct event;
struct event_base;
struct rconn;

/* The router's node at host:port, made when new. */
typedef void *(*cluster_node_fn)(void *arg, const char *host, int port);

/* What the map needs of the router's nodes. */
struct cluster_map_hooks {
    cluster_node_fn node;
    /* A ready connection to ask CLUSTER SLOTS, masters first, or NULL: then
     * connect the seeds (the first node ready asks, see cluster_map_ready). */
    struct rconn *(*pick)(void *arg);
    void (*connect_seeds)(void *arg);
    /* A reply applied (`changed`: some slot has another owner), from the
     * node named `from`: the owners are the masters now. */
    void (*applied)(void *arg, const char *from, bool changed);
    /* A master is down: the map is asked for often, to find its successor. */
    bool (*master_down)(void *arg);
    /* A CLUSTER SLOTS reply came on c (or its connection ended). */
    void (*replied)(void *arg, struct rconn *c);
};

/*
 * The map, kept fresh: loaded from any node that answers (the seeds at
 * first), refreshed every REFRESH_PERIOD_MS, and whenever the router asks
 * (cluster_map_refresh: a MOVED, a master lost), at most one request out and
 * not more often than a gap that grows while refreshes fail.
 */
struct cluster_map {
    void *owner[CLUSTER_SLOTS]; /* the router's node, NULL: uncovered */
    int loaded;
    int covered; /* slots with an owner */
    /* private */
    const struct cluster_map_hooks *hooks;
    void *arg;
    int64_t timeout_ms;       /* for an answer to CLUSTER SLOTS */
    struct event *refresh_ev; /* start a refresh, or its deadline */
    struct event *period_ev;  /* the periodic refresh (jittered) */
    int want;                 /* a refresh asked for */
    int inflight;
    uintptr_t gen; /* tells a late CLUSTER SLOTS reply */
    int64_t last_us, gap_ms;
    int failing; /* logged once per run of failures */
    int closing;
};

/* Ask for the first map at once (connecting the seeds). */
void cluster_map_init(struct cluster_map *m, struct event_base *evb, int64_t timeout_ms,
                      const struct cluster_map_hooks *hooks, void *arg);
void cluster_map_close(struct cluster_map *m);
/* A refresh soon. */
void cluster_map_refresh(struct cluster_map *m);
/* A node became ready: it may be the one to ask. */
void cluster_map_ready(struct cluster_map *m);
/* A refresh wanted or out (the seeds may then be all there is to ask). */
bool cluster_map_busy(const struct cluster_map *m);
/* No map yet, but one on its way: asked, or about to be, and not failing. */
bool cluster_map_coming(const struct cluster_map *m);

/*
 * Apply a CLUSTER SLOTS reply from the node at from_host: [[start, end,
 * [host, port, id, ...], replicas...], ...].  A NULL or empty host means
 * from_host, "?" an endpoint the cluster does not know (those slots stay
 * uncovered).  Returns NULL when every slot has its master now, else what
 * is wrong (static text, or an error reply's own, which lives as long as r):
 * not applied (an error or a malformed reply), or applied (*applied) but not
 * every slot covered.  *changed: some slot has another owner than before.
 */
const char *cluster_map_apply(struct cluster_map *m, const redisReply *r,
                              const char *from_host, cluster_node_fn node, void *arg,
                              bool *applied, bool *changed);

#endif
