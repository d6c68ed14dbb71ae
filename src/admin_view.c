/* admin_view.c — see admin_view.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "ac_config.h"
#include "admin_view.h"
#include "algo.h"
#include "backend.h"
#include "config.h"
#include "metrics.h"
#include "policy.h"
#include "query.h"
#include "rls_rules.h"
#include "top.h"
#include "util.h"
#include "worker.h"

/* Callers an answer lists unless n= says: the page's table. */
#define TOP_N_DEFAULT 10

static const char unauthorized_hdr[] =
    "WWW-Authenticate: Bearer realm=\"ratelimitd-admin\"\r\n";

/* ---- the page ------------------------------------------------------------ */

/* The page's headers: its one script and one style allowed by their hashes
 * (CSP level 2), nothing else from anywhere; data calls to this origin. */
static char *page_headers;
static pthread_once_t page_once = PTHREAD_ONCE_INIT;

/* "'sha256-<base64>'" of the text between open and close in the page. */
static void
hash_source(const char *open, const char *close, char *out, size_t size)
{
    const char *a = strstr(admin_ui_html, open), *b;
    unsigned char md[32];
    unsigned int mdlen = 0;
    unsigned char b64[64];

    snprintf(out, size, "'none'");
    if (a == NULL || (b = strstr(a + strlen(open), close)) == NULL)
        return;
    a += strlen(open);
    if (EVP_Digest(a, (size_t)(b - a), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        return;
    EVP_EncodeBlock(b64, md, 32);
    snprintf(out, size, "'sha256-%s'", b64);
}

static void
page_init(void)
{
    char script[80], style[80];

    hash_source("<script>", "</script>", script, sizeof(script));
    hash_source("<style>", "</style>", style, sizeof(style));
    page_headers = xasprintf("Content-Security-Policy: default-src 'none'; script-src %s; "
                             "style-src %s; connect-src 'self'; img-src 'none'; "
                             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
                             "X-Content-Type-Options: nosniff\r\n"
                             "Referrer-Policy: no-referrer\r\n"
                             "X-Frame-Options: DENY\r\n"
                             "Cache-Control: no-store\r\n",
                             script, style);
}

static void
serve_page(struct http_req *r)
{
    struct http_response resp = {.status = 200,
                                 .content_type = "text/html; charset=utf-8",
                                 .body = admin_ui_html,
                                 .body_len = admin_ui_html_len};

    pthread_once(&page_once, page_init);
    resp.headers = page_headers;
    resp.headers_len = strlen(page_headers);
    http_respond(r, &resp);
}

/* ---- JSON answers ------------------------------------------------------- */

static void
respond_json(struct http_req *r, json_t *o)
{
    struct http_response resp = {.status = 200,
                                 .headers = "Cache-Control: no-store\r\n",
                                 .headers_len = strlen("Cache-Control: no-store\r\n")};
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    if (s == NULL) {
        http_respond_error(r, 500, NULL, "the answer could not be written");
        return;
    }
    resp.body = s;
    resp.body_len = strlen(s);
    http_respond(r, &resp);
    free(s);
}

/* ---- GET /admin/top ------------------------------------------------------ */

/* What a /admin/top request asks (query.h), or the 400's message. */
struct top_query {
    const struct rl_policy *policy; /* NULL: an RLS rule's */
    char domain[257], rule[257];    /* the metrics' labels: 256 bytes at most */
    int id;                         /* top.h's */
    enum top_by by;
    int minutes;
    size_t n;
};

static char *
top_query_parse(const struct http_head *h, const struct rl_config *cfg, struct top_query *q)
{
    char policy[RL_NAME_MAX + 1], by[8], n[8], interval[8];
    struct query_param p[] = {{"policy", policy, sizeof(policy), 0, false},
                              {"by", by, sizeof(by), 0, false},
                              {"n", n, sizeof(n), 0, false},
                              {"interval", interval, sizeof(interval), 0, false},
                              {"domain", q->domain, sizeof(q->domain), 0, false},
                              {"rule", q->rule, sizeof(q->rule), 0, false}};
    const char *why;
    int which;
    char *end;
    long v;

    if (query_parse(h->target, h->target_len, p, RL_ARRAY_LEN(p), &why, &which) != RL_OK)
        return which < 0 ? xasprintf("query: %s; use policy (or domain and rule), by, n and "
                                     "interval",
                                     why)
                         : xasprintf("%s: %s", p[which].name, why);
    if (p[0].seen && p[4].seen)
        return xstrdup("domain: not with policy");
    if (p[4].seen && !p[5].seen)
        return xstrdup("rule: required with domain");
    if (p[5].seen && !p[4].seen)
        return xstrdup("domain: required with rule");
    if (p[4].seen) {
        /* an RLS rule: by the name its metrics have, none registered here
         * (a rule no check reached has none: -1, no callers) */
        int id = metrics_rls_find(q->domain, p[4].len, q->rule, p[5].len);
        q->id = id >= 0 ? TOP_RLS_ID(id) : -1;
    } else if (!p[0].seen || (q->policy = config_policy(cfg, policy)) == NULL) {
        return xstrdup("policy: must name a policy of the configuration");
    } else {
        q->id = q->policy->metrics_id;
    }
    q->by = TOP_BY_DENIED;
    if (p[1].seen && strcmp(by, "units") == 0)
        q->by = TOP_BY_UNITS;
    else if (p[1].seen && strcmp(by, "denied") != 0)
        return xstrdup("by: must be \"denied\" or \"units\"");
    q->n = TOP_N_DEFAULT;
    if (p[2].seen) {
        v = strtol(n, &end, 10);
        if (p[2].len == 0 || *end != '\0' || n[0] == '-' || n[0] == '+' || v < 1 ||
            v > TOP_K_MAX)
            return xasprintf("n: must be an integer 1..%d", TOP_K_MAX);
        q->n = (size_t)v;
    }
    q->minutes = 1;
    if (p[3].seen && strcmp(interval, "15m") == 0)
        q->minutes = 15;
    else if (p[3].seen && strcmp(interval, "1m") != 0)
        return xstrdup("interval: must be \"1m\" or \"15m\"");
    return NULL;
}

static void
serve_top(struct http_req *r, struct rl_worker *w)
{
    const struct rl_config *cfg = worker_config(w);
    struct rl_top *tops[256];
    size_t ntops = worker_tops(w, tops, RL_ARRAY_LEN(tops));
    struct top_query q = {0};
    struct top_answer a;
    json_t *callers, *o;
    char *cause;

    if (cfg->top_k == 0) {
        http_respond_error(r, 404, NULL,
                           "top_k: 0 in the configuration: no caller is counted");
        return;
    }
    if ((cause = top_query_parse(r->head, cfg, &q)) != NULL) {
        http_respond_error(r, 400, NULL, cause);
        free(cause);
        return;
    }
    top_read(tops, ntops, q.id, q.by, q.minutes, q.n, now_monotonic_us(), &a);
    callers = json_array();
    for (size_t i = 0; i < a.n; i++) {
        const struct top_caller *c = &a.callers[i];
        uint64_t fig = c->figure[q.by];
        json_t *e = json_pack(
            "{s:s%,s:I,s:I,s:f,s:I}", "identity", c->identity, c->identity_len, "denied",
            (json_int_t)c->figure[TOP_BY_DENIED], "units", (json_int_t)c->figure[TOP_BY_UNITS],
            "share",
            a.total > 0 ? (double)(fig < a.total ? fig : a.total) / (double)a.total : 0.0,
            "error_bound", (json_int_t)c->error_bound);

        if (e == NULL) /* not UTF-8: a key of bytes; shown as its escapes */
            continue;
        if (c->cut)
            json_object_set_new(e, "cut", json_true());
        json_array_append_new(callers, e);
    }
    o = json_pack("{s:s,s:I,s:I,s:I,s:o}", "by", q.by == TOP_BY_DENIED ? "denied" : "units",
                  "interval_s", (json_int_t)((a.interval_us + 999999) / 1000000), "total",
                  (json_int_t)a.total, "top_k", (json_int_t)cfg->top_k, "callers", callers);
    if (q.policy != NULL) {
        json_object_set_new(o, "policy", json_string(q.policy->name));
    } else {
        json_object_set_new(o, "domain", json_stringn(q.domain, strlen(q.domain)));
        json_object_set_new(o, "rule", json_stringn(q.rule, strlen(q.rule)));
    }
    top_answer_free(&a);
    respond_json(r, o);
}

/* ---- GET /admin/status --------------------------------------------------- */

static uint64_t
counted(struct rl_metrics *const *ms, size_t n, int id, enum rl_outcome o)
{
    uint64_t s = 0;

    for (size_t i = 0; i < n; i++)
        s += __atomic_load_n(&ms[i]->checks[id][o], __ATOMIC_RELAXED);
    return s;
}

static json_t *
limits_json(const struct rl_policy *p)
{
    json_t *limits = json_array();

    for (size_t i = 0; p != NULL && i < p->nlimits; i++) {
        const struct rl_limit *l = &p->limits[i];
        json_t *e = json_pack("{s:s,s:I,s:I}", "algorithm", algo_def(l->algo)->name, "limit",
                              (json_int_t)l->limit, "window_ms", (json_int_t)l->window_ms);

        if (algo_has_period(l))
            json_object_set_new(e, "period", json_string(period_kind_name(l->period.kind)));
        if (algo_def(l->algo)->uses_burst)
            json_object_set_new(e, "burst", json_integer(l->burst));
        json_array_append_new(limits, e);
    }
    return limits;
}

static json_t *
policy_json(const struct rl_policy *p, struct rl_metrics *const *ms, size_t n)
{
    int id = p->metrics_id;

    return json_pack("{s:s,s:b,s:s,s:o,s:I,s:I,s:I,s:I,s:I}", "name", p->name, "shadow",
                     p->shadow != 0, "mode", p->mode == RL_MODE_HYBRID ? "hybrid" : "exact",
                     "limits", limits_json(p), "allowed",
                     (json_int_t)counted(ms, n, id, RL_OUT_ALLOWED), "denied",
                     (json_int_t)counted(ms, n, id, RL_OUT_DENIED), "shadow_denied",
                     (json_int_t)counted(ms, n, id, RL_OUT_SHADOW_DENIED), "degraded",
                     (json_int_t)counted(ms, n, id, RL_OUT_DEGRADED), "error",
                     (json_int_t)counted(ms, n, id, RL_OUT_ERROR));
}

/* RLS rules: the label pairs ratelimitd_rls_* count, the most hit first,
 * at most STATUS_RLS_MAX (a page polls this; 1,024 names may be). */
#define STATUS_RLS_MAX 32

struct rls_seen {
    int id;
    uint64_t hits;
};

static uint64_t
rls_counted(struct rl_metrics *const *ms, size_t n, int id, enum rl_rls_stat st)
{
    uint64_t s = 0;

    for (size_t i = 0; i < n; i++)
        s += __atomic_load_n(&ms[i]->rls_rules[id][st], __ATOMIC_RELAXED);
    return s;
}

static int
rls_seen_cmp(const void *a, const void *b)
{
    const struct rls_seen *x = a, *y = b;

    if (x->hits != y->hits)
        return x->hits > y->hits ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* One rule: its names as the metrics have them, its limits from the rules
 * in force when one rule of them has that label (else null), its counts;
 * NULL when a name is not UTF-8 (a request's bytes under detailed_metric). */
static json_t *
rls_rule_json(int id, const struct rl_config *cfg, struct rl_metrics *const *ms, size_t n,
              struct rl_top *const *tops, size_t ntops)
{
    const char *domain, *label;
    size_t dlen, llen;
    const struct rls_rule *rule;
    json_t *o, *limits = NULL;

    metrics_rls_name(id, &domain, &dlen, &label, &llen);
    rule = rls_rules_by_label(rls_rules_domain(cfg->rls.rules, domain, dlen), label, llen, id);
    if (rule != NULL) {
        limits = limits_json(rule->unlimited ? NULL : rule->policy);
        for (size_t i = 0; i < json_array_size(limits) && i < rule->nlimits; i++)
            if (rls_unit_name(rule->limits[i].unit) != NULL)
                json_object_set_new(json_array_get(limits, i), "unit",
                                    json_string(rls_unit_name(rule->limits[i].unit)));
    }
    o = json_pack("{s:s%,s:s%,s:o?,s:I,s:I,s:I,s:I,s:I,s:b}", "domain", domain, dlen, "rule",
                  label, llen, "limits", limits, "hits",
                  (json_int_t)rls_counted(ms, n, id, RL_RLS_HITS), "within_limit",
                  (json_int_t)rls_counted(ms, n, id, RL_RLS_WITHIN_LIMIT), "near_limit",
                  (json_int_t)rls_counted(ms, n, id, RL_RLS_NEAR_LIMIT), "over_limit",
                  (json_int_t)rls_counted(ms, n, id, RL_RLS_OVER_LIMIT), "shadow_mode",
                  (json_int_t)rls_counted(ms, n, id, RL_RLS_SHADOW_MODE), "callers_counted",
                  top_counted(tops, ntops, TOP_RLS_ID(id)));
    if (o == NULL)
        return NULL;
    if (rule != NULL) {
        json_object_set_new(o, "shadow", json_boolean(rule->shadow_mode));
        if (rule->unlimited)
            json_object_set_new(o, "unlimited", json_true());
    }
    return o;
}

static json_t *
rls_rules_json(struct rl_worker *w, const struct rl_config *cfg, struct rl_metrics *const *ms,
               size_t n, int *total)
{
    struct rl_top *tops[256];
    size_t ntops = worker_tops(w, tops, RL_ARRAY_LEN(tops));
    int count = metrics_rls_count();
    struct rls_seen *seen = xmalloc((size_t)(count > 0 ? count : 1) * sizeof(*seen));
    json_t *a = json_array();

    for (int id = 0; id < count; id++)
        seen[id] = (struct rls_seen){id, rls_counted(ms, n, id, RL_RLS_HITS)};
    qsort(seen, (size_t)count, sizeof(*seen), rls_seen_cmp);
    for (int i = 0; i < count && json_array_size(a) < STATUS_RLS_MAX; i++) {
        json_t *e = rls_rule_json(seen[i].id, cfg, ms, n, tops, ntops);
        if (e != NULL)
            json_array_append_new(a, e);
    }
    free(seen);
    *total = count;
    return a;
}

static void
serve_status(struct http_req *r, struct rl_worker *w)
{
    const struct rl_config *cfg = worker_config(w);
    struct rl_metrics *ms[256];
    size_t n = worker_all_counters(w, ms, RL_ARRAY_LEN(ms));
    struct rl_reload_state rl;
    const char *reason;
    bool serving = worker_serving(w, &reason, NULL);
    json_t *policies = json_array(), *backend, *reloads, *o;
    uint64_t degraded = 0;
    char hash[17];

    metrics_reloads(&rl);
    for (size_t i = 0; i < cfg->npolicies; i++) {
        json_array_append_new(policies, policy_json(&cfg->policies[i], ms, n));
        degraded += counted(ms, n, cfg->policies[i].metrics_id, RL_OUT_DEGRADED);
    }
    backend = json_pack("{s:s,s:b,s:b,s:s?,s:s,s:I}", "kind", worker_backend(w)->ops->name,
                        "ready", reason == NULL, "serving", serving, "reason", reason,
                        "failure_mode", config_failure_mode_name(cfg->failure_mode),
                        "degraded", (json_int_t)degraded);
    reloads = json_pack("{s:I,s:I,s:s?}", "ok", (json_int_t)rl.ok, "failed",
                        (json_int_t)rl.failed, "last",
                        rl.last < 0 ? NULL
                        : rl.last   ? "ok"
                                    : "failed");
    if (rl.last >= 0)
        json_object_set_new(reloads, "last_unix_ms", json_integer(rl.last_unix_us / 1000));
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)rl.config_hash);
    o = json_pack(
        "{s:s,s:I,s:I,s:s?,s:s,s:o,s:o,s:I,s:I,s:o}", "version", PACKAGE_VERSION, "uptime_s",
        (json_int_t)(rl.started_us > 0 ? (now_monotonic_us() - rl.started_us) / 1000000 : 0),
        "now_ms", (json_int_t)(now_unix_us() / 1000), "config_file", cfg->file, "config_hash",
        hash, "backend", backend, "reloads", reloads, "workers", (json_int_t)n, "top_k",
        (json_int_t)cfg->top_k, "policies", policies);
    if (o != NULL) {
        int total = 0;
        json_object_set_new(o, "rls_rules", rls_rules_json(w, cfg, ms, n, &total));
        json_object_set_new(o, "rls_rules_total", json_integer(total));
    }
    respond_json(r, o);
}

/* ---- routing ------------------------------------------------------------- */

static bool
is_path(const struct http_head *h, const char *p)
{
    return h->path_len == strlen(p) && memcmp(h->path, p, h->path_len) == 0;
}

bool
admin_view_handle(struct http_req *r, struct rl_worker *w, bool authorized)
{
    const struct http_head *h = r->head;
    const struct rl_config *cfg = worker_config(w);
    int route = is_path(h, "/admin/ui")       ? 0
                : is_path(h, "/admin/top")    ? 1
                : is_path(h, "/admin/status") ? 2
                : is_path(h, "/admin/auth")   ? 3
                                              : -1;

    if (route < 0)
        return false;
    if (h->method != HTTP_M_GET && h->method != HTTP_M_HEAD)
        http_respond_error(r, 405, "Allow: GET, HEAD\r\n", "method not allowed");
    else if (route == 0)
        serve_page(r);
    else if (route == 3) /* what the page asks first: never a 401 */
        respond_json(r, json_pack("{s:b,s:b}", "token_required", cfg->admin_token != NULL,
                                  "authorized", authorized));
    else if (!authorized)
        http_respond_error(r, 401, unauthorized_hdr,
                           "authorization: a valid \"Bearer\" token is required");
    else if (route == 1)
        serve_top(r, w);
    else
        serve_status(r, w);
    return true;
}
