/*
 * reservation.h — the ids of reservations (POST /check with "reserve",
 * POST /settle) as callers see them.
 *
 * A reservation id is "<nonce>.<estimate>.<limits>.<key>": 128 random bits
 * in 32 lower-case hex digits, the estimate the check took, 12 hex digits
 * of a hash of the limits that took it (reservation_limits_hash: the policy
 * or the override, as any daemon of the same configuration computes it),
 * and the key base in base64url without padding, as a lease id writes it
 * (lease.h).  "<estimate>.<limits>" is its claim: the backend's record of
 * the reservation is named by the key, the nonce and the claim
 * (backend_rsv_key), and a settle is applied only when the record the id
 * names is there.  So an id pointed at another caller's key, a guessed
 * nonce, or a larger estimate finds nothing (2^-128 a guess); whoever holds
 * the id may settle it, once: a bearer token, as a lease is.
 */
#ifndef RL_RESERVATION_H
#define RL_RESERVATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_lease;
struct rl_limit;

/* A claim: an estimate of at most 16 digits, '.', 12 hex digits. */
#define RL_RSV_CLAIM_MAX (16 + 1 + 12 + 1)
/* The longest id: nonce, claim, the key base in base64url, a NUL: 4,400
 * bytes at most (docs/API.md). */
#define RL_RSV_ID_MAX (32 + 1 + RL_RSV_CLAIM_MAX + (RL_REDIS_KEY_MAX * 4 + 2) / 3 + 1)

/* The hash of limits l[0..n) a claim carries: their keys' suffixes, limits
 * and bursts, the same in every process of the same configuration (not
 * algo_limits_hash, which hashes a zone by its address). */
uint64_t reservation_limits_hash(const struct rl_limit *l, size_t n);

/* The claim of an estimate taken under limits of hash h, NUL-terminated into
 * buf (RL_RSV_CLAIM_MAX bytes); its length. */
size_t reservation_claim(int64_t estimate, uint64_t h, char buf[RL_RSV_CLAIM_MAX]);

/* The id of nonce, claim (clen bytes) and key base key[0..klen),
 * NUL-terminated into buf (RL_RSV_ID_MAX bytes hold any); RL_ERR when it
 * does not fit. */
int reservation_id_format(const struct rl_lease *nonce, const char *claim, size_t clen,
                          const char *key, size_t klen, char *buf, size_t size) RL_WUR;

/*
 * Read an id: its nonce, its claim (into claim, its length in *clen), its
 * estimate and limits hash, its key base (into key, `size` bytes, its length
 * in *klen).  false when `s` is not an id this daemon could have given (a
 * wrong shape, an estimate past RL_COST_MAX, a key base too long); an id of
 * the right shape that names nothing is read, and found to hold nothing.
 */
bool reservation_id_parse(const char *s, size_t len, struct rl_lease *nonce,
                          char claim[RL_RSV_CLAIM_MAX], size_t *clen, int64_t *estimate,
                          uint64_t *h, char *key, size_t size, size_t *klen);

#endif
