/* script.c — see script.h. */
#include <stdio.h>
#include <string.h>

#include "lua_scripts.h"
#include "script.h"

static void
put(struct rl_script_call *c, const char *s, size_t len)
{
    c->argv[c->argc] = s;
    c->lens[c->argc++] = len;
}

static void
put_num(struct rl_script_call *c, int *k, long long v)
{
    int n = snprintf(c->nums[*k], sizeof(c->nums[*k]), "%lld", v);
    put(c, c->nums[(*k)++], (size_t)n);
}

int
script_call_build(struct rl_script_call *c, const struct rl_check_req *req, int eval)
{
    const struct rl_policy *p = req->policy;
    int k = 0;

    c->argc = 0;
    if (eval) {
        put(c, "EVAL", 4);
        put(c, rl_lua_check, rl_lua_check_len);
    } else {
        put(c, "EVALSHA", 7);
        put(c, rl_lua_check_sha, strlen(rl_lua_check_sha));
    }
    put_num(c, &k, (long long)p->nlimits);
    for (size_t i = 0; i < p->nlimits; i++) {
        int n = backend_limit_key(req, i, c->keys[i], sizeof(c->keys[i]));
        if (n < 0)
            return RL_ERR;
        put(c, c->keys[i], (size_t)n);
    }
    put(c, "", 0);
    put_num(c, &k, (long long)req->cost);
    for (size_t i = 0; i < p->nlimits; i++) {
        const struct rl_limit *l = &p->limits[i];
        const char *tag = algo_def(l->algo)->tag;
        put(c, tag, strlen(tag));
        put_num(c, &k, (long long)l->limit);
        put_num(c, &k, (long long)l->window_ms);
        put_num(c, &k, (long long)l->burst);
    }
    return RL_OK;
}

int
script_reply_parse(const redisReply *r, size_t n, struct rl_check_res *res,
                   const char **why)
{
    memset(res, 0, sizeof(*res));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 + 3 * n) {
        *why = "unexpected reply from the check script";
        return RL_ERR;
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER) {
            *why = "non-integer in the check script's reply";
            return RL_ERR;
        }
    }
    res->status = RL_BACKEND_OK;
    res->allowed = r->element[0]->integer == 1;
    res->nlimits = n;
    for (size_t i = 0; i < n; i++) {
        struct rl_limit_result *l = &res->limits[i];
        l->remaining = r->element[1 + 3 * i]->integer;
        l->reset_ms = r->element[2 + 3 * i]->integer;
        l->retry_after_ms = r->element[3 + 3 * i]->integer;
        l->allowed = l->retry_after_ms == 0;
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
script_answer_reply(struct rl_script_wait *w, const redisReply *r)
{
    struct rl_check_res res;
    const char *why;

    if (w->answered)
        return;
    if (script_reply_parse(r, w->req->policy->nlimits, &res, &why) != RL_OK) {
        script_answer_status(w, RL_BACKEND_ERROR, why);
        return;
    }
    w->answered = 1;
    w->req = NULL;
    w->cb(&res, w->arg);
}
