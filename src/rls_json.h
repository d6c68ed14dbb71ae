/*
 * rls_json.h — envoyproxy/ratelimit's HTTP form of ShouldRateLimit (POST
 * /json): a RateLimitRequest as protojson in, a RateLimitResponse as
 * protojson out.  Field names as protojson takes them (camelCase, or the
 * proto's snake_case), enums by name or number, 64-bit numbers also as
 * strings; the answer as protojson writes it: camelCase, enums by name,
 * zero values left out, durations "48s" / "1.500s".
 */
#ifndef RL_RLS_JSON_H
#define RL_RLS_JSON_H

#include <stddef.h>

#include "rl.h"

struct rls_request;
struct rls_response;

/* A decoded request and what its strings live in. */
struct rls_json_request {
    struct rls_request *req;
    void *root; /* the parsed JSON: the strings' bytes */
};

/*
 * Decode body into *out (freed by rls_json_request_free, also on RL_ERR).
 * RL_ERR: the body is no RateLimitRequest; *cause names the field (caller
 * frees).
 */
int rls_json_decode(const char *body, size_t len, struct rls_json_request *out,
                    char **cause) RL_WUR;
void rls_json_request_free(struct rls_json_request *r);

/* The response as protojson text (malloc'd, NUL-terminated); *len its length. */
char *rls_json_encode(const struct rls_response *resp, size_t *len);

/* A duration of ms as protojson writes one: "48s", "0.250s". */
size_t rls_json_duration(char *buf, size_t size, int64_t ms);

#endif
