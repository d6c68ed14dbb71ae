/* tls.c — see tls.h. */
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "tls.h"
#include "util.h"

char *
tls_cause(const char *field, const char *file, const char *what)
{
    unsigned long e = ERR_peek_last_error();
    char buf[160] = "unknown error";

    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return field != NULL ? xasprintf("%s %s: %s: %s", field, file, what, buf)
                         : xasprintf("%s: %s", what, buf);
}

int
tls_use_identity(SSL_CTX *ctx, const char *cert_file, const char *key_file, char **cause)
{
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        *cause = tls_cause("cert_file", cert_file, "cannot load the certificate");
        return RL_ERR;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        *cause = tls_cause("key_file", key_file,
                           ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH
                               ? "the key does not match cert_file"
                               : "cannot load the private key");
        return RL_ERR;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        *cause = tls_cause("key_file", key_file, "the key does not match cert_file");
        return RL_ERR;
    }
    return RL_OK;
}

void
tls_warn_expired(const char *who, const char *field, const char *file)
{
    FILE *f = file != NULL ? fopen(file, "r") : NULL;
    X509 *x;
    char subject[160], when[64] = "?";
    BIO *b;

    if (f == NULL)
        return;
    while ((x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL) {
        if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
            X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof(subject));
            if ((b = BIO_new(BIO_s_mem())) != NULL) {
                int n;

                ASN1_TIME_print(b, X509_get0_notAfter(x));
                n = BIO_read(b, when, sizeof(when) - 1);
                when[n > 0 ? n : 0] = '\0';
                BIO_free(b);
            }
            log_warn(LOG_MSGJ(who, " certificate expired", NULL), LOG_S("field", field),
                     LOG_S("file", file), LOG_Q("subject", subject), LOG_Q("not_after", when));
            X509_free(x);
            break;
        }
        X509_free(x);
    }
    ERR_clear_error(); /* the end of the file reads as an error */
    fclose(f);
}
