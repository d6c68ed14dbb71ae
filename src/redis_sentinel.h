/*
 * redis_sentinel.h — finding a master through Redis Sentinel, for
 * backend_redis.c: the sentinels are asked in turn for the master's address
 * (SENTINEL get-master-addr-by-name) before every connection, and the one
 * that answered is listened to for +switch-master, so a failover moves the
 * connection at once.  The sentinels are spoken to without AUTH.
 */
#ifndef RL_REDIS_SENTINEL_H
#define RL_REDIS_SENTINEL_H

#include <stdbool.h>

struct event_base;
struct evdns_base;
struct rl_sentinel_conf;
struct rsentinel;

/* The master's address (host as the sentinels gave it, to be resolved), or
 * host NULL and a static reason when no sentinel named it. */
typedef void (*rsentinel_found_cb)(void *arg, const char *host, int port, const char *why);
/* The sentinels switched this master: the connection to the old one must go. */
typedef void (*rsentinel_switch_cb)(void *arg);

/* For the master `conf->master` on the sentinels `conf->nodes` ("host:port",
 * validated by config.c); names are resolved with *dns (made at first use,
 * the caller's to free).  `display` names the master in the log. */
struct rsentinel *rsentinel_new(struct event_base *evb, struct evdns_base **dns,
                                const struct rl_sentinel_conf *conf, const char *display,
                                rsentinel_found_cb found, rsentinel_switch_cb switched,
                                void *arg);
/* Ask the sentinels in turn; `found` runs once, perhaps before this returns. */
void rsentinel_ask(struct rsentinel *s);
/* Give up the question under way (the caller's deadline passed): true when there
 * was one, and `found` will not run for it. */
bool rsentinel_cancel(struct rsentinel *s);
void rsentinel_free(struct rsentinel *s);

#endif
