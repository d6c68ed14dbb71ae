/* grpc_tls.c — see grpc_tls.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "transport_conf.h"
#include "grpc_tls.h"
#include "log.h"
#include "tls.h"
#include "util.h"

/* Sessions take their own reference to the context (SSL_new), so a reload
 * drops the old one at once. */
static struct {
    pthread_mutex_t mu;
    SSL_CTX *ctx; /* NULL: TLS off */
} g = {PTHREAD_MUTEX_INITIALIZER, NULL};

static const unsigned char alpn_h2[] = {2, 'h', '2'};

/* RFC 7301: a client offering protocols none of which is h2 is refused
 * with no_application_protocol; one offering none at all speaks h2 by
 * prior knowledge. */
static int
select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
            const unsigned char *in, unsigned int inlen, void *arg)
{
    unsigned char *sel = NULL;

    if (SSL_select_next_proto(&sel, outlen, alpn_h2, sizeof(alpn_h2), in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    (void)ssl;
    (void)arg;
    return SSL_TLSEXT_ERR_OK;
}

static int
load_client_ca(SSL_CTX *ctx, const char *file, char **cause)
{
    STACK_OF(X509_NAME) * names;

    if (SSL_CTX_load_verify_locations(ctx, file, NULL) != 1 ||
        (names = SSL_load_client_CA_file(file)) == NULL) {
        *cause = tls_cause("client_ca_file", file, "cannot load the CA certificates");
        return RL_ERR;
    }
    /* the CAs a client may choose its certificate by */
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return RL_OK;
}

/* The context t asks for; NULL and RL_OK when TLS is off. */
static int
server_ctx(const struct rl_rls_tls_conf *t, SSL_CTX **out, char **cause)
{
    static const unsigned char sid_ctx[] = "ratelimitd-rls";
    SSL_CTX *ctx;
    char *why = NULL;

    *out = NULL;
    if (t->cert_file == NULL)
        return RL_OK;
    if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        why = tls_cause(NULL, NULL, "cannot make a TLS context");
        goto fail;
    }
    /* RFC 9113 9.2: TLS 1.2 or later, no renegotiation */
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_COMPRESSION);
    /* an idle connection keeps no read or write buffer */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* resumption by ticket only: no session cache shared (and locked)
     * between the workers */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    if (tls_use_identity(ctx, t->cert_file, t->key_file, &why) != RL_OK ||
        (t->client_ca_file != NULL && load_client_ca(ctx, t->client_ca_file, &why) != RL_OK))
        goto fail;
    tls_warn_expired("rls TLS", "rls.tls.cert_file", t->cert_file);
    tls_warn_expired("rls TLS", "rls.tls.client_ca_file", t->client_ca_file);
    *out = ctx;
    return RL_OK;
fail:
    *cause = xasprintf("rls.tls: %s", why);
    free(why);
    SSL_CTX_free(ctx);
    return RL_ERR;
}

int
grpc_tls_check(const struct rl_rls_tls_conf *t, char **cause)
{
    SSL_CTX *ctx;

    if (server_ctx(t, &ctx, cause) != RL_OK)
        return RL_ERR;
    SSL_CTX_free(ctx);
    return RL_OK;
}

int
grpc_tls_configure(const struct rl_rls_tls_conf *t, char **cause)
{
    SSL_CTX *ctx, *old;

    if (server_ctx(t, &ctx, cause) != RL_OK)
        return RL_ERR;
    pthread_mutex_lock(&g.mu);
    old = g.ctx;
    g.ctx = ctx;
    pthread_mutex_unlock(&g.mu);
    SSL_CTX_free(old);
    return RL_OK;
}

SSL *
grpc_tls_session(int *on)
{
    SSL *ssl = NULL;

    pthread_mutex_lock(&g.mu);
    *on = g.ctx != NULL;
    if (g.ctx != NULL)
        ssl = SSL_new(g.ctx);
    pthread_mutex_unlock(&g.mu);
    return ssl;
}

void
grpc_tls_shutdown(void)
{
    pthread_mutex_lock(&g.mu);
    SSL_CTX_free(g.ctx);
    g.ctx = NULL;
    pthread_mutex_unlock(&g.mu);
}
