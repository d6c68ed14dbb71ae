/*
 * backend_cluster.c — Redis Cluster (redis.cluster seed nodes).
 * Being written; until then a configuration that asks for it is refused at
 * start with a clear error rather than silently talking to one node.
 */
#include "backend.h"
#include "util.h"

static int
cluster_create(struct rl_backend **out, struct event_base *base,
               const struct rl_config *cfg, char **cause)
{
    (void)out;
    (void)base;
    (void)cfg;
    *cause = xstrdup("redis.cluster is not supported by this build");
    return RL_ERR;
}

const struct rl_backend_ops rl_backend_cluster_ops = {
    .name = "redis-cluster",
    .create = cluster_create,
};
