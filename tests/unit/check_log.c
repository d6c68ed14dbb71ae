/*
 * check_log.c — log lines are logfmt a parser can split back into fields,
 * whatever the values hold: quotes, backslashes and newlines inside a quoted
 * value are escaped, an unquoted value that would split its field is quoted,
 * integers are written whole, values made of parts are one value.  Lines are
 * captured from stderr.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "unit.h"

#include "log.h"

/* Run one log call with stderr on a temporary file; return the line after
 * its "level=... " prefix, without the newline. */
static char captured[4096];

#define CAPTURE(...) do {                                                   \
        FILE *tmp_ = tmpfile();                                             \
        int saved_ = dup(STDERR_FILENO);                                    \
        ck_assert_ptr_nonnull(tmp_);                                        \
        fflush(stderr);                                                     \
        ck_assert_int_ge(dup2(fileno(tmp_), STDERR_FILENO), 0);             \
        log_error(__VA_ARGS__);                                             \
        fflush(stderr);                                                     \
        dup2(saved_, STDERR_FILENO);                                        \
        close(saved_);                                                      \
        rewind(tmp_);                                                       \
        size_t n_ = fread(captured, 1, sizeof(captured) - 1, tmp_);         \
        fclose(tmp_);                                                       \
        captured[n_] = '\0';                                                \
    } while (0)

static const char *
fields(void)
{
    const char *p = strstr(captured, "level=error ");
    ck_assert_ptr_nonnull(p);
    return p + strlen("level=error ");
}

START_TEST(quoted_value_escaped)
{
    CAPTURE(LOG_MSG("reload rejected"),
            LOG_Q("problem", "f.json: policies[1].name: \"x\" is already \\ a name\nsecond"));
    ck_assert_str_eq(fields(), "msg=\"reload rejected\" problem=\"f.json: policies[1].name: "
                     "\\\"x\\\" is already \\\\ a name\\nsecond\"\n");
    /* one line: the only newline is the last byte */
    ck_assert_ptr_eq(strchr(captured, '\n'), captured + strlen(captured) - 1);
}
END_TEST

START_TEST(unquoted_value_quoted_when_needed)
{
    CAPTURE(LOG_MSG("x"), LOG_S("plain", "127.0.0.1:8080"), LOG_S("spaced", "a b"),
            LOG_S("eq", "k=v"), LOG_S("ctl", "tab\there\x01"), LOG_S("empty", ""));
    ck_assert_str_eq(fields(), "msg=x plain=127.0.0.1:8080 spaced=\"a b\" eq=\"k=v\" "
                     "ctl=\"tab\\there\\x01\" empty=\n");
}
END_TEST

START_TEST(precision_cuts_before_escaping)
{
    CAPTURE(LOG_QN("error", "ab\"cdefgh", 5), LOG_I("rest", 7));
    ck_assert_str_eq(fields(), "error=\"ab\\\"cd\" rest=7\n");
}
END_TEST

/* Integers whole, signed and unsigned, to the ends of their ranges. */
START_TEST(integers_signed_and_unsigned)
{
    CAPTURE(LOG_I("a", -3), LOG_U("b", 4u), LOG_I("c", INT64_MIN), LOG_U("d", UINT64_MAX),
            LOG_U("e", (size_t)7), LOG_I("f", 0), LOG_I("g", INT64_MAX));
    ck_assert_str_eq(fields(), "a=-3 b=4 c=-9223372036854775808 d=18446744073709551615 e=7 "
                     "f=0 g=9223372036854775807\n");
}
END_TEST

/* A value made of parts is one value: quoted whole when any part needs it,
 * cut as a whole; host:port with its number. */
START_TEST(joined_values_are_one_value)
{
    CAPTURE(LOG_MSGJ("redis cluster node", " ready", NULL), LOG_J("node", "10.0.0.1", ":", "6379"),
            LOG_HP("addr", "::1", 6380), LOG_HP("spaced", "a b", 1),
            LOG_J("field", "redis.tls.", "ca_file", NULL), LOG_S("none", NULL));
    ck_assert_str_eq(fields(), "msg=\"redis cluster node ready\" node=10.0.0.1:6379 "
                     "addr=::1:6380 spaced=\"a b:1\" field=redis.tls.ca_file none=(null)\n");
    CAPTURE(LOG_MSG("m"), {.key = "cut", .type = LOG_KV_QUOTED, .s = {"ab", "c\"d", "ef"},
                           .max = 4});
    ck_assert_str_eq(fields(), "msg=m cut=\"abc\\\"\"\n");
}
END_TEST

START_TEST(long_line_stays_one_line)
{
    static char big[6000];
    memset(big, '"', sizeof(big) - 1);
    CAPTURE(LOG_Q("msg", big));
    size_t n = strlen(captured);
    ck_assert_uint_le(n, 2048);
    ck_assert_ptr_eq(strchr(captured, '\n'), captured + n - 1);
}
END_TEST

/* log_format json: one JSON object a line, the same fields, the values
 * whole whatever they hold. */
START_TEST(json_line_parses)
{
    json_t *o;

    log_set_format(RL_LOG_JSON);
    CAPTURE(LOG_MSG("a \"q\" \\ \n\x01 end"), LOG_I("n", -5), LOG_U("u", 7),
            LOG_J("j", "a", ":", "b"), LOG_QN("cut", "abcdef", 3));
    log_set_format(RL_LOG_LOGFMT);
    ck_assert_msg(strchr(captured, '\n') == captured + strlen(captured) - 1, "%s", captured);
    o = json_loads(captured, 0, NULL);
    ck_assert_msg(o != NULL, "not JSON: %s", captured);
    ck_assert_str_eq(json_string_value(json_object_get(o, "level")), "error");
    ck_assert_uint_eq(strlen(json_string_value(json_object_get(o, "ts"))), 24);
    ck_assert_str_eq(json_string_value(json_object_get(o, "msg")), "a \"q\" \\ \n\x01 end");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "n")), -5);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "u")), 7);
    ck_assert_str_eq(json_string_value(json_object_get(o, "j")), "a:b");
    ck_assert_str_eq(json_string_value(json_object_get(o, "cut")), "abc");
    ck_assert_ptr_null(json_object_get(o, "truncated"));
    json_decref(o);
}
END_TEST

START_TEST(json_long_line_leaves_fields_out)
{
    static char big[3000];
    json_t *o;

    memset(big, 'x', sizeof(big) - 1);
    log_set_format(RL_LOG_JSON);
    CAPTURE(LOG_MSG("first"), LOG_S("big", big), LOG_S("after", "y"));
    log_set_format(RL_LOG_LOGFMT);
    o = json_loads(captured, 0, NULL);
    ck_assert_msg(o != NULL, "not JSON: %.200s", captured);
    ck_assert_str_eq(json_string_value(json_object_get(o, "msg")), "first");
    ck_assert_ptr_null(json_object_get(o, "big"));
    ck_assert_ptr_null(json_object_get(o, "after"));
    ck_assert(json_is_true(json_object_get(o, "truncated")));
    json_decref(o);
}
END_TEST

static Suite *
log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("logfmt");

    tcase_add_test(tc, quoted_value_escaped);
    tcase_add_test(tc, unquoted_value_quoted_when_needed);
    tcase_add_test(tc, precision_cuts_before_escaping);
    tcase_add_test(tc, integers_signed_and_unsigned);
    tcase_add_test(tc, joined_values_are_one_value);
    tcase_add_test(tc, long_line_stays_one_line);
    tcase_add_test(tc, json_line_parses);
    tcase_add_test(tc, json_long_line_leaves_fields_out);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(log_suite(), CK_NOFORK);
}
