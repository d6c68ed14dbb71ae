/* script.c — see script.h. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lease.h"
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

/* Decimal digits of n. */
static size_t
digits(size_t n)
{
    size_t d = 1;

    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* <prefix><n>\r\n at p, d = digits(n) of them: the array and bulk string
 * headers of the protocol (sb_i64 and its bounds checks were a tenth of a
 * call's build, for numbers that are never negative). */
static char *
header_at(char *p, char prefix, size_t n, size_t d)
{
    *p++ = prefix;
    for (size_t i = d; i > 0; i--, n /= 10)
        p[i - 1] = (char)('0' + n % 10);
    p += d;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static void
put_header(struct rl_script_call *c, char prefix, size_t n)
{
    grow(c, NUM_MAX + 3);
    c->len = (size_t)(header_at(c->buf + c->len, prefix, n, digits(n)) - c->buf);
}

/* One argument: $<len>\r\n<bytes>\r\n */
static void
put(struct rl_script_call *c, const char *s, size_t n)
{
    char *p;

    grow(c, NUM_MAX + 5 + n);
    p = header_at(c->buf + c->len, '$', n, digits(n));
    memcpy(p, s, n);
    memcpy(p + n, "\r\n", 2);
    c->len = (size_t)(p + n + 2 - c->buf);
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
    for (size_t i = 0; i < RL_SCRIPT_SPECS; i++)
        free(c->specs[i]);
    memset(c, 0, sizeof(*c));
}

static int
same_limits(const struct rl_script_spec *s, const struct rl_limit *l, size_t n)
{
    if (s->at != l || s->n != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s->limits[i].algo != l[i].algo || s->limits[i].limit != l[i].limit ||
            s->limits[i].window_ms != l[i].window_ms || s->limits[i].burst != l[i].burst ||
            s->limits[i].align != l[i].align)
            return 0;
    }
    return 1;
}

/* The spec argument of limits l[0..n): from the cache, else built into it. */
static const struct rl_script_spec *
spec_for(struct rl_script_call *c, const struct rl_limit *l, size_t n)
{
    size_t slot = ((uintptr_t)l / sizeof(*l)) % RL_SCRIPT_SPECS;
    struct rl_script_spec *s = c->specs[slot];
    char text[RL_SCRIPT_SPEC_MAX - 16];
    struct strbuf sb, hb;

    if (s != NULL && same_limits(s, l, n))
        return s;
    if (n > RL_LIMITS_MAX)
        return NULL;
    sb_init(&sb, text, sizeof(text));
    for (size_t i = 0; i < n; i++) {
        const char *tag = algo_script_tag(&l[i]);

        if (i > 0)
            sb_mem(&sb, " ", 1);
        sb_mem(&sb, tag, strlen(tag));
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].limit);
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].window_ms);
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].burst);
    }
    if (!sb_ok(&sb)) /* cannot happen: 8 limits of 4 short fields */
        return NULL;
    if (s == NULL)
        s = c->specs[slot] = xcalloc(1, sizeof(*s));
    sb_init(&hb, s->bytes, sizeof(s->bytes));
    sb_mem(&hb, "$", 1);
    sb_i64(&hb, (int64_t)sb.len);
    sb_mem(&hb, "\r\n", 2);
    sb_mem(&hb, text, sb.len);
    sb_mem(&hb, "\r\n", 2);
    s->len = hb.len;
    s->at = l;
    s->n = n;
    memcpy(s->limits, l, n * sizeof(*l));
    return s;
}

enum key_kind { KEY_LIMIT, KEY_ONCE, KEY_BLOCK };

/*
 * One key as an argument, formatted by backend.c straight into the call (no
 * copy through a buffer of its own): behind a header of the width a guess
 * of its length needs (the check's key and some 6 to 25 bytes), the key
 * moved by a byte when its length needs another width.
 */
static int
put_key(struct rl_script_call *c, const struct rl_check_req *req, enum key_kind kind, size_t i)
{
    size_t d = digits(req->key_len + 8), kd;
    char *at;
    int len;

    grow(c, NUM_MAX + 5 + RL_LIMIT_KEY_MAX);
    at = c->buf + c->len + 1 + d + 2;
    if (kind == KEY_LIMIT)
        len = backend_limit_key(req, i, at, RL_LIMIT_KEY_MAX);
    else if (kind == KEY_ONCE)
        len = backend_once_key(req, at, RL_LIMIT_KEY_MAX);
    else
        len = backend_block_key(req, at, RL_LIMIT_KEY_MAX);
    if (len < 0)
        return RL_ERR;
    if ((kd = digits((size_t)len)) != d) {
        ptrdiff_t shift = (ptrdiff_t)kd - (ptrdiff_t)d;

        memmove(at + shift, at, (size_t)len);
        at += shift;
    }
    header_at(c->buf + c->len, '$', (size_t)len, kd);
    memcpy(at + len, "\r\n", 2);
    c->len = (size_t)(at + len + 2 - c->buf);
    return RL_OK;
}

/* A check's keys: its limits', its once key's. */
static int
put_keys(struct rl_script_call *c, const struct rl_check_req *req)
{
    for (size_t i = 0; i < req->policy->nlimits; i++)
        if (put_key(c, req, KEY_LIMIT, i) != RL_OK)
            return RL_ERR;
    if (req->flags & RL_CHECK_ONCE)
        return put_key(c, req, KEY_ONCE, 0);
    return RL_OK;
}

/* The cost and the flags the script reads: "1", as nearly every check has
 * it, is a constant. */
static void
put_cost(struct rl_script_call *c, const struct rl_check_req *req)
{
    const unsigned lettered = RL_CHECK_FORCE | RL_CHECK_ONCE | RL_CHECK_ADMIN | RL_CHECK_LEASE;
    char tmp[NUM_MAX + 4];
    struct strbuf sb;

    if (req->cost == 1 && (req->flags & lettered) == 0) {
        put_raw(c, "$1\r\n1\r\n", 7);
        return;
    }
    sb_init(&sb, tmp, sizeof(tmp));
    sb_i64(&sb, req->cost);
    if (req->flags & RL_CHECK_FORCE)
        sb_mem(&sb, "f", 1);
    if (req->flags & RL_CHECK_ONCE)
        sb_mem(&sb, "o", 1);
    if (req->flags & RL_CHECK_RESET)
        sb_mem(&sb, "r", 1);
    if (req->flags & RL_CHECK_BLOCK)
        sb_mem(&sb, "b", 1);
    if (req->flags & RL_CHECK_LEASE)
        sb_mem(&sb, "l", 1);
    if (req->flags & RL_CHECK_RELEASE)
        sb_mem(&sb, "x", 1);
    put(c, tmp, sb.len);
}

/*
 * A check's arguments: spec, cost and flags, its block key (an argument, not
 * one of KEYS: check.lua says why), then seq, limit index, block ms.
 */
static int
put_args(struct rl_script_call *c, const struct rl_check_req *req)
{
    const struct rl_policy *p = req->policy;
    const struct rl_script_spec *sp = spec_for(c, p->limits, p->nlimits);

    if (sp == NULL)
        return RL_ERR;
    put_raw(c, sp->bytes, sp->len);
    put_cost(c, req);
    if (put_key(c, req, KEY_BLOCK, 0) != RL_OK)
        return RL_ERR;
    if (req->flags & (RL_CHECK_LEASE | RL_CHECK_RELEASE)) {
        char hex[RL_LEASE_HEX];

        lease_hex(&req->lease, hex);
        put(c, hex, sizeof(hex));
    }
    if (req->flags & RL_CHECK_ONCE)
        put_num(c, (long long)req->seq);
    if (req->flags & RL_CHECK_RESET)
        put_num(c, req->limit_index < 0 ? -1 : (long long)req->limit_index);
    if (req->flags & RL_CHECK_BLOCK)
        put_num(c, (long long)req->block_ms);
    return RL_OK;
}

int
script_call_build(struct rl_script_call *c, const struct rl_check_req *const *reqs, size_t n,
                  enum script_cmd cmd)
{
    size_t nkeys = 0, nargs = 0;

    for (size_t j = 0; j < n; j++) {
        unsigned f = reqs[j]->flags;
        int once = (f & RL_CHECK_ONCE) != 0;

        /* the limits' keys, the once key */
        nkeys += reqs[j]->policy->nlimits + once;
        /* spec, cost, block key, lease, seq, limit index, block ms */
        nargs += 3 + once + ((f & (RL_CHECK_LEASE | RL_CHECK_RELEASE)) != 0) +
                 ((f & RL_CHECK_RESET) != 0) + ((f & RL_CHECK_BLOCK) != 0);
    }
    c->len = 0;
    /* command, script, numkeys, keys, now, n, then the checks' arguments */
    put_header(c, '*', 5 + nkeys + nargs);
    if (cmd == SCRIPT_FCALL) {
        put(c, "FCALL", 5);
        put(c, rl_lua_check_fn, strlen(rl_lua_check_fn));
    } else if (cmd == SCRIPT_EVAL) {
        put(c, "EVAL", 4);
        put(c, rl_lua_check, rl_lua_check_len);
    } else {
        put(c, "EVALSHA", 7);
        put(c, rl_lua_check_sha, strlen(rl_lua_check_sha));
    }
    put_num(c, (long long)nkeys);
    for (size_t j = 0; j < n; j++)
        if (put_keys(c, reqs[j]) != RL_OK)
            return RL_ERR;
    put(c, "", 0);
    put_num(c, (long long)n);
    for (size_t j = 0; j < n; j++)
        if (put_args(c, reqs[j]) != RL_OK)
            return RL_ERR;
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
        if (r->element[i]->type != REDIS_REPLY_INTEGER &&
            r->element[i]->type != REDIS_REPLY_ERROR) {
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

/*
 * res.error is static text: what a failed check's error reply says, by its
 * code.  The reply itself is freed once its checks are answered.
 */
static const char *
error_text(const char *e)
{
    static const struct {
        const char *code, *text;
    } known[] = {
        {"WRONGTYPE", "WRONGTYPE: a key of the check holds a value of the wrong type"},
        {"OOM", "OOM: redis is out of memory (maxmemory)"},
        {"READONLY", "READONLY: redis is a replica"},
        {"NOSCRIPT", "NOSCRIPT"},
    };

    for (size_t i = 0; i < RL_ARRAY_LEN(known); i++) {
        size_t n = strlen(known[i].code);

        if (strncmp(e, known[i].code, n) == 0 && (e[n] == ' ' || e[n] == '\0'))
            return known[i].text;
    }
    return "error reply from the check script";
}

void
script_answer_reply(struct rl_script_wait *w, const redisReply *r, size_t at, size_t nlimits)
{
    struct rl_check_res res;

    if (w->answered)
        return;
    /* this check alone failed in the script; the others of its batch stand */
    if (r->element[at]->type == REDIS_REPLY_ERROR) {
        script_answer_status(w, RL_BACKEND_ERROR, error_text(r->element[at]->str));
        return;
    }
    for (size_t i = 1; i <= 3 * nlimits; i++) {
        if (r->element[at + i]->type != REDIS_REPLY_INTEGER) {
            script_answer_status(w, RL_BACKEND_ERROR, "error in the check script's reply");
            return;
        }
    }
    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_OK;
    res.allowed = r->element[at]->integer == 1;
    /* a release: whether the lease was held in place of allowed */
    if (w->req->flags & RL_CHECK_RELEASE) {
        res.released = res.allowed;
        res.allowed = 0;
    }
    res.nlimits = nlimits;
    for (size_t i = 0; i < nlimits; i++) {
        struct rl_limit_result *l = &res.limits[i];
        l->remaining = r->element[at + 1 + 3 * i]->integer;
        l->reset_ms = r->element[at + 2 + 3 * i]->integer;
        l->retry_after_ms = r->element[at + 3 + 3 * i]->integer;
        l->allowed = l->retry_after_ms == 0;
    }
    /* a blocked key: -blocked_ms in place of allowed */
    if (r->element[at]->integer < 0 && !(w->req->flags & RL_CHECK_RELEASE))
        backend_apply_block(&res, -r->element[at]->integer);
    w->answered = 1;
    w->req = NULL;
    w->cb(&res, w->arg);
}
