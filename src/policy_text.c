/* policy_text.c — see policy_text.h. */
#include <stdlib.h>
#include <string.h>

#include "policy_text.h"
#include "algo.h"
#include "period.h"
#include "policy.h"
#include "util.h"

/* The longest piece: a RateLimit-Policy line of RL_LIMITS_MAX items (the
 * rest are a name and a few numbers each). */
#define TEXT_MAX 4096

int64_t
policy_text_capacity(const struct rl_limit *l)
{
    return algo_def(l->algo)->uses_burst ? l->burst : l->limit;
}

int64_t
policy_text_capacity_ms(const struct rl_limit *l, int64_t now_us)
{
    if (!algo_def(l->algo)->uses_burst || l->limit <= 0)
        return algo_window_ms(l, now_us != 0 || !algo_has_period(l) ? now_us : now_unix_us());
    /* a bucket refills limit per window: burst takes burst/limit windows
     * (bounded at load to 366 days, so this fits) */
    return (int64_t)(((unsigned __int128)l->burst * (unsigned __int128)l->window_ms +
                      (unsigned __int128)l->limit - 1) /
                     (unsigned __int128)l->limit);
}

/* ,"period":"week","timezone":"Europe/Berlin"[,"week_start":"sunday"]: zone
 * names are [A-Za-z0-9_+-/] (period.c), policy and algorithm names
 * [A-Za-z0-9_.-]: no escaping. */
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

void
policy_text_window(struct strbuf *sb, const struct rl_limit *l, int64_t now_us)
{
    if (l->algo == RL_ALGO_CONCURRENCY) {
        sb_field(sb, ",\"lease_ms\":", l->window_ms);
        return;
    }
    sb_field(sb, ",\"window_ms\":", algo_window_ms(l, now_us));
    if (algo_has_period(l))
        sb_period(sb, l);
}

void
policy_text_top(struct strbuf *sb, const struct rl_limit *l)
{
    sb_field(sb, ",\"limit\":", policy_text_capacity(l));
    sb_str(sb, ",\"remaining\":");
}

void
policy_text_head(struct strbuf *sb, const struct rl_limit *l, size_t i, int64_t now_us)
{
    sb_str(sb, i ? ",{\"algorithm\":\"" : "{\"algorithm\":\"");
    sb_str(sb, algo_def(l->algo)->name);
    sb_field(sb, "\",\"limit\":", l->limit);
    policy_text_window(sb, l, now_us);
    sb_str(sb, ",\"remaining\":");
}

void
policy_text_tail(struct strbuf *sb, const struct rl_limit *l)
{
    if (algo_def(l->algo)->uses_burst)
        sb_field(sb, ",\"burst\":", l->burst);
    sb_str(sb, ",\"retry_after_ms\":");
}

void
policy_text_xlimit(struct strbuf *sb, const struct rl_limit *l)
{
    sb_field(sb, "X-RateLimit-Limit: ", policy_text_capacity(l));
    sb_str(sb, "\r\nX-RateLimit-Remaining: ");
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

void
policy_text_rl(struct strbuf *sb, const struct rl_policy *p, size_t i)
{
    sb_str(sb, "RateLimit: ");
    sb_item_name(sb, p, i);
    sb_str(sb, ";r=");
}

void
policy_text_item(struct strbuf *sb, const struct rl_policy *p, size_t i, int64_t now_us)
{
    const struct rl_limit *l = &p->limits[i];
    int64_t period_ms = policy_text_capacity_ms(l, now_us);

    sb_item_name(sb, p, i);
    sb_field(sb, ";q=", policy_text_capacity(l));
    /* w is whole seconds in the draft: a window it cannot state exactly
     * (500ms, 1500ms) is left out rather than rounded into a wrong
     * promise; slots have no window to state: a lease is not one */
    if (period_ms % 1000 == 0 && l->algo != RL_ALGO_CONCURRENCY)
        sb_field(sb, ";w=", period_ms / 1000);
}

const struct policy_text *
policy_text_of(const struct rl_policy *p)
{
    const struct policy_text *t = p->text_self == p ? p->text : NULL;

    return t != NULL && t->limits == p->limits && t->nlimits == p->nlimits ? t : NULL;
}

/* The piece written since `at`, as offsets into the text (made pointers
 * once the block has its place). */
static struct policy_piece
since(const struct strbuf *sb, size_t at)
{
    return (struct policy_piece){(const char *)(uintptr_t)at, sb->len - at};
}

static void
place(struct policy_piece *pc, const char *base)
{
    pc->s = base + (uintptr_t)pc->s;
}

void
policy_text_build(struct rl_policy *p)
{
    struct policy_text *t;
    struct strbuf sb;
    char *buf;
    size_t at, head;

    free(p->text);
    p->text = NULL;
    p->text_self = p;
    if (p->name == NULL) /* a config that will be refused */
        return;
    for (size_t i = 0; i < p->nlimits; i++)
        if (algo_has_period(&p->limits[i]))
            return; /* its window's length depends on when */
    head = sizeof(*t) + p->nlimits * sizeof(t->l[0]);
    t = xcalloc(1, head + TEXT_MAX);
    buf = (char *)t + head;
    sb_init(&sb, buf, TEXT_MAX);
    t->limits = p->limits;
    t->nlimits = p->nlimits;

    at = sb.len;
    sb_str(&sb, p->name);
    sb_str(&sb, "\"");
    t->name = since(&sb, at);
    for (size_t i = 0; i < p->nlimits; i++) {
        struct policy_text_limit *tl = &t->l[i];
        const struct rl_limit *l = &p->limits[i];

        tl->cap = policy_text_capacity(l);
        at = sb.len;
        policy_text_top(&sb, l);
        tl->top = since(&sb, at);
        at = sb.len;
        policy_text_head(&sb, l, i, 0);
        tl->head = since(&sb, at);
        at = sb.len;
        policy_text_tail(&sb, l);
        tl->tail = since(&sb, at);
        at = sb.len;
        policy_text_xlimit(&sb, l);
        tl->xlimit = since(&sb, at);
        at = sb.len;
        policy_text_rl(&sb, p, i);
        tl->rl = since(&sb, at);
        at = sb.len;
        policy_text_item(&sb, p, i, 0);
        tl->item = since(&sb, at);
    }
    at = sb.len;
    sb_str(&sb, "RateLimit-Policy: ");
    for (size_t i = 0; i < p->nlimits; i++) {
        if (i > 0)
            sb_str(&sb, ", ");
        policy_text_item(&sb, p, i, 0);
    }
    sb_str(&sb, "\r\n");
    t->plist = since(&sb, at);
    if (!sb_ok(&sb)) { /* cannot be, by the bounds of a policy: then none */
        free(t);
        return;
    }
    t = xrealloc(t, head + sb.len + 1);
    buf = (char *)t + head;
    place(&t->name, buf);
    place(&t->plist, buf);
    for (size_t i = 0; i < p->nlimits; i++) {
        place(&t->l[i].top, buf);
        place(&t->l[i].head, buf);
        place(&t->l[i].tail, buf);
        place(&t->l[i].xlimit, buf);
        place(&t->l[i].rl, buf);
        place(&t->l[i].item, buf);
    }
    p->text = t;
}
