/*
 * unit.h — what every Check unit test shares: its main, which reports each
 * test in TAP, and the choice of tests to run.  Include it instead of
 * <check.h>:
 *
 *     int main(void) { return rl_unit_run(my_suite(), CK_FORK_GETENV); }
 *
 * - Every test is one TAP line on stdout ("ok 7 - check_x.c:tcase:name:
 *   Passed", "not ok ..." with Check's message), besides Check's usual
 *   summary: `make check` (automake's tap-driver.sh) names the failing test.
 *   CK_TAP_LOG_FILE_NAME, when set, sends the TAP elsewhere, as Check does.
 * - RL_CASE=WORDS runs only the tests whose function name contains WORDS
 *   (case-insensitive), as the integration tests' -k does; Check's own
 *   CK_RUN_SUITE=NAME and CK_RUN_CASE=NAME pick a suite or a TCase by name.
 *   `RL_CASE=slot_of_a_hash_tag tests/unit/check_cluster_slots` runs one.
 */
#ifndef RL_TESTS_UNIT_H
#define RL_TESTS_UNIT_H

#include <check.h>

/* Every tcase_add_*test macro of <check.h> ends in _tcase_add_test: through
 * here, so that RL_CASE leaves the others out of their TCase. */
void rl_unit_add_test(TCase *tc, const TTest *t, int signal, int allowed_exit, int start,
                      int end);
#undef _tcase_add_test
#define _tcase_add_test rl_unit_add_test

/* Runs the suite (fork: CK_FORK_GETENV, i.e. Check's default and CK_FORK,
 * or CK_NOFORK), frees it; EXIT_SUCCESS when no test failed. */
int rl_unit_run(Suite *s, enum fork_status fork);

#endif
