/*
 * rl.h — the conventions every module shares.
 *
 * Errors: four shapes, and the signature says which.
 *
 * 1. An operation that can fail returns RL_OK or RL_ERR (marked RL_WUR); when
 *    a person will read why, the reason travels out through a `char **cause`
 *    the callee allocates and the caller frees.
 * 2. A lookup that may find nothing returns bool (found or not) or a pointer
 *    (NULL: none), never RL_ERR: "not there" is an answer, not a failure.  A
 *    predicate is a bool.  Asking what is wrong is a lookup too: `const char *`
 *    static text naming the problem, NULL when there is none
 *    (rconn_unusable, script_reply_problem, the backends' not_ready).  That
 *    is the shape where the reason is one of a few fixed texts kept past the
 *    call without an owner (a connection's down_reason, a check's res.error),
 *    on paths where allocating a cause per call would cost (a reply, a
 *    request, a reconnect attempt).
 * 3. Loading a configuration is the one collector: every problem of a file is
 *    added to a struct rl_errors (schema.h) so `-t` reports them all at once.
 * 4. An incremental reader, fed as bytes or replies arrive, returns enum
 *    rl_parse: RL_PARSE_MORE (not complete: call again with more),
 *    RL_PARSE_DONE or RL_PARSE_ERR, and on RL_PARSE_ERR says why through an
 *    out-parameter, as static text (http_parse.h: with the status to answer).
 *    Why a fourth: "not yet" is neither success nor failure, and a reader
 *    runs on every request, so it never allocates.
 *
 * Layers.  A header includes only headers of lower layers, and only what its
 * own declarations need (a forward declaration where a pointer is enough); a
 * .c file includes its layer or lower.  scripts/include-graph --check reads
 * the lines below.  A .c file is in its header's layer, the generated
 * lua_scripts.c too (one without a header of its own, as backend_memory.c,
 * in that of its name's first word: backend.h).  No .c file is listed but
 * main.c: not an exception, the program, which nothing includes, so has no
 * header; it alone is the top.
 *
 *   layer 0: rl.h
 *   layer 1: watch.h arena.h ytree.h slab.h bufpool.h tls.h listener.h grpc_head.h rls.pb-c.h ratelimit.pb-c.h health.pb-c.h discovery.pb-c.h rls_conf.pb-c.h util.h keytable.h log.h netaddr.h pathnorm.h redis_url.h body.h http_parse.h notify.h period.h lua_scripts.h redis_reply.h redis_ev.h sketch.h query.h
 *   layer 2: schema.h algo.h lease.h reservation.h
 *   layer 3: policy.h policy_text.h transport_conf.h
 *   layer 4: config.h rls_rules.h envoy_env.h
 *   layer 5: xds_codec.h identity.h caller_limits.h http.h grpc.h grpc_tls.h redis_conn.h redis_tls.h redis_tls_reload.h redis_tls_bridge.h redis_sentinel.h
 *   layer 6: backend.h cluster_slots.h
 *   layer 7: script.h deny_cache.h response.h metrics.h cluster_nodes.h
 *   layer 8: top.h xds.h hybrid.h pending.h cluster_op.h backend_redis.h
 *   layer 9: check.h rls.h backend_cluster.h
 *   layer 10: worker.h rls_codec.h rls_json.h
 *   layer 11: api.h admin.h admin_view.h debug.h rls_grpc.h
 *   layer 12: daemon.h
 *   layer 13: main.c
 */
#ifndef RL_H
#define RL_H

#include <stddef.h>
#include <stdint.h>

#define RL_OK 0
#define RL_ERR (-1)

/* An incremental reader's answer (Errors, 4 above). */
enum rl_parse { RL_PARSE_MORE = 0, RL_PARSE_DONE, RL_PARSE_ERR };

#define RL_WUR __attribute__((warn_unused_result))
#define RL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RL_NORETURN __attribute__((noreturn))

#define RL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* The struct of `type` whose `member` p points at. */
#define RL_CONTAINER_OF(p, type, member) ((type *)(void *)((char *)(p)-offsetof(type, member)))

/* Limits of the public API (docs/API.md). */
#define RL_KEY_MAX 512  /* bytes of a caller identity */
#define RL_LIMITS_MAX 8 /* limits per policy, decided in one script call */
#define RL_NAME_MAX 64  /* policy names become part of Redis keys */
/* The largest cost a check or a charge may ask for: budgets of tokens or
 * micro-dollars; every count stays below 2^51 (algo.h, ALGO_UNITS_MAX). */
#define RL_COST_MAX 1000000000000000LL
/* A typed identity ("k:" + key; a compound's two such parts) and its
 * escaped form inside a hash tag. */
#define RL_IDENTITY_MAX (2 * (8 + RL_KEY_MAX))
#define RL_REDIS_KEY_MAX (4 + RL_NAME_MAX * 2 + 3 * RL_IDENTITY_MAX)
/* A limit's key: the tag, ":<algorithm tag>:<window ms>" or
 * ":<tag>:<period>[-<week start>]@<zone>" (a zone name of at most 64). */
#define RL_LIMIT_KEY_MAX (RL_REDIS_KEY_MAX + 96)

#endif
