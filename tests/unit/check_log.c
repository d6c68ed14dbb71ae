/*
 * check_log.c — log lines are logfmt a parser can split back into fields,
 * whatever the values hold: quotes, backslashes and newlines inside a quoted
 * value are escaped, an unquoted value that would split its field is quoted,
 * other conversions are printf's own.  Lines are captured from stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
        log_write(RL_LOG_ERROR, __VA_ARGS__);                               \
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
    CAPTURE("msg=\"reload rejected\" problem=\"%s\"",
            "f.json: policies[1].name: \"x\" is already \\ a name\nsecond");
    ck_assert_str_eq(fields(), "msg=\"reload rejected\" problem=\"f.json: policies[1].name: "
                     "\\\"x\\\" is already \\\\ a name\\nsecond\"\n");
    /* one line: the only newline is the last byte */
    ck_assert_ptr_eq(strchr(captured, '\n'), captured + strlen(captured) - 1);
}
END_TEST

START_TEST(unquoted_value_quoted_when_needed)
{
    CAPTURE("msg=x plain=%s spaced=%s eq=%s ctl=%s empty=%s", "127.0.0.1:8080",
            "a b", "k=v", "tab\there\x01", "");
    ck_assert_str_eq(fields(), "msg=x plain=127.0.0.1:8080 spaced=\"a b\" eq=\"k=v\" "
                     "ctl=\"tab\\there\\x01\" empty=\n");
}
END_TEST

START_TEST(precision_cuts_before_escaping)
{
    CAPTURE("error=\"%.5s\" rest=%d", "ab\"cdefgh", 7);
    ck_assert_str_eq(fields(), "error=\"ab\\\"cd\" rest=7\n");
}
END_TEST

START_TEST(other_conversions_as_printf)
{
    CAPTURE("a=%d b=%u c=%lld d=%llu e=%zu f=%ld g=%5.2f h=%% i=%x j=%-3d| k=%c",
            -3, 4u, -5LL, 6ULL, (size_t)7, -8L, 3.14159, 255, 9, 'z');
    ck_assert_str_eq(fields(), "a=-3 b=4 c=-5 d=6 e=7 f=-8 g= 3.14 h=% i=ff j=9  | k=z\n");
}
END_TEST

/* '*' widths and precisions come from the arguments; hh, h, j, t and L
 * modifiers reach snprintf. */
START_TEST(star_width_and_modifiers)
{
    CAPTURE("a=%*d| b=%-*d| c=%.*f d=%hhd e=%hd f=%jd g=%td h=%.1Lf i=%.*s",
            4, 7, 3, 8, 2, 2.71828, (signed char)-1, (short)300, (intmax_t)-9,
            (ptrdiff_t)11, (long double)1.25, 2, "xyz");
    ck_assert_str_eq(fields(), "a=   7| b=8  | c=2.72 d=-1 e=300 f=-9 g=11 h=1.2 i=xy\n");
}
END_TEST

START_TEST(long_line_stays_one_line)
{
    static char big[6000];
    memset(big, '"', sizeof(big) - 1);
    CAPTURE("msg=\"%s\"", big);
    size_t n = strlen(captured);
    ck_assert_uint_le(n, 2048);
    ck_assert_ptr_eq(strchr(captured, '\n'), captured + n - 1);
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
    tcase_add_test(tc, other_conversions_as_printf);
    tcase_add_test(tc, star_width_and_modifiers);
    tcase_add_test(tc, long_line_stays_one_line);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(log_suite(), CK_NOFORK);
}
