/* script.c — see script.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_scripts.h"
#include "script.h"
#include "util.h"

/* Room for one number in decimal: 20 digits, a sign and a NUL. */
#define NUM_MAX 24

static void
grow(struct rl_script_call *c, size_t more)
{
    if (c->len + more > c->cap) {
        c->cap = (c->len + more) * 2;
        c->buf = xrealloc(c->buf, c->cap);
    }
}

static void
put_raw(struct rl_script_call *c, const char *s, size_t n)
{
    grow(c, n);
    memcpy(c->buf + c->len, s, n);
    c->len += n;
}

/* <prefix><v>\r\n: the array and bulk string headers of the protocol */
static void
put_header(struct rl_script_call *c, char prefix, long long v)
{
    char tmp[NUM_MAX + 3];
    struct strbuf sb;

    sb_init(&sb, tmp, sizeof(tmp));
    sb_mem(&sb, &prefix, 1);
    sb_i64(&sb, v);
    sb_mem(&sb, "\r\n", 2);
    put_raw(c, tmp, sb.len);
}

/* One argument: $<len>\r\n<bytes>\r\n */
static void
put(struct rl_script_call *c, const char *s, size_t n)
{
    put_header(c, '$', (long long)n);
    put_raw(c, s, n);
    put_raw(c, "\r\n", 2);
}

static void
put_num(struct rl_script_call *c, long long v)
{
    char tmp[NUM_MAX];
    struct strbuf sb;

    sb_init(&sb, tmp, sizeof(tmp));
    sb_i64(&sb, v);
    put(c, tmp, sb.len);
}

void
script_call_free(struct rl_script_call *c)
{
    free(c->buf);
    memset(c, 0, sizeof(*c));
}

int
script_call_build(struct rl_script_call *c, const struct rl_check_req *const *reqs,
                  size_t n, int eval)
{
    size_t nkeys = 0, nargs = 0;

    for (size_t j = 0; j < n; j++) {
        int once = (reqs[j]->flags & RL_CHECK_ONCE) != 0;

        nkeys += reqs[j]->policy->nlimits + once;
        nargs += 3 + once + 4 * reqs[j]->policy->nlimits;
    }
    c->len = 0;
    /* command, script, numkeys, keys, now, n, then the checks' arguments */
    put_header(c, '*', (long long)(5 + nkeys + nargs));
    if (eval) {
        put(c, "EVAL", 4);
        put(c, rl_lua_check, rl_lua_check_len);
    } else {
        put(c, "EVALSHA", 7);
        put(c, rl_lua_check_sha, strlen(rl_lua_check_sha));
    }
    put_num(c, (long long)nkeys);
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < reqs[j]->policy->nlimits; i++) {
            char key[RL_LIMIT_KEY_MAX];
            int len = backend_limit_key(reqs[j], i, key, sizeof(key));

            if (len < 0)
                return RL_ERR;
            put(c, key, (size_t)len);
        }
        if (reqs[j]->flags & RL_CHECK_ONCE) {
            char key[RL_LIMIT_KEY_MAX];
            int len = backend_once_key(reqs[j], key, sizeof(key));

            if (len < 0)
                return RL_ERR;
            put(c, key, (size_t)len);
        }
    }
    put(c, "", 0);
    put_num(c, (long long)n);
    for (size_t j = 0; j < n; j++) {
        const struct rl_policy *p = reqs[j]->policy;

        put_num(c, (long long)p->nlimits);
        put_num(c, (long long)reqs[j]->cost);
        /* "f" force, "o" once (then its seq), "fo" both, "" neither */
        if (reqs[j]->flags & RL_CHECK_ONCE) {
            if (reqs[j]->flags & RL_CHECK_FORCE)
                put(c, "fo", 2);
            else
                put(c, "o", 1);
            put_num(c, (long long)reqs[j]->seq);
        } else if (reqs[j]->flags & RL_CHECK_FORCE) {
            put(c, "f", 1);
        } else {
            put(c, "", 0);
        }
        for (size_t i = 0; i < p->nlimits; i++) {
            const struct rl_limit *l = &p->limits[i];
            const char *tag = algo_def(l->algo)->tag;

            put(c, tag, strlen(tag));
            put_num(c, (long long)l->limit);
            put_num(c, (long long)l->window_ms);
            put_num(c, (long long)l->burst);
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
