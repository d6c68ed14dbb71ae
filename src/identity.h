/*
 * identity.h — who is calling: the identity chain of docs/API.md (first source
 * that yields a value wins), and the Redis key built from it.
 *
 * Identities are typed ("k:" a key from the body or a header, "ip:" an
 * address) so that an API key that looks like an address is not that
 * address, and escaped so that no caller byte can break the key layout.
 *
 * An address identity is the caller's network: the address cut to
 * ipv4_prefix / ipv6_prefix bits, written "ip:2001:db8:1:2::/64" (no
 * "/len" at the full length: "ip:203.0.113.7"), so that the 2^64 addresses
 * one subscriber line or VM holds are one caller.
 *
 * A compound source ("forwarded+body") names a caller by several sources
 * at once, each of which must give a value: "+ip:203.0.113.7+k:alice".  It
 * starts with '+', which no single identity does, and its parts have '%'
 * and '+' escaped (%25, %2B), so no value can pass for two parts.
 */
#ifndef RL_IDENTITY_H
#define RL_IDENTITY_H

/* Forwarding hops read from the right, all of them trusted proxies, past
 * which a chain is too long to read: a 400 naming the header. */
#define RL_FORWARDED_HOPS_MAX 64
/* Lines of one header read (the HTTP layer takes 64 lines in all). */
#define RL_HEADER_LINES_MAX 64

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_cidr_list;
struct rl_identity_chain;

struct rl_ident_input {
    const char *body_key; /* "key" of the body, NULL when absent */
    size_t body_key_len;
    /* the value of a header's first line, by name (case-insensitive), NULL
     * when absent */
    const char *(*header)(void *hctx, const char *name);
    /* every line of a header, first to last: up to `max` of them into vals
     * and lens; returns how many there are */
    size_t (*header_lines)(void *hctx, const char *name, const char **vals, size_t *lens,
                           size_t max);
    void *hctx;
    /* Which header the trusted proxies write: X-Forwarded-For (0) or RFC
     * 7239 Forwarded (1).  Only that one is read; the other may come from
     * the client, passed through untouched, and must not be believed. */
    int forwarded_rfc7239;
    /* an address identity is its network of this many bits; 0: all */
    int ipv4_prefix, ipv6_prefix;
    int peer_family; /* AF_INET, AF_INET6, or 0 (unix socket) */
    uint8_t peer_addr[16];
};

/*
 * Walk the chain.  RL_OK: *len > 0 and `out` holds the first source's
 * identity, typed (not NUL-terminated); *len == 0 when no source gave one.
 * RL_ERR and *error (the caller frees; for a 400, naming the header or
 * field) when a source's input cannot be read - a forwarding chain too long
 * to read, a header value over RL_KEY_MAX, an identity over `size` - never
 * a fall-back to the next source: for a forwarding chain that would be the
 * proxy's own address, one bucket for everyone who pads the header.
 */
int identity_resolve(const struct rl_identity_chain *chain, const struct rl_cidr_list *trusted,
                     const struct rl_ident_input *in, char *out, size_t size, size_t *len,
                     char **error) RL_WUR;

/*
 * The client address a forwarding chain vouches for: walk X-Forwarded-For
 * (or RFC 7239 Forwarded), its lines last to first and each right to left,
 * and stop at the first address that is not a trusted proxy.  Only when the
 * direct peer itself is trusted.  RL_OK with *found false when the chain
 * vouches for nothing; RL_ERR with *error when it is longer than
 * RL_FORWARDED_HOPS_MAX trusted hops.
 */
int identity_forwarded(const struct rl_cidr_list *trusted, const struct rl_ident_input *in,
                       int *family, uint8_t addr[16], bool *found, char **error) RL_WUR;

/*
 * "{<prefix><policy>:<escaped identity>}": the hash tag that every key of
 * one check shares.  With `shared`, "{<prefix><policy>}:<escaped identity>"
 * instead: every caller of the policy in one tag, for a policy whose limits
 * key on identities of their own (all the keys of one check must share a
 * Redis Cluster slot, and a limit keyed by the user alone is the same key
 * whatever address asks).  NUL-terminated in buf and its length in *len;
 * RL_ERR when buf is too small (buf is then untouched).
 */
int identity_key(const char *prefix, const char *policy, const char *id, size_t idlen,
                 bool shared, char *buf, size_t size, size_t *len) RL_WUR;

#endif
