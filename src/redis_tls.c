/* redis_tls.c — see redis_tls.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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
#include <hiredis/async.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "config.h"
#include "log.h"
#include "redis_tls.h"
#include "redis_url.h"
#include "tls.h"
#include "util.h"

#define NAME_MAX_LEN 256
#define REASON_LEN 200
#define PROBE_TARGETS_MAX 8

/*
 * The settings every new connection copies.  The SSL_CTX is reference
 * counted by OpenSSL: a connection being set up holds its own reference, so
 * a reload can drop the old context at once.
 */
static struct {
    pthread_mutex_t mu;
    int on;
    int verify;
    SSL_CTX *ctx;
    /* server_name: every node is verified as it; "" when not given (each
     * is verified as the host it is reached by) */
    char name[NAME_MAX_LEN];
    /* of the settings and the files' bytes: a reload that changes nothing
     * TLS needs no test handshake */
    unsigned char digest[SHA256_DIGEST_LENGTH];
    /* The failure logged since a connection last worked ("" when none): a
     * server refusing us for an hour writes one line, not one per retry. */
    char last_reason[REASON_LEN];
} g = {PTHREAD_MUTEX_INITIALIZER, 0, 1, NULL, "", {0}, ""};

/* ---- settings --------------------------------------------------------------- */

static int
load_files(SSL_CTX *ctx, const struct rl_tls_conf *t, char **cause)
{
    if (t->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1) {
            *cause = tls_cause("ca_file", t->ca_file, "cannot load the CA certificates");
            return RL_ERR;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        *cause = tls_cause(NULL, NULL, "cannot load the system's certificate store");
        return RL_ERR;
    }
    if (t->cert_file == NULL)
        return RL_OK;
    return tls_use_identity(ctx, t->cert_file, t->key_file, cause);
}

static SSL_CTX *
make_ctx(const struct rl_tls_conf *t, char **cause)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL) {
        *cause = tls_cause(NULL, NULL, "cannot make a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Sessions are not resumed: a connection lives for hours, and a cache
     * shared across threads would be one more lock on the connect path. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (load_files(ctx, t, cause) != RL_OK) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return ctx;
}

static void
digest_file(EVP_MD_CTX *md, const char *file)
{
    char buf[4096];
    size_t n;
    FILE *f;

    if (file == NULL)
        return;
    EVP_DigestUpdate(md, file, strlen(file) + 1);
    if ((f = fopen(file, "rb")) == NULL)
        return;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        EVP_DigestUpdate(md, buf, n);
    fclose(f);
}

static void
settings_digest(const struct rl_tls_conf *t, int on, unsigned char *out)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    char *head = xasprintf("%d %d %s", on, t->verify, t->server_name ? t->server_name : "");

    memset(out, 0, SHA256_DIGEST_LENGTH);
    if (md != NULL && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1) {
        EVP_DigestUpdate(md, head, strlen(head) + 1);
        digest_file(md, t->ca_file);
        digest_file(md, t->cert_file);
        digest_file(md, t->key_file);
        EVP_DigestFinal_ex(md, out, NULL);
    }
    EVP_MD_CTX_free(md);
    free(head);
}

/* Verify the peer as `name` (an address: its IP subjectAltName); a name is
 * also sent as SNI.  NULL: no name checked. */
static int
set_peer_name(SSL *ssl, const char *name, int verify)
{
    unsigned char ip[sizeof(struct in6_addr)];
    int is_ip;

    if (name == NULL || name[0] == '\0')
        return 1;
    is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip && SSL_set_tlsext_host_name(ssl, name) != 1)
        return 0;
    if (!verify)
        return 1;
    return is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1
                 : SSL_set1_host(ssl, name) == 1;
}

static int
tls_wanted(const struct rl_redis_conf *r)
{
    return r->tls.enabled || (r->url != NULL && strncmp(r->url, "rediss://", 9) == 0);
}

/* Swap the new settings in; the old context goes when its last connection
 * being set up lets it go. */
/* ---- the test handshake of a reload ---------------------------------------- */

struct target {
    char *host;
    int port;
};

/* "host:port" or "[v6]:port" (config.c checked the shape) */
static void
split_hostport(const char *s, struct target *out)
{
    const char *colon = strrchr(s, ':');
    size_t n = colon != NULL ? (size_t)(colon - s) : strlen(s);

    out->port = colon != NULL ? atoi(colon + 1) : 6379;
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']')
        out->host = xstrndup(s + 1, n - 2);
    else
        out->host = xstrndup(s, n);
}

/* The servers the configuration names: the URL's, the Cluster seeds or the
 * sentinels (whose files are the same as the nodes' they lead to). */
static size_t
targets(const struct rl_redis_conf *r, struct target *out)
{
    const struct rl_strlist *l = r->cluster.n > 0             ? &r->cluster
                                 : r->sentinel.master != NULL ? &r->sentinel.nodes
                                                              : NULL;
    struct rl_redis_url u;
    char *cause = NULL;
    size_t n = 0;

    if (l != NULL) {
        for (; n < l->n && n < PROBE_TARGETS_MAX; n++)
            split_hostport(l->v[n], &out[n]);
        return n;
    }
    if (r->url == NULL || redis_url_parse(r->url, &u, &cause) != RL_OK) {
        free(cause);
        return 0;
    }
    if (u.host != NULL) {
        out[0].host = xstrdup(u.host);
        out[0].port = u.port;
        n = 1;
    }
    redis_url_clear(&u);
    return n;
}

/* A TCP connection to host:port made by the deadline (non-blocking); -1
 * and *why when none. */
static int
tcp_connect(const char *host, int port, int64_t deadline_us, const char **why)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char ps[16];
    int fd, err = 0, rc;
    socklen_t len = sizeof(err);
    struct pollfd p;

    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%d", port);
    if ((rc = getaddrinfo(host, ps, &hints, &ai)) != 0) {
        *why = gai_strerror(rc);
        return -1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        err = errno;
    else if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        err = errno;
    freeaddrinfo(ai);
    if (err == EINPROGRESS) {
        p.fd = fd;
        p.events = POLLOUT;
        rc = poll(&p, 1, (int)((deadline_us - now_monotonic_us()) / 1000));
        err = rc == 0 ? ETIMEDOUT : rc < 0 ? errno : 0;
        if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
    }
    if (err != 0) {
        if (fd >= 0)
            close(fd);
        *why = strerror(err);
        return -1;
    }
    return fd;
}

/* Wait for what the last SSL call on fd wants; RL_ERR at an error or the
 * deadline. */
static int
ssl_wait(SSL *ssl, int fd, int rc, int64_t deadline_us)
{
    int e = SSL_get_error(ssl, rc);
    int64_t left_ms = (deadline_us - now_monotonic_us()) / 1000;
    struct pollfd p = {fd, e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, 0};

    if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || left_ms <= 0)
        return RL_ERR;
    return poll(&p, 1, (int)left_ms) > 0 ? RL_OK : RL_ERR;
}

/*
 * A handshake, then PING and the first byte of any reply: a TLS 1.3 server
 * refuses a client certificate only after the handshake, at the first read.
 */
static int
ssl_exchange(SSL *ssl, int fd, int64_t deadline_us)
{
    char c = 0;
    int rc;

    while ((rc = SSL_connect(ssl)) != 1)
        if (ssl_wait(ssl, fd, rc, deadline_us) != RL_OK)
            return RL_ERR;
    while ((rc = SSL_write(ssl, "PING\r\n", 6)) <= 0)
        if (ssl_wait(ssl, fd, rc, deadline_us) != RL_OK)
            return RL_ERR;
    while ((rc = SSL_read(ssl, &c, 1)) <= 0)
        if (ssl_wait(ssl, fd, rc, deadline_us) != RL_OK)
            return RL_ERR;
    return c == '+' || c == '-' ? RL_OK : RL_ERR;
}

static void
exchange_failure(SSL *ssl, int64_t deadline_us, char *buf, size_t n)
{
    long vr = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    if (vr != X509_V_OK)
        snprintf(buf, n, "certificate verification failed: %s",
                 X509_verify_cert_error_string(vr));
    else if (r != NULL)
        snprintf(buf, n, "TLS error: %s", r);
    else if (now_monotonic_us() >= deadline_us)
        snprintf(buf, n, "no answer within connect_timeout");
    else
        snprintf(buf, n, "the server closed the connection");
    ERR_clear_error();
}

/* 1: TLS works with ctx at t, verified as `name` (NULL: t's host); 0: it
 * does not (*why); -1: t is not reached (*why). */
static int
probe(SSL_CTX *ctx, const char *name, const struct target *t, int64_t timeout_ms, char **why)
{
    int64_t deadline = now_monotonic_us() + timeout_ms * 1000;
    const char *err = NULL;
    char reason[REASON_LEN];
    int fd, ok;
    SSL *ssl;

    if ((fd = tcp_connect(t->host, t->port, deadline, &err)) < 0) {
        *why = xasprintf("%s:%d: %s", t->host, t->port, err);
        return -1;
    }
    ssl = SSL_new(ctx);
    ok = ssl != NULL && SSL_set_fd(ssl, fd) == 1 &&
         set_peer_name(ssl, name != NULL ? name : t->host,
                       SSL_CTX_get_verify_mode(ctx) != SSL_VERIFY_NONE) &&
         ssl_exchange(ssl, fd, deadline) == RL_OK;
    if (!ok) {
        if (ssl != NULL)
            exchange_failure(ssl, deadline, reason, sizeof(reason));
        *why = xasprintf("%s:%d: %s", t->host, t->port, ssl != NULL ? reason : "no memory");
    }
    SSL_free(ssl);
    close(fd);
    return ok;
}

/*
 * Whether ctx opens TLS to the servers r names: the first one reached
 * decides (a Cluster seed down does not hold a rotation up); none reached
 * is a failure too, since nothing says the new files would work.  No
 * server to try (a Unix socket, which is never TLS) is no failure.
 */
static int
probe_any(const struct rl_redis_conf *r, SSL_CTX *ctx, char **why)
{
    struct target t[PROBE_TARGETS_MAX];
    size_t n = targets(r, t), i;
    int res = -1;

    *why = NULL;
    for (i = 0; i < n && res < 0; i++) {
        free(*why);
        *why = NULL;
        res = probe(ctx, r->tls.server_name, &t[i], r->connect_timeout_ms, why);
        if (res == 1)
            log_info("msg=\"redis TLS: a handshake with the new settings worked\" "
                     "server=%s:%d",
                     t[i].host, t[i].port);
    }
    for (i = 0; i < n; i++)
        free(t[i].host);
    return res == 1 || n == 0 ? RL_OK : RL_ERR;
}

static void
install(const struct rl_tls_conf *t, int on, SSL_CTX *ctx, const unsigned char *digest)
{
    SSL_CTX *old;

    if (on && !t->verify)
        log_warn("msg=\"redis TLS certificate verification is off: anyone on the path "
                 "can read and change what ratelimitd and Redis say\"");
    pthread_mutex_lock(&g.mu);
    old = g.ctx;
    g.ctx = ctx;
    g.on = on;
    g.verify = t->verify;
    snprintf(g.name, sizeof(g.name), "%s", t->server_name != NULL ? t->server_name : "");
    memcpy(g.digest, digest, sizeof(g.digest));
    g.last_reason[0] = '\0';
    pthread_mutex_unlock(&g.mu);
    SSL_CTX_free(old);
}

/* The context `r` asks for (NULL and RL_OK when TLS is off); warns about
 * expired certificates in the files. */
static int
new_ctx(const struct rl_redis_conf *r, SSL_CTX **out, char **cause)
{
    char *why = NULL;

    *out = NULL;
    if (!tls_wanted(r))
        return RL_OK;
    if (r->tls.server_name != NULL && strlen(r->tls.server_name) >= NAME_MAX_LEN) {
        *cause = xstrdup("redis.tls: server_name is too long");
        return RL_ERR;
    }
    if ((*out = make_ctx(&r->tls, &why)) == NULL) {
        *cause = xasprintf("redis.tls: %s", why);
        free(why);
        return RL_ERR;
    }
    tls_warn_expired("redis TLS", "redis.tls.ca_file", r->tls.ca_file);
    tls_warn_expired("redis TLS", "redis.tls.cert_file", r->tls.cert_file);
    return RL_OK;
}

int
rtls_check(const struct rl_redis_conf *r, char **cause)
{
    SSL_CTX *ctx;

    if (new_ctx(r, &ctx, cause) != RL_OK)
        return RL_ERR;
    SSL_CTX_free(ctx);
    return RL_OK;
}

static int
configure(const struct rl_redis_conf *r, int test_first, char **cause)
{
    int on = tls_wanted(r), same;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SSL_CTX *ctx;
    char *why = NULL;

    if (new_ctx(r, &ctx, cause) != RL_OK)
        return RL_ERR;
    settings_digest(&r->tls, on, digest);
    pthread_mutex_lock(&g.mu);
    same = g.on == on && memcmp(g.digest, digest, sizeof(digest)) == 0;
    pthread_mutex_unlock(&g.mu);
    if (on && test_first && !same && probe_any(r, ctx, &why) != RL_OK) {
        *cause = xasprintf("redis.tls: a TLS handshake with the new settings failed, the "
                           "running ones stay: %s",
                           why);
        free(why);
        SSL_CTX_free(ctx);
        return RL_ERR;
    }
    install(&r->tls, on, ctx, digest);
    return RL_OK;
}

int
rtls_configure(const struct rl_redis_conf *r, char **cause)
{
    return configure(r, 0, cause);
}

int
rtls_reconfigure(const struct rl_redis_conf *r, char **cause)
{
    return configure(r, 1, cause);
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
    memset(g.digest, 0, sizeof(g.digest));
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
        log_warn("msg=\"redis TLS connection failed\" server=%s reason=\"%s\"", peer, reason);
    else
        log_debug("msg=\"redis TLS connection failed\" server=%s reason=\"%s\"", peer, reason);
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
    /* Our end of the socketpair, read and written directly: a bufferevent
     * there cost an ioctl, an epoll_ctl pair and a loop pass per batch. */
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

static int
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
        report_success();
    }
    plain_send(b, bufferevent_get_input(bev));
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
    close_plain(b);
    if (b->pending != NULL)
        evbuffer_free(b->pending);
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
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &len) < 0) {
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

/* A client session under the current settings (its own reference to
 * them), verified as server_name or else as `host`, the name or address the
 * server was reached by. */
static SSL *
new_ssl(const char *host)
{
    SSL *ssl = NULL;
    char name[NAME_MAX_LEN];
    int verify = 0;

    pthread_mutex_lock(&g.mu);
    if (g.ctx != NULL && (ssl = SSL_new(g.ctx)) != NULL) {
        snprintf(name, sizeof(name), "%s", g.name[0] != '\0' ? g.name : host);
        verify = g.verify;
    }
    pthread_mutex_unlock(&g.mu);
    if (ssl != NULL && !set_peer_name(ssl, name, verify)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return ssl;
}

/* The adapter attached, with the bridge between hiredis and its hooks. */
static void
attach(redisAsyncContext *ac, struct event_base *evb, struct bridge *b, const char *ip,
       int port)
{
    /* the server's address, not the loopback listener's: the Sentinel
     * code subscribes to the sentinel a context reached */
    free(ac->c.tcp.host);
    ac->c.tcp.host = xstrdup(ip);
    ac->c.tcp.port = port;
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
}

redisAsyncContext *
rtls_connect(struct event_base *evb, const char *host, const char *ip, int port,
             const char **why)
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
    if ((ssl = new_ssl(host)) == NULL) {
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
        *why = "cannot open the TLS bridge";
        goto fail;
    }
    bufferevent_setcb(b->tls, on_tls_read, NULL, on_tls_event, b);
    if (bufferevent_socket_connect(b->tls, (struct sockaddr *)&ss, sslen) < 0) {
        *why = "connect failed";
        goto fail;
    }
    /* as hiredis does for its own sockets: a batch must not wait for the
     * ACK of the last one (Nagle with delayed ACKs: 40 ms a round) */
    one = 1;
    setsockopt(bufferevent_getfd(b->tls), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    event_add(b->plain_rd, NULL);
    bufferevent_enable(b->tls, EV_READ);
    if ((ac = hiredis_on_socket(sp[0], why)) == NULL)
        goto fail;
    close(sp[0]);
    attach(ac, evb, b, ip, port);
    return ac;
fail:
    if (sp[0] >= 0)
        close(sp[0]);
    if (b->tls != NULL)
        bufferevent_free(b->tls);
    close_plain(b);
    if (b->pending != NULL)
        evbuffer_free(b->pending);
    free(b);
    return NULL;
}
