/* script.c — see script.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_scripts.h"
#include "script.h"
#include "util.h"

/* Room for one number in decimal: 20 digits, a sign and a NUL. */
#define NUM_MAX 24

/* Room for `argc` arguments and `store` bytes of keys and numbers. */
static void
reserve(struct rl_script_call *c, size_t argc, size_t store)
{
    if (argc > c->argv_cap) {
        c->argv = xrealloc(c->argv, argc * sizeof(*c->argv));
        c->lens = xrealloc(c->lens, argc * sizeof(*c->lens));
        c->argv_cap = argc;
    }
    if (store > c->store_cap) {
        c->store = xrealloc(c->store, store);
        c->store_cap = store;
    }
}

static void
put(struct rl_script_call *c, const char *s, size_t len)
{
    c->argv[c->argc] = s;
    c->lens[c->argc++] = len;
}

static void
put_num(struct rl_script_call *c, size_t *used, long long v)
{
    struct strbuf sb;

    sb_init(&sb, c->store + *used, NUM_MAX);
    sb_i64(&sb, v);
    put(c, sb.buf, sb.len);
    *used += NUM_MAX;
}

void
script_call_free(struct rl_script_call *c)
{
    free(c->argv);
    free(c->lens);
    free(c->store);
    memset(c, 0, sizeof(*c));
}

int
script_call_build(struct rl_script_call *c, const struct rl_check_req *const *reqs,
                  size_t n, int eval)
{
    size_t nkeys = 0, nargs = 0, used = 0;

    for (size_t j = 0; j < n; j++) {
        nkeys += reqs[j]->policy->nlimits;
        nargs += 3 + 4 * reqs[j]->policy->nlimits;
    }
    /* every argument that is not a fixed string is a key or a number */
    reserve(c, 5 + nkeys + nargs, nkeys * RL_LIMIT_KEY_MAX + (2 + nargs) * NUM_MAX);
    c->argc = 0;
    if (eval) {
        put(c, "EVAL", 4);
        put(c, rl_lua_check, rl_lua_check_len);
    } else {
        put(c, "EVALSHA", 7);
        put(c, rl_lua_check_sha, strlen(rl_lua_check_sha));
    }
    put_num(c, &used, (long long)nkeys);
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < reqs[j]->policy->nlimits; i++) {
            char *p = c->store + used;
            int len = backend_limit_key(reqs[j], i, p, RL_LIMIT_KEY_MAX);

            if (len < 0)
                return RL_ERR;
            put(c, p, (size_t)len);
            used += RL_LIMIT_KEY_MAX;
        }
    }
    put(c, "", 0);
    put_num(c, &used, (long long)n);
    for (size_t j = 0; j < n; j++) {
        const struct rl_policy *p = reqs[j]->policy;

        put_num(c, &used, (long long)p->nlimits);
        put_num(c, &used, (long long)reqs[j]->cost);
        if (reqs[j]->flags & RL_CHECK_FORCE)
            put(c, "f", 1);
        else
            put(c, "", 0);
        for (size_t i = 0; i < p->nlimits; i++) {
            const struct rl_limit *l = &p->limits[i];
            const char *tag = algo_def(l->algo)->tag;

            put(c, tag, strlen(tag));
            put_num(c, &used, (long long)l->limit);
            put_num(c, &used, (long long)l->window_ms);
            put_num(c, &used, (long long)l->burst);
        }
    }
    return RL_OK;
}

int
script_reply_check(const redisReply *r, size_t len, const char **why)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != len) {
        *why = "unexpected reply from the check script";
        return RL_ERR;
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER) {
            *why = "non-integer in the check script's reply";
            return RL_ERR;
        }
    }
    return RL_OK;
}

void
script_answer_status(struct rl_script_wait *w, enum rl_backend_status st, const char *why)
{
    struct rl_check_res res;

    if (w->answered)
        return;
    w->answered = 1;
    memset(&res, 0, sizeof(res));
    res.status = st;
    res.error = why;
    w->req = NULL;
    w->cb(&res, w->arg);
}

void
script_answer_reply(struct rl_script_wait *w, const redisReply *r, size_t at,
                    size_t nlimits)
{
    struct rl_check_res res;

    if (w->answered)
        return;
    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_OK;
    res.allowed = r->element[at]->integer == 1;
    res.nlimits = nlimits;
    for (size_t i = 0; i < nlimits; i++) {
        struct rl_limit_result *l = &res.limits[i];
        l->remaining = r->element[at + 1 + 3 * i]->integer;
        l->reset_ms = r->element[at + 2 + 3 * i]->integer;
        l->retry_after_ms = r->element[at + 3 + 3 * i]->integer;
        l->allowed = l->retry_after_ms == 0;
    }
    w->answered = 1;
    w->req = NULL;
    w->cb(&res, w->arg);
}
