/*
 * check_body.c — body.c's fast reader of POST /check bodies: the shapes it
 * reads itself (and what it reads), and every shape it must hand to jansson
 * (escapes, non-ASCII, nesting, reals, big integers, duplicates, syntax
 * errors), so that jansson's verdict and message stay the answer there.
 * fuzz/fuzz_body.c checks the two readers against each other on random
 * input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "body.h"

static int
scan(const char *s, struct rl_body_fields *f)
{
    return body_scan(s, strlen(s), f);
}

START_TEST(reads_the_common_shapes)
{
    struct rl_body_fields f;

    ck_assert_int_eq(scan("{\"key\":\"user-42\"}", &f), RL_OK);
    ck_assert_uint_eq(f.key_len, 7);
    ck_assert_int_eq(memcmp(f.key, "user-42", 7), 0);
    ck_assert_ptr_null(f.policy);
    ck_assert_int_eq(f.cost, 1);

    ck_assert_int_eq(scan(" {\n \"key\" : \"k\", \"policy\":\"login\",\t\"path\":\"/a/b?x=1\","
                          " \"method\":\"POST\", \"cost\": 7 }\r\n", &f), RL_OK);
    ck_assert_str_eq(f.policy, "login");
    ck_assert_uint_eq(f.policy_len, 5);
    ck_assert_str_eq(f.method, "POST");
    ck_assert_uint_eq(f.path_len, 8);
    ck_assert_int_eq(f.cost, 7);

    ck_assert_int_eq(scan("{}", &f), RL_OK);
    ck_assert_ptr_null(f.key);
    ck_assert_int_eq(f.cost, 1);
    /* null is absence; unknown fields of any simple type are ignored */
    ck_assert_int_eq(scan("{\"key\":null,\"cost\":null,\"x\":true,\"y\":false,\"z\":-12}", &f), RL_OK);
    ck_assert_ptr_null(f.key);
    ck_assert_int_eq(f.cost, 1);
    /* out-of-range costs are read; check.c refuses them with its message */
    ck_assert_int_eq(scan("{\"cost\":-3}", &f), RL_OK);
    ck_assert_int_eq(f.cost, -3);
    ck_assert_int_eq(scan("{\"cost\":0}", &f), RL_OK);
    ck_assert_int_eq(f.cost, 0);
    ck_assert_int_eq(scan("{\"cost\":999999999999999999}", &f), RL_OK);
}
END_TEST

START_TEST(hands_the_rest_to_jansson)
{
    static const char *const rest[] = {
        "", " ", "[]", "\"key\"", "1", "null",
        "{\"key\":\"a\\\"b\"}",                 /* an escape */
        "{\"key\":\"\\u0000\"}",
        "{\"key\":\"caf\xc3\xa9\"}",            /* non-ASCII */
        "{\"key\":\"a\tb\"}",                   /* a raw control character */
        "{\"key\":{\"a\":1}}", "{\"x\":[1]}",    /* nesting */
        "{\"cost\":1.0}", "{\"cost\":1e2}", "{\"cost\":01}", "{\"cost\":-}",
        "{\"cost\":1234567890123456789}",       /* 19 digits */
        "{\"cost\":\"3\"}", "{\"key\":3}", "{\"policy\":true}",
        "{\"key\":\"a\",\"key\":\"b\"}",        /* a duplicate */
        "{\"key\":\"a\",}", "{,}", "{\"key\" \"a\"}", "{\"key\":\"a\"", "{\"key\":\"a\"}x",
        "{\"key\":tru}", "{\"key\":nul}",
        "{\"policy\":\"0123456789012345678901234567890123456789012345678901234567890123456789\"}",
        "{\"method\":\"VERYLONGMETHODNAME\"}",
    };
    struct rl_body_fields f;

    for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
        ck_assert_msg(scan(rest[i], &f) == RL_ERR, "fast path took %s", rest[i]);
}
END_TEST

START_TEST(many_members_go_to_jansson)
{
    char buf[512];
    size_t o = 0;
    struct rl_body_fields f;

    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "{");
    for (int i = 0; i < 17; i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s\"m%d\":1", i ? "," : "", i);
    snprintf(buf + o, sizeof(buf) - o, "}");
    ck_assert_int_eq(scan(buf, &f), RL_ERR);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("body");
    TCase *tc = tcase_create("scan");

    tcase_add_test(tc, reads_the_common_shapes);
    tcase_add_test(tc, hands_the_rest_to_jansson);
    tcase_add_test(tc, many_members_go_to_jansson);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
