/*
 * rls_codec_diff.c — see rls_codec_diff.h.
 *
 * protobuf-c hands strings out NUL-terminated: the allocator given to its
 * unpack records each size in front of the block, so a string's length is
 * its size less the terminator, NULs inside included (as rls_codec.c once
 * read them itself).
 */
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "arena.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "rls_codec.h"
#include "rls_codec_diff.h"

#define DIFF_HDR alignof(max_align_t)

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest DiffRequest;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor DiffDescriptor;

static void *
diff_alloc(void *data, size_t n)
{
    unsigned char *p = malloc(n + DIFF_HDR);

    (void)data;
    if (p == NULL)
        return NULL;
    memcpy(p, &n, sizeof(n));
    return p + DIFF_HDR;
}

static void
diff_free(void *data, void *p)
{
    (void)data;
    if (p != NULL)
        free((unsigned char *)p - DIFF_HDR);
}

static int
diff_str_is(const char *pb, struct rls_str ours)
{
    size_t n = 0;

    if (pb != NULL && pb != protobuf_c_empty_string) {
        memcpy(&n, pb - DIFF_HDR, sizeof(n));
        n = n > 0 ? n - 1 : 0;
    }
    return ours.p != NULL && ours.len == n && (n == 0 || memcmp(pb, ours.p, n) == 0);
}

static const char *
diff_descriptor(const DiffDescriptor *pd, const struct rls_descriptor *d)
{
    if (pd->n_entries != d->nentries)
        return "descriptors[].entries: another count";
    for (size_t i = 0; i < d->nentries; i++) {
        if (!diff_str_is(pd->entries[i]->key, d->entries[i].key))
            return "descriptors[].entries[].key differs";
        if (!diff_str_is(pd->entries[i]->value, d->entries[i].value))
            return "descriptors[].entries[].value differs";
    }
    if ((pd->limit != NULL) != (d->has_limit != 0))
        return "descriptors[].limit: present in one only";
    if (pd->limit != NULL && (pd->limit->requests_per_unit != d->limit_requests_per_unit ||
                              (int)pd->limit->unit != (int)d->limit_unit))
        return "descriptors[].limit differs";
    if ((pd->hits_addend != NULL) != (d->has_hits_addend != 0))
        return "descriptors[].hits_addend: present in one only";
    if (pd->hits_addend != NULL && pd->hits_addend->value != d->hits_addend)
        return "descriptors[].hits_addend differs";
    return NULL;
}

const char *
rls_codec_diff(const uint8_t *buf, size_t len, int *taken)
{
    ProtobufCAllocator pa = {diff_alloc, diff_free, NULL};
    DiffRequest *m = envoy__service__ratelimit__v3__rate_limit_request__unpack(&pa, len, buf);
    struct rls_request req;
    const char *diff = NULL;
    struct arena a;
    int rc;

    arena_init(&a, 0, 0);
    rc = rls_codec_decode_request(&a, buf, len, &req) == NULL ? RL_OK : RL_ERR;
    *taken = m != NULL && rc == RL_OK;
    if (m == NULL || rc != RL_OK) {
        if (m != NULL)
            diff = "protobuf-c accepts what rls_codec refuses";
        else if (rc == RL_OK)
            diff = "rls_codec accepts what protobuf-c refuses";
    } else if (!diff_str_is(m->domain, req.domain)) {
        diff = "domain differs";
    } else if (m->hits_addend != req.hits_addend) {
        diff = "hits_addend differs";
    } else if (m->n_descriptors != req.ndescriptors) {
        diff = "descriptors: another count";
    } else {
        for (size_t i = 0; i < req.ndescriptors && diff == NULL; i++)
            diff = diff_descriptor(m->descriptors[i], &req.descriptors[i]);
    }
    if (m != NULL)
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m, &pa);
    arena_free(&a);
    return diff;
}

/* ---- the RateLimitResponse: protobuf-c's pack of the same fields ---------- */

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse DiffResponse;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus DiffStatus;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit DiffLimit;
typedef Envoy__Config__Core__V3__HeaderValue DiffHeader;
typedef Google__Protobuf__Duration DiffDuration;

/* One DescriptorStatus with its limit and duration. */
struct diff_status {
    DiffStatus st;
    DiffLimit limit;
    DiffDuration until;
};

/* What rls_codec.c filled in for protobuf-c before it wrote the answer
 * itself (every field as struct rls_status says it, uint32s held at
 * RLS_WIRE_MAX). */
static void
diff_fill_status(struct diff_status *b, const struct rls_status *s)
{
    envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&b->st);
    b->st.code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)s->code;
    b->st.limit_remaining = s->limit_remaining > RLS_WIRE_MAX ? RLS_WIRE_MAX
                                                              : (uint32_t)s->limit_remaining;
    if (s->has_limit) {
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&b->limit);
        b->limit.requests_per_unit = s->requests_per_unit > RLS_WIRE_MAX
                                         ? RLS_WIRE_MAX
                                         : (uint32_t)s->requests_per_unit;
        b->limit.unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
                            s->unit;
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

const char *
rls_codec_diff_response(const struct rls_response *resp)
{
    DiffResponse m = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    struct diff_status *blocks = calloc(resp->nstatuses + 1, sizeof(*blocks));
    DiffStatus **statuses = calloc(resp->nstatuses + 1, sizeof(*statuses));
    DiffHeader hv[RLS_HEADERS_MAX], *headers[RLS_HEADERS_MAX];
    size_t want, size = rls_codec_response_size(resp), n;
    struct rls_codec_plan plan;
    size_t planned = rls_codec_response_plan(resp, &plan);
    uint8_t *pb = NULL, *ours = NULL, *ours_plan = NULL;
    const char *diff = NULL;

    if (blocks == NULL || statuses == NULL)
        abort();
    m.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)resp->overall_code;
    for (size_t i = 0; i < resp->nstatuses; i++) {
        diff_fill_status(&blocks[i], &resp->statuses[i]);
        statuses[i] = &blocks[i].st;
    }
    m.n_statuses = resp->nstatuses;
    m.statuses = statuses;
    for (size_t i = 0; i < resp->nheaders; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)(uintptr_t)resp->headers[i].name;
        hv[i].value = resp->headers[i].value;
        headers[i] = &hv[i];
    }
    m.n_response_headers_to_add = resp->nheaders;
    m.response_headers_to_add = headers;
    want = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&m);
    pb = malloc(want + 1);
    ours = malloc(size + 1);
    ours_plan = malloc(size + 1);
    if (pb == NULL || ours == NULL || ours_plan == NULL)
        abort();
    if (envoy__service__ratelimit__v3__rate_limit_response__pack(&m, pb) != want)
        diff = "protobuf-c's pack and its get_packed_size disagree";
    else if (size != want)
        diff = "rls_codec_response_size is not protobuf-c's size";
    else if ((n = rls_codec_response_write(resp, ours)) != size)
        diff = "rls_codec_response_write wrote another size than it said";
    else if (memcmp(pb, ours, n) != 0)
        diff = "the bytes differ";
    else if (planned != size)
        diff = "rls_codec_response_plan is not rls_codec_response_size";
    else if (rls_codec_response_write_plan(resp, &plan, ours_plan) != size)
        diff = "rls_codec_response_write_plan wrote another size than it said";
    else if (memcmp(pb, ours_plan, size) != 0)
        diff = "the bytes written from the plan differ";
    free(pb);
    free(ours);
    free(ours_plan);
    free(statuses);
    free(blocks);
    return diff;
}
