/*
 * redis_conn.h — what opening a connection to one Redis server takes, for
 * both Redis backends: backend_redis.c (one server, perhaps named by
 * Sentinel) and backend_cluster.c (one connection per master).  Each backend
 * keeps its own connection states; this holds what they would otherwise
 * write twice:
 *
 * - name resolution that never blocks the event loop (hiredis would call a
 *   blocking getaddrinfo), with lookups that can be abandoned;
 * - a hiredis async context opened and attached to the loop in one call;
 * - reconnect backoff, exponential with jitter;
 * - the handshake (AUTH, SELECT, ROLE, SCRIPT LOAD) and what its replies mean.
 */
#ifndef RL_REDIS_CONN_H
#define RL_REDIS_CONN_H

#include <stdint.h>
#include <sys/time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

struct event_base;
struct evdns_base;

/*
 * A connection's state, and the log lines it owes: one per change between
 * usable and unusable, never one per retry (a Redis down for an hour writes
 * two lines, not thousands).
 */
enum rconn_state { RCONN_DOWN, RCONN_CONNECTING, RCONN_HANDSHAKE, RCONN_READY };

struct rconn_status {
    enum rconn_state state;
    const char *down_reason;    /* static text: the last reason given */
    int was_ready;              /* a READY now is a reconnect */
    int announced_down;         /* "unavailable" logged since the last ready */
    const char *what;           /* the log's words: "redis", "redis cluster node" */
    const char *field;          /* and the field naming it: "redis", "node" */
};

/* Move to s (reason, when not NULL, replaces down_reason); `name` for the
 * log; `quiet`: no "unavailable" line (shutting down).  Returns 1 when this
 * makes a connection ready: what the caller knew of the server is void. */
int rconn_set_state(struct rconn_status *st, enum rconn_state s, const char *reason,
                    const char *name, int quiet);

#define RCONN_BACKOFF_MIN_MS 50
#define RCONN_BACKOFF_MAX_MS 5000

/*
 * The wait before the next attempt, drawn from the upper half of *backoff_ms
 * (full jitter there: instances that lost Redis together do not come back
 * together); *backoff_ms then doubles, up to RCONN_BACKOFF_MAX_MS.  Start it
 * at RCONN_BACKOFF_MIN_MS, and again after each success.
 */
struct timeval rconn_backoff(int64_t *backoff_ms);

/*
 * An address for `host`: `cb` gets the first one as text, or NULL and a
 * static reason.  A literal address is handed on before this returns; a name
 * is resolved with evdns on `evb` (*dns, the caller's resolver, is made at
 * first use; free it with rconn_dns_free).  Returns the lookup while it is
 * pending, for rconn_abandon; NULL when cb has run already.
 */
typedef void (*rconn_resolved_cb)(void *arg, const char *ip, const char *why);
struct rconn_lookup;

struct rconn_lookup *rconn_resolve(struct evdns_base **dns, struct event_base *evb,
                                   const char *host, rconn_resolved_cb cb, void *arg);
/* cb will not run for it; the lookup ends on its own and frees itself. */
void rconn_abandon(struct rconn_lookup *l);
void rconn_dns_free(struct evdns_base *dns);

/*
 * A context connecting to ip:port (or to the Unix socket `path` when not
 * NULL), attached to evb, with `data` and both callbacks set; NULL and a
 * static reason when hiredis refused at once.
 */
redisAsyncContext *rconn_open(struct event_base *evb, const char *ip, int port,
                              const char *path, void *data,
                              redisConnectCallback *on_connect,
                              redisDisconnectCallback *on_disconnect, const char **why);

/* Who we are on a new connection.  Credentials are never logged. */
struct rconn_login {
    const char *username;       /* NULL: AUTH <password> */
    const char *password;       /* NULL: no AUTH */
    int db;                     /* 0: no SELECT */
    int role;                   /* ask ROLE: the server must be a master */
};

/* How the caller queues one command and counts the reply it is owed. */
typedef int (*rconn_send_fn)(void *owner, redisCallbackFn *fn, void *priv,
                             const char *fmt, ...);

/*
 * Queue the handshake through `send`: AUTH, SELECT and ROLE as `login` asks,
 * then SCRIPT LOAD of the check script.  Each reply goes to `fn` with the
 * step's name as privdata, for rconn_step.  RL_ERR when a command could not
 * be queued.
 */
int rconn_handshake(const struct rconn_login *login, rconn_send_fn send, void *owner,
                    redisCallbackFn *fn);

enum rconn_step {
    RCONN_STEP_WAIT,            /* fine; more replies to come */
    RCONN_STEP_READY,           /* the last one: the connection is ready */
    RCONN_STEP_FAILED           /* *why says what failed (static) */
};

/* What the reply `r` to handshake step `step` means; `who` names the server
 * in the log line of a script digest we did not expect. */
enum rconn_step rconn_step(const redisReply *r, const char *step, const char *who,
                           const char **why);

#endif
