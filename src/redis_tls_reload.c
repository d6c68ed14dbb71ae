/* redis_tls_reload.c — see redis_tls_reload.h. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "transport_conf.h"
#include "log.h"
#include "redis_tls.h"
#include "redis_tls_reload.h"
#include "redis_url.h"
#include "util.h"

/* Servers tried at most: the first reached decides. */
#define PROBE_TARGETS_MAX 8

struct target {
    char *host;
    int port;
};

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
        /* config.c checked every one with the same parser */
        for (size_t i = 0; i < l->n && n < PROBE_TARGETS_MAX; i++)
            if (redis_url_hostport(l->v[i], &out[n].host, &out[n].port) == RL_OK)
                n++;
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

/* *out: a TCP connection to t made by the deadline (non-blocking). */
static int
tcp_connect(const struct target *t, int64_t deadline_us, int *out, char **cause)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char ps[16];
    int fd, err = 0, rc;
    socklen_t len = sizeof(err);
    struct pollfd p;

    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%d", t->port);
    if ((rc = getaddrinfo(t->host, ps, &hints, &ai)) != 0) {
        *cause = xasprintf("%s:%d: %s", t->host, t->port, gai_strerror(rc));
        return RL_ERR;
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
        *cause = xasprintf("%s:%d: %s", t->host, t->port, strerror(err));
        return RL_ERR;
    }
    *out = fd;
    return RL_OK;
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

/* Whether TLS works with ctx at t, verified as `name` (NULL: t's host):
 * RL_OK, or RL_ERR and *cause, with *reached false when t did not answer at
 * all. */
static int
probe(SSL_CTX *ctx, const char *name, const struct target *t, int64_t timeout_ms,
      bool *reached, char **cause)
{
    int64_t deadline = now_monotonic_us() + timeout_ms * 1000;
    char reason[RTLS_REASON_MAX];
    int fd;
    bool ok;
    SSL *ssl;

    *reached = false;
    if (tcp_connect(t, deadline, &fd, cause) != RL_OK)
        return RL_ERR;
    *reached = true;
    ssl = SSL_new(ctx);
    ok = ssl != NULL && SSL_set_fd(ssl, fd) == 1 &&
         rtls_peer_name(ssl, name != NULL ? name : t->host,
                        SSL_CTX_get_verify_mode(ctx) != SSL_VERIFY_NONE) &&
         ssl_exchange(ssl, fd, deadline) == RL_OK;
    if (!ok) {
        if (ssl != NULL)
            exchange_failure(ssl, deadline, reason, sizeof(reason));
        *cause = xasprintf("%s:%d: %s", t->host, t->port, ssl != NULL ? reason : "no memory");
    }
    SSL_free(ssl);
    close(fd);
    return ok ? RL_OK : RL_ERR;
}

/*
 * Whether ctx opens TLS to the servers r names: the first one reached
 * decides (a Cluster seed down does not hold a rotation up); none reached
 * is a failure too, since nothing says the new files would work.  No
 * server to try (a Unix socket, which is never TLS) is no failure.
 */
static int
probe_any(const struct rl_redis_conf *r, SSL_CTX *ctx, char **cause)
{
    struct target t[PROBE_TARGETS_MAX];
    size_t n = targets(r, t), i;
    bool reached = false;
    int rc = RL_ERR;

    *cause = NULL;
    for (i = 0; i < n && !reached; i++) {
        free(*cause);
        *cause = NULL;
        rc = probe(ctx, r->tls.server_name, &t[i], r->connect_timeout_ms, &reached, cause);
        if (rc == RL_OK)
            log_info(LOG_MSG("redis TLS: a handshake with the new settings worked"),
                     LOG_HP("server", t[i].host, t[i].port));
    }
    for (i = 0; i < n; i++)
        free(t[i].host);
    return rc == RL_OK || n == 0 ? RL_OK : RL_ERR;
}

int
rtls_reload(const struct rl_redis_conf *r, char **cause)
{
    struct rtls_settings s;
    char *inner = NULL;

    if (rtls_settings_load(r, &s, cause) != RL_OK)
        return RL_ERR;
    if (s.on && rtls_settings_changed(&s) && probe_any(r, s.ctx, &inner) != RL_OK) {
        *cause = xasprintf("redis.tls: a TLS handshake with the new settings failed, the "
                           "running ones stay: %s",
                           inner);
        free(inner);
        rtls_settings_clear(&s);
        return RL_ERR;
    }
    rtls_settings_install(&s);
    return RL_OK;
}
