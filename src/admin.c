/* admin.c — see admin.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>

#include <jansson.h>

#include "admin.h"
#include "admin_view.h"
#include "backend.h"
#include "check.h"
#include "config.h"
#include "log.h"
#include "metrics.h"
#include "netaddr.h"
#include "schema.h"
#include "util.h"
#include "worker.h"

/* The longest block: a year, as the longest window. */
#define BLOCK_MAX_MS (366LL * 24 * 3600 * 1000)

static const char *const paths[RL_ADM_ACTION_COUNT] = {"/admin/inspect", "/admin/reset",
                                                       "/admin/block",   "/admin/unblock",
                                                       "/admin/reward",  "/admin/penalty"};

/* One admin request from its body to the backend's answer. */
struct admin_op {
    struct http_req *r;
    struct rl_worker *w;
    struct rl_config *cfg;          /* a reference: the policy lives in it */
    const struct rl_policy *policy; /* NULL until the body named one */
    enum rl_admin_action action;
    struct rl_check_req req;
    int64_t sent_us; /* now_monotonic_us() */
    char peer[INET6_ADDRSTRLEN];
    char id[RL_IDENTITY_MAX]; /* typed: "k:alice", "ip:10.0.0.7" */
    size_t idlen;
    char key[RL_REDIS_KEY_MAX];
};

/* The connection's peer, for the log: an address, or "unix". */
static void
admin_peer_text(const struct http_req *r, char *buf, size_t size)
{
    const struct sockaddr_storage *ss = http_req_peer(r);

    if (ss != NULL && ss->ss_family == AF_UNIX)
        snprintf(buf, size, "unix");
    else
        http_req_peer_text(r, buf, size);
}

/* What an operator did and how it ended: one line per request, whatever
 * the result.  The caller is named by the escaped backend key, or, when a
 * partition_key is set, by its pk (the hash the RateLimit headers carry, in hex):
 * then an API key used as identity never reaches the log. */
static void
audit(const struct admin_op *op, enum rl_admin_result result, int status)
{
    const struct rl_config *cfg = op->cfg;
    char who[32];
    const char *key = op->req.key_len > 0 ? op->key : "-";

    metrics_admin(worker_counters(op->w), op->action, result);
    if (cfg != NULL && cfg->partition_key != NULL && op->req.key_len > 0) {
        snprintf(
            who, sizeof(who), "pk:%016llx",
            (unsigned long long)siphash24(cfg->pk_k0, cfg->pk_k1, op->key, op->req.key_len));
        key = who;
    }
    log_info(LOG_MSG("admin"), LOG_S("action", metrics_admin_action_name(op->action)),
             LOG_S("peer", op->peer),
             LOG_S("policy", op->policy != NULL ? op->policy->name : "-"), LOG_S("key", key),
             LOG_S("result", metrics_admin_result_name(result)), LOG_I("status", status));
}

static void
admin_op_free(struct admin_op *op)
{
    config_unref(op->cfg);
    free(op);
}

/* Refuse op's request: the answer, the log line, the count. */
static void
admin_refuse(struct admin_op *op, int status, const char *extra, const char *msg)
{
    /* counted before the answer: a client that reads /metrics once it has
     * its answer sees it (another worker may serve that read) */
    audit(op,
          status == 401   ? RL_ADM_UNAUTHORIZED
          : status >= 500 ? RL_ADM_ERROR
                          : RL_ADM_INVALID,
          status);
    http_respond_error(op->r, status, extra, msg);
}

/* Equal in time that depends only on the lengths: how much of the token a
 * guess got right must not show in how long the answer took. */
static bool
secret_equal(const char *got, size_t glen, const char *want, size_t wlen)
{
    unsigned char d = glen != wlen;

    for (size_t i = 0; i < wlen; i++)
        d |= (unsigned char)(want[i] ^ (i < glen ? got[i] : 0));
    return d == 0;
}

static bool
authorized(const struct rl_config *cfg, const struct http_head *h)
{
    const struct http_header *a;

    if (cfg->admin_token == NULL)
        return true;
    a = http_head_find(h, "Authorization");
    if (a == NULL || a->value_len < 7 || strncasecmp(a->value, "Bearer ", 7) != 0)
        return false;
    return secret_equal(a->value + 7, a->value_len - 7, cfg->admin_token,
                        strlen(cfg->admin_token));
}

/*
 * A browser's request made by a page of another origin (a form or fetch
 * aimed at the admin listener from any site the operator visits): its
 * Origin names another host than the request's Host, or Sec-Fetch-Site says
 * so.  Refused before the token is looked at, so that an admin API without
 * a token (on loopback or a socket) cannot be driven from a web page;
 * clients that send no Origin (curl, the clients, the status page's own
 * calls from its origin) are not affected.
 */
static bool
cross_origin(const struct http_head *h)
{
    const struct http_header *o = http_head_find(h, "Origin");
    const struct http_header *site = http_head_find(h, "Sec-Fetch-Site");
    const struct http_header *host = http_head_find(h, "Host");
    const char *auth;

    if (site != NULL && (strcasecmp(site->value, "cross-site") == 0 ||
                         strcasecmp(site->value, "same-site") == 0))
        return true;
    if (o == NULL)
        return false;
    auth = strstr(o->value, "://");
    if (auth == NULL || host == NULL)
        return true; /* "null" (a sandboxed page, a file) or no Host */
    auth += 3;
    return strlen(auth) != host->value_len ||
           strncasecmp(auth, host->value, host->value_len) != 0;
}

/* The caller the body names, typed as identity_resolve types it under
 * policy p (an address is its network at p's prefix lengths), so the key
 * is the one its checks use. */
static int
body_identity(json_t *root, const struct rl_policy *p, struct admin_op *op, char **cause)
{
    json_t *k = json_object_get(root, "key"), *ip = json_object_get(root, "ip");
    json_t *id = json_object_get(root, "identity");
    char text[64];
    uint8_t addr[16];
    int family;
    size_t n;

    if ((k != NULL) + (ip != NULL) + (id != NULL) != 1) {
        *cause = xstrdup("key: give the caller as \"key\", as \"ip\" or as \"identity\", "
                         "one of them");
        return RL_ERR;
    }
    if (k != NULL) {
        if (!json_is_string(k) || (n = json_string_length(k)) == 0 || n > RL_KEY_MAX) {
            *cause = xasprintf("key: must be a string of 1..%d bytes", RL_KEY_MAX);
            return RL_ERR;
        }
        memcpy(op->id, "k:", 2);
        memcpy(op->id + 2, json_string_value(k), n);
        op->idlen = n + 2;
        return RL_OK;
    }
    if (id != NULL) {
        /* typed, as inspect and the checks show it: "k:alice",
         * "ip:2001:db8:1:2::/64", "+ip:203.0.113.7+k:alice" */
        const char *v = json_string_value(id);

        n = json_string_length(id);
        if (v == NULL || n == 0 || n > sizeof(op->id) ||
            (strncmp(v, "k:", 2) != 0 && strncmp(v, "ip:", 3) != 0 &&
             strncmp(v, "unix:", 5) != 0 && v[0] != '+')) {
            *cause = xasprintf(
                "identity: must be a typed identity of 1..%zu bytes, as a check "
                "resolves it: \"k:KEY\", \"ip:ADDRESS\" or a compound "
                "\"+ip:ADDRESS+k:KEY\"",
                sizeof(op->id));
            return RL_ERR;
        }
        if (strncmp(v, "ip:", 3) != 0) {
            memcpy(op->id, v, n);
            op->idlen = n;
            return RL_OK;
        }
        ip = NULL;
        if (ip_parse(v + 3, n - 3, &family, addr) != RL_OK) {
            struct rl_cidr c;

            if (n - 3 >= sizeof(text))
                goto bad_ip;
            memcpy(text, v + 3, n - 3);
            text[n - 3] = '\0';
            if (cidr_parse(text, &c) != RL_OK)
                goto bad_ip;
            family = c.family;
            memcpy(addr, c.addr, 16);
        }
        goto fold;
    }
    if (!json_is_string(ip) ||
        ip_parse(json_string_value(ip), json_string_length(ip), &family, addr) != RL_OK)
        goto bad_ip;
fold:
    ip_format_net(family, addr, family == AF_INET ? p->fold4 : p->fold6, text, sizeof(text));
    op->idlen = (size_t)snprintf(op->id, sizeof(op->id), "ip:%s", text);
    return RL_OK;
bad_ip:
    *cause = xstrdup("ip: must be an IPv4 or IPv6 address");
    return RL_ERR;
}

/* An optional integer field in lo..hi, *out left alone when absent. */
static int
get_int(json_t *root, const char *name, int64_t lo, int64_t hi, int64_t *out, char **cause)
{
    json_t *v = json_object_get(root, name);

    if (v == NULL)
        return RL_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        *cause = xasprintf("%s: must be an integer %lld..%lld", name, (long long)lo,
                           (long long)hi);
        return RL_ERR;
    }
    *out = json_integer_value(v);
    return RL_OK;
}

/* "duration": a duration like the config's ("15m") or milliseconds. */
static int
get_duration(json_t *root, int64_t *out, char **cause)
{
    json_t *v = json_object_get(root, "duration");

    if (json_is_string(v) && schema_parse_duration_ms(json_string_value(v), out) == RL_OK &&
        *out >= 1 && *out <= BLOCK_MAX_MS)
        return RL_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        json_integer_value(v) <= BLOCK_MAX_MS) {
        *out = json_integer_value(v);
        return RL_OK;
    }
    *cause = xasprintf("duration: must be a duration like \"15m\" or milliseconds, "
                       "1ms..%lldms",
                       (long long)BLOCK_MAX_MS);
    return RL_ERR;
}

/* What the action asks of the backend (backend.h: RL_CHECK_*). */
static int
action_request(json_t *root, struct admin_op *op, char **cause)
{
    struct rl_check_req *q = &op->req;
    int64_t n = 1, limit = -1;

    q->limit_index = -1;
    switch (op->action) {
    case RL_ADM_INSPECT:
        /* the caller's open reservations too */
        q->cost = 0;
        q->flags = RL_CHECK_RSV_LIST;
        return RL_OK;
    case RL_ADM_RESET:
        if (get_int(root, "limit", 0, (int64_t)op->policy->nlimits - 1, &limit, cause) !=
            RL_OK)
            return RL_ERR;
        q->flags = RL_CHECK_RESET;
        q->limit_index = (int)limit;
        return RL_OK;
    case RL_ADM_BLOCK:
        q->flags = RL_CHECK_BLOCK;
        return get_duration(root, &q->block_ms, cause);
    case RL_ADM_UNBLOCK:
        q->flags = RL_CHECK_BLOCK;
        q->block_ms = 0;
        return RL_OK;
    case RL_ADM_REWARD:
    case RL_ADM_PENALTY:
    default:
        if (get_int(root, "cost", 1, RL_COST_MAX, &n, cause) != RL_OK)
            return RL_ERR;
        q->flags = RL_CHECK_FORCE;
        q->cost = op->action == RL_ADM_REWARD ? -n : n;
        return RL_OK;
    }
}

/* The body into op->req; RL_ERR with *cause naming the field. */
static int
parse_body(const char *body, size_t len, struct admin_op *op, char **cause)
{
    json_error_t jerr;
    json_t *root, *name;
    const struct rl_policy *p;
    size_t klen;
    int rc = RL_ERR;

    if (len == 0) {
        *cause = xstrdup("body: required: {\"policy\": ..., \"key\", \"ip\" or \"identity\": "
                         "...}");
        return RL_ERR;
    }
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    name = json_object_get(root, "policy");
    if (root == NULL) {
        *cause = xasprintf("body: malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
        return RL_ERR;
    }
    if (!json_is_object(root)) {
        *cause = xstrdup("body: must be a JSON object");
    } else if (!json_is_string(name) ||
               strlen(json_string_value(name)) != json_string_length(name) ||
               (p = config_policy(op->cfg, json_string_value(name))) == NULL) {
        *cause = xstrdup("policy: must name a policy of the configuration");
    } else if (body_identity(root, p, op, cause) == RL_OK) {
        op->policy = check_key_for(op->cfg, p, op->id, op->idlen, op->key, sizeof(op->key),
                                   &klen);
        op->req.key = op->key;
        op->req.key_len = op->policy != NULL ? klen : 0;
        if (op->policy == NULL)
            *cause = xstrdup("key: too long");
        else
            rc = action_request(root, op, cause);
    }
    json_decref(root);
    return rc;
}

/* An inspect's open reservations: their number, and the estimate and time
 * left of those listed (never their id: it would settle them). */
static void
answer_reservations(json_t *o, const struct rl_check_res *res)
{
    json_t *a = json_array();

    for (size_t i = 0; i < res->rsv_nlisted; i++)
        json_array_append_new(
            a, json_pack("{s:I,s:I}", "estimate", (json_int_t)res->rsv_listed[i].estimate,
                         "expires_in_ms", (json_int_t)res->rsv_listed[i].expires_in_ms));
    json_object_set_new(o, "reservations_open", json_integer(res->rsv_open));
    json_object_set_new(o, "reservations", a);
}

/* {"action", "policy", "identity", "key", "blocked_ms", "limits": [...]}
 * (an inspect: "reservations_open", "reservations": [...] too): the
 * caller's state after the action. */
static char *
answer_json(const struct admin_op *op, const struct rl_check_res *res)
{
    json_t *limits = json_array(), *o;
    int64_t now = now_unix_us();
    char *s;

    for (size_t i = 0; i < res->nlimits && i < op->policy->nlimits; i++) {
        const struct rl_limit *l = &op->policy->limits[i];
        bool cc = l->algo == RL_ALGO_CONCURRENCY;
        /* a concurrency limit's window is its lease; a period's window is
         * its length now */
        json_t *e = json_pack("{s:s,s:I,s:I}", "algorithm", algo_def(l->algo)->name, "limit",
                              (json_int_t)l->limit, cc ? "lease_ms" : "window_ms",
                              (json_int_t)(cc ? l->window_ms : algo_window_ms(l, now)));
        /* what period, where */
        if (algo_has_period(l)) {
            json_object_set_new(e, "period", json_string(period_kind_name(l->period.kind)));
            json_object_set_new(e, "timezone", json_string(period_tz_name(l->period.tz)));
            if (l->period.kind == RL_PERIOD_WEEK)
                json_object_set_new(e, "week_start",
                                    json_string(period_week_start_name(l->period.week_start)));
        }
        json_object_set_new(e, "remaining", json_integer(res->limits[i].remaining));
        json_object_set_new(e, "reset_ms", json_integer(res->limits[i].reset_ms));
        if (algo_def(l->algo)->uses_burst)
            json_object_set_new(e, "burst", json_integer(l->burst));
        /* units past the limit (a charge's, a settle's, a penalty's) */
        if (res->limits[i].overdraft > 0)
            json_object_set_new(e, "overdraft", json_integer(res->limits[i].overdraft));
        /* the slots held now: by leases not released and not ended */
        if (cc)
            json_object_set_new(e, "held", json_integer(l->limit - res->limits[i].remaining));
        json_array_append_new(limits, e);
    }
    o = json_pack("{s:s,s:s,s:s%,s:s,s:I,s:o}", "action",
                  metrics_admin_action_name(op->action), "policy", op->policy->name,
                  "identity", op->id, op->idlen, "key", op->key, "blocked_ms",
                  (json_int_t)(res->blocked_ms > 0 ? res->blocked_ms : 0), "limits", limits);
    if (o != NULL && (op->req.flags & RL_CHECK_RSV_LIST))
        answer_reservations(o, res);
    s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static void
on_answer(const struct rl_check_res *res, void *arg)
{
    struct admin_op *op = arg;
    struct rl_worker *w = op->w;
    struct http_response resp = {.status = 200};
    char *s = NULL;

    if (res->status != RL_BACKEND_OK) {
        /* a timeout means it never reached the backend; a lost connection
         * leaves it unknown */
        char *msg = xasprintf("backend: %s%s", res->error != NULL ? res->error : "unavailable",
                              res->status == RL_BACKEND_TIMEOUT ? " (not applied)"
                              : op->action == RL_ADM_INSPECT
                                  ? ""
                                  : " (inspect to see whether it was applied)");
        admin_refuse(op, 503, NULL, msg);
        free(msg);
        goto out;
    }
    /* whatever this daemon remembers of the old state is void now */
    if (op->action != RL_ADM_INSPECT)
        worker_admin_done(w, op->cfg, &op->req, op->sent_us, res);
    if ((s = answer_json(op, res)) == NULL) {
        admin_refuse(op, 500, NULL, "done, but the answer could not be written");
        goto out;
    }
    resp.body = s;
    resp.body_len = strlen(s);
    audit(op, RL_ADM_OK, 200); /* before the answer, as admin_refuse */
    http_respond(op->r, &resp);
    free(s);
out:
    admin_op_free(op);
    worker_check_done(w);
}

/* The action the path names, if any. */
static bool
route(const struct http_head *h, enum rl_admin_action *out)
{
    for (int a = 0; a < RL_ADM_ACTION_COUNT; a++) {
        if (h->path_len == strlen(paths[a]) && memcmp(h->path, paths[a], h->path_len) == 0) {
            *out = (enum rl_admin_action)a;
            return true;
        }
    }
    return false;
}

void
admin_handle(struct http_req *r, void *arg)
{
    struct rl_worker *w = arg;
    enum rl_admin_action action;
    struct admin_op *op;
    char *cause = NULL;

    if (admin_view_handle(r, w, authorized(worker_config(w), r->head)))
        return;
    if (!route(r->head, &action)) {
        http_respond_error(r, 404, NULL,
                           "no such path: use POST /admin/inspect, /admin/reset, "
                           "/admin/block, /admin/unblock, /admin/reward or /admin/penalty; "
                           "GET /admin/top, /admin/status or /admin/ui");
        return;
    }
    op = xcalloc(1, sizeof(*op));
    op->r = r;
    op->w = w;
    op->cfg = config_ref(worker_config(w));
    op->action = action;
    op->req.timeout_ms = op->cfg->redis.timeout_ms;
    admin_peer_text(r, op->peer, sizeof(op->peer));
    if (r->head->method != HTTP_M_POST) {
        admin_refuse(op, 405, "Allow: POST\r\n", "method not allowed");
    } else if (cross_origin(r->head)) {
        admin_refuse(op, 403, NULL, "origin: a request from a page of another origin");
    } else if (!authorized(op->cfg, r->head)) {
        admin_refuse(op, 401, "WWW-Authenticate: Bearer realm=\"ratelimitd-admin\"\r\n",
                     "authorization: a valid \"Bearer\" token is required");
    } else if (worker_draining(w)) {
        admin_refuse(op, 503, NULL, "shutting down");
    } else if ((int64_t)r->body_len > op->cfg->max_body) {
        admin_refuse(op, 413, NULL, "body: larger than max_body");
    } else if (parse_body(r->body, r->body_len, op, &cause) != RL_OK) {
        admin_refuse(op, 400, NULL, cause);
        free(cause);
    } else {
        op->req.policy = op->policy;
        /* the answer must say whether the action ran: once sent, only the
         * reply (or the connection's loss) answers it, never a timer */
        op->req.flags |= RL_CHECK_SETTLE;
        op->sent_us = now_monotonic_us();
        worker_check_begin(w);
        struct rl_backend *b = worker_backend(w);
        b->ops->check(b, &op->req, on_answer, op);
        return;
    }
    admin_op_free(op);
}
