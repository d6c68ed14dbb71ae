/*
 * xds.h — rules over xDS (rls.xds): an aggregated discovery service client,
 * state of the world, on libnghttp2's client session over the daemon's main
 * loop, h2c or TLS with ALPN h2 (mTLS with a certificate).  It asks for
 * every RateLimitConfig resource (xds_codec.h), hands an accepted set to
 * its owner and ACKs it, NACKs a refused one (error_detail naming the
 * resource and the field; nothing changes), and reconnects a lost stream
 * with jittered backoff, 100 ms doubling to 30 s; the rules in force stay
 * as they are meanwhile.
 */
#ifndef RL_XDS_H
#define RL_XDS_H

#include "rl.h"

struct event_base;
struct rl_rls_xds_conf;
struct rls_rules;
struct xds_client;

/* An accepted set: the callee owns rules (one reference), version is the
 * server's version_info (valid during the call). */
typedef void (*xds_rules_cb)(struct rls_rules *rules, const char *version, void *arg);

/* The client, connecting at once; conf is copied.  RL_ERR only for a
 * setting that cannot work (*cause, caller frees). */
int xds_start(struct xds_client **out, struct event_base *base,
              const struct rl_rls_xds_conf *conf, xds_rules_cb cb, void *arg,
              char **cause) RL_WUR;
void xds_stop(struct xds_client *c);

#endif
