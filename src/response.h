/*
 * response.h — a decision and how it is written: the JSON body and the quota
 * headers of docs/API.md.  Pure functions of the decision, so they are unit tested
 * without a server.
 */
#ifndef RL_RESPONSE_H
#define RL_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "lease.h"
#include "reservation.h"

struct rl_limit;
struct rl_policy;
struct strbuf;

struct rl_decision {
    int status;                     /* 200, 429 or 503 */
    const struct rl_policy *policy; /* NULL: no policy matched */
    int allowed;                    /* what the caller is told */
    int shadow, would_deny;         /* shadow policy and what it would do */
    int degraded;                   /* the backend failed; failure_mode decided */
    int expired;                    /* undecided: the caller's deadline passed first */
    int never_fits;                 /* denied: the cost exceeds the capacity */
    int blocked;                    /* denied: the caller is blocked (admin API) */
    int reset_epoch;                /* X-RateLimit-Reset as a Unix time */
    int has_pk;                     /* the pk parameter is sent: */
    uint64_t pk;                    /* the caller's partition, hashed */
    /* the lease an allowed check took on the policy's concurrency limit
     * (lease.h), NULL: none; lives as long as the decision */
    const char *lease;
    /* the reservation an allowed check with "reserve" took
     * (reservation.h), NULL: none; lives as long as the decision */
    const char *reservation;
    /* POST /settle: settled says whether it was (then the answer is a
     * charge's, charged the difference); not settled: {"settled":false} */
    int settle, settled;
    /* a reservation (max_delay): answered 200 after this many ms; 0: now */
    int64_t delayed_ms;
    size_t binding; /* index of the binding limit */
    /* POST /charge: the answer says "charged" (the units counted) and
     * "overdraft" always; a check's says "overdraft" when it is > 0 */
    int charge;
    int64_t charged;
    int64_t overdraft; /* the binding limit's: units past it */
    /* POST /charge the backend could not take now (pending.h): 202, kept
     * ({"pending":true,...}); or 503, not kept (charges: backlog full) */
    int pending, backlog_full;
    /* Of the binding limit.  limit is what a caller can spend at once (the
     * burst of token_bucket and gcra), so remaining never exceeds it;
     * retry_after_ms is > 0 on every denial. */
    int64_t limit, remaining, reset_ms, retry_after_ms;
    /* The Unix time (us) by which a limit of a calendar period states its
     * window's length (the period that holds it); 0 when no limit has one. */
    int64_t now_us;
    size_t nlimits;
    struct rl_limit_result limits[RL_LIMITS_MAX];
};

/* One RateLimit-Policy value: every limit of a policy (at most
 * RL_LIMITS_MAX items of a name of RL_NAME_MAX bytes, the largest numbers a
 * config allows and pk); tests/unit/check_response.c holds it to that. */
#define RESPONSE_POLICY_MAX 1024
/* Every quota header line of one decision, "Name: value\r\n" each, and
 * X-RateLimit-Lease's (lease.h). */
#define RESPONSE_HEADERS_MAX (2048 + 21 + RL_LEASE_ID_MAX + 27 + RL_RSV_ID_MAX)

/* Fill d from the backend's answer for `policy` (binding limit, top level). */
void response_from_result(struct rl_decision *d, const struct rl_policy *policy,
                          const struct rl_check_res *res);
/* The decision when no policy matched. */
void response_no_policy(struct rl_decision *d);
/* Allowed without counting, because the backend failed (failure_mode open):
 * nlimits stays 0, nothing was counted. */
void response_degraded_open(struct rl_decision *d, const struct rl_policy *policy);

/* The JSON body; returns its length (truncated at size-1, never overflows).
 * Nothing counted (nlimits 0): "limits" holds each limit's configuration
 * only; a 503 (failure_mode closed) is {"error":"backend unavailable",...}
 * with the policy and its limits so. */
size_t response_body(const struct rl_decision *d, char *buf, size_t size);

typedef void (*rl_header_fn)(const char *name, const char *value, void *arg);
/* Every quota header of the decision, in a stable order.  RateLimit-Policy
 * lists every limit of the policy (an item per limit, "<policy>/<i>" when
 * there are several), RateLimit the binding one.  Nothing counted (nlimits
 * 0): RateLimit-Policy alone, and Retry-After: 1 on a 503. */
void response_headers(const struct rl_decision *d, rl_header_fn add, void *arg);
/* The same headers as lines, "Name: value\r\n" each, appended to sb (as an
 * HTTP answer carries them): a policy's constant parts copied from its
 * rendered text (policy_text.h). */
void response_header_lines(const struct rl_decision *d, struct strbuf *sb);

/* Seconds for headers: rounded up; Retry-After is never 0. */
int64_t response_seconds(int64_t ms);

#endif
