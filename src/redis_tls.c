/* redis_tls.c — see redis_tls.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/adapters/libevent.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "config.h"
#include "log.h"
#include "redis_tls.h"
#include "redis_url.h"
#include "util.h"

#define NAME_MAX_LEN 256
#define REASON_LEN 200

/*
 * The settings every new connection copies.  The SSL_CTX is reference
 * counted by OpenSSL: a connection being set up holds its own reference, so
 * a reload can drop the old context at once.
 */
static struct {
    pthread_mutex_t mu;
    int on;
    SSL_CTX *ctx;
    char name[NAME_MAX_LEN];    /* "" when verification is off */
    int name_is_ip;
    /* The failure logged since a connection last worked ("" when none): a
     * server refusing us for an hour writes one line, not one per retry. */
    char last_reason[REASON_LEN];
} g = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, "", 0, ""};

/* ---- settings --------------------------------------------------------------- */

static char *
ssl_cause(const char *what, const char *file)
{
    unsigned long e = ERR_peek_last_error();
    char buf[160] = "unknown error";

    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return file != NULL ? xasprintf("redis.tls: %s %s: %s", what, file, buf)
                        : xasprintf("redis.tls: %s: %s", what, buf);
}

static SSL_CTX *
make_ctx(const struct rl_tls_conf *t, char **cause)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL) {
        *cause = ssl_cause("cannot make a TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Sessions are not resumed: a connection lives for hours, and a cache
     * shared across threads would be one more lock on the connect path. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (t->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1) {
            *cause = ssl_cause("cannot load ca_file", t->ca_file);
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        *cause = ssl_cause("cannot load the system's certificate store", NULL);
        goto fail;
    }
    if (t->cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
            *cause = ssl_cause("cannot load cert_file", t->cert_file);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) != 1) {
            *cause = ssl_cause("cannot load key_file", t->key_file);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            *cause = ssl_cause("key_file does not match cert_file", t->key_file);
            goto fail;
        }
    }
    SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* The host the settings name by default: the URL's, or in Cluster and
 * Sentinel the first node's (the others are reached at addresses they
 * report, so they must carry the same name). */
static char *
default_name(const struct rl_redis_conf *r)
{
    const char *hp = r->cluster.n > 0 ? r->cluster.v[0]
                   : r->sentinel.master != NULL && r->sentinel.nodes.n > 0
                   ? r->sentinel.nodes.v[0] : NULL;
    struct rl_redis_url u;
    char *cause = NULL, *name = NULL;

    if (hp != NULL) {
        const char *colon = strrchr(hp, ':');
        size_t n = colon != NULL ? (size_t)(colon - hp) : strlen(hp);
        if (n >= 2 && hp[0] == '[' && hp[n - 1] == ']')
            return xstrndup(hp + 1, n - 2);
        return xstrndup(hp, n);
    }
    if (r->url == NULL || redis_url_parse(r->url, &u, &cause) != RL_OK) {
        free(cause);
        return NULL;
    }
    if (u.host != NULL)
        name = xstrdup(u.host);
    redis_url_clear(&u);
    return name;
}

int
rtls_configure(const struct rl_redis_conf *r, char **cause)
{
    const struct rl_tls_conf *t = &r->tls;
    int on = t->enabled || (r->url != NULL && strncmp(r->url, "rediss://", 9) == 0);
    SSL_CTX *ctx = NULL, *old;
    char *name = NULL;
    unsigned char ip[sizeof(struct in6_addr)];

    if (on) {
        name = t->server_name != NULL ? xstrdup(t->server_name) : default_name(r);
        if (t->verify && (name == NULL || strlen(name) >= NAME_MAX_LEN)) {
            *cause = xstrdup("redis.tls: no usable server_name to verify");
            free(name);
            return RL_ERR;
        }
        if ((ctx = make_ctx(t, cause)) == NULL) {
            free(name);
            return RL_ERR;
        }
        if (!t->verify)
            log_warn("msg=\"redis TLS certificate verification is off: anyone on the path "
                     "can read and change what ratelimitd and Redis say\"");
    }
    pthread_mutex_lock(&g.mu);
    old = g.ctx;
    g.ctx = ctx;
    g.on = on;
    snprintf(g.name, sizeof(g.name), "%s", t->verify && name != NULL ? name : "");
    g.name_is_ip = g.name[0] != '\0' && (inet_pton(AF_INET, g.name, ip) == 1 ||
                                         inet_pton(AF_INET6, g.name, ip) == 1);
    g.last_reason[0] = '\0';
    pthread_mutex_unlock(&g.mu);
    SSL_CTX_free(old);
    free(name);
    return RL_OK;
}

int
rtls_enabled(void)
{
    int on;

    pthread_mutex_lock(&g.mu);
    on = g.on;
    pthread_mutex_unlock(&g.mu);
    return on;
}

void
rtls_shutdown(void)
{
    pthread_mutex_lock(&g.mu);
    SSL_CTX_free(g.ctx);
    g.ctx = NULL;
    g.on = 0;
    pthread_mutex_unlock(&g.mu);
}

/* A failure of the TLS setup: the first since a connection last worked is
 * a warning, the retries after it debug lines. */
static void
report_failure(const char *peer, const char *reason)
{
    int fresh;

    pthread_mutex_lock(&g.mu);
    fresh = g.last_reason[0] == '\0';
    if (fresh)
        snprintf(g.last_reason, sizeof(g.last_reason), "%s", reason);
    pthread_mutex_unlock(&g.mu);
    if (fresh)
        log_warn("msg=\"redis TLS connection failed\" server=%s reason=\"%s\"", peer,
                 reason);
    else
        log_debug("msg=\"redis TLS connection failed\" server=%s reason=\"%s\"", peer,
                  reason);
}

static void
report_success(void)
{
    pthread_mutex_lock(&g.mu);
    g.last_reason[0] = '\0';
    pthread_mutex_unlock(&g.mu);
}

/* ---- the bridge ------------------------------------------------------------- */

/*
 * One per hiredis context.  It stands between hiredis and its libevent
 * adapter (ac->ev points here, and every hook is passed on), so that the
 * adapter's cleanup, which hiredis runs whenever it frees the context, frees
 * the bridge too: nothing else needs to know that a connection is TLS.
 */
struct bridge {
    struct bufferevent *plain;  /* our end of the socketpair */
    struct bufferevent *tls;    /* to the server */
    int handshake_done;
    int got_data;               /* the server answered: TLS works */
    char peer[INET6_ADDRSTRLEN + 8];
    void *inner;                /* the adapter's own state and hooks */
    void (*add_read)(void *);
    void (*del_read)(void *);
    void (*add_write)(void *);
    void (*del_write)(void *);
    void (*cleanup)(void *);
};

static void
close_plain_when_flushed(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;

    bufferevent_free(b->plain);
    b->plain = NULL;
}

/*
 * The TLS side is gone: hiredis reads what the server said last, then the
 * end of the stream, and reports a lost connection as it would for TCP.
 */
static void
drop_tls(struct bridge *b)
{
    if (b->tls != NULL) {
        bufferevent_free(b->tls);
        b->tls = NULL;
    }
    if (b->plain == NULL)
        return;
    if (evbuffer_get_length(bufferevent_get_output(b->plain)) == 0) {
        bufferevent_free(b->plain);
        b->plain = NULL;
        return;
    }
    bufferevent_disable(b->plain, EV_READ);
    bufferevent_setcb(b->plain, NULL, close_plain_when_flushed, NULL, b);
}

static void
on_plain_read(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;

    bufferevent_write_buffer(b->tls, bufferevent_get_input(bev));
}

static void
on_tls_read(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;

    if (!b->got_data) {
        b->got_data = 1;
        report_success();
    }
    bufferevent_write_buffer(b->plain, bufferevent_get_input(bev));
}

static void
on_plain_event(struct bufferevent *bev, short what, void *arg)
{
    struct bridge *b = arg;

    /* hiredis never half-closes; an end here means its socket is gone */
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        bufferevent_free(b->plain);
        b->plain = NULL;
        drop_tls(b);
    }
}

/* The server is not there (yet): not a TLS problem, the backend says so. */
static int
unreachable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH ||
           err == ENETUNREACH || err == EADDRNOTAVAIL;
}

/*
 * Why the TLS side ended, in words for the log; returns 1 when it is worth
 * a warning (the TLS setup itself failed), 0 when it is a connection lost
 * or refused that the backend reports anyway.
 */
static int
describe(struct bridge *b, short what, int sock_err, char *buf, size_t n)
{
    SSL *ssl = bufferevent_openssl_get_ssl(b->tls);
    long vr = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    unsigned long e, first = 0;
    const char *r;

    /* libevent queues SSL_get_error's small code first, then the library's */
    while ((e = bufferevent_get_openssl_error(b->tls)) != 0)
        if (first == 0 && ERR_GET_LIB(e) != 0)
            first = e;
    if (first != 0 && ERR_GET_LIB(first) == ERR_LIB_SYS) {
        sock_err = ERR_GET_REASON(first);
        first = 0;
    }
    if (vr != X509_V_OK) {
        snprintf(buf, n, "certificate verification failed: %s",
                 X509_verify_cert_error_string(vr));
    } else if (first != 0) {
        r = ERR_reason_error_string(first);
        snprintf(buf, n, "TLS error: %s", r != NULL ? r : "unknown");
    } else if (b->got_data) {
        snprintf(buf, n, "%s", sock_err != 0 && !(what & BEV_EVENT_EOF)
                 ? evutil_socket_error_to_string(sock_err)
                 : "the server closed the connection");
    } else if (b->handshake_done) {
        /* TLS 1.3 servers check a client certificate after the handshake */
        snprintf(buf, n, "the server closed the connection after the TLS handshake "
                 "(%s): does it require a client certificate (cert_file)?",
                 sock_err != 0 ? evutil_socket_error_to_string(sock_err) : "end of stream");
    } else if (sock_err != 0 && unreachable(sock_err)) {
        snprintf(buf, n, "%s", evutil_socket_error_to_string(sock_err));
    } else {
        snprintf(buf, n, "the server closed the connection during the TLS handshake (%s)",
                 sock_err != 0 ? evutil_socket_error_to_string(sock_err) : "end of stream");
    }
    return !b->got_data && (vr != X509_V_OK || first != 0 || b->handshake_done ||
                            !unreachable(sock_err));
}

static void
on_tls_event(struct bufferevent *bev, short what, void *arg)
{
    struct bridge *b = arg;
    int sock_err = EVUTIL_SOCKET_ERROR();
    char reason[REASON_LEN];

    if (what & BEV_EVENT_CONNECTED) {
        b->handshake_done = 1;
        log_debug("msg=\"redis TLS handshake done\" server=%s version=%s", b->peer,
                  SSL_get_version(bufferevent_openssl_get_ssl(bev)));
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    /* Before the first answer it is the TLS setup that failed; after it, a
     * lost connection that hiredis reports like any other. */
    if (describe(b, what, (what & BEV_EVENT_ERROR) ? sock_err : 0, reason, sizeof(reason)))
        report_failure(b->peer, reason);
    else
        log_debug("msg=\"redis TLS connection ended\" server=%s reason=\"%s\"", b->peer,
                  reason);
    drop_tls(b);
}

static void
hook_add_read(void *p)
{
    struct bridge *b = p;

    b->add_read(b->inner);
}

static void
hook_del_read(void *p)
{
    struct bridge *b = p;

    b->del_read(b->inner);
}

static void
hook_add_write(void *p)
{
    struct bridge *b = p;

    b->add_write(b->inner);
}

static void
hook_del_write(void *p)
{
    struct bridge *b = p;

    b->del_write(b->inner);
}

static void
hook_cleanup(void *p)
{
    struct bridge *b = p;

    if (b->cleanup != NULL)
        b->cleanup(b->inner);
    if (b->tls != NULL)
        bufferevent_free(b->tls);
    if (b->plain != NULL)
        bufferevent_free(b->plain);
    free(b);
}

/*
 * hiredis 0.14 opens its sockets itself and takes no descriptor: let it
 * connect to a listener of ours on loopback that lives only for this call,
 * then put the socketpair's end in place of its socket under the same
 * number.  Nothing ever reads that listener; the bytes flow only through
 * the socketpair.
 */
static redisAsyncContext *
hiredis_on_socket(int fd, const char **why)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    redisAsyncContext *ac = NULL;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&sin, &len) < 0) {
        log_debug("msg=\"redis TLS bridge: no loopback listener\" error=\"%s\"",
                  strerror(errno));
        *why = "cannot open the TLS bridge";
        goto out;
    }
    ac = redisAsyncConnect("127.0.0.1", ntohs(sin.sin_port));
    if (ac == NULL || ac->err || dup3(fd, ac->c.fd, O_CLOEXEC) < 0) {
        log_debug("msg=\"redis TLS bridge: cannot connect hiredis\" error=\"%s\"",
                  ac != NULL && ac->err ? ac->errstr : strerror(errno));
        if (ac != NULL)
            redisAsyncFree(ac);
        ac = NULL;
        *why = "cannot open the TLS bridge";
    }
out:
    if (lfd >= 0)
        close(lfd);
    return ac;
}

static int
peer_addr(const char *ip, int port, struct sockaddr_storage *ss, int *len)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *len = sizeof(*s4);
        return RL_OK;
    }
    if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*s6);
        return RL_OK;
    }
    return RL_ERR;
}

/* A client session under the current settings: its own reference to them. */
static SSL *
new_ssl(void)
{
    SSL *ssl = NULL;
    int ok = 1;

    pthread_mutex_lock(&g.mu);
    if (g.ctx != NULL && (ssl = SSL_new(g.ctx)) != NULL && g.name[0] != '\0') {
        if (g.name_is_ip) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), g.name) == 1;
        } else {
            ok = SSL_set1_host(ssl, g.name) == 1 &&
                 SSL_set_tlsext_host_name(ssl, g.name) == 1;
        }
    }
    pthread_mutex_unlock(&g.mu);
    if (ssl != NULL && !ok) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return ssl;
}

redisAsyncContext *
rtls_connect(struct event_base *evb, const char *ip, int port, const char **why)
{
    struct sockaddr_storage ss;
    int sslen, one, sp[2] = {-1, -1};
    struct bridge *b = NULL;
    redisAsyncContext *ac = NULL;
    SSL *ssl;

    if (peer_addr(ip, port, &ss, &sslen) != RL_OK) {
        *why = "connect failed";
        return NULL;
    }
    if ((ssl = new_ssl()) == NULL) {
        *why = "cannot start TLS";
        return NULL;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
        SSL_free(ssl);
        *why = "cannot open the TLS bridge";
        return NULL;
    }
    b = xcalloc(1, sizeof(*b));
    snprintf(b->peer, sizeof(b->peer), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
    b->plain = bufferevent_socket_new(evb, sp[1], BEV_OPT_CLOSE_ON_FREE);
    /* CLOSE_ON_FREE: the bufferevent frees the SSL and its socket */
    b->tls = bufferevent_openssl_socket_new(evb, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (b->plain == NULL || b->tls == NULL) {
        if (b->tls == NULL)
            SSL_free(ssl);
        if (b->plain == NULL)
            close(sp[1]);
        *why = "cannot open the TLS bridge";
        goto fail;
    }
    bufferevent_setcb(b->plain, on_plain_read, NULL, on_plain_event, b);
    bufferevent_setcb(b->tls, on_tls_read, NULL, on_tls_event, b);
    if (bufferevent_socket_connect(b->tls, (struct sockaddr *)&ss, sslen) < 0) {
        *why = "connect failed";
        goto fail;
    }
    /* as hiredis does for its own sockets: a batch must not wait for the
     * ACK of the last one (Nagle with delayed ACKs: 40 ms a round) */
    one = 1;
    setsockopt(bufferevent_getfd(b->tls), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bufferevent_enable(b->plain, EV_READ);
    bufferevent_enable(b->tls, EV_READ);
    if ((ac = hiredis_on_socket(sp[0], why)) == NULL)
        goto fail;
    close(sp[0]);
    redisLibeventAttach(ac, evb);
    b->inner = ac->ev.data;
    b->add_read = ac->ev.addRead;
    b->del_read = ac->ev.delRead;
    b->add_write = ac->ev.addWrite;
    b->del_write = ac->ev.delWrite;
    b->cleanup = ac->ev.cleanup;
    ac->ev.data = b;
    ac->ev.addRead = hook_add_read;
    ac->ev.delRead = hook_del_read;
    ac->ev.addWrite = hook_add_write;
    ac->ev.delWrite = hook_del_write;
    ac->ev.cleanup = hook_cleanup;
    return ac;
fail:
    if (sp[0] >= 0)
        close(sp[0]);
    if (b->tls != NULL)
        bufferevent_free(b->tls);
    if (b->plain != NULL)
        bufferevent_free(b->plain);
    free(b);
    return NULL;
}
