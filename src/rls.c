/*
 * rls.c — see rls.h.  A request's descriptors are matched against the rules
 * of its domain (rls_rules.c); each that counts is decided by check.c as a
 * check of its rule's policy, for an identity made of the domain and the
 * descriptor's entries, of cost hits_addend; the answers are gathered into
 * one response as envoyproxy/ratelimit gives it (statuses in order, the
 * overall code, unlimited and replaced rules, shadow and quota modes).
 *
 * Keys: "{<key_prefix>rls:d:<domain>\x1e<key>\x1f<value>...}:<algo>:<window>"
 * escaped by identity_key (the separators show as %1E, %1F); a wildcard with
 * share_threshold puts its pattern after \x1c instead of the value.  So two
 * daemons, and a rule and an Envoy limit override of one descriptor and
 * unit, count in one key, as envoyproxy/ratelimit's "domain_key_value_..."
 * keys do.  An identity longer than RL_IDENTITY_MAX is its SHA-256.
 *
 * Counting: a rule of count_over_limit (rls_rules.h; by default one of
 * envoyproxy/ratelimit's form, and a descriptor's own limit) counts every
 * hit, over its limit too, as envoyproxy/ratelimit's INCRBY does: its
 * check is a charge answered as a check (check_start_policy's count_over),
 * so Envoy's token pattern (asks of 0, the tokens charged at stream end)
 * is over once the tokens pass the limit.  Other rules count only what
 * they allow, as /check does.
 */
#include <stdbool.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "check.h"
#include "config.h"
#include "identity.h"
#include "log.h"
#include "metrics.h"
#include "response.h"
#include "rls.h"
#include "slab.h"
#include "top.h"
#include "util.h"

/* Bounds of a request: Envoy sends a handful of descriptors of a few
 * entries; more is refused rather than decided slowly. */
#define RLS_DESCRIPTORS_MAX 256
#define RLS_ENTRIES_MAX 64
#define RLS_LABEL_MAX 256
#define KEYNAME "rls"

enum slot_kind {
    SLOT_NONE = 0,  /* no rule at its depth, an unknown domain, replaced */
    SLOT_UNLIMITED, /* unlimited: OK, limit_remaining 2^32 - 1 */
    SLOT_ZERO,      /* a limit of 0: every hit is over, no backend asked */
    SLOT_CHECK      /* decided by check.c */
};

struct rls_op;

struct rls_slot {
    struct rls_op *op;
    enum slot_kind kind;
    const struct rls_rule *rule; /* NULL for the descriptor's own limit */
    const struct rl_policy *policy;
    const struct rls_rule_limit *info; /* per limit of policy */
    int shadow, quota;
    int grouped;   /* decided with the others, all or nothing (rls_group) */
    int uncounted; /* its limits allowed, another's did not: nothing counted */
    int charges;   /* every hit counts, over the limit too (count_over_limit) */
    uint64_t hits; /* at most RL_COST_MAX (check_request) */
    int stat_id;
    struct rl_decision d; /* the check's answer, copied */
    /* the descriptor's own limit (RateLimitOverride) */
    struct rl_policy own;
    struct rl_limit own_limit;
    struct rls_rule_limit own_info;
};

struct rls_op {
    struct rl_config *cfg;
    const struct rl_check_env *env;
    rls_done done;
    void *arg;
    size_t n, pending;
    int starting;
    struct rls_group *group; /* NULL: each descriptor decided alone */
    struct rls_slot slots[];
};

/*
 * rls.all_or_nothing: the counted descriptors of a request as one policy of
 * every one's limits, limit j counting under its descriptor's own key (the
 * key it has when decided alone: the counts are the same ones), decided in
 * one backend call (check_start_keys).
 */
struct rls_group {
    struct rl_policy policy;
    struct rl_limit limits[RL_LIMITS_MAX];
    size_t slot[RL_LIMITS_MAX]; /* limit j is of op->slots[slot[j]] */
    int asked;                  /* cost 0: a limit of 0 denies the request, nothing counts */
    const char *keyp[RL_LIMITS_MAX];
    size_t klen[RL_LIMITS_MAX];
    char key[RL_LIMITS_MAX][RL_REDIS_KEY_MAX]; /* one per descriptor */
};

/* ---- identities -------------------------------------------------------------- */

/*
 * The identity bytes, "d:" then the domain and the entries with separators
 * that never appear inside a part: bytes 0x1c..0x1f of a part are written
 * as 0x1d and a digit.  Past size it goes on into a SHA-256.
 */
struct idbuf {
    char *buf;
    size_t size, len;
    EVP_MD_CTX *md; /* non-NULL once it overflowed */
};

static void
id_raw(struct idbuf *b, const char *p, size_t n)
{
    if (b->md == NULL && b->len + n <= b->size) {
        memcpy(b->buf + b->len, p, n);
        b->len += n;
        return;
    }
    if (b->md == NULL) {
        b->md = EVP_MD_CTX_new();
        /* out of memory, in effect: the one policy (util.c) is to stop */
        if (b->md == NULL || EVP_DigestInit_ex(b->md, EVP_sha256(), NULL) != 1)
            abort();
        EVP_DigestUpdate(b->md, b->buf, b->len);
    }
    EVP_DigestUpdate(b->md, p, n);
}

/* Whether one of the eight bytes of x is in 0x1c..0x1f (its top six bits
 * 000111). */
static inline bool
has_separator8(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t y = (x & 0xfcfcfcfcfcfcfcfcULL) ^ 0x1c1c1c1c1c1c1c1cULL; /* a 0 byte: one */

    return ((y - ones) & ~y & highs) != 0;
}

/* How many bytes of p[0..n) are whole blocks of eight with no byte in
 * 0x1c..0x1f before the first block with one (a part rarely has one);
 * copied to out unless it is NULL. */
static inline size_t
id_clean8(const char *p, size_t n, char *out)
{
    size_t i = 0;
    uint64_t x;

    while (i + 8 <= n && (memcpy(&x, p + i, 8), !has_separator8(x))) {
        if (out != NULL)
            memcpy(out + i, &x, 8);
        i += 8;
    }
    return i;
}

/* The index of the first byte of p[0..n) in 0x1c..0x1f, or n. */
static size_t
id_separator(const char *p, size_t n)
{
    size_t i = id_clean8(p, n, NULL);

    for (; i < n; i++)
        if (((unsigned char)p[i] & 0xfc) == 0x1c)
            return i;
    return n;
}

static void
id_part(struct idbuf *b, const char *p, size_t n)
{
    size_t s = 0, i;

    while ((i = s + id_separator(p + s, n - s)) < n) {
        char esc[2] = {0x1d, (char)('0' + ((unsigned char)p[i] - 0x1c))};
        id_raw(b, p + s, i - s);
        id_raw(b, esc, 2);
        s = i + 1;
    }
    id_raw(b, p + s, n - s);
}

/* Part p[0..n) at o, its separators as id_part writes them; the end.  o
 * has room for 2n bytes. */
static char *
id_put(char *o, const char *p, size_t n)
{
    size_t i = id_clean8(p, n, o);

    o += i;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)p[i];

        if ((c & 0xfc) == 0x1c) {
            *o++ = 0x1d;
            *o++ = (char)('0' + (c - 0x1c));
        } else {
            *o++ = (char)c;
        }
    }
    return o;
}

size_t
rls_identity(char *out, size_t size, const struct rls_str *domain,
             const struct rls_descriptor *d, const struct rls_str *const *shared)
{
    struct idbuf b = {out, size, 0, NULL};
    unsigned char md[32];
    static const char hex[] = "0123456789abcdef";
    size_t most = 2 + 2 * domain->len;

    /* Written straight when it fits with every byte a separator (the same
     * bytes as below: ~200 instructions a descriptor less than a part and
     * a separator at a time through id_raw). */
    for (size_t i = 0; i < d->nentries; i++) {
        const struct rls_str *v = shared != NULL && shared[i] != NULL ? shared[i]
                                                                      : &d->entries[i].value;
        most += 2 + 2 * d->entries[i].key.len + 2 * v->len;
    }
    if (most <= size) {
        char *o = out;

        memcpy(o, "d:", 2);
        o = id_put(o + 2, domain->p, domain->len);
        for (size_t i = 0; i < d->nentries; i++) {
            bool sh = shared != NULL && shared[i] != NULL;
            const struct rls_str *v = sh ? shared[i] : &d->entries[i].value;

            *o++ = '\x1e';
            o = id_put(o, d->entries[i].key.p, d->entries[i].key.len);
            *o++ = sh ? '\x1c' : '\x1f';
            o = id_put(o, v->p, v->len);
        }
        return (size_t)(o - out);
    }
    id_raw(&b, "d:", 2);
    id_part(&b, domain->p, domain->len);
    for (size_t i = 0; i < d->nentries; i++) {
        const struct rls_str *v = shared != NULL && shared[i] != NULL ? shared[i]
                                                                      : &d->entries[i].value;
        id_raw(&b, "\x1e", 1);
        id_part(&b, d->entries[i].key.p, d->entries[i].key.len);
        id_raw(&b, shared != NULL && shared[i] != NULL ? "\x1c" : "\x1f", 1);
        id_part(&b, v->p, v->len);
    }
    if (b.md == NULL)
        return b.len;
    EVP_DigestFinal_ex(b.md, md, NULL);
    EVP_MD_CTX_free(b.md);
    memcpy(out, "h:", 2);
    for (size_t i = 0; i < sizeof(md); i++) {
        out[2 + 2 * i] = hex[md[i] >> 4];
        out[3 + 2 * i] = hex[md[i] & 15];
    }
    return 2 + 2 * sizeof(md);
}

/* ---- metrics labels ----------------------------------------------------------- */

static void
label_add(struct strbuf *sb, const char *p, size_t n)
{
    sb_mem(sb, p, n);
}

/* "key_value" of entry e (key alone when value is NULL). */
static void
label_level(struct strbuf *sb, const struct rls_str *key, const struct rls_str *value)
{
    if (sb->len > 0)
        sb_mem(sb, ".", 1);
    label_add(sb, key->p, key->len);
    if (value != NULL) {
        sb_mem(sb, "_", 1);
        label_add(sb, value->p, value->len);
    }
}

/*
 * The label of a rule whose name holds a request's values, as
 * envoyproxy/ratelimit builds it: detailed_metric, every entry's key_value
 * (a shared wildcard's pattern); value_to_metric, the value at each level
 * that has it (a key-only level or an unshared wildcard), the config's name
 * elsewhere.
 */
static size_t
dynamic_label(char *buf, size_t size, const struct rls_rule *rule,
              const struct rls_descriptor *d, const struct rls_str *const *shared)
{
    const struct rls_rule *path[RLS_ENTRIES_MAX];
    struct strbuf sb;
    size_t n = 0;

    sb_init(&sb, buf, size);
    for (const struct rls_rule *r = rule; r != NULL && n < RLS_ENTRIES_MAX; r = r->parent)
        path[n++] = r;
    for (size_t i = 0; i < d->nentries && i < n; i++) {
        const struct rls_rule *r = path[n - 1 - i];
        const struct rls_str *key = &d->entries[i].key, *value = &d->entries[i].value;
        if (shared[i] != NULL)
            value = shared[i];
        else if (!rule->detailed_metric && r->parts != NULL && !r->value_to_metric)
            value = &r->value;
        else if (!rule->detailed_metric && r->value.p == NULL && !r->value_to_metric)
            value = NULL;
        /* value_to_metric with an empty value: the key alone ("route", not
         * "route_"), as envoyproxy/ratelimit writes a level with no value */
        if (!rule->detailed_metric && value != NULL && value->len == 0)
            value = NULL;
        label_level(&sb, key, value);
    }
    return sb.len < size ? sb.len : size - 1;
}

static int
stat_id(const struct rls_slot *s, const struct rls_str *domain, const struct rls_descriptor *d,
        const struct rls_str *const *shared)
{
    char buf[RLS_LABEL_MAX + 1];
    int id;

    if (s->rule == NULL)
        return metrics_rls_id(domain->p, domain->len, "(limit override)", 16);
    if (s->rule->dynamic_label) {
        size_t n = dynamic_label(buf, sizeof(buf), s->rule, d, shared);
        return metrics_rls_id(domain->p, domain->len, buf, n);
    }
    /* the rules are immutable but for this cache, the same answer from
     * any thread */
    id = __atomic_load_n(&s->rule->stat_id, __ATOMIC_RELAXED);
    if (id < 0) {
        id = metrics_rls_id(domain->p, domain->len, s->rule->label, strlen(s->rule->label));
        __atomic_store_n((int *)&s->rule->stat_id, id, __ATOMIC_RELAXED);
    }
    return id;
}

/* ---- the answer ------------------------------------------------------------------ */

struct header_sink {
    struct rls_response *resp;
};

static void
rls_add_header(const char *name, const char *value, void *arg)
{
    struct rls_response *resp = arg;

    if (resp->nheaders < RLS_HEADERS_MAX) {
        resp->headers[resp->nheaders].name = name;
        resp->headers[resp->nheaders++].value = xstrdup(value);
    }
}

/* ms until the window of limit l that holds now ends (the daemon's clock;
 * Redis's answers it when the window has counts). */
static int64_t
window_left_ms(const struct rl_limit *l)
{
    int64_t now_ms = now_unix_us() / 1000;

    return l->window_ms - now_ms % l->window_ms;
}

/* A decision for a limit of 0: over, nothing asked. */
static void
zero_decision(const struct rls_slot *s, struct rl_config *cfg, struct rl_decision *d)
{
    size_t b = s->rule != NULL ? s->rule->zero - 1 : 0;
    const struct rl_limit *l = &s->policy->limits[b];
    int64_t left = window_left_ms(l);

    memset(d, 0, sizeof(*d));
    d->policy = s->policy;
    d->nlimits = s->policy->nlimits;
    d->binding = b;
    d->limit = 0;
    d->reset_ms = left;
    d->retry_after_ms = left;
    d->limits[b].reset_ms = left;
    d->limits[b].retry_after_ms = left;
    d->would_deny = 1;
    d->shadow = s->shadow;
    d->allowed = s->shadow;
    d->status = d->allowed ? 200 : 429;
    d->reset_epoch = cfg->reset_format == RL_RESET_EPOCH;
}

/* The counts envoyproxy/ratelimit keeps of one descriptor's hits: within,
 * near (past near_limit_ratio of the limit), over, shadow. */
static void
count(const struct rls_slot *s, double ratio, struct rl_metrics *m)
{
    const struct rl_decision *d = &s->d;
    uint64_t H = s->hits, L, before, after, near;

    if (s->kind == SLOT_CHECK && d->nlimits == 0)
        return; /* allowed unasked (failure_mode open): nothing known */
    L = d->limit > 0 ? (uint64_t)d->limit : 0;
    if (s->kind == SLOT_CHECK && s->charges)
        metrics_rls(m, s->stat_id, RL_RLS_CHARGED, H);
    if (!d->would_deny) {
        after = L - (uint64_t)(d->remaining < (int64_t)L ? d->remaining : (int64_t)L);
        before = after >= H ? after - H : 0;
    } else if (s->kind == SLOT_CHECK && s->charges) {
        /* counted: the state is after the hits, past the limit */
        after = L + (uint64_t)(d->overdraft > 0 ? d->overdraft : 0);
        before = after >= H ? after - H : 0;
    } else {
        before = L - (uint64_t)(d->remaining < (int64_t)L ? d->remaining : (int64_t)L);
        after = before + H;
    }
    /* as envoyproxy/ratelimit computes it: a float32 product, floored */
    near = (uint64_t)floor((double)((float)L * (float)ratio));
    if (d->would_deny) {
        uint64_t over = before >= L ? H : after - L;
        metrics_rls(m, s->stat_id, RL_RLS_OVER_LIMIT, over);
        if (before < L)
            metrics_rls(m, s->stat_id, RL_RLS_NEAR_LIMIT, L - (near > before ? near : before));
        if (s->shadow)
            metrics_rls(m, s->stat_id, RL_RLS_SHADOW_MODE, over);
    } else {
        if (after > near)
            metrics_rls(m, s->stat_id, RL_RLS_NEAR_LIMIT, before >= near ? H : after - near);
        metrics_rls(m, s->stat_id, RL_RLS_WITHIN_LIMIT, H);
    }
}

/* Slot s's DescriptorStatus from its decision. */
static void
status_of(const struct rls_slot *s, struct rls_status *st)
{
    const struct rl_decision *d = &s->d;
    const struct rls_rule_limit *info;
    const struct rl_limit *l;
    int64_t ms;

    memset(st, 0, sizeof(*st));
    st->code = RLS_CODE_OK;
    st->until_reset_ms = -1;
    switch (s->kind) {
    case SLOT_NONE: return;
    case SLOT_UNLIMITED: st->limit_remaining = UINT32_MAX; return;
    default: break;
    }
    info = &s->info[d->nlimits > 0 ? d->binding : 0];
    st->has_limit = 1;
    st->requests_per_unit = info->requests_per_unit;
    st->unit = info->unit;
    st->name = info->name;
    if (d->nlimits == 0) /* failure_mode open: allowed, nothing known */
        return;
    st->code = d->allowed ? RLS_CODE_OK : RLS_CODE_OVER_LIMIT;
    st->limit_remaining = d->would_deny || d->remaining < 0 ? 0 : (uint64_t)d->remaining;
    l = &s->policy->limits[d->binding];
    ms = d->reset_ms;
    /* a window with nothing in it is whole: its end is the clock's */
    if (ms == 0 && l->algo == RL_ALGO_FIXED_WINDOW && l->align == RL_ALIGN_EPOCH)
        ms = window_left_ms(l);
    /* whole seconds, as envoyproxy/ratelimit's clock of seconds gives it */
    if (info->unit_form)
        ms = (ms + 999) / 1000 * 1000;
    st->until_reset_ms = ms;
}

/*
 * The descriptor whose numbers the RateLimit headers show, as
 * envoyproxy/ratelimit picks it: the least remaining of those with a
 * limit, and an over-limit one (not of quota_mode) before any.
 */
static const struct rls_slot *
header_slot(const struct rls_op *op, const struct rls_status *st)
{
    const struct rls_slot *best = NULL;
    uint64_t least = UINT64_MAX;

    for (size_t i = 0; i < op->n; i++) {
        const struct rls_slot *s = &op->slots[i];
        if (!st[i].has_limit || s->d.nlimits == 0)
            continue;
        if (st[i].limit_remaining < least) {
            best = s;
            least = st[i].limit_remaining;
        }
        if (st[i].code == RLS_CODE_OVER_LIMIT && !s->quota) {
            best = s;
            least = 0;
        }
    }
    return best;
}

/* envoyproxy/ratelimit's three headers (rls.header_names), from the status
 * it answers: the limit, what remains of it, the seconds until it resets. */
static void
envoy_headers(const struct rl_rls_header_names *names, const struct rls_status *st,
              struct rls_response *resp)
{
    char v[24];

    snprintf(v, sizeof(v), "%" PRIu64, st->requests_per_unit);
    rls_add_header(names->limit, v, resp);
    snprintf(v, sizeof(v), "%" PRIu64, st->limit_remaining);
    rls_add_header(names->remaining, v, resp);
    snprintf(v, sizeof(v), "%" PRId64,
             st->until_reset_ms > 0 ? (st->until_reset_ms + 999) / 1000 : 0);
    rls_add_header(names->reset, v, resp);
}

static void
rls_finish(struct rls_op *op)
{
    struct rl_config *cfg = op->cfg;
    /* Envoy sends a handful of descriptors: no allocation for them */
    struct rls_status few[8];
    struct rls_status *st = op->n <= RL_ARRAY_LEN(few) ? few : xmalloc(op->n * sizeof(*st));
    struct rls_response resp;
    size_t over = 0, quota = 0, quota_over = 0;
    int unavailable = 0, expired = 0;
    enum rl_rls_result result;

    memset(&resp, 0, sizeof(resp));
    for (size_t i = 0; i < op->n; i++) {
        struct rls_slot *s = &op->slots[i];
        if (s->kind == SLOT_ZERO)
            zero_decision(s, cfg, &s->d);
        if (s->kind == SLOT_CHECK && s->d.status == 503)
            unavailable = 1;
        if (s->kind == SLOT_CHECK && s->d.expired)
            expired = 1;
        status_of(s, &st[i]);
        if ((s->kind == SLOT_CHECK || s->kind == SLOT_ZERO) && !s->uncounted)
            count(s, cfg->rls.near_limit_ratio, op->env->metrics);
        if (s->kind == SLOT_UNLIMITED)
            continue;
        if (s->quota) {
            quota++;
            quota_over += st[i].code == RLS_CODE_OVER_LIMIT;
        } else {
            over += st[i].code == RLS_CODE_OVER_LIMIT;
        }
    }
    /* OVER_LIMIT when a rate limit is over, or every quota is */
    resp.overall_code = over > 0 || (quota > 0 && quota == quota_over) ? RLS_CODE_OVER_LIMIT
                                                                       : RLS_CODE_OK;
    if (resp.overall_code == RLS_CODE_OVER_LIMIT && cfg->rls.shadow_mode) {
        resp.overall_code = RLS_CODE_OK;
        __atomic_add_fetch(&op->env->metrics->rls_global_shadow, 1, __ATOMIC_RELAXED);
    }
    resp.statuses = st;
    resp.nstatuses = op->n;
    if (expired) {
        resp.grpc_status = 4;
        resp.message = "the deadline (grpc-timeout) passed";
        result = RL_RLS_UNAVAILABLE;
    } else if (unavailable) {
        resp.grpc_status = 14;
        resp.message = "backend unavailable (failure_mode closed)";
        result = RL_RLS_UNAVAILABLE;
    } else {
        const struct rls_slot *h = cfg->rls.response_headers ? header_slot(op, st) : NULL;
        if (h != NULL && cfg->rls.header_names.limit != NULL)
            envoy_headers(&cfg->rls.header_names, &st[h - op->slots], &resp);
        else if (h != NULL)
            response_headers(&h->d, rls_add_header, &resp);
        result = resp.overall_code == RLS_CODE_OVER_LIMIT ? RL_RLS_OVER : RL_RLS_OK;
    }
    __atomic_add_fetch(&op->env->metrics->rls_requests[result], 1, __ATOMIC_RELAXED);
    op->done(&resp, op->arg);
    for (size_t i = 0; i < resp.nheaders; i++)
        free(resp.headers[i].value);
    if (st != few)
        free(st);
    free(op->group);
    config_unref(cfg);
    if (op->env->slab != NULL)
        slab_release(op->env->slab, op);
    else
        free(op);
}

static void
on_check(const struct rl_decision *d, void *arg)
{
    struct rls_slot *s = arg;
    struct rls_op *op = s->op;

    s->d = *d;
    if (--op->pending == 0 && !op->starting)
        rls_finish(op);
}

/* The group's decision, as each of its descriptors' own: the results of
 * its limits, allowed when they all allow; a denied request counted
 * nothing, so a descriptor whose limits allowed is not counted either. */
static void
on_group(const struct rl_decision *d, void *arg)
{
    struct rls_op *op = arg;
    const struct rls_group *g = op->group;

    for (size_t i = 0; i < op->n; i++) {
        struct rls_slot *s = &op->slots[i];
        struct rl_check_res r = {.status = RL_BACKEND_OK, .allowed = 1};
        size_t first = 0; /* its first limit: its key */

        if (!s->grouped)
            continue;
        if (d->nlimits == 0) { /* the backend failed: failure_mode's answer */
            s->d = *d;
            s->d.policy = s->policy;
            continue;
        }
        for (size_t j = 0; j < g->policy.nlimits; j++) {
            if (g->slot[j] != i)
                continue;
            if (r.nlimits == 0)
                first = j;
            r.limits[r.nlimits++] = d->limits[j];
            r.allowed &= d->limits[j].allowed;
        }
        if (d->blocked) {
            r.allowed = 0;
            r.blocked_ms = 1;
        }
        response_from_result(&s->d, s->policy, &r);
        s->d.degraded = d->degraded;
        s->d.reset_epoch = d->reset_epoch;
        s->uncounted = g->asked || (d->would_deny && r.allowed);
        /* its caller, as if decided alone: denied by its own limits, or
         * its hits when the group counted them */
        if (!d->degraded)
            check_count_caller(op->env, op->cfg, s->policy, KEYNAME, g->keyp[first],
                               g->klen[first], TOP_RLS_ID(s->stat_id), !r.allowed,
                               g->asked || d->would_deny ? 0 : (int64_t)s->hits);
    }
    if (--op->pending == 0 && !op->starting)
        rls_finish(op);
}

/* ---- the request ------------------------------------------------------------------ */

static int
check_request(const struct rls_request *req, char **cause)
{
    if (req->domain.len == 0) {
        *cause = xstrdup("domain: rate limit domain must not be empty");
        return RL_ERR;
    }
    if (req->ndescriptors == 0) {
        *cause = xstrdup("descriptors: rate limit descriptor list must not be empty");
        return RL_ERR;
    }
    if (req->ndescriptors > RLS_DESCRIPTORS_MAX) {
        *cause = xasprintf("descriptors: at most %d", RLS_DESCRIPTORS_MAX);
        return RL_ERR;
    }
    for (size_t i = 0; i < req->ndescriptors; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        if (d->nentries > RLS_ENTRIES_MAX) {
            *cause = xasprintf("descriptors[%zu].entries: at most %d", i, RLS_ENTRIES_MAX);
            return RL_ERR;
        }
        /* budgets, as a check's cost and limit: exact in the script's
         * doubles, with room for the counts (algo.h, ALGO_UNITS_MAX) */
        if (d->has_hits_addend && d->hits_addend > (uint64_t)RL_COST_MAX) {
            *cause = xasprintf("descriptors[%zu].hits_addend: at most %lld", i, RL_COST_MAX);
            return RL_ERR;
        }
        if (d->has_limit && d->limit_requests_per_unit > (uint64_t)RL_COST_MAX) {
            *cause = xasprintf("descriptors[%zu].limit.requests_per_unit: at most %lld", i,
                               RL_COST_MAX);
            return RL_ERR;
        }
        if (d->has_limit && rls_unit_ms(d->limit_unit) == 0) {
            *cause = xasprintf("descriptors[%zu].limit.unit: must be SECOND, MINUTE, HOUR, "
                               "DAY, WEEK, MONTH or YEAR",
                               i);
            return RL_ERR;
        }
    }
    return RL_OK;
}

/* The metrics id the rules' policies count under (config_set_metrics_ids). */
static int
policy_metrics_id(void)
{
    static int id = -1;
    int v = __atomic_load_n(&id, __ATOMIC_RELAXED);

    if (v < 0) {
        v = metrics_policy_id("rls");
        __atomic_store_n(&id, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* The descriptor's own limit (from Envoy's dynamic metadata) as a policy of
 * the slot: a fixed window of its unit, aligned to the epoch; its uid is
 * its limit's, so a denial cached under one limit never answers another. */
static void
own_limit(struct rls_slot *s, const struct rls_descriptor *d)
{
    s->own_limit.algo = RL_ALGO_FIXED_WINDOW;
    s->own_limit.limit = (int64_t)d->limit_requests_per_unit;
    s->own_limit.window_ms = rls_unit_ms(d->limit_unit);
    s->own_limit.burst = s->own_limit.limit;
    s->own_limit.align = RL_ALIGN_EPOCH;
    s->own_info.requests_per_unit = d->limit_requests_per_unit;
    s->own_info.unit = d->limit_unit;
    s->own_info.unit_form = 1;
    s->own.name = (char *)KEYNAME;
    s->own.limits = &s->own_limit;
    s->own.nlimits = 1;
    /* the limit (< 2^50) and the unit (< 8) side by side */
    s->own.uid = (1ULL << 63) | d->limit_requests_per_unit << 3 | (uint64_t)d->limit_unit;
    s->own.metrics_id = policy_metrics_id();
    s->policy = &s->own;
    s->info = &s->own_info;
    s->kind = d->limit_requests_per_unit == 0 ? SLOT_ZERO : SLOT_CHECK;
    /* Envoy's limit, counted as envoyproxy/ratelimit counts it */
    s->charges = !s->op->cfg->rls.all_or_nothing;
}

/*
 * With rls.all_or_nothing, the group of op's counted descriptors: two or
 * more (or one beside a limit of 0, which denies the request: the group is
 * then only asked, *cost 0), of one cost (the script's call has one),
 * neither shadow_mode nor quota_mode (they never deny the request alone),
 * RL_LIMITS_MAX limits in all, no key counted twice (a descriptor sent
 * twice).  NULL otherwise: each is decided alone, as without the option.
 */
static struct rls_group *
group_of(struct rls_op *op, const struct rl_config *cfg, const struct rls_request *req,
         const struct rls_domain *dom, int64_t *cost)
{
    const struct rls_str *shared[RLS_ENTRIES_MAX];
    struct rls_group *g;
    size_t members = 0, n = 0, k = 0;
    char id[RL_IDENTITY_MAX];
    uint64_t uid = 0x9e3779b97f4a7c15ULL;
    int doomed = 0;

    if (!cfg->rls.all_or_nothing)
        return NULL;
    for (size_t i = 0; i < op->n; i++) {
        const struct rls_slot *s = &op->slots[i];
        doomed |= s->kind == SLOT_ZERO && !s->shadow && !s->quota;
        if (s->kind != SLOT_CHECK || s->shadow || s->quota || s->charges)
            continue;
        if (members > 0 && s->hits != op->slots[k].hits)
            return NULL;
        k = i;
        members++;
        n += s->policy->nlimits;
    }
    if (members < (doomed ? 1u : 2u) || n > RL_LIMITS_MAX)
        return NULL;
    *cost = doomed ? 0 : (int64_t)op->slots[k].hits;
    g = xcalloc(1, sizeof(*g));
    members = 0;
    for (size_t i = 0; i < op->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        const struct rls_slot *s = &op->slots[i];
        size_t idlen, klen;

        if (s->kind != SLOT_CHECK || s->shadow || s->quota || s->charges)
            continue;
        if (s->rule != NULL)
            (void)rls_rules_match(dom, d->entries, d->nentries, shared);
        idlen = rls_identity(id, sizeof(id), &req->domain, d, s->rule != NULL ? shared : NULL);
        if (identity_key(cfg->redis.key_prefix, KEYNAME, id, idlen, s->policy->limit_ids,
                         g->key[members], sizeof(g->key[members]), &klen) != RL_OK)
            goto alone;
        for (size_t j = 0; j < s->policy->nlimits; j++) {
            size_t at = g->policy.nlimits++;
            g->limits[at] = s->policy->limits[j];
            g->slot[at] = i;
            g->keyp[at] = g->key[members];
            g->klen[at] = klen;
            /* the same key and limit twice would count once */
            for (size_t e = 0; e < at; e++)
                if (g->klen[e] == klen && memcmp(g->keyp[e], g->key[members], klen) == 0 &&
                    g->limits[e].algo == g->limits[at].algo &&
                    g->limits[e].window_ms == g->limits[at].window_ms)
                    goto alone;
        }
        uid = (uid ^ s->policy->uid) * 0x100000001b3ULL;
        members++;
    }
    g->policy.name = (char *)KEYNAME;
    g->policy.limits = g->limits;
    g->policy.metrics_id = policy_metrics_id();
    /* its own in the deny cache: not any policy's (bit 63: own limits') */
    g->policy.uid = (uid & ~(3ULL << 62)) | (1ULL << 62);
    for (size_t j = 0; j < g->policy.nlimits; j++)
        op->slots[g->slot[j]].grouped = 1;
    return g;
alone:
    free(g);
    return NULL;
}

static bool
replaced(const struct rls_rule *r, const struct rls_op *op)
{
    for (size_t k = 0; k < r->nnames; k++)
        for (size_t i = 0; i < op->n; i++) {
            const struct rls_rule *o = op->slots[i].rule;
            if (o == NULL || op->slots[i].kind == SLOT_NONE)
                continue;
            for (size_t j = 0; j < o->nreplaces; j++)
                if (strcmp(o->replaces[j], r->names[k]) == 0)
                    return true;
        }
    return false;
}

/*
 * A descriptor's own limit (Envoy's RateLimitOverride) under the rule of a
 * check's own limits (POST /check "limits"): only when rls.request_limits
 * allows them, at most rls.request_limits_max; else the request is refused
 * naming the descriptor, nothing counted.
 */
static int
own_limits_allowed(const struct rl_config *cfg, const struct rls_request *req, char **cause)
{
    for (size_t i = 0; i < req->ndescriptors; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];

        if (!d->has_limit)
            continue;
        if (!cfg->rls.request_limits) {
            *cause = xasprintf("descriptors[%zu].limit: this daemon takes no limits from "
                               "descriptors (rls.request_limits is false)",
                               i);
            return RL_ERR;
        }
        if (cfg->rls.request_limits_max != 0 &&
            (int64_t)d->limit_requests_per_unit > cfg->rls.request_limits_max) {
            *cause = xasprintf("descriptors[%zu].limit.requests_per_unit: at most %lld "
                               "(rls.request_limits_max)",
                               i, (long long)cfg->rls.request_limits_max);
            return RL_ERR;
        }
    }
    return RL_OK;
}

/* A call's state, from the worker's slab: with a hundred calls in flight,
 * malloc's per-thread cache (7 blocks a size) misses, and calloc never uses
 * it. */
static struct rls_op *
op_new(const struct rl_check_env *env, struct rl_config *cfg, const struct rls_request *req,
       rls_done done, void *arg)
{
    size_t size = sizeof(struct rls_op) + req->ndescriptors * sizeof(struct rls_slot);
    struct rls_op *op = memset(env->slab != NULL ? slab_alloc(env->slab, size) : xmalloc(size),
                               0, size);

    op->cfg = config_ref(cfg);
    op->env = env;
    op->done = done;
    op->arg = arg;
    op->n = req->ndescriptors;
    return op;
}

/* What applies to each descriptor of req in domain dom (NULL: none).
 * Returns the descriptor whose patterns `shared` holds (SIZE_MAX: none). */
static size_t
match_slots(struct rls_op *op, const struct rls_request *req, const struct rls_domain *dom,
            const struct rls_str **shared)
{
    size_t sharing = SIZE_MAX;

    for (size_t i = 0; i < op->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        struct rls_slot *s = &op->slots[i];

        s->op = op;
        s->hits = d->has_hits_addend ? d->hits_addend
                                     : (req->hits_addend > 0 ? req->hits_addend : 1);
        if (dom == NULL) {
            __atomic_add_fetch(&op->env->metrics->rls_domain_not_found, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (d->has_limit) {
            own_limit(s, d);
            continue;
        }
        s->rule = rls_rules_match(dom, d->entries, d->nentries, shared);
        sharing = i;
        if (s->rule == NULL)
            continue;
        s->shadow = s->rule->shadow_mode;
        s->quota = s->rule->quota_mode;
        /* unsaid, rls.all_or_nothing's promise wins: a denial counts nothing */
        s->charges = s->rule->count_over &&
                     (s->rule->count_set || !op->cfg->rls.all_or_nothing);
        s->policy = s->rule->policy;
        s->info = s->rule->limits;
        s->kind = s->rule->unlimited ? SLOT_UNLIMITED : s->rule->zero ? SLOT_ZERO : SLOT_CHECK;
    }
    /* a rule named in another matched rule's replaces counts nothing */
    for (size_t i = 0; i < op->n; i++) {
        struct rls_slot *s = &op->slots[i];
        if ((s->kind == SLOT_CHECK || s->kind == SLOT_ZERO) && s->rule != NULL &&
            s->rule->nnames > 0 && replaced(s->rule, op))
            s->kind = SLOT_NONE;
    }
    for (size_t i = 0; i < op->n; i++)
        if (op->slots[i].kind == SLOT_CHECK)
            op->pending++;
    return sharing;
}

/* Each slot's check but the group's; one may answer before
 * check_start_policy returns. */
static void
start_slots(struct rls_op *op, struct rl_config *cfg, const struct rls_request *req,
            const struct rls_domain *dom, const struct rls_str **shared, size_t sharing)
{
    char id[RL_IDENTITY_MAX];

    for (size_t i = 0; i < op->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        struct rls_slot *s = &op->slots[i];
        char *error = NULL;
        size_t idlen;

        if (s->kind != SLOT_CHECK && s->kind != SLOT_ZERO)
            continue;
        /* matched again for its shared patterns (unless shared is still
         * its): cheaper than keeping RLS_ENTRIES_MAX of them per descriptor */
        if (s->rule != NULL && sharing != i) {
            (void)rls_rules_match(dom, d->entries, d->nentries, shared);
            sharing = i;
        }
        s->stat_id = stat_id(s, &dom->name, d, s->rule != NULL ? shared : NULL);
        metrics_rls(op->env->metrics, s->stat_id, RL_RLS_HITS, s->hits);
        if (s->kind == SLOT_ZERO || s->grouped)
            continue;
        idlen = rls_identity(id, sizeof(id), &req->domain, d, s->rule != NULL ? shared : NULL);
        /* its callers counted under its rule (GET /admin/top?domain=&rule=) */
        if (check_start_policy(op->env, cfg, s->policy, KEYNAME, id, idlen, (int64_t)s->hits,
                               s->charges, req->timeout_ms, TOP_RLS_ID(s->stat_id), on_check,
                               s, &error) != RL_OK) {
            /* cannot happen: identities are bounded by their hash */
            log_error(LOG_MSG("rls: check not started"), LOG_Q("error", error));
            free(error);
            response_degraded_open(&s->d, s->policy);
            op->pending--;
        }
    }
}

/* The group's one check, of cost. */
static void
start_group(struct rls_op *op, struct rl_config *cfg, const struct rls_request *req,
            int64_t cost)
{
    char *error = NULL;

    op->group->asked = cost == 0;
    if (check_start_keys(op->env, cfg, &op->group->policy, op->group->keyp, op->group->klen,
                         cost, req->timeout_ms, on_group, op, &error) != RL_OK) {
        /* cannot happen: the keys were made to fit */
        struct rl_decision open;
        log_error(LOG_MSG("rls: check not started"), LOG_Q("error", error));
        free(error);
        response_degraded_open(&open, &op->group->policy);
        on_group(&open, op); /* the group's one pending answer */
    }
}

int
rls_start(const struct rl_check_env *env, struct rl_config *cfg, const struct rls_request *req,
          rls_done done, void *arg, char **cause)
{
    const struct rls_domain *dom;
    const struct rls_str *shared[RLS_ENTRIES_MAX];
    struct rls_op *op;
    size_t sharing; /* the descriptor whose patterns shared holds */
    int64_t group_cost = 0;

    if (check_request(req, cause) != RL_OK || own_limits_allowed(cfg, req, cause) != RL_OK) {
        __atomic_add_fetch(&env->metrics->rls_requests[RL_RLS_INVALID], 1, __ATOMIC_RELAXED);
        return RL_ERR;
    }
    op = op_new(env, cfg, req, done, arg);
    dom = rls_rules_domain(cfg->rls.rules, req->domain.p, req->domain.len);
    sharing = match_slots(op, req, dom, shared);
    /* a group is one check, answered once */
    if ((op->group = group_of(op, cfg, req, dom, &group_cost)) != NULL) {
        size_t members = 0;
        for (size_t i = 0; i < op->n; i++)
            members += op->slots[i].grouped;
        op->pending -= members - 1;
    }
    op->starting = 1;
    start_slots(op, cfg, req, dom, shared, sharing);
    if (op->group != NULL)
        start_group(op, cfg, req, group_cost);
    op->starting = 0;
    if (op->pending == 0)
        rls_finish(op);
    return RL_OK;
}
