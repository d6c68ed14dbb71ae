/*
 * check_deny_cache.c — the local cache of denials on its own, with the clock
 * handed in: a denial is answered until its retry time (taken from when the
 * check was sent), only for the same policy, key, cost and backend epoch; a
 * policy of a reloaded config never sees an old policy's denial, even at
 * the same address; a cost that can never fit is not cached.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "backend.h"
#include "config.h"
#include "deny_cache.h"

#define SEC 1000000LL

static struct rl_check_res
denial(int64_t retry_ms, int64_t reset_ms)
{
    struct rl_check_res r;

    memset(&r, 0, sizeof(r));
    r.status = RL_BACKEND_OK;
    r.allowed = 0;
    r.nlimits = 1;
    r.limits[0].allowed = 0;
    r.limits[0].remaining = 0;
    r.limits[0].retry_after_ms = retry_ms;
    r.limits[0].reset_ms = reset_ms;
    return r;
}

START_TEST(hit_until_retry_then_miss)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(2000, 5000), out;

    deny_cache_put(c, 7, "k", 1, 1, 1, 10 * SEC, &in);
    ck_assert(deny_cache_get(c, 7, "k", 1, 1, 1, 10 * SEC, &out));
    ck_assert_int_eq(out.allowed, 0);
    ck_assert_int_eq(out.limits[0].retry_after_ms, 2000);
    /* half a second later the numbers are half a second shorter */
    ck_assert(deny_cache_get(c, 7, "k", 1, 1, 1, 10 * SEC + SEC / 2, &out));
    ck_assert_int_eq(out.limits[0].retry_after_ms, 1500);
    ck_assert_int_eq(out.limits[0].reset_ms, 4500);
    /* the denial ends 1 ms early, never late */
    ck_assert(!deny_cache_get(c, 7, "k", 1, 1, 1, 12 * SEC - 1000, &out));
    ck_assert(!deny_cache_get(c, 7, "k", 1, 1, 1, 12 * SEC, &out));
    deny_cache_free(c);
}
END_TEST

START_TEST(only_the_same_check)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(60000, 60000), out;

    deny_cache_put(c, 7, "key", 3, 2, 5, 0, &in);
    ck_assert(deny_cache_get(c, 7, "key", 3, 2, 5, SEC, &out));
    ck_assert(!deny_cache_get(c, 7, "key", 3, 1, 5, SEC, &out));    /* cost */
    ck_assert(!deny_cache_get(c, 7, "key", 3, 2, 6, SEC, &out));    /* epoch */
    ck_assert(!deny_cache_get(c, 7, "kez", 3, 2, 5, SEC, &out));    /* key */
    ck_assert(!deny_cache_get(c, 7, "ke", 2, 2, 5, SEC, &out));     /* length */
    deny_cache_free(c);
}
END_TEST

/* Two keys whose entries (7, a), (7, b) and (8, a) fall in three slots of
 * a table of `slots`: the table is direct-mapped under the process's random
 * hash key, so fixed keys would share a slot in about one run in twenty
 * (and a put into a shared slot replaces the other entry). */
static void
keys_apart(size_t slots, char *a, char *b, size_t size)
{
    for (unsigned i = 0;; i++) {
        snprintf(a, size, "a%u", i);
        snprintf(b, size, "b%u", i);
        uint64_t sa = deny_cache_hash(7, a, strlen(a)) & (slots - 1);
        uint64_t sb = deny_cache_hash(7, b, strlen(b)) & (slots - 1);
        uint64_t s8 = deny_cache_hash(8, a, strlen(a)) & (slots - 1);
        if (sa != sb && sa != s8 && sb != s8)
            return;
    }
}

/* An admin action changed the key's state: its denial ends at once, and
 * only its own (another key, the same key under another policy stay). */
START_TEST(forget_ends_that_denial_only)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(60000, 60000), out;
    char a[16], b[16];

    keys_apart(64, a, b, sizeof(a));
    size_t al = strlen(a), bl = strlen(b);
    deny_cache_put(c, 7, a, al, 1, 1, 0, &in);
    deny_cache_put(c, 7, b, bl, 1, 1, 0, &in);
    deny_cache_put(c, 8, a, al, 1, 1, 0, &in);
    deny_cache_forget(c, 7, a, al);
    ck_assert(!deny_cache_get(c, 7, a, al, 1, 1, SEC, &out));
    ck_assert(deny_cache_get(c, 7, b, bl, 1, 1, SEC, &out));
    ck_assert(deny_cache_get(c, 8, a, al, 1, 1, SEC, &out));
    deny_cache_forget(c, 7, "zz", 2);       /* nothing cached: nothing happens */
    /* a later denial of the forgotten key is cached again */
    deny_cache_put(c, 7, a, al, 1, 1, 2 * SEC, &in);
    ck_assert(deny_cache_get(c, 7, a, al, 1, 1, 3 * SEC, &out));
    deny_cache_free(c);
}
END_TEST

/* A blocked caller's denial lasts as long as the block, but an unblock
 * through another daemon must reach this one: kept a second at most, the
 * numbers answered still the backend's (shortened by the time elapsed). */
START_TEST(blocked_denial_kept_a_second)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(600000, 600000), out;

    in.blocked_ms = 600000;
    deny_cache_put(c, 7, "k", 1, 1, 1, 0, &in);
    ck_assert(deny_cache_get(c, 7, "k", 1, 1, 1, SEC / 2, &out));
    ck_assert_int_eq(out.limits[0].retry_after_ms, 599500);
    ck_assert(!deny_cache_get(c, 7, "k", 1, 1, 1, DENY_CACHE_BLOCKED_MS * 1000LL, &out));
    /* a denial by the limits alone keeps its whole wait */
    in.blocked_ms = 0;
    deny_cache_put(c, 7, "k", 1, 1, 1, 0, &in);
    ck_assert(deny_cache_get(c, 7, "k", 1, 1, 1, 500 * SEC, &out));
    deny_cache_free(c);
}
END_TEST

/* The bug this guards: keyed by the policy's address, a reloaded config's
 * policy allocated where an old one was found the old policy's denials.  Now
 * the key is the uid, which two loads never share (uids_differ_across_loads). */
START_TEST(reloaded_policy_is_another_policy)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(60000, 60000), out;

    deny_cache_put(c, 41, "k", 1, 1, 1, 0, &in);
    ck_assert(deny_cache_get(c, 41, "k", 1, 1, 1, SEC, &out));
    ck_assert(!deny_cache_get(c, 42, "k", 1, 1, 1, SEC, &out));
    deny_cache_free(c);
}
END_TEST

START_TEST(uids_differ_across_loads)
{
    static const char json[] =
        "{\"policies\":[{\"name\":\"p\",\"limits\":[{\"algorithm\":\"fixed_window\","
        "\"limit\":1,\"window\":\"1s\"}],\"overrides\":[{\"identities\":[\"key:x\"],"
        "\"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":2,\"window\":\"1s\"}]}]}]}";
    char path[] = "/tmp/rl-deny-XXXXXX";
    int fd = mkstemp(path);
    struct rl_errors errs = {0};
    struct rl_config *a = NULL, *b = NULL;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, json, sizeof(json) - 1), (ssize_t)(sizeof(json) - 1));
    close(fd);
    ck_assert_int_eq(config_load_file(path, &a, &errs), RL_OK);
    ck_assert_int_eq(config_load_file(path, &b, &errs), RL_OK);
    unlink(path);
    ck_assert_uint_ne(a->policies[0].uid, 0);
    ck_assert_uint_ne(a->policies[0].uid, b->policies[0].uid);
    ck_assert_uint_ne(a->policies[0].uid, a->policies[0].overrides[0].as_policy->uid);
    ck_assert_uint_ne(a->policies[0].overrides[0].as_policy->uid,
                      b->policies[0].overrides[0].as_policy->uid);
    config_unref(a);
    config_unref(b);
    errors_free(&errs);
}
END_TEST

START_TEST(never_fits_and_short_waits_not_cached)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res never = denial(-1, 3000), brief = denial(1, 1), out;

    deny_cache_put(c, 7, "a", 1, 1, 1, 0, &never);
    ck_assert(!deny_cache_get(c, 7, "a", 1, 1, 1, 1000, &out));
    deny_cache_put(c, 7, "b", 1, 1, 1, 0, &brief);
    ck_assert(!deny_cache_get(c, 7, "b", 1, 1, 1, 0, &out));
    deny_cache_free(c);
}
END_TEST

/* A time the denial has outlived reads 1 ms, never 0 (0 would say "now"),
 * while the denial itself still holds. */
START_TEST(elapsed_times_stop_at_one_ms)
{
    struct rl_deny_cache *c = deny_cache_new(64);
    struct rl_check_res in = denial(2000, 100), out;

    deny_cache_put(c, 7, "k", 1, 1, 1, 0, &in);
    ck_assert(deny_cache_get(c, 7, "k", 1, 1, 1, SEC / 2, &out));
    ck_assert_int_eq(out.limits[0].reset_ms, 1);
    ck_assert_int_eq(out.limits[0].retry_after_ms, 1500);
    deny_cache_free(c);
}
END_TEST

/* Bounded memory: one slot holds one denial, the newest. */
START_TEST(a_newcomer_takes_the_slot)
{
    struct rl_deny_cache *c = deny_cache_new(1);
    struct rl_check_res in = denial(60000, 60000), out;

    deny_cache_put(c, 7, "first", 5, 1, 1, 0, &in);
    deny_cache_put(c, 7, "second-and-longer", 17, 1, 1, 0, &in);
    ck_assert(!deny_cache_get(c, 7, "first", 5, 1, 1, SEC, &out));
    ck_assert(deny_cache_get(c, 7, "second-and-longer", 17, 1, 1, SEC, &out));
    deny_cache_put(c, 7, "first", 5, 1, 1, 0, &in);
    ck_assert(deny_cache_get(c, 7, "first", 5, 1, 1, SEC, &out));
    deny_cache_free(c);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("deny_cache");
    TCase *tc = tcase_create("cache");

    tcase_add_test(tc, hit_until_retry_then_miss);
    tcase_add_test(tc, only_the_same_check);
    tcase_add_test(tc, reloaded_policy_is_another_policy);
    tcase_add_test(tc, uids_differ_across_loads);
    tcase_add_test(tc, never_fits_and_short_waits_not_cached);
    tcase_add_test(tc, elapsed_times_stop_at_one_ms);
    tcase_add_test(tc, a_newcomer_takes_the_slot);
    tcase_add_test(tc, forget_ends_that_denial_only);
    tcase_add_test(tc, blocked_denial_kept_a_second);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
