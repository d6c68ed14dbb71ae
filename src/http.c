/* http.c — see http.h. */
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <sys/queue.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <jansson.h>

#include "daemon.h"
#include "http.h"
#include "log.h"
#include "util.h"

#define ALL_METHODS (EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | \
                     EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | \
                     EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH)
#define IDLE_TIMEOUT_S 60
#define MAX_HEADERS_SIZE (16 * 1024)

/* A check between its request and its answer. */
struct http_check {
    struct evhttp_request *req;
    struct rl_worker *w;
    int64_t start_us;               /* access log only: 0 when not logged */
};

/* One line per sampled check: what was decided, never who by key (a key
 * may be a secret); the peer address is the connection's, not the caller's. */
static void
access_log(const struct http_check *hc, const struct rl_decision *d)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(hc->req);
    char *peer = NULL;
    ev_uint16_t port = 0;

    if (evcon != NULL)
        evhttp_connection_get_peer(evcon, &peer, &port);
    log_info("msg=check worker=%d status=%d policy=%s allowed=%d remaining=%lld "
             "retry_after_ms=%lld degraded=%d shadow=%d peer=%s us=%lld",
             hc->w->id, d->status, d->policy ? d->policy->name : "-", d->allowed,
             (long long)d->remaining, (long long)d->retry_after_ms, d->degraded,
             d->shadow, peer ? peer : "-", (long long)(now_monotonic_us() - hc->start_us));
}

static void
send_json(struct evhttp_request *req, int code, const char *reason,
          const char *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    evhttp_add_header(h, "Content-Type", "application/json");
    evbuffer_add(evhttp_request_get_output_buffer(req), body, len);
    evhttp_send_reply(req, code, reason, NULL);
}

static const char *
reason_of(int code)
{
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* {"error": msg} with msg escaped: it may quote what the caller sent. */
static void
send_error(struct evhttp_request *req, int code, const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

    if (s != NULL)
        send_json(req, code, reason_of(code), s, strlen(s));
    else
        send_json(req, code, reason_of(code), "{\"error\":\"internal error\"}", 27);
    free(s);
    json_decref(o);
}

static void
send_405(struct evhttp_request *req, struct rl_worker *w, const char *allow)
{
    metrics_reject(w->metrics, RL_REJ_METHOD);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    send_error(req, 405, "method not allowed");
}

static void
add_header(const char *name, const char *value, void *arg)
{
    evhttp_add_header(arg, name, value);
}

static void
on_check_done(const struct rl_decision *d, void *arg)
{
    struct http_check *hc = arg;
    struct evhttp_request *req = hc->req;
    struct rl_worker *w = hc->w;
    char body[2048];
    size_t n;

    if (hc->start_us != 0)
        access_log(hc, d);
    if (d->status == 503) {
        send_error(req, 503, "backend unavailable");
    } else {
        response_headers(d, add_header, evhttp_request_get_output_headers(req));
        n = response_body(d, body, sizeof(body));
        send_json(req, d->status, reason_of(d->status), body, n);
    }
    free(hc);
    worker_check_done(w);
}

static const char *
find_header(void *hctx, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(hctx), name);
}

static size_t
join_headers(void *hctx, const char *name, char *buf, size_t size)
{
    struct evkeyvalq *hs = evhttp_request_get_input_headers(hctx);
    struct evkeyval *kv;
    size_t o = 0;

    TAILQ_FOREACH(kv, hs, next) {
        if (strcasecmp(kv->key, name) != 0)
            continue;
        size_t n = strlen(kv->value);
        if (o + n + 2 > size)
            return size;        /* does not fit: say so, never truncate */
        if (o > 0)
            buf[o++] = ',';
        memcpy(buf + o, kv->value, n);
        o += n;
        buf[o] = '\0';
    }
    return o;
}

static void
peer_of(struct evhttp_request *req, struct rl_ident_input *in)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    const struct sockaddr *sa = evcon ? evhttp_connection_get_addr(evcon) : NULL;

    in->peer_family = 0;
    if (sa == NULL)
        return;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;
        in->peer_family = AF_INET;
        memcpy(in->peer_addr, &sin->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;
        const uint8_t *a = sin6->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0,0,0,0,0,0,0,0,0,0,0xff,0xff};
        if (memcmp(a, mapped, 12) == 0) {
            in->peer_family = AF_INET;
            memcpy(in->peer_addr, a + 12, 4);
        } else {
            in->peer_family = AF_INET6;
            memcpy(in->peer_addr, a, 16);
        }
    }
}

static const char *
method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return NULL;
    }
}

/*
 * POST /check with a JSON body is the API.  With forward_auth on, a gateway's
 * own request is a check too (Traefik ForwardAuth, Envoy ext_authz): any
 * method, no body, the original request in its headers, or in the path after
 * /check/ and the method itself.
 */
static void
handle_check(struct evhttp_request *req, struct rl_worker *w, const char *path,
             int forward)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    struct rl_config *cfg;
    struct rl_check_input ci;
    struct http_check *hc;
    char *error = NULL;
    int status;

    if (w->draining) {
        metrics_reject(w->metrics, RL_REJ_DRAINING);
        send_error(req, 503, "shutting down");
        return;
    }
    cfg = daemon_config();
    if ((int64_t)len > cfg->max_body) {
        metrics_reject(w->metrics, RL_REJ_TOO_LARGE);
        send_error(req, 413, "body: larger than max_body");
        config_unref(cfg);
        return;
    }
    /* A backend that slows down must not grow a queue without bound: past
     * the cap, answer at once and let the caller decide. */
    if ((int64_t)__atomic_load_n(&w->metrics->inflight, __ATOMIC_RELAXED) >=
        cfg->max_inflight) {
        metrics_reject(w->metrics, RL_REJ_OVERLOADED);
        send_error(req, 503, "overloaded: too many checks in flight");
        config_unref(cfg);
        return;
    }
    memset(&ci, 0, sizeof(ci));
    if (forward) {
        /* the gateway's body is its client's: never ours to parse */
        len = 0;
        if (path[6] == '/') {
            ci.path = path + 6;
            ci.path_len = strlen(ci.path);
        }
        ci.method = method_name(evhttp_request_get_command(req));
    }
    ci.body = len ? (const char *)evbuffer_pullup(in, -1) : NULL;
    ci.body_len = len;
    ci.ident.header = find_header;
    ci.ident.header_all = join_headers;
    ci.ident.hctx = req;
    peer_of(req, &ci.ident);

    hc = xmalloc(sizeof(*hc));
    hc->req = req;
    hc->w = w;
    hc->start_us = cfg->access_log > 0 && ++w->access_seq % (uint64_t)cfg->access_log == 0
                   ? now_monotonic_us() : 0;
    worker_check_begin(w);
    if (check_start(&w->env, cfg, &ci, on_check_done, hc, &status, &error) != RL_OK) {
        metrics_reject(w->metrics, RL_REJ_BAD_REQUEST);
        send_error(req, status, error);
        free(error);
        free(hc);
        worker_check_done(w);
    }
    config_unref(cfg);
}

static void
handle_readyz(struct evhttp_request *req, struct rl_worker *w)
{
    int which;
    const char *reason = worker_readiness(w, &which);
    char body[256];
    json_t *o;
    char *s;

    if (reason == NULL) {
        send_json(req, 200, "OK", "{\"status\":\"ready\"}", 18);
        return;
    }
    o = json_pack("{s:s,s:s,s:i}", "status", "not ready", "reason", reason, "worker", which);
    s = json_dumps(o, JSON_COMPACT);
    snprintf(body, sizeof(body), "%s", s ? s : "{\"status\":\"not ready\"}");
    send_json(req, 503, reason_of(503), body, strlen(body));
    free(s);
    json_decref(o);
}

static void
handle_metrics(struct evhttp_request *req, struct rl_worker *w)
{
    struct evbuffer *out = evhttp_request_get_output_buffer(req);

    daemon_metrics(out);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, 200, "OK", NULL);
    (void)w;
}

/*
 * Framing that two parsers could read two ways is refused and the connection
 * closed (RFC 9112 6.1, 6.3): behind a proxy, the bytes after an ambiguous
 * body would otherwise be read as a request the proxy never saw.  NULL when
 * the request is sound.
 */
static const char *
bad_framing(struct evhttp_request *req)
{
    struct evkeyvalq *hs = evhttp_request_get_input_headers(req);
    struct evkeyval *kv;
    const char *cl = NULL, *te = NULL;

    TAILQ_FOREACH(kv, hs, next) {
        if (strcasecmp(kv->key, "Content-Length") == 0) {
            if (cl != NULL && strcmp(cl, kv->value) != 0)
                return "conflicting Content-Length headers";
            cl = kv->value;
        } else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
            if (te != NULL || strcasecmp(kv->value, "chunked") != 0)
                return "unsupported Transfer-Encoding";
            te = kv->value;
        }
    }
    if (cl != NULL && te != NULL)
        return "both Content-Length and Transfer-Encoding";
    /* libevent 2.1 has no accessor for the version: http_struct.h it is */
    if (req->major == 1 && req->minor >= 1 && evhttp_find_header(hs, "Host") == NULL)
        return "HTTP/1.1 request without Host";
    return NULL;
}

static int
forward_auth_on(void)
{
    struct rl_config *cfg = daemon_config();
    int on = cfg->forward_auth;

    config_unref(cfg);
    return on;
}

static void
route(struct evhttp_request *req, void *arg)
{
    struct rl_worker *w = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    int get = m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;

    if (path == NULL)
        path = "";
    const char *framing = bad_framing(req);
    if (framing != NULL) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        metrics_reject(w->metrics, RL_REJ_BAD_REQUEST);
        send_error(req, 400, framing);
        return;
    }
    if (strcmp(path, "/check") == 0 && m == EVHTTP_REQ_POST) {
        handle_check(req, w, path, 0);
    } else if (strncmp(path, "/check", 6) == 0 && (path[6] == '\0' || path[6] == '/') &&
               forward_auth_on()) {
        handle_check(req, w, path, 1);
    } else if (strcmp(path, "/check") == 0) {
        send_405(req, w, "POST");
    } else if (strcmp(path, "/healthz") == 0) {
        if (get)
            send_json(req, 200, "OK", "{\"status\":\"ok\"}", 15);
        else
            send_405(req, w, "GET, HEAD");
    } else if (strcmp(path, "/readyz") == 0) {
        if (get)
            handle_readyz(req, w);
        else
            send_405(req, w, "GET, HEAD");
    } else if (strcmp(path, "/metrics") == 0) {
        if (get)
            handle_metrics(req, w);
        else
            send_405(req, w, "GET, HEAD");
    } else {
        metrics_reject(w->metrics, RL_REJ_NOT_FOUND);
        send_error(req, 404, "no such path: use POST /check, GET /healthz, "
                   "GET /readyz or GET /metrics");
    }
}

static void
on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    evconnlistener_enable(arg);
    (void)fd;
    (void)what;
}

/* Out of file descriptors: pause accepting for a moment rather than spin on
 * a listener that stays readable (tmux server_accept does the same). */
static void
on_accept_error(struct evconnlistener *lev, void *arg)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = {0, 100 * 1000};

    log_warn("msg=\"accept failed, pausing 100ms\" error=\"%s\"",
             evutil_socket_error_to_string(err));
    evconnlistener_disable(lev);
    event_base_once(evconnlistener_get_base(lev), -1, EV_TIMEOUT,
                    on_accept_resume, lev, &tv);
    (void)arg;
}

int
http_init(struct rl_worker *w, struct rl_config *cfg, char **cause)
{
    struct evconnlistener *lev;
    int64_t cap;

    w->http = evhttp_new(w->base);
    if (w->http == NULL) {
        *cause = xstrdup("evhttp_new failed");
        return RL_ERR;
    }
    evhttp_set_allowed_methods(w->http, ALL_METHODS);
    evhttp_set_timeout(w->http, IDLE_TIMEOUT_S);
    evhttp_set_max_headers_size(w->http, MAX_HEADERS_SIZE);
    /* Bodies up to a few times max_body are read and refused with a JSON
     * 413 on a live connection; beyond that evhttp refuses them itself and
     * closes, so a client cannot make us buffer an unbounded body. */
    cap = cfg->max_body * 4 < 1024 * 1024 ? 1024 * 1024 : cfg->max_body * 4;
    evhttp_set_max_body_size(w->http, cap);
    evhttp_set_gencb(w->http, route, w);

    lev = evconnlistener_new(w->base, NULL, NULL,
                             LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
                             w->listen_fd);
    if (lev == NULL) {
        *cause = xstrdup("cannot listen on the socket");
        return RL_ERR;
    }
    w->listen_fd = -1;      /* the listener owns it now */
    evconnlistener_set_error_cb(lev, on_accept_error);
    w->bound = evhttp_bind_listener(w->http, lev);
    if (w->bound == NULL) {
        evconnlistener_free(lev);
        *cause = xstrdup("evhttp_bind_listener failed");
        return RL_ERR;
    }
    return RL_OK;
}

void
http_stop_accepting(struct rl_worker *w)
{
    if (w->bound != NULL) {
        evhttp_del_accept_socket(w->http, w->bound);
        w->bound = NULL;
    }
}
