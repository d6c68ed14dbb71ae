/*
 * check_rls_json.c — POST /json's codec (src/rls_json.c): a RateLimitRequest
 * read as protojson reads one (camelCase or the proto's names, enums by name
 * or number, 64-bit numbers as strings, null as absent, unknown fields
 * refused by name), a RateLimitResponse written as protojson writes one
 * (camelCase, enum names, zero values left out, durations "48s").
 */
#include <stdlib.h>
#include <string.h>


#include "rls.h"
#include "rls_json.h"
#include "unit.h"

static struct rls_json_request
decode_ok(const char *json)
{
    struct rls_json_request r;
    char *cause = NULL;

    ck_assert_msg(rls_json_decode(json, strlen(json), &r, &cause) == RL_OK, "refused: %s",
                  cause ? cause : "?");
    return r;
}

static void
decode_bad(const char *json, const char *want)
{
    struct rls_json_request r;
    char *cause = NULL;

    ck_assert_int_eq(rls_json_decode(json, strlen(json), &r, &cause), RL_ERR);
    ck_assert_ptr_nonnull(cause);
    ck_assert_msg(strncmp(cause, want, strlen(want)) == 0, "cause \"%s\", want \"%s...\"", cause,
                  want);
    free(cause);
    rls_json_request_free(&r);
}

static int
str_is(struct rls_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.p, want, s.len) == 0;
}

START_TEST(requests_as_protojson_reads_them)
{
    struct rls_json_request r = decode_ok(
        "{\"domain\": \"envoy\", \"hitsAddend\": 3, \"descriptors\": ["
        " {\"entries\": [{\"key\": \"remote_address\", \"value\": \"10.0.0.1\"},"
        "                {\"key\": \"path\"}]},"
        " {\"entries\": [{\"key\": \"a\", \"value\": \"b\"}],"
        "  \"limit\": {\"requestsPerUnit\": 42, \"unit\": \"HOUR\"}, \"hitsAddend\": \"0\"},"
        " {\"entries\": [], \"limit\": {\"requests_per_unit\": \"7\", \"unit\": 7},"
        "  \"hits_addend\": \"1000000000000000\"},"
        " {\"entries\": null, \"limit\": null, \"hitsAddend\": null}]}");
    const struct rls_request *q = r.req;

    ck_assert(str_is(q->domain, "envoy"));
    ck_assert_uint_eq(q->hits_addend, 3);
    ck_assert_uint_eq(q->ndescriptors, 4);
    ck_assert_uint_eq(q->descriptors[0].nentries, 2);
    ck_assert(str_is(q->descriptors[0].entries[0].key, "remote_address"));
    ck_assert(str_is(q->descriptors[0].entries[0].value, "10.0.0.1"));
    ck_assert(str_is(q->descriptors[0].entries[1].value, ""));
    ck_assert(!q->descriptors[0].has_limit && !q->descriptors[0].has_hits_addend);
    ck_assert(q->descriptors[1].has_limit);
    ck_assert_uint_eq(q->descriptors[1].limit_requests_per_unit, 42);
    ck_assert_int_eq(q->descriptors[1].limit_unit, RLS_UNIT_HOUR);
    ck_assert(q->descriptors[1].has_hits_addend);
    ck_assert_uint_eq(q->descriptors[1].hits_addend, 0);
    ck_assert_uint_eq(q->descriptors[2].limit_requests_per_unit, 7);
    ck_assert_int_eq(q->descriptors[2].limit_unit, RLS_UNIT_WEEK);
    ck_assert_uint_eq(q->descriptors[2].hits_addend, 1000000000000000ULL);
    ck_assert_uint_eq(q->descriptors[3].nentries, 0);
    ck_assert(!q->descriptors[3].has_limit && !q->descriptors[3].has_hits_addend);
    rls_json_request_free(&r);

    /* every byte of a string, a NUL too */
    r = decode_ok("{\"domain\": \"d\\u0000x\", \"descriptors\": [{\"entries\": "
                  "[{\"key\": \"k\", \"value\": \"\\u00e9\\u0000\"}]}]}");
    ck_assert_uint_eq(r.req->domain.len, 3);
    ck_assert_uint_eq(r.req->descriptors[0].entries[0].value.len, 3);
    rls_json_request_free(&r);
    /* an empty object is a request (rls_start refuses it, by name) */
    r = decode_ok("{}");
    ck_assert_uint_eq(r.req->ndescriptors, 0);
    rls_json_request_free(&r);
}
END_TEST

START_TEST(bad_requests_named)
{
    decode_bad("{\"domain\": ", "body: malformed JSON at line 1");
    decode_bad("[]", "body: must be an object (a RateLimitRequest");
    /* past 2^63 a number is jansson's limit: protojson's string form passes */
    decode_bad("{\"hitsAddend\": 18446744073709551615}", "body: malformed JSON");
    decode_bad("{\"domain\": 5}", "domain: must be a string");
    decode_bad("{\"domain\": \"d\", \"domian\": \"x\"}", "domian: unknown field");
    decode_bad("{\"domain\": \"d\", \"domain\": \"x\"}", "body: malformed JSON");
    decode_bad("{\"hitsAddend\": 1, \"hits_addend\": 2}",
               "hitsAddend: given twice (as hitsAddend and hits_addend)");
    decode_bad("{\"hitsAddend\": -1}", "hitsAddend: must be an integer 0..4294967295");
    decode_bad("{\"hitsAddend\": 4294967296}", "hitsAddend: must be an integer 0..4294967295");
    decode_bad("{\"hitsAddend\": 1.5}", "hitsAddend: must be an integer");
    decode_bad("{\"descriptors\": {}}", "descriptors: must be a list");
    decode_bad("{\"descriptors\": [1]}", "descriptors[0]: must be an object");
    decode_bad("{\"descriptors\": [{\"entries\": [{\"key\": 1}]}]}",
               "descriptors[0].entries[0].key: must be a string");
    decode_bad("{\"descriptors\": [{}, {\"entries\": [{\"k\": \"v\"}]}]}",
               "descriptors[1].entries[0].k: unknown field");
    decode_bad("{\"descriptors\": [{\"limit\": {\"unit\": \"FORTNIGHT\"}}]}",
               "descriptors[0].limit.unit: must be one of SECOND");
    decode_bad("{\"descriptors\": [{\"limit\": {\"requestsPerUnit\": \"x\"}}]}",
               "descriptors[0].limit.requestsPerUnit: must be an integer 0..1000000000000000");
    /* budgets: up to 10^15, as a string or a number */
    decode_bad("{\"descriptors\": [{\"limit\": {\"requestsPerUnit\": 1000000000000001}}]}",
               "descriptors[0].limit.requestsPerUnit: must be an integer 0..1000000000000000");
    decode_bad("{\"descriptors\": [{\"hitsAddend\": \"1000000000000001\"}]}",
               "descriptors[0].hitsAddend: must be an integer 0..1000000000000000");
    decode_bad("{\"descriptors\": [{\"hitsAddend\": \"18446744073709551616\"}]}",
               "descriptors[0].hitsAddend: must be an integer 0..1000000000000000");
}
END_TEST

START_TEST(responses_as_protojson_writes_them)
{
    struct rls_status st[3] = {
        {.code = RLS_CODE_OVER_LIMIT, .has_limit = 1, .requests_per_unit = 10,
         .unit = RLS_UNIT_MINUTE, .name = "per_ip", .limit_remaining = 0,
         .until_reset_ms = 48000},
        {.code = RLS_CODE_OK, .limit_remaining = UINT32_MAX, .until_reset_ms = -1},
        {.code = RLS_CODE_OK, .has_limit = 1, .requests_per_unit = 0, .unit = RLS_UNIT_UNKNOWN,
         .limit_remaining = 3, .until_reset_ms = 1500},
    };
    char v[] = "5";
    struct rls_response resp = {.overall_code = RLS_CODE_OVER_LIMIT, .statuses = st,
                                .nstatuses = 3, .headers = {{"X-RateLimit-Limit", v}},
                                .nheaders = 1};
    size_t n;
    char *s = rls_json_encode(&resp, &n);

    ck_assert_str_eq(s, "{\"overallCode\":\"OVER_LIMIT\",\"statuses\":["
                        "{\"code\":\"OVER_LIMIT\",\"currentLimit\":{\"requestsPerUnit\":10,"
                        "\"unit\":\"MINUTE\",\"name\":\"per_ip\"},\"durationUntilReset\":\"48s\"},"
                        "{\"code\":\"OK\",\"limitRemaining\":4294967295},"
                        "{\"code\":\"OK\",\"currentLimit\":{},\"limitRemaining\":3,"
                        "\"durationUntilReset\":\"1.500s\"}],"
                        "\"responseHeadersToAdd\":[{\"key\":\"X-RateLimit-Limit\",\"value\":\"5\"}]}");
    ck_assert_uint_eq(n, strlen(s));
    free(s);
    resp.nstatuses = 0;
    resp.nheaders = 0;
    resp.overall_code = RLS_CODE_OK;
    s = rls_json_encode(&resp, &n);
    ck_assert_str_eq(s, "{\"overallCode\":\"OK\"}");
    free(s);
}
END_TEST

START_TEST(durations)
{
    static const struct {
        int64_t ms;
        const char *s;
    } cases[] = {{0, "0s"}, {1, "0.001s"}, {999, "0.999s"}, {1000, "1s"}, {60000, "60s"},
                 {31536000000LL, "31536000s"}, {1234567, "1234.567s"}};
    char buf[32];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rls_json_duration(buf, sizeof(buf), cases[i].ms);
        ck_assert_str_eq(buf, cases[i].s);
    }
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("rls_json");
    TCase *tc = tcase_create("codec");

    tcase_add_test(tc, requests_as_protojson_reads_them);
    tcase_add_test(tc, bad_requests_named);
    tcase_add_test(tc, responses_as_protojson_writes_them);
    tcase_add_test(tc, durations);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
