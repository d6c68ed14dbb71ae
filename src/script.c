/* script.c — see script.h. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "lease.h"
#include "lua_scripts.h"
#include "redis_conn.h"
#include "script.h"
#include "util.h"

/* Room for one number in decimal: 20 digits, a sign and a NUL. */
#define NUM_MAX 24

/* Where the next bytes of the call go, with room for `more` of them. */
static char *
call_room(struct rl_script_call *c, size_t more)
{
    if (c->len + more > c->cap) {
        c->cap = (c->len + more) * 2;
        c->buf = xrealloc(c->buf, c->cap);
    }
    return c->buf + c->len;
}

static void
put_raw(struct rl_script_call *c, const char *s, size_t n)
{
    memcpy(call_room(c, n), s, n);
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
 * headers of the protocol, for numbers that are never negative (sb_i64 and
 * its bounds checks cost more: docs/BENCHMARKS.md, "Measurements behind the
 * code"). */
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
    c->len = (size_t)(header_at(call_room(c, NUM_MAX + 3), prefix, n, digits(n)) - c->buf);
}

/* One argument: $<len>\r\n<bytes>\r\n */
static void
put_arg(struct rl_script_call *c, const char *s, size_t n)
{
    char *p;

    p = header_at(call_room(c, NUM_MAX + 5 + n), '$', n, digits(n));
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
    put_arg(c, tmp, sb.len);
}

void
script_call_free(struct rl_script_call *c)
{
    free(c->buf);
    for (size_t i = 0; i < RL_SCRIPT_SPECS; i++)
        free(c->specs[i]);
    memset(c, 0, sizeof(*c));
}

/* The limits of s are l[0..n): what its spec and its key suffixes say. */
static bool
same_limits(const struct rl_script_spec *s, const struct rl_limit *l, size_t n)
{
    if (s->n != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const struct rl_limit *a = &s->limits[i];
        if (a->algo != l[i].algo || a->limit != l[i].limit || a->window_ms != l[i].window_ms ||
            a->burst != l[i].burst || a->align != l[i].align || a->cap != l[i].cap ||
            a->period.kind != l[i].period.kind ||
            a->period.week_start != l[i].period.week_start || a->period.tz != l[i].period.tz)
            return false;
    }
    return true;
}

/* One limit's window in the spec: its window in ms, or its periods'
 * boundaries around now_us, "b0,b1,b2,b3,b4,b5" in seconds. */
static void
spec_window(struct strbuf *sb, const struct rl_limit *l, int64_t now_us, int64_t *from,
            int64_t *until)
{
    int64_t b[RL_PERIOD_BOUNDS];

    if (!algo_has_period(l)) {
        sb_i64(sb, l->window_ms);
        return;
    }
    algo_period_bounds(l, now_us, b);
    for (int k = 0; k < RL_PERIOD_BOUNDS; k++) {
        if (k > 0)
            sb_mem(sb, ",", 1);
        sb_i64(sb, b[k] / 1000000);
    }
    if (b[2] > *from)
        *from = b[2];
    if (b[3] < *until)
        *until = b[3];
}

/* The spec argument of limits l[0..n): from the cache, else built into it. */
static const struct rl_script_spec *
spec_for(struct rl_script_call *c, const struct rl_limit *l, size_t n)
{
    uint64_t hash;
    size_t slot;
    struct rl_script_spec *s = c->last;
    char text[RL_SCRIPT_SPEC_MAX - 16];
    int64_t now = 0, from = INT64_MIN, until = INT64_MAX;
    int periods = 0;
    struct strbuf sb, hb;

    /* a batch's checks mostly share a policy: no hash for those, and
     * nothing compared when they are the same limits again */
    if (s != NULL && !s->periods && ((l == c->last_l && n == s->n) || same_limits(s, l, n))) {
        c->last_l = l;
        return s;
    }
    hash = algo_limits_hash(l, n);
    slot = hash % RL_SCRIPT_SPECS;
    s = c->specs[slot];
    if (s != NULL && s->hash == hash && same_limits(s, l, n)) {
        c->last = s;
        c->last_l = l;
        if (!s->periods)
            return s;
        now = now_unix_us();
        if (now >= s->from_us && now < s->until_us)
            return s;
    }
    if (n > RL_LIMITS_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++)
        periods |= algo_has_period(&l[i]);
    if (periods && now == 0)
        now = now_unix_us();
    sb_init(&sb, text, sizeof(text));
    for (size_t i = 0; i < n; i++) {
        const char *tag = algo_script_tag(&l[i]);

        if (i > 0)
            sb_mem(&sb, " ", 1);
        sb_mem(&sb, tag, strlen(tag));
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].limit);
        sb_mem(&sb, " ", 1);
        spec_window(&sb, &l[i], now, &from, &until);
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
    s->hash = hash;
    s->n = n;
    s->periods = periods;
    s->from_us = from;
    s->until_us = until;
    memcpy(s->limits, l, n * sizeof(*l));
    for (size_t i = 0; i < n; i++) {
        struct strbuf xb;

        sb_init(&xb, s->suffix[i], sizeof(s->suffix[i]));
        algo_key_suffix(&l[i], &xb);
        s->suffix_len[i] = sb_ok(&xb) && xb.len > 0 ? (unsigned char)xb.len : 0;
    }
    c->last = s;
    c->last_l = l;
    return s;
}

enum key_kind { KEY_LIMIT, KEY_ONCE, KEY_BLOCK, KEY_RSV };

/* backend_limit_key's bytes and bounds, its suffix from the spec. */
static int
limit_key(const struct rl_check_req *req, size_t i, const struct rl_script_spec *sp, char *at,
          size_t *len)
{
    const char *k = req->key;
    size_t klen = req->key_len, sl = sp->suffix_len[i];

    if (req->limit_key != NULL && req->limit_key[i] != NULL) {
        k = req->limit_key[i];
        klen = req->limit_key_len[i];
    }
    if (klen + sl >= RL_LIMIT_KEY_MAX)
        return RL_ERR;
    memcpy(at, k, klen);
    memcpy(at + klen, sp->suffix[i], sl);
    *len = klen + sl;
    return RL_OK;
}

/*
 * One key as an argument, formatted by backend.c straight into the call (no
 * copy through a buffer of its own): behind a header of the width a guess
 * of its length needs (the check's key and some 6 to 25 bytes), the key
 * moved by a byte when its length needs another width.
 */
static int
put_key(struct rl_script_call *c, const struct rl_check_req *req, enum key_kind kind, size_t i,
        const struct rl_script_spec *sp)
{
    size_t d = digits(req->key_len + 8), kd, len;
    char *at;
    int rc;

    at = call_room(c, NUM_MAX + 5 + RL_LIMIT_KEY_MAX) + 1 + d + 2;
    if (kind == KEY_LIMIT && sp != NULL && sp->suffix_len[i] > 0)
        rc = limit_key(req, i, sp, at, &len);
    else if (kind == KEY_LIMIT)
        rc = backend_limit_key(req, i, at, RL_LIMIT_KEY_MAX, &len);
    else if (kind == KEY_ONCE)
        rc = backend_once_key(req, at, RL_LIMIT_KEY_MAX, &len);
    else if (kind == KEY_RSV)
        rc = backend_rsv_key(req, at, RL_LIMIT_KEY_MAX, &len);
    else
        rc = backend_block_key(req, at, RL_LIMIT_KEY_MAX, &len);
    if (rc != RL_OK)
        return RL_ERR;
    if ((kd = digits(len)) != d) {
        ptrdiff_t shift = (ptrdiff_t)kd - (ptrdiff_t)d;

        memmove(at + shift, at, len);
        at += shift;
    }
    header_at(c->buf + c->len, '$', len, kd);
    memcpy(at + len, "\r\n", 2);
    c->len = (size_t)(at + len + 2 - c->buf);
    return RL_OK;
}

/* A check's keys: its limits', its once key's or its reservation's. */
static int
put_keys(struct rl_script_call *c, const struct rl_check_req *req)
{
    const struct rl_policy *p = req->policy;
    const struct rl_script_spec *sp = spec_for(c, p->limits, p->nlimits);

    for (size_t i = 0; i < p->nlimits; i++)
        if (put_key(c, req, KEY_LIMIT, i, sp) != RL_OK)
            return RL_ERR;
    if (req->flags & RL_CHECK_ONCE)
        return put_key(c, req, KEY_ONCE, 0, NULL);
    if (req->flags & (RL_CHECK_RESERVE | RL_CHECK_RSV_SETTLE | RL_CHECK_RSV_LIST))
        return put_key(c, req, KEY_RSV, 0, NULL);
    return RL_OK;
}

/* The cost and the flags the script reads: "1", as nearly every check has
 * it, is a constant. */
static void
put_cost(struct rl_script_call *c, const struct rl_check_req *req)
{
    const unsigned lettered = RL_CHECK_FORCE | RL_CHECK_ONCE | RL_CHECK_ADMIN |
                              RL_CHECK_LEASE | RL_CHECK_DELAY | RL_CHECK_CHARGE |
                              RL_CHECK_RESERVE | RL_CHECK_RSV_SETTLE | RL_CHECK_RSV_LIST;
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
    if (req->flags & RL_CHECK_DELAY)
        sb_mem(&sb, "d", 1);
    if (req->flags & RL_CHECK_CHARGE)
        sb_mem(&sb, "c", 1);
    if (req->flags & RL_CHECK_RESERVE)
        sb_mem(&sb, "v", 1);
    if (req->flags & RL_CHECK_RSV_SETTLE)
        sb_mem(&sb, "s", 1);
    if (req->flags & RL_CHECK_RSV_LIST)
        sb_mem(&sb, "i", 1);
    put_arg(c, tmp, sb.len);
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
    if (put_key(c, req, KEY_BLOCK, 0, NULL) != RL_OK)
        return RL_ERR;
    if (req->flags & (RL_CHECK_LEASE | RL_CHECK_RELEASE)) {
        char hex[RL_LEASE_HEX];

        lease_hex(&req->lease, hex);
        put_arg(c, hex, sizeof(hex));
    }
    if (req->flags & RL_CHECK_DELAY)
        put_num(c, (long long)req->max_delay_ms);
    /* a reservation's record kept twice its ttl; a settle's estimate; the
     * record */
    if (req->flags & RL_CHECK_RESERVE)
        put_num(c, (long long)(2 * req->rsv_ttl_ms));
    if (req->flags & RL_CHECK_RSV_SETTLE)
        put_num(c, (long long)req->rsv_estimate);
    if (req->flags & (RL_CHECK_RESERVE | RL_CHECK_RSV_SETTLE)) {
        char m[RL_RSV_MEMBER_MAX];

        put_arg(c, m, backend_rsv_member(req, m));
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
        int rsv = (f & (RL_CHECK_RESERVE | RL_CHECK_RSV_SETTLE)) != 0;
        int list = (f & RL_CHECK_RSV_LIST) != 0;

        /* the limits' keys, the once key or the reservations' */
        nkeys += reqs[j]->policy->nlimits + once + rsv + list;
        /* spec, cost, block key, lease, delay, px or estimate and the
         * record, seq, limit index, block ms */
        nargs += 3 + once + 2 * rsv + ((f & (RL_CHECK_LEASE | RL_CHECK_RELEASE)) != 0) +
                 ((f & RL_CHECK_DELAY) != 0) + ((f & RL_CHECK_RESET) != 0) +
                 ((f & RL_CHECK_BLOCK) != 0);
    }
    c->len = 0;
    c->last_l = NULL; /* the last call's limits may be gone */
    /* command, script, numkeys, keys, now, n, then the checks' arguments */
    put_header(c, '*', 5 + nkeys + nargs);
    if (cmd == SCRIPT_FCALL) {
        put_arg(c, "FCALL", 5);
        put_arg(c, rl_lua_check_fn, strlen(rl_lua_check_fn));
    } else if (cmd == SCRIPT_EVAL) {
        put_arg(c, "EVAL", 4);
        put_arg(c, rl_lua_check, rl_lua_check_len);
    } else {
        put_arg(c, "EVALSHA", 7);
        put_arg(c, rl_lua_check_sha, strlen(rl_lua_check_sha));
    }
    put_num(c, (long long)nkeys);
    for (size_t j = 0; j < n; j++)
        if (put_keys(c, reqs[j]) != RL_OK)
            return RL_ERR;
    put_arg(c, "", 0);
    put_num(c, (long long)n);
    for (size_t j = 0; j < n; j++)
        if (put_args(c, reqs[j]) != RL_OK)
            return RL_ERR;
    return RL_OK;
}

const char *
script_reply_problem(const redisReply *r, size_t len)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != len)
        return "unexpected reply from the check script";
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER &&
            r->element[i]->type != REDIS_REPLY_ERROR)
            return "non-integer in the check script's reply";
    }
    return NULL;
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

/* An RL_CHECK_RSV_LIST check's answer res, its list read from r's
 * elements from `at` on (script_reply_len). */
static void
answer_list(struct rl_script_wait *w, const redisReply *r, size_t at, struct rl_check_res *res)
{
    struct rl_rsv_open list[RL_RSV_LIST_MAX];

    for (size_t i = 0; i <= 2 * RL_RSV_LIST_MAX; i++) {
        if (r->element[at + i]->type != REDIS_REPLY_INTEGER) {
            script_answer_status(w, RL_BACKEND_ERROR, "error in the check script's reply");
            return;
        }
    }
    res->rsv_open = r->element[at]->integer;
    for (size_t i = 0; i < RL_RSV_LIST_MAX && (int64_t)i < res->rsv_open; i++) {
        list[i].estimate = r->element[at + 1 + 2 * i]->integer;
        list[i].expires_in_ms = r->element[at + 2 + 2 * i]->integer;
        res->rsv_nlisted = i + 1;
    }
    res->rsv_listed = list;
    w->answered = 1;
    w->req = NULL;
    w->cb(res, w->arg);
}

void
script_answer_reply(struct rl_script_wait *w, const redisReply *r, size_t at)
{
    struct rl_check_res res;

    if (w->answered)
        return;
    /* this check alone failed in the script; the others of its batch stand */
    if (r->element[at]->type == REDIS_REPLY_ERROR) {
        script_answer_status(w, RL_BACKEND_ERROR, rconn_error_text(r->element[at]->str));
        return;
    }
    for (size_t i = 1; i <= 3 * w->nlimits; i++) {
        if (r->element[at + i]->type != REDIS_REPLY_INTEGER) {
            script_answer_status(w, RL_BACKEND_ERROR, "error in the check script's reply");
            return;
        }
    }
    memset(&res, 0, sizeof(res));
    res.status = RL_BACKEND_OK;
    res.allowed = r->element[at]->integer == 1;
    /* a settle: 3 no such reservation, 4 its ttl passed (then zeros) */
    if (w->req->flags & RL_CHECK_RSV_SETTLE) {
        long long v = r->element[at]->integer;

        res.rsv = v == 3 ? RL_RSV_UNKNOWN : v == 4 ? RL_RSV_EXPIRED : RL_RSV_SETTLED;
    }
    /* a release: whether the lease was held in place of allowed */
    if (w->req->flags & RL_CHECK_RELEASE) {
        res.released = res.allowed;
        res.allowed = 0;
    }
    res.nlimits = w->nlimits;
    for (size_t i = 0; i < w->nlimits; i++) {
        struct rl_limit_result *l = &res.limits[i];
        long long rem = r->element[at + 1 + 3 * i]->integer;

        /* below 0: an overdraft of that many units (check.lua) */
        l->remaining = rem > 0 ? rem : 0;
        l->overdraft = rem < 0 ? -rem : 0;
        l->reset_ms = r->element[at + 2 + 3 * i]->integer;
        l->retry_after_ms = r->element[at + 3 + 3 * i]->integer;
        l->allowed = l->retry_after_ms == 0;
    }
    /* a blocked key: -blocked_ms in place of allowed */
    if (r->element[at]->integer < 0 && !(w->req->flags & RL_CHECK_RELEASE))
        backend_apply_block(&res, -r->element[at]->integer);
    /* 2: reserved, allowed after its limits' waits */
    if (r->element[at]->integer == 2 && (w->req->flags & RL_CHECK_DELAY))
        backend_apply_delay(&res);
    if (w->rsv_list) {
        answer_list(w, r, at + 1 + 3 * w->nlimits, &res);
        return;
    }
    w->answered = 1;
    w->req = NULL;
    w->cb(&res, w->arg);
}

/* ---- a batch's reply ------------------------------------------------------------ */

static void
batch_answer(const struct script_batch *b, enum rl_backend_status st, const char *why)
{
    for (size_t i = 0; i < b->n; i++)
        script_answer_status(b->w[i], st, why);
}

/* Nothing runs on this server until it is a master again: leave it (the
 * name is resolved again: DNS, Sentinel, the slot map). */
static void
batch_leave(const struct script_batch *b, const char *why)
{
    if (b->c->ac == b->ac)
        rconn_drop(b->c, why);
    if (b->unusable != NULL)
        b->unusable(b->arg);
}

/* The call's own error, the same for every check. */
static bool
batch_error(const struct script_batch *b, const char *err)
{
    const char *unusable = rconn_unusable(err);

    rconn_error(&b->c->errs, &b->c->st, b->c->conf.name, err, b->n);
    if (b->own != NULL && b->own(err)) {
        for (size_t i = 0; i < b->n; i++)
            if (!b->w[i]->answered)
                b->take(b->arg, i, err);
        return false;
    }
    /* The server forgot the script or the library (restart, SCRIPT or
     * FUNCTION FLUSH): sent whole once. */
    if (!b->eval && rconn_script_missing(b->c, b->ac, err))
        return b->resend(b->arg);
    if (unusable != NULL) {
        /* nothing ran, and nothing will on this server */
        batch_answer(b, RL_BACKEND_DOWN, unusable);
        batch_leave(b, unusable);
        return false;
    }
    batch_answer(b, RL_BACKEND_ERROR, "error reply from redis");
    return false;
}

bool
script_batch_reply(const struct script_batch *b, const redisReply *r)
{
    const char *name = b->c->conf.name, *why, *unusable = NULL;
    size_t len = 0, at = 0, failed = 0;

    if (r == NULL) {
        /* The connection died or is being freed: every pending callback
         * runs once with NULL.  Never resent: the script may have run. */
        batch_answer(b, RL_BACKEND_DOWN, "connection lost");
        return false;
    }
    if (r->type == REDIS_REPLY_ERROR)
        return batch_error(b, r->str);
    for (size_t i = 0; i < b->n; i++)
        len += script_reply_len(b->w[i]->nlimits, b->w[i]->rsv_list);
    if ((why = script_reply_problem(r, len)) != NULL) {
        rconn_bad_reply(&b->c->errs, &b->c->st, name, why, b->n);
        batch_answer(b, RL_BACKEND_ERROR, why);
        return false;
    }
    for (size_t i = 0; i < b->n;
         at += script_reply_len(b->w[i]->nlimits, b->w[i]->rsv_list), i++) {
        const redisReply *e = r->element[at];

        /* a check that failed alone inside the script (pcall) is an error
         * reply all the same: logged, counted, and a server that cannot
         * take writes is left */
        if (e->type == REDIS_REPLY_ERROR) {
            failed++;
            rconn_error(&b->c->errs, &b->c->st, name, e->str, 1);
            if (b->own != NULL && !b->w[i]->answered && b->own(e->str)) {
                b->take(b->arg, i, e->str);
                continue;
            }
            if (unusable == NULL)
                unusable = rconn_unusable(e->str);
        }
        script_answer_reply(b->w[i], r, at);
    }
    if (failed == 0)
        rconn_errlog_end(&b->c->errs, &b->c->st, name);
    if (unusable != NULL)
        batch_leave(b, unusable);
    return false;
}
