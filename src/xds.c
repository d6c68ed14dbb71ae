/* xds.c — see xds.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "log.h"
#include "metrics.h"
#include "policy.h"
#include "redis_tls.h"
#include "rls_rules.h"
#include "tls.h"
#include "transport_conf.h"
#include "util.h"
#include "xds.h"
#include "xds_codec.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000

struct xds_client {
    struct event_base *base;
    char *server, *host, *port, *node_id;
    char *ca_file, *cert_file, *key_file, *server_name;
    int use_tls;
    size_t max_message;
    xds_rules_cb cb;
    void *arg;

    struct bufferevent *bev; /* NULL: not connected */
    nghttp2_session *h2;
    int32_t sid;
    struct evbuffer *out; /* requests waiting for the stream */
    struct evbuffer *in;  /* the stream's DATA not decoded yet */
    int grpc_status;      /* from the trailers; -1: none */
    char *grpc_message;
    char *version; /* the last accepted; NULL: none yet */
    int64_t backoff_ms;
    struct event *retry; /* the next connection */
    struct event *down;  /* the session torn down, out of its callbacks */
    int failing;         /* down is pending */
};

/* ---- requests ---------------------------------------------------------------- */

static void fail(struct xds_client *c, const char *what, const char *detail);

static void
flush(struct xds_client *c)
{
    if (c->h2 == NULL || c->failing)
        return;
    if (nghttp2_session_send(c->h2) != 0)
        fail(c, "HTTP/2 session failed", NULL);
    else if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        fail(c, "HTTP/2 session ended", NULL);
}

/* A DiscoveryRequest onto the stream: error NULL asks (or ACKs nonce). */
static void
send_request(struct xds_client *c, const char *nonce, const char *error)
{
    size_t len;
    uint8_t *msg = xds_request_encode(c->node_id, c->version, nonce, error, &len);

    evbuffer_add(c->out, msg, len);
    free(msg);
    if (c->sid > 0)
        (void)nghttp2_session_resume_data(c->h2, c->sid);
}

static ssize_t
read_out(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
         nghttp2_data_source *src, void *arg)
{
    struct xds_client *c = arg;
    int n = evbuffer_remove(c->out, buf, len);

    (void)h2;
    (void)sid;
    (void)flags;
    (void)src;
    if (n <= 0)
        return NGHTTP2_ERR_DEFERRED; /* the stream stays open: more will come */
    return n;
}

/* ---- responses ---------------------------------------------------------------- */

/* This thread's CPU time: what applying an update costs, whatever else
 * the machine runs. */
static int64_t
cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
on_response(struct xds_client *c, const uint8_t *msg, size_t len)
{
    struct xds_response r;
    char *cause = NULL;
    int64_t t0 = now_monotonic_us(), c0 = cpu_us();

    if (xds_response_decode(msg, len, policy_new_uid, &r, &cause) == RL_OK) {
        size_t nrules = r.rules->nrules, ndomains = r.rules->ndomains;
        /* what the set keeps: its arena and its domains (scripts/bench) */
        size_t bytes = r.rules->mem.total + ndomains * sizeof(*r.rules->domains);
        struct rls_rules *rules = r.rules;

        r.rules = NULL;
        free(c->version);
        c->version = xstrdup(r.version);
        c->cb(rules, r.version, c->arg);
        metrics_xds_update(1, r.version);
        /* apply_us: the message decoded, validated and swapped in, on
         * this loop (apply_cpu_us of it on this thread's CPU) */
        log_info(LOG_MSG("rules over xDS accepted"), LOG_S("server", c->server),
                 LOG_Q("version", r.version), LOG_U("resources", r.nresources),
                 LOG_U("domains", ndomains), LOG_U("rls_rules", nrules),
                 LOG_U("rules_bytes", bytes), LOG_I("apply_us", now_monotonic_us() - t0),
                 LOG_I("apply_cpu_us", cpu_us() - c0));
        send_request(c, r.nonce, NULL);
    } else if (r.nonce != NULL) {
        metrics_xds_update(0, NULL);
        log_warn(LOG_MSG("rules over xDS rejected, keeping the rules in force"),
                 LOG_S("server", c->server), LOG_Q("version", r.version),
                 LOG_Q("problem", cause));
        send_request(c, r.nonce, cause);
    } else {
        metrics_xds_update(0, NULL);
        fail(c, "the server sent no DiscoveryResponse", cause);
    }
    /* a response read: the stream works, the next loss starts over */
    c->backoff_ms = BACKOFF_MIN_MS;
    free(cause);
    xds_response_clear(&r);
}

/* The messages complete in c->in; a prefix past max_message ends the
 * stream, as a gRPC client's receive bound does. */
static void
take_messages(struct xds_client *c)
{
    while (!c->failing && evbuffer_get_length(c->in) >= 5) {
        uint8_t *h = evbuffer_pullup(c->in, 5);
        size_t len = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
        uint8_t *msg;

        if (h[0] != 0) {
            fail(c, "a compressed message (none was asked for)", NULL);
            return;
        }
        if (len > c->max_message) {
            metrics_xds_update(0, NULL);
            fail(c, "a DiscoveryResponse over rls.xds.max_message", NULL);
            return;
        }
        if (evbuffer_get_length(c->in) < 5 + len)
            return;
        evbuffer_drain(c->in, 5);
        msg = xmalloc(len ? len : 1);
        evbuffer_remove(c->in, msg, len);
        on_response(c, msg, len);
        free(msg);
    }
}

static int
on_data(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
        void *arg)
{
    struct xds_client *c = arg;

    (void)flags;
    if (sid != c->sid)
        return 0;
    (void)h2;
    /* nghttp2 returns the window as the bytes are received: a message is
     * bounded when its prefix is read (take_messages), the stream ended
     * past rls.xds.max_message */
    evbuffer_add(c->in, data, len);
    return 0;
}

static int
on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct xds_client *c = arg;

    (void)h2;
    (void)flags;
    if (f->hd.stream_id != c->sid)
        return 0;
    if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0)
        c->grpc_status = atoi((const char *)value);
    else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        free(c->grpc_message);
        c->grpc_message = xasprintf("%.*s", (int)(vlen > 512 ? 512 : vlen), value);
    }
    return 0;
}

static int
on_stream_close(nghttp2_session *h2, int32_t sid, uint32_t code, void *arg)
{
    struct xds_client *c = arg;
    char *why;

    (void)h2;
    if (sid != c->sid)
        return 0;
    why = xasprintf("grpc-status %d %s (HTTP/2 code %u)", c->grpc_status,
                    c->grpc_message != NULL ? c->grpc_message : "", code);
    fail(c, "the server ended the stream", why);
    free(why);
    return 0;
}

static ssize_t
send_bytes(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *arg)
{
    struct xds_client *c = arg;

    (void)h2;
    (void)flags;
    if (bufferevent_write(c->bev, data, len) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return (ssize_t)len;
}

/* ---- the connection ------------------------------------------------------------ */

static int
start_session(struct xds_client *c)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_settings_entry set[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
    };
    const char *scheme = c->use_tls ? "https" : "http";
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", scheme),
        NV(":authority", c->server),
        NV(":path", XDS_ADS_PATH),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
    };
#undef NV
    nghttp2_data_provider prd = {.read_callback = read_out};
    int rc;

    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return RL_ERR;
    nghttp2_session_callbacks_set_send_callback(cbs, send_bytes);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    rc = nghttp2_session_client_new(&c->h2, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return RL_ERR;
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, set, RL_ARRAY_LEN(set)) != 0 ||
        nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24) != 0)
        return RL_ERR;
    c->grpc_status = -1;
    send_request(c, NULL, NULL);
    c->sid = nghttp2_submit_request(c->h2, NULL, hdrs, RL_ARRAY_LEN(hdrs), &prd, c);
    return c->sid > 0 ? RL_OK : RL_ERR;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct xds_client *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    while (!c->failing && evbuffer_get_length(in) > 0) {
        size_t n = evbuffer_get_contiguous_space(in);
        ssize_t rc = nghttp2_session_mem_recv(c->h2, evbuffer_pullup(in, (ssize_t)n), n);

        if (rc < 0) {
            fail(c, "HTTP/2 from the server", nghttp2_strerror((int)rc));
            return;
        }
        evbuffer_drain(in, n);
        take_messages(c);
    }
    flush(c);
}

/* What OpenSSL said of a failed handshake, or the socket's error. */
static char *
conn_error(struct xds_client *c)
{
    unsigned long e = c->use_tls ? bufferevent_get_openssl_error(c->bev) : 0;
    char buf[256];

    if (e != 0) {
        ERR_error_string_n(e, buf, sizeof(buf));
        return xstrdup(buf);
    }
    return xstrdup(evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

static bool
alpn_h2(struct xds_client *c)
{
    const unsigned char *p = NULL;
    unsigned len = 0;

    SSL_get0_alpn_selected(bufferevent_openssl_get_ssl(c->bev), &p, &len);
    return len == 2 && memcmp(p, "h2", 2) == 0;
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct xds_client *c = arg;
    char *why;

    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        if (c->use_tls && !alpn_h2(c)) {
            fail(c, "the server did not agree on ALPN h2", NULL);
            return;
        }
        if (start_session(c) != RL_OK) {
            fail(c, "cannot start the HTTP/2 session", NULL);
            return;
        }
        metrics_xds_connected(1);
        log_info(LOG_MSG("xDS stream open"), LOG_S("server", c->server),
                 LOG_S("tls", c->use_tls ? "on" : "off"));
        flush(c);
        return;
    }
    why = (what & BEV_EVENT_EOF) ? xstrdup("the server closed the connection") : conn_error(c);
    fail(c, "the connection to the xDS server failed", why);
    free(why);
}

/* A fresh context per connection: the files are read again each time
 * (rotated in place). */
static SSL *
new_ssl(struct xds_client *c, char **cause)
{
    static const unsigned char alpn[] = {2, 'h', '2'};
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;

    if (ctx == NULL) {
        *cause = tls_cause(NULL, NULL, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (c->ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL) != 1
                           : SSL_CTX_set_default_verify_paths(ctx) != 1)
        *cause = tls_cause("rls.xds.tls.ca_file", c->ca_file, "cannot load");
    else if (c->cert_file != NULL &&
             tls_use_identity(ctx, c->cert_file, c->key_file, cause) != RL_OK)
        ;
    else if (SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn)) != 0 ||
             (ssl = SSL_new(ctx)) == NULL)
        *cause = tls_cause(NULL, NULL, "cannot start TLS");
    else if (!rtls_peer_name(ssl, c->server_name != NULL ? c->server_name : c->host, true)) {
        *cause = tls_cause(NULL, NULL, "cannot set the server's name");
        SSL_free(ssl);
        ssl = NULL;
    }
    SSL_CTX_free(ctx); /* the session holds it */
    return ssl;
}

static void
connect_now(struct xds_client *c)
{
    char *cause = NULL;

    c->failing = 0;
    if (c->use_tls) {
        SSL *ssl = new_ssl(c, &cause);
        if (ssl == NULL) {
            fail(c, "cannot start TLS to the xDS server", cause);
            free(cause);
            return;
        }
        c->bev = bufferevent_openssl_socket_new(c->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                BEV_OPT_CLOSE_ON_FREE);
    } else {
        c->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (c->bev == NULL) {
        fail(c, "cannot create a connection", NULL);
        return;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    /* a name is resolved here, blocking the main loop only (it serves no
     * checks) */
    if (bufferevent_socket_connect_hostname(c->bev, NULL, AF_UNSPEC, c->host, atoi(c->port)) !=
        0) {
        fail(c, "cannot connect to the xDS server", "the name does not resolve");
        return;
    }
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_now(arg);
}

/* The connection torn down out of the callbacks that found it broken, and
 * the next one timed: backoff_ms doubled each time, jittered to [½, 1] of
 * it so many daemons do not come back at once. */
static void
on_down(evutil_socket_t fd, short what, void *arg)
{
    struct xds_client *c = arg;
    int64_t delay = c->backoff_ms / 2 + (int64_t)(random() % (c->backoff_ms / 2 + 1));
    struct timeval tv = {(time_t)(delay / 1000), (suseconds_t)(delay % 1000) * 1000};

    (void)fd;
    (void)what;
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
    c->sid = 0;
    if (c->bev != NULL)
        bufferevent_free(c->bev);
    c->bev = NULL;
    evbuffer_drain(c->in, evbuffer_get_length(c->in));
    evbuffer_drain(c->out, evbuffer_get_length(c->out));
    free(c->grpc_message);
    c->grpc_message = NULL;
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    evtimer_add(c->retry, &tv);
}

static void
fail(struct xds_client *c, const char *what, const char *detail)
{
    if (c->failing)
        return;
    c->failing = 1;
    metrics_xds_connected(0);
    log_warn(LOG_MSG("xDS stream lost, keeping the rules in force"),
             LOG_S("server", c->server), LOG_S("problem", what),
             LOG_Q("detail", detail != NULL ? detail : ""));
    event_active(c->down, 0, 0);
}

int
xds_start(struct xds_client **out, struct event_base *base, const struct rl_rls_xds_conf *conf,
          xds_rules_cb cb, void *arg, char **cause)
{
    struct xds_client *c = xcalloc(1, sizeof(*c));
    const char *colon = strrchr(conf->server, ':');
    size_t hlen = (size_t)(colon - conf->server);

    c->base = base;
    c->server = xstrdup(conf->server);
    /* "[::1]:18001": the address without its brackets */
    if (conf->server[0] == '[' && hlen >= 2 && conf->server[hlen - 1] == ']')
        c->host = xasprintf("%.*s", (int)(hlen - 2), conf->server + 1);
    else
        c->host = xasprintf("%.*s", (int)hlen, conf->server);
    c->port = xstrdup(colon + 1);
    c->node_id = xstrdup(conf->node_id);
#define DUP(f) (conf->tls.f != NULL ? xstrdup(conf->tls.f) : NULL)
    c->ca_file = DUP(ca_file);
    c->cert_file = DUP(cert_file);
    c->key_file = DUP(key_file);
    c->server_name = DUP(server_name);
#undef DUP
    c->use_tls = c->ca_file != NULL || c->cert_file != NULL || c->server_name != NULL;
    c->max_message = (size_t)conf->max_message;
    c->cb = cb;
    c->arg = arg;
    c->in = evbuffer_new();
    c->out = evbuffer_new();
    c->retry = evtimer_new(base, on_retry, c);
    c->down = event_new(base, -1, 0, on_down, c);
    c->backoff_ms = BACKOFF_MIN_MS;
    *cause = NULL;
    metrics_xds_connected(0);
    *out = c;
    connect_now(c);
    return RL_OK;
}

void
xds_stop(struct xds_client *c)
{
    if (c == NULL)
        return;
    nghttp2_session_del(c->h2);
    if (c->bev != NULL)
        bufferevent_free(c->bev);
    event_free(c->retry);
    event_free(c->down);
    evbuffer_free(c->in);
    evbuffer_free(c->out);
    free(c->grpc_message);
    free(c->version);
    free(c->server);
    free(c->host);
    free(c->port);
    free(c->node_id);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->server_name);
    free(c);
}
