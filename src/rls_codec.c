/*
 * rls_codec.c — see rls_codec.h.
 *
 * The RateLimitRequest is decoded and the RateLimitResponse encoded by hand
 * (below); the other messages by protobuf-c, which hands strings out NUL-terminated, so a string holding a NUL
 * byte would read shorter than it is, and two descriptor values that differ
 * only after it would count as one.  Its allocator is ours, though: every
 * allocation records its size in front of it, and a string's length is the
 * size protobuf-c asked for, less the terminator it adds (check_rls_codec
 * holds protobuf-c to that).
 */
#include <limits.h>
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

/* ---- RateLimitRequest, by hand ---------------------------------------------- */

/*
 * The request is read straight from the wire into struct rls_request: ten
 * fields in four messages, where protobuf-c's unpack made an object per
 * field and a copy of every string, and a second pass copied them into our
 * structs (~2 200 instructions a call of one descriptor, against ~300).
 * It accepts and refuses what protobuf-c 1.4.1 does, field for field
 * (tests/rls_codec_diff.c compares the two on the same bytes: fuzz/fuzz_rls
 * on every input, check_rls_codec on generated and damaged messages):
 *   - a tag of at most 5 bytes, whose first byte must not say field 0; wire
 *     types 0 (a varint of at most 10 bytes), 1, 2 (a length of at most 5
 *     bytes, up to INT_MAX and within the message) and 5; groups (3, 4), 6
 *     and 7 end it; fields we do not know are skipped;
 *   - a field we know, with a wire type other than its own, ends it;
 *   - a scalar or a string given twice: the last; a repeated field: each in
 *     order; a message field (limit, hits_addend) given twice: the last
 *     whole (protobuf-c "merges" them, but proto3 fields without presence
 *     never merge there: the later message's values win, zeros too);
 *   - a uint32 or an enum from a longer varint: its low 32 bits;
 *   - strings as bytes (no UTF-8 check), with every byte, a NUL too.
 * One pass: a repeated field's array grows twice as large when full (in the
 * arena: a few more bytes, rather than a second walk of every message).
 */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* One field as read. */
struct pb_field {
    uint32_t num;
    unsigned wt;
    uint64_t v;       /* WT_VARINT */
    const uint8_t *p; /* WT_LEN: the bytes */
    size_t len;
};

struct pb_reader {
    const uint8_t *p, *end;
};

/* The next field of r into *f: 1, or 0 at the end, or -1 when the bytes
 * are not a field. */
static int
pb_next(struct pb_reader *r, struct pb_field *f)
{
    const uint8_t *p = r->p;
    size_t rem = (size_t)(r->end - p), i, max;
    uint32_t tag;
    unsigned shift;

    if (rem == 0)
        return 0;
    /* the tag, as protobuf-c's parse_tag_and_wiretype */
    if ((p[0] & 0xf8) == 0)
        return -1;
    f->wt = p[0] & 7;
    tag = (p[0] & 0x7fu) >> 3;
    if ((p[0] & 0x80) == 0) {
        i = 1;
    } else {
        max = rem < 5 ? rem : 5;
        shift = 4;
        for (i = 1; i < max && (p[i] & 0x80); i++, shift += 7)
            tag |= (uint32_t)(p[i] & 0x7f) << shift;
        if (i == max)
            return -1;
        tag |= (uint32_t)p[i] << shift;
        i++;
    }
    f->num = tag;
    p += i;
    rem -= i;
    switch (f->wt) {
    case WT_VARINT:
        max = rem < 10 ? rem : 10;
        f->v = 0;
        for (i = 0; i < max; i++) {
            f->v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
            if ((p[i] & 0x80) == 0)
                break;
        }
        if (i == max)
            return -1;
        p += i + 1;
        break;
    case WT_I64:
    case WT_I32:
        i = f->wt == WT_I64 ? 8 : 4;
        if (rem < i)
            return -1;
        p += i;
        break;
    case WT_LEN: {
        size_t n = 0;
        max = rem < 5 ? rem : 5;
        for (i = 0; i < max; i++) {
            n |= (size_t)(p[i] & 0x7f) << (7 * i);
            if ((p[i] & 0x80) == 0)
                break;
        }
        if (i == max || n > INT_MAX || n > rem - (i + 1))
            return -1;
        f->p = p + i + 1;
        f->len = n;
        p = f->p + n;
        break;
    }
    default: return -1;
    }
    r->p = p;
    return 1;
}

static struct pb_reader
pb_reader(const uint8_t *p, size_t len)
{
    struct pb_reader r = {p, p + len};
    return r;
}

/*
 * The array `old` of n elements of `size` bytes, full at *cap, copied into
 * one twice as large (4 at first) in a; NULL when the arena says no.  The
 * old one stays in the arena until it is released: at most as much again.
 */
static void *
pb_grow(struct arena *a, const void *old, size_t n, size_t *cap, size_t size)
{
    size_t c = *cap > 0 ? *cap * 2 : 4;
    void *p = arena_alloc(a, c * size); /* c <= the message's length: no overflow */

    if (p == NULL)
        return NULL;
    if (n > 0)
        memcpy(p, old, n * size);
    *cap = c;
    return p;
}

static struct rls_str
pb_str(const struct pb_field *f)
{
    struct rls_str s = {"", 0};

    if (f->len > 0) {
        s.p = (const char *)f->p;
        s.len = f->len;
    }
    return s;
}

/* RateLimitDescriptor.Entry: key = 1, value = 2. */
static int
decode_entry(const uint8_t *p, size_t len, struct rls_entry *e)
{
    static const unsigned want[] = {WT_LEN, WT_LEN};
    struct pb_reader r = pb_reader(p, len);
    struct pb_field f;
    int rc;

    e->key = e->value = (struct rls_str){"", 0};
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == 0 || f.num > RL_ARRAY_LEN(want))
            continue;
        if (f.wt != want[f.num - 1])
            return RL_ERR;
        if (f.num == 1)
            e->key = pb_str(&f);
        else
            e->value = pb_str(&f);
    }
    return rc == 0 ? RL_OK : RL_ERR;
}

/* RateLimitOverride {requests_per_unit = 1, unit = 2} into d, or
 * UInt64Value {value = 1} (override 0). */
static int
decode_scalars(const uint8_t *p, size_t len, int override, struct rls_descriptor *d)
{
    struct pb_reader r = pb_reader(p, len);
    struct pb_field f;
    uint32_t nfields = override ? 2 : 1;
    int rc;

    if (override) {
        d->has_limit = 1;
        d->limit_requests_per_unit = 0;
        d->limit_unit = RLS_UNIT_UNKNOWN;
    } else {
        d->has_hits_addend = 1;
        d->hits_addend = 0;
    }
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == 0 || f.num > nfields)
            continue;
        if (f.wt != WT_VARINT)
            return RL_ERR;
        if (!override)
            d->hits_addend = f.v;
        else if (f.num == 1)
            d->limit_requests_per_unit = f.v; /* uint64 here: see rls_start */
        else /* an enum: an int32, any value (rls_start checks it) */
            d->limit_unit = (enum rls_unit)(int32_t)(uint32_t)f.v;
    }
    return rc == 0 ? RL_OK : RL_ERR;
}

/* RateLimitDescriptor: entries = 1, limit = 2, hits_addend = 3.  RL_ERR
 * with *capped when the arena said no. */
static int
decode_descriptor(struct arena *a, const uint8_t *p, size_t len, struct rls_descriptor *d,
                  int *capped)
{
    struct pb_reader r = pb_reader(p, len);
    struct pb_field f;
    size_t cap = 0;
    int rc;

    memset(d, 0, sizeof(*d));
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == 0 || f.num > 3)
            continue;
        if (f.wt != WT_LEN)
            return RL_ERR;
        if (f.num == 1) {
            if (d->nentries == cap && (d->entries = pb_grow(a, d->entries, d->nentries, &cap,
                                                            sizeof(*d->entries))) == NULL) {
                *capped = 1;
                return RL_ERR;
            }
            if (decode_entry(f.p, f.len, &d->entries[d->nentries++]) != RL_OK)
                return RL_ERR;
        } else if (decode_scalars(f.p, f.len, f.num == 2, d) != RL_OK) {
            return RL_ERR;
        }
    }
    return rc == 0 ? RL_OK : RL_ERR;
}

const char *
rls_codec_decode_request(struct arena *a, const uint8_t *buf, size_t len,
                         struct rls_request *req)
{
    /* RateLimitRequest: domain = 1, descriptors = 2, hits_addend = 3 */
    static const unsigned want[] = {WT_LEN, WT_LEN, WT_VARINT};
    struct pb_reader r = pb_reader(buf, len);
    struct pb_field f;
    int capped = 0, rc;
    size_t cap = 0;

    memset(req, 0, sizeof(*req));
    req->domain = (struct rls_str){"", 0};
    while ((rc = pb_next(&r, &f)) > 0) {
        if (f.num == 0 || f.num > RL_ARRAY_LEN(want))
            continue;
        if (f.wt != want[f.num - 1])
            goto bad;
        if (f.num == 1) {
            req->domain = pb_str(&f);
        } else if (f.num == 2) {
            if (req->ndescriptors == cap &&
                (req->descriptors = pb_grow(a, req->descriptors, req->ndescriptors, &cap,
                                            sizeof(*req->descriptors))) == NULL)
                return rls_codec_too_complex;
            if (decode_descriptor(a, f.p, f.len, &req->descriptors[req->ndescriptors++],
                                  &capped) != RL_OK)
                goto bad;
        } else {
            req->hits_addend = (uint32_t)f.v;
        }
    }
    if (rc == 0)
        return NULL;
bad:
    return capped ? rls_codec_too_complex : "the message is not a RateLimitRequest";
}

/* ---- RateLimitResponse, by hand -------------------------------------------- */

/*
 * The answer is written here, byte for byte what protobuf-c 1.4.1's pack
 * writes for the same fields (tests/rls_codec_diff.c holds it to that:
 * check_rls_codec on generated answers, fuzz/fuzz_rls on every one): fields
 * in the order of their numbers; a scalar, an enum or a string that is 0 or
 * empty is left out (proto3, no presence); a message field that is there is
 * written even when empty (a duration of 0 is two bytes); enums and int32
 * that are negative as ten-byte varints.  protobuf-c's pack walked its
 * descriptors field by field, through an object per message we had to fill
 * first (what that cost: docs/BENCHMARKS.md, "Measurements behind the
 * code").
 */

/* A varint's length. */
static size_t
vlen(uint64_t v)
{
    /* 7 bits a byte: (significant bits * 9 + 64) / 64 is their count
     * rounded up, for 1 to 64 bits, without a loop */
    unsigned bits = 64 - (unsigned)__builtin_clzll(v | 1);

    return (bits * 9 + 64) / 64;
}

static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* An enum or an int32 on the wire: a negative one sign-extended to 64 bits. */
static uint64_t
wire_i32(int32_t v)
{
    return (uint64_t)(int64_t)v;
}

static void
status_wire(struct rls_codec_status_wire *w, const struct rls_status *s)
{
    *w = (struct rls_codec_status_wire){0};
    w->code = wire_i32((int32_t)s->code);
    w->limit_remaining = s->limit_remaining > RLS_WIRE_MAX ? RLS_WIRE_MAX
                                                           : (uint32_t)s->limit_remaining;
    w->len = (w->code != 0 ? 1 + vlen(w->code) : 0) +
             (w->limit_remaining != 0 ? 1 + vlen(w->limit_remaining) : 0);
    if (s->has_limit) {
        w->requests_per_unit = s->requests_per_unit > RLS_WIRE_MAX
                                   ? RLS_WIRE_MAX
                                   : (uint32_t)s->requests_per_unit;
        w->unit = wire_i32((int32_t)s->unit);
        w->name_len = s->name != NULL ? strlen(s->name) : 0;
        w->limit_len = (w->requests_per_unit != 0 ? 1 + vlen(w->requests_per_unit) : 0) +
                       (w->unit != 0 ? 1 + vlen(w->unit) : 0) +
                       (w->name_len != 0 ? 1 + vlen(w->name_len) + w->name_len : 0);
        w->len += 1 + vlen(w->limit_len) + w->limit_len;
    }
    if (s->until_reset_ms >= 0) {
        w->seconds = (uint64_t)(s->until_reset_ms / 1000);
        w->nanos = wire_i32((int32_t)(s->until_reset_ms % 1000) * 1000000);
        w->until_len = (w->seconds != 0 ? 1 + vlen(w->seconds) : 0) +
                       (w->nanos != 0 ? 1 + vlen(w->nanos) : 0);
        w->len += 1 + vlen(w->until_len) + w->until_len;
    }
}

static uint8_t *
put_status(uint8_t *p, const struct rls_status *s, const struct rls_codec_status_wire *w)
{
    *p++ = 0x12; /* RateLimitResponse.statuses = 2 */
    p = put_varint(p, w->len);
    if (w->code != 0) {
        *p++ = 0x08; /* code = 1 */
        p = put_varint(p, w->code);
    }
    if (s->has_limit) {
        *p++ = 0x12; /* current_limit = 2 */
        p = put_varint(p, w->limit_len);
        if (w->requests_per_unit != 0) {
            *p++ = 0x08; /* requests_per_unit = 1 */
            p = put_varint(p, w->requests_per_unit);
        }
        if (w->unit != 0) {
            *p++ = 0x10; /* unit = 2 */
            p = put_varint(p, w->unit);
        }
        if (w->name_len != 0) {
            *p++ = 0x1a; /* name = 3 */
            p = put_varint(p, w->name_len);
            memcpy(p, s->name, w->name_len);
            p += w->name_len;
        }
    }
    if (w->limit_remaining != 0) {
        *p++ = 0x18; /* limit_remaining = 3 */
        p = put_varint(p, w->limit_remaining);
    }
    if (s->until_reset_ms >= 0) {
        *p++ = 0x22; /* duration_until_reset = 4 */
        p = put_varint(p, w->until_len);
        if (w->seconds != 0) {
            *p++ = 0x08; /* Duration.seconds = 1 */
            p = put_varint(p, w->seconds);
        }
        if (w->nanos != 0) {
            *p++ = 0x10; /* Duration.nanos = 2 */
            p = put_varint(p, w->nanos);
        }
    }
    return p;
}

/* A string field of HeaderValue: left out when empty. */
static size_t
str_field_len(size_t n)
{
    return n != 0 ? 1 + vlen(n) + n : 0;
}

static uint8_t *
put_str_field(uint8_t *p, uint8_t tag, const char *s, size_t n)
{
    if (n == 0)
        return p;
    *p++ = tag;
    p = put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

size_t
rls_codec_response_plan(const struct rls_response *resp, struct rls_codec_plan *plan)
{
    uint64_t overall = wire_i32((int32_t)resp->overall_code);
    size_t n = overall != 0 ? 1 + vlen(overall) : 0;

    plan->nplanned = 0;
    for (size_t i = 0; i < resp->nstatuses; i++) {
        struct rls_codec_status_wire spare, *w = &spare;

        if (i < RLS_CODEC_PLAN_STATUSES)
            w = &plan->w[plan->nplanned++];
        status_wire(w, &resp->statuses[i]);
        n += 1 + vlen(w->len) + w->len;
    }
    for (size_t i = 0; i < resp->nheaders; i++) {
        const struct rls_header *h = &resp->headers[i];
        size_t len = str_field_len(h->name != NULL ? strlen(h->name) : 0) +
                     str_field_len(h->value != NULL ? strlen(h->value) : 0);
        n += 1 + vlen(len) + len;
    }
    return n;
}

size_t
rls_codec_response_write_plan(const struct rls_response *resp,
                              const struct rls_codec_plan *plan, uint8_t *out)
{
    uint64_t overall = wire_i32((int32_t)resp->overall_code);
    uint8_t *p = out;

    if (overall != 0) {
        *p++ = 0x08; /* overall_code = 1 */
        p = put_varint(p, overall);
    }
    for (size_t i = 0; i < resp->nstatuses; i++) {
        struct rls_codec_status_wire spare;
        const struct rls_codec_status_wire *w = &spare;

        if (plan != NULL && i < plan->nplanned)
            w = &plan->w[i];
        else
            status_wire(&spare, &resp->statuses[i]);
        p = put_status(p, &resp->statuses[i], w);
    }
    for (size_t i = 0; i < resp->nheaders; i++) {
        const struct rls_header *h = &resp->headers[i];
        size_t kn = h->name != NULL ? strlen(h->name) : 0;
        size_t vn = h->value != NULL ? strlen(h->value) : 0;
        *p++ = 0x1a; /* response_headers_to_add = 3 */
        p = put_varint(p, str_field_len(kn) + str_field_len(vn));
        p = put_str_field(p, 0x0a, h->name, kn);  /* HeaderValue.key = 1 */
        p = put_str_field(p, 0x12, h->value, vn); /* HeaderValue.value = 2 */
    }
    return (size_t)(p - out);
}

size_t
rls_codec_response_size(const struct rls_response *resp)
{
    struct rls_codec_plan plan;

    return rls_codec_response_plan(resp, &plan);
}

size_t
rls_codec_response_write(const struct rls_response *resp, uint8_t *out)
{
    return rls_codec_response_write_plan(resp, NULL, out);
}

const uint8_t *
rls_codec_encode_response(struct arena *a, const struct rls_response *resp, size_t *len)
{
    size_t n = rls_codec_response_size(resp);
    uint8_t *out = arena_alloc(a, n > 0 ? n : 1);

    if (out == NULL)
        return NULL;
    *len = rls_codec_response_write(resp, out);
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
