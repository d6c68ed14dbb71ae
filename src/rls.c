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
 */
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "check.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "response.h"
#include "rls.h"
#include "util.h"

/* Bounds of a request: Envoy sends a handful of descriptors of a few
 * entries; more is refused rather than decided slowly. */
#define RLS_DESCRIPTORS_MAX 256
#define RLS_ENTRIES_MAX 64
#define RLS_LABEL_MAX 256
#define KEYNAME "rls"
/* hits past any limit (at most 2^32 - 1) are one answer: never fits */
#define RLS_COST_MAX ((int64_t)UINT32_MAX + 1)

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
    uint64_t hits;
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
    struct rls_slot slots[];
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

static void
id_part(struct idbuf *b, const char *p, size_t n)
{
    size_t s = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x1c && c <= 0x1f) {
            char esc[2] = {0x1d, (char)('0' + (c - 0x1c))};
            id_raw(b, p + s, i - s);
            id_raw(b, esc, 2);
            s = i + 1;
        }
    }
    id_raw(b, p + s, n - s);
}

/* The identity of descriptor d (shared[i]: the pattern entry i counts
 * under, or NULL) into out; its length. */
static size_t
make_id(char *out, size_t size, const struct rls_str *domain, const struct rls_descriptor *d,
        const struct rls_str *const *shared)
{
    struct idbuf b = {out, size, 0, NULL};
    unsigned char md[32];
    static const char hex[] = "0123456789abcdef";

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
    if (!d->would_deny) {
        after = L - (uint64_t)(d->remaining < (int64_t)L ? d->remaining : (int64_t)L);
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
    st->limit_remaining = d->would_deny               ? 0
                          : d->remaining > UINT32_MAX ? UINT32_MAX
                                                      : (uint32_t)d->remaining;
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
    uint64_t least = (uint64_t)UINT32_MAX + 1;

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

static void
rls_finish(struct rls_op *op)
{
    struct rl_config *cfg = op->cfg;
    struct rls_status *st = xcalloc(op->n, sizeof(*st));
    struct rls_response resp;
    size_t over = 0, quota = 0, quota_over = 0;
    int unavailable = 0;
    enum rl_rls_result result;

    memset(&resp, 0, sizeof(resp));
    for (size_t i = 0; i < op->n; i++) {
        struct rls_slot *s = &op->slots[i];
        if (s->kind == SLOT_ZERO)
            zero_decision(s, cfg, &s->d);
        if (s->kind == SLOT_CHECK && s->d.status == 503)
            unavailable = 1;
        status_of(s, &st[i]);
        if (s->kind == SLOT_CHECK || s->kind == SLOT_ZERO)
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
    if (unavailable) {
        resp.grpc_status = 14;
        resp.message = "backend unavailable (failure_mode closed)";
        result = RL_RLS_UNAVAILABLE;
    } else {
        const struct rls_slot *h = cfg->rls.response_headers ? header_slot(op, st) : NULL;
        if (h != NULL)
            response_headers(&h->d, rls_add_header, &resp);
        result = resp.overall_code == RLS_CODE_OVER_LIMIT ? RL_RLS_OVER : RL_RLS_OK;
    }
    __atomic_add_fetch(&op->env->metrics->rls_requests[result], 1, __ATOMIC_RELAXED);
    op->done(&resp, op->arg);
    for (size_t i = 0; i < resp.nheaders; i++)
        free(resp.headers[i].value);
    free(st);
    config_unref(cfg);
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
    s->own_limit.limit = d->limit_requests_per_unit;
    s->own_limit.window_ms = rls_unit_ms(d->limit_unit);
    s->own_limit.burst = s->own_limit.limit;
    s->own_limit.align = RL_ALIGN_EPOCH;
    s->own_info.requests_per_unit = d->limit_requests_per_unit;
    s->own_info.unit = d->limit_unit;
    s->own_info.unit_form = 1;
    s->own.name = (char *)KEYNAME;
    s->own.limits = &s->own_limit;
    s->own.nlimits = 1;
    s->own.uid = (1ULL << 63) | ((uint64_t)d->limit_unit << 32) | d->limit_requests_per_unit;
    s->own.metrics_id = policy_metrics_id();
    s->policy = &s->own;
    s->info = &s->own_info;
    s->kind = d->limit_requests_per_unit == 0 ? SLOT_ZERO : SLOT_CHECK;
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

int
rls_start(const struct rl_check_env *env, struct rl_config *cfg, const struct rls_request *req,
          rls_done done, void *arg, char **cause)
{
    const struct rls_domain *dom;
    const struct rls_str *shared[RLS_ENTRIES_MAX];
    struct rls_op *op;
    char id[RL_IDENTITY_MAX];

    if (check_request(req, cause) != RL_OK) {
        __atomic_add_fetch(&env->metrics->rls_requests[RL_RLS_INVALID], 1, __ATOMIC_RELAXED);
        return RL_ERR;
    }
    op = xcalloc(1, sizeof(*op) + req->ndescriptors * sizeof(op->slots[0]));
    op->cfg = config_ref(cfg);
    op->env = env;
    op->done = done;
    op->arg = arg;
    op->n = req->ndescriptors;
    dom = rls_rules_domain(cfg->rls.rules, req->domain.p, req->domain.len);
    /* what applies to each descriptor */
    for (size_t i = 0; i < op->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        struct rls_slot *s = &op->slots[i];

        s->op = op;
        s->hits = d->has_hits_addend ? d->hits_addend
                                     : (req->hits_addend > 0 ? req->hits_addend : 1);
        if (dom == NULL) {
            __atomic_add_fetch(&env->metrics->rls_domain_not_found, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (d->has_limit) {
            own_limit(s, d);
            continue;
        }
        s->rule = rls_rules_match(dom, d->entries, d->nentries, shared);
        if (s->rule == NULL)
            continue;
        s->shadow = s->rule->shadow_mode;
        s->quota = s->rule->quota_mode;
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
    /* the checks; one may answer before check_start_policy returns */
    op->starting = 1;
    for (size_t i = 0; i < op->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        struct rls_slot *s = &op->slots[i];
        char *error = NULL;
        size_t idlen;

        if (s->kind != SLOT_CHECK && s->kind != SLOT_ZERO)
            continue;
        /* matched again for its shared patterns: cheaper than keeping
         * RLS_ENTRIES_MAX of them per descriptor */
        if (s->rule != NULL)
            (void)rls_rules_match(dom, d->entries, d->nentries, shared);
        s->stat_id = stat_id(s, &dom->name, d, s->rule != NULL ? shared : NULL);
        metrics_rls(env->metrics, s->stat_id, RL_RLS_HITS, s->hits);
        if (s->kind == SLOT_ZERO)
            continue;
        idlen = make_id(id, sizeof(id), &req->domain, d, s->rule != NULL ? shared : NULL);
        if (check_start_policy(env, cfg, s->policy, KEYNAME, id, idlen,
                               s->hits > (uint64_t)RLS_COST_MAX ? RLS_COST_MAX
                                                                : (int64_t)s->hits,
                               req->timeout_ms, on_check, s, &error) != RL_OK) {
            /* cannot happen: identities are bounded by their hash */
            log_error(LOG_MSG("rls: check not started"), LOG_Q("error", error));
            free(error);
            response_degraded_open(&s->d, s->policy);
            op->pending--;
        }
    }
    op->starting = 0;
    if (op->pending == 0)
        rls_finish(op);
    return RL_OK;
}
