/*
 * check_bufpool.c — bufpool.c's growth policy (a buffer doubles as bytes
 * arrive, never past what the request needs, never from what it only
 * declares) and the pool's bound (a take past it changes nothing).
 */
#include <stdint.h>

#include "unit.h"

#include "bufpool.h"

START_TEST(grows_by_doubling_up_to_the_request)
{
    /* what arrived fits a doubled buffer: doubled, whatever was declared */
    ck_assert_uint_eq(bufpool_next_cap(512, 600, 65541), 1024);
    ck_assert_uint_eq(bufpool_next_cap(1024, 1100, 4194309), 2048);
    ck_assert_uint_eq(bufpool_next_cap(4096, 4097, 0), 8192);
    /* never past the request's own size */
    ck_assert_uint_eq(bufpool_next_cap(32768, 40000, 40005), 40005);
    ck_assert_uint_eq(bufpool_next_cap(512, 520, 700), 700);
    /* a read larger than doubling: exactly what it needs */
    ck_assert_uint_eq(bufpool_next_cap(512, 5000, 65541), 5000);
    ck_assert_uint_eq(bufpool_next_cap(4096, 70000, 0), 70000);
}
END_TEST

START_TEST(a_declared_length_costs_nothing_until_its_bytes_come)
{
    /* a 4 MiB message arriving 16 KiB at a time: every step at most doubles
     * what arrived, so the buffer never holds more than twice the bytes
     * sent (or INLINE_IN's 512 to start with) */
    size_t cap = 512, have = 5, most = 5 + 4 * 1024 * 1024, steps = 0;

    while (have < most) {
        size_t in = have + 16384 > most ? most - have : 16384;
        if (have + in > cap)
            cap = bufpool_next_cap(cap, have + in, most), steps++;
        have += in;
        ck_assert_uint_ge(cap, have);
        ck_assert_uint_le(cap, 2 * have > 1024 ? 2 * have : 1024);
        ck_assert_uint_le(cap, most);
    }
    ck_assert_uint_eq(cap, most);
    ck_assert_uint_le(steps, 14);
}
END_TEST

START_TEST(the_pool_never_passes_its_bound)
{
    int64_t at = bufpool_bytes();

    ck_assert_int_eq(bufpool_take(1000, at + 1500), RL_OK);
    ck_assert_int_eq(bufpool_bytes(), at + 1000);
    /* would pass it: refused, nothing taken */
    ck_assert_int_eq(bufpool_take(501, at + 1500), RL_ERR);
    ck_assert_int_eq(bufpool_bytes(), at + 1000);
    ck_assert_int_eq(bufpool_take(500, at + 1500), RL_OK);
    ck_assert_int_eq(bufpool_bytes(), at + 1500);
    bufpool_give(1500);
    ck_assert_int_eq(bufpool_bytes(), at);
}
END_TEST

static Suite *
bufpool_suite(void)
{
    Suite *s = suite_create("bufpool");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, grows_by_doubling_up_to_the_request);
    tcase_add_test(tc, a_declared_length_costs_nothing_until_its_bytes_come);
    tcase_add_test(tc, the_pool_never_passes_its_bound);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(bufpool_suite(), CK_FORK_GETENV);
}
