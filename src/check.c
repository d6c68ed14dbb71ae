/* check.c — see check.h. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend.h"
#include "body.h"
#include "caller_limits.h"
#include "check.h"
#include "config.h"
#include "deny_cache.h"
#include "hybrid.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "netaddr.h"
#include "pathnorm.h"
#include "pending.h"
#include "policy.h"
#include "reservation.h"
#include "response.h"
#include "slab.h"
#include "top.h"
#include "util.h"

/*
 * The keys of a policy whose limits have identities of their own: each such
 * limit's key base, and what names the whole decision for the deny cache
 * (the check's key and every limit's: a denial of alice at this address is
 * not one of bob's).  One allocation.
 */
struct limit_keys {
    const char *key[RL_LIMITS_MAX];
    size_t len[RL_LIMITS_MAX];
    const char *all; /* the deny cache's key */
    size_t all_len;
    char buf[];
};

/* How a check's cost counts. */
enum count_as {
    COUNT_CHECK,  /* a denied check counts nothing */
    COUNT_CHARGE, /* POST /charge: past the limit too, answered 200 with "charged" */
    /* past the limit too, answered as a check of cost 0 after it (allowed
     * or not, failure_mode when the backend fails): envoyproxy/ratelimit's
     * hits, INCRBY (check_start_policy's count_over) */
    COUNT_HITS
};

/* A check waiting for its backend; freed in the backend's callback. */
struct check_op {
    struct check_op *next_idle; /* in env->ops, while idle */
    struct rl_config *cfg;
    const struct rl_policy *policy;
    const struct rl_check_env *env;
    struct rl_check_req req;
    rl_check_done done;
    void *arg;
    int64_t start_us;
    uint64_t epoch;               /* of the backend when the check was sent */
    int hybrid;                   /* a hybrid policy's key unknown locally */
    int delay;                    /* holds a place in env->delayed */
    int stale;                    /* decided locally after a failed sync */
    int charge;                   /* POST /charge: req.flags has RL_CHECK_CHARGE */
    int hits;                     /* COUNT_HITS: req.flags has RL_CHECK_CHARGE too */
    int kept;                     /* a charge or settle sent through env->pending: it counts */
    int full;                     /* not kept: env->pending is full */
    int reserve;                  /* "reserve": an allowed check takes a reservation */
    int settle;                   /* POST /settle: req.flags has RL_CHECK_RSV_SETTLE */
    int64_t estimate;             /* settle: what the reservation took */
    char claim[RL_RSV_CLAIM_MAX]; /* req.rsv_claim's bytes */
    int caller_deadline; /* req.timeout_ms is the caller's deadline, not redis.timeout */
    /* the escaped identity in key, [id_off, id_end): counted by env->top
     * (0, 0: a check of keys named elsewhere, rls.c's) */
    uint16_t id_off, id_end;
    /* check_key_hash of the key, when hashed: what the deny cache and
     * env->top file the caller under, computed once */
    int hashed;
    uint64_t hash;
    int top_id;            /* what env->top files it under; -1: its policy's metrics id */
    struct limit_keys *lk; /* NULL: every limit under key */
    size_t ncaller;        /* of own_limits, the caller's; the policy's caps follow */
    char key[RL_REDIS_KEY_MAX];
    /* a check's own limits: its policy, a copy of the one it falls under
     * with these in place of that one's (written only then) */
    struct rl_policy own;
    struct rl_limit own_limits[RL_LIMITS_MAX];
};

struct rl_check_ops {
    struct check_op *head;
    size_t n, keep;
};

struct rl_check_ops *
check_ops_new(size_t keep)
{
    struct rl_check_ops *ops = xcalloc(1, sizeof(*ops));

    ops->keep = keep;
    return ops;
}

void
check_ops_free(struct rl_check_ops *ops)
{
    if (ops == NULL)
        return;
    while (ops->head != NULL) {
        struct check_op *op = ops->head;

        SLAB_UNPOISON(op, sizeof(*op));
        ops->head = op->next_idle;
        free(op);
    }
    free(ops);
}

/* A check op, its fields before key zeroed (not calloc: the key buffer is
 * most of the op and is written before it is read). */
static struct check_op *
op_new(const struct rl_check_env *env)
{
    struct rl_check_ops *ops = env->ops;
    struct check_op *op;

    if (ops != NULL && ops->head != NULL) {
        op = ops->head;
        SLAB_UNPOISON(op, sizeof(*op));
        ops->head = op->next_idle;
        ops->n--;
    } else {
        op = xmalloc(sizeof(*op));
    }
    memset(op, 0, offsetof(struct check_op, key));
    return op;
}

/* op back to env's list, or to malloc: after its last use. */
static void
op_release(const struct rl_check_env *env, struct check_op *op)
{
    struct rl_check_ops *ops = env->ops;

    if (ops == NULL || ops->n >= ops->keep) {
        free(op);
        return;
    }
    op->next_idle = ops->head;
    ops->head = op;
    ops->n++;
    SLAB_POISON(op, sizeof(*op));
}

/* A caller's own limits allowed the check and a cap denied it. */
static bool
capped(const struct check_op *op, const struct rl_decision *d)
{
    bool cap_denied = false;

    if (op->ncaller == 0 || d->status != 429 || d->allowed || d->nlimits <= op->ncaller)
        return false;
    for (size_t i = 0; i < d->nlimits; i++) {
        if (i < op->ncaller && !d->limits[i].allowed)
            return false;
        cap_denied |= i >= op->ncaller && !d->limits[i].allowed;
    }
    return cap_denied;
}

/* What names op's decision in the deny cache. */
static const char *
deny_key(const struct check_op *op, size_t *len)
{
    *len = op->lk != NULL ? op->lk->all_len : op->req.key_len;
    return op->lk != NULL ? op->lk->all : op->key;
}

static int
get_string(json_t *root, const char *name, const char **out, size_t *len, char **cause)
{
    json_t *v = json_object_get(root, name);

    if (v == NULL || json_is_null(v))
        return RL_OK;
    if (!json_is_string(v)) {
        *cause = xasprintf("%s: must be a string", name);
        return RL_ERR;
    }
    *out = json_string_value(v);
    if (len != NULL)
        *len = json_string_length(v);
    return RL_OK;
}

/* Fields are looked up by name; unknown fields are ignored (forward compat).
 * "limits" stays in the tree (caller_limits reads it). */
static int
fields_from_json(json_t *root, struct rl_body_fields *f, char **cause)
{
    json_t *cost, *reserve;

    if (!json_is_object(root)) {
        *cause = xstrdup("body: must be a JSON object");
        return RL_ERR;
    }
    if (get_string(root, "key", &f->key, &f->key_len, cause) != RL_OK ||
        get_string(root, "policy", &f->policy, &f->policy_len, cause) != RL_OK ||
        get_string(root, "path", &f->path, &f->path_len, cause) != RL_OK ||
        get_string(root, "method", &f->method, &f->method_len, cause) != RL_OK)
        return RL_ERR;
    reserve = json_object_get(root, "reserve");
    if (reserve != NULL && !json_is_null(reserve)) {
        if (!json_is_boolean(reserve)) {
            *cause = xstrdup("reserve: must be true or false");
            return RL_ERR;
        }
        f->reserve = json_is_true(reserve);
    }
    cost = json_object_get(root, "cost");
    if (cost != NULL && !json_is_null(cost)) {
        /* not an integer: said by check_fields, after the other fields */
        f->cost = json_is_integer(cost) ? json_integer_value(cost) : INT64_MIN;
    }
    return RL_OK;
}

/* What the fields may hold, whoever read them. */
static int
check_fields(const struct rl_body_fields *f, char **cause)
{
    if (f->key != NULL && (f->key_len == 0 || f->key_len > RL_KEY_MAX)) {
        *cause = xasprintf("key: must be 1..%d bytes", RL_KEY_MAX);
        return RL_ERR;
    }
    if (f->path != NULL && (f->path_len == 0 || f->path[0] != '/')) {
        *cause = xstrdup("path: must start with '/'");
        return RL_ERR;
    }
    /* A key may hold any byte, NUL included (its length travels with it);
     * a method may not: "GET\u0000x" must not read as GET. */
    if (f->method != NULL &&
        (strlen(f->method) != f->method_len || policy_method_bit(f->method) == 0)) {
        *cause = xstrdup("method: must be an HTTP method like \"GET\" or \"POST\"");
        return RL_ERR;
    }
    if (f->cost < 0 || f->cost > RL_COST_MAX) {
        *cause = xasprintf("cost: must be an integer 0..%lld", RL_COST_MAX);
        return RL_ERR;
    }
    return RL_OK;
}

struct local_answer {
    struct rl_decision *d;
    const struct rl_policy *policy;
    int answered;
};

static void
on_local(const struct rl_check_res *res, void *arg)
{
    struct local_answer *la = arg;

    if (res->status != RL_BACKEND_OK)
        return;
    response_from_result(la->d, la->policy, res);
    la->d->degraded = 1;
    la->answered = 1;
}

/* The lease id of the slot op's allowed check took, into buf; NULL when it
 * took none. */
static const char *
lease_of(const struct check_op *op, const struct rl_check_res *res, char *buf, size_t size)
{
    size_t i, len = op->req.key_len;
    const char *base = op->key;

    if (!(op->req.flags & RL_CHECK_LEASE) || res->status != RL_BACKEND_OK || !res->allowed ||
        !policy_lease_limit(op->policy, &i))
        return NULL;
    if (op->lk != NULL && op->lk->key[i] != NULL) {
        base = op->lk->key[i];
        len = op->lk->len[i];
    }
    if (lease_id_format(&op->req.lease, op->policy->limits[i].window_ms, base, len, buf,
                        size) != RL_OK)
        return NULL; /* cannot be: the buffer holds the longest key */
    return buf;
}

/* The end of a settle (check_settle): as a charge's answer, with
 * "settled"; nothing but {"settled":false} when it settled nothing. */
static void
finish_settle(struct check_op *op, const struct rl_check_res *res)
{
    struct rl_decision d;

    memset(&d, 0, sizeof(d));
    if (res == NULL) {
        /* kept for the backend (202: "settled" unknown), or refused */
        d.status = op->full ? 503 : 202;
        d.policy = op->policy;
        d.charge = 1;
        d.charged = op->req.cost - op->estimate;
        d.pending = !op->full;
        d.backlog_full = op->full;
    } else if (res->status != RL_BACKEND_OK) {
        /* nothing known of it: no failure_mode answers a settle */
        d.status = 503;
        d.policy = op->policy;
        d.degraded = 1;
    } else if (res->rsv != RL_RSV_SETTLED) {
        d.status = 200;
        d.policy = op->policy;
        d.settle = 1;
        if (!op->kept) /* else counted by env->pending */
            metrics_reservation(op->env->metrics, res->rsv == RL_RSV_EXPIRED
                                                      ? RL_RSV_M_EXPIRED
                                                      : RL_RSV_M_UNKNOWN);
    } else {
        response_from_result(&d, op->policy, res);
        d.status = 200;
        d.settle = d.settled = d.charge = 1;
        d.charged = op->req.cost - op->estimate;
        if (!op->kept) {
            metrics_reservation(op->env->metrics, RL_RSV_M_SETTLED);
            if (d.charged > 0)
                metrics_charge(op->env->metrics, op->policy->metrics_id, d.charged);
        }
    }
    d.reset_epoch = op->cfg->reset_format == RL_RESET_EPOCH;
    op->done(&d, op->arg);
    config_unref(op->cfg);
    op_release(op->env, op);
}

uint64_t
check_key_hash(const struct rl_policy *policy, const char *key, size_t len)
{
    return deny_cache_hash(0x9e3779b97f4a7c15ULL * (uint64_t)(policy->metrics_id + 1), key,
                           len);
}

/* Answer the check from res, then free it: every path ends here once. */
static void
finish(struct check_op *op, const struct rl_check_res *res)
{
    struct rl_decision d;
    struct rl_config *cfg = op->cfg;
    char lease[RL_LEASE_ID_MAX], rsv[RL_RSV_ID_MAX];

    if (op->settle) {
        finish_settle(op, res);
        return;
    }
    if (res == NULL) {
        /* a charge kept for the backend (202), or refused for want of room */
        memset(&d, 0, sizeof(d));
        d.status = op->full ? 503 : 202;
        d.policy = op->policy;
        d.charge = 1;
        d.charged = op->req.cost;
        d.pending = !op->full;
        d.backlog_full = op->full;
    } else if (res->status == RL_BACKEND_OK) {
        response_from_result(&d, op->policy, res);
        d.degraded = op->stale;
        d.lease = lease_of(op, res, lease, sizeof(lease));
        if ((op->req.flags & RL_CHECK_RESERVE) && res->allowed &&
            reservation_id_format(&op->req.rsv, op->claim, op->req.rsv_claim_len, op->key,
                                  op->req.key_len, rsv, sizeof(rsv)) == RL_OK) {
            d.reservation = rsv;
            metrics_reservation(op->env->metrics, RL_RSV_M_TAKEN);
        }
        if (res->allowed && res->delay_ms > 0 && op->delay)
            d.delayed_ms = res->delay_ms;
        if (op->charge) {
            /* counted, whatever the limits say: the state after it */
            d.charge = 1;
            d.charged = op->req.cost;
            d.status = 200;
            if (!op->kept) /* else counted as applied, late ones too */
                metrics_charge(op->env->metrics, op->policy->metrics_id, op->req.cost);
        } else if (op->hits) {
            metrics_charge(op->env->metrics, op->policy->metrics_id, op->req.cost);
        }
    } else if (op->charge) {
        /* nothing counted: no failure_mode answers as if it had been */
        memset(&d, 0, sizeof(d));
        d.status = 503;
        d.policy = op->policy;
        d.degraded = 1;
        d.charge = 1;
    } else {
        /* The caller's own deadline passed, not Redis's: no failure_mode's
         * answer (it would race the transport's DEADLINE_EXCEEDED), the
         * undecided one closed gives, marked expired. */
        bool expired = res->status == RL_BACKEND_TIMEOUT && op->caller_deadline;

        switch (expired ? RL_FAIL_CLOSED : cfg->failure_mode) {
        case RL_FAIL_CLOSED:
            memset(&d, 0, sizeof(d));
            d.status = 503;
            d.policy = op->policy;
            d.degraded = 1;
            d.expired = expired;
            break;
        case RL_FAIL_LOCAL:
            if (op->env->local != NULL) {
                /* The memory backend answers before check() returns. */
                struct local_answer la = {&d, op->policy, 0};
                /* the worker's own decision is answered now: no wait */
                op->req.flags &= ~(RL_CHECK_DELAY | RL_CHECK_RESERVE);
                op->env->local->ops->check(op->env->local, &op->req, on_local, &la);
                if (la.answered)
                    break;
            }
            /* fall through */
        case RL_FAIL_OPEN:
        default: response_degraded_open(&d, op->policy); break;
        }
    }
    d.reset_epoch = cfg->reset_format == RL_RESET_EPOCH;
    if (cfg->partition_key != NULL) {
        d.has_pk = 1;
        d.pk = siphash24(cfg->pk_k0, cfg->pk_k1, op->key, op->req.key_len);
    }
    if (!op->charge)
        metrics_check(op->env->metrics, op->policy->metrics_id,
                      d.status == 503            ? RL_OUT_ERROR
                      : d.degraded               ? RL_OUT_DEGRADED
                      : d.shadow && d.would_deny ? RL_OUT_SHADOW_DENIED
                      : d.allowed                ? RL_OUT_ALLOWED
                                                 : RL_OUT_DENIED);
    if (capped(op, &d))
        __atomic_add_fetch(&op->env->metrics->request_limits_capped, 1, __ATOMIC_RELAXED);
    /* who is denied, who spends: decided answers only (top.h) */
    if (op->env->top != NULL && op->id_end > op->id_off && d.status != 503 && !d.degraded) {
        bool denied = !op->charge && (!d.allowed || d.would_deny);

        top_record(op->env->top, op->top_id >= 0 ? op->top_id : op->policy->metrics_id,
                   op->key + op->id_off, (size_t)(op->id_end - op->id_off),
                   op->hashed ? op->hash : 0, denied,
                   denied || !(op->charge || d.allowed) ? 0 : op->req.cost, op->start_us);
    }
    /* no wait: the place it held is free now (a held one's, when answered) */
    if (op->delay && d.delayed_ms == 0)
        check_delay_done(op->env);
    op->done(&d, op->arg);
    config_unref(op->cfg);
    free(op->lk);
    op_release(op->env, op);
}

void
check_delay_done(const struct rl_check_env *env)
{
    (*env->delayed)--;
}

static int64_t
now_us(const struct rl_check_env *env)
{
    return env->now_us != NULL ? env->now_us() : now_monotonic_us();
}

/*
 * The cost the deny cache knows op's check by, or -1 when it must not
 * answer it: a slot may be released any moment (a lease, a wait), and a
 * charge must reach the count.  But hits (COUNT_HITS) into fixed windows
 * only: a window over its limit stays over until it ends whatever is added
 * to it, so the hits a denial leaves uncounted change no answer (as
 * envoyproxy/ratelimit's local cache of over-limit keys skips their
 * INCRBY); they are known as a check of cost 0, the state they answer.
 */
static int64_t
deny_cost(const struct check_op *op)
{
    if (op->req.flags & RL_CHECK_RSV_SETTLE)
        return -1;
    if (!(op->req.flags & (RL_CHECK_LEASE | RL_CHECK_DELAY | RL_CHECK_CHARGE)))
        return op->req.cost;
    if (!op->hits)
        return -1;
    for (size_t i = 0; i < op->policy->nlimits; i++)
        if (op->policy->limits[i].algo != RL_ALGO_FIXED_WINDOW)
            return -1;
    return 0;
}

static void
on_backend(const struct rl_check_res *res, void *arg)
{
    struct check_op *op = arg;
    int64_t dcost;

    metrics_backend(op->env->metrics, res->status, now_us(op->env) - op->start_us);
    /* a slot may be released any moment: a denial for want of one is not
     * known to last (start_policy never asks the cache for such a policy) */
    if (res->status == RL_BACKEND_OK && !res->allowed && op->env->deny != NULL &&
        op->cfg->deny_cache && (dcost = deny_cost(op)) >= 0) {
        size_t dlen;
        const char *dkey = deny_key(op, &dlen);

        if (op->hashed)
            deny_cache_put_hashed(op->env->deny, op->hash, op->policy->uid, dkey, dlen, dcost,
                                  op->epoch, op->start_us, res);
        else
            deny_cache_put(op->env->deny, op->policy->uid, dkey, dlen, dcost, op->epoch,
                           op->start_us, res);
    }
    if (res->status == RL_BACKEND_OK && op->hybrid)
        hybrid_seed(op->env->hybrid, op->cfg, op->policy, op->key, op->req.key_len,
                    op->start_us, res);
    if (res->status != RL_BACKEND_OK)
        log_debug(LOG_MSG("backend failed"), LOG_S("policy", op->policy->name),
                  LOG_Q("error", res->error ? res->error : ""));
    finish(op, res);
}

/* A charge's answer from env->pending: the backend's (applied), or NULL:
 * kept, applied once the backend takes it. */
static void
on_kept(const struct rl_check_res *res, void *arg)
{
    if (res != NULL)
        on_backend(res, arg);
    else
        finish(arg, NULL);
}

/*
 * An original-request header, only from a trusted proxy and only of the
 * family the proxies write: the other family, and every header of an
 * untrusted peer, may be the client's own (Caddy's forward_auth and Traefik
 * copy the client's headers into the check).
 */
static const char *
request_header(const struct rl_config *cfg, const struct rl_ident_input *in,
               const char *original, const char *forwarded)
{
    if (in->peer_family == 0 ||
        !cidr_list_contains(&cfg->trusted_proxies, in->peer_family, in->peer_addr))
        return NULL;
    return in->header(in->hctx, config_request_headers(cfg) == RL_REQHDR_FORWARDED ? forwarded
                                                                                   : original);
}

/* Room for a normalised path on the stack: a longer one is malloc'd (a
 * malloc and a free a check: docs/BENCHMARKS.md, "Measurements behind the
 * code"). */
#define NORM_STACK 256

/*
 * The path the policy is matched against: normalised as the application
 * will see it, into *norm: `buf` (NORM_STACK bytes) when it fits, else
 * *alloc, the caller's to free.  RL_ERR (a 400) when it cannot be and the
 * config says reject.
 */
static int
match_path(const struct rl_config *cfg, const char *path, size_t *plen, char *buf, char **norm,
           char **alloc, char **cause)
{
    char *why = NULL;
    size_t n;

    /* the query string and fragment are not part of the path */
    for (size_t i = 0; i < *plen; i++) {
        if (path[i] == '?' || path[i] == '#') {
            *plen = i;
            break;
        }
    }
    *norm = *plen < NORM_STACK ? buf : (*alloc = xmalloc(*plen + 1));
    if (pathnorm(path, *plen, cfg->merge_slashes ? 0 : RL_PATHNORM_KEEP_SLASHES, *norm, &n,
                 &why) == RL_OK) {
        *plen = cfg->path_fold ? pathnorm_fold(*norm, n, cfg->path_fold) : n;
        return RL_OK;
    }
    if (cfg->bad_path == RL_BADPATH_RAW) {
        memcpy(*norm, path, *plen);
        (*norm)[*plen] = '\0';
        *plen = pathnorm_fold(*norm, *plen, cfg->path_fold);
        free(why);
        return RL_OK;
    }
    *cause = xasprintf("path: cannot be normalised: %s", why);
    free(why);
    return RL_ERR;
}

const struct rl_policy *
check_key_for(const struct rl_config *cfg, const struct rl_policy *policy, const char *id,
              size_t idlen, char *key, size_t size, size_t *klen)
{
    if (identity_key(cfg->redis.key_prefix, policy->name, id, idlen, policy->limit_ids, key,
                     size, klen) != RL_OK)
        return NULL;
    return policy->noverrides > 0 ? policy_for(policy, id, idlen) : policy;
}

/* The body as jansson reads it into *root (the caller frees), or the 400. */
static int
body_json(const struct rl_check_input *in, json_t **root, char **cause)
{
    json_error_t jerr;

    *root = json_loadb(in->body, in->body_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (*root == NULL) {
        *cause = xasprintf("body: malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
        return RL_ERR;
    }
    return RL_OK;
}

/* The fields of the body: the fast scanner's, or jansson's when the scanner
 * gives up.  *root is the caller's to free (NULL when not parsed). */
static int
read_body(const struct rl_check_input *in, struct rl_body_fields *f, json_t **root,
          char **cause)
{
    if (in->body_len == 0)
        return RL_OK;
    if (body_scan(in->body, in->body_len, f) != RL_OK) {
        memset(f, 0, sizeof(*f));
        f->cost = 1;
        if (body_json(in, root, cause) != RL_OK || fields_from_json(*root, f, cause) != RL_OK)
            return RL_ERR;
    }
    return check_fields(f, cause);
}

/*
 * The check's own limits ("limits", the policy taking them) into
 * out[0..*n): known by their bytes when the scanner handed them over and a
 * check of this worker sent the same, else read from the body's JSON (the
 * whole body then goes through jansson, whose verdict stands), and kept.
 */
static int
own_limits(const struct rl_check_env *env, const struct rl_policy *policy,
           const struct rl_check_input *in, const struct rl_body_fields *f, json_t **root,
           struct rl_limit *out, size_t *n, char **cause)
{
    if (!policy->request_limits) {
        *cause = xasprintf("limits: policy \"%s\" takes no limits from the caller (it would "
                           "need \"request_limits\": true)",
                           policy->name);
        return RL_ERR;
    }
    if (f->limits == NULL ||
        !caller_limits_find(env->caller_limits, f->limits, f->limits_len, out, n)) {
        if (*root == NULL && body_json(in, root, cause) != RL_OK)
            return RL_ERR;
        if (caller_limits_read(env->caller_limits, f->limits, f->limits_len,
                               json_object_get(*root, "limits"), out, n, cause) != RL_OK)
            return RL_ERR;
    }
    return caller_limits_allowed(policy, out, *n, cause);
}

/*
 * The policy the check falls under: named in the body, else the first that
 * matches the request's path and method (*policy NULL: none does).  `buf`
 * and *alloc as match_path's.
 */
static int
pick_policy(struct rl_config *cfg, const struct rl_body_fields *f,
            const struct rl_check_input *in, const struct rl_policy **policy, char *buf,
            char **alloc, char **cause)
{
    char *norm;
    const char *path = f->path, *method = f->method;
    size_t plen = f->path_len;

    if (f->policy != NULL) {
        /* a NUL inside the JSON string must not shorten the name */
        *policy = strlen(f->policy) == f->policy_len ? config_policy(cfg, f->policy) : NULL;
        if (*policy == NULL) {
            *cause = xstrdup("policy: no policy has this name");
            return RL_ERR;
        }
        return RL_OK;
    }
    if (path == NULL) {
        path = request_header(cfg, &in->ident, "X-Original-URI", "X-Forwarded-Uri");
        if (path != NULL && path[0] == '/') {
            plen = strlen(path);
        } else if (in->path != NULL) {
            path = in->path;
            plen = in->path_len;
        } else {
            path = "/";
            plen = 1;
        }
    }
    if (match_path(cfg, path, &plen, buf, &norm, alloc, cause) != RL_OK)
        return RL_ERR;
    if (method == NULL) {
        method = request_header(cfg, &in->ident, "X-Original-Method", "X-Forwarded-Method");
        if (method == NULL || policy_method_bit(method) == 0)
            method = in->method != NULL ? in->method : "GET";
    }
    *policy = policy_match(cfg->policies, cfg->npolicies, cfg->path_fold, norm, plen,
                           policy_method_bit(method));
    return RL_OK;
}

/*
 * The key of every limit of `policy` with an identity of its own, resolved
 * from `ident` ("{<prefix><policy>}:<escaped identity>", the policy's one
 * tag), and the deny cache's key: the check's key, then each limit's.
 * RL_ERR (a 400) when a limit's identity cannot be read or none is found.
 */
static int
limit_keys(const struct rl_config *cfg, const struct rl_policy *policy, const char *keyname,
           const struct rl_ident_input *ident, const char *key, size_t klen,
           struct limit_keys **out, char **cause)
{
    char id[RL_IDENTITY_MAX], ks[RL_LIMITS_MAX][RL_REDIS_KEY_MAX];
    size_t n[RL_LIMITS_MAX] = {0}, total = klen, o;
    struct limit_keys *lk;

    for (size_t i = 0; i < policy->nlimits; i++) {
        size_t idlen;

        if (policy->limits[i].identity == NULL)
            continue;
        if (identity_resolve(policy->limits[i].identity, &cfg->trusted_proxies, ident, id,
                             sizeof(id), &idlen, cause) != RL_OK)
            return RL_ERR;
        if (idlen == 0) {
            *cause = xasprintf("key: no identity for limits[%zu]: no source of its identity "
                               "chain gave one",
                               i);
            return RL_ERR;
        }
        if (identity_key(cfg->redis.key_prefix, keyname, id, idlen, true, ks[i], sizeof(ks[i]),
                         &n[i]) != RL_OK) {
            *cause = xstrdup("key: too long");
            return RL_ERR;
        }
        total += 1 + n[i];
    }
    lk = xcalloc(1, sizeof(*lk) + total);
    memcpy(lk->buf, key, klen);
    o = klen;
    for (size_t i = 0; i < policy->nlimits; i++) {
        if (n[i] == 0)
            continue;
        lk->buf[o++] = '\n'; /* never in a key: escaped */
        memcpy(lk->buf + o, ks[i], n[i]);
        lk->key[i] = lk->buf + o;
        lk->len[i] = n[i];
        o += n[i];
    }
    lk->all = lk->buf;
    lk->all_len = o;
    *out = lk;
    return RL_OK;
}

/* Where the escaped identity lies in a key identity_key made of keyname
 * and policy, klen bytes: [*off, *end). */
static void
key_identity(const struct rl_config *cfg, const struct rl_policy *policy, const char *keyname,
             size_t klen, uint16_t *off, uint16_t *end)
{
    /* "{<prefix><keyname>:<id>}" or "{<prefix><keyname>}:<id>" */
    *off = (uint16_t)(strlen(cfg->redis.key_prefix) + strlen(keyname) +
                      (policy->limit_ids ? 3 : 2));
    *end = (uint16_t)(policy->limit_ids ? klen : klen - 1);
}

static void start_op(struct check_op *op, const struct rl_check_env *env,
                     struct rl_config *cfg, const struct rl_policy *policy, int64_t cost,
                     int64_t timeout_ms, bool may_hold, enum count_as how, rl_check_done done,
                     void *arg);

/*
 * Decide a check of `cost` for (policy, identity): locally when the hybrid
 * table or the deny cache can, else by the backend.  `ident`: the request,
 * for the limits with identities of their own (NULL: the policy has none).
 * With limits (a check's own), under a copy of the policy that has them
 * instead of its own: its uid is the limits', so that a denial cached under
 * one plan never answers another.
 */
static int
start_policy(const struct rl_check_env *env, struct rl_config *cfg,
             const struct rl_policy *policy, const char *keyname, const char *id, size_t idlen,
             const struct rl_ident_input *ident, int64_t cost, enum count_as how, bool reserve,
             int64_t timeout_ms, const struct rl_limit *limits, size_t nlimits, int top_id,
             rl_check_done done, void *arg, char **cause)
{
    struct check_op *op = op_new(env);
    size_t klen;

    op->reserve = reserve;
    op->top_id = top_id;

    if (keyname == NULL)
        keyname = policy->name;
    /* a check's own limits count by the policy's identity (they have none
     * of their own), in the keys the policy's limits of the same algorithm
     * and window have */
    if (limits != NULL) {
        op->own = *policy;
        memcpy(op->own_limits, limits, nlimits * sizeof(*limits));
        /* the policy's caps, counted with them whatever they are
         * (caller_limits_allowed checked that they fit) */
        if (policy->ncaps > 0)
            memcpy(op->own_limits + nlimits, policy->caps, policy->ncaps * sizeof(*limits));
        op->ncaller = nlimits;
        nlimits += policy->ncaps;
        op->own.limits = op->own_limits;
        op->own.nlimits = nlimits;
        op->own.uid = 1ULL << 62 | ((policy->uid * 0x9e3779b97f4a7c15ULL) ^
                                    algo_limits_hash(op->own_limits, nlimits)) >>
                                       2;
        policy = &op->own;
    }
    if (identity_key(cfg->redis.key_prefix, keyname, id, idlen, policy->limit_ids, op->key,
                     sizeof(op->key), &klen) != RL_OK) {
        op_release(env, op);
        *cause = xstrdup("key: too long");
        return RL_ERR;
    }
    if (policy->limit_ids && ident == NULL) {
        op_release(env, op);
        *cause = xstrdup("key: the policy's limits have identities of their own, and this "
                         "check has no request to resolve them from");
        return RL_ERR;
    }
    if (policy->limit_ids && limit_keys(cfg, policy, keyname, ident, op->key, (size_t)klen,
                                        &op->lk, cause) != RL_OK) {
        op_release(env, op);
        return RL_ERR;
    }
    op->req.key_len = klen;
    key_identity(cfg, policy, keyname, klen, &op->id_off, &op->id_end);
    /* only a request's check (not gRPC's, not the admin's) is held */
    start_op(op, env, cfg, policy, cost, timeout_ms, ident != NULL, how, done, arg);
    return RL_OK;
}

/* The check op holds its key(s): decide it as every check is decided;
 * may_hold: a check that may wait for the policy's max_delay; how: a charge
 * (RL_CHECK_CHARGE: COUNT_CHARGE, COUNT_HITS) takes no lease, is never held
 * and never answered from the deny cache. */
static void
start_op(struct check_op *op, const struct rl_check_env *env, struct rl_config *cfg,
         const struct rl_policy *policy, int64_t cost, int64_t timeout_ms, bool may_hold,
         enum count_as how, rl_check_done done, void *arg)
{
    bool charge = how != COUNT_CHECK;

    op->cfg = config_ref(cfg);
    op->policy = policy;
    op->env = env;
    op->done = done;
    op->arg = arg;
    op->req.policy = policy;
    op->req.key = op->key;
    if (op->lk != NULL) {
        op->req.limit_key = op->lk->key;
        op->req.limit_key_len = op->lk->len;
    }
    op->req.cost = cost;
    if (charge) {
        op->charge = how == COUNT_CHARGE;
        op->hits = how == COUNT_HITS;
        op->req.flags |= RL_CHECK_CHARGE;
        may_hold = false;
    }
    /* a reservation's estimate (cost 0 takes none); a settle's claim was
     * read from its id (check_settle): neither takes a lease or waits */
    if (op->reserve && cost > 0) {
        op->req.flags |= RL_CHECK_RESERVE;
        lease_draw(&op->req.rsv);
        op->req.rsv_claim_len = reservation_claim(
            cost, reservation_limits_hash(policy->limits, policy->nlimits), op->claim);
        op->req.rsv_claim = op->claim;
        op->req.rsv_ttl_ms = policy->reservation_ttl_ms;
        may_hold = false;
    }
    if (op->settle) {
        op->req.flags |= RL_CHECK_RSV_SETTLE;
        op->req.rsv_claim = op->claim;
        may_hold = false;
    }
    if (!op->settle) {
        size_t li;

        /* an allowed check takes a slot under a lease of its own */
        if (cost > 0 && !charge && policy_lease_limit(policy, &li)) {
            op->req.flags |= RL_CHECK_LEASE;
            lease_draw(&op->req.lease);
        }
    }
    /* may be held for max_delay: while the worker holds fewer than
     * max_delayed (the place is taken now, before the answer says) */
    if (cost > 0 && policy->max_delay_ms > 0 && may_hold && env->delayed != NULL &&
        *env->delayed < cfg->max_delayed) {
        op->req.flags |= RL_CHECK_DELAY;
        op->req.max_delay_ms = policy->max_delay_ms;
        op->delay = 1;
        (*env->delayed)++;
    }
    op->caller_deadline = timeout_ms > 0 && timeout_ms < cfg->redis.timeout_ms;
    op->req.timeout_ms = op->caller_deadline ? timeout_ms : cfg->redis.timeout_ms;
    op->start_us = now_us(env);
    op->epoch = env->backend->epoch;
    /* one keyed hash of the key for the deny cache and the heavy callers
     * (the deny cache's key is the check's unless limits have their own) */
    if (op->lk == NULL && op->id_end > op->id_off && (env->top != NULL || env->deny != NULL)) {
        op->hash = check_key_hash(policy, op->key, op->req.key_len);
        op->hashed = 1;
    }
    if (env->hybrid != NULL)
        hybrid_use_config(env->hybrid, cfg);
    if (env->hybrid != NULL && policy->mode == RL_MODE_HYBRID) {
        struct rl_check_res local;
        if (hybrid_decide(env->hybrid, cfg, policy, op->key, op->req.key_len, cost, charge,
                          &local, &op->stale)) {
            finish(op, &local);
            return;
        }
        op->hybrid = 1; /* the answer seeds the key's local view */
    }
    /* a charge or settle is never dropped while the daemon runs: kept for
     * a backend that cannot take it now, answered 202 within redis.timeout */
    if ((op->charge || op->settle) && env->pending != NULL) {
        op->kept = 1;
        if (pending_submit(env->pending, cfg, &op->req, policy->metrics_id, on_kept, op) !=
            RL_OK) {
            op->full = 1;
            finish(op, NULL);
        }
        return;
    }
    if (env->deny != NULL && cfg->deny_cache && deny_cost(op) >= 0) {
        struct rl_check_res cached;
        size_t dlen;
        const char *dkey = deny_key(op, &dlen);

        if (op->hashed ? deny_cache_get_hashed(env->deny, op->hash, policy->uid, dkey, dlen,
                                               deny_cost(op), env->backend->epoch,
                                               op->start_us, &cached)
                       : deny_cache_get(env->deny, policy->uid, dkey, dlen, deny_cost(op),
                                        env->backend->epoch, op->start_us, &cached)) {
            __atomic_add_fetch(&env->metrics->local_cache_hits, 1, __ATOMIC_RELAXED);
            /* hits a denial leaves uncounted are over the limit, all of
             * them: the overdraft they would have made */
            if (op->hits)
                for (size_t i = 0; i < cached.nlimits; i++)
                    if (!cached.limits[i].allowed)
                        cached.limits[i].overdraft += cost;
            finish(op, &cached);
            return;
        }
    }
    env->backend->ops->check(env->backend, &op->req, on_backend, op);
}

int
check_start_keys(const struct rl_check_env *env, struct rl_config *cfg,
                 const struct rl_policy *policy, const char *const *keys, const size_t *lens,
                 int64_t cost, int64_t timeout_ms, rl_check_done done, void *arg, char **cause)
{
    struct check_op *op;
    size_t total = 0, o = 0;

    if (policy->nlimits == 0 || policy->nlimits > RL_LIMITS_MAX ||
        lens[0] >= RL_REDIS_KEY_MAX) {
        *cause = xstrdup("key: too long, or no limit");
        return RL_ERR;
    }
    op = op_new(env);
    memcpy(op->key, keys[0], lens[0]);
    op->key[lens[0]] = '\0';
    op->req.key_len = lens[0];
    /* every key, '\n' between them (never in a key: escaped), names the
     * decision in the deny cache, as limit_keys() does */
    for (size_t i = 0; i < policy->nlimits; i++)
        total += lens[i] + 1;
    op->lk = xcalloc(1, sizeof(*op->lk) + total);
    for (size_t i = 0; i < policy->nlimits; i++) {
        if (i > 0)
            op->lk->buf[o++] = '\n';
        memcpy(op->lk->buf + o, keys[i], lens[i]);
        op->lk->key[i] = op->lk->buf + o;
        op->lk->len[i] = lens[i];
        o += lens[i];
    }
    op->lk->all = op->lk->buf;
    op->lk->all_len = o;
    start_op(op, env, cfg, policy, cost, timeout_ms, false, COUNT_CHECK, done, arg);
    return RL_OK;
}

void
check_count_caller(const struct rl_check_env *env, const struct rl_config *cfg,
                   const struct rl_policy *policy, const char *keyname, const char *key,
                   size_t klen, int top_id, bool denied, int64_t units)
{
    uint16_t off, end;

    if (env->top == NULL || klen >= RL_REDIS_KEY_MAX)
        return;
    key_identity(cfg, policy, keyname, klen, &off, &end);
    if (end <= off)
        return;
    top_record(env->top, top_id, key + off, (size_t)(end - off),
               policy->limit_ids ? 0 : check_key_hash(policy, key, klen), denied,
               denied ? 0 : units, now_us(env));
}

int
check_start_policy(const struct rl_check_env *env, struct rl_config *cfg,
                   const struct rl_policy *policy, const char *keyname, const char *id,
                   size_t idlen, int64_t cost, bool count_over, int64_t timeout_ms, int top_id,
                   rl_check_done done, void *arg, char **cause)
{
    return start_policy(env, cfg, policy, keyname, id, idlen, NULL, cost,
                        count_over ? COUNT_HITS : COUNT_CHECK, false, timeout_ms, NULL, 0,
                        top_id, done, arg, cause);
}

/*
 * Why a check cannot take a reservation ("reserve": true), naming the field
 * (a 400, nothing counted): a settle finds the reservation's limits again
 * from its id alone, the key base and the policy's (or override's) limits,
 * which a check's own limits and limits of identities of their own are
 * not; a hybrid policy decides locally, where no reservation can be held.
 */
static int
reserve_problem(const struct rl_check_input *in, const struct rl_policy *policy, size_t nown,
                char **cause)
{
    if (in->charge)
        *cause = xstrdup("reserve: a charge takes no reservation (it counts its cost as it "
                         "is)");
    else if (policy->mode == RL_MODE_HYBRID)
        *cause = xasprintf("reserve: policy \"%s\" is hybrid: its local decisions cannot "
                           "hold a reservation",
                           policy->name);
    else if (nown > 0)
        *cause = xstrdup("reserve: not with the check's own \"limits\": a settle finds a "
                         "reservation's limits in the configuration");
    else if (policy->limit_ids)
        *cause = xasprintf("reserve: policy \"%s\" has limits with identities of their "
                           "own, which a settle cannot resolve",
                           policy->name);
    else
        return RL_OK;
    return RL_ERR;
}

int
check_start(const struct rl_check_env *env, struct rl_config *cfg,
            const struct rl_check_input *in, rl_check_done done, void *arg, int *status,
            char **cause)
{
    struct rl_body_fields f = {.cost = 1};
    const struct rl_policy *policy;
    struct rl_limit own[RL_LIMITS_MAX];
    size_t nown = 0;
    json_t *root = NULL;
    struct rl_ident_input ident = in->ident;
    char id[RL_IDENTITY_MAX];
    size_t idlen;
    char normbuf[NORM_STACK], *norm = NULL;
    int rc = RL_ERR;

    *status = 400;
    if (read_body(in, &f, &root, cause) != RL_OK ||
        pick_policy(cfg, &f, in, &policy, normbuf, &norm, cause) != RL_OK)
        goto out;

    /* limits brought to a check no policy decides: no policy allows them,
     * and answering "allowed, no policy" would hide that they count nowhere */
    if (policy == NULL &&
        (f.limits != NULL || (root != NULL && json_object_get(root, "limits") != NULL &&
                              !json_is_null(json_object_get(root, "limits"))))) {
        *cause = xstrdup("limits: no policy decides this check, so none takes limits from the "
                         "caller");
        goto out;
    }
    if (policy == NULL) {
        struct rl_decision d;
        response_no_policy(&d);
        d.charge = in->charge; /* counted nowhere: "charged": 0 */
        if (!in->charge)
            metrics_check(env->metrics, RL_METRICS_NO_POLICY, RL_OUT_ALLOWED);
        done(&d, arg);
        rc = RL_OK;
        goto out;
    }

    if ((f.limits != NULL || (root != NULL && json_object_get(root, "limits") != NULL &&
                              !json_is_null(json_object_get(root, "limits")))) &&
        own_limits(env, policy, in, &f, &root, own, &nown, cause) != RL_OK)
        goto out;

    ident.forwarded_rfc7239 = cfg->forwarded_rfc7239;
    ident.ipv4_prefix = policy->fold4;
    ident.ipv6_prefix = policy->fold6;
    ident.body_key = f.key;
    ident.body_key_len = f.key_len;
    if (identity_resolve(policy->identity.n ? &policy->identity : &cfg->identity,
                         &cfg->trusted_proxies, &ident, id, sizeof(id), &idlen,
                         cause) != RL_OK)
        goto out;
    if (idlen == 0) {
        *cause = xstrdup("key: no identity: the body has no \"key\" and no "
                         "other source of the identity chain gave one");
        goto out;
    }

    if (policy->noverrides > 0)
        policy = policy_for(policy, id, idlen);
    /* a check's own limits replace the policy's, an override's too */
    if (f.reserve && reserve_problem(in, policy, nown, cause) != RL_OK)
        goto out;
    rc = start_policy(env, cfg, policy, NULL, id, idlen, &ident, f.cost,
                      in->charge ? COUNT_CHARGE : COUNT_CHECK, f.reserve != 0, 0,
                      nown > 0 ? own : NULL, nown, -1, done, arg, cause);
out:
    free(norm);
    json_decref(root);
    return rc;
}

/* ---- POST /release ------------------------------------------------------ */

/* A release waiting for its backend: the lease's limit alone, as a policy
 * of one limit whose key base is the lease's.  Freed in the callback. */
struct release_op {
    struct rl_config *cfg;
    const struct rl_check_env *env;
    struct rl_policy policy;
    struct rl_limit limit;
    struct rl_check_req req;
    rl_release_done done;
    void *arg;
    int64_t start_us;
    char key[RL_REDIS_KEY_MAX];
};

static void
on_release(const struct rl_check_res *res, void *arg)
{
    struct release_op *op = arg;

    metrics_backend(op->env->metrics, res->status, now_us(op->env) - op->start_us);
    if (res->status != RL_BACKEND_OK)
        log_debug(LOG_MSG("release failed"), LOG_S("policy", op->policy.name),
                  LOG_Q("error", res->error ? res->error : ""));
    op->done(res->status == RL_BACKEND_OK ? 200 : 503,
             res->status == RL_BACKEND_OK && res->released, op->arg);
    config_unref(op->cfg);
    free(op);
}

/* The policy whose hash tag the key base `key` starts with (the one a
 * lease or a reservation id names); NULL: none. */
static const struct rl_policy *
key_policy(const struct rl_config *cfg, const char *key, size_t klen)
{
    size_t plen = strlen(cfg->redis.key_prefix);

    if (klen < 1 + plen || key[0] != '{' || memcmp(key + 1, cfg->redis.key_prefix, plen) != 0)
        return NULL;
    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct rl_policy *p = &cfg->policies[i];
        size_t n = strlen(p->name), at = 1 + plen + n;

        /* a name holds neither ':' nor '}': what follows it ends it */
        if (klen > at && memcmp(key + 1 + plen, p->name, n) == 0 &&
            (key[at] == ':' || key[at] == '}'))
            return p;
    }
    return NULL;
}

/* The concurrency limit a lease of key base `key` and lease_ms names: of
 * the policy whose hash tag the key starts with, or of one of its
 * overrides.  NULL: none (a reload removed it, or the lease is made up). */
static const struct rl_policy *
lease_policy(const struct rl_config *cfg, const char *key, size_t klen, int64_t lease_ms,
             size_t *index)
{
    const struct rl_policy *p = key_policy(cfg, key, klen);

    for (size_t k = 0; p != NULL && k <= p->noverrides; k++) {
        const struct rl_policy *q = k == 0 ? p : p->overrides[k - 1].as_policy;

        if (policy_lease_limit(q, index) && q->limits[*index].window_ms == lease_ms)
            return q;
    }
    return NULL;
}

int
check_release(const struct rl_check_env *env, struct rl_config *cfg, const char *body,
              size_t body_len, rl_release_done done, void *arg, char **error)
{
    struct release_op *op;
    const struct rl_policy *p;
    struct rl_lease id;
    json_error_t jerr;
    json_t *root, *v;
    int64_t lease_ms;
    size_t klen, i;
    char key[RL_REDIS_KEY_MAX];

    root = json_loadb(body != NULL ? body : "", body_len,
                      JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        *error = body_len == 0 ? xstrdup("body: required: {\"lease\": \"<a check's lease>\"}")
                               : xasprintf("body: malformed JSON at line %d column %d: %s",
                                           jerr.line, jerr.column, jerr.text);
        return RL_ERR;
    }
    v = json_is_object(root) ? json_object_get(root, "lease") : NULL;
    if (!json_is_object(root)) {
        *error = xstrdup("body: must be a JSON object");
    } else if (v == NULL || json_is_null(v)) {
        *error = xstrdup("lease: required: the \"lease\" of an allowed check");
    } else if (!json_is_string(v)) {
        *error = xstrdup("lease: must be a string");
    } else if (!lease_id_parse(json_string_value(v), json_string_length(v), &id, &lease_ms,
                               key, sizeof(key), &klen)) {
        *error = xstrdup("lease: not a lease this daemon gives: "
                         "\"<32 hex digits>.<lease ms>.<key in base64url>\"");
    }
    json_decref(root);
    if (*error != NULL)
        return RL_ERR;
    /* a well-formed lease of no limit of ours holds nothing: not held */
    p = lease_policy(cfg, key, klen, lease_ms, &i);
    if (p == NULL) {
        done(200, false, arg);
        return RL_OK;
    }
    op = xcalloc(1, sizeof(*op));
    op->cfg = config_ref(cfg);
    op->env = env;
    op->done = done;
    op->arg = arg;
    op->limit = p->limits[i];
    op->limit.identity = NULL;
    op->policy = *p;
    op->policy.limits = &op->limit;
    op->policy.nlimits = 1;
    op->policy.overrides = NULL;
    op->policy.noverrides = 0;
    memcpy(op->key, key, klen);
    op->req.policy = &op->policy;
    op->req.key = op->key;
    op->req.key_len = klen;
    op->req.flags = RL_CHECK_RELEASE;
    op->req.lease = id;
    op->req.timeout_ms = cfg->redis.timeout_ms;
    op->start_us = now_us(env);
    env->backend->ops->check(env->backend, &op->req, on_release, op);
    return RL_OK;
}

/* ---- POST /settle ------------------------------------------------------- */

/* The policy (or override) a reservation of key base `key` was taken under:
 * the one whose limits hash to h (reservation.h).  NULL: none (a reload
 * changed its limits, or the id is made up). */
static const struct rl_policy *
rsv_policy(const struct rl_config *cfg, const char *key, size_t klen, uint64_t h)
{
    const struct rl_policy *p = key_policy(cfg, key, klen);

    for (size_t k = 0; p != NULL && k <= p->noverrides; k++) {
        const struct rl_policy *q = k == 0 ? p : p->overrides[k - 1].as_policy;

        if (q->mode != RL_MODE_HYBRID && !q->limit_ids &&
            (reservation_limits_hash(q->limits, q->nlimits) & 0xffffffffffffULL) == h)
            return q;
    }
    return NULL;
}

/* The body of a settle, {"reservation": "<id>", "cost": N}: RL_ERR and
 * *error naming the field when it is not that. */
static int
settle_body(const char *body, size_t body_len, struct check_op *op, char *key, size_t *klen,
            uint64_t *h, char **error)
{
    json_error_t jerr;
    json_t *root, *v, *c;
    const char *name;

    root = json_loadb(body != NULL ? body : "", body_len,
                      JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        *error = body_len == 0 ? xstrdup("body: required: {\"reservation\": \"<a check's "
                                         "reservation>\", \"cost\": <the real cost>}")
                               : xasprintf("body: malformed JSON at line %d column %d: %s",
                                           jerr.line, jerr.column, jerr.text);
        return RL_ERR;
    }
    if (!json_is_object(root)) {
        *error = xstrdup("body: must be a JSON object");
        goto out;
    }
    json_object_foreach(root, name, v) {
        if (strcmp(name, "reservation") != 0 && strcmp(name, "cost") != 0) {
            /* the error's writer escapes it; cut short.  An empty name
             * would leave the message naming nothing: the body is named. */
            *error = name[0] != '\0'
                         ? xasprintf("%.64s: unknown field (a settle takes \"reservation\" "
                                     "and \"cost\")",
                                     name)
                         : xstrdup("body: a field with an empty name (a settle takes "
                                   "\"reservation\" and \"cost\")");
            goto out;
        }
    }
    v = json_object_get(root, "reservation");
    c = json_object_get(root, "cost");
    if (v == NULL || json_is_null(v))
        *error = xstrdup("reservation: required: the \"reservation\" of an allowed check");
    else if (!json_is_string(v))
        *error = xstrdup("reservation: must be a string");
    else if (json_string_length(v) >= RL_RSV_ID_MAX ||
             !reservation_id_parse(json_string_value(v), json_string_length(v), &op->req.rsv,
                                   op->claim, &op->req.rsv_claim_len, &op->estimate, h, key,
                                   RL_REDIS_KEY_MAX, klen))
        *error = xstrdup("reservation: not a reservation this daemon gives: \"<32 hex "
                         "digits>.<estimate>.<12 hex digits>.<key in base64url>\"");
    else if (c == NULL || json_is_null(c))
        *error = xstrdup("cost: required: the real cost, 0 gives the whole estimate back");
    else if (!json_is_integer(c) || json_integer_value(c) < 0 ||
             json_integer_value(c) > RL_COST_MAX)
        *error = xasprintf("cost: must be an integer 0..%lld", RL_COST_MAX);
    else
        op->req.cost = json_integer_value(c);
out:
    json_decref(root);
    return *error != NULL ? RL_ERR : RL_OK;
}

int
check_settle(const struct rl_check_env *env, struct rl_config *cfg, const char *body,
             size_t body_len, rl_check_done done, void *arg, char **error)
{
    struct check_op *op = op_new(env);
    const struct rl_policy *p;
    size_t klen;
    uint64_t h;

    if (settle_body(body, body_len, op, op->key, &klen, &h, error) != RL_OK) {
        op_release(env, op);
        return RL_ERR;
    }
    /* a well-formed id of no limits of ours holds nothing: not settled */
    p = rsv_policy(cfg, op->key, klen, h);
    if (p == NULL) {
        struct rl_decision d;

        memset(&d, 0, sizeof(d));
        d.status = 200;
        d.settle = 1;
        metrics_reservation(env->metrics, RL_RSV_M_UNKNOWN);
        op_release(env, op);
        done(&d, arg);
        return RL_OK;
    }
    op->req.key_len = klen;
    op->req.rsv_estimate = op->estimate;
    op->settle = 1;
    start_op(op, env, cfg, p, op->req.cost, 0, false, COUNT_CHECK, done, arg);
    return RL_OK;
}
