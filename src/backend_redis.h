/*
 * backend_redis.h — backend.h's interface over one Redis server, found
 * directly or through Sentinel (backend_redis.c).  Its own header, above
 * backend.h: it runs the check script (script.h) over a connection of
 * redis_conn.c, which backend.h's users need not know; the daemon, which
 * picks a backend for a config, names it.
 */
#ifndef RL_BACKEND_REDIS_H
#define RL_BACKEND_REDIS_H

struct rl_backend_ops;

extern const struct rl_backend_ops rl_backend_redis_ops;

#endif
