/*
 * policy_text.h — the parts of a policy's answers that are the same at
 * every check (its limits, windows, names, the RateLimit-Policy header), and
 * how each is written.  response.c writes an answer from these pieces and
 * the check's own numbers; policy_finalize() renders a policy's pieces once,
 * when its config loads, so that a check copies them instead of formatting
 * them again (docs/BENCHMARKS.md, "Measurements behind the code").
 *
 * Every piece is written by one function here, used both to render it at
 * load and to write it at a check when there is no rendered copy (a check's
 * own limits, a limit of a calendar period whose window's length depends on
 * now): the bytes are the same either way.
 */
#ifndef RL_POLICY_TEXT_H
#define RL_POLICY_TEXT_H

#include <stddef.h>
#include <stdint.h>

struct rl_limit;
struct rl_policy;
struct strbuf;

struct policy_piece {
    const char *s;
    size_t n;
};

/* The pieces of limit i of a policy ("R" the check's numbers that follow). */
struct policy_text_limit {
    int64_t cap;                /* policy_text_capacity() */
    struct policy_piece top;    /* ,"limit":CAP,"remaining":  (the body's top level) */
    struct policy_piece head;   /* [,]{"algorithm":"A","limit":L,"window_ms":W,"remaining": */
    struct policy_piece tail;   /* [,"burst":B],"retry_after_ms": */
    struct policy_piece xlimit; /* X-RateLimit-Limit: CAP\r\nX-RateLimit-Remaining:  */
    struct policy_piece rl;     /* RateLimit: "NAME[/i]";r= */
    struct policy_piece item;   /* "NAME[/i]";q=Q[;w=W]  (RateLimit-Policy's item) */
};

/* One flat block (free() frees it), built for one policy. */
struct policy_text {
    const struct rl_limit *limits; /* the policy's, when built */
    size_t nlimits;
    struct policy_piece name;  /* NAME" */
    struct policy_piece plist; /* RateLimit-Policy: every item\r\n */
    struct policy_text_limit l[];
};

/*
 * The rendered pieces of p, NULL when p has none: none were built (a
 * check's own limits, a limit of a calendar period), or p is a copy of the
 * policy they were built for (a copy's limits may differ; it never owns
 * them).
 */
const struct policy_text *policy_text_of(const struct rl_policy *p);

/* Render p's pieces (the old ones freed), or none (NULL) when a limit has a
 * calendar period: p->text, p->text_self.  policy_finalize() calls it. */
void policy_text_build(struct rl_policy *p);

/* What a limit lets a caller spend at once: its burst, or its limit. */
int64_t policy_text_capacity(const struct rl_limit *l);
/* The time in which that capacity is granted (in full, from empty), ms: a
 * period's is its length as of now_us (0: now). */
int64_t policy_text_capacity_ms(const struct rl_limit *l, int64_t now_us);

/* ,"window_ms":W (a period's length at now_us, and what period), or a
 * concurrency limit's ,"lease_ms":L */
void policy_text_window(struct strbuf *sb, const struct rl_limit *l, int64_t now_us);

/* The pieces of struct policy_text_limit, written into sb; now_us: as for
 * policy_text_capacity_ms(). */
void policy_text_top(struct strbuf *sb, const struct rl_limit *l);
void policy_text_head(struct strbuf *sb, const struct rl_limit *l, size_t i, int64_t now_us);
void policy_text_tail(struct strbuf *sb, const struct rl_limit *l);
void policy_text_xlimit(struct strbuf *sb, const struct rl_limit *l);
void policy_text_rl(struct strbuf *sb, const struct rl_policy *p, size_t i);
void policy_text_item(struct strbuf *sb, const struct rl_policy *p, size_t i, int64_t now_us);

#endif
