/*
 * redis_url.h — `redis://[user:password@]host:port[/db]`, the same as
 * `rediss://` (over TLS: redis_tls.h) and `unix:///path/redis.sock`.  Credentials are kept apart so that the URL can
 * be logged with them masked.
 */
#ifndef RL_REDIS_URL_H
#define RL_REDIS_URL_H

#include "rl.h"

struct rl_redis_url {
    char *host; /* NULL for unix sockets */
    int port;
    char *path;     /* unix socket path, else NULL */
    char *username; /* NULL when none */
    char *password; /* NULL when none */
    int db;
    int tls; /* rediss:// */
};

int redis_url_parse(const char *url, struct rl_redis_url *out, char **cause) RL_WUR;
void redis_url_clear(struct rl_redis_url *u);
/* "redis[s]://host:port/db" or "unix:///path", never with credentials. */
char *redis_url_display(const struct rl_redis_url *u);

/*
 * "host:port" or "[v6]:port", as redis.cluster seeds and sentinel nodes are
 * written: *host (allocated, without brackets) and *port (1..65535).
 * RL_ERR when s is not one (an unbracketed host may hold no ':').
 */
int redis_url_hostport(const char *s, char **host, int *port) RL_WUR;

#endif
