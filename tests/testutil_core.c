/* testutil_core.c — see testutil_core.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "schema.h"
#include "testutil_core.h"

int64_t tu_now_us = 1000000LL * TU_S;

int64_t
tu_clock(void)
{
    return tu_now_us;
}

struct rl_config *
tu_config(const char *json)
{
    char path[] = "/tmp/rl-unit-XXXXXX";
    int fd = mkstemp(path);
    size_t len = strlen(json);
    struct rl_errors errs = {0};
    struct rl_config *cfg = NULL;
    int rc;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, json, len), (ssize_t)len);
    close(fd);
    rc = config_load_file(path, &cfg, &errs);
    unlink(path);
    ck_assert_msg(rc == RL_OK && errs.n == 0, "config refused: %s",
                  errs.n > 0 ? errs.msg[0] : "?");
    errors_free(&errs);
    return cfg;
}

struct rl_backend *
tu_memory(void)
{
    struct rl_backend *be = NULL;
    char *cause = NULL;

    ck_assert_int_eq(rl_backend_memory_ops.create(&be, NULL, NULL, &cause), RL_OK);
    ck_assert_ptr_nonnull(be);
    return be;
}

void
tu_on_answer(const struct rl_check_res *res, void *arg)
{
    struct tu_answer *a = arg;

    a->calls++;
    a->res = *res;
}

struct rl_check_res
tu_check(struct rl_backend *be, const struct rl_policy *policy, const char *key,
         int64_t cost, unsigned flags)
{
    struct rl_check_req req = {
        .policy = policy, .key = key, .key_len = strlen(key), .cost = cost,
        .flags = flags, .timeout_ms = 1000,
    };
    struct tu_answer a = {0};

    be->ops->check(be, &req, tu_on_answer, &a);
    ck_assert_int_eq(a.calls, 1);   /* synchronously, exactly once */
    ck_assert_int_eq(a.res.status, RL_BACKEND_OK);
    ck_assert_uint_eq(a.res.nlimits, policy->nlimits);
    return a.res;
}
