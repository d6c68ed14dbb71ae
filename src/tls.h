/*
 * tls.h — what the daemon's two TLS ends share: a certificate and its key
 * loaded into an OpenSSL context, errors worded with the option and file
 * they are about, and a warning for a certificate past its date.  The Redis
 * client side (redis_tls.c) and the gRPC listener's server side
 * (grpc_tls.c) each keep their own settings.
 */
#ifndef RL_TLS_H
#define RL_TLS_H

#include <openssl/ssl.h>

#include "rl.h"

/* "FIELD FILE: WHAT: the library's reason", or "WHAT: the library's reason"
 * without a field; OpenSSL's error queue is emptied.  Caller frees. */
char *tls_cause(const char *field, const char *file, const char *what);

/* cert_file (a chain) and key_file into ctx, the key checked against the
 * certificate: RL_ERR and *cause naming the field and the file when not. */
int tls_use_identity(SSL_CTX *ctx, const char *cert_file, const char *key_file,
                     char **cause) RL_WUR;

/* One warning when `file` holds a certificate past its notAfter: it loads,
 * but a peer will refuse it (or, for a CA, what it signed).
 * `who` names the end ("redis TLS"), `field` the option. */
void tls_warn_expired(const char *who, const char *field, const char *file);

#endif
