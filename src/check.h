/*
 * check.h — one POST /check from body to decision, independent of HTTP:
 * parse the body, pick the policy, resolve the identity, ask the backend,
 * apply failure_mode and shadow.
 */
#ifndef RL_CHECK_H
#define RL_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "identity.h"
#include "rl.h"

struct rl_backend;
struct rl_caller_limits;
struct rl_config;
struct rl_decision;
struct rl_deny_cache;
struct rl_hybrid;
struct rl_metrics;
struct rl_pending;
struct rl_policy;
struct rl_top;
struct slab;

/* What a worker lends each check. */
struct rl_check_env {
    struct rl_backend *backend; /* the shared counts */
    struct rl_backend *local;   /* in-process, for failure_mode local */
    struct rl_metrics *metrics; /* the worker's counters */
    struct rl_deny_cache *deny; /* NULL: no local cache of denials */
    struct rl_hybrid *hybrid;   /* NULL: hybrid policies act as exact */
    /* checks' own limits read lately (caller_limits.h); NULL: none kept */
    struct rl_caller_limits *caller_limits;
    struct rl_top *top;      /* NULL: heavy callers not counted (top.h) */
    int64_t (*now_us)(void); /* NULL: now_monotonic_us (tests drive it) */
    struct slab *slab;       /* NULL: malloc; the worker's blocks for per-call state */
    /* The worker's checks that may be held for a policy's max_delay: sent
     * asking for a reservation, or answered with one and waiting; at most
     * the config's max_delayed (past it a check is decided as without
     * max_delay).  NULL: no check is ever held (gRPC, admin). */
    int64_t *delayed;
    /* Charges the backend cannot take now, kept and applied once later
     * (pending.h); NULL: sent to the backend as checks are (memory). */
    struct rl_pending *pending;
    /* The worker's idle check ops (check_ops_new); NULL: malloc'd each. */
    struct rl_check_ops *ops;
};

/*
 * A free list of a worker's check ops: an op (4 KB, its key buffer most of
 * it) is past malloc's per-thread cache, and costs more than twice as much
 * from malloc as from a list.  At most `keep` idle ops are kept; the rest go
 * back to malloc.  One thread's: nothing here takes a lock.
 * check_ops_free: every idle op back to malloc (after the last check).
 */
struct rl_check_ops *check_ops_new(size_t keep);
void check_ops_free(struct rl_check_ops *ops);

struct rl_check_input {
    const char *body;
    size_t body_len;
    /* What the original request was when neither the body nor the
     * X-Original-* / X-Forwarded-* headers say (forward-auth requests):
     * NULL for "/" and "GET". */
    const char *path;
    size_t path_len;
    const char *method;
    struct rl_ident_input ident; /* body_key is filled by check_start */
    /* POST /charge: count the cost now, past the limit too, never denied;
     * answered 200 as a check of cost 0 after it, with "charged" */
    bool charge;
};

/*
 * Called exactly once with the decision; `d` lives only during the call.  A
 * decision with delayed_ms > 0 (a reservation, max_delay) holds one of
 * env->delayed until its caller has answered it after that wait, and gives
 * it back with check_delay_done().
 */
typedef void (*rl_check_done)(const struct rl_decision *d, void *arg);

/* A held check (delayed_ms > 0) was answered: its place in env->delayed is
 * free again. */
void check_delay_done(const struct rl_check_env *env);

/*
 * Start a check under `cfg` (the check takes its own reference).  RL_OK: done
 * will be called, maybe before this returns.  RL_ERR: the request is bad;
 * *status is 400 and *cause says why, naming the field (caller frees).
 */
int check_start(const struct rl_check_env *env, struct rl_config *cfg,
                const struct rl_check_input *in, rl_check_done done, void *arg, int *status,
                char **cause) RL_WUR;

/*
 * The part of check_start after the request is read: decide a check of
 * `cost` for caller `id` under `policy` (a policy of cfg, or one that lives
 * until done is called) the way every check is decided: the hybrid table,
 * the deny cache, the backend, failure_mode and shadow.  count_over: the
 * cost counts past the limit too, as a charge (RL_CHECK_CHARGE: never from
 * the deny cache, counted in ratelimitd_charged_units_total), and the
 * decision is a check of cost 0's right after it, allowed or not:
 * envoyproxy/ratelimit's hits (INCRBY), for rls.c's count_over_limit.  The keys are
 * "{<key_prefix><keyname>:<escaped id>}..." (keyname NULL: the policy's
 * name; id typed, as identity_resolve gives it: "k:alice", "ip:10.0.0.7").
 * The backend answers within timeout_ms when it is below redis.timeout (0:
 * redis.timeout).  top_id: what GET /admin/top counts its caller under
 * (top.h; -1: the policy's metrics id).  RL_OK: done will be called, maybe before this returns;
 * RL_ERR: the key does not fit, *cause says so (caller frees).
 */
int check_start_policy(const struct rl_check_env *env, struct rl_config *cfg,
                       const struct rl_policy *policy, const char *keyname, const char *id,
                       size_t idlen, int64_t cost, bool count_over, int64_t timeout_ms,
                       int top_id, rl_check_done done, void *arg, char **cause) RL_WUR;

/* Called exactly once with a release's answer: status 200 (released: the
 * lease was held and had not ended) or 503 (the backend failed). */
typedef void (*rl_release_done)(int status, bool released, void *arg);

/*
 * POST /release: give back the slot of the lease the body names
 * ({"lease": "..."}, lease.h).  RL_OK: done will be called, maybe before this
 * returns.  RL_ERR: the body is bad (a 400); *error names the field (caller
 * frees).
 */
int check_release(const struct rl_check_env *env, struct rl_config *cfg, const char *body,
                  size_t body_len, rl_release_done done, void *arg, char **error) RL_WUR;

/*
 * POST /settle: settle the reservation the body names ({"reservation":
 * "...", "cost": N}, reservation.h) at the real cost N, through the backend
 * as a charge goes.  done is called once with the decision: settle set,
 * settled when it was (then as a charge's answer, charged the difference
 * from the estimate, < 0 given back), status 503 when the backend failed.
 * RL_OK: done will be called, maybe before this returns.  RL_ERR: the body
 * is bad (a 400); *error names the field (caller frees).
 */
int check_settle(const struct rl_check_env *env, struct rl_config *cfg, const char *body,
                 size_t body_len, rl_check_done done, void *arg, char **error) RL_WUR;

/*
 * A check of `policy` whose limit i counts under keys[i] (lens[i] bytes,
 * made as check_start_policy makes its keys, with identity_key), decided as
 * check_start_policy decides one: in one backend call, so atomically across
 * every key, as a policy's limits are; nothing counted anywhere unless
 * every limit allows.  keys[0] is also the key of a block.  rls.c decides a
 * request's descriptors all or nothing so (on one Redis: a Cluster would
 * refuse keys of several slots).  RL_OK: done will be called, maybe before
 * this returns; RL_ERR: keys[0] does not fit, *cause says so (caller frees).
 */
int check_start_keys(const struct rl_check_env *env, struct rl_config *cfg,
                     const struct rl_policy *policy, const char *const *keys,
                     const size_t *lens, int64_t cost, int64_t timeout_ms, rl_check_done done,
                     void *arg, char **cause) RL_WUR;

/*
 * Count in env->top (top.h, under top_id) the caller of key (klen bytes,
 * made of keyname and policy by identity_key, as check_start_policy makes
 * it) as a check of it would be counted: denied, or allowed with `units`.
 * For a check decided under other keys too (check_start_keys: rls.c's
 * all_or_nothing group), whose caller is each key's.
 */
void check_count_caller(const struct rl_check_env *env, const struct rl_config *cfg,
                        const struct rl_policy *policy, const char *keyname, const char *key,
                        size_t klen, int top_id, bool denied, int64_t units);

/*
 * The keyed hash (keytable.h) a check's key is filed under in the deny
 * cache, and its caller in top.h's tables: the same across reloads (salted
 * by the policy's name, not its uid), so that a caller stays one caller.
 */
uint64_t check_key_hash(const struct rl_policy *policy, const char *key, size_t len);

/*
 * The key a check of caller `id` (typed as identity_resolve gives it:
 * "k:alice", "ip:10.0.0.7") uses under `policy`, and the policy that decides
 * it: the override listing that caller, else policy itself.  NULL when the
 * key does not fit `size`; *klen is its length.
 */
const struct rl_policy *check_key_for(const struct rl_config *cfg,
                                      const struct rl_policy *policy, const char *id,
                                      size_t idlen, char *key, size_t size, size_t *klen);

#endif
