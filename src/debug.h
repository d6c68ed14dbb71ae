/*
 * debug.h — the debug listener (debug_listen; envoyproxy/ratelimit's debug
 * port, DEBUG_HOST:DEBUG_PORT, 6070): read-only text for a person or a
 * script.  GET /rlconfig prints the rule files' limits as
 * envoyproxy/ratelimit prints its loaded configuration, one line a limit,
 * "<domain>.<key_value>...: unit=MINUTE requests_per_unit=60, shadow_mode:
 * false, quota_mode: false", bounded (DEBUG_RLCONFIG_MAX bytes, then one
 * line saying how many were left out); GET / lists the routes as it lists
 * them.  Its Go-only routes (pprof, expvar's /stats) have no counterpart
 * here (docs/envoy.md says why).
 */
#ifndef RL_DEBUG_H
#define RL_DEBUG_H

#include <stddef.h>

struct evbuffer;
struct http_req;
struct rls_rules;

/* /rlconfig's answer stops past this many bytes. */
#define DEBUG_RLCONFIG_MAX (4 * 1024 * 1024)

/* An http_handler; arg is the struct rl_worker that serves the listener. */
void debug_handle(struct http_req *r, void *arg);

/* /rlconfig's text of rules (NULL: none) into out, at most about max
 * bytes, then the line that tells what was left out. */
void debug_rlconfig(struct evbuffer *out, const struct rls_rules *rules, size_t max);

#endif
