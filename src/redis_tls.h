/*
 * redis_tls.h — Redis over TLS for hiredis 0.14, which has no TLS of its own.
 * Three modules, one seam each:
 *
 *   redis_tls.c         the settings (CA, client certificate, the name
 *                       verified): process-wide under one mutex, replaced
 *                       whole by rtls_configure; connections open keep the
 *                       files they were made with, the next handshake uses
 *                       the new ones.  Every session starts from them, and
 *                       the log of TLS failures lives with them.
 *   redis_tls_reload.c  SIGHUP: new settings are tried with a blocking
 *                       handshake (and a PING) before they are swapped in.
 *   redis_tls_bridge.c  each connection: hiredis keeps its async context and
 *                       libevent adapter, but its socket is one end of a
 *                       socketpair whose other end is shuttled to an OpenSSL
 *                       bufferevent connected to the server.
 *
 * The two others use this one; this one uses neither.
 */
#ifndef RL_REDIS_TLS_H
#define RL_REDIS_TLS_H

#include <stdbool.h>

#include "rl.h"

struct rl_redis_conf;
struct ssl_ctx_st;
struct ssl_st;

/* server_name, and the words of a failure, fit in this. */
#define RTLS_NAME_MAX 256
#define RTLS_REASON_MAX 200
#define RTLS_DIGEST_LEN 32

/*
 * Load the files `r->tls` names (and decide the name verified) into new
 * settings and swap them in.  On RL_ERR the running settings stay and *cause
 * says why (caller frees).  TLS off (neither rediss:// nor tls.enabled)
 * turns it off for connections opened after this.
 */
int rtls_configure(const struct rl_redis_conf *r, char **cause) RL_WUR;

/* Whether new Redis connections go over TLS. */
bool rtls_enabled(void);

/*
 * What rtls_configure would do, without swapping anything in: when TLS is
 * on, whether the files load (CA, certificate, its key): RL_ERR and *cause
 * naming the field and the file when not; a warning for each file holding
 * an expired certificate.  For ratelimitd -t.
 */
int rtls_check(const struct rl_redis_conf *r, char **cause) RL_WUR;

/* Forget the settings (process exit: keeps leak checkers quiet). */
void rtls_shutdown(void);

/* ---- for redis_tls_reload.c: settings loaded, then swapped in ---------------- */

struct rtls_settings {
    bool on;
    bool verify;
    struct ssl_ctx_st *ctx; /* NULL when off */
    /* server_name: every node is verified as it; "" when not given (each
     * is verified as the host it is reached by) */
    char name[RTLS_NAME_MAX];
    /* of the settings and the files' bytes: a reload that changes nothing
     * TLS needs no test handshake */
    unsigned char digest[RTLS_DIGEST_LEN];
};

/* The settings `r` asks for, loaded (warnings for expired certificates). */
int rtls_settings_load(const struct rl_redis_conf *r, struct rtls_settings *out,
                       char **cause) RL_WUR;
/* s differs from the settings in force. */
bool rtls_settings_changed(const struct rtls_settings *s);
/* Swap s in (it takes s->ctx); the old context goes when its last
 * connection being set up lets it go. */
void rtls_settings_install(struct rtls_settings *s);
void rtls_settings_clear(struct rtls_settings *s);

/* Verify ssl's peer as `name` (an address: its IP subjectAltName; a name is
 * also sent as SNI); NULL or "": no name checked.  False when it cannot be
 * set. */
bool rtls_peer_name(struct ssl_st *ssl, const char *name, bool verify);

/* ---- for redis_tls_bridge.c: sessions and their failures ---------------------- */

/* A client session under the settings in force (its own reference to them),
 * verified as server_name or else as `host`, the name or address the server
 * was reached by; NULL when TLS cannot start. */
struct ssl_st *rtls_session(const char *host);
/* A failure of the TLS setup with `peer`: the first since a connection last
 * worked is a warning, the retries after it debug lines. */
void rtls_failed(const char *peer, const char *reason);
/* A server answered over TLS: the next failure is news again. */
void rtls_worked(void);

#endif
