/*
 * check_rls_codec.c — rls_codec.c between the wire and src/rls.h: a
 * RateLimitRequest packed by protobuf-c decodes into the struct rls_request
 * it says (every field, absent ones as their defaults, strings with every
 * byte they held, a NUL too); a struct rls_response encodes into the RateLimitResponse
 * protobuf-c unpacks back; both against bytes written by hand from the
 * protocol's field numbers, so a drift in src/proto/ fails here; what is
 * not a message is refused, and so is one that would pass the arena's cap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "arena.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "rls_codec.h"

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

int
main(void)
{
    Suite *s = suite_create("rls_codec");
    TCase *tc = tcase_create("codec");
    SRunner *sr;
    int failures;

    tcase_add_test(tc, request_round_trip);
    tcase_add_test(tc, request_from_the_wire);
    tcase_add_test(tc, empty_request_is_all_defaults);
    tcase_add_test(tc, not_a_message_is_refused);
    tcase_add_test(tc, the_arena_cap_bounds_decoding);
    tcase_add_test(tc, response_round_trip);
    tcase_add_test(tc, response_to_the_wire);
    tcase_add_test(tc, encoding_past_the_cap_fails);
    tcase_add_test(tc, health_messages);
    tcase_add_test(tc, arena_marks_nest);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
