/*
 * redis_tls.h — Redis over TLS for hiredis 0.14, which has no TLS of its own.
 *
 * Each TLS connection is a bridge: hiredis keeps its async context and its
 * libevent adapter, but the socket under it is one end of a socketpair; the
 * other end is shuttled, byte for byte, to a libevent OpenSSL bufferevent
 * connected to the real server.  Batching, NOSCRIPT handling, timeouts and
 * stall detection above it see plain RESP and do not change.
 *
 * The bridge lives exactly as long as its hiredis context: hiredis frees it
 * (through the adapter's cleanup) whenever it frees the context; a TLS
 * failure closes the socketpair, which hiredis sees as the server closing.
 *
 * The settings (CA, client certificate, the name verified) are process-wide
 * and replaced whole by rtls_configure: connections open keep the files they
 * were made with, the next handshake uses the new ones.
 */
#ifndef RL_REDIS_TLS_H
#define RL_REDIS_TLS_H

#include <stdbool.h>

#include <hiredis/async.h>

#include "rl.h"

struct rl_redis_conf;

struct event_base;

/*
 * Load the files `r->tls` names (and decide the name verified) into new
 * settings and swap them in.  On RL_ERR the running settings stay and *cause
 * says why (caller frees).  TLS off (neither rediss:// nor tls.enabled)
 * turns it off for connections opened after this.
 */
int rtls_configure(const struct rl_redis_conf *r, char **cause) RL_WUR;

/* Whether new Redis connections go over TLS. */
bool rtls_enabled(void);

/*
 * Like rtls_configure, but first a TLS handshake (and a PING) with the new
 * settings to a server `r` names, when they differ from the running ones:
 * on RL_ERR the running settings stay and *cause says why.  For SIGHUP,
 * whose open connections stay on the old settings until they end.
 */
int rtls_reconfigure(const struct rl_redis_conf *r, char **cause) RL_WUR;

/*
 * What rtls_configure would do, without swapping anything in: when TLS is
 * on, whether the files load (CA, certificate, its key): RL_ERR and *cause
 * naming the field and the file when not; a warning for each file holding
 * an expired certificate.  For ratelimitd -t.
 */
int rtls_check(const struct rl_redis_conf *r, char **cause) RL_WUR;

/*
 * *out: a hiredis context whose socket is a new bridge to ip:port over TLS,
 * attached to evb; the certificate is verified as redis.tls.server_name, or
 * else as `host` (the name or address ip was reached by).  Returns NULL, or
 * why it could not be made (static text).
 */
const char *rtls_connect(struct event_base *evb, const char *host, const char *ip, int port,
                         redisAsyncContext **out);

/* Forget the settings (process exit: keeps leak checkers quiet). */
void rtls_shutdown(void);

#endif
