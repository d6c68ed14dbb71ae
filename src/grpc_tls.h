/*
 * grpc_tls.h — TLS on the gRPC listener: rls.tls's certificate and key, ALPN
 * "h2" (gRPC speaks nothing else), and with client_ca_file mutual TLS, every
 * client verified against that CA.
 *
 * The settings are process-wide and replaced whole: a reload reads the files
 * again, connections open keep the handshake they made, new ones use the new
 * files.  Every worker asks for its sessions here.
 */
#ifndef RL_GRPC_TLS_H
#define RL_GRPC_TLS_H

#include <openssl/ssl.h>

#include "rl.h"

struct rl_rls_tls_conf;

/*
 * Load the files `t` names into new settings and swap them in; no
 * cert_file: TLS off (h2c).  On RL_ERR the running settings stay and *cause
 * says why, naming the option and file (caller frees).  An expired
 * certificate loads, with a warning.
 */
int grpc_tls_configure(const struct rl_rls_tls_conf *t, char **cause) RL_WUR;

/* What grpc_tls_configure would say, without swapping anything (for -t). */
int grpc_tls_check(const struct rl_rls_tls_conf *t, char **cause) RL_WUR;

/* A server session under the current settings (its own reference to them),
 * or NULL: *on 0 when TLS is off, 1 when a session could not be made. */
SSL *grpc_tls_session(int *on);

/* Forget the settings (process exit). */
void grpc_tls_shutdown(void);

#endif
