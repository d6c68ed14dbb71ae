/*
 * check_xds_codec.c — rules over xDS as src/xds_codec.c reads them: a
 * DiscoveryResponse of RateLimitConfig resources (packed here with
 * protobuf-c, as a management server sends them) becomes the rule set the
 * same YAML files would, matched by the same matcher; a response with any
 * problem is refused whole with the text a NACK carries, naming the
 * resource and the field; descriptors nested past the rule files' bound
 * are refused before protobuf-c recurses into them; the DiscoveryRequest
 * (ask, ACK, NACK) unpacks to what was asked.
 */
#include <stdlib.h>
#include <string.h>

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "rls_rules.h"
#include "unit.h"
#include "xds_codec.h"

typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig Conf;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor Desc;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy Policy;

static uint64_t
uid(void)
{
    static uint64_t n;
    return ++n;
}

static void
desc_init(Desc *d, const char *key, const char *value, Policy *p)
{
    ratelimit__config__ratelimit__v3__rate_limit_descriptor__init(d);
    d->key = (char *)key;
    d->value = (char *)(value != NULL ? value : "");
    d->rate_limit = p;
}

static void
policy_init(Policy *p, int unit, uint32_t n)
{
    ratelimit__config__ratelimit__v3__rate_limit_policy__init(p);
    p->unit = (Ratelimit__Config__Ratelimit__V3__RateLimitUnit)unit;
    p->requests_per_unit = n;
}

/* A DiscoveryResponse of the given configs (type_url: each resource's and
 * the response's); *len bytes, caller frees. */
static uint8_t *
response(Conf **confs, size_t n, const char *type_url, size_t *len)
{
    Envoy__Service__Discovery__V3__DiscoveryResponse r =
        ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_RESPONSE__INIT;
    Google__Protobuf__Any *anys = calloc(n ? n : 1, sizeof(*anys));
    Google__Protobuf__Any **pa = calloc(n ? n : 1, sizeof(*pa));
    uint8_t *out;

    for (size_t i = 0; i < n; i++) {
        google__protobuf__any__init(&anys[i]);
        anys[i].type_url = (char *)type_url;
        anys[i].value.len = ratelimit__config__ratelimit__v3__rate_limit_config__get_packed_size(confs[i]);
        anys[i].value.data = malloc(anys[i].value.len + 1);
        ratelimit__config__ratelimit__v3__rate_limit_config__pack(confs[i], anys[i].value.data);
        pa[i] = &anys[i];
    }
    r.version_info = (char *)"v7";
    r.nonce = (char *)"n42";
    r.type_url = (char *)type_url;
    r.n_resources = n;
    r.resources = pa;
    *len = envoy__service__discovery__v3__discovery_response__get_packed_size(&r);
    out = malloc(*len + 1);
    envoy__service__discovery__v3__discovery_response__pack(&r, out);
    for (size_t i = 0; i < n; i++)
        free(anys[i].value.data);
    free(anys);
    free(pa);
    return out;
}

/* Envoy Gateway's shape: route -> rule-0-match-0 -> masked_remote_address */
START_TEST(a_gateway_resource_matches_as_its_file_would)
{
    Policy p;
    Desc ip, rule, route, *ipv[] = {&ip}, *rulev[] = {&rule}, *routev[] = {&route};
    Conf c = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT, *cv[] = {&c};
    struct rls_entry e[3] = {{{"r0", 2}, {"r0", 2}},
                             {{"rule-0-match-0", 14}, {"rule-0-match-0", 14}},
                             {{"masked_remote_address", 21}, {"10.0.0.1/32", 11}}};
    const struct rls_str *shared[3];
    const struct rls_domain *d;
    const struct rls_rule *r;
    struct xds_response out;
    char *cause;
    size_t len;
    uint8_t *msg;

    policy_init(&p, 3 /* HOUR */, 3);
    desc_init(&ip, "masked_remote_address", NULL, &p);
    desc_init(&rule, "rule-0-match-0", "rule-0-match-0", NULL);
    rule.n_descriptors = 1;
    rule.descriptors = ipv;
    desc_init(&route, "r0", "r0", NULL);
    route.n_descriptors = 1;
    route.descriptors = rulev;
    c.name = (char *)"default/eg/http";
    c.domain = (char *)"default/eg/http";
    c.n_descriptors = 1;
    c.descriptors = routev;
    msg = response(cv, 1, XDS_TYPE_URL, &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_OK);
    ck_assert_ptr_null(cause);
    ck_assert_str_eq(out.version, "v7");
    ck_assert_str_eq(out.nonce, "n42");
    ck_assert_uint_eq(out.rules->ndomains, 1);
    d = rls_rules_domain(out.rules, "default/eg/http", 15);
    ck_assert_ptr_nonnull(d);
    r = rls_rules_match(d, e, 3, shared);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->limits[0].requests_per_unit, 3);
    ck_assert_int_eq(r->limits[0].unit, RLS_UNIT_HOUR);
    ck_assert_ptr_null(rls_rules_match(d, e, 2, shared)); /* full depth only */
    xds_response_clear(&out);
    free(msg);
}
END_TEST

/* One bad resource refuses the response: the resource by name, the field by path. */
START_TEST(a_bad_resource_refuses_the_whole_response)
{
    Policy p, bad;
    Desc ok, empty, unitless, *okv[] = {&ok}, *badv[] = {&empty, &unitless};
    Conf a = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT;
    Conf b = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT, *cv[] = {&a, &b};
    struct xds_response out;
    char *cause;
    size_t len;
    uint8_t *msg;

    policy_init(&p, 2, 10);
    policy_init(&bad, 0 /* UNKNOWN */, 10);
    desc_init(&ok, "k", NULL, &p);
    desc_init(&empty, "", NULL, &p);
    desc_init(&unitless, "u", NULL, &bad);
    a.name = (char *)"good";
    a.domain = (char *)"d1";
    a.n_descriptors = 1;
    a.descriptors = okv;
    b.name = (char *)"broken";
    b.domain = (char *)"d2";
    b.n_descriptors = 2;
    b.descriptors = badv;
    msg = response(cv, 2, XDS_TYPE_URL, &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_ERR);
    ck_assert_ptr_null(out.rules);
    ck_assert_str_eq(out.nonce, "n42"); /* the NACK names it */
    ck_assert_msg(strstr(cause, "resource 'broken': descriptors[0]") != NULL, "%s", cause);
    ck_assert_msg(strstr(cause, "resource 'broken': descriptors[1].rate_limit") != NULL, "%s",
                  cause);
    ck_assert_msg(strstr(cause, "'good'") == NULL, "%s", cause);
    free(cause);
    xds_response_clear(&out);
    free(msg);
}
END_TEST

START_TEST(types_names_and_domains_are_checked)
{
    Conf a = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT;
    Conf b = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT, *cv[] = {&a, &b};
    struct xds_response out;
    char *cause;
    size_t len;
    uint8_t *msg;

    a.name = b.name = (char *)"same";
    a.domain = (char *)"d1";
    b.domain = (char *)"d2";
    msg = response(cv, 2, XDS_TYPE_URL, &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_ERR);
    ck_assert_msg(strstr(cause, "resources[1]: name: resource 'same' twice") != NULL, "%s", cause);
    free(cause);
    xds_response_clear(&out);
    free(msg);

    b.name = (char *)"other";
    b.domain = (char *)"d1";
    msg = response(cv, 2, XDS_TYPE_URL, &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_ERR);
    ck_assert_msg(strstr(cause, "duplicate domain 'd1'") != NULL, "%s", cause);
    free(cause);
    xds_response_clear(&out);
    free(msg);

    msg = response(cv, 2, "type.googleapis.com/envoy.config.cluster.v3.Cluster", &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_ERR);
    ck_assert_msg(strncmp(cause, "type_url: ", 10) == 0, "%s", cause);
    free(cause);
    xds_response_clear(&out);
    free(msg);

    /* not a message at all: nothing to NACK */
    ck_assert_int_eq(xds_response_decode((const uint8_t *)"\xff\xff", 2, uid, &out, &cause),
                     RL_ERR);
    ck_assert_ptr_null(out.nonce);
    free(cause);
    xds_response_clear(&out);

    /* no resource: no rules, accepted (every domain unknown) */
    msg = response(cv, 0, XDS_TYPE_URL, &len);
    ck_assert_int_eq(xds_response_decode(msg, len, uid, &out, &cause), RL_OK);
    ck_assert_uint_eq(out.rules->ndomains, 0);
    xds_response_clear(&out);
    free(msg);
}
END_TEST

/* One resource of raw bytes, as a server could send it. */
static uint8_t *
response_raw(const uint8_t *value, size_t vlen, size_t *len)
{
    Envoy__Service__Discovery__V3__DiscoveryResponse r =
        ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_RESPONSE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT, *pa[] = {&any};
    uint8_t *out;

    any.type_url = (char *)XDS_TYPE_URL;
    any.value.data = (uint8_t *)value;
    any.value.len = vlen;
    r.type_url = (char *)XDS_TYPE_URL;
    r.nonce = (char *)"raw";
    r.n_resources = 1;
    r.resources = pa;
    *len = envoy__service__discovery__v3__discovery_response__get_packed_size(&r);
    out = malloc(*len);
    envoy__service__discovery__v3__discovery_response__pack(&r, out);
    return out;
}

/* The decoded response's problem, or "" when accepted (then rules kept
 * in *rules, caller frees). */
static char *
decode_raw(const uint8_t *value, size_t vlen, struct rls_rules **rules)
{
    struct xds_response out;
    char *cause = NULL;
    size_t len;
    uint8_t *msg = response_raw(value, vlen, &len);

    if (xds_response_decode(msg, len, uid, &out, &cause) == RL_OK) {
        *rules = out.rules;
        out.rules = NULL;
        cause = strdup("");
    }
    xds_response_clear(&out);
    free(msg);
    return cause;
}

/* A resource is read off its wire, each descriptor unpacked only when the
 * loader comes to it: what protobuf-c's unpack of the whole resource
 * refuses is refused, and the rest read as it reads it. */
START_TEST(a_resource_is_read_as_protobuf_c_reads_it)
{
    /* name "n"; domain "x" then "d" (the last wins); an unknown varint
     * field 9; descriptor {key "k", value "v", rate_limit {SECOND, 5}} */
    static const uint8_t good[] = {0x0a, 1,   'n', 0x12, 1,   'x', 0x12, 1, 'd', 0x48, 7,
                                   0x1a, 12,  0x0a, 1,   'k', 0x12, 1,   'v', 0x1a, 4,
                                   0x08, 1,   0x10, 5};
    /* descriptors (field 3) as a varint */
    static const uint8_t as_varint[] = {0x0a, 1, 'n', 0x18, 1};
    /* a descriptor whose key runs past its bytes */
    static const uint8_t bad_desc[] = {0x0a, 1, 'n', 0x12, 1, 'd', 0x1a, 2, 0x0a, 5};
    /* a group (wire type 3), which protobuf-c does not read */
    static const uint8_t group[] = {0x0a, 1, 'n', 0x4b, 0x4c};
    struct rls_rules *rules = NULL;
    const struct rls_domain *d;
    char *cause;

    Conf *c = ratelimit__config__ratelimit__v3__rate_limit_config__unpack(NULL, sizeof(good), good);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->domain, "d");
    ratelimit__config__ratelimit__v3__rate_limit_config__free_unpacked(c, NULL);
    cause = decode_raw(good, sizeof(good), &rules);
    ck_assert_str_eq(cause, "");
    free(cause);
    ck_assert_ptr_null(rls_rules_domain(rules, "x", 1));
    d = rls_rules_domain(rules, "d", 1);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->node.nrules, 1);
    ck_assert_uint_eq(d->node.rules[0].limits[0].requests_per_unit, 5);
    ck_assert_int_eq(d->node.rules[0].limits[0].unit, RLS_UNIT_SECOND);
    rls_rules_free(rules);

    /* an Any without a value: a resource of no fields, no domain */
    rules = NULL;
    cause = decode_raw(NULL, 0, &rules);
    ck_assert_msg(strstr(cause, "config file cannot have empty domain") != NULL, "%s", cause);
    ck_assert_ptr_null(rules);
    free(cause);

    struct {
        const uint8_t *v;
        size_t len;
        const char *want;
    } bad[] = {{as_varint, sizeof(as_varint), "resources[0]: not a RateLimitConfig"},
               {bad_desc, sizeof(bad_desc),
                "resource 'n': descriptors[0]: not a RateLimitDescriptor"},
               {group, sizeof(group), "resources[0]: not a RateLimitConfig"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* protobuf-c refuses each whole */
        ck_assert_ptr_null(
            ratelimit__config__ratelimit__v3__rate_limit_config__unpack(NULL, bad[i].len, bad[i].v));
        rules = NULL;
        cause = decode_raw(bad[i].v, bad[i].len, &rules);
        ck_assert_msg(strcmp(cause, bad[i].want) == 0, "case %zu: %s", i, cause);
        ck_assert_ptr_null(rules);
        free(cause);
    }
}
END_TEST

/* Descriptors nested 200,000 deep on the wire (each level: field 4, its
 * length, the next): refused by the walk, never unpacked. */
START_TEST(nesting_is_bounded_before_unpacking)
{
    enum { DEPTH = 200000 };
    size_t cap = DEPTH * 8 + 64, at = cap, len;
    uint8_t *buf = malloc(cap), *env;
    Envoy__Service__Discovery__V3__DiscoveryResponse r =
        ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_RESPONSE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT, *pa[] = {&any};
    struct xds_response out;
    char *cause;

    /* built from the innermost out: tag, varint length, body */
    for (int level = 0; level <= DEPTH; level++) {
        size_t body = cap - at;
        uint8_t v[10];
        int n = 0;
        do {
            v[n++] = (uint8_t)((body & 0x7f) | (body > 0x7f ? 0x80 : 0));
            body >>= 7;
        } while (body);
        at -= (size_t)n;
        memcpy(buf + at, v, (size_t)n);
        buf[--at] = level == DEPTH ? (3 << 3 | 2) : (4 << 3 | 2);
    }
    any.type_url = (char *)XDS_TYPE_URL;
    any.value.data = buf + at;
    any.value.len = cap - at;
    r.type_url = (char *)XDS_TYPE_URL;
    r.nonce = (char *)"deep";
    r.n_resources = 1;
    r.resources = pa;
    len = envoy__service__discovery__v3__discovery_response__get_packed_size(&r);
    env = malloc(len);
    envoy__service__discovery__v3__discovery_response__pack(&r, env);
    ck_assert_int_eq(xds_response_decode(env, len, uid, &out, &cause), RL_ERR);
    ck_assert_msg(strstr(cause, "nested deeper than 32 levels") != NULL, "%s", cause);
    free(cause);
    xds_response_clear(&out);
    free(env);
    free(buf);
}
END_TEST

START_TEST(requests_ask_ack_and_nack)
{
    Envoy__Service__Discovery__V3__DiscoveryRequest *q;
    size_t len;
    uint8_t *msg = xds_request_encode("envoy-ratelimit", NULL, NULL, NULL, &len);

    ck_assert_uint_eq(msg[0], 0);
    ck_assert_uint_eq((size_t)msg[1] << 24 | msg[2] << 16 | msg[3] << 8 | msg[4], len - 5);
    q = envoy__service__discovery__v3__discovery_request__unpack(NULL, len - 5, msg + 5);
    ck_assert_ptr_nonnull(q);
    ck_assert_str_eq(q->node->id, "envoy-ratelimit");
    ck_assert_str_eq(q->type_url, XDS_TYPE_URL);
    ck_assert_str_eq(q->response_nonce, "");
    ck_assert_uint_eq(q->n_resource_names, 0); /* every resource */
    ck_assert_ptr_null(q->error_detail);
    envoy__service__discovery__v3__discovery_request__free_unpacked(q, NULL);
    free(msg);

    msg = xds_request_encode("n", "v1", "7", "resource 'x': key: bad", &len);
    q = envoy__service__discovery__v3__discovery_request__unpack(NULL, len - 5, msg + 5);
    ck_assert_str_eq(q->version_info, "v1");
    ck_assert_str_eq(q->response_nonce, "7");
    ck_assert_int_eq(q->error_detail->code, 3);
    ck_assert_str_eq(q->error_detail->message, "resource 'x': key: bad");
    envoy__service__discovery__v3__discovery_request__free_unpacked(q, NULL);
    free(msg);
}
END_TEST

static Suite *
xds_suite(void)
{
    Suite *s = suite_create("xds_codec");
    TCase *tc = tcase_create("codec");

    tcase_add_test(tc, a_gateway_resource_matches_as_its_file_would);
    tcase_add_test(tc, a_bad_resource_refuses_the_whole_response);
    tcase_add_test(tc, types_names_and_domains_are_checked);
    tcase_add_test(tc, a_resource_is_read_as_protobuf_c_reads_it);
    tcase_add_test(tc, nesting_is_bounded_before_unpacking);
    tcase_add_test(tc, requests_ask_ack_and_nack);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(xds_suite(), CK_FORK_GETENV);
}
