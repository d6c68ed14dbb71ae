/*
 * rls_codec.c — see rls_codec.h.
 *
 * protobuf-c hands strings out NUL-terminated, so a string holding a NUL
 * byte would read shorter than it is, and two descriptor values that differ
 * only after it would count as one.  Its allocator is ours, though: every
 * allocation records its size in front of it, and a string's length is the
 * size protobuf-c asked for, less the terminator it adds (check_rls_codec
 * holds protobuf-c to that).
 */
#include <stdalign.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "rls_codec.h"

/* room before each allocation for its size, keeping the alignment */
#define SIZE_HDR alignof(max_align_t)

const char rls_codec_too_complex[] =
    "the message is too complex to decode (its memory is bounded by rls.max_message)";

struct codec_alloc {
    ProtobufCAllocator pa; /* first: protobuf-c passes &pa back as data */
    struct arena *arena;
    int capped; /* an allocation failed: the arena's cap, not the bytes */
};

static void *
codec_alloc(void *data, size_t n)
{
    struct codec_alloc *ca = data;
    unsigned char *p = arena_alloc(ca->arena, n + SIZE_HDR);

    if (p == NULL) {
        ca->capped = 1;
        return NULL;
    }
    memcpy(p, &n, sizeof(n));
    return p + SIZE_HDR;
}

static void
codec_free(void *data, void *p)
{
    /* the arena goes as a whole */
    (void)data;
    (void)p;
}

static void
codec_init(struct codec_alloc *ca, struct arena *a)
{
    ca->pa.alloc = codec_alloc;
    ca->pa.free = codec_free;
    ca->pa.allocator_data = ca;
    ca->arena = a;
    ca->capped = 0;
}

/* A string protobuf-c decoded, with its length as it came. */
static struct rls_str
wire_str(const char *s)
{
    struct rls_str out = {"", 0};
    size_t n;

    if (s == NULL || s == protobuf_c_empty_string)
        return out; /* absent: the default */
    memcpy(&n, s - SIZE_HDR, sizeof(n));
    out.p = s;
    out.len = n > 0 ? n - 1 : 0;
    return out;
}

/* *out: a message of type d from len bytes, every allocation in a.
 * Returns NULL, or `not_one` when the bytes are not one, or
 * rls_codec_too_complex when it would pass the arena's cap. */
static const char *
unpack(struct arena *a, const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
       const char *not_one, ProtobufCMessage **out)
{
    struct codec_alloc ca;

    codec_init(&ca, a);
    if ((*out = protobuf_c_message_unpack(d, &ca.pa, len, buf)) == NULL)
        return ca.capped ? rls_codec_too_complex : not_one;
    return NULL;
}

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest PbRequest;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor PbDescriptor;

static int
copy_descriptor(struct arena *a, const PbDescriptor *in, struct rls_descriptor *out)
{
    memset(out, 0, sizeof(*out));
    if (in->n_entries > 0) {
        out->entries = arena_alloc(a, in->n_entries * sizeof(*out->entries));
        if (out->entries == NULL)
            return RL_ERR;
    }
    out->nentries = in->n_entries;
    for (size_t i = 0; i < in->n_entries; i++) {
        out->entries[i].key = wire_str(in->entries[i]->key);
        out->entries[i].value = wire_str(in->entries[i]->value);
    }
    if (in->limit != NULL) {
        out->has_limit = 1;
        out->limit_requests_per_unit = in->limit->requests_per_unit;
        out->limit_unit = (enum rls_unit)in->limit->unit;
    }
    if (in->hits_addend != NULL) {
        out->has_hits_addend = 1;
        out->hits_addend = in->hits_addend->value;
    }
    return RL_OK;
}

const char *
rls_codec_decode_request(struct arena *a, const uint8_t *buf, size_t len,
                         struct rls_request *req)
{
    ProtobufCMessage *pm;
    const char *why = unpack(a, &envoy__service__ratelimit__v3__rate_limit_request__descriptor,
                             buf, len, "the message is not a RateLimitRequest", &pm);
    const PbRequest *m = (const PbRequest *)pm;

    memset(req, 0, sizeof(*req));
    if (why != NULL)
        return why;
    req->domain = wire_str(m->domain);
    req->hits_addend = m->hits_addend;
    if (m->n_descriptors > 0 && (req->descriptors = arena_alloc(
                                     a, m->n_descriptors * sizeof(*req->descriptors))) == NULL)
        return rls_codec_too_complex;
    req->ndescriptors = m->n_descriptors;
    for (size_t i = 0; i < m->n_descriptors; i++)
        if (copy_descriptor(a, m->descriptors[i], &req->descriptors[i]) != RL_OK)
            return rls_codec_too_complex;
    return NULL;
}

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse PbResponse;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus PbStatus;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit PbLimit;
typedef Envoy__Config__Core__V3__HeaderValue PbHeader;
typedef Google__Protobuf__Duration PbDuration;

/* One DescriptorStatus with its limit and duration, in one allocation. */
struct status_block {
    PbStatus st;
    PbLimit limit;
    PbDuration until;
};

static void
fill_status(struct status_block *b, const struct rls_status *s)
{
    envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&b->st);
    b->st.code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)s->code;
    b->st.limit_remaining = s->limit_remaining;
    if (s->has_limit) {
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&b->limit);
        b->limit.requests_per_unit = s->requests_per_unit;
        b->limit.unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
                            s->unit;
        /* protobuf-c's strings are not const; packing only reads them */
        if (s->name != NULL)
            b->limit.name = (char *)(uintptr_t)s->name;
        b->st.current_limit = &b->limit;
    }
    if (s->until_reset_ms >= 0) {
        google__protobuf__duration__init(&b->until);
        b->until.seconds = s->until_reset_ms / 1000;
        b->until.nanos = (int32_t)(s->until_reset_ms % 1000) * 1000000;
        b->st.duration_until_reset = &b->until;
    }
}

const uint8_t *
rls_codec_encode_response(struct arena *a, const struct rls_response *resp, size_t *len)
{
    PbResponse m = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    PbStatus **statuses = NULL;
    PbHeader **headers = NULL, *hv = NULL;
    struct status_block *blocks = NULL;
    uint8_t *out;
    size_t n;

    m.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)
                         resp->overall_code;
    if (resp->nstatuses > 0) {
        statuses = arena_alloc(a, resp->nstatuses * sizeof(*statuses));
        blocks = arena_alloc(a, resp->nstatuses * sizeof(*blocks));
        if (statuses == NULL || blocks == NULL)
            return NULL;
    }
    for (size_t i = 0; i < resp->nstatuses; i++) {
        fill_status(&blocks[i], &resp->statuses[i]);
        statuses[i] = &blocks[i].st;
    }
    m.n_statuses = resp->nstatuses;
    m.statuses = statuses;
    if (resp->nheaders > 0) {
        headers = arena_alloc(a, resp->nheaders * sizeof(*headers));
        hv = arena_alloc(a, resp->nheaders * sizeof(*hv));
        if (headers == NULL || hv == NULL)
            return NULL;
    }
    for (size_t i = 0; i < resp->nheaders; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)(uintptr_t)resp->headers[i].name;
        hv[i].value = resp->headers[i].value;
        headers[i] = &hv[i];
    }
    m.n_response_headers_to_add = resp->nheaders;
    m.response_headers_to_add = headers;
    n = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&m);
    if ((out = arena_alloc(a, n > 0 ? n : 1)) == NULL)
        return NULL;
    *len = envoy__service__ratelimit__v3__rate_limit_response__pack(&m, out);
    return out;
}

const char *
rls_codec_decode_health(struct arena *a, const uint8_t *buf, size_t len,
                        struct rls_str *service)
{
    ProtobufCMessage *pm;
    const char *why = unpack(a, &grpc__health__v1__health_check_request__descriptor, buf, len,
                             "the message is not a HealthCheckRequest", &pm);

    if (why != NULL)
        return why;
    *service = wire_str(((const Grpc__Health__V1__HealthCheckRequest *)pm)->service);
    return NULL;
}

size_t
rls_codec_encode_health(enum rls_serving status, uint8_t *out)
{
    Grpc__Health__V1__HealthCheckResponse m = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    m.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    return grpc__health__v1__health_check_response__pack(&m, out);
}
