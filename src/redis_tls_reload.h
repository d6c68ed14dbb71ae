/*
 * redis_tls_reload.h — new Redis TLS settings on SIGHUP, tried before they
 * are swapped in (redis_tls.h has the whole picture): a TLS handshake and a
 * PING with them to a server the configuration names, blocking, under
 * connect_timeout, on the main thread (workers go on serving meanwhile).
 */
#ifndef RL_REDIS_TLS_RELOAD_H
#define RL_REDIS_TLS_RELOAD_H

#include "rl.h"

struct rl_redis_conf;

/*
 * Like rtls_configure, but first a TLS handshake (and a PING) with the new
 * settings to a server `r` names, when they differ from the running ones:
 * on RL_ERR the running settings stay and *cause says why.  For SIGHUP,
 * whose open connections stay on the old settings until they end.
 */
int rtls_reload(const struct rl_redis_conf *r, char **cause) RL_WUR;

#endif
