/* redis_tls_bridge.c — see redis_tls_bridge.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
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
#include <hiredis/async.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "log.h"
#include "redis_ev.h"
#include "redis_tls.h"
#include "redis_tls_bridge.h"
#include "util.h"

/* ---- the bridge ------------------------------------------------------------- */

/*
 * One per hiredis context.  It stands between hiredis and its libevent
 * adapter (ac->ev points here, and every hook is passed on), so that the
 * adapter's cleanup, which hiredis runs whenever it frees the context, frees
 * the bridge too: nothing else needs to know that a connection is TLS.
 */
struct bridge {
    /* Our end of the socketpair, read and written directly, not through a
     * second bufferevent (docs/BENCHMARKS.md, "Measurements behind the
     * code": what that one cost per batch). */
    int fd; /* -1 once closed */
    struct event *plain_rd;
    struct event *plain_wr;   /* only while `pending` holds bytes */
    struct evbuffer *pending; /* for hiredis, not yet taken by the socketpair */
    int flushing;             /* the TLS side is gone: close fd once pending is out */
    struct bufferevent *tls;  /* to the server */
    int handshake_done;
    int got_data; /* the server answered: TLS works */
    char peer[INET6_ADDRSTRLEN + 8];
    void *inner; /* the adapter's own state and hooks */
    void (*add_read)(void *);
    void (*del_read)(void *);
    void (*add_write)(void *);
    void (*del_write)(void *);
    void (*cleanup)(void *);
};

/* A batch of hiredis's commands is a few KiB: one read takes it whole. */
#define PLAIN_READ_MAX 32768

static void
close_plain(struct bridge *b)
{
    if (b->plain_rd != NULL)
        event_free(b->plain_rd);
    if (b->plain_wr != NULL)
        event_free(b->plain_wr);
    b->plain_rd = b->plain_wr = NULL;
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
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
    if (b->fd < 0)
        return;
    if (evbuffer_get_length(b->pending) == 0) {
        close_plain(b);
        return;
    }
    event_del(b->plain_rd);
    b->flushing = 1;
}

/* hiredis's socket is gone (it never half-closes): so is the bridge's use. */
static void
plain_gone(struct bridge *b)
{
    close_plain(b);
    drop_tls(b);
}

static bool
transient(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

static void
on_plain_readable(evutil_socket_t fd, short what, void *arg)
{
    struct bridge *b = arg;
    char buf[PLAIN_READ_MAX];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n > 0 && b->tls != NULL)
        bufferevent_write(b->tls, buf, (size_t)n);
    else if (n == 0 || (n < 0 && !transient(errno)))
        plain_gone(b);
    (void)what;
}

static void
on_plain_writable(evutil_socket_t fd, short what, void *arg)
{
    struct bridge *b = arg;

    if (evbuffer_write(b->pending, fd) < 0 && !transient(errno)) {
        plain_gone(b);
        return;
    }
    if (evbuffer_get_length(b->pending) > 0)
        return;
    event_del(b->plain_wr);
    if (b->flushing)
        close_plain(b);
    (void)what;
}

/* What the server said, to hiredis: written at once when nothing waits
 * before it (the socketpair's buffer nearly always takes it all). */
static void
plain_send(struct bridge *b, struct evbuffer *src)
{
    if (b->fd < 0) {
        evbuffer_drain(src, evbuffer_get_length(src));
        return;
    }
    if (evbuffer_get_length(b->pending) == 0 && evbuffer_write(src, b->fd) < 0 &&
        !transient(errno)) {
        plain_gone(b);
        return;
    }
    if (evbuffer_get_length(src) == 0)
        return;
    evbuffer_add_buffer(b->pending, src);
    event_add(b->plain_wr, NULL);
}

static void
on_tls_read(struct bufferevent *bev, void *arg)
{
    struct bridge *b = arg;

    if (!b->got_data) {
        b->got_data = 1;
        rtls_worked();
    }
    plain_send(b, bufferevent_get_input(bev));
}

/* The server is not there (yet): not a TLS problem, the backend says so. */
static bool
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
static bool
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
        snprintf(buf, n, "%s",
                 sock_err != 0 && !(what & BEV_EVENT_EOF)
                     ? evutil_socket_error_to_string(sock_err)
                     : "the server closed the connection");
    } else if (b->handshake_done) {
        /* TLS 1.3 servers check a client certificate after the handshake */
        snprintf(buf, n,
                 "the server closed the connection after the TLS handshake "
                 "(%s): does it require a client certificate (cert_file)?",
                 sock_err != 0 ? evutil_socket_error_to_string(sock_err) : "end of stream");
    } else if (sock_err != 0 && unreachable(sock_err)) {
        snprintf(buf, n, "%s", evutil_socket_error_to_string(sock_err));
    } else {
        snprintf(buf, n, "the server closed the connection during the TLS handshake (%s)",
                 sock_err != 0 ? evutil_socket_error_to_string(sock_err) : "end of stream");
    }
    return !b->got_data &&
           (vr != X509_V_OK || first != 0 || b->handshake_done || !unreachable(sock_err));
}

static void
on_tls_event(struct bufferevent *bev, short what, void *arg)
{
    struct bridge *b = arg;
    int sock_err = EVUTIL_SOCKET_ERROR();
    char reason[RTLS_REASON_MAX];

    if (what & BEV_EVENT_CONNECTED) {
        b->handshake_done = 1;
        log_debug(LOG_MSG("redis TLS handshake done"), LOG_S("server", b->peer),
                  LOG_S("version", SSL_get_version(bufferevent_openssl_get_ssl(bev))));
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    /* Before the first answer it is the TLS setup that failed; after it, a
     * lost connection that hiredis reports like any other. */
    if (describe(b, what, (what & BEV_EVENT_ERROR) ? sock_err : 0, reason, sizeof(reason)))
        rtls_failed(b->peer, reason);
    else
        log_debug(LOG_MSG("redis TLS connection ended"), LOG_S("server", b->peer),
                  LOG_Q("reason", reason));
    drop_tls(b);
}

/* The adapter's hooks, passed on: hiredis calls each with ac->ev.data, which
 * is the bridge now. */
#define BRIDGE_HOOK(name, field) \
    static void name(void *p) \
    { \
        struct bridge *b = p; \
        b->field(b->inner); \
    }
BRIDGE_HOOK(hook_add_read, add_read)
BRIDGE_HOOK(hook_del_read, del_read)
BRIDGE_HOOK(hook_add_write, add_write)
BRIDGE_HOOK(hook_del_write, del_write)
#undef BRIDGE_HOOK

static void
bridge_free(struct bridge *b)
{
    if (b->tls != NULL)
        bufferevent_free(b->tls);
    close_plain(b);
    if (b->pending != NULL)
        evbuffer_free(b->pending);
    free(b);
}

static void
hook_cleanup(void *p)
{
    struct bridge *b = p;

    if (b->cleanup != NULL)
        b->cleanup(b->inner);
    bridge_free(b);
}

/*
 * hiredis 0.14 opens its sockets itself and takes no descriptor: let it
 * connect to a listener of ours on loopback that lives only for this call,
 * then put the socketpair's end in place of its socket under the same
 * number.  Nothing ever reads that listener; the bytes flow only through
 * the socketpair.
 */
static const char *
hiredis_on_socket(int fd, redisAsyncContext **out)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    redisAsyncContext *ac = NULL;

    *out = NULL;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &len) < 0) {
        log_debug(LOG_MSG("redis TLS bridge: no loopback listener"),
                  LOG_Q("error", strerror(errno)));
        goto out;
    }
    ac = redisAsyncConnect("127.0.0.1", ntohs(sin.sin_port));
    if (ac == NULL || ac->err || dup3(fd, ac->c.fd, O_CLOEXEC) < 0) {
        log_debug(LOG_MSG("redis TLS bridge: cannot connect hiredis"),
                  LOG_Q("error", ac != NULL && ac->err ? ac->errstr : strerror(errno)));
        if (ac != NULL)
            redisAsyncFree(ac);
        ac = NULL;
    }
out:
    if (lfd >= 0)
        close(lfd);
    *out = ac;
    return ac != NULL ? NULL : "cannot open the TLS bridge";
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

/* The adapter attached, with the bridge between hiredis and its hooks. */
static int
attach(redisAsyncContext *ac, struct event_base *evb, struct bridge *b, const char *ip,
       int port)
{
    /* the server's address, not the loopback listener's: the Sentinel
     * code subscribes to the sentinel a context reached */
    free(ac->c.tcp.host);
    ac->c.tcp.host = xstrdup(ip);
    ac->c.tcp.port = port;
    if (redis_ev_attach(ac, evb) != RL_OK)
        return RL_ERR;
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
    return RL_OK;
}

const char *
rtls_bridge_connect(struct event_base *evb, const char *host, const char *ip, int port,
                    redisAsyncContext **out)
{
    struct sockaddr_storage ss;
    int sslen, one, sp[2] = {-1, -1};
    struct bridge *b = NULL;
    const char *why;
    SSL *ssl;

    *out = NULL;
    if (peer_addr(ip, port, &ss, &sslen) != RL_OK)
        return "connect failed";
    if ((ssl = rtls_session(host)) == NULL)
        return "cannot start TLS";
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0) {
        SSL_free(ssl);
        return "cannot open the TLS bridge";
    }
    b = xcalloc(1, sizeof(*b));
    snprintf(b->peer, sizeof(b->peer), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
    b->fd = sp[1];
    b->plain_rd = event_new(evb, b->fd, EV_READ | EV_PERSIST, on_plain_readable, b);
    b->plain_wr = event_new(evb, b->fd, EV_WRITE | EV_PERSIST, on_plain_writable, b);
    b->pending = evbuffer_new();
    /* CLOSE_ON_FREE: the bufferevent frees the SSL and its socket */
    b->tls = bufferevent_openssl_socket_new(evb, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (b->plain_rd == NULL || b->plain_wr == NULL || b->pending == NULL || b->tls == NULL) {
        if (b->tls == NULL)
            SSL_free(ssl);
        why = "cannot open the TLS bridge";
        goto fail;
    }
    bufferevent_setcb(b->tls, on_tls_read, NULL, on_tls_event, b);
    if (bufferevent_socket_connect(b->tls, (struct sockaddr *)&ss, sslen) < 0) {
        why = "connect failed";
        goto fail;
    }
    /* as hiredis does for its own sockets: a batch must not wait for the
     * ACK of the last one (Nagle with delayed ACKs: 40 ms a round) */
    one = 1;
    setsockopt(bufferevent_getfd(b->tls), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    event_add(b->plain_rd, NULL);
    bufferevent_enable(b->tls, EV_READ);
    if ((why = hiredis_on_socket(sp[0], out)) != NULL)
        goto fail;
    close(sp[0]);
    if (attach(*out, evb, b, ip, port) != RL_OK) {
        redisAsyncFree(*out);
        *out = NULL;
        bridge_free(b);
        return "cannot open the TLS bridge";
    }
    return NULL;
fail:
    if (sp[0] >= 0)
        close(sp[0]);
    bridge_free(b);
    return why;
}
