/* redis_tls.c — the TLS settings: see redis_tls.h. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "transport_conf.h"
#include "log.h"
#include "redis_tls.h"
#include "tls.h"
#include "util.h"

_Static_assert(RTLS_DIGEST_LEN == SHA256_DIGEST_LENGTH, "the digest is a SHA-256");

/*
 * The settings every new connection copies.  The SSL_CTX is reference
 * counted by OpenSSL: a connection being set up holds its own reference, so
 * a reload can drop the old context at once.
 */
static struct {
    pthread_mutex_t mu;
    struct rtls_settings cur;
    /* The failure logged since a connection last worked ("" when none): a
     * server refusing us for an hour writes one line, not one per retry. */
    char last_reason[RTLS_REASON_MAX];
} g = {PTHREAD_MUTEX_INITIALIZER, {.verify = true}, ""};

/* ---- loading ---------------------------------------------------------------- */

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

static int
make_ctx(const struct rl_tls_conf *t, SSL_CTX **out, char **cause)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL) {
        *cause = tls_cause(NULL, NULL, "cannot make a TLS context");
        return RL_ERR;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Sessions are not resumed: a connection lives for hours, and a cache
     * shared across threads would be one more lock on the connect path. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (load_files(ctx, t, cause) != RL_OK) {
        SSL_CTX_free(ctx);
        return RL_ERR;
    }
    SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    *out = ctx;
    return RL_OK;
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

    memset(out, 0, RTLS_DIGEST_LEN);
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

static bool
tls_wanted(const struct rl_redis_conf *r)
{
    return r->tls.enabled || (r->url != NULL && strncmp(r->url, "rediss://", 9) == 0);
}

/* The context `r` asks for (NULL and RL_OK when TLS is off); warns about
 * expired certificates in the files. */
static int
new_ctx(const struct rl_redis_conf *r, SSL_CTX **out, char **cause)
{
    char *inner = NULL;

    *out = NULL;
    if (!tls_wanted(r))
        return RL_OK;
    if (r->tls.server_name != NULL && strlen(r->tls.server_name) >= RTLS_NAME_MAX) {
        *cause = xstrdup("redis.tls: server_name is too long");
        return RL_ERR;
    }
    if (make_ctx(&r->tls, out, &inner) != RL_OK) {
        *cause = xasprintf("redis.tls: %s", inner);
        free(inner);
        return RL_ERR;
    }
    tls_warn_expired("redis TLS", "redis.tls.ca_file", r->tls.ca_file);
    tls_warn_expired("redis TLS", "redis.tls.cert_file", r->tls.cert_file);
    return RL_OK;
}

int
rtls_settings_load(const struct rl_redis_conf *r, struct rtls_settings *out, char **cause)
{
    memset(out, 0, sizeof(*out));
    if (new_ctx(r, &out->ctx, cause) != RL_OK)
        return RL_ERR;
    out->on = tls_wanted(r);
    out->verify = r->tls.verify;
    snprintf(out->name, sizeof(out->name), "%s",
             r->tls.server_name != NULL ? r->tls.server_name : "");
    settings_digest(&r->tls, out->on, out->digest);
    return RL_OK;
}

bool
rtls_settings_changed(const struct rtls_settings *s)
{
    bool same;

    pthread_mutex_lock(&g.mu);
    same = g.cur.on == s->on && memcmp(g.cur.digest, s->digest, sizeof(s->digest)) == 0;
    pthread_mutex_unlock(&g.mu);
    return !same;
}

void
rtls_settings_install(struct rtls_settings *s)
{
    SSL_CTX *old;

    if (s->on && !s->verify)
        log_warn(LOG_MSG("redis TLS certificate verification is off: anyone on the path "
                         "can read and change what ratelimitd and Redis say"));
    pthread_mutex_lock(&g.mu);
    old = g.cur.ctx;
    g.cur = *s;
    g.last_reason[0] = '\0';
    pthread_mutex_unlock(&g.mu);
    SSL_CTX_free(old);
    s->ctx = NULL;
}

void
rtls_settings_clear(struct rtls_settings *s)
{
    SSL_CTX_free(s->ctx);
    s->ctx = NULL;
}

int
rtls_configure(const struct rl_redis_conf *r, char **cause)
{
    struct rtls_settings s;

    if (rtls_settings_load(r, &s, cause) != RL_OK)
        return RL_ERR;
    rtls_settings_install(&s);
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

bool
rtls_enabled(void)
{
    bool on;

    pthread_mutex_lock(&g.mu);
    on = g.cur.on;
    pthread_mutex_unlock(&g.mu);
    return on;
}

void
rtls_shutdown(void)
{
    pthread_mutex_lock(&g.mu);
    SSL_CTX_free(g.cur.ctx);
    g.cur.ctx = NULL;
    g.cur.on = false;
    memset(g.cur.digest, 0, sizeof(g.cur.digest));
    pthread_mutex_unlock(&g.mu);
}

/* ---- sessions ------------------------------------------------------------------ */

bool
rtls_peer_name(SSL *ssl, const char *name, bool verify)
{
    unsigned char ip[sizeof(struct in6_addr)];
    int is_ip;

    if (name == NULL || name[0] == '\0')
        return true;
    is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip && SSL_set_tlsext_host_name(ssl, name) != 1)
        return false;
    if (!verify)
        return true;
    return is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1
                 : SSL_set1_host(ssl, name) == 1;
}

SSL *
rtls_session(const char *host)
{
    SSL *ssl = NULL;
    char name[RTLS_NAME_MAX];
    bool verify = false;

    pthread_mutex_lock(&g.mu);
    if (g.cur.ctx != NULL && (ssl = SSL_new(g.cur.ctx)) != NULL) {
        snprintf(name, sizeof(name), "%s", g.cur.name[0] != '\0' ? g.cur.name : host);
        verify = g.cur.verify;
    }
    pthread_mutex_unlock(&g.mu);
    if (ssl != NULL && !rtls_peer_name(ssl, name, verify)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    return ssl;
}

void
rtls_failed(const char *peer, const char *reason)
{
    bool fresh;

    pthread_mutex_lock(&g.mu);
    fresh = g.last_reason[0] == '\0';
    if (fresh)
        snprintf(g.last_reason, sizeof(g.last_reason), "%s", reason);
    pthread_mutex_unlock(&g.mu);
    if (fresh)
        log_warn(LOG_MSG("redis TLS connection failed"), LOG_S("server", peer),
                 LOG_Q("reason", reason));
    else
        log_debug(LOG_MSG("redis TLS connection failed"), LOG_S("server", peer),
                  LOG_Q("reason", reason));
}

void
rtls_worked(void)
{
    pthread_mutex_lock(&g.mu);
    g.last_reason[0] = '\0';
    pthread_mutex_unlock(&g.mu);
}
