/*
 * check_response.c — a backend answer becomes a decision (which limit binds,
 * what the top level says), and a decision becomes a JSON body and quota
 * headers.  Every expected body and header is written out by hand from
 * docs/API.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"
#include <jansson.h>

#include "config.h"
#include "policy_text.h"
#include "response.h"
#include "util.h"

/* ---- fixtures ------------------------------------------------------------------ */

static struct rl_limit login_limits[] = {
    {RL_ALGO_TOKEN_BUCKET, 5, 1000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
    {RL_ALGO_FIXED_WINDOW, 100, 3600000, 100, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
};
static char name_login[] = "login", name_four[] = "four", name_upload[] = "upload";

static struct rl_policy login = {
    .name = name_login, .limits = login_limits, .nlimits = 2,
};
static struct rl_policy login_shadow = {
    .name = name_login, .limits = login_limits, .nlimits = 2, .shadow = 1,
};

/* Four limits whose `limit` says which one was picked. */
static struct rl_limit four_limits[] = {
    {RL_ALGO_FIXED_WINDOW, 10, 1000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
    {RL_ALGO_SLIDING_WINDOW_COUNTER, 20, 2000, 20, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
    {RL_ALGO_GCRA, 30, 1500, 45, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
    {RL_ALGO_SLIDING_WINDOW_LOG, 40, 60000, 40, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
};
static struct rl_policy four = {
    .name = name_four, .limits = four_limits, .nlimits = 4,
};

static struct rl_limit_result
ok(int64_t remaining, int64_t reset_ms)
{
    struct rl_limit_result r = {1, remaining, reset_ms, 0, 0};
    return r;
}

static struct rl_limit_result
no(int64_t remaining, int64_t reset_ms, int64_t retry_after_ms)
{
    struct rl_limit_result r = {0, remaining, reset_ms, retry_after_ms, 0};
    return r;
}

static struct rl_check_res
result(int allowed, size_t n, const struct rl_limit_result *r)
{
    struct rl_check_res res;

    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_OK;
    res.allowed = allowed;
    res.nlimits = n;
    memcpy(res.limits, r, n * sizeof(*r));
    return res;
}

static void
decide(struct rl_decision *d, const struct rl_policy *p, int allowed, size_t n,
       const struct rl_limit_result *r)
{
    struct rl_check_res res = result(allowed, n, r);

    memset(d, 0xa5, sizeof(*d));    /* nothing may be left from before */
    response_from_result(d, p, &res);
}

/* ---- the binding limit -------------------------------------------------------------- */

START_TEST(binding_all_allow_least_remaining)
{
    struct rl_limit_result r[] = {ok(5, 100), ok(3, 1700), ok(3, 900), ok(9, 50)};
    struct rl_decision d;

    decide(&d, &four, 1, 4, r);
    ck_assert_uint_eq(d.binding, 1);          /* least remaining, first of equals */
    ck_assert_int_eq(d.limit, 20);
    ck_assert_int_eq(d.remaining, 3);
    ck_assert_int_eq(d.reset_ms, 1700);
    ck_assert_int_eq(d.retry_after_ms, 0);
    ck_assert_int_eq(d.status, 200);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.would_deny, 0);
    ck_assert_int_eq(d.shadow, 0);
    ck_assert_int_eq(d.degraded, 0);
    ck_assert_ptr_eq(d.policy, &four);
    ck_assert_uint_eq(d.nlimits, 4);
    ck_assert_mem_eq(d.limits, r, sizeof(r));
}
END_TEST

START_TEST(binding_all_allow_equal_is_first)
{
    struct rl_limit_result r[] = {ok(7, 100), ok(7, 200), ok(7, 300)};
    struct rl_decision d;

    decide(&d, &four, 1, 3, r);
    ck_assert_uint_eq(d.binding, 0);
    ck_assert_int_eq(d.limit, 10);
    ck_assert_int_eq(d.reset_ms, 100);

    struct rl_limit_result r2[] = {ok(9, 100), ok(8, 200), ok(1, 300), ok(1, 400)};
    decide(&d, &four, 1, 4, r2);
    ck_assert_uint_eq(d.binding, 2);
    /* gcra 30 per 1.5 s with a burst of 45: 45 can be spent at once */
    ck_assert_int_eq(d.limit, 45);
    ck_assert_int_eq(d.remaining, 1);
    ck_assert_int_eq(d.reset_ms, 300);
}
END_TEST

START_TEST(binding_the_denying_one)
{
    /* limit 0 has less left, but limit 2 is the one that said no */
    struct rl_limit_result r[] = {ok(0, 100), ok(5, 200), no(4, 800, 650), ok(2, 50)};
    struct rl_decision d;

    decide(&d, &four, 0, 4, r);
    ck_assert_uint_eq(d.binding, 2);
    ck_assert_int_eq(d.limit, 45);
    ck_assert_int_eq(d.remaining, 4);
    ck_assert_int_eq(d.reset_ms, 800);
    ck_assert_int_eq(d.retry_after_ms, 650);
    ck_assert_int_eq(d.status, 429);
    ck_assert_int_eq(d.allowed, 0);
    ck_assert_int_eq(d.would_deny, 1);
}
END_TEST

START_TEST(binding_largest_retry_among_denying)
{
    struct rl_limit_result r[] = {no(0, 300, 300), no(0, 9000, 700), no(0, 200, 200),
                                  ok(1, 10)};
    struct rl_decision d;

    decide(&d, &four, 0, 4, r);
    ck_assert_uint_eq(d.binding, 1);
    ck_assert_int_eq(d.limit, 20);
    ck_assert_int_eq(d.reset_ms, 9000);
    ck_assert_int_eq(d.retry_after_ms, 700);

    /* the last one waits longest */
    struct rl_limit_result r2[] = {ok(0, 10), no(0, 300, 300), no(0, 400, 400),
                                   no(3, 5000, 4999)};
    decide(&d, &four, 0, 4, r2);
    ck_assert_uint_eq(d.binding, 3);
    ck_assert_int_eq(d.limit, 40);
    ck_assert_int_eq(d.remaining, 3);
    ck_assert_int_eq(d.retry_after_ms, 4999);

    /* equal waits: the first */
    struct rl_limit_result r3[] = {ok(0, 10), no(2, 300, 500), no(1, 600, 500)};
    decide(&d, &four, 0, 3, r3);
    ck_assert_uint_eq(d.binding, 1);
    ck_assert_int_eq(d.remaining, 2);
}
END_TEST

START_TEST(binding_never_fits_outranks)
{
    /* -1: the cost can never fit this limit; it binds over any wait */
    struct rl_limit_result r[] = {no(0, 300, 300), no(7, 5000, -1), no(0, 90000, 90000)};
    struct rl_decision d;

    decide(&d, &four, 0, 3, r);
    ck_assert_uint_eq(d.binding, 1);
    ck_assert_int_eq(d.limit, 20);
    ck_assert_int_eq(d.remaining, 7);
    ck_assert_int_eq(d.reset_ms, 5000);
    /* no wait makes it fit: said so, with the longest wait that means
     * anything (here the reset, longer than the 2 s window), never 0 */
    ck_assert_int_eq(d.never_fits, 1);
    ck_assert_int_eq(d.retry_after_ms, 5000);
    ck_assert_int_eq(d.status, 429);

    /* -1 first, a longer positive wait after it */
    struct rl_limit_result r2[] = {no(2, 100, -1), no(0, 99999, 99999)};
    decide(&d, &four, 0, 2, r2);
    ck_assert_uint_eq(d.binding, 0);
    ck_assert_int_eq(d.limit, 10);
    /* the whole 1 s window, not the 100 ms until the reset */
    ck_assert_int_eq(d.retry_after_ms, 1000);

    /* two that never fit: the first */
    struct rl_limit_result r3[] = {ok(5, 1), no(1, 111, -1), no(2, 222, -1)};
    decide(&d, &four, 0, 3, r3);
    ck_assert_uint_eq(d.binding, 1);
    ck_assert_int_eq(d.retry_after_ms, 2000);
}
END_TEST

START_TEST(binding_single_limit)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login, 0, 2, r);
    ck_assert_uint_eq(d.binding, 0);
    /* token bucket 5 per second, burst 10: the burst is what can be spent */
    ck_assert_int_eq(d.limit, 10);
    ck_assert_int_eq(d.remaining, 0);
    ck_assert_int_eq(d.reset_ms, 740);
    ck_assert_int_eq(d.retry_after_ms, 740);
}
END_TEST

START_TEST(shadow_decision)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login_shadow, 0, 2, r);
    ck_assert_int_eq(d.status, 200);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.shadow, 1);
    ck_assert_int_eq(d.would_deny, 1);
    ck_assert_uint_eq(d.binding, 0);

    struct rl_limit_result r2[] = {ok(4, 200), ok(93, 1204000)};
    decide(&d, &login_shadow, 1, 2, r2);
    ck_assert_int_eq(d.status, 200);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.shadow, 1);
    ck_assert_int_eq(d.would_deny, 0);
}
END_TEST

START_TEST(no_policy_and_degraded_decisions)
{
    struct rl_decision d;

    memset(&d, 0xa5, sizeof(d));
    response_no_policy(&d);
    ck_assert_int_eq(d.status, 200);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_ptr_null(d.policy);
    ck_assert_uint_eq(d.nlimits, 0);
    ck_assert_int_eq(d.degraded, 0);
    ck_assert_int_eq(d.shadow, 0);

    memset(&d, 0xa5, sizeof(d));
    response_degraded_open(&d, &login);
    ck_assert_int_eq(d.status, 200);
    ck_assert_int_eq(d.allowed, 1);
    ck_assert_int_eq(d.degraded, 1);
    ck_assert_ptr_eq(d.policy, &login);
    ck_assert_uint_eq(d.nlimits, 0);
    ck_assert_int_eq(d.shadow, 0);
    ck_assert_int_eq(d.would_deny, 0);
}
END_TEST

/* ---- bodies ------------------------------------------------------------------------------- */

static const char allowed_body[] =
    "{\"allowed\":true,\"policy\":\"login\",\"limit\":10,\"remaining\":4,\"reset_ms\":200,"
    "\"retry_after_ms\":0,\"limits\":["
    "{\"algorithm\":\"token_bucket\",\"limit\":5,\"window_ms\":1000,\"remaining\":4,"
    "\"reset_ms\":200,\"burst\":10,\"retry_after_ms\":0},"
    "{\"algorithm\":\"fixed_window\",\"limit\":100,\"window_ms\":3600000,\"remaining\":93,"
    "\"reset_ms\":1204000,\"retry_after_ms\":0}]}";

/* docs/API.md's example answer */
static const char denied_body[] =
    "{\"allowed\":false,\"policy\":\"login\",\"limit\":10,\"remaining\":0,\"reset_ms\":740,"
    "\"retry_after_ms\":740,\"limits\":["
    "{\"algorithm\":\"token_bucket\",\"limit\":5,\"window_ms\":1000,\"remaining\":0,"
    "\"reset_ms\":740,\"burst\":10,\"retry_after_ms\":740},"
    "{\"algorithm\":\"fixed_window\",\"limit\":100,\"window_ms\":3600000,\"remaining\":93,"
    "\"reset_ms\":1204000,\"retry_after_ms\":0}]}";

static const char shadow_denied_body[] =
    "{\"allowed\":true,\"policy\":\"login\",\"shadow\":true,\"would_deny\":true,"
    "\"limit\":10,\"remaining\":0,\"reset_ms\":740,\"retry_after_ms\":740,\"limits\":["
    "{\"algorithm\":\"token_bucket\",\"limit\":5,\"window_ms\":1000,\"remaining\":0,"
    "\"reset_ms\":740,\"burst\":10,\"retry_after_ms\":740},"
    "{\"algorithm\":\"fixed_window\",\"limit\":100,\"window_ms\":3600000,\"remaining\":93,"
    "\"reset_ms\":1204000,\"retry_after_ms\":0}]}";

static const char shadow_allowed_body[] =
    "{\"allowed\":true,\"policy\":\"login\",\"shadow\":true,\"would_deny\":false,"
    "\"limit\":10,\"remaining\":4,\"reset_ms\":200,\"retry_after_ms\":0,\"limits\":["
    "{\"algorithm\":\"token_bucket\",\"limit\":5,\"window_ms\":1000,\"remaining\":4,"
    "\"reset_ms\":200,\"burst\":10,\"retry_after_ms\":0},"
    "{\"algorithm\":\"fixed_window\",\"limit\":100,\"window_ms\":3600000,\"remaining\":93,"
    "\"reset_ms\":1204000,\"retry_after_ms\":0}]}";

static void
expect_body(const struct rl_decision *d, const char *want)
{
    char buf[4096];
    json_error_t jerr;
    size_t n = response_body(d, buf, sizeof(buf));

    ck_assert_str_eq(buf, want);
    ck_assert_uint_eq(n, strlen(want));
    json_t *j = json_loads(buf, 0, &jerr);
    ck_assert_msg(j != NULL, "not JSON: %s (%s)", buf, jerr.text);
    ck_assert(json_is_boolean(json_object_get(j, "allowed")));
    json_decref(j);
}

START_TEST(body_allowed)
{
    struct rl_limit_result r[] = {ok(4, 200), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login, 1, 2, r);
    expect_body(&d, allowed_body);
}
END_TEST

START_TEST(body_denied)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login, 0, 2, r);
    expect_body(&d, denied_body);
}
END_TEST

START_TEST(body_denied_never_fits)
{
    static struct rl_limit l[] = {{RL_ALGO_SLIDING_WINDOW_LOG, 3, 10000, 3, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    static struct rl_policy p = {.name = name_upload, .limits = l, .nlimits = 1};
    struct rl_limit_result r[] = {no(1, 4000, -1)};
    struct rl_decision d;

    /* the cost can never fit: said so, and the longest wait that means
     * anything, a whole window, never 0 */
    decide(&d, &p, 0, 1, r);
    expect_body(&d,
        "{\"allowed\":false,\"policy\":\"upload\",\"never_fits\":true,\"limit\":3,"
        "\"remaining\":1,\"reset_ms\":4000,\"retry_after_ms\":10000,\"limits\":["
        "{\"algorithm\":\"sliding_window_log\",\"limit\":3,\"window_ms\":10000,"
        "\"remaining\":1,\"reset_ms\":4000,\"retry_after_ms\":-1}]}");
}
END_TEST

START_TEST(body_denied_blocked)
{
    static struct rl_limit l[] = {{RL_ALGO_FIXED_WINDOW, 3, 10000, 3, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    static struct rl_policy p = {.name = name_upload, .limits = l, .nlimits = 1};
    struct rl_check_res res = result(0, 1, (struct rl_limit_result[]){no(3, 0, 90000)});
    struct rl_decision d;

    /* blocked by the admin API: the backend's waits cover the block, and
     * the body says why a caller with everything remaining is denied */
    res.blocked_ms = 90000;
    response_from_result(&d, &p, &res);
    ck_assert_int_eq(d.status, 429);
    ck_assert_int_eq(d.retry_after_ms, 90000);
    expect_body(&d,
        "{\"allowed\":false,\"policy\":\"upload\",\"blocked\":true,\"limit\":3,"
        "\"remaining\":3,\"reset_ms\":0,\"retry_after_ms\":90000,\"limits\":["
        "{\"algorithm\":\"fixed_window\",\"limit\":3,\"window_ms\":10000,"
        "\"remaining\":3,\"reset_ms\":0,\"retry_after_ms\":90000}]}");
    /* an allowed answer is never marked, whatever blocked_ms says */
    res = result(1, 1, (struct rl_limit_result[]){ok(3, 0)});
    res.blocked_ms = 5;
    response_from_result(&d, &p, &res);
    ck_assert_int_eq(d.blocked, 0);
}
END_TEST

START_TEST(body_shadow)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_limit_result r2[] = {ok(4, 200), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login_shadow, 0, 2, r);
    expect_body(&d, shadow_denied_body);
    decide(&d, &login_shadow, 1, 2, r2);
    expect_body(&d, shadow_allowed_body);
}
END_TEST

/* What is known without the backend: each limit as configured; nothing that
 * a count would say (remaining, reset_ms, retry_after_ms, the binding limit) */
#define LOGIN_CONFIGURED                                                               \
    "\"limits\":[{\"algorithm\":\"token_bucket\",\"limit\":5,\"window_ms\":1000,"        \
    "\"burst\":10},{\"algorithm\":\"fixed_window\",\"limit\":100,\"window_ms\":3600000}]"

START_TEST(body_degraded_open)
{
    struct rl_decision d;

    response_degraded_open(&d, &login);
    expect_body(&d, "{\"allowed\":true,\"policy\":\"login\",\"degraded\":true," LOGIN_CONFIGURED
                    "}");
    response_degraded_open(&d, &login_shadow);
    expect_body(&d, "{\"allowed\":true,\"policy\":\"login\",\"shadow\":true,"
                    "\"would_deny\":false,\"degraded\":true," LOGIN_CONFIGURED "}");
}
END_TEST

/* failure_mode closed: check.c's 503 decision */
static void
closed_decision(struct rl_decision *d, const struct rl_policy *p)
{
    memset(d, 0, sizeof(*d));
    d->status = 503;
    d->policy = p;
    d->degraded = 1;
}

START_TEST(body_closed)
{
    struct rl_decision d;
    char buf[1024];
    json_t *j;

    closed_decision(&d, &login);
    response_body(&d, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{\"error\":\"backend unavailable\",\"policy\":\"login\","
                          LOGIN_CONFIGURED "}");
    j = json_loads(buf, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_decref(j);
}
END_TEST

START_TEST(body_no_policy)
{
    struct rl_decision d;

    response_no_policy(&d);
    expect_body(&d, "{\"allowed\":true,\"policy\":null}");
}
END_TEST

START_TEST(body_gcra_and_windows)
{
    struct rl_limit_result r[] = {ok(9, 34), ok(20, 0), ok(44, 0), ok(40, 0)};
    struct rl_decision d;

    decide(&d, &four, 1, 4, r);
    expect_body(&d,
        "{\"allowed\":true,\"policy\":\"four\",\"limit\":10,\"remaining\":9,"
        "\"reset_ms\":34,\"retry_after_ms\":0,\"limits\":["
        "{\"algorithm\":\"fixed_window\",\"limit\":10,\"window_ms\":1000,\"remaining\":9,"
        "\"reset_ms\":34,\"retry_after_ms\":0},"
        "{\"algorithm\":\"sliding_window_counter\",\"limit\":20,\"window_ms\":2000,"
        "\"remaining\":20,\"reset_ms\":0,\"retry_after_ms\":0},"
        "{\"algorithm\":\"gcra\",\"limit\":30,\"window_ms\":1500,\"remaining\":44,"
        "\"reset_ms\":0,\"burst\":45,\"retry_after_ms\":0},"
        "{\"algorithm\":\"sliding_window_log\",\"limit\":40,\"window_ms\":60000,"
        "\"remaining\":40,\"reset_ms\":0,\"retry_after_ms\":0}]}");
}
END_TEST

/* Every buffer size: the prefix that fits, NUL-terminated, nothing past it. */
static void
expect_truncation(const struct rl_decision *d, const char *full)
{
    size_t len = strlen(full);
    unsigned char *buf = malloc(len + 64);

    ck_assert_ptr_nonnull(buf);
    for (size_t size = 1; size <= len + 8; size++) {
        memset(buf, 0xa5, len + 64);
        size_t n = response_body(d, (char *)buf, size);
        size_t want = len < size ? len : size - 1;
        ck_assert_msg(n == want, "size %zu: returned %zu, expected %zu", size, n, want);
        ck_assert_msg(buf[want] == '\0', "size %zu: not terminated at %zu", size, want);
        ck_assert_msg(memcmp(buf, full, want) == 0, "size %zu: wrong prefix", size);
        for (size_t i = size; i < len + 64; i++)
            ck_assert_msg(buf[i] == 0xa5, "size %zu: byte %zu written", size, i);
    }
    free(buf);
}

START_TEST(body_truncation_never_overflows)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;

    decide(&d, &login_shadow, 0, 2, r);
    expect_truncation(&d, shadow_denied_body);
    response_no_policy(&d);
    expect_truncation(&d, "{\"allowed\":true,\"policy\":null}");
    response_degraded_open(&d, &login);
    expect_truncation(&d, "{\"allowed\":true,\"policy\":\"login\",\"degraded\":true," LOGIN_CONFIGURED
                          "}");
    closed_decision(&d, &login);
    expect_truncation(&d, "{\"error\":\"backend unavailable\",\"policy\":\"login\","
                          LOGIN_CONFIGURED "}");
}
END_TEST

/* The printf-free formatter under the body and headers: every int64, and
 * a cut that never writes past the buffer and says it cut. */
START_TEST(strbuf_numbers_and_cuts)
{
    static const struct { int64_t v; const char *s; } nums[] = {
        {0, "0"}, {7, "7"}, {-1, "-1"}, {1000000000, "1000000000"},
        {INT64_MAX, "9223372036854775807"}, {INT64_MIN, "-9223372036854775808"},
    };
    char buf[32];
    struct strbuf sb;

    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        sb_init(&sb, buf, sizeof(buf));
        sb_i64(&sb, nums[i].v);
        ck_assert_str_eq(buf, nums[i].s);
        ck_assert(sb_ok(&sb));
    }
    /* every length, each side of each power of ten, both signs, against
     * printf; appended after text, in a buffer with room for the number
     * and its NUL only (the short copy) and in a large one (the fixed one) */
    for (uint64_t p10 = 1, k = 0; k < 19; k++, p10 *= 10) { /* 10^19 fits */
        for (int64_t d = -1; d <= 1; d++) {
            for (int sign = 1; sign >= -1; sign -= 2) {
                int64_t v = sign * ((int64_t)p10 + d);
                char want[32], big[64];
                int wn = snprintf(want, sizeof(want), "ab%lld", (long long)v);

                sb_init(&sb, big, sizeof(big));
                sb_str(&sb, "ab");
                sb_i64(&sb, v);
                ck_assert_str_eq(big, want);
                ck_assert_uint_eq(sb.len, (size_t)wn);
                memset(buf, 'x', sizeof(buf));
                sb_init(&sb, buf, (size_t)wn + 1);
                sb_str(&sb, "ab");
                sb_i64(&sb, v);
                ck_assert(sb_ok(&sb));
                ck_assert_str_eq(buf, want);
                if ((size_t)wn + 1 < sizeof(buf))
                    ck_assert_int_eq(buf[wn + 1], 'x');
            }
        }
    }
    memset(buf, 'x', sizeof(buf));
    sb_init(&sb, buf, 6);
    sb_str(&sb, "ab");
    sb_i64(&sb, 12345);
    ck_assert_str_eq(buf, "ab123");
    ck_assert(!sb_ok(&sb));
    ck_assert_uint_eq(sb.len, 7);
    ck_assert_int_eq(buf[6], 'x');
    sb_str(&sb, "more");                /* after a cut: nothing written */
    ck_assert_str_eq(buf, "ab123");
    sb_init(&sb, buf, 6);
    sb_str(&sb, "abcde");               /* exactly full */
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(buf, "abcde");
}
END_TEST

/* The largest policy a valid config allows (8 limits, a 64-byte name, every
 * number at its bound, windows `step` ms apart), every limit denying. */
static void
worst_case(struct rl_policy *p, struct rl_decision *d, int64_t step, int shadow)
{
    static struct rl_limit l[RL_LIMITS_MAX];
    static char name[RL_NAME_MAX + 1];
    struct rl_limit_result r[RL_LIMITS_MAX];
    const int64_t win = 366LL * 24 * 3600 * 1000, big = 1000000000;

    memset(name, 'n', RL_NAME_MAX);
    for (size_t i = 0; i < RL_LIMITS_MAX; i++) {
        l[i].algo = i % 2 ? RL_ALGO_SLIDING_WINDOW_COUNTER : RL_ALGO_TOKEN_BUCKET;
        l[i].limit = big;
        l[i].window_ms = win - step * (int64_t)i;
        l[i].burst = big;
        /* a full bucket refills in burst/limit windows: at most one window */
        r[i] = no(big, win, win);
    }
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->limits = l;
    p->nlimits = RL_LIMITS_MAX;
    p->shadow = shadow;
    decide(d, p, 0, RL_LIMITS_MAX, r);
}

/*
 * The largest body a valid config can produce (8 limits, 64-byte name, every
 * number at its config bound) fits the 2048-byte buffer http.c writes it to.
 */
START_TEST(body_worst_case_fits_http_buffer)
{
    struct rl_policy p;
    struct rl_decision d;
    char buf[2048];

    worst_case(&p, &d, 1, 1);
    size_t n = response_body(&d, buf, sizeof(buf));
    ck_assert_msg(n < sizeof(buf) - 1, "worst-case body needs %zu bytes or more", n);
    json_t *j = json_loads(buf, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "limits")), RL_LIMITS_MAX);
    json_decref(j);
}
END_TEST

/* ---- headers ----------------------------------------------------------------------------------- */

struct headers {
    size_t n;
    char name[16][64];
    char value[16][RESPONSE_POLICY_MAX];
};

static void
collect(const char *name, const char *value, void *arg)
{
    struct headers *h = arg;

    ck_assert_uint_lt(h->n, 16);
    ck_assert_uint_lt(strlen(name), 64);
    ck_assert_uint_lt(strlen(value), RESPONSE_POLICY_MAX);
    strcpy(h->name[h->n], name);
    strcpy(h->value[h->n], value);
    h->n++;
}

/* RateLimit-Policy of the two fixtures: every limit, an item each, in the
 * policy's order (w left out where it is not whole seconds: 45 in 2250 ms) */
#define LOGIN_POLICY "\"login/0\";q=10;w=2, \"login/1\";q=100;w=3600"
#define FOUR_POLICY                                                                    \
    "\"four/0\";q=10;w=1, \"four/1\";q=20;w=2, \"four/2\";q=45, \"four/3\";q=40;w=60"

/* want: name, value, name, value, ..., NULL */
static void
expect_headers(const struct rl_decision *d, const char *const *want)
{
    struct headers h;
    size_t n = 0;

    memset(&h, 0, sizeof(h));
    response_headers(d, collect, &h);
    while (want[2 * n] != NULL)
        n++;
    for (size_t i = 0; i < h.n && i < n; i++) {
        ck_assert_str_eq(h.name[i], want[2 * i]);
        ck_assert_str_eq(h.value[i], want[2 * i + 1]);
    }
    ck_assert_uint_eq(h.n, n);
}

START_TEST(headers_allowed)
{
    struct rl_limit_result r[] = {ok(4, 200), ok(93, 1204000)};
    struct rl_decision d;
    static const char *const want[] = {
        "X-RateLimit-Limit", "10",
        "X-RateLimit-Remaining", "4",
        "X-RateLimit-Reset", "1",
        "RateLimit-Policy", LOGIN_POLICY,
        "RateLimit", "\"login/0\";r=4;t=1",
        NULL,
    };

    decide(&d, &login, 1, 2, r);
    expect_headers(&d, want);
}
END_TEST

START_TEST(headers_denied)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;
    static const char *const want[] = {
        "X-RateLimit-Limit", "10",
        "X-RateLimit-Remaining", "0",
        "X-RateLimit-Reset", "1",
        "RateLimit-Policy", LOGIN_POLICY,
        "RateLimit", "\"login/0\";r=0;t=1",
        "Retry-After", "1",
        NULL,
    };

    decide(&d, &login, 0, 2, r);
    expect_headers(&d, want);
}
END_TEST

START_TEST(headers_round_up)
{
    /* the fixed window binds: w = 3600; 2001 ms is 3 s, 1001 ms is 2 s; on a
     * 429 t names the moment Retry-After does (the draft's SHOULD) */
    struct rl_limit_result r[] = {ok(3, 100), no(0, 2001, 1001)};
    struct rl_decision d;
    static const char *const want[] = {
        "X-RateLimit-Limit", "100",
        "X-RateLimit-Remaining", "0",
        "X-RateLimit-Reset", "3",
        "RateLimit-Policy", LOGIN_POLICY,
        "RateLimit", "\"login/1\";r=0;t=2",
        "Retry-After", "2",
        NULL,
    };

    decide(&d, &login, 0, 2, r);
    expect_headers(&d, want);

    /* gcra 30 per 1500 ms, burst 45: 45 granted in 2250 ms, which w (whole
     * seconds) cannot say: left out, not rounded; exactly 3000 ms is 3 s */
    struct rl_limit_result r2[] = {ok(9, 0), ok(9, 0), no(0, 3000, 3000), ok(9, 0)};
    static const char *const want2[] = {
        "X-RateLimit-Limit", "45",
        "X-RateLimit-Remaining", "0",
        "X-RateLimit-Reset", "3",
        "RateLimit-Policy", FOUR_POLICY,
        "RateLimit", "\"four/2\";r=0;t=3",
        "Retry-After", "3",
        NULL,
    };
    decide(&d, &four, 0, 4, r2);
    expect_headers(&d, want2);
}
END_TEST

START_TEST(headers_retry_after_never_zero)
{
    /* denied with nothing to wait for (cost never fits, already reset):
     * the time the bucket takes to fill (10 at 5 per second), not 0 */
    struct rl_limit_result r[] = {no(5, 0, -1), ok(93, 1204000)};
    struct rl_decision d;
    static const char *const want[] = {
        "X-RateLimit-Limit", "10",
        "X-RateLimit-Remaining", "5",
        "X-RateLimit-Reset", "0",
        "RateLimit-Policy", LOGIN_POLICY,
        "RateLimit", "\"login/0\";r=5;t=2",
        "Retry-After", "2",
        NULL,
    };

    decide(&d, &login, 0, 2, r);
    expect_headers(&d, want);

    /* a 1 ms wait is still a whole second */
    struct rl_limit_result r2[] = {no(0, 1, 1), ok(93, 1204000)};
    decide(&d, &login, 0, 2, r2);
    struct headers h;
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    ck_assert_uint_eq(h.n, 6);
    ck_assert_str_eq(h.name[5], "Retry-After");
    ck_assert_str_eq(h.value[5], "1");
}
END_TEST

START_TEST(headers_shadow_has_no_retry_after)
{
    struct rl_limit_result r[] = {no(0, 740, 740), ok(93, 1204000)};
    struct rl_decision d;
    static const char *const want[] = {
        "X-RateLimit-Limit", "10",
        "X-RateLimit-Remaining", "0",
        "X-RateLimit-Reset", "1",
        "RateLimit-Policy", LOGIN_POLICY,
        "RateLimit", "\"login/0\";r=0;t=1",
        NULL,
    };

    decide(&d, &login_shadow, 0, 2, r);
    expect_headers(&d, want);
}
END_TEST

START_TEST(headers_none_without_policy)
{
    static const char *const none[] = {NULL};
    struct rl_decision d;

    response_no_policy(&d);
    expect_headers(&d, none);
}
END_TEST

/* Nothing counted: the policy is known, the numbers are not; a 503 says when
 * to come back */
START_TEST(headers_degraded_and_closed)
{
    static const char *const open[] = {"RateLimit-Policy", LOGIN_POLICY, NULL};
    static const char *const closed[] = {
        "RateLimit-Policy", FOUR_POLICY,
        "Retry-After", "1",
        NULL,
    };
    struct rl_decision d;

    response_degraded_open(&d, &login);
    expect_headers(&d, open);
    closed_decision(&d, &four);
    expect_headers(&d, closed);
    /* pk, when configured, is known too */
    closed_decision(&d, &four);
    d.has_pk = 1;
    d.pk = 0x0123456789abcdefULL;
    struct headers h;
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    ck_assert_uint_eq(h.n, 2);
    ck_assert_str_eq(h.value[0], "\"four/0\";q=10;w=1;pk=:ASNFZ4mrze8=:, "
                                 "\"four/1\";q=20;w=2;pk=:ASNFZ4mrze8=:, "
                                 "\"four/2\";q=45;pk=:ASNFZ4mrze8=:, "
                                 "\"four/3\";q=40;w=60;pk=:ASNFZ4mrze8=:");
}
END_TEST

/* The longest header lines a valid config can produce (8 limits, 64-byte
 * name, the largest numbers, pk, the Unix time) fit RESPONSE_POLICY_MAX per
 * value and RESPONSE_HEADERS_MAX in all, as api.c writes them. */
struct lines {
    struct strbuf sb;
    size_t longest;
};

static void
as_lines(const char *name, const char *value, void *arg)
{
    struct lines *l = arg;

    if (strlen(value) > l->longest)
        l->longest = strlen(value);
    sb_str(&l->sb, name);
    sb_str(&l->sb, ": ");
    sb_str(&l->sb, value);
    sb_str(&l->sb, "\r\n");
}

START_TEST(headers_worst_case_fit)
{
    static char buf[RESPONSE_HEADERS_MAX];
    struct rl_policy p;
    struct rl_decision d;
    struct lines out;

    worst_case(&p, &d, 1000, 0); /* whole seconds: every item has its w */
    d.has_pk = 1;
    d.pk = UINT64_MAX;
    d.reset_epoch = 1;
    memset(&out, 0, sizeof(out));
    sb_init(&out.sb, buf, sizeof(buf));
    response_headers(&d, as_lines, &out);
    ck_assert_msg(sb_ok(&out.sb), "the header lines need more than %d bytes",
                  RESPONSE_HEADERS_MAX);
    ck_assert_uint_lt(out.longest, RESPONSE_POLICY_MAX - 1);
    /* every limit is listed, each with its whole window and pk */
    ck_assert_ptr_nonnull(strstr(buf, "/7\";q=1000000000;w=31622393;pk=://////////8=:\r\n"));
}
END_TEST

START_TEST(headers_longest_values_whole)
{
    static struct rl_limit l[] = {{RL_ALGO_TOKEN_BUCKET, 1000000000,
                                   366LL * 24 * 3600 * 1000, 1000000000, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    static char name[RL_NAME_MAX + 1];
    struct rl_policy p;
    struct rl_limit_result r[] = {no(999999999, 31622399999, 31622399001)};
    struct rl_decision d;
    char policy[256], rl[256];

    memset(name, 'z', RL_NAME_MAX);
    memset(&p, 0, sizeof(p));
    p.name = name;
    p.limits = l;
    p.nlimits = 1;
    decide(&d, &p, 0, 1, r);
    snprintf(policy, sizeof(policy), "\"%s\";q=1000000000;w=31622400", name);
    snprintf(rl, sizeof(rl), "\"%s\";r=999999999;t=31622400", name);
    const char *const want[] = {
        "X-RateLimit-Limit", "1000000000",
        "X-RateLimit-Remaining", "999999999",
        "X-RateLimit-Reset", "31622400",
        "RateLimit-Policy", policy,
        "RateLimit", rl,
        "Retry-After", "31622400",
        NULL,
    };
    expect_headers(&d, want);
}
END_TEST

/* Every algorithm: remaining never above the advertised quota, w exact or
 * absent, q what can be spent at once. */
START_TEST(headers_every_algorithm)
{
    static const struct {
        struct rl_limit l;
        int64_t remaining;
        const char *limit, *remaining_s, *policy;
    } cases[] = {
        {{RL_ALGO_FIXED_WINDOW, 5, 1000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 5, "5", "5", "\"p\";q=5;w=1"},
        {{RL_ALGO_SLIDING_WINDOW_LOG, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 2, "5", "2", "\"p\";q=5;w=60"},
        {{RL_ALGO_SLIDING_WINDOW_COUNTER, 5, 2000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 0, "5", "0", "\"p\";q=5;w=2"},
        /* the case: 5 per second, burst 10, 9 left: said as 10 */
        {{RL_ALGO_TOKEN_BUCKET, 5, 1000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 9, "10", "9", "\"p\";q=10;w=2"},
        {{RL_ALGO_GCRA, 5, 1000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 10, "10", "10", "\"p\";q=10;w=2"},
        /* sub-second and non-whole windows: no w, rather than a wrong one */
        {{RL_ALGO_FIXED_WINDOW, 5, 500, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 4, "5", "4", "\"p\";q=5"},
        {{RL_ALGO_SLIDING_WINDOW_LOG, 5, 1500, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 4, "5", "4", "\"p\";q=5"},
        {{RL_ALGO_TOKEN_BUCKET, 4, 500, 4, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 4, "4", "4", "\"p\";q=4"},
        {{RL_ALGO_GCRA, 2, 500, 4, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 3, "4", "3", "\"p\";q=4;w=1"},
        /* a backend answer above the quota (never expected) is capped */
        {{RL_ALGO_TOKEN_BUCKET, 5, 1000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, 7, "5", "5", "\"p\";q=5;w=1"},
    };
    static char pname[] = "p";

    for (size_t i = 0; i < RL_ARRAY_LEN(cases); i++) {
        struct rl_limit l = cases[i].l;
        struct rl_policy p = {.name = pname, .limits = &l, .nlimits = 1};
        struct rl_limit_result r[] = {ok(cases[i].remaining, 100)};
        struct rl_decision d;
        const char *const want[] = {
            "X-RateLimit-Limit", cases[i].limit,
            "X-RateLimit-Remaining", cases[i].remaining_s,
            "X-RateLimit-Reset", "1",
            "RateLimit-Policy", cases[i].policy,
            "RateLimit", NULL,
        };
        struct headers h;

        decide(&d, &p, 1, 1, r);
        memset(&h, 0, sizeof(h));
        response_headers(&d, collect, &h);
        ck_assert_uint_eq(h.n, 5);
        for (size_t k = 0; k < 4; k++) {
            ck_assert_str_eq(h.name[k], want[2 * k]);
            ck_assert_msg(strcmp(h.value[k], want[2 * k + 1]) == 0, "case %zu: %s: %s, not %s",
                          i, h.name[k], h.value[k], want[2 * k + 1]);
        }
        ck_assert_int_le(d.remaining, d.limit);
    }
}
END_TEST

/* Denials of every algorithm: Retry-After >= 1 and retry_after_ms > 0. */
START_TEST(denials_never_say_zero)
{
    static const struct rl_limit ls[] = {
        {RL_ALGO_FIXED_WINDOW, 5, 500, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
        {RL_ALGO_SLIDING_WINDOW_LOG, 5, 1000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
        {RL_ALGO_SLIDING_WINDOW_COUNTER, 5, 1000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
        {RL_ALGO_TOKEN_BUCKET, 5, 1000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
        {RL_ALGO_GCRA, 5, 200, 1, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
    };
    static const int64_t waits[] = {-1, 0, 1};
    static char pname[] = "p";

    for (size_t i = 0; i < RL_ARRAY_LEN(ls); i++) {
        for (size_t w = 0; w < RL_ARRAY_LEN(waits); w++) {
            struct rl_limit l = ls[i];
            struct rl_policy p = {.name = pname, .limits = &l, .nlimits = 1};
            struct rl_limit_result r[] = {no(0, 0, waits[w])};
            struct rl_decision d;
            struct headers h;
            decide(&d, &p, 0, 1, r);
            ck_assert_int_gt(d.retry_after_ms, 0);
            ck_assert_int_eq(d.never_fits, waits[w] < 0);
            memset(&h, 0, sizeof(h));
            response_headers(&d, collect, &h);
            ck_assert_uint_eq(h.n, 6);
            ck_assert_str_eq(h.name[5], "Retry-After");
            ck_assert_int_ge(atoll(h.value[5]), 1);
        }
    }
}
END_TEST

/* x_ratelimit_reset "epoch": the Unix time of the reset, as GitHub says it */
START_TEST(headers_reset_epoch)
{
    struct rl_limit_result r[] = {no(0, 2500, 2500), ok(93, 1204000)};
    struct rl_decision d;
    struct headers h;

    decide(&d, &login, 0, 2, r);
    d.reset_epoch = 1;
    int64_t before = (int64_t)time(NULL);
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    int64_t after = (int64_t)time(NULL);
    ck_assert_str_eq(h.name[2], "X-RateLimit-Reset");
    ck_assert_int_ge(atoll(h.value[2]), before + 3);
    ck_assert_int_le(atoll(h.value[2]), after + 3);
    /* the draft's t stays delta seconds */
    ck_assert_str_eq(h.value[4], "\"login/0\";r=0;t=3");
}
END_TEST

/* partition_key: pk, the caller's partition hashed, as a Byte Sequence */
START_TEST(headers_partition_key)
{
    struct rl_limit_result r[] = {ok(4, 200), ok(93, 1204000)};
    struct rl_decision d;
    struct headers h;

    decide(&d, &login, 1, 2, r);
    d.has_pk = 1;
    d.pk = 0x0123456789abcdefULL;
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    /* base64 of 01 23 45 67 89 ab cd ef */
    ck_assert_str_eq(h.value[3], "\"login/0\";q=10;w=2;pk=:ASNFZ4mrze8=:, "
                                 "\"login/1\";q=100;w=3600;pk=:ASNFZ4mrze8=:");
    ck_assert_str_eq(h.value[4], "\"login/0\";r=4;t=1;pk=:ASNFZ4mrze8=:");
    d.pk = 0;
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    ck_assert_str_eq(h.value[4], "\"login/0\";r=4;t=1;pk=:AAAAAAAAAAA=:");
    d.pk = UINT64_MAX;
    memset(&h, 0, sizeof(h));
    response_headers(&d, collect, &h);
    ck_assert_str_eq(h.value[4], "\"login/0\";r=4;t=1;pk=://////////8=:");
}
END_TEST

START_TEST(seconds_round_up)
{
    ck_assert_int_eq(response_seconds(0), 0);
    ck_assert_int_eq(response_seconds(-1), 0);
    ck_assert_int_eq(response_seconds(-5000), 0);
    ck_assert_int_eq(response_seconds(1), 1);
    ck_assert_int_eq(response_seconds(999), 1);
    ck_assert_int_eq(response_seconds(1000), 1);
    ck_assert_int_eq(response_seconds(1001), 2);
    ck_assert_int_eq(response_seconds(59999), 60);
    ck_assert_int_eq(response_seconds(60000), 60);
    ck_assert_int_eq(response_seconds(31622400000LL), 31622400);
    /* rounding up must not overflow: ceil((2^63 - 1) / 1000) */
    ck_assert_int_eq(response_seconds(INT64_MAX), 9223372036854776LL);
    ck_assert_int_eq(response_seconds(INT64_MAX - 807), 9223372036854775LL);
}
END_TEST

/* ---- a policy's rendered text (policy_text.h) ------------------------------------ */

static struct rl_limit lease_limits[] = {
    {RL_ALGO_CONCURRENCY, 3, 30000, 3, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 30000, 0},
    {RL_ALGO_FIXED_WINDOW, 7, 500, 7, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
};
static struct rl_limit one_limit[] = {
    {RL_ALGO_FIXED_WINDOW, 1000000000, 3600000, 1000000000, RL_ALIGN_FIRST, {0, 0, NULL}, NULL,
     0, 0},
};

/* Every quota header line, then the body: what an HTTP answer carries. */
static void
render(const struct rl_decision *d, char *out, size_t size)
{
    char body[8192];
    struct strbuf sb;

    sb_init(&sb, out, size);
    response_header_lines(d, &sb);
    response_body(d, body, sizeof(body));
    sb_str(&sb, "|");
    sb_str(&sb, body);
    ck_assert(sb_ok(&sb));
}

/* The decision of variant v of a check under p (limits each allowing, or
 * the last denying): every option the answer has. */
static int
variant(struct rl_decision *d, const struct rl_policy *p, int v)
{
    struct rl_limit_result r[RL_LIMITS_MAX];
    int deny = v % 2;

    for (size_t i = 0; i < p->nlimits; i++)
        r[i] = deny && i == p->nlimits - 1 ? no(0, 1500 + (int64_t)i, 900 + (int64_t)i)
                                           : ok(p->limits[i].limit - 1 - (int64_t)i, 1000);
    decide(d, p, !deny, p->nlimits, r);
    switch (v / 2) {
    case 0: break;
    case 1: d->shadow = 1; d->would_deny = deny; d->allowed = 1; d->status = 200; break;
    case 2: d->charge = 1; d->charged = 4; d->overdraft = 2; d->limits[0].overdraft = 2; break;
    case 3: d->has_pk = 1; d->pk = 0x0123456789abcdefULL; break;
    case 4: d->reset_epoch = 1; break;
    case 5: d->delayed_ms = 250; d->reservation = "r.abc"; break;
    case 6: d->lease = "0123abcd.1"; break;
    case 7: d->limit = 2; break; /* not the binding limit's capacity */
    case 8: d->remaining = 10000000000LL; d->limits[d->binding].remaining = 3; break;
    case 9: response_degraded_open(d, p); break;
    case 10: response_degraded_open(d, p); d->status = 503; d->allowed = 0; break;
    case 11: response_degraded_open(d, p); d->status = 503; d->has_pk = 1; d->pk = 7; break;
    case 12: d->settle = 1; d->settled = 1; break;
    case 13: d->never_fits = 1; d->blocked = deny; break;
    default: return 0;
    }
    return 1;
}

/* A policy's answers are the same bytes with its text rendered at load as
 * without (a check's own limits, a copy of a policy). */
START_TEST(text_same_bytes)
{
    static char name_one[] = "bench", name_lease[] = "lease";
    struct rl_policy ps[] = {
        {.name = name_login, .limits = login_limits, .nlimits = 2},
        {.name = name_four, .limits = four_limits, .nlimits = 4},
        {.name = name_lease, .limits = lease_limits, .nlimits = 2},
        {.name = name_one, .limits = one_limit, .nlimits = 1},
    };
    static char without[16384], with[16384];

    for (size_t k = 0; k < RL_ARRAY_LEN(ps); k++) {
        struct rl_policy *p = &ps[k], copy;
        struct rl_decision d;
        int v;

        for (v = 0; variant(&d, p, v); v++) {
            ck_assert_ptr_null(policy_text_of(p));
            render(&d, without, sizeof(without));
            policy_text_build(p);
            ck_assert_ptr_nonnull(policy_text_of(p));
            variant(&d, p, v);
            render(&d, with, sizeof(with));
            ck_assert_msg(strcmp(with, without) == 0, "policy %s, variant %d:\n%s\nagainst\n%s",
                          p->name, v, with, without);
            /* a copy has its own limits, maybe: it renders them */
            copy = *p;
            ck_assert_ptr_null(policy_text_of(&copy));
            free(p->text);
            p->text = NULL;
        }
        ck_assert_int_gt(v, 20);
    }
}
END_TEST

/* The callback's headers are the lines' */
START_TEST(text_lines_as_callback)
{
    static char lines[8192];
    struct rl_decision d;
    struct lines out;
    struct strbuf sb;

    for (int v = 0; variant(&d, &login, v); v++) {
        memset(&out, 0, sizeof(out));
        sb_init(&out.sb, (char[8192]){0}, 8192);
        response_headers(&d, as_lines, &out);
        sb_init(&sb, lines, sizeof(lines));
        response_header_lines(&d, &sb);
        ck_assert_str_eq(out.sb.buf, lines);
    }
}
END_TEST

static Suite *
response_suite(void)
{
    Suite *s = suite_create("response");
    TCase *tc;

    tc = tcase_create("decision");
    tcase_add_test(tc, binding_all_allow_least_remaining);
    tcase_add_test(tc, binding_all_allow_equal_is_first);
    tcase_add_test(tc, binding_the_denying_one);
    tcase_add_test(tc, binding_largest_retry_among_denying);
    tcase_add_test(tc, binding_never_fits_outranks);
    tcase_add_test(tc, binding_single_limit);
    tcase_add_test(tc, shadow_decision);
    tcase_add_test(tc, no_policy_and_degraded_decisions);
    suite_add_tcase(s, tc);

    tc = tcase_create("text");
    tcase_add_test(tc, text_same_bytes);
    tcase_add_test(tc, text_lines_as_callback);
    suite_add_tcase(s, tc);

    tc = tcase_create("body");
    tcase_add_test(tc, body_allowed);
    tcase_add_test(tc, body_denied);
    tcase_add_test(tc, body_denied_never_fits);
    tcase_add_test(tc, body_denied_blocked);
    tcase_add_test(tc, body_shadow);
    tcase_add_test(tc, body_degraded_open);
    tcase_add_test(tc, body_closed);
    tcase_add_test(tc, body_no_policy);
    tcase_add_test(tc, body_gcra_and_windows);
    tcase_add_test(tc, body_truncation_never_overflows);
    tcase_add_test(tc, strbuf_numbers_and_cuts);
    tcase_add_test(tc, body_worst_case_fits_http_buffer);
    suite_add_tcase(s, tc);

    tc = tcase_create("headers");
    tcase_add_test(tc, headers_allowed);
    tcase_add_test(tc, headers_denied);
    tcase_add_test(tc, headers_round_up);
    tcase_add_test(tc, headers_retry_after_never_zero);
    tcase_add_test(tc, headers_shadow_has_no_retry_after);
    tcase_add_test(tc, headers_none_without_policy);
    tcase_add_test(tc, headers_degraded_and_closed);
    tcase_add_test(tc, headers_worst_case_fit);
    tcase_add_test(tc, headers_longest_values_whole);
    tcase_add_test(tc, headers_every_algorithm);
    tcase_add_test(tc, denials_never_say_zero);
    tcase_add_test(tc, headers_reset_epoch);
    tcase_add_test(tc, headers_partition_key);
    tcase_add_test(tc, seconds_round_up);
    suite_add_tcase(s, tc);

    return s;
}

int
main(void)
{
    return rl_unit_run(response_suite(), CK_FORK_GETENV);
}
