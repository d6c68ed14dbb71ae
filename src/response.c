/* response.c — see response.h. */
#include <stdio.h>
#include <string.h>

#include "response.h"

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
decision_from_result(struct rl_decision *d, const struct rl_policy *policy,
                     const struct rl_check_res *res)
{
    memset(d, 0, sizeof(*d));
    d->policy = policy;
    d->nlimits = res->nlimits;
    memcpy(d->limits, res->limits, res->nlimits * sizeof(res->limits[0]));
    d->binding = pick_binding(d->limits, d->nlimits, res->allowed);

    const struct rl_limit_result *b = &d->limits[d->binding];
    d->limit = policy->limits[d->binding].limit;
    d->remaining = b->remaining;
    d->reset_ms = b->reset_ms;
    if (res->allowed)
        d->retry_after_ms = 0;
    else if (b->retry_after_ms < 0)
        d->retry_after_ms = b->reset_ms;   /* no promise we cannot keep */
    else
        d->retry_after_ms = b->retry_after_ms;

    d->would_deny = !res->allowed;
    d->shadow = policy->shadow;
    d->allowed = res->allowed || policy->shadow;
    d->status = d->allowed ? 200 : 429;
}

void
decision_no_policy(struct rl_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->status = 200;
    d->allowed = 1;
}

void
decision_degraded_open(struct rl_decision *d, const struct rl_policy *policy)
{
    memset(d, 0, sizeof(*d));
    d->status = 200;
    d->allowed = 1;
    d->degraded = 1;
    d->policy = policy;
    d->shadow = policy->shadow;
}

#define APPEND(...)                                                    \
    do {                                                               \
        if (o < size) {                                                \
            int n_ = snprintf(buf + o, size - o, __VA_ARGS__);         \
            o += n_ > 0 ? (size_t)n_ : 0;                              \
        }                                                              \
    } while (0)

size_t
response_body(const struct rl_decision *d, char *buf, size_t size)
{
    size_t o = 0;

    /* Policy names and algorithm names are [A-Za-z0-9_.-]: no escaping. */
    if (d->policy == NULL) {
        APPEND("{\"allowed\":true,\"policy\":null}");
        return o < size ? o : size - 1;
    }
    APPEND("{\"allowed\":%s,\"policy\":\"%s\"", d->allowed ? "true" : "false",
           d->policy->name);
    if (d->shadow)
        APPEND(",\"shadow\":true,\"would_deny\":%s", d->would_deny ? "true" : "false");
    if (d->degraded)
        APPEND(",\"degraded\":true");
    if (d->nlimits == 0) {      /* allowed without asking anyone */
        APPEND("}");
        return o < size ? o : size - 1;
    }
    APPEND(",\"limit\":%lld,\"remaining\":%lld,\"reset_ms\":%lld,\"retry_after_ms\":%lld,"
           "\"limits\":[", (long long)d->limit, (long long)d->remaining,
           (long long)d->reset_ms, (long long)d->retry_after_ms);
    for (size_t i = 0; i < d->nlimits; i++) {
        const struct rl_limit *l = &d->policy->limits[i];
        const struct rl_limit_result *r = &d->limits[i];
        APPEND("%s{\"algorithm\":\"%s\",\"limit\":%lld,\"window_ms\":%lld,"
               "\"remaining\":%lld,\"reset_ms\":%lld", i ? "," : "",
               algo_def(l->algo)->name, (long long)l->limit,
               (long long)l->window_ms, (long long)r->remaining,
               (long long)r->reset_ms);
        if (algo_def(l->algo)->uses_burst)
            APPEND(",\"burst\":%lld", (long long)l->burst);
        APPEND(",\"retry_after_ms\":%lld}", (long long)r->retry_after_ms);
    }
    APPEND("]}");
    return o < size ? o : size - 1;
}

void
response_headers(const struct rl_decision *d, rl_header_fn add, void *arg)
{
    char v[160];

    if (d->policy == NULL || d->nlimits == 0)
        return;
    const struct rl_limit *l = &d->policy->limits[d->binding];
    int64_t reset_s = response_seconds(d->reset_ms);

    snprintf(v, sizeof(v), "%lld", (long long)d->limit);
    add("X-RateLimit-Limit", v, arg);
    snprintf(v, sizeof(v), "%lld", (long long)d->remaining);
    add("X-RateLimit-Remaining", v, arg);
    snprintf(v, sizeof(v), "%lld", (long long)reset_s);
    add("X-RateLimit-Reset", v, arg);
    snprintf(v, sizeof(v), "\"%s\";q=%lld;w=%lld", d->policy->name,
             (long long)l->limit, (long long)response_seconds(l->window_ms));
    add("RateLimit-Policy", v, arg);
    snprintf(v, sizeof(v), "\"%s\";r=%lld;t=%lld", d->policy->name,
             (long long)d->remaining, (long long)reset_s);
    add("RateLimit", v, arg);
    if (d->status == 429) {
        int64_t s = response_seconds(d->retry_after_ms);
        snprintf(v, sizeof(v), "%lld", (long long)(s < 1 ? 1 : s));
        add("Retry-After", v, arg);
    }
}
