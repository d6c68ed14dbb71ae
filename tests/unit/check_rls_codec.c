/*
 * check_rls_codec.c — rls_codec.c between the wire and src/rls.h: a
 * RateLimitRequest packed by protobuf-c decodes into the struct rls_request
 * it says (every field, absent ones as their defaults, strings with every
 * byte they held, a NUL too); a struct rls_response encodes into the RateLimitResponse
 * protobuf-c unpacks back; both against bytes written by hand from the
 * protocol's field numbers, so a drift in src/proto/ fails here; what is
 * not a message is refused, and so is one that would pass the arena's cap.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "arena.h"
#include "slab.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "rls_codec.h"
#include "../rls_codec_diff.h"
#include "gen.h"
#include "unit.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest PbRequest;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor PbDescriptor;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry PbEntry;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride
    PbOverride;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse PbResponse;

static int
str_is(struct rls_str s, const char *p, size_t n)
{
    return s.len == n && memcmp(s.p, p, n) == 0;
}

/* A request through protobuf-c's own packer, then our decoder. */
START_TEST(request_round_trip)
{
    PbRequest m = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    PbDescriptor d0 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    PbDescriptor d1 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    PbEntry e0 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    PbEntry e1 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    PbEntry e2 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    PbOverride lim =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
    Google__Protobuf__UInt64Value hits = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    PbEntry *ents0[] = {&e0, &e1}, *ents1[] = {&e2};
    PbDescriptor *ds[] = {&d0, &d1};
    uint8_t buf[512];
    size_t n;
    struct arena a;
    struct rls_request req;
    const char *why = NULL;

    char k0[] = "remote_address", v0[] = "10.0.0.7", k1[] = "path", v1[] = "/a/b?c=d";
    char k2[] = "generic_key", empty[] = "", domain[] = "edge";

    e0.key = k0;
    e0.value = v0;
    e1.key = k1;
    e1.value = v1;
    e2.key = k2;
    e2.value = empty; /* written as absent by proto3 */
    d0.n_entries = 2;
    d0.entries = ents0;
    lim.requests_per_unit = 42;
    lim.unit = ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR;
    d0.limit = &lim;
    d1.n_entries = 1;
    d1.entries = ents1;
    hits.value = 0; /* present, and zero: only ask */
    d1.hits_addend = &hits;
    m.domain = domain;
    m.n_descriptors = 2;
    m.descriptors = ds;
    m.hits_addend = 3;
    n = envoy__service__ratelimit__v3__rate_limit_request__pack(&m, buf);

    arena_init(&a, 64, 0); /* small: decoding crosses blocks */
    ck_assert_ptr_null(why = rls_codec_decode_request(&a, buf, n, &req));
    ck_assert(str_is(req.domain, "edge", 4));
    ck_assert_uint_eq(req.hits_addend, 3);
    ck_assert_int_eq(req.timeout_ms, 0);
    ck_assert_uint_eq(req.ndescriptors, 2);
    ck_assert_uint_eq(req.descriptors[0].nentries, 2);
    ck_assert(str_is(req.descriptors[0].entries[0].key, "remote_address", 14));
    ck_assert(str_is(req.descriptors[0].entries[0].value, "10.0.0.7", 8));
    ck_assert(str_is(req.descriptors[0].entries[1].key, "path", 4));
    ck_assert(str_is(req.descriptors[0].entries[1].value, "/a/b?c=d", 8));
    ck_assert_int_eq(req.descriptors[0].has_limit, 1);
    ck_assert_uint_eq(req.descriptors[0].limit_requests_per_unit, 42);
    ck_assert_int_eq(req.descriptors[0].limit_unit, RLS_UNIT_HOUR);
    ck_assert_int_eq(req.descriptors[0].has_hits_addend, 0);
    ck_assert_uint_eq(req.descriptors[1].nentries, 1);
    ck_assert(str_is(req.descriptors[1].entries[0].key, "generic_key", 11));
    ck_assert(str_is(req.descriptors[1].entries[0].value, "", 0));
    ck_assert_int_eq(req.descriptors[1].has_limit, 0);
    ck_assert_int_eq(req.descriptors[1].has_hits_addend, 1);
    ck_assert_uint_eq(req.descriptors[1].hits_addend, 0);
    arena_free(&a);
}
END_TEST

/*
 * The same facts from bytes written by hand (field number << 3 | wire
 * type), as envoy.service.ratelimit.v3 numbers them: a field or a number
 * changed in src/proto/ fails here, whatever protobuf-c thinks.
 */
START_TEST(request_from_the_wire)
{
    static const uint8_t wire[] = {
        0x0a, 0x01, 'd',             /* RateLimitRequest.domain = 1 */
        0x12, 0x18,                  /* .descriptors = 2 */
        0x0a, 0x0a,                  /*   RateLimitDescriptor.entries = 1 */
        0x0a, 0x01, 'k',             /*     Entry.key = 1 */
        0x12, 0x05, 'v', 0, 'x', 0, 0, /*   Entry.value = 2, NULs inside and at the end */
        0x12, 0x04, 0x08, 0x07,      /*   .limit = 2 { requests_per_unit = 1: 7 */
        0x10, 0x02,                  /*     unit = 2: MINUTE } */
        0x1a, 0x02, 0x08, 0x05,      /*   .hits_addend = 3 { value = 1: 5 } */
        0x20, 0x01,                  /*   field 4 (is_negative_hits): not ours */
        0x18, 0x09,                  /* .hits_addend = 3: 9 */
        0xf8, 0x01, 0x2a,            /* field 31, a varint nobody defined */
        0x9a, 0x02, 0x02, 0x01, 0x02 /* field 35, bytes nobody defined */
    };
    struct arena a;
    struct rls_request req;
    const char *why = NULL;

    arena_init(&a, 0, 0);
    ck_assert_ptr_null(why = rls_codec_decode_request(&a, wire, sizeof(wire), &req));
    ck_assert(str_is(req.domain, "d", 1));
    ck_assert_uint_eq(req.hits_addend, 9);
    ck_assert_uint_eq(req.ndescriptors, 1);
    ck_assert_uint_eq(req.descriptors[0].nentries, 1);
    ck_assert(str_is(req.descriptors[0].entries[0].key, "k", 1));
    /* not "v": a value differing after a NUL is another value */
    ck_assert(str_is(req.descriptors[0].entries[0].value, "v\0x\0\0", 5));
    ck_assert_int_eq(req.descriptors[0].has_limit, 1);
    ck_assert_uint_eq(req.descriptors[0].limit_requests_per_unit, 7);
    ck_assert_int_eq(req.descriptors[0].limit_unit, RLS_UNIT_MINUTE);
    ck_assert_int_eq(req.descriptors[0].has_hits_addend, 1);
    ck_assert_uint_eq(req.descriptors[0].hits_addend, 5);
    arena_free(&a);
}
END_TEST

START_TEST(empty_request_is_all_defaults)
{
    struct arena a;
    struct rls_request req;
    const char *why = NULL;

    arena_init(&a, 0, 0);
    ck_assert_ptr_null(why = rls_codec_decode_request(&a, (const uint8_t *)"", 0, &req));
    ck_assert_uint_eq(req.domain.len, 0);
    ck_assert_ptr_nonnull(req.domain.p);
    ck_assert_uint_eq(req.ndescriptors, 0);
    ck_assert_uint_eq(req.hits_addend, 0);
    arena_free(&a);
}
END_TEST

START_TEST(not_a_message_is_refused)
{
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
    } bad[] = {
        {"a length past the end", "\x0a\x05" "ab", 4},
        {"a truncated varint", "\x18\xff", 2},
        {"a domain as a varint", "\x08\x01", 2},
        {"wire type 7", "\x0f", 1},
        {"field number 0", "\x02\x00", 2},
        {"a descriptor cut short", "\x12\x04\x0a\x05k", 5},
        {"HTTP/1.1 bytes", "GET / HTTP/1.1\r\n\r\n", 18},
    };
    struct arena a;
    struct rls_request req;

    arena_init(&a, 0, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *why = NULL;
        struct arena_mark m = arena_mark(&a);
        ck_assert_msg((why = rls_codec_decode_request(&a, (const uint8_t *)bad[i].bytes,
                                                      bad[i].len, &req)) != NULL,
                      "%s decoded", bad[i].what);
        ck_assert_str_eq(why, "the message is not a RateLimitRequest");
        arena_release(&a, m);
    }
    arena_free(&a);
}
END_TEST

/* 2000 empty entries: 4 bytes on the wire, much more decoded: the cap says
 * no, with its own reason. */
START_TEST(the_arena_cap_bounds_decoding)
{
    uint8_t *buf = malloc(3 + 2000 * 2);
    size_t n = 0;
    struct arena a;
    struct rls_request req;
    const char *why = NULL;

    buf[n++] = 0x12; /* one descriptor of 2000 empty entries */
    buf[n++] = 0xa0; /* length 4000, varint */
    buf[n++] = 0x1f;
    for (int i = 0; i < 2000; i++) {
        buf[n++] = 0x0a;
        buf[n++] = 0x00;
    }
    arena_init(&a, 0, 16 * 1024);
    ck_assert_ptr_nonnull(why = rls_codec_decode_request(&a, buf, n, &req));
    ck_assert_ptr_nonnull(strstr(why, "too complex"));
    arena_release(&a, (struct arena_mark){0});
    arena_free(&a);

    arena_init(&a, 0, 4 * 1024 * 1024);
    ck_assert_ptr_null(why = rls_codec_decode_request(&a, buf, n, &req));
    ck_assert_uint_eq(req.descriptors[0].nentries, 2000);
    arena_free(&a);
    free(buf);
}
END_TEST

/* ---- the decoder against protobuf-c's unpack ------------------------------ */

/* Messages written field by field at random: mostly the fields of each
 * message with their own wire types, some with another, fields nobody
 * defined, every wire type (3, 4, 6 and 7 too), repeated scalars and
 * messages (the last wins, or protobuf-c merges), varints of up to 11 bytes,
 * tags written longer than they need; then cut, flipped or grown by a byte. */
struct wbuf {
    uint8_t *p;
    size_t len, cap;
};

static void
wb_put(struct wbuf *b, const void *p, size_t n)
{
    if (n == 0)
        return; /* p may be NULL (an empty sub-message) */
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* v as a varint, `pad` bytes longer than it needs (0x80 ... 0x00) */
static void
wb_varint(struct wbuf *b, uint64_t v, unsigned pad)
{
    uint8_t out[16];
    size_t n = 0;

    do {
        out[n++] = (uint8_t)(v & 0x7f) | 0x80;
        v >>= 7;
    } while (v != 0);
    for (; pad > 0 && n < sizeof(out); pad--)
        out[n++] = 0x80;
    out[n - 1] &= 0x7f;
    wb_put(b, out, n);
}

enum gen_kind { G_REQUEST, G_DESCRIPTOR, G_ENTRY, G_OVERRIDE, G_U64, G_BYTES };

/* The fields 1..3 of each message: their wire type and what they hold. */
static const struct {
    unsigned wt;
    enum gen_kind holds;
} gen_fields[][3] = {
    [G_REQUEST] = {{2, G_BYTES}, {2, G_DESCRIPTOR}, {0, G_BYTES}},
    [G_DESCRIPTOR] = {{2, G_ENTRY}, {2, G_OVERRIDE}, {2, G_U64}},
    [G_ENTRY] = {{2, G_BYTES}, {2, G_BYTES}, {0xff, G_BYTES}},
    [G_OVERRIDE] = {{0, G_BYTES}, {0, G_BYTES}, {0xff, G_BYTES}},
    [G_U64] = {{0, G_BYTES}, {0xff, G_BYTES}, {0xff, G_BYTES}},
};

static uint64_t
gen_varint_value(struct gen *g)
{
    switch (gen_next(g) % 5) {
    case 0: return gen_next(g) % 4;
    case 1: return gen_next(g) % 300;
    case 2: return gen_next(g);
    default: return (uint64_t)gen_next(g) << 32 | gen_next(g);
    }
}

static void gen_message(struct gen *g, struct wbuf *b, enum gen_kind kind, int depth);

static void
gen_field(struct gen *g, struct wbuf *b, enum gen_kind kind, int depth)
{
    uint32_t r = gen_next(g) % 100, num;
    unsigned wt;
    enum gen_kind holds = G_BYTES;

    if (r < 75) {
        num = 1 + gen_next(g) % 3;
        while (gen_fields[kind][num - 1].wt == 0xff)
            num = 1 + gen_next(g) % 3;
        wt = gen_fields[kind][num - 1].wt;
        holds = gen_fields[kind][num - 1].holds;
    } else if (r < 85) {
        num = 1 + gen_next(g) % 3; /* maybe another wire type than its own */
        wt = gen_next(g) % 6 == 0 ? gen_next(g) % 8 : (unsigned[]){0, 1, 2, 5}[gen_next(g) % 4];
    } else {
        num = gen_next(g) % 4 == 0 ? gen_next(g) : 4 + gen_next(g) % 60;
        wt = gen_next(g) % 10 == 0 ? gen_next(g) % 8 : (unsigned[]){0, 1, 2, 5}[gen_next(g) % 4];
    }
    wb_varint(b, (uint64_t)num << 3 | wt, gen_next(g) % 12 == 0 ? 1 + gen_next(g) % 4 : 0);
    switch (wt) {
    case 0:
        wb_varint(b, gen_varint_value(g), gen_next(g) % 15 == 0 ? gen_next(g) % 3 : 0);
        break;
    case 1:
    case 5: {
        uint8_t x[8];
        for (size_t i = 0; i < sizeof(x); i++)
            x[i] = (uint8_t)gen_next(g);
        wb_put(b, x, wt == 1 ? 8 : 4);
        break;
    }
    case 2: {
        struct wbuf sub = {0};
        if (holds != G_BYTES && depth < 4) {
            gen_message(g, &sub, holds, depth + 1);
        } else {
            size_t n = gen_next(g) % 9;
            for (size_t i = 0; i < n; i++) {
                uint8_t c = gen_next(g) % 3 == 0 ? 0 : (uint8_t)('a' + gen_next(g) % 4);
                wb_put(&sub, &c, 1);
            }
        }
        wb_varint(b, sub.len, gen_next(g) % 20 == 0 ? 1 : 0);
        wb_put(b, sub.p, sub.len);
        free(sub.p);
        break;
    }
    default: /* groups, 6 and 7: nothing after them */
        break;
    }
}

static void
gen_message(struct gen *g, struct wbuf *b, enum gen_kind kind, int depth)
{
    size_t n = gen_next(g) % (kind == G_REQUEST ? 7 : 5);

    for (size_t i = 0; i < n; i++)
        gen_field(g, b, kind, depth);
}

/* 1 when both decoders took the bytes, 0 when both refused them */
static int
diff_ok(const uint8_t *p, size_t len, uint32_t seed, const char *what)
{
    int taken = 0;
    const char *d = rls_codec_diff(p, len, &taken);

    if (d != NULL) {
        char hex[3 * 64 + 1] = "";
        for (size_t i = 0; i < len && i < 64; i++)
            snprintf(hex + 3 * i, 4, "%02x ", p[i]);
        ck_abort_msg("seed %u (%s, %zu bytes: %s): %s", seed, what, len, hex, d);
    }
    return taken;
}

START_TEST(decoder_agrees_with_protobuf_c)
{
    uint32_t taken = 0, refused = 0;

    for (uint32_t seed = 1; seed <= 20000; seed++) {
        struct gen g = gen_seeded(seed);
        struct wbuf b = {0};
        size_t at;

        gen_message(&g, &b, G_REQUEST, 0);
        taken += diff_ok(b.p, b.len, seed, "as written");
        if (b.len == 0) {
            free(b.p);
            continue;
        }
        at = gen_next(&g) % b.len;
        refused += !diff_ok(b.p, at, seed, "cut");
        b.p[at] ^= (uint8_t)(1u << gen_next(&g) % 8);
        refused += !diff_ok(b.p, b.len, seed, "a bit flipped");
        b.p[at] = (uint8_t)gen_next(&g);
        refused += !diff_ok(b.p, b.len, seed, "a byte replaced");
        free(b.p);
    }
    /* both halves of the decoders were compared, not only their refusals */
    ck_assert_uint_ge(taken, 5000);
    ck_assert_uint_ge(refused, 5000);
}
END_TEST

static struct rls_response
sample_response(struct rls_status *st, char *hval)
{
    struct rls_response r = {0};

    memset(st, 0, 3 * sizeof(*st));
    st[0] = (struct rls_status){.code = RLS_CODE_OK, .has_limit = 1, .requests_per_unit = 10,
                                .unit = RLS_UNIT_MINUTE, .name = "per-ip",
                                .limit_remaining = 7, .until_reset_ms = 59250};
    st[1] = (struct rls_status){.code = RLS_CODE_OVER_LIMIT, .has_limit = 1,
                                .requests_per_unit = 1, .unit = RLS_UNIT_WEEK, .name = NULL,
                                .limit_remaining = 0, .until_reset_ms = 0};
    st[2] = (struct rls_status){.code = RLS_CODE_OK, .until_reset_ms = -1};
    r.overall_code = RLS_CODE_OVER_LIMIT;
    r.statuses = st;
    r.nstatuses = 3;
    r.headers[0].name = "RateLimit-Policy";
    r.headers[0].value = hval;
    r.nheaders = 1;
    return r;
}

START_TEST(response_round_trip)
{
    struct rls_status st[3];
    char hval[] = "10;w=60";
    struct rls_response r = sample_response(st, hval);
    struct arena a;
    const uint8_t *out;
    size_t n = 0;
    PbResponse *m;

    arena_init(&a, 0, 0);
    out = rls_codec_encode_response(&a, &r, &n);
    ck_assert_ptr_nonnull(out);
    m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, out);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->overall_code, RLS_CODE_OVER_LIMIT);
    ck_assert_uint_eq(m->n_statuses, 3);
    ck_assert_int_eq(m->statuses[0]->code, RLS_CODE_OK);
    ck_assert_ptr_nonnull(m->statuses[0]->current_limit);
    ck_assert_uint_eq(m->statuses[0]->current_limit->requests_per_unit, 10);
    ck_assert_int_eq(m->statuses[0]->current_limit->unit, RLS_UNIT_MINUTE);
    ck_assert_str_eq(m->statuses[0]->current_limit->name, "per-ip");
    ck_assert_uint_eq(m->statuses[0]->limit_remaining, 7);
    ck_assert_ptr_nonnull(m->statuses[0]->duration_until_reset);
    ck_assert_int_eq(m->statuses[0]->duration_until_reset->seconds, 59);
    ck_assert_int_eq(m->statuses[0]->duration_until_reset->nanos, 250000000);
    ck_assert_int_eq(m->statuses[1]->code, RLS_CODE_OVER_LIMIT);
    ck_assert_int_eq(m->statuses[1]->current_limit->unit, RLS_UNIT_WEEK);
    ck_assert_str_eq(m->statuses[1]->current_limit->name, "");
    ck_assert_ptr_nonnull(m->statuses[1]->duration_until_reset); /* 0 is a duration */
    ck_assert_int_eq(m->statuses[1]->duration_until_reset->seconds, 0);
    ck_assert_ptr_null(m->statuses[2]->current_limit); /* no rule matched */
    ck_assert_ptr_null(m->statuses[2]->duration_until_reset);
    ck_assert_uint_eq(m->n_response_headers_to_add, 1);
    ck_assert_str_eq(m->response_headers_to_add[0]->key, "RateLimit-Policy");
    ck_assert_str_eq(m->response_headers_to_add[0]->value, "10;w=60");
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
    arena_free(&a);
}
END_TEST

/* Budgets: a descriptor's limit and hits_addend of 10^15 are read whole
 * (the limit's uint32 field extended to the uint64 of the same varint);
 * Envoy's uint32 answer fields hold a larger number at UINT32_MAX. */
START_TEST(budgets_on_the_wire)
{
    static const uint8_t wire[] = {
        0x0a, 0x01, 'd',                   /* RateLimitRequest.domain = 1 */
        0x12, 0x18,                        /* .descriptors = 2 */
        0x12, 0x09, 0x08,                  /*   .limit = 2 { requests_per_unit = 1: */
        0x80, 0x80, 0x9a, 0xa6, 0xea, 0xaf, 0xe3, 0x01, /* 10^15 */
        0x1a, 0x09, 0x08,                  /*   .hits_addend = 3 { value = 1: */
        0xff, 0xff, 0x99, 0xa6, 0xea, 0xaf, 0xe3, 0x01, /* 10^15 - 1 */
        0x0a, 0x00                         /*   an empty entry */
    };
    struct rls_status st = {.code = RLS_CODE_OK, .has_limit = 1,
                            .requests_per_unit = 1000000000000000ULL,
                            .unit = RLS_UNIT_YEAR, .limit_remaining = 5000000000ULL,
                            .until_reset_ms = -1};
    struct rls_response r = {.overall_code = RLS_CODE_OK, .statuses = &st, .nstatuses = 1};
    struct arena a;
    struct rls_request req;
    const uint8_t *out;
    size_t n = 0;
    PbResponse *m;

    arena_init(&a, 0, 0);
    ck_assert_ptr_null(rls_codec_decode_request(&a, wire, sizeof(wire), &req));
    ck_assert_uint_eq(req.descriptors[0].limit_requests_per_unit, 1000000000000000ULL);
    ck_assert_uint_eq(req.descriptors[0].hits_addend, 999999999999999ULL);
    out = rls_codec_encode_response(&a, &r, &n);
    ck_assert_ptr_nonnull(out);
    m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, out);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(m->statuses[0]->current_limit->requests_per_unit, UINT32_MAX);
    ck_assert_uint_eq(m->statuses[0]->limit_remaining, UINT32_MAX);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
    arena_free(&a);
}
END_TEST

START_TEST(response_to_the_wire)
{
    static const uint8_t want[] = {
        0x08, 0x01,                   /* overall_code = 1: OK */
        0x12, 0x13,                   /* statuses = 2 */
        0x08, 0x01,                   /*   code = 1: OK */
        0x12, 0x09,                   /*   current_limit = 2 */
        0x08, 0x0a,                   /*     requests_per_unit = 1: 10 */
        0x10, 0x03,                   /*     unit = 2: HOUR */
        0x1a, 0x03, 'a', 'b', 'c',    /*     name = 3 */
        0x18, 0x05,                   /*   limit_remaining = 3: 5 */
        0x22, 0x02, 0x08, 0x3c,       /*   duration_until_reset = 4 {seconds = 1: 60} */
        0x1a, 0x06,                   /* response_headers_to_add = 3 */
        0x0a, 0x01, 'X',              /*   key = 1 */
        0x12, 0x01, '1',              /*   value = 2 */
    };
    struct rls_status st = {.code = RLS_CODE_OK, .has_limit = 1, .requests_per_unit = 10,
                            .unit = RLS_UNIT_HOUR, .name = "abc", .limit_remaining = 5,
                            .until_reset_ms = 60000};
    char one[] = "1";
    struct rls_response r = {.overall_code = RLS_CODE_OK, .statuses = &st, .nstatuses = 1};
    struct arena a;
    const uint8_t *out;
    size_t n = 0;

    r.headers[0].name = "X";
    r.headers[0].value = one;
    r.nheaders = 1;
    arena_init(&a, 0, 0);
    out = rls_codec_encode_response(&a, &r, &n);
    ck_assert_uint_eq(n, sizeof(want));
    ck_assert_int_eq(memcmp(out, want, n), 0);
    arena_free(&a);
}
END_TEST

/* Every field at its widest (negative enums take 10 bytes, the uint32s
 * held at UINT32_MAX): the size said is the size written, protobuf-c's. */
START_TEST(response_size_holds_the_widest_fields)
{
    static char name[300];
    char value[] = "a header value";
    struct rls_status st[4];
    struct rls_response r = {.overall_code = (enum rls_code)-1, .statuses = st};
    size_t want;
    struct arena a;
    const uint8_t *out;
    size_t n = 0;
    PbResponse *m;

    memset(name, 'n', sizeof(name) - 1);
    for (size_t i = 0; i < 4; i++)
        st[i] = (struct rls_status){.code = (enum rls_code)INT32_MIN,
                                    .has_limit = 1,
                                    .requests_per_unit = UINT64_MAX,
                                    .unit = (enum rls_unit)-1,
                                    .name = name,
                                    .limit_remaining = UINT64_MAX,
                                    .until_reset_ms = INT64_MAX - (int64_t)i};
    r.nstatuses = 4;
    for (size_t i = 0; i < RLS_HEADERS_MAX; i++) {
        r.headers[i].name = name;
        r.headers[i].value = value;
    }
    r.nheaders = RLS_HEADERS_MAX;
    arena_init(&a, 0, 0);
    out = rls_codec_encode_response(&a, &r, &n);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(n, rls_codec_response_size(&r));
    m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, out);
    ck_assert_ptr_nonnull(m);
    want = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(m);
    ck_assert_uint_eq(n, want);
    ck_assert_uint_eq(m->n_statuses, 4);
    ck_assert_int_eq(m->statuses[3]->duration_until_reset->seconds, INT64_MAX / 1000);
    ck_assert_int_eq((int)m->statuses[0]->current_limit->unit, -1);
    ck_assert_uint_eq(m->statuses[0]->current_limit->requests_per_unit, UINT32_MAX);
    ck_assert_uint_eq(m->statuses[0]->limit_remaining, UINT32_MAX);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
    ck_assert_ptr_null(rls_codec_diff_response(&r));
    arena_free(&a);
}
END_TEST

/* A number for a generated answer's field: 0 often (left out of the wire),
 * small, a varint's byte boundaries, the widest, negative. */
static uint64_t
gen_number(struct gen *g)
{
    static const uint64_t edges[] = {0, 1, 127, 128, 16383, 16384, UINT32_MAX,
                                     (uint64_t)UINT32_MAX + 1, INT64_MAX, UINT64_MAX};
    uint64_t r = (uint64_t)gen_next(g) << 32 | gen_next(g);

    switch (r % 4) {
    case 0: return 0;
    case 1: return r >> 56;
    case 2: return edges[(r >> 8) % (sizeof(edges) / sizeof(edges[0]))];
    default: return r >> (r >> 8) % 64;
    }
}

/* A generated answer of up to `most` statuses in st: absent and empty
 * limits, names and durations, zeros, negative enums, a duration of 0,
 * numbers past RLS_WIRE_MAX, headers with empty names or values. */
static void
gen_response(struct gen *g, struct rls_response *r, struct rls_status *st, size_t most)
{
    static const char *const names[] = {NULL, "", "n", "per-ip",
                                        "a name of more than one hundred and twenty-seven "
                                        "bytes, so that its length takes two bytes of the "
                                        "varint on the wire......................"};
    static char v0[] = "", v1[] = "1", v2[] = "10;w=60", v3[] = "limit=10, remaining=7, reset=59";
    static char *const values[] = {v0, v1, v2, v3};

    *r = (struct rls_response){.statuses = st};
    r->overall_code = (enum rls_code)(int32_t)(gen_next(g) % 5 == 0 ? gen_number(g)
                                                                     : gen_next(g) % 3);
    r->nstatuses = gen_next(g) % (most + 1);
    for (size_t i = 0; i < r->nstatuses; i++) {
        int64_t until = (int64_t)gen_number(g);
        st[i] = (struct rls_status){
            .code = (enum rls_code)(int32_t)(gen_next(g) % 4 == 0 ? gen_number(g)
                                                                   : gen_next(g) % 3),
            .has_limit = (int)(gen_next(g) % 3 != 0),
            .requests_per_unit = gen_number(g),
            .unit = (enum rls_unit)(int32_t)(gen_next(g) % 4 == 0 ? gen_number(g)
                                                                   : gen_next(g) % 7),
            .name = names[gen_next(g) % 5],
            .limit_remaining = gen_number(g),
            .until_reset_ms = gen_next(g) % 4 == 0 ? -1 - (int64_t)(gen_next(g) % 3) : until};
    }
    r->nheaders = gen_next(g) % (RLS_HEADERS_MAX + 1);
    for (size_t i = 0; i < r->nheaders; i++) {
        r->headers[i].name = names[1 + gen_next(g) % 4];
        r->headers[i].value = values[gen_next(g) % 4];
    }
}

/* The encoder writes what protobuf-c's pack writes for the same fields,
 * byte for byte, on generated answers (gen_response's). */
START_TEST(encoder_agrees_with_protobuf_c)
{
    for (uint32_t seed = 1; seed <= 20000; seed++) {
        struct gen g = gen_seeded(seed);
        struct rls_status st[5];
        struct rls_response r;
        const char *d;

        gen_response(&g, &r, st, 5);
        if ((d = rls_codec_diff_response(&r)) != NULL)
            ck_abort_msg("seed %u: %s", seed, d);
    }
}
END_TEST

/* The same past the statuses a plan keeps (the rest measured again as the
 * message is written). */
START_TEST(encoder_past_the_plan_agrees_with_protobuf_c)
{
    for (uint32_t seed = 1; seed <= 5000; seed++) {
        struct gen g = gen_seeded(seed);
        struct rls_status st[2 * RLS_CODEC_PLAN_STATUSES + 1];
        struct rls_response r;
        const char *d;

        gen_response(&g, &r, st, RL_ARRAY_LEN(st));
        if ((d = rls_codec_diff_response(&r)) != NULL)
            ck_abort_msg("seed %u (%zu statuses): %s", seed, r.nstatuses, d);
    }
}
END_TEST

START_TEST(encoding_past_the_cap_fails)
{
    struct rls_status st[3];
    char hval[] = "10;w=60";
    struct rls_response r = sample_response(st, hval);
    struct arena a;
    size_t n = 0;

    arena_init(&a, 0, 64);
    ck_assert_ptr_null(rls_codec_encode_response(&a, &r, &n));
    arena_free(&a);
}
END_TEST

START_TEST(health_messages)
{
    static const uint8_t ask[] = {0x0a, 0x09, 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't'};
    uint8_t out[RLS_HEALTH_MAX];
    struct arena a;
    struct rls_str svc;
    const char *why = NULL;

    arena_init(&a, 0, 0);
    ck_assert_ptr_null(why = rls_codec_decode_health(&a, ask, sizeof(ask), &svc));
    ck_assert(str_is(svc, "ratelimit", 9));
    ck_assert_ptr_null(why = rls_codec_decode_health(&a, ask, 0, &svc));
    ck_assert(str_is(svc, "", 0));
    ck_assert_ptr_nonnull(why = rls_codec_decode_health(&a, ask, 5, &svc));
    ck_assert_str_eq(why, "the message is not a HealthCheckRequest");
    /* HealthCheckResponse.status = 1 */
    ck_assert_uint_eq(rls_codec_encode_health(RLS_SERVING, out), 2);
    ck_assert_int_eq(memcmp(out, "\x08\x01", 2), 0);
    ck_assert_uint_eq(rls_codec_encode_health(RLS_NOT_SERVING, out), 2);
    ck_assert_int_eq(memcmp(out, "\x08\x02", 2), 0);
    arena_free(&a);
}
END_TEST

START_TEST(arena_marks_nest)
{
    struct arena a;
    struct arena_mark m0, m1;
    char *p, *q;

    arena_init(&a, 32, 1000);
    m0 = arena_mark(&a);
    p = arena_alloc(&a, 20);
    ck_assert_ptr_nonnull(p);
    m1 = arena_mark(&a);
    q = arena_alloc(&a, 600); /* a new block */
    ck_assert_ptr_nonnull(q);
    memset(q, 1, 600);
    ck_assert_ptr_null(arena_alloc(&a, 500)); /* past the cap */
    arena_release(&a, m1);
    ck_assert_ptr_nonnull(arena_alloc(&a, 500)); /* room again */
    arena_release(&a, m0);
    ck_assert_uint_eq(a.total, 0);
    ck_assert_ptr_eq(arena_alloc(&a, 20), p); /* the first block, reused */
    ck_assert_ptr_null(arena_alloc(&a, (size_t)-1));
    arena_free(&a);
}
END_TEST

/* The slab under nghttp2 (grpc.c): blocks come back from their list, the
 * lists keep at most `keep`, realloc keeps the bytes. */
START_TEST(slab_lists)
{
    struct slab s;
    unsigned char *a, *b, *c, *big, *p;

    slab_init(&s, 2);
    a = slab_alloc(&s, 40);
    b = slab_alloc(&s, 64);
    c = slab_alloc(&s, 1);
    big = slab_alloc(&s, 5000); /* past every class: malloc's */
    ck_assert_uint_eq((uintptr_t)a % alignof(max_align_t), 0);
    ck_assert_uint_eq((uintptr_t)big % alignof(max_align_t), 0);
    memset(a, 1, 64);
    memset(b, 2, 64);
    memset(c, 3, 64);
    memset(big, 4, 5000);
    slab_release(&s, a);
    slab_release(&s, b);
    slab_release(&s, c); /* past keep: to malloc */
    slab_release(&s, big);
    slab_release(&s, NULL);
    ck_assert_uint_eq(s.list[0].n, 2);
    ck_assert_ptr_eq(slab_alloc(&s, 10), b); /* last in, first out */
    ck_assert_ptr_eq(slab_alloc(&s, 64), a);
    ck_assert_uint_eq(s.list[0].n, 0);
    slab_release(&s, a);

    /* realloc: the same block while it fits, its bytes kept when not */
    p = slab_alloc(&s, 100); /* a 128-byte block */
    for (int i = 0; i < 100; i++)
        p[i] = (unsigned char)i;
    ck_assert_ptr_eq(slab_realloc(&s, p, 128), p);
    p = slab_realloc(&s, p, 300);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(p[i], (unsigned char)i);
    p = slab_realloc(&s, p, 4000);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(p[i], (unsigned char)i);
    slab_release(&s, p);
    slab_release(&s, b);
    p = slab_realloc(&s, NULL, 7);
    ck_assert_ptr_eq(p, b); /* the list's */
    slab_release(&s, p);
    slab_release(&s, slab_realloc(&s, NULL, 0));
    slab_purge(&s);
    for (unsigned k = 0; k < SLAB_CLASSES; k++)
        ck_assert_ptr_null(s.list[k].head);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("rls_codec");
    TCase *tc = tcase_create("codec");

    tcase_add_test(tc, request_round_trip);
    tcase_add_test(tc, request_from_the_wire);
    tcase_add_test(tc, empty_request_is_all_defaults);
    tcase_add_test(tc, not_a_message_is_refused);
    tcase_add_test(tc, the_arena_cap_bounds_decoding);
    tcase_add_test(tc, decoder_agrees_with_protobuf_c);
    tcase_add_test(tc, response_round_trip);
    tcase_add_test(tc, budgets_on_the_wire);
    tcase_add_test(tc, response_to_the_wire);
    tcase_add_test(tc, response_size_holds_the_widest_fields);
    tcase_add_test(tc, encoder_agrees_with_protobuf_c);
    tcase_add_test(tc, encoder_past_the_plan_agrees_with_protobuf_c);
    tcase_add_test(tc, encoding_past_the_cap_fails);
    tcase_add_test(tc, health_messages);
    tcase_add_test(tc, arena_marks_nest);
    tcase_add_test(tc, slab_lists);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
