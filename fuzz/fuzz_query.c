/*
 * fuzz_query.c — libFuzzer target: a request target's query string as GET
 * /admin/top reads it (query.c, with admin_view.c's parameters).
 *
 * Input: the request-target, any bytes.
 *
 * Oracles besides ASan/UBSan: read, every parameter given holds a value
 * shorter than its buffer, NUL-terminated at its length with no NUL inside,
 * that decodes what the query held (as many or fewer bytes); refused, the
 * reason is set and names a parameter of the route or none (-1); reading the
 * same target again gives the same answer.
 */
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NPARAMS 4

static int
parse(const char *t, size_t len, char vals[NPARAMS][72], struct query_param *p,
      const char **why, int *which)
{
    static const char *const names[NPARAMS] = {"policy", "by", "n", "interval"};
    static const size_t sizes[NPARAMS] = {65, 8, 8, 8};

    for (int i = 0; i < NPARAMS; i++) {
        p[i].name = names[i];
        p[i].out = vals[i];
        p[i].size = sizes[i];
        memset(vals[i], 0x55, sizeof(vals[i]));
    }
    *why = NULL;
    *which = -2;
    return query_parse(t, len, p, NPARAMS, why, which);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *t = xmalloc(size + 1), vals[NPARAMS][72], vals2[NPARAMS][72];
    struct query_param p[NPARAMS], p2[NPARAMS];
    const char *why, *why2;
    int which, which2, rc, rc2;

    memcpy(t, data, size);
    t[size] = '\0';
    rc = parse(t, size, vals, p, &why, &which);
    if (rc == RL_OK) {
        for (int i = 0; i < NPARAMS; i++) {
            if (!p[i].seen) {
                if (p[i].len != 0 || vals[i][0] != '\0')
                    abort();
                continue;
            }
            if (p[i].len >= p[i].size || vals[i][p[i].len] != '\0' ||
                strlen(vals[i]) != p[i].len || p[i].len > size)
                abort();
        }
    } else if (rc != RL_ERR || why == NULL || which < -1 || which >= NPARAMS) {
        abort();
    }
    rc2 = parse(t, size, vals2, p2, &why2, &which2);
    if (rc2 != rc || (rc == RL_ERR && (why2 != why || which2 != which)))
        abort();
    for (int i = 0; rc == RL_OK && i < NPARAMS; i++)
        if (p2[i].seen != p[i].seen || p2[i].len != p[i].len ||
            memcmp(vals2[i], vals[i], p[i].len + 1) != 0)
            abort();
    free(t);
    return 0;
}
