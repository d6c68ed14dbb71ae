/*
 * check_pathnorm.c — the path normaliser against RFC 3986: the dot-segment
 * examples of §5.2.4 and §5.4, the escapes of §2.3/§6.2.2, merged slashes,
 * and the paths it must refuse rather than guess.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "pathnorm.h"
#include "util.h"

struct ok_case {
    const char *in, *out;
    unsigned flags;
};

static const struct ok_case ok_cases[] = {
    /* §5.2.4: remove_dot_segments("/a/b/c/./../../g") */
    {"/a/b/c/./../../g", "/a/g", 0},
    /* §5.4.1 normal examples, resolved against http://a/b/c/d;p?q */
    {"/b/c/./g", "/b/c/g", 0},
    {"/b/c/.", "/b/c/", 0},
    {"/b/c/./", "/b/c/", 0},
    {"/b/c/..", "/b/", 0},
    {"/b/c/../", "/b/", 0},
    {"/b/c/../g", "/b/g", 0},
    {"/b/c/../..", "/", 0},
    {"/b/c/../../", "/", 0},
    {"/b/c/../../g", "/g", 0},
    /* §5.4.2 abnormal examples: dots that are not whole segments stay */
    {"/b/c/g.", "/b/c/g.", 0},
    {"/b/c/.g", "/b/c/.g", 0},
    {"/b/c/g..", "/b/c/g..", 0},
    {"/b/c/..g", "/b/c/..g", 0},
    {"/b/c/./../g", "/b/g", 0},
    {"/b/c/./g/.", "/b/c/g/", 0},
    {"/b/c/g/./h", "/b/c/g/h", 0},
    {"/b/c/g/../h", "/b/c/h", 0},
    {"/b/c/g;x=1/./y", "/b/c/g;x=1/y", 0},
    {"/b/c/g;x=1/../y", "/b/c/y", 0},
    /* §6.2.2.2: escapes of unreserved characters are the characters */
    {"/%61pi/items", "/api/items", 0},
    {"/%7Euser/%2d%2E%5f", "/~user/-._", 0},
    {"/%41%42%43%30%39", "/ABC09", 0},
    /* §6.2.2.1: other escapes stay, their hex upper-cased */
    {"/a%20b/%3a%3B", "/a%20b/%3A%3B", 0},
    {"/caf%c3%a9", "/caf%C3%A9", 0},
    /* decoded dots are dot segments (decoding comes first, §6.2.2 order) */
    {"/api/%2e/items", "/api/items", 0},
    {"/x/%2E%2E/api/items", "/api/items", 0},
    /* merged slashes */
    {"//api/items", "/api/items", 0},
    {"/api///items//", "/api/items/", 0},
    {"/./api/items", "/api/items", 0},
    {"/", "/", 0},
    {"//", "/", 0},
    {"/.", "/", 0},
    {"/a/..", "/", 0},
    /* ... or not, on request */
    {"//api/items", "//api/items", RL_PATHNORM_KEEP_SLASHES},
    {"/api//items/./", "/api//items/", RL_PATHNORM_KEEP_SLASHES},
    {"/a//../b", "/a/b", RL_PATHNORM_KEEP_SLASHES},
    /* what the policy patterns look like: '*' is a path character */
    {"/api/*/items", "/api/*/items", 0},
    {"/api/", "/api/", 0},
};

START_TEST(normalises)
{
    const struct ok_case *c = &ok_cases[_i];
    size_t len = strlen(c->in), olen = 99;
    char *out = xmalloc(len + 1);
    char *cause = NULL;

    ck_assert_msg(pathnorm(c->in, len, c->flags, out, &olen, &cause) == RL_OK,
                  "%s: %s", c->in, cause ? cause : "?");
    ck_assert_str_eq(out, c->out);
    ck_assert_uint_eq(olen, strlen(c->out));
    /* canonical: normalising again changes nothing */
    char *again = xmalloc(olen + 1);
    size_t alen;
    ck_assert_int_eq(pathnorm(out, olen, c->flags, again, &alen, &cause), RL_OK);
    ck_assert_str_eq(again, out);
    free(again);
    free(out);
}
END_TEST

struct bad_case {
    const char *in;
    size_t len;             /* 0: strlen */
    const char *cause;      /* a word of the reason */
};

static const struct bad_case bad_cases[] = {
    {"/api%2Fitems", 0, "%2F"},
    {"/api%2fitems", 0, "%2F"},
    {"/api/items%00", 0, "%00"},
    {"/api/\0items", 10, "NUL"},
    {"/..", 0, "above the root"},
    {"/../api/items", 0, "above the root"},
    {"/a/../../api", 0, "above the root"},
    {"/%2e%2e/api", 0, "above the root"},
    {"/api/%", 0, "hex"},
    {"/api/%4", 0, "hex"},
    {"/api/%zz", 0, "hex"},
    {"/api/%4g", 0, "hex"},
    {"api", 0, "'/'"},
    {"", 0, "'/'"},
};

START_TEST(refuses)
{
    const struct bad_case *c = &bad_cases[_i];
    size_t len = c->len ? c->len : strlen(c->in), olen;
    char *out = xmalloc(len + 1);
    char *cause = NULL;

    ck_assert_msg(pathnorm(c->in, len, 0, out, &olen, &cause) == RL_ERR, "%s", c->in);
    ck_assert_ptr_nonnull(cause);
    ck_assert_msg(strstr(cause, c->cause) != NULL, "%s: %s", c->in, cause);
    free(cause);
    free(out);
}
END_TEST

/* Never longer than the input, never past its buffer (ASan watches). */
START_TEST(never_longer)
{
    static const char *const in[] = {
        "/%41", "/%e2%82%ac", "/a/./b/../c//d", "/~%7e", "/" , "/%2E",
    };
    for (size_t i = 0; i < RL_ARRAY_LEN(in); i++) {
        size_t len = strlen(in[i]), olen;
        char *out = xmalloc(len + 1);
        char *cause = NULL;
        ck_assert_int_eq(pathnorm(in[i], len, 0, out, &olen, &cause), RL_OK);
        ck_assert_uint_le(olen, len);
        free(out);
    }
}
END_TEST

START_TEST(folds)
{
    static const struct {
        const char *in;
        unsigned folds;
        const char *out;
    } c[] = {
        {"/Login", RL_PATHFOLD_CASE, "/login"},
        {"/LOGIN%2F", RL_PATHFOLD_CASE, "/login%2f"},
        {"/login;jsessionid=X", RL_PATHFOLD_PARAMS, "/login"},
        {"/a;x=1/b;y/c", RL_PATHFOLD_PARAMS, "/a/b/c"},
        {"/A;X/B", RL_PATHFOLD_PARAMS | RL_PATHFOLD_CASE, "/a/b"},
        {"/login;x", 0, "/login;x"},
        {"/Login", 0, "/Login"},
        {"/", RL_PATHFOLD_CASE | RL_PATHFOLD_PARAMS, "/"},
        {"/;x", RL_PATHFOLD_PARAMS, "/"},
    };

    for (size_t i = 0; i < RL_ARRAY_LEN(c); i++) {
        char buf[64];
        size_t n;

        snprintf(buf, sizeof(buf), "%s", c[i].in);
        n = pathnorm_fold(buf, strlen(buf), c[i].folds);
        ck_assert_uint_eq(n, strlen(c[i].out));
        ck_assert_msg(memcmp(buf, c[i].out, n) == 0, "%s folded: %.*s, expected %s", c[i].in,
                      (int)n, buf, c[i].out);
    }
}
END_TEST

static Suite *
pathnorm_suite(void)
{
    Suite *s = suite_create("pathnorm");
    TCase *tc = tcase_create("pathnorm");

    tcase_add_loop_test(tc, normalises, 0, (int)RL_ARRAY_LEN(ok_cases));
    tcase_add_loop_test(tc, refuses, 0, (int)RL_ARRAY_LEN(bad_cases));
    tcase_add_test(tc, never_longer);
    tcase_add_test(tc, folds);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(pathnorm_suite(), CK_FORK_GETENV);
}
