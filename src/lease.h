/*
 * lease.h — the leases of concurrency limits as callers see them: an id
 * drawn at random for each check that may take a slot, and the lease id an
 * allowed check answers, which names the key holding the slot so that any
 * daemon sharing the backend can release it.
 *
 * A lease id is "<id>.<lease_ms>.<key>": the 128-bit id in 32 lower-case hex
 * digits, the limit's lease in ms, and the key base the limit's key is built
 * from (backend_limit_key: "<key>:cc:<lease_ms>") in base64url without
 * padding.  Nothing in it is secret but the id, and the id is what cannot
 * be forged: a release removes the member `id` of the key the lease names,
 * so a lease id pointed at another caller's key, or carrying a guessed id,
 * finds nothing (2^-128 a guess).  Whoever holds a lease id may release it:
 * it is a bearer token, like the slot it stands for.
 */
#ifndef RL_LEASE_H
#define RL_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_lease;
struct strbuf;

/* The longest lease id: id, lease, the key base in base64url, a NUL. */
#define RL_LEASE_ID_MAX (32 + 1 + 20 + 1 + (RL_REDIS_KEY_MAX * 4 + 2) / 3 + 1)

/* A fresh id: 128 bits of the kernel's randomness, never all zero. */
void lease_draw(struct rl_lease *id);
/* The id as the script's member: 32 lower-case hex digits, no NUL. */
void lease_hex(const struct rl_lease *id, char hex[32]);
/*
 * The lease id of `id` for the limit of lease_ms whose key base is key[0..
 * klen), NUL-terminated into buf (RL_LEASE_ID_MAX bytes hold any); RL_ERR
 * when it does not fit.
 */
int lease_id_format(const struct rl_lease *id, int64_t lease_ms, const char *key, size_t klen,
                    char *buf, size_t size) RL_WUR;
/*
 * Read a lease id: its id, lease_ms and key base (decoded into key, `size`
 * bytes, its length in *klen).  false when `s` is not a lease id this
 * daemon could have given (a wrong shape, a key base too long); a lease id
 * of the right shape that names nothing is read, and found to hold nothing.
 */
bool lease_id_parse(const char *s, size_t len, struct rl_lease *id, int64_t *lease_ms,
                    char *key, size_t size, size_t *klen);

/* A key base as a lease id writes it: base64url without padding, into sb.
 * reservation.c's ids write theirs so too. */
void lease_key_encode(struct strbuf *sb, const char *key, size_t klen);
/* Its reverse, canonical only (unused bits zero): false when `s` is not
 * that, or its bytes do not fit `size`; their length in *n. */
bool lease_key_decode(const char *s, size_t len, char *out, size_t size, size_t *n);

#endif
