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
