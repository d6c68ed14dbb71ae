/*
 * hybrid.h — a policy with "mode": "hybrid" is decided in the worker from a
 * local view of its counts, and the counts reach Redis asynchronously every
 * sync_interval, so a hot key costs no Redis call on the request path.
 *
 * Per worker, no locks (each worker thread owns its table, like the deny
 * cache).  An entry per check key (the Redis hash tag, which names policy and
 * identity) holds, for every limit of its policy, the last answer Redis gave
 * (the snapshot), and for the whole entry `pending` (cost admitted locally,
 * not sent yet) and `inflight` (sent in a sync, not acknowledged yet).
 *
 * - A known key is allowed iff, for every limit, cost <= the snapshot's
 *   remaining - pending - inflight (a limit whose snapshot has reached its
 *   reset counts as fully available).  A denial consumes nothing.
 * - An unknown key goes to Redis on the exact path; that answer seeds the
 *   entry, so one instance with one worker stays exact.
 * - Every sync_interval each key touched since its last sync is sent as one
 *   backend check of cost `pending` with RL_CHECK_FORCE (the units were
 *   admitted already and must land), or of cost 0 to learn other instances'
 *   counts.  Success replaces the snapshot and clears inflight; after a
 *   failure inflight is sent again next interval, as it was: counts are
 *   never dropped.  Syncs are RL_CHECK_SETTLE (no deadline once sent; one
 *   per key at a time) and RL_CHECK_ONCE (Redis applies a writer's seq for
 *   a key once), so a sync lost with its connection that Redis still runs
 *   beside its resend is counted once: counts are exact.
 * - A blocked answer (blocked_ms > 0, from a sync or the exact path) makes
 *   the local view deny the key, consuming nothing, until the block ends.
 * - An admin operation (reset, block, give back: backend.h) on a hybrid
 *   policy goes to Redis on the exact path like an unknown key, and its
 *   answer replaces this worker's view of the key (hybrid_admin_done).
 *   Every other worker and instance sees it at its next sync of that key:
 *   a key in use is synced once per sync_interval, on a tick of the
 *   shortest interval T, so the first sync sent after the operation goes
 *   within sync_interval + T/2 and its answer brings the block or the reset
 *   state a Redis round trip later (no bound while Redis is unreachable:
 *   the view is degraded then).  Until then that instance decides from its
 *   old view: it may admit up to what that view had left (those units
 *   still land in Redis, forced, after the operation).
 * - Entries idle for two intervals with nothing pending or in flight are
 *   evicted; at most hybrid_table_size entries, a new key past that stays on
 *   the exact path.
 * - An entry holds a reference to the config its policy lives in.  A reload
 *   retires the old config's entries at once: their pending counts are sent
 *   in the same loop pass, before any check of the new config, and they are
 *   freed when nothing of theirs is pending or in flight.
 */
#ifndef RL_HYBRID_H
#define RL_HYBRID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_backend;
struct rl_check_req;
struct rl_check_res;
struct rl_config;
struct rl_metrics;
struct rl_policy;

struct event_base;
struct rl_hybrid;

struct rl_hybrid *hybrid_new(struct event_base *base, struct rl_backend *be,
                             struct rl_metrics *m, size_t max_entries);

/* The config of a check about to start: the first call with a new one
 * retires the old one's entries (their pending counts are sent at once). */
void hybrid_use_config(struct rl_hybrid *h, struct rl_config *cfg);

/* The clock every time in the table is read from (now_monotonic_us unless a
 * test drives it); sent_us below is of the same clock. */
void hybrid_set_clock(struct rl_hybrid *h, int64_t (*now_us)(void));

/*
 * Decide a check of `cost` for (policy, key) under cfg from the local view:
 * true and *res filled (*degraded set when the key's last sync failed or
 * is overdue: the view may be stale), or false when the key is unknown (ask
 * the backend, then hybrid_seed with its answer).  charge: a charge
 * (RL_CHECK_CHARGE): cost joins what is pending whatever the view says, *res
 * is the view of a check of cost 0 after it, and the sync that carries it
 * is a charge too (Redis keeps every unit).
 */
bool hybrid_decide(struct rl_hybrid *h, struct rl_config *cfg, const struct rl_policy *policy,
                   const char *key, size_t klen, int64_t cost, bool charge,
                   struct rl_check_res *res, int *degraded) RL_WUR;

/* The backend's answer to an exact check sent at sent_us (the table's clock)
 * for a hybrid policy: the key's snapshot from now on. */
void hybrid_seed(struct rl_hybrid *h, struct rl_config *cfg, const struct rl_policy *policy,
                 const char *key, size_t klen, int64_t sent_us,
                 const struct rl_check_res *res);

/*
 * The backend's answer to an admin operation req on a hybrid policy, sent
 * on the exact path at sent_us: it replaces this worker's view of the key
 * (seeding it when unknown); a reset of every limit also drops the units
 * admitted here and not yet sent.
 */
void hybrid_admin_done(struct rl_hybrid *h, struct rl_config *cfg,
                       const struct rl_policy *policy, const char *key, size_t klen,
                       int64_t sent_us, const struct rl_check_req *req,
                       const struct rl_check_res *res);

/*
 * Shutdown, first step: send every pending count now and nothing but pending
 * counts from here on; `idle(arg)` is called whenever the table becomes
 * idle (hybrid_idle) after that.
 */
void hybrid_drain(struct rl_hybrid *h, void (*idle)(void *arg), void *arg);
/* Nothing pending and no sync in flight. */
bool hybrid_idle(const struct rl_hybrid *h);

/*
 * Shutdown, second step, before the backend is destroyed: no more syncs are
 * sent (the backend's answers to those in flight are still taken).
 */
void hybrid_close(struct rl_hybrid *h);
/* After the backend is gone: free everything; counts still pending are
 * logged as lost. */
void hybrid_free(struct rl_hybrid *h);

#endif
