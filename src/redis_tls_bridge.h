/*
 * redis_tls_bridge.h — one Redis connection over TLS (redis_tls.h has the
 * whole picture).  Each is a bridge: hiredis keeps its async context and its
 * libevent adapter, but the socket under it is one end of a socketpair; the
 * other end is shuttled, byte for byte, to a libevent OpenSSL bufferevent
 * connected to the real server.  Batching, NOSCRIPT handling, timeouts and
 * stall detection above it see plain RESP and do not change.
 *
 * The bridge lives exactly as long as its hiredis context: hiredis frees it
 * (through the adapter's cleanup) whenever it frees the context; a TLS
 * failure closes the socketpair, which hiredis sees as the server closing.
 */
#ifndef RL_REDIS_TLS_BRIDGE_H
#define RL_REDIS_TLS_BRIDGE_H

#include <hiredis/async.h>

struct event_base;

/*
 * *out: a hiredis context whose socket is a new bridge to ip:port over TLS,
 * attached to evb; the certificate is verified as redis.tls.server_name, or
 * else as `host` (the name or address ip was reached by).  Returns NULL, or
 * why it could not be made (static text).
 */
const char *rtls_bridge_connect(struct event_base *evb, const char *host, const char *ip,
                                int port, redisAsyncContext **out);

#endif
