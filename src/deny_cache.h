/*
 * deny_cache.h — answer a denied caller locally until its denial must end.
 *
 * When the backend denies a check of cost C with retry_after R, the same
 * check cannot pass before R has elapsed: other instances can only consume
 * more, never less.  Only the same cost is answered (another cost has other
 * numbers), and only while the backend's epoch is the one the denial came
 * from (a reconnect may mean a Redis that lost its keys).  Until then the worker
 * answers 429 itself, so an abusive client costs Redis nothing.  The
 * deadline is taken from when the check was sent, never when the answer
 * came, so the cache can only end a denial early, never late.
 *
 * "Never less" has one exception, the admin API (admin.h): a reset, a
 * reward or an unblock done through another daemon.  This daemon's own
 * actions drop its entries (deny_cache_forget); for the others', a denial
 * of a blocked caller is kept DENY_CACHE_BLOCKED_MS at most, so an unblock
 * reaches every daemon within that, and any other denial until its end.
 *
 * Per worker, no locks; a fixed number of slots, so memory is bounded
 * whatever the number of callers.
 */
#ifndef RL_DENY_CACHE_H
#define RL_DENY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_check_res;

struct rl_deny_cache;

/* How long a denial of a blocked caller (blocked_ms > 0) is answered here
 * at most: an abusive blocked caller costs one backend call a second. */
#define DENY_CACHE_BLOCKED_MS 1000

struct rl_deny_cache *deny_cache_new(size_t slots);
void deny_cache_free(struct rl_deny_cache *c);

/*
 * A cached denial for (policy, key) that covers `cost` at now_us: true and
 * *res filled (times shortened by what has elapsed), else false.  The
 * policy is named by its uid (config.h): after a reload a new policy may sit
 * at an old one's address, never under its uid.
 */
bool deny_cache_get(struct rl_deny_cache *c, uint64_t policy_uid, const char *key, size_t klen,
                    int64_t cost, uint64_t epoch, int64_t now_us,
                    struct rl_check_res *res) RL_WUR;

/* The keyed hash the cache files (policy_uid, key) under.  A caller that
 * hashes the key for itself too (check.c, for top.h's tables) computes it
 * once and passes it to the _hashed forms, which are the functions above
 * and below with it given. */
uint64_t deny_cache_hash(uint64_t policy_uid, const char *key, size_t klen);
bool deny_cache_get_hashed(struct rl_deny_cache *c, uint64_t hash, uint64_t policy_uid,
                           const char *key, size_t klen, int64_t cost, uint64_t epoch,
                           int64_t now_us, struct rl_check_res *res) RL_WUR;
void deny_cache_put_hashed(struct rl_deny_cache *c, uint64_t hash, uint64_t policy_uid,
                           const char *key, size_t klen, int64_t cost, uint64_t epoch,
                           int64_t sent_us, const struct rl_check_res *res);

void deny_cache_forget_hashed(struct rl_deny_cache *c, uint64_t hash, uint64_t policy_uid,
                              const char *key, size_t klen);

/* Remember a denial the backend gave for a check sent at sent_us. */
void deny_cache_put(struct rl_deny_cache *c, uint64_t policy_uid, const char *key, size_t klen,
                    int64_t cost, uint64_t epoch, int64_t sent_us,
                    const struct rl_check_res *res);

/* The state of (policy, key) was changed behind the cache (the admin API):
 * its cached denial, if any, no longer holds. */
void deny_cache_forget(struct rl_deny_cache *c, uint64_t policy_uid, const char *key,
                       size_t klen);

#endif
