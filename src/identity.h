/*
 * identity.h — who is calling: the identity chain of docs/API.md (first source
 * that yields a value wins), and the Redis key built from it.
 *
 * Identities are typed ("k:" a key from the body or a header, "ip:" an
 * address) so that an API key that looks like an address is not that
 * address, and escaped so that no caller byte can break the key layout.
 */
#ifndef RL_IDENTITY_H
#define RL_IDENTITY_H

/* The longest forwarding chain read; a longer one is not believed at all. */
#define RL_FORWARDED_MAX 8192

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_cidr_list;
struct rl_identity_chain;

struct rl_ident_input {
    const char *body_key; /* "key" of the body, NULL when absent */
    size_t body_key_len;
    /* header value by name (case-insensitive), NULL when absent */
    const char *(*header)(void *hctx, const char *name);
    /* every instance of a header joined with ","; its length, 0 when
     * absent, >= size when it did not fit (then buf is unusable) */
    size_t (*header_all)(void *hctx, const char *name, char *buf, size_t size);
    void *hctx;
    /* Which header the trusted proxies write: X-Forwarded-For (0) or RFC
     * 7239 Forwarded (1).  Only that one is read; the other may come from
     * the client, passed through untouched, and must not be believed. */
    int forwarded_rfc7239;
    int peer_family; /* AF_INET, AF_INET6, or 0 (unix socket) */
    uint8_t peer_addr[16];
};

/*
 * Walk the chain; when a source gives an identity that fits in size bytes,
 * true with `out` holding it typed (not NUL-terminated) and *len its length.
 */
bool identity_resolve(const struct rl_identity_chain *chain,
                      const struct rl_cidr_list *trusted, const struct rl_ident_input *in,
                      char *out, size_t size, size_t *len) RL_WUR;

/*
 * The client address a forwarding chain vouches for: walk X-Forwarded-For
 * (or RFC 7239 Forwarded) right to left and stop at the first address that is
 * not a trusted proxy.  Only when the direct peer itself is trusted; false
 * when the chain vouches for nothing.
 */
bool identity_forwarded(const struct rl_cidr_list *trusted, const struct rl_ident_input *in,
                        int *family, uint8_t addr[16]) RL_WUR;

/*
 * "{<prefix><policy>:<escaped identity>}": the hash tag that every key of
 * one check shares, NUL-terminated in buf and its length in *len.  RL_ERR
 * when buf is too small (buf is then untouched).
 */
int identity_key(const char *prefix, const char *policy, const char *id, size_t idlen,
                 char *buf, size_t size, size_t *len) RL_WUR;

#endif
