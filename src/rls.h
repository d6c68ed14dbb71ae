/*
 * rls.h — Envoy's rate limit service: one ShouldRateLimit request decided
 * under envoyproxy/ratelimit's rule files (rls.config), independent of how it
 * came: gRPC over HTTP/2 on rls.listen, or protojson on POST /json.  Each
 * transport decodes its bytes into a struct rls_request and encodes the
 * struct rls_response it is given back; the semantics (matching, hits,
 * shadow mode, failure_mode) are all here.  docs/API.md, "Envoy's rate limit
 * service", is the contract.
 *
 * The enums' values are the wire values of envoy.service.ratelimit.v3 and
 * envoy.type.v3, so a codec copies them as they are.  The unit, the byte
 * strings and the entries are rls_rules.h's (the rule files use them too).
 */
#ifndef RL_RLS_H
#define RL_RLS_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"
#include "rls_rules.h"

struct rl_check_env;
struct rl_config;

/* RateLimitResponse.Code */
enum rls_code { RLS_CODE_UNKNOWN = 0, RLS_CODE_OK = 1, RLS_CODE_OVER_LIMIT = 2 };

/* One RateLimitDescriptor. */
struct rls_descriptor {
    struct rls_entry *entries;
    size_t nentries;
    /* limit: RateLimitOverride, the descriptor's own limit (Envoy sends it
     * from dynamic metadata); it wins over the rule file's */
    int has_limit;
    uint64_t limit_requests_per_unit; /* the varint whole: see rls_start's bound */
    enum rls_unit limit_unit;
    /* hits_addend: a UInt64Value that, when present, wins over the
     * request's (present and 0 only asks) */
    int has_hits_addend;
    uint64_t hits_addend;
};

/* One RateLimitRequest. */
struct rls_request {
    struct rls_str domain;
    struct rls_descriptor *descriptors;
    size_t ndescriptors;
    uint32_t hits_addend; /* 0 means 1 */
    /* The transport's deadline for the answer (grpc-timeout), ms from now;
     * 0: none but the daemon's own (redis.timeout). */
    int64_t timeout_ms;
};

/* One DescriptorStatus, in the order of the request's descriptors. */
struct rls_status {
    enum rls_code code;
    /* current_limit: absent when no rule matched the descriptor */
    int has_limit;
    /* exact (up to RL_COST_MAX); a codec writing Envoy's uint32 fields
     * holds them at UINT32_MAX (RLS_WIRE_MAX) */
    uint64_t requests_per_unit;
    enum rls_unit unit;
    const char *name; /* the rule's name, NULL when it has none */
    uint64_t limit_remaining;
    int64_t until_reset_ms; /* duration_until_reset; < 0: absent */
};

/* The largest requests_per_unit or limit_remaining Envoy's uint32 fields
 * hold: a larger number is answered as it (the headers carry it exactly). */
#define RLS_WIRE_MAX UINT32_MAX

/* One response header (response_headers_to_add). */
struct rls_header {
    const char *name;
    char *value; /* owned by the response */
};

/* what response_headers() of response.h gives: X-RateLimit-Limit,
 * -Remaining, -Reset, RateLimit-Policy, RateLimit, Retry-After */
#define RLS_HEADERS_MAX 8

/* One RateLimitResponse; it lives only during the rls_done call. */
struct rls_response {
    /*
     * 0: answered; else the request failed as a whole and a gRPC transport
     * answers this grpc-status (14 UNAVAILABLE: failure_mode closed and no
     * backend; 4 DEADLINE_EXCEEDED: the transport's deadline passed) with
     * `message`, and POST /json the matching HTTP status.
     */
    int grpc_status;
    const char *message;
    enum rls_code overall_code;
    struct rls_status *statuses;
    size_t nstatuses;
    struct rls_header headers[RLS_HEADERS_MAX];
    size_t nheaders;
};

/* Called exactly once per started request, maybe before rls_start returns;
 * `resp` lives only during the call. */
typedef void (*rls_done)(const struct rls_response *resp, void *arg);

/*
 * Decide `req` under cfg's rules (the request takes its own reference to
 * cfg; req and its strings may be freed once rls_start returns).  RL_OK:
 * done will be called.  RL_ERR: the request itself is invalid (an empty
 * domain, no descriptors, an empty entry key, ...): *cause says why, naming
 * the field (caller frees), and a gRPC transport answers INVALID_ARGUMENT,
 * POST /json 400.
 */
int rls_start(const struct rl_check_env *env, struct rl_config *cfg,
              const struct rls_request *req, rls_done done, void *arg, char **cause) RL_WUR;

/*
 * The identity descriptor d of `domain` counts under (shared[i]: the
 * pattern entry i counts under, or NULL; shared NULL: none), into out: "d:",
 * the domain, then each entry's 0x1e, key, 0x1f (0x1c before a pattern) and
 * value, a part's own bytes 0x1c..0x1f written as 0x1d and a digit; past
 * `size` bytes "h:" and the whole's SHA-256 in hex.  Its length.
 */
size_t rls_identity(char *out, size_t size, const struct rls_str *domain,
                    const struct rls_descriptor *d, const struct rls_str *const *shared);

#endif
