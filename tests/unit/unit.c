/*
 * unit.c — the runner every Check unit test shares (see unit.h).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "unit.h"

/* The real one: unit.h's macro is not wanted here. */
#undef _tcase_add_test

/* Whether `name` contains `words`, case-insensitively. */
static int
unit_matches(const char *name, const char *words)
{
    size_t n = strlen(words);

    for (; *name != '\0'; name++)
        if (strncasecmp(name, words, n) == 0)
            return 1;
    return n == 0;
}

void
rl_unit_add_test(TCase *tc, const TTest *t, int signal, int allowed_exit, int start, int end)
{
    const char *words = getenv("RL_CASE");

    if (words != NULL && *words != '\0' && !unit_matches(t->name, words))
        return;
    _tcase_add_test(tc, t, signal, allowed_exit, start, end);
}

int
rl_unit_run(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    int failed;

    /* TAP on stdout unless the environment names another file */
    if (getenv("CK_TAP_LOG_FILE_NAME") == NULL)
        srunner_set_tap(sr, "-");
    if (fork != CK_FORK_GETENV)
        srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
