/*
 * backend_cluster.h — backend.h's interface over a Redis Cluster, routed by
 * hash slot (backend_cluster.c).  Its own header, above backend.h and the
 * router's parts (cluster_op.h, cluster_nodes.h, cluster_slots.h); the
 * daemon, which picks a backend for a config, names it.
 */
#ifndef RL_BACKEND_CLUSTER_H
#define RL_BACKEND_CLUSTER_H

struct rl_backend_ops;

extern const struct rl_backend_ops rl_backend_cluster_ops;

#endif
