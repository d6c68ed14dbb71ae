/*
 * backend.h — where counts live.  One interface, one file per implementation:
 * backend_redis.c (shared state through a Lua script in one Redis, found
 * directly or through Sentinel), backend_cluster.c (the same over a Redis
 * Cluster, routed by hash slot) and backend_memory.c (in-process, one
 * instance only).  The Redis ones, which run the check script over
 * redis_conn.c's connections, declare themselves in headers of their own
 * (backend_redis.h, backend_cluster.h), above this one: the daemon picks
 * one for a config and hands it to each worker, which knows only this.
 *
 * Each worker thread owns one backend instance bound to its event_base.
 */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "rl.h"

struct event_base;
struct rl_config;
struct rl_policy;

enum rl_backend_status {
    RL_BACKEND_OK = 0,
    RL_BACKEND_DOWN,    /* not connected: answered at once */
    RL_BACKEND_TIMEOUT, /* no answer within redis.timeout */
    RL_BACKEND_ERROR    /* an error reply or a broken answer */
};

/* One check as the backend sees it: a policy's limits for one identity. */
struct rl_check_req {
    const struct rl_policy *policy;
    /* "{<prefix><policy>:<escaped identity>}", or with a policy whose limits
     * have identities of their own "{<prefix><policy>}:<escaped identity>"
     * (identity.h): the key of the block and of the once seq, and of every
     * limit that limit_key does not name */
    const char *key;
    size_t key_len;
    /*
     * NULL, or one entry per limit of the policy: limit i counts under
     * limit_key[i] (limit_key_len[i] bytes) when it is not NULL, under key
     * otherwise.  A limit with an identity of its own has one; so will an
     * Envoy descriptor decided with others all or nothing.  Every key of a
     * check, these too, must share key's Redis Cluster hash slot (one hash
     * tag): the check is one script call, atomic across its limits.
     */
    const char *const *limit_key;
    const size_t *limit_key_len;
    /*
     * > 0 consumes, 0 only asks (inspect), < 0 gives |cost| units back (a
     * reward): always applied, as if forced, whatever the limits say; per
     * algorithm, see docs/ALGORITHMS-CHOOSING.md, "Reset, block and give
     * back".  A forced positive cost is a
     * penalty.
     */
    int64_t cost;
    int64_t timeout_ms;    /* answer by then, whatever happens */
    unsigned flags;        /* RL_CHECK_* */
    uint64_t writer, seq;  /* RL_CHECK_ONCE */
    int limit_index;       /* RL_CHECK_RESET: this limit only; < 0: all */
    int64_t block_ms;      /* RL_CHECK_BLOCK: for this long; 0 lifts it */
    struct rl_lease lease; /* RL_CHECK_LEASE, RL_CHECK_RELEASE */
    int64_t max_delay_ms;  /* RL_CHECK_DELAY: > 0 */
    /* RL_CHECK_RESERVE, RL_CHECK_RSV_SETTLE: the reservation's nonce and
     * its claim, what its id says of it ("<estimate>.<limits hash>",
     * reservation.h), which name its record together; RESERVE: the
     * policy's reservation_ttl; SETTLE: the estimate the claim says */
    struct rl_lease rsv;
    const char *rsv_claim;
    size_t rsv_claim_len;
    int64_t rsv_ttl_ms;
    int64_t rsv_estimate;
};

/* Consume `cost` even when it does not fit (the answer still says whether it
 * did): a hybrid policy's sync reports counts already admitted locally, and
 * they must land whatever the limit says. */
#define RL_CHECK_FORCE 0x1u
/* No deadline once sent: answered by its reply, however late, or by the loss
 * of the connection that carried it (DOWN: it may or may not have run).  A
 * TIMEOUT then means it never reached Redis.  For a caller that must know
 * whether its request ran (a hybrid sync: a timed-out sync resent on the same
 * connection would be counted twice, or more); the backend's stall detection
 * still bounds the wait. */
#define RL_CHECK_SETTLE 0x2u
/* Applied at most once: Redis keeps, for this key and `writer`, the last
 * `seq` it applied (for the policy's longest window), and a check whose seq
 * is not above it only peeks.  A hybrid sync lost with its connection (it
 * may have run) is sent again under the same seq, so it cannot count twice.
 * Redis backends only; a writer's seqs for one key must only grow. */
#define RL_CHECK_ONCE 0x4u
/*
 * Admin operations.  RL_CHECK_RESET deletes the state of limit
 * `limit_index` of the policy, or of every limit when limit_index < 0 (and
 * then the block too).  RL_CHECK_BLOCK blocks the key for `block_ms` ms from
 * now (replacing any block), or lifts the block when block_ms is 0.  A
 * negative cost (give back) may come with them; the order is reset, block,
 * give back.  An admin check is answered like a check of cost 0 made right
 * after it: the state after the operation, consuming nothing.  Not with
 * RL_CHECK_ONCE.
 *
 * The block lives in the backend next to the counts, "<key>:block" (the
 * same hash tag), so every daemon sharing the backend sees it: while it
 * lasts, every check of the key is denied (allowed = 0, blocked_ms > 0) and
 * consumes nothing; a forced one still lands (counts admitted elsewhere,
 * a penalty).
 */
#define RL_CHECK_RESET 0x8u
#define RL_CHECK_BLOCK 0x10u
/*
 * Leases (algo_concurrency.c).  RL_CHECK_LEASE: when the check is allowed
 * (and cost > 0) the policy's concurrency limit holds its slot under `lease`
 * (only the first concurrency limit of a policy holds leases; policy.c
 * allows one).  RL_CHECK_RELEASE: give lease `lease` back, an admin
 * operation of its own (cost 0, no other flag), answered like a check of
 * cost 0 after it, with `released` saying whether the lease was held.
 */
/*
 * A check that does not fit now but would within max_delay_ms (every limit's
 * retry_after_ms at most that, none never fitting, the key not blocked) is
 * reserved: consumed now, as a forced check is (a bucket into debt, GCRA's
 * TAT further out), and answered allowed with delay_ms, the longest of its
 * limits' waits; the caller answers it after that wait.  Token bucket and
 * gcra only (policy.c): their debt says exactly when the next check fits.
 */
#define RL_CHECK_DELAY 0x80u
#define RL_CHECK_LEASE 0x20u
#define RL_CHECK_RELEASE 0x40u
/*
 * A charge (POST /charge): `cost` (>= 0) counted now in every limit, past
 * the limit, during a block too, never denied and nothing of it lost: a
 * bucket's debt and GCRA's TAT carry it whole (up to algo_owed_max, not
 * algo_most_owed), the sliding log forgets no unit; a concurrency limit is
 * not charged.  Answered as a check of cost 0 made right after it: allowed
 * says whether such a check passes, each limit's overdraft what is past it.
 * May come with RL_CHECK_ONCE (a hybrid sync of charged units), with no
 * other flag.
 */
#define RL_CHECK_CHARGE 0x100u
/*
 * Reservations (POST /check with "reserve", POST /settle; reservation.h).
 * RL_CHECK_RESERVE: a check (cost > 0, with no flag but RL_CHECK_LEASE)
 * that, when allowed, also writes its reservation's record,
 * backend_rsv_member, into the key's reservations, backend_rsv_key (the
 * same hash tag): its deadline, rsv_ttl_ms from now, kept for twice that
 * (the records kept that long go when one is taken, so the key holds no
 * more than what was taken within twice the ttl).  RL_CHECK_RSV_SETTLE:
 * settle that reservation at the real `cost` (>= 0, no other flag): when
 * its record is there and its deadline has not passed, the record goes and
 * cost - rsv_estimate is applied to every limit but a concurrency one,
 * more as a charge (RL_CHECK_CHARGE) is, less as a give back is; answered
 * as a charge is (rsv RL_RSV_SETTLED).  Else nothing changes and rsv says
 * why (RL_RSV_UNKNOWN, RL_RSV_EXPIRED: the record of an expired one goes).
 */
#define RL_CHECK_RESERVE 0x200u
#define RL_CHECK_RSV_SETTLE 0x400u
/*
 * A check of cost 0 (an inspect, no other flag) that also reads the key's
 * open reservations (backend_rsv_key: those whose deadline has not
 * passed): their number (rsv_open) and, the soonest to end first, the
 * estimate and the time left of at most RL_RSV_LIST_MAX of them, never
 * their nonce (which would settle them).
 */
#define RL_CHECK_RSV_LIST 0x800u
#define RL_RSV_LIST_MAX 100
#define RL_CHECK_ADMIN (RL_CHECK_RESET | RL_CHECK_BLOCK | RL_CHECK_RELEASE)

/* An open reservation as RL_CHECK_RSV_LIST reads it. */
struct rl_rsv_open {
    int64_t estimate;
    int64_t expires_in_ms; /* until its deadline */
};

/* What a settle found (RL_CHECK_RSV_SETTLE). */
enum rl_rsv_result { RL_RSV_SETTLED = 0, RL_RSV_UNKNOWN, RL_RSV_EXPIRED };

struct rl_check_res {
    enum rl_backend_status status;
    const char *error; /* static text for logs when status != OK */
    int allowed;
    /* > 0 while the key is blocked, ms until the block ends: then allowed
     * is 0, nothing was consumed (unless forced), and every limit's
     * retry_after_ms is at least this (or -1: the cost never fits). */
    int64_t blocked_ms;
    int released;     /* RL_CHECK_RELEASE: the lease was held and had not ended */
    int64_t delay_ms; /* RL_CHECK_DELAY: allowed after this wait (0: now) */
    int rsv;          /* RL_CHECK_RSV_SETTLE: enum rl_rsv_result */
    /* RL_CHECK_RSV_LIST: the open reservations, and rsv_nlisted of them in
     * rsv_listed (living as res does) */
    int64_t rsv_open;
    size_t rsv_nlisted;
    const struct rl_rsv_open *rsv_listed;
    size_t nlimits;
    struct rl_limit_result limits[RL_LIMITS_MAX];
};

/*
 * Called exactly once per check, possibly before check() returns (memory),
 * possibly later from the event loop (redis).  `res` lives only during the
 * call.
 */
typedef void (*rl_check_cb)(const struct rl_check_res *res, void *arg);

struct rl_backend;

struct rl_backend_ops {
    const char *name;
    int (*create)(struct rl_backend **out, struct event_base *base,
                  const struct rl_config *cfg, char **cause);
    void (*destroy)(struct rl_backend *be);
    void (*check)(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb,
                  void *arg);
    /* Why checks cannot be answered now (static text), NULL when they can. */
    const char *(*not_ready)(struct rl_backend *be);
};

/* Every implementation starts with this. */
struct rl_backend {
    const struct rl_backend_ops *ops;
    /* Bumped whenever what the backend holds may have been lost (a new
     * connection, a failover): local knowledge of an older epoch is void. */
    uint64_t epoch;
};

extern const struct rl_backend_ops rl_backend_memory_ops;

/* The memory backend's key table: its cap (from the next store created on)
 * and how many entries it holds now; for tests and metrics. */
void backend_memory_set_max_entries(size_t n);
size_t backend_memory_entries(void);

/*
 * The key of limit i of a check: "<req->key>:<algo tag>:<window_ms>" (a
 * period's: "<req->key>:<algo tag>:<period>@<zone>", algo_key_suffix), so
 * that reordering limits or changing a limit's count keeps its state and all
 * keys of one check share the hash tag of req->key.  Written NUL-terminated
 * into buf, its length in *len; RL_ERR when buf is too small.
 */
int backend_limit_key(const struct rl_check_req *req, size_t i, char *buf, size_t size,
                      size_t *len) RL_WUR;
/* The key of a check's block: "<req->key>:block" (the same hash tag).  As
 * above. */
int backend_block_key(const struct rl_check_req *req, char *buf, size_t size,
                      size_t *len) RL_WUR;
/* A key's reservations (RL_CHECK_RESERVE, RL_CHECK_RSV_SETTLE,
 * RL_CHECK_RSV_LIST): "<req->key>:rsv" (the same hash tag), the records of
 * those open and of those past their deadline for another ttl.  As
 * above. */
int backend_rsv_key(const struct rl_check_req *req, char *buf, size_t size,
                    size_t *len) RL_WUR;
/* The record of a reservation in its key's reservations: "<32 hex digits
 * of req->rsv>.<req->rsv_claim>": a settle of another nonce, estimate or
 * limits names another record.  Into buf (RL_RSV_MEMBER_MAX bytes hold
 * any), NUL-terminated; its length. */
#define RL_RSV_MEMBER_MAX (RL_LEASE_HEX + 1 + 64)
size_t backend_rsv_member(const struct rl_check_req *req, char buf[RL_RSV_MEMBER_MAX]);
/* Mark res as the answer for a key blocked for blocked_ms (> 0) more ms:
 * denied, every retry_after_ms at least blocked_ms.  Both backends' way. */
void backend_apply_block(struct rl_check_res *res, int64_t blocked_ms);
/* Mark res, decided as a reservation (RL_CHECK_DELAY), as the answer: allowed
 * after delay_ms, the longest of its limits' retry_after_ms, which become
 * 0.  Both backends' way. */
void backend_apply_delay(struct rl_check_res *res);
/* Whether req is an admin operation (reset, block or give back). */
static inline bool
backend_is_admin(const struct rl_check_req *req)
{
    return (req->flags & RL_CHECK_ADMIN) != 0 || req->cost < 0;
}
/* The key of an RL_CHECK_ONCE check's last applied seq:
 * "<req->key>:once:<writer in hex>" (the same hash tag).  As above. */
int backend_once_key(const struct rl_check_req *req, char *buf, size_t size,
                     size_t *len) RL_WUR;

#endif
