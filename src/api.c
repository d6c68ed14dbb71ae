/* api.c — see api.h. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "api.h"
#include "check.h"
#include "config.h"
#include "http.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "response.h"
#include "rls.h"
#include "rls_json.h"
#include "util.h"
#include "worker.h"

/* 8 limits of a period in a zone of 64 bytes: ~2.7 KiB; and a lease */
#define BODY_MAX (4096 + RL_LEASE_ID_MAX + RL_RSV_ID_MAX)

/* On every 503 of ours: the backend reconnects within a second or so, a
 * drain sends the caller elsewhere. */
#define RETRY_AFTER_503 "Retry-After: 1\r\n"

/* http_req.flags: answer with status and headers only (auth subrequests). */
#define API_NO_BODY 0x1u

static void
respond(struct http_req *r, int status, const char *headers, size_t hlen, const char *body,
        size_t blen)
{
    http_respond(r, &(const struct http_response){.status = status,
                                                  .headers = headers,
                                                  .headers_len = hlen,
                                                  .body = body,
                                                  .body_len = blen});
}

static void
respond_405(struct http_req *r, struct rl_worker *w, const char *allow)
{
    metrics_reject(worker_counters(w), RL_REJ_METHOD);
    http_respond_error(r, 405, allow, "method not allowed");
}

/* One line per sampled check: what was decided, never who by key (a key
 * may be a secret); the peer address is the connection's, not the caller's. */
static void
access_log(const struct http_req *r, const struct rl_worker *w, const struct rl_decision *d)
{
    char peer[INET6_ADDRSTRLEN];

    http_req_peer_text(r, peer, sizeof(peer));
    log_info(LOG_MSG("check"), LOG_I("worker", worker_id(w)), LOG_I("status", d->status),
             LOG_S("policy", d->policy ? d->policy->name : "-"), LOG_I("allowed", d->allowed),
             LOG_I("remaining", d->remaining), LOG_I("retry_after_ms", d->retry_after_ms),
             LOG_I("degraded", d->degraded), LOG_I("shadow", d->shadow), LOG_S("peer", peer),
             LOG_I("us", (now_monotonic_us() - r->start_us)));
}

static void
on_check_done(const struct rl_decision *d, void *arg)
{
    struct http_req *r = arg;
    struct rl_worker *w = http_req_arg(r);
    char headers[RESPONSE_HEADERS_MAX], body[BODY_MAX];
    struct strbuf sb;
    size_t n;

    if (r->start_us != 0)
        access_log(r, w, d);
    metrics_check_duration(worker_counters(w), now_monotonic_us() - r->first_us);
    sb_init(&sb, headers, sizeof(headers));
    response_header_lines(d, &sb);
    /* nginx and Caddy keep an auth subrequest's connection only when
     * its answer has no body: there, status and headers say it all */
    n = r->flags & API_NO_BODY ? 0 : response_body(d, body, sizeof(body));
    /* a reservation (max_delay): the same answer, when it comes due */
    if (d->delayed_ms > 0) {
        worker_hold(w, r, d->status, headers, sb_ok(&sb) ? sb.len : 0, body, n, d->delayed_ms);
        return;
    }
    respond(r, d->status, headers, sb_ok(&sb) ? sb.len : 0, body, n);
    worker_check_done(w);
}

static const char *
find_header(void *hctx, const char *name)
{
    const struct http_header *h = http_head_find(hctx, name);

    return h != NULL ? h->value : NULL;
}

/* identity.c reads every line of a header the HTTP layer keeps */
_Static_assert(HTTP_HEADERS_MAX <= RL_HEADER_LINES_MAX, "header lines identity.c may miss");

static size_t
header_lines(void *hctx, const char *name, const char **vals, size_t *lens, size_t max)
{
    const struct http_head *head = hctx;
    size_t n = 0;

    for (size_t i = 0; i < head->nheaders; i++) {
        const struct http_header *h = &head->headers[i];
        if (strcasecmp(h->name, name) != 0)
            continue;
        if (n < max) {
            vals[n] = h->value;
            lens[n] = h->value_len;
        }
        n++;
    }
    return n;
}

static void
peer_of(const struct http_req *r, struct rl_ident_input *in)
{
    const struct sockaddr_storage *ss = http_req_peer(r);

    in->peer_family = 0;
    if (ss == NULL)
        return;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)ss;
        in->peer_family = AF_INET;
        memcpy(in->peer_addr, &sin->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)ss;
        const uint8_t *a = sin6->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0) {
            in->peer_family = AF_INET;
            memcpy(in->peer_addr, a + 12, 4);
        } else {
            in->peer_family = AF_INET6;
            memcpy(in->peer_addr, a, 16);
        }
    }
}

/* Is `param` ("name=value") one of the target's query parameters? */
static bool
query_has(const struct http_head *h, const char *param)
{
    const char *q = h->path + h->path_len, *end = h->target + h->target_len;
    size_t n = strlen(param);

    if (q >= end || *q != '?')
        return false;
    for (q++; q < end;) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *e = amp != NULL ? amp : end;
        if ((size_t)(e - q) == n && memcmp(q, param, n) == 0)
            return true;
        q = e + 1;
    }
    return false;
}

/* Whether a request that asks the backend may start now; else it is
 * answered. */
static int
admit(struct http_req *r, struct rl_worker *w)
{
    /* Draining: a check already sent (in the kernel's buffer, maybe) is
     * decided like any other, the backend is still there; its answer says
     * close (http.c), so the client takes its next one elsewhere. */
    if ((int64_t)r->body_len > worker_config(w)->max_body) { /* chunked bodies end here */
        metrics_reject(worker_counters(w), RL_REJ_TOO_LARGE);
        http_respond_error(r, 413, NULL, "body: larger than max_body");
        return 0;
    }
    if (!worker_admit(w)) {
        http_respond_error(r, 503, NULL, "overloaded: too many checks in flight");
        return 0;
    }
    return 1;
}

/*
 * POST /check with a JSON body is the API.  With forward_auth on, a gateway's
 * own request is a check too (Traefik ForwardAuth, Envoy ext_authz): any
 * method, no body, the original request in its headers, or in the path after
 * /check/ and the method itself.  POST /charge (charge) takes the same body
 * and counts its cost, never denied (check.h).
 */
static void
handle_check(struct http_req *r, struct rl_worker *w, int forward, bool charge)
{
    struct rl_config *cfg = worker_config(w);
    const struct http_head *h = r->head;
    struct rl_check_input ci;
    char *cause = NULL;
    int status;

    if (!admit(r, w))
        return;
    memset(&ci, 0, sizeof(ci));
    ci.body = r->body_len ? r->body : NULL;
    ci.body_len = r->body_len;
    ci.charge = charge;
    if (query_has(h, "body=none"))
        r->flags |= API_NO_BODY;
    if (forward) {
        /* the gateway's body is its client's: never ours to parse */
        ci.body = NULL;
        ci.body_len = 0;
        if (h->path_len > 6) { /* "/check/<the original path>" */
            ci.path = h->path + 6;
            ci.path_len = h->path_len - 6;
        }
        ci.method = http_method_name(h->method);
    }
    ci.ident.header = find_header;
    ci.ident.header_lines = header_lines;
    ci.ident.hctx = (void *)(uintptr_t)h;
    peer_of(r, &ci.ident);

    r->start_us = worker_access_sampled(w) ? now_monotonic_us() : 0;
    worker_check_begin(w);
    if (check_start(worker_env(w), cfg, &ci, on_check_done, r, &status, &cause) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        http_respond_error(r, status, NULL, cause);
        free(cause);
        worker_check_done(w);
    }
}

/* {"status":..., ["degraded":true, "failure_mode":...,] "reason":..., "worker":N} */
static void
respond_status(struct http_req *r, int status, json_t *o, const char *fallback)
{
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    const char *extra = status == 503 ? RETRY_AFTER_503 : NULL;
    size_t elen = extra != NULL ? strlen(extra) : 0;

    if (s != NULL)
        respond(r, status, extra, elen, s, strlen(s));
    else
        respond(r, status, extra, elen, fallback, strlen(fallback));
    free(s);
    json_decref(o);
}

static void
on_release_done(int status, bool released, void *arg)
{
    struct http_req *r = arg;
    struct rl_worker *w = http_req_arg(r);

    if (status != 200)
        http_respond_error(r, 503, NULL, "backend unavailable");
    else if (released)
        respond(r, 200, NULL, 0, "{\"released\":true}", 17);
    else
        respond(r, 200, NULL, 0, "{\"released\":false}", 18);
    worker_check_done(w);
}

/* POST /settle: a reservation settled at its real cost (check.h), answered
 * as a check is. */
static void
handle_settle(struct http_req *r, struct rl_worker *w)
{
    char *error = NULL;

    if (!admit(r, w))
        return;
    r->start_us = 0;
    worker_check_begin(w);
    if (check_settle(worker_env(w), worker_config(w), r->body_len ? r->body : NULL,
                     r->body_len, on_check_done, r, &error) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        http_respond_error(r, 400, NULL, error);
        free(error);
        worker_check_done(w);
    }
}

/* POST /release: a lease's slot back (check.h). */
static void
handle_release(struct http_req *r, struct rl_worker *w)
{
    char *error = NULL;

    if (!admit(r, w))
        return;
    worker_check_begin(w);
    if (check_release(worker_env(w), worker_config(w), r->body_len ? r->body : NULL,
                      r->body_len, on_release_done, r, &error) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        http_respond_error(r, 400, NULL, error);
        free(error);
        worker_check_done(w);
    }
}

static void
on_json_done(const struct rls_response *resp, void *arg)
{
    struct http_req *r = arg;
    struct rl_worker *w = http_req_arg(r);
    size_t n;
    char *body;

    if (resp->grpc_status != 0) {
        http_respond_error(r, 503, NULL, "backend unavailable");
    } else {
        body = rls_json_encode(resp, &n);
        respond(r, resp->overall_code == RLS_CODE_OVER_LIMIT ? 429 : 200, NULL, 0, body, n);
        free(body);
    }
    worker_check_done(w);
}

/*
 * POST /json: envoyproxy/ratelimit's HTTP form of ShouldRateLimit, a
 * RateLimitRequest in protojson (rls_json.h); 200 OK, 429 OVER_LIMIT, 400 a
 * bad request, 503 failure_mode closed without a backend.
 */
static void
handle_json(struct http_req *r, struct rl_worker *w)
{
    struct rl_config *cfg = worker_config(w);
    struct rls_json_request jr;
    char *error = NULL;

    if (!admit(r, w))
        return;
    if (cfg->rls.rules_missing) { /* rls.start_without_rules: as envoyproxy/ratelimit */
        http_respond_error(r, 500, NULL, RL_RLS_NO_RULES);
        return;
    }
    if (rls_json_decode(r->body, r->body_len, &jr, &error) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        http_respond_error(r, 400, NULL, error);
        free(error);
        rls_json_request_free(&jr);
        return;
    }
    worker_check_begin(w);
    if (rls_start(worker_env(w), cfg, jr.req, on_json_done, r, &error) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        http_respond_error(r, 400, NULL, error);
        free(error);
        worker_check_done(w);
    }
    rls_json_request_free(&jr);
}

static void
handle_readyz(struct http_req *r, struct rl_worker *w)
{
    int which;
    const char *reason = worker_readiness(w, &which);

    if (reason == NULL) {
        respond(r, 200, NULL, 0, "{\"status\":\"ready\"}", 18);
        return;
    }
    respond_status(
        r, 503,
        json_pack("{s:s,s:s,s:i}", "status", "not ready", "reason", reason, "worker", which),
        "{\"status\":\"not ready\"}");
}

/* Readiness for a sidecar: can checks be answered as configured? */
static void
handle_serving(struct http_req *r, struct rl_worker *w)
{
    const char *reason;
    int which;

    if (!worker_serving(w, &reason, &which)) {
        respond_status(r, 503,
                       json_pack("{s:s,s:s,s:i}", "status", "not serving", "reason", reason,
                                 "worker", which),
                       "{\"status\":\"not serving\"}");
    } else if (reason != NULL) {
        respond_status(r, 200,
                       json_pack("{s:s,s:b,s:s,s:s,s:i}", "status", "serving", "degraded", 1,
                                 "failure_mode",
                                 config_failure_mode_name(worker_config(w)->failure_mode),
                                 "reason", reason, "worker", which),
                       "{\"status\":\"serving\",\"degraded\":true}");
    } else {
        respond(r, 200, NULL, 0, "{\"status\":\"serving\"}", 20);
    }
}

/*
 * envoyproxy/ratelimit's health route, which Envoy Gateway's probes read:
 * 200 "OK" while every check is answered as configured (the predicate of
 * GET /serving and gRPC Health/Check), else a 500 with no body, as it
 * answers after SIGTERM or without its Redis.
 */
static void
handle_healthcheck(struct http_req *r, struct rl_worker *w)
{
    const char *reason;

    if (worker_serving(w, &reason, NULL))
        http_respond(
            r, &(const struct http_response){
                   .status = 200, .content_type = "text/plain", .body = "OK", .body_len = 2});
    else
        http_respond(
            r, &(const struct http_response){.status = 500, .content_type = "text/plain"});
}

static void
handle_metrics(struct http_req *r, struct rl_worker *w)
{
    struct evbuffer *out = evbuffer_new();
    struct http_response resp = {
        .status = 200,
        .content_type = "text/plain; version=0.0.4; charset=utf-8",
    };

    worker_metrics(w, out);
    resp.body_len = evbuffer_get_length(out);
    resp.body = (const char *)evbuffer_pullup(out, -1);
    http_respond(r, &resp);
    evbuffer_free(out);
}

static bool
path_is(const struct http_head *h, const char *p, size_t n)
{
    return h->path_len == n && memcmp(h->path, p, n) == 0;
}

void
api_handle(struct http_req *r, void *arg)
{
    struct rl_worker *w = arg;
    const struct http_head *h = r->head;
    int get = h->method == HTTP_M_GET || h->method == HTTP_M_HEAD;
    int check_tree = h->path_len >= 6 && memcmp(h->path, "/check", 6) == 0 &&
                     (h->path_len == 6 || h->path[6] == '/');

    if (path_is(h, "/check", 6) && h->method == HTTP_M_POST) {
        handle_check(r, w, 0, false);
    } else if (check_tree && worker_config(w)->forward_auth) {
        handle_check(r, w, 1, false);
    } else if (path_is(h, "/check", 6)) {
        respond_405(r, w, "Allow: POST\r\n");
    } else if (path_is(h, "/charge", 7)) {
        if (h->method == HTTP_M_POST)
            handle_check(r, w, 0, true);
        else
            respond_405(r, w, "Allow: POST\r\n");
    } else if (path_is(h, "/settle", 7)) {
        if (h->method == HTTP_M_POST)
            handle_settle(r, w);
        else
            respond_405(r, w, "Allow: POST\r\n");
    } else if (path_is(h, "/release", 8)) {
        if (h->method == HTTP_M_POST)
            handle_release(r, w);
        else
            respond_405(r, w, "Allow: POST\r\n");
    } else if (path_is(h, "/json", 5)) {
        if (h->method == HTTP_M_POST)
            handle_json(r, w);
        else
            respond_405(r, w, "Allow: POST\r\n");
    } else if (path_is(h, "/healthz", 8)) {
        if (get)
            respond(r, 200, NULL, 0, "{\"status\":\"ok\"}", 15);
        else
            respond_405(r, w, "Allow: GET, HEAD\r\n");
    } else if (path_is(h, "/readyz", 7)) {
        if (get)
            handle_readyz(r, w);
        else
            respond_405(r, w, "Allow: GET, HEAD\r\n");
    } else if (path_is(h, "/serving", 8)) {
        if (get)
            handle_serving(r, w);
        else
            respond_405(r, w, "Allow: GET, HEAD\r\n");
    } else if (path_is(h, "/healthcheck", 12)) {
        if (get)
            handle_healthcheck(r, w);
        else
            respond_405(r, w, "Allow: GET, HEAD\r\n");
    } else if (path_is(h, "/metrics", 8)) {
        if (get)
            handle_metrics(r, w);
        else
            respond_405(r, w, "Allow: GET, HEAD\r\n");
    } else {
        metrics_reject(worker_counters(w), RL_REJ_NOT_FOUND);
        http_respond_error(
            r, 404, NULL,
            "no such path: use POST /check, POST /charge, POST /settle, POST /release, POST /json, "
            "GET /healthz, GET /readyz, GET /serving, GET /healthcheck or GET /metrics");
    }
}

void
api_metrics_handle(struct http_req *r, void *arg)
{
    struct rl_worker *w = arg;
    const struct http_head *h = r->head;

    if (!path_is(h, "/metrics", 8))
        http_respond_error(r, 404, NULL, "no such path: use GET /metrics");
    else if (h->method == HTTP_M_GET || h->method == HTTP_M_HEAD)
        handle_metrics(r, w);
    else
        http_respond_error(r, 405, "Allow: GET, HEAD\r\n", "use GET /metrics");
}
