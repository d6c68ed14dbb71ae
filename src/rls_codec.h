/*
 * rls_codec.h — the messages of the gRPC listener as bytes: a
 * RateLimitRequest into a struct rls_request, a struct rls_response into a
 * RateLimitResponse, and gRPC health checking's two messages.  protobuf-c
 * does the wire format (code generated from src/proto/ at build time) but
 * for the hot ones: the RateLimitRequest, read here straight into
 * src/rls.h's structs, and the RateLimitResponse, written straight from
 * them; every allocation is in the caller's arena.
 */
#ifndef RL_RLS_CODEC_H
#define RL_RLS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "rls.h"

struct arena;

/* *why when decoding stopped at the arena's cap (the message is not wrong,
 * only too costly to decode). */
extern const char rls_codec_too_complex[];

/*
 * Decode `len` bytes of a RateLimitRequest into *req, whose arrays live in
 * `a` until it is released and whose strings point into buf (they keep
 * every byte the message held, a NUL too): both must outlive *req.  It takes
 * and refuses what protobuf-c's unpack does.  Returns NULL, or what is wrong
 * (static text) when the bytes are not a RateLimitRequest, or decoding them
 * would pass the arena's cap (then it is rls_codec_too_complex).
 * req->timeout_ms is left 0 (the transport's to set).
 */
const char *rls_codec_decode_request(struct arena *a, const uint8_t *buf, size_t len,
                                     struct rls_request *req) RL_WUR;

/*
 * The RateLimitResponse `resp` says (only its answer: grpc_status and
 * message are the transport's), the bytes protobuf-c's pack would write:
 * its size, and the message written at out (that many bytes; returns how
 * many it wrote).
 */
size_t rls_codec_response_size(const struct rls_response *resp);
size_t rls_codec_response_write(const struct rls_response *resp, uint8_t *out);

/* One DescriptorStatus's fields as they go on the wire (rls_codec.c's). */
struct rls_codec_status_wire {
    uint64_t code;
    uint32_t requests_per_unit, limit_remaining;
    uint64_t unit;
    size_t name_len;
    uint64_t seconds, nanos;
    size_t limit_len, until_len, len; /* the messages' lengths */
};

/* The statuses' fields measured for the size, kept for the write (each is
 * ~115 instructions to measure; past the first RLS_CODEC_PLAN_STATUSES the
 * write measures them again). */
#define RLS_CODEC_PLAN_STATUSES 8
struct rls_codec_plan {
    size_t nplanned;
    struct rls_codec_status_wire w[RLS_CODEC_PLAN_STATUSES];
};

/*
 * The same as rls_codec_response_size then _write, measuring each status
 * once: the size, with what was measured in *plan; then the message written
 * at out from it (resp unchanged in between).
 */
size_t rls_codec_response_plan(const struct rls_response *resp, struct rls_codec_plan *plan);
size_t rls_codec_response_write_plan(const struct rls_response *resp,
                                     const struct rls_codec_plan *plan, uint8_t *out);
/* The same packed in `a` (*len bytes; released by the caller), or NULL
 * when that would pass the arena's cap. */
const uint8_t *rls_codec_encode_response(struct arena *a, const struct rls_response *resp,
                                         size_t *len);

/* grpc.health.v1.HealthCheckRequest: the service asked about (in a); NULL,
 * or what is wrong (static text). */
const char *rls_codec_decode_health(struct arena *a, const uint8_t *buf, size_t len,
                                    struct rls_str *service) RL_WUR;

/* grpc.health.v1.HealthCheckResponse.ServingStatus */
enum rls_serving { RLS_SERVING_UNKNOWN = 0, RLS_SERVING = 1, RLS_NOT_SERVING = 2 };

/* A HealthCheckResponse with `status`, packed into out (at least
 * RLS_HEALTH_MAX bytes): its size. */
#define RLS_HEALTH_MAX 8
size_t rls_codec_encode_health(enum rls_serving status, uint8_t *out);

#endif
