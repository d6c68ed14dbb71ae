/*
 * cluster_slots.h — the Redis Cluster slot map and what names slots, apart
 * from the per-check router (backend_cluster.c): the key hash (CRC16 of the
 * hash tag), MOVED/ASK redirections, and the map slot -> owner loaded from
 * CLUSTER SLOTS.  The owners are the router's nodes; this file only names
 * them by host and port.
 */
#ifndef RL_CLUSTER_SLOTS_H
#define RL_CLUSTER_SLOTS_H

#include <stddef.h>

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

struct cluster_map {
    void *owner[CLUSTER_SLOTS];     /* the router's node, NULL: uncovered */
    int loaded;
    int covered;                    /* slots with an owner */
};

/* The router's node at host:port, made when new. */
typedef void *(*cluster_node_fn)(void *arg, const char *host, int port);

/*
 * Apply a CLUSTER SLOTS reply from the node at from_host: [[start, end,
 * [host, port, id, ...], replicas...], ...].  A NULL or empty host means
 * from_host, "?" an endpoint the cluster does not know (those slots stay
 * uncovered).  RL_ERR and a static *why: not applied (an error or a
 * malformed reply), or applied (*applied) but not every slot covered.
 * *changed: some slot has another owner than before.
 */
int cluster_map_apply(struct cluster_map *m, const redisReply *r, const char *from_host,
                      cluster_node_fn node, void *arg, int *applied, int *changed,
                      const char **why);

#endif
