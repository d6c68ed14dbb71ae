/* response.c — see response.h. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "response.h"
#include "policy.h"
#include "policy_text.h"
#include "util.h"

int64_t
response_seconds(int64_t ms)
{
    return ms <= 0 ? 0 : ms / 1000 + (ms % 1000 != 0);
}

/*
 * The binding limit: among the limits that deny, the one that frees last
 * (it decides when the check can pass); when all allow, the one with the
 * least remaining, the first of equals.
 */
static size_t
pick_binding(const struct rl_limit_result *r, size_t n, int allowed)
{
    size_t best = 0;

    for (size_t i = 1; i < n; i++) {
        if (!allowed) {
            if (r[best].allowed && !r[i].allowed)
                best = i;
            else if (!r[best].allowed && !r[i].allowed) {
                int64_t a = r[best].retry_after_ms, b = r[i].retry_after_ms;
                /* -1 (can never fit) outranks any wait */
                if ((b < 0 && a >= 0) || (a >= 0 && b > a))
                    best = i;
            }
        } else if (r[i].remaining < r[best].remaining) {
            best = i;
        }
    }
    return best;
}

void
response_from_result(struct rl_decision *d, const struct rl_policy *policy,
                     const struct rl_check_res *res)
{
    memset(d, 0, sizeof(*d));
    d->policy = policy;
    d->nlimits = res->nlimits;
    memcpy(d->limits, res->limits, res->nlimits * sizeof(res->limits[0]));
    d->binding = pick_binding(d->limits, d->nlimits, res->allowed);
    for (size_t i = 0; i < d->nlimits && d->now_us == 0; i++)
        if (algo_has_period(&policy->limits[i]))
            d->now_us = now_unix_us();

    const struct rl_limit_result *b = &d->limits[d->binding];
    const struct rl_limit *l = &policy->limits[d->binding];
    d->limit = policy_text_capacity(l);
    d->remaining = b->remaining > d->limit ? d->limit : b->remaining;
    d->overdraft = b->overdraft;
    d->reset_ms = b->reset_ms;
    if (res->allowed) {
        d->retry_after_ms = 0;
    } else if (b->retry_after_ms < 0) {
        /* No wait makes it fit: say so, and give the longest wait that
         * means anything (the limit full again), never 0, which a client
         * would take as "now" and loop on. */
        int64_t full = policy_text_capacity_ms(l, d->now_us);
        d->never_fits = 1;
        d->retry_after_ms = b->reset_ms > full ? b->reset_ms : full;
    } else {
        d->retry_after_ms = b->retry_after_ms;
    }
    if (!res->allowed && d->retry_after_ms < 1)
        d->retry_after_ms = 1;

    /* the backend made every limit's wait cover the block already */
    d->blocked = !res->allowed && res->blocked_ms > 0;
    d->would_deny = !res->allowed;
    d->shadow = policy->shadow;
    d->allowed = res->allowed || policy->shadow;
    d->status = d->allowed ? 200 : 429;
}

void
response_no_policy(struct rl_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->status = 200;
    d->allowed = 1;
}

void
response_degraded_open(struct rl_decision *d, const struct rl_policy *policy)
{
    memset(d, 0, sizeof(*d));
    d->status = 200;
    d->allowed = 1;
    d->degraded = 1;
    d->policy = policy;
    d->shadow = policy->shadow;
}

/* "limits":[...] with each limit's configuration only: what is known when
 * the backend did not answer */
static void
sb_configured_limits(struct strbuf *sb, const struct rl_policy *p)
{
    sb_str(sb, ",\"limits\":[");
    for (size_t i = 0; i < p->nlimits; i++) {
        const struct rl_limit *l = &p->limits[i];

        sb_str(sb, i ? ",{\"algorithm\":\"" : "{\"algorithm\":\"");
        sb_str(sb, algo_def(l->algo)->name);
        sb_field(sb, "\",\"limit\":", l->limit);
        policy_text_window(sb, l, now_unix_us());
        if (algo_def(l->algo)->uses_burst)
            sb_field(sb, ",\"burst\":", l->burst);
        sb_str(sb, "}");
    }
    sb_str(sb, "]");
}

/* A literal: its length known when compiled. */
#define SB_LIT(sb, lit) sb_mem((sb), (lit), sizeof(lit) - 1)

/* A piece of the policy's rendered text (t its holder, NULL: none), or the
 * same bytes written now by `write` (policy_text.h). */
#define PIECE(sb, t, piece, write) \
    do { \
        if ((t) != NULL) \
            sb_mem((sb), (t)->piece.s, (t)->piece.n); \
        else \
            (void)(write); \
    } while (0)

/*
 * A number written, and where: the same number again is a copy of its
 * digits (an answer says its remaining four times, its reset twice), or
 * else written and remembered in its place.
 */
struct num {
    int64_t v;
    size_t at, n; /* n 0: none (or cut) */
};

static void
num_put(struct strbuf *sb, struct num *x, int64_t v)
{
    size_t at = sb->len;

    sb_i64(sb, v);
    x->v = v;
    x->at = at;
    x->n = sb_ok(sb) ? sb->len - at : 0;
}

static void
num_same(struct strbuf *sb, struct num *x, int64_t v)
{
    if (x->n > 0 && x->v == v)
        sb_mem(sb, sb->buf + x->at, x->n);
    else
        num_put(sb, x, v);
}

/* The binding limit's pieces, when its capacity is the decision's limit */
static const struct policy_text_limit *
binding_text(const struct policy_text *t, const struct rl_decision *d)
{
    return t != NULL && t->l[d->binding].cap == d->limit ? &t->l[d->binding] : NULL;
}

size_t
response_body(const struct rl_decision *d, char *buf, size_t size)
{
    const struct policy_text *t = d->policy != NULL ? policy_text_of(d->policy) : NULL;
    struct num rem, reset, retry;
    struct strbuf sb;

    sb_init(&sb, buf, size);
    if (d->settle && !d->settled) {
        sb_str(&sb, "{\"settled\":false}");
        goto out;
    }
    if (d->policy == NULL) {
        sb_str(&sb, d->charge ? "{\"allowed\":true,\"policy\":null,\"charged\":0}"
                              : "{\"allowed\":true,\"policy\":null}");
        goto out;
    }
    if (d->backlog_full) {
        sb_str(&sb, "{\"error\":\"charges: backlog full\"}");
        goto out;
    }
    if (d->pending) { /* kept: what it will count, the state unknown */
        sb_str(&sb, "{\"pending\":true,\"policy\":\"");
        sb_str(&sb, d->policy->name);
        sb_str(&sb, "\"");
        sb_field(&sb, ",\"charged\":", d->charged);
        sb_str(&sb, "}");
        goto out;
    }
    if (d->status == 503) { /* failure_mode closed: an error, and what is known */
        sb_str(&sb, "{\"error\":\"backend unavailable\",\"policy\":\"");
        sb_str(&sb, d->policy->name);
        sb_str(&sb, "\"");
        sb_configured_limits(&sb, d->policy);
        sb_str(&sb, "}");
        goto out;
    }
    if (d->settle)
        sb_str(&sb, d->allowed ? "{\"settled\":true,\"allowed\":true,\"policy\":\""
                               : "{\"settled\":true,\"allowed\":false,\"policy\":\"");
    else
        sb_str(&sb, d->allowed ? "{\"allowed\":true,\"policy\":\""
                               : "{\"allowed\":false,\"policy\":\"");
    /* policy names are [A-Za-z0-9_.-]: no escaping */
    PIECE(&sb, t, name, (sb_str(&sb, d->policy->name), sb_mem(&sb, "\"", 1)));
    if (d->shadow)
        sb_str(&sb, d->would_deny ? ",\"shadow\":true,\"would_deny\":true"
                                  : ",\"shadow\":true,\"would_deny\":false");
    if (d->degraded)
        sb_str(&sb, ",\"degraded\":true");
    if (d->never_fits)
        sb_str(&sb, ",\"never_fits\":true");
    if (d->blocked)
        sb_str(&sb, ",\"blocked\":true");
    if (d->nlimits == 0) { /* allowed without counting: the limits as configured */
        sb_configured_limits(&sb, d->policy);
        sb_str(&sb, "}");
        goto out;
    }
    if (d->charge)
        sb_field(&sb, ",\"charged\":", d->charged);
    if (d->charge || d->overdraft > 0)
        sb_field(&sb, ",\"overdraft\":", d->overdraft);
    PIECE(&sb, binding_text(t, d), top,
          (sb_field(&sb, ",\"limit\":", d->limit), SB_LIT(&sb, ",\"remaining\":")));
    num_put(&sb, &rem, d->remaining);
    SB_LIT(&sb, ",\"reset_ms\":");
    num_put(&sb, &reset, d->reset_ms);
    SB_LIT(&sb, ",\"retry_after_ms\":");
    num_put(&sb, &retry, d->retry_after_ms);
    if (d->delayed_ms > 0)
        sb_field(&sb, ",\"delayed_ms\":", d->delayed_ms);
    /* lease.h: hex, digits, base64url and dots, nothing to escape */
    if (d->lease != NULL) {
        sb_str(&sb, ",\"lease\":\"");
        sb_str(&sb, d->lease);
        sb_str(&sb, "\"");
    }
    /* reservation.h: the same alphabet */
    if (d->reservation != NULL) {
        sb_str(&sb, ",\"reservation\":\"");
        sb_str(&sb, d->reservation);
        sb_str(&sb, "\"");
    }
    SB_LIT(&sb, ",\"limits\":[");
    for (size_t i = 0; i < d->nlimits; i++) {
        const struct rl_limit *l = &d->policy->limits[i];
        const struct rl_limit_result *r = &d->limits[i];
        const struct policy_text_limit *tl = t != NULL ? &t->l[i] : NULL;

        PIECE(&sb, tl, head, policy_text_head(&sb, l, i, d->now_us));
        num_same(&sb, &rem, r->remaining);
        SB_LIT(&sb, ",\"reset_ms\":");
        num_same(&sb, &reset, r->reset_ms);
        PIECE(&sb, tl, tail, policy_text_tail(&sb, l));
        num_same(&sb, &retry, r->retry_after_ms);
        if (d->charge || r->overdraft > 0)
            sb_field(&sb, ",\"overdraft\":", r->overdraft);
        SB_LIT(&sb, "}");
    }
    sb_str(&sb, "]}");
out:
    return sb.len < size ? sb.len : size - 1;
}

/* ;pk=:<base64 of the 8 bytes>: (a Structured Fields Byte Sequence) */
static void
sb_pk(struct strbuf *sb, uint64_t pk)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char in[9] = {0};
    char out[13];

    for (int i = 0; i < 8; i++)
        in[i] = (unsigned char)(pk >> (56 - 8 * i));
    for (int i = 0, o = 0; i < 9; i += 3, o += 4) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o] = b64[v >> 18 & 63];
        out[o + 1] = b64[v >> 12 & 63];
        out[o + 2] = b64[v >> 6 & 63];
        out[o + 3] = b64[v & 63];
    }
    out[11] = '='; /* 8 bytes: the last group holds 2 */
    out[12] = '\0';
    sb_str(sb, ";pk=:");
    sb_str(sb, out);
    sb_str(sb, ":");
}

/* RateLimit-Policy: every limit of the policy as an item,
 * "<name>";q=Q[;w=W][;pk=...], in the policy's order */
static void
policy_line(struct strbuf *sb, const struct rl_decision *d, const struct policy_text *t)
{
    const struct rl_policy *p = d->policy;

    if (t != NULL && !d->has_pk) {
        sb_mem(sb, t->plist.s, t->plist.n);
        return;
    }
    SB_LIT(sb, "RateLimit-Policy: ");
    for (size_t i = 0; i < p->nlimits; i++) {
        if (i > 0)
            SB_LIT(sb, ", ");
        PIECE(sb, t, l[i].item, policy_text_item(sb, p, i, d->now_us));
        if (d->has_pk)
            sb_pk(sb, d->pk);
    }
    SB_LIT(sb, "\r\n");
}

void
response_header_lines(const struct rl_decision *d, struct strbuf *sb)
{
    const struct policy_text *t;
    struct num rem, reset;

    if (d->policy == NULL || (d->settle && !d->settled))
        return;
    t = policy_text_of(d->policy);
    if (d->nlimits == 0) {
        /* nothing was counted (the backend did not answer: failure_mode open,
         * or closed's 503): the policy is known, the numbers are not */
        if (d->policy->nlimits > 0)
            policy_line(sb, d, t);
        if (d->status == 503)
            SB_LIT(sb, "Retry-After: 1\r\n");
        return;
    }
    int64_t reset_s = response_seconds(d->reset_ms);
    /* the draft: with Retry-After, t SHOULD name the same moment */
    int64_t t_s = d->status == 429 ? response_seconds(d->retry_after_ms) : reset_s;

    /* a held check is answered when its reservation comes due: its quota
     * is there now (issue 23) */
    if (d->delayed_ms > 0)
        t_s = 0;

    PIECE(sb, binding_text(t, d), xlimit,
          (sb_field(sb, "X-RateLimit-Limit: ", d->limit),
           SB_LIT(sb, "\r\nX-RateLimit-Remaining: ")));
    num_put(sb, &rem, d->remaining);
    SB_LIT(sb, "\r\nX-RateLimit-Reset: ");
    num_put(sb, &reset, d->reset_epoch ? (int64_t)time(NULL) + reset_s : reset_s);
    SB_LIT(sb, "\r\n");
    policy_line(sb, d, t);
    PIECE(sb, t, l[d->binding].rl, policy_text_rl(sb, d->policy, d->binding));
    num_same(sb, &rem, d->remaining);
    SB_LIT(sb, ";t=");
    num_same(sb, &reset, t_s);
    if (d->has_pk)
        sb_pk(sb, d->pk);
    SB_LIT(sb, "\r\n");
    if (d->status == 429) {
        SB_LIT(sb, "Retry-After: ");
        num_same(sb, &reset, response_seconds(d->retry_after_ms));
        SB_LIT(sb, "\r\n");
    }
    if (d->lease != NULL) {
        SB_LIT(sb, "X-RateLimit-Lease: ");
        sb_str(sb, d->lease);
        SB_LIT(sb, "\r\n");
    }
    if (d->reservation != NULL) {
        SB_LIT(sb, "X-RateLimit-Reservation: ");
        sb_str(sb, d->reservation);
        SB_LIT(sb, "\r\n");
    }
}

/* Every name response_header_lines() writes: the callback's names are
 * these, which outlive it. */
static const char *const header_names[] = {
    "X-RateLimit-Limit", "X-RateLimit-Remaining",
    "X-RateLimit-Reset", "RateLimit-Policy",
    "RateLimit",         "Retry-After",
    "X-RateLimit-Lease", "X-RateLimit-Reservation",
};

void
response_headers(const struct rl_decision *d, rl_header_fn add, void *arg)
{
    char buf[RESPONSE_HEADERS_MAX];
    struct strbuf sb;
    char *p, *end;

    sb_init(&sb, buf, sizeof(buf));
    response_header_lines(d, &sb);
    /* each line whole: "Name: value\r\n" (a name has no colon, a value no CR) */
    for (p = buf, end = buf + (sb_ok(&sb) ? sb.len : 0); p < end;) {
        char *colon = memchr(p, ':', (size_t)(end - p));
        char *cr = colon != NULL ? memchr(colon, '\r', (size_t)(end - colon)) : NULL;

        if (cr == NULL)
            break;
        *cr = '\0';
        for (size_t i = 0; i < RL_ARRAY_LEN(header_names); i++)
            if (strlen(header_names[i]) == (size_t)(colon - p) &&
                memcmp(header_names[i], p, (size_t)(colon - p)) == 0)
                add(header_names[i], colon + 2, arg);
        p = cr + 2;
    }
}
