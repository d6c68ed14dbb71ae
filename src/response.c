/* response.c — see response.h. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "response.h"
#include "policy.h"
#include "util.h"

int64_t
response_seconds(int64_t ms)
{
    return ms <= 0 ? 0 : ms / 1000 + (ms % 1000 != 0);
}

/* What a limit lets a caller spend at once: its burst, or its limit. */
static int64_t
capacity(const struct rl_limit *l)
{
    return algo_def(l->algo)->uses_burst ? l->burst : l->limit;
}

/* The time in which that capacity is granted (in full, from empty), ms: a
 * period's is its length as of now_us (0: now). */
static int64_t
capacity_ms(const struct rl_limit *l, int64_t now_us)
{
    if (!algo_def(l->algo)->uses_burst || l->limit <= 0)
        return algo_window_ms(l, now_us != 0 || !algo_has_period(l) ? now_us : now_unix_us());
    /* a bucket refills limit per window: burst takes burst/limit windows
     * (bounded at load to 366 days, so this fits) */
    return (int64_t)(((unsigned __int128)l->burst * (unsigned __int128)l->window_ms +
                      (unsigned __int128)l->limit - 1) /
                     (unsigned __int128)l->limit);
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
    d->limit = capacity(l);
    d->remaining = b->remaining > d->limit ? d->limit : b->remaining;
    d->overdraft = b->overdraft;
    d->reset_ms = b->reset_ms;
    if (res->allowed) {
        d->retry_after_ms = 0;
    } else if (b->retry_after_ms < 0) {
        /* No wait makes it fit: say so, and give the longest wait that
         * means anything (the limit full again), never 0, which a client
         * would take as "now" and loop on. */
        int64_t full = capacity_ms(l, d->now_us);
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

/* Policy names and algorithm names are [A-Za-z0-9_.-]: no escaping. */
static void
sb_field(struct strbuf *sb, const char *name, int64_t v)
{
    sb_str(sb, name);
    sb_i64(sb, v);
}

/* ,"period":"week","timezone":"Europe/Berlin"[,"week_start":"sunday"]: zone
 * names are [A-Za-z0-9_+-/] (period.c), no escaping either. */
static void
sb_period(struct strbuf *sb, const struct rl_limit *l)
{
    sb_str(sb, ",\"period\":\"");
    sb_str(sb, period_kind_name(l->period.kind));
    sb_str(sb, "\",\"timezone\":\"");
    sb_str(sb, period_tz_name(l->period.tz));
    if (l->period.kind == RL_PERIOD_WEEK) {
        sb_str(sb, "\",\"week_start\":\"");
        sb_str(sb, period_week_start_name(l->period.week_start));
    }
    sb_str(sb, "\"");
}

/* ,"window_ms":W (a period's length at now_us, and what period), or a
 * concurrency limit's ,"lease_ms":L (its window) */
static void
sb_window(struct strbuf *sb, const struct rl_limit *l, int64_t now_us)
{
    if (l->algo == RL_ALGO_CONCURRENCY) {
        sb_field(sb, ",\"lease_ms\":", l->window_ms);
        return;
    }
    sb_field(sb, ",\"window_ms\":", algo_window_ms(l, now_us));
    if (algo_has_period(l))
        sb_period(sb, l);
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
        sb_window(sb, l, now_unix_us());
        if (algo_def(l->algo)->uses_burst)
            sb_field(sb, ",\"burst\":", l->burst);
        sb_str(sb, "}");
    }
    sb_str(sb, "]");
}

size_t
response_body(const struct rl_decision *d, char *buf, size_t size)
{
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
    sb_str(&sb, d->policy->name);
    sb_str(&sb, "\"");
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
    sb_field(&sb, ",\"limit\":", d->limit);
    sb_field(&sb, ",\"remaining\":", d->remaining);
    sb_field(&sb, ",\"reset_ms\":", d->reset_ms);
    sb_field(&sb, ",\"retry_after_ms\":", d->retry_after_ms);
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
    sb_str(&sb, ",\"limits\":[");
    for (size_t i = 0; i < d->nlimits; i++) {
        const struct rl_limit *l = &d->policy->limits[i];
        const struct rl_limit_result *r = &d->limits[i];

        sb_str(&sb, i ? ",{\"algorithm\":\"" : "{\"algorithm\":\"");
        sb_str(&sb, algo_def(l->algo)->name);
        sb_field(&sb, "\",\"limit\":", l->limit);
        sb_window(&sb, l, d->now_us);
        sb_field(&sb, ",\"remaining\":", r->remaining);
        sb_field(&sb, ",\"reset_ms\":", r->reset_ms);
        if (algo_def(l->algo)->uses_burst)
            sb_field(&sb, ",\"burst\":", l->burst);
        sb_field(&sb, ",\"retry_after_ms\":", r->retry_after_ms);
        if (d->charge || r->overdraft > 0)
            sb_field(&sb, ",\"overdraft\":", r->overdraft);
        sb_str(&sb, "}");
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

/* A limit's name in the quota headers: the policy's for a policy of one
 * limit, "<policy>/<i>" (i its index in "limits") for each of several, so
 * that RateLimit can say which item of RateLimit-Policy binds. */
static void
sb_item_name(struct strbuf *sb, const struct rl_policy *p, size_t i)
{
    sb_str(sb, "\"");
    sb_str(sb, p->name);
    if (p->nlimits > 1) {
        sb_str(sb, "/");
        sb_i64(sb, (int64_t)i);
    }
    sb_str(sb, "\"");
}

/* RateLimit-Policy: every limit of the policy as an item,
 * "<name>";q=Q[;w=W][;pk=...], in the policy's order */
static const char *
policy_list(char *buf, size_t size, const struct rl_decision *d)
{
    const struct rl_policy *p = d->policy;
    struct strbuf sb;

    sb_init(&sb, buf, size);
    for (size_t i = 0; i < p->nlimits; i++) {
        const struct rl_limit *l = &p->limits[i];
        int64_t period_ms = capacity_ms(l, d->now_us);

        if (i > 0)
            sb_str(&sb, ", ");
        sb_item_name(&sb, p, i);
        sb_field(&sb, ";q=", capacity(l));
        /* w is whole seconds in the draft: a window it cannot state exactly
         * (500ms, 1500ms) is left out rather than rounded into a wrong
         * promise; slots have no window to state: a lease is not one */
        if (period_ms % 1000 == 0 && l->algo != RL_ALGO_CONCURRENCY)
            sb_field(&sb, ";w=", period_ms / 1000);
        if (d->has_pk)
            sb_pk(&sb, d->pk);
    }
    return buf;
}

/* RateLimit: the binding limit's item, "<name>";r=R;t=T[;pk=...] */
static const char *
binding_item(char *buf, size_t size, const struct rl_decision *d, int64_t t_s)
{
    struct strbuf sb;

    sb_init(&sb, buf, size);
    sb_item_name(&sb, d->policy, d->binding);
    sb_field(&sb, ";r=", d->remaining);
    sb_field(&sb, ";t=", t_s);
    if (d->has_pk)
        sb_pk(&sb, d->pk);
    return buf;
}

static const char *
num(char *buf, size_t size, int64_t v)
{
    struct strbuf sb;

    sb_init(&sb, buf, size);
    sb_i64(&sb, v);
    return buf;
}

void
response_headers(const struct rl_decision *d, rl_header_fn add, void *arg)
{
    char v[RESPONSE_POLICY_MAX];

    if (d->policy == NULL || (d->settle && !d->settled))
        return;
    if (d->nlimits == 0) {
        /* nothing was counted (the backend did not answer: failure_mode open,
         * or closed's 503): the policy is known, the numbers are not */
        if (d->policy->nlimits > 0)
            add("RateLimit-Policy", policy_list(v, sizeof(v), d), arg);
        if (d->status == 503)
            add("Retry-After", "1", arg);
        return;
    }
    int64_t reset_s = response_seconds(d->reset_ms);
    /* the draft: with Retry-After, t SHOULD name the same moment */
    int64_t t_s = d->status == 429 ? response_seconds(d->retry_after_ms) : reset_s;

    /* a held check is answered when its reservation comes due: its quota
     * is there now (issue 23) */
    if (d->delayed_ms > 0)
        t_s = 0;

    add("X-RateLimit-Limit", num(v, sizeof(v), d->limit), arg);
    add("X-RateLimit-Remaining", num(v, sizeof(v), d->remaining), arg);
    add("X-RateLimit-Reset",
        num(v, sizeof(v), d->reset_epoch ? (int64_t)time(NULL) + reset_s : reset_s), arg);
    add("RateLimit-Policy", policy_list(v, sizeof(v), d), arg);
    add("RateLimit", binding_item(v, sizeof(v), d, t_s), arg);
    if (d->status == 429)
        add("Retry-After", num(v, sizeof(v), response_seconds(d->retry_after_ms)), arg);
    if (d->lease != NULL)
        add("X-RateLimit-Lease", d->lease, arg);
    if (d->reservation != NULL)
        add("X-RateLimit-Reservation", d->reservation, arg);
}
