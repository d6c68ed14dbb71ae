/*
 * fuzz_config.c — libFuzzer target: a config file as config_load_file reads
 * it (the input is written to a file under /dev/shm, then loaded).
 *
 * A config that loads is also validated, compared with the defaults as a
 * reload would (config_keep_restart_options), and its policies are matched
 * against a few paths, so fuzzed globs and prefixes run too.
 * Oracles besides ASan/UBSan: a refused config carries at least one problem,
 * each a non-empty message; a loaded one carries none.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "policy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static struct rl_config *defaults;

static void
check_errors(const struct rl_errors *e, size_t from)
{
    for (size_t i = from; i < e->n; i++)
        if (e->msg[i] == NULL || e->msg[i][0] == '\0')
            abort();
}

static void
remove_file(void)
{
    unlink(path);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(path, sizeof(path), "/dev/shm/rl-fuzz-config-%d.json", (int)getpid());
    atexit(remove_file);
    defaults = config_new_defaults();
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const paths[] = {"/", "/login", "/login/x", "/api/v1/items",
                                        "/api/v1/itemsX", "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"};
    struct rl_errors errs = {0};
    struct rl_config *cfg = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd < 0 || write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    if (config_load_file(path, &cfg, &errs) != RL_OK) {
        if (cfg != NULL || errs.n == 0)
            abort();
        check_errors(&errs, 0);
        errors_free(&errs);
        return 0;
    }
    if (cfg == NULL || errs.n != 0)
        abort();
    if (config_validate(cfg, &errs) != RL_OK && errs.n == 0)
        abort();
    check_errors(&errs, 0);
    errors_free(&errs);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        const struct rl_policy *p = policy_match(cfg->policies, cfg->npolicies, cfg->path_fold,
                                                 paths[i], strlen(paths[i]), RL_M_POST);
        if (p != NULL && config_policy(cfg, p->name) == NULL)
            abort();
    }
    config_keep_restart_options(cfg, defaults, &errs);
    check_errors(&errs, 0);
    errors_free(&errs);
    config_unref(cfg);
    return 0;
}
