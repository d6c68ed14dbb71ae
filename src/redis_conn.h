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
 * - the handshake (AUTH, SELECT, ROLE, SCRIPT LOAD, FUNCTION LOAD) and what
 *   its replies mean.
 */
#ifndef RL_REDIS_CONN_H
#define RL_REDIS_CONN_H

#include <stdbool.h>
#include <stddef.h>
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
    const char *down_reason; /* static text: the last reason given */
    int was_ready;           /* a READY now is a reconnect */
    int announced_down;      /* "unavailable" logged since the last ready */
    const char *what;        /* the log's words: "redis", "redis cluster node" */
    const char *field;       /* and the field naming it: "redis", "node" */
};

/* Move to s (reason, when not NULL, replaces down_reason); `name` for the
 * log; `quiet`: no "unavailable" line (shutting down).  True when this
 * makes a connection ready: what the caller knew of the server is void. */
bool rconn_set_state(struct rconn_status *st, enum rconn_state s, const char *reason,
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
 * *out: a context connecting to ip:port (or to the Unix socket `path` when
 * not NULL), attached to evb, with `data` and both callbacks set.  Returns
 * NULL, or why no context could be made (static text: hiredis refused at
 * once, TLS could not start).  `host`: what ip was resolved from (over TLS,
 * the name the certificate must carry).
 */
const char *rconn_open(struct event_base *evb, const char *host, const char *ip, int port,
                       const char *path, void *data, redisConnectCallback *on_connect,
                       redisDisconnectCallback *on_disconnect, redisAsyncContext **out);

/* Who we are on a new connection.  Credentials are never logged. */
struct rconn_login {
    const char *username; /* NULL: AUTH <password> */
    const char *password; /* NULL: no AUTH */
    int db;               /* 0: no SELECT */
    int role;             /* RCONN_ROLE_*: must the server be a master */
};

#define RCONN_ROLE_NONE 0 /* not asked (Cluster: a replica answers MOVED) */
#define RCONN_ROLE_MUST 1 /* a server that cannot say it is a master is refused */
/* Asked, and a replica refused, but an ACL that denies ROLE (NOPERM) is no
 * reason to refuse a server: READONLY replies still tell a replica. */
#define RCONN_ROLE_IF_ALLOWED 2

/*
 * Error replies, logged once per distinct error with counts: the first one at
 * once, repeats as one line per RCONN_ERRLOG_REPEAT_MS while they go on, and a
 * last line with the total when a reply succeeds again (or the connection
 * ends).  Under OOM thousands of checks a second fail alike; the log gets a
 * few lines, /metrics counts every one (ratelimitd_redis_errors_total).
 */
#define RCONN_ERRLOG_SLOTS 4
#define RCONN_ERRLOG_TEXT 96
#define RCONN_ERRLOG_REPEAT_MS 10000

struct rconn_errlog {
    struct {
        char text[RCONN_ERRLOG_TEXT]; /* the error, cut: what makes it distinct */
        uint64_t count;               /* checks it answered since it first came */
        uint64_t logged;              /* of those, already in the log */
    } e[RCONN_ERRLOG_SLOTS];
    int64_t last_summary_us;
    int active; /* some slot in use */
};

/* ---- coalescing ---------------------------------------------------------------
 *
 * The checks of one event-loop pass, sent together (both backends: one call
 * per connection, or per hash slot): the first one added schedules the flush
 * behind the callbacks already active, so the other requests read in this
 * pass join it; the `max`-th flushes at once.  `flush` gets the items and
 * must copy them before it answers any: an answer runs a callback that may
 * add again.
 */
typedef void (*rconn_flush_fn)(void *owner, void *const *items, size_t n);

struct rconn_queue {
    void **items;
    size_t n, max;
    struct event *ev;
    rconn_flush_fn flush;
    void *owner;
};

void rconn_queue_init(struct rconn_queue *q, struct event_base *evb, size_t max,
                      rconn_flush_fn flush, void *owner);
void rconn_queue_add(struct rconn_queue *q, void *item);
/* The items still queued are the owner's to answer and free first. */
void rconn_queue_free(struct rconn_queue *q);

/* ---- the connection object ---------------------------------------------------
 *
 * One connection to one Redis server, as both backends keep them (the
 * standalone/Sentinel backend one per worker, the Cluster backend one per
 * node): name resolution, connect and handshake under connect_timeout,
 * reconnect with backoff, state and its log lines, error replies' log, and
 * the replies owed: every command goes through rconn_send/rconn_sendf and its
 * callback calls rconn_replied, so the connection knows how many replies it
 * is owed and, replies coming back in order, by when the oldest one should
 * have come (the deadline ring: rconn_stalled).  The owner embeds it, gets
 * hiredis callbacks with ac->data pointing at it, and hears of it through
 * hooks.
 */
struct rconn;

/* A reply owed is presumed lost (a hung server, a dead path, a server that
 * cannot keep up) past its own deadline, never sooner than this or the
 * connect timeout, so one slow script does not cost the connection. */
#define RCONN_STALL_MIN_MS 1000
#define RCONN_HEARTBEAT_MS 250
#define RCONN_PROBE_MS 1000

struct rconn_hooks {
    /* Where to connect, for each attempt: call rconn_connect_host() or
     * rconn_fail().  NULL: the host, port or path given at init. */
    void (*locate)(struct rconn *c);
    /* The connect deadline passed while locate's question was out: give it
     * up and return true (false: there was none). */
    bool (*abandon)(struct rconn *c);
    /* The handshake is done (`again`: not the first time). */
    void (*ready)(struct rconn *c, int again);
    /* An attempt failed or the connection ended (c->ac is NULL now, every
     * callback of it has run); a reconnect is scheduled. */
    void (*down)(struct rconn *c);
};

struct rconn_conf {
    struct event_base *evb;
    struct evdns_base **dns; /* the owner's resolver, made at first use */
    const char *host;        /* NULL with locate */
    int port;
    const char *path;         /* a Unix socket instead */
    const char *name;         /* for the log */
    const char *what, *field; /* the log's words: "redis", "redis" */
    struct rconn_login login; /* strings borrowed for c's life */
    int64_t connect_timeout_ms;
    unsigned max_pending; /* replies owed at most: rconn_send refuses more */
    /* The heartbeat: every RCONN_HEARTBEAT_MS a connection whose oldest reply
     * is overdue is dropped, and every RCONN_PROBE_MS, busy or idle, it is
     * asked ROLE (PING when login.role is NONE or an ACL denies ROLE): a hung
     * server is noticed with no request waiting, and a master demoted under
     * load where every check is a denial (a script that only reads runs on a
     * replica too, answering from its stale copy). */
    int heartbeat;
    const struct rconn_hooks *hooks;
    void *owner;
};

struct rconn {
    redisAsyncContext *ac; /* NULL while not connected */
    struct rconn_status st;
    struct rconn_errlog errs;
    void *owner;
    unsigned pending; /* replies hiredis still owes on ac */
    /* The handshake loaded the function library: calls are FCALLs.  0: the
     * server has no FUNCTION (Redis 6, a renamed command, an ACL, OOM at
     * connect time): EVALSHA. */
    int functions;
    int64_t last_reply_us;
    /* private */
    struct rconn_conf conf;
    char *host; /* this attempt's, from locate */
    int port;
    struct rconn_lookup *lookup;
    struct event *retry_ev;   /* reconnect after backoff */
    struct event *connect_ev; /* connect/handshake deadline */
    struct event *drop_ev;    /* drop, off every callback */
    const char *drop_reason;
    int drop_was_ready; /* the drop is news for the log */
    int64_t backoff_ms;
    struct event *heartbeat_ev;
    int probe_out, probe_plain; /* a probe waits for its reply; PING, not ROLE */
    int64_t last_probe_us;
    int functions_noted; /* the fallback to EVALSHA was logged */
    int reloading;       /* a FUNCTION LOAD after "not found" is out */
    int64_t *sent;       /* deadline ring: by when each reply is due */
    unsigned sent_head, sent_cap;
    int closing;
};

void rconn_init(struct rconn *c, const struct rconn_conf *conf);
/* The first attempt: CONNECTING from now on. */
void rconn_start(struct rconn *c);
/* From locate: connect to host (a name is resolved) and port. */
void rconn_connect_host(struct rconn *c, const char *host, int port);
/* From locate: this attempt failed (why: static). */
void rconn_fail(struct rconn *c, const char *why);
/* Queue a command (RESP bytes, or printf-style), owed by `wait_ms` (never
 * sooner than a second or connect_timeout).  RL_ERR when not connected, past
 * max_pending or refused by hiredis. */
int rconn_send(struct rconn *c, redisCallbackFn *fn, void *priv, int64_t wait_ms,
               const char *cmd, size_t len);
int rconn_sendf(struct rconn *c, redisCallbackFn *fn, void *priv, const char *fmt, ...);
/* The commands sent between these two written by the second, at once,
 * rather than at the end of the pass (redis_ev.h: redis_ev_hold). */
void rconn_hold(struct rconn *c);
void rconn_release(struct rconn *c);
/* Every callback of a command sent calls this first: ac and reply as given. */
void rconn_replied(struct rconn *c, const redisAsyncContext *ac, const void *reply);
/* The oldest reply owed is overdue: the server hangs, or cannot keep up. */
bool rconn_stalled(const struct rconn *c, int64_t now_us);
/* Down now (checks fail fast), the context freed from a fresh stack, then
 * reconnect: for a hung server, a replica, a master Sentinel moved away. */
void rconn_drop(struct rconn *c, const char *why);
/* The end: every callback of ac runs now with NULL; no hook runs after. */
void rconn_close(struct rconn *c);

/*
 * An error reply to a script call from c's current context `ac` that says
 * the server forgot the script (NOSCRIPT: a restart, SCRIPT FLUSH) or the
 * function library ("Function not found": FUNCTION FLUSH, FLUSHALL, a
 * failover to a server that never had it).  True when the caller should
 * send the call again once as EVAL (the whole text: it runs whichever was
 * forgotten, and caches the script); for a lost library a FUNCTION LOAD is
 * queued first, once, so later calls are FCALLs again (or EVALSHAs, when the
 * server now refuses it).  Counted in /metrics as kind "noscript".
 */
bool rconn_script_missing(struct rconn *c, const redisAsyncContext *ac, const char *err);

/*
 * The error replies that say this server cannot run checks for now, whatever
 * the check: a replica (READONLY, e.g. a master demoted by a failover, or a
 * URL naming a replica), a replica without its master (MASTERDOWN), a server
 * loading its data set (LOADING).  The connection is then as good as lost:
 * dropped, the server named again (DNS, Sentinel, the slot map) and the
 * backend not ready meanwhile.  Returns the static reason, or NULL.
 */
const char *rconn_unusable(const char *err);

/* What a check answered by the error reply `err` alone says (static text,
 * naming the error's code when it is one we know). */
const char *rconn_error_text(const char *err);

/* Whether the error reply `err` has the code `code` ("MOVED 3999 ...":
 * "MOVED"). */
bool rconn_error_is(const char *err, const char *code);

/* Error replies from Redis to the check script, by kind (rconn_error tells
 * them apart), counted per check they answered:
 * ratelimitd_redis_errors_total. */
enum rl_redis_error {
    RL_RERR_OOM = 0,
    RL_RERR_READONLY,
    RL_RERR_MASTERDOWN,
    RL_RERR_LOADING,
    RL_RERR_BUSY,
    RL_RERR_NOSCRIPT,
    RL_RERR_WRONGTYPE,
    RL_RERR_CLUSTER,
    RL_RERR_BAD_REPLY,
    RL_RERR_OTHER,
    RL_RERR_COUNT
};

/* An error reply `msg` that answered `nchecks` checks of the server `name`
 * (st names it in the log).  Counted in /metrics by kind. */
void rconn_error(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
                 const char *msg, size_t nchecks);
/* Not an error reply: a script answer we could not read (`why`, static). */
void rconn_bad_reply(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
                     const char *why, size_t nchecks);
/* A reply that was no error, or the connection's end: the errors seen since
 * the last such call are over, and their totals logged. */
void rconn_errlog_end(struct rconn_errlog *el, const struct rconn_status *st,
                      const char *name);

/* Process-wide totals for /metrics (metrics.c reads them, from any thread):
 * the checks answered by an error reply of this kind, and the connections
 * that became ready again after having been ready
 * (ratelimitd_backend_reconnects_total). */
uint64_t rconn_errors_total(enum rl_redis_error kind);
uint64_t rconn_reconnects_total(void);

#endif
