/*
 * cluster_nodes.h — the Redis Cluster nodes one worker talks to: one
 * connection per node (a struct rconn, redis_conn.c, with its own state,
 * handshake, reconnect backoff and replies owed), made at first use — the
 * seeds, the masters the slot map names, a node a redirection names — and
 * closed from a zero timer once no slot and no check needs it, never inside
 * one of its own callbacks.
 *
 * The slot map (cluster_slots.h) names its owners through the hooks this
 * module gives it (cnodes_map_hooks); the router (backend_cluster.c) and the
 * per-check machine (cluster_op.c) both use the nodes.  This module calls
 * the map's functions and no one else's: nothing it calls calls back into it
 * but through those hooks.
 */
#ifndef RL_CLUSTER_NODES_H
#define RL_CLUSTER_NODES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>

#include "cluster_slots.h"
#include "redis_conn.h"
#include "rl.h"

struct event;
struct event_base;
struct evdns_base;
struct rl_config;
struct cnodes;

struct cnode {
    struct cnodes *set;
    struct cnode *next;
    char *host; /* IP or name, without brackets */
    int port;
    char *name;              /* "host:port" for logs */
    struct rconn c;          /* the connection, its state and replies owed */
    unsigned pending_checks; /* checks in those replies: redis.max_pending counts these */
    unsigned refs;           /* checks waiting for this node */
    bool master;             /* owns slots in the current map */
};

struct cnode_seed {
    char *host;
    int port;
};

/* The nodes of one worker's Cluster backend. */
struct cnodes {
    struct event_base *evb;
    struct cluster_map *map; /* whose owners these nodes are */
    char *username;          /* the login of every node */
    char *password;
    int64_t connect_timeout_ms;
    unsigned max_pending; /* requests outstanding per node at most */
    struct cnode_seed *seeds;
    size_t nseeds;
    struct cnode *list;
    struct evdns_base *dns;
    struct event *tidy_ev; /* zero timer: free the nodes nobody needs */
    unsigned rr;           /* spreads refreshes over nodes */
    bool closing;
};

/*
 * The seeds (redis.cluster) and the login (the URL's credentials, completed
 * or overridden by redis.username / redis.password) of cfg; no node is
 * connected yet: the map asks for the seeds (cnodes_map_hooks).  RL_ERR and
 * *cause (caller frees) when cfg names no usable seed.
 */
int cnodes_init(struct cnodes *s, struct event_base *evb, struct cluster_map *map,
                const struct rl_config *cfg, char **cause) RL_WUR;
/* Shutdown, first step: close every connection; every callback still owed
 * runs now, with NULL.  No tidy is scheduled from here on. */
void cnodes_close(struct cnodes *s);
/* Second step, once no check refers to a node: free them all. */
void cnodes_free(struct cnodes *s);

/* The node at host:port, created and connecting when new. */
struct cnode *cnode_get(struct cnodes *s, const char *host, int port);
/* After a callback: a node nobody needs any more goes at the next tidy. */
void cnode_settle(struct cnode *n);
/* A check stopped waiting for n. */
void cnode_unref(struct cnode *n);
/* A connection being made (the first one, a new owner named by MOVED, ASK
 * or a new map, or a reconnect attempt under way): a check may wait for it.
 * One known down (between attempts) answers DOWN at once instead: a dead
 * node never queues work. */
bool cnode_connecting(const struct cnode *n);
/* No slot map yet, but one is on its way: a seed connecting, asked, or about
 * to be asked (not after failed refreshes: then the cluster is known down). */
bool cnodes_map_coming(const struct cnodes *s);
/* Every node that owns slots has its connection ready. */
bool cnodes_masters_ready(const struct cnodes *s);

/* The map's hooks; their arg is the struct cnodes. */
extern const struct cluster_map_hooks cnodes_map_hooks;

/* The node of a hiredis callback. */
static inline struct cnode *
cnode_of(const redisAsyncContext *ac)
{
    return ((struct rconn *)ac->data)->owner;
}

#endif
