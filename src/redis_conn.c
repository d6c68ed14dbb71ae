/* redis_conn.c — see redis_conn.h. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/async.h>

#include "log.h"
#include "lua_scripts.h"
#include "redis_conn.h"
#include "redis_ev.h"
#include "redis_reply.h"
#include "redis_tls.h"
#include "redis_tls_bridge.h"
#include "util.h"

/* Process-wide, for /metrics: bumped by every worker, relaxed. */
static uint64_t reconnects;
static uint64_t redis_errors[RL_RERR_COUNT];

static void
count_error(enum rl_redis_error kind, size_t nchecks)
{
    __atomic_add_fetch(&redis_errors[kind], (uint64_t)nchecks, __ATOMIC_RELAXED);
}

uint64_t
rconn_errors_total(enum rl_redis_error kind)
{
    return __atomic_load_n(&redis_errors[kind], __ATOMIC_RELAXED);
}

uint64_t
rconn_reconnects_total(void)
{
    return __atomic_load_n(&reconnects, __ATOMIC_RELAXED);
}

static const char *const state_names[] = {"down", "connecting", "handshake", "ready"};

bool
rconn_set_state(struct rconn_status *st, enum rconn_state s, const char *reason,
                const char *name, int quiet)
{
    bool became_ready = false;

    if (reason != NULL)
        st->down_reason = reason;
    if (st->state == s)
        return false;
    if (s == RCONN_READY) {
        log_info(LOG_MSGJ(st->what, " ready", NULL), LOG_S(st->field, name));
        if (st->was_ready)
            __atomic_add_fetch(&reconnects, 1, __ATOMIC_RELAXED);
        st->was_ready = 1;
        st->announced_down = 0;
        became_ready = true;
    } else if (s == RCONN_DOWN && !st->announced_down && !quiet) {
        log_warn(LOG_MSGJ(st->what, " unavailable", NULL), LOG_S(st->field, name),
                 LOG_Q("reason", st->down_reason ? st->down_reason : ""));
        st->announced_down = 1;
    }
    log_debug(LOG_MSGJ(st->what, " state", NULL), LOG_S(st->field, name),
              LOG_S("from", state_names[st->state]), LOG_S("to", state_names[s]));
    st->state = s;
    return became_ready;
}

struct timeval
rconn_backoff(int64_t *backoff_ms)
{
    int64_t b = *backoff_ms > 0 ? *backoff_ms : RCONN_BACKOFF_MIN_MS;
    int64_t d = b / 2 + random() % (b / 2 + 1);
    struct timeval tv = {d / 1000, (d % 1000) * 1000};

    *backoff_ms = b * 2 > RCONN_BACKOFF_MAX_MS ? RCONN_BACKOFF_MAX_MS : b * 2;
    return tv;
}

/* ---- resolution ------------------------------------------------------------- */

/* Outlives an abandon: libevent calls back even after a cancel. */
struct rconn_lookup {
    rconn_resolved_cb cb; /* NULL once abandoned */
    void *arg;
    struct evdns_getaddrinfo_request *req;
};

static struct evdns_base *
resolver(struct evdns_base **dns, struct event_base *evb)
{
    if (*dns == NULL)
        *dns = evdns_base_new(evb, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                       EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (*dns == NULL) {
        /* no resolv.conf at all: /etc/hosts alone still names localhost */
        *dns = evdns_base_new(evb, 0);
        if (*dns != NULL)
            evdns_base_load_hosts(*dns, NULL);
    }
    return *dns;
}

static void
on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    struct rconn_lookup *l = arg;
    rconn_resolved_cb cb = l->cb;
    void *cb_arg = l->arg;
    char ip[INET6_ADDRSTRLEN] = "";

    free(l);
    if (cb == NULL || result != 0 || res == NULL) {
        if (res != NULL)
            evutil_freeaddrinfo(res);
        if (cb != NULL)
            cb(cb_arg, NULL, evutil_gai_strerror(result));
        return;
    }
    if (res->ai_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr, ip,
                  sizeof(ip));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)res->ai_addr)->sin6_addr, ip,
                  sizeof(ip));
    evutil_freeaddrinfo(res);
    cb(cb_arg, ip, NULL);
}

struct rconn_lookup *
rconn_resolve(struct evdns_base **dns, struct event_base *evb, const char *host,
              rconn_resolved_cb cb, void *arg)
{
    struct in6_addr a6;
    struct evutil_addrinfo hints;
    struct rconn_lookup *l;
    struct evdns_getaddrinfo_request *req;

    if (inet_pton(AF_INET, host, &a6) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
        cb(arg, host, NULL);
        return NULL;
    }
    if (resolver(dns, evb) == NULL) {
        cb(arg, NULL, "no resolver");
        return NULL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    l = xcalloc(1, sizeof(*l));
    l->cb = cb;
    l->arg = arg;
    req = evdns_getaddrinfo(*dns, host, NULL, &hints, on_resolved, l);
    if (req == NULL)
        return NULL; /* answered at once (/etc/hosts): l is gone */
    l->req = req;
    return l;
}

void
rconn_abandon(struct rconn_lookup *l)
{
    if (l == NULL)
        return;
    l->cb = NULL;
    evdns_getaddrinfo_cancel(l->req);
}

void
rconn_dns_free(struct evdns_base *dns)
{
    if (dns != NULL)
        evdns_base_free(dns, 0);
}

/* ---- connection ------------------------------------------------------------- */

const char *
rconn_open(struct event_base *evb, const char *host, const char *ip, int port,
           const char *path, void *data, redisConnectCallback *on_connect,
           redisDisconnectCallback *on_disconnect, redisAsyncContext **out)
{
    redisAsyncContext *ac;
    const char *why;

    *out = NULL;
    /* TLS: hiredis speaks to a bridge (redis_tls_bridge.h), attached already */
    if (path == NULL && rtls_enabled()) {
        if ((why = rtls_bridge_connect(evb, host, ip, port, &ac)) != NULL)
            return why;
        goto attached;
    }
    ac = path != NULL ? redisAsyncConnectUnix(path) : redisAsyncConnect(ip, port);
    if (ac == NULL || ac->err) {
        log_debug(LOG_MSG("redis connect failed"),
                  LOG_HP("addr", path != NULL ? path : ip, port),
                  LOG_Q("error", ac != NULL ? ac->errstr : "out of memory"));
        if (ac != NULL)
            redisAsyncFree(ac);
        return "connect failed";
    }
    if (redis_ev_attach(ac, evb) != RL_OK) {
        redisAsyncFree(ac);
        return "connect failed";
    }
attached:
    redis_reply_attach(ac->c.reader);
    ac->data = data;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    *out = ac;
    return NULL;
}

/* ---- error replies ---------------------------------------------------------- */

#define FUNCTION_NOT_FOUND "ERR Function not found"

/* The error replies we know, by their code: the metric's kind, what a check
 * they answer alone says, and whether the server can serve checks at all. */
struct error_code {
    const char *code;
    enum rl_redis_error kind;
    const char *unusable; /* not NULL: the connection cannot serve checks */
    const char *answer;   /* NULL: "error reply from the check script" */
};

static const struct error_code error_codes[] = {
    {FUNCTION_NOT_FOUND, RL_RERR_NOSCRIPT, NULL, NULL},
    {"READONLY", RL_RERR_READONLY, "redis is a replica (READONLY)",
     "READONLY: redis is a replica"},
    {"MASTERDOWN", RL_RERR_MASTERDOWN, "redis replica without its master (MASTERDOWN)", NULL},
    {"LOADING", RL_RERR_LOADING, "redis is loading its data set (LOADING)", NULL},
    {"OOM", RL_RERR_OOM, NULL, "OOM: redis is out of memory (maxmemory)"},
    {"BUSY", RL_RERR_BUSY, NULL, NULL},
    {"NOSCRIPT", RL_RERR_NOSCRIPT, NULL, "NOSCRIPT"},
    {"WRONGTYPE", RL_RERR_WRONGTYPE, NULL,
     "WRONGTYPE: a key of the check holds a value of the wrong type"},
    {"MOVED", RL_RERR_CLUSTER, NULL, NULL},
    {"ASK", RL_RERR_CLUSTER, NULL, NULL},
    /* the script's: Redis TIME outside the periods the daemon sent */
    {"CLOCK:", RL_RERR_OTHER, NULL,
     "CLOCK: Redis's clock is more than a calendar period from the daemon's"},
    {"TRYAGAIN", RL_RERR_CLUSTER, NULL, NULL},
    {"CLUSTERDOWN", RL_RERR_CLUSTER, NULL, NULL},
};

bool
rconn_error_is(const char *err, const char *code)
{
    size_t n = strlen(code);

    return strncmp(err, code, n) == 0 && (err[n] == ' ' || err[n] == '\0');
}

/* The entry for the error code that starts err, or NULL. */
static const struct error_code *
error_code(const char *err)
{
    for (size_t i = 0; i < RL_ARRAY_LEN(error_codes); i++)
        if (rconn_error_is(err, error_codes[i].code))
            return &error_codes[i];
    return NULL;
}

const char *
rconn_unusable(const char *err)
{
    const struct error_code *e = error_code(err);

    return e != NULL ? e->unusable : NULL;
}

const char *
rconn_error_text(const char *err)
{
    const struct error_code *e = error_code(err);

    return e != NULL && e->answer != NULL ? e->answer : "error reply from the check script";
}

/* Log the repeats of every slot not logged yet; `last`: the run is over. */
static void
errlog_summary(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
               int last)
{
    for (size_t i = 0; i < RCONN_ERRLOG_SLOTS; i++) {
        if (el->e[i].count == 0)
            continue;
        if (el->e[i].count != el->e[i].logged)
            log_warn(LOG_MSGJ(st->what, " errors ", last ? "ended" : "go on"),
                     LOG_S(st->field, name), LOG_Q("error", el->e[i].text),
                     LOG_U("count", el->e[i].count));
        el->e[i].logged = el->e[i].count;
        if (last)
            el->e[i].count = el->e[i].logged = 0;
    }
    if (last)
        el->active = 0;
    el->last_summary_us = now_monotonic_us();
}

static void
errlog_add(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
           const char *text, size_t nchecks)
{
    size_t i, free_slot = RCONN_ERRLOG_SLOTS;

    for (i = 0; i < RCONN_ERRLOG_SLOTS; i++) {
        if (el->e[i].count == 0 && free_slot == RCONN_ERRLOG_SLOTS)
            free_slot = i;
        if (el->e[i].count > 0 && strncmp(el->e[i].text, text, RCONN_ERRLOG_TEXT - 1) == 0)
            break;
    }
    if (i == RCONN_ERRLOG_SLOTS) {
        if (free_slot == RCONN_ERRLOG_SLOTS) {
            /* more distinct errors than slots: close this run, start another */
            errlog_summary(el, st, name, 1);
            free_slot = 0;
        }
        i = free_slot;
        snprintf(el->e[i].text, sizeof(el->e[i].text), "%s", text);
        /* the log's quotes must stay balanced */
        for (char *c = el->e[i].text; *c != '\0'; c++)
            if (*c == '"' || *c == '\n' || *c == '\r')
                *c = '\'';
        log_warn(LOG_MSGJ(st->what, " error", NULL), LOG_S(st->field, name),
                 LOG_Q("error", el->e[i].text), LOG_U("checks", nchecks));
        if (!el->active)
            el->last_summary_us = now_monotonic_us();
        el->active = 1;
        el->e[i].count = el->e[i].logged = nchecks;
        return;
    }
    el->e[i].count += nchecks;
    if (now_monotonic_us() - el->last_summary_us >= RCONN_ERRLOG_REPEAT_MS * 1000LL)
        errlog_summary(el, st, name, 0);
}

void
rconn_error(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
            const char *msg, size_t nchecks)
{
    const struct error_code *e = error_code(msg);

    count_error(e != NULL ? e->kind : RL_RERR_OTHER, nchecks);
    /* NOSCRIPT is answered by sending the script (a restart, SCRIPT FLUSH),
     * a redirection by following it: counted, nothing for an operator to do */
    if (e != NULL && (e->kind == RL_RERR_NOSCRIPT || e->kind == RL_RERR_CLUSTER))
        return;
    errlog_add(el, st, name, msg, nchecks);
}

void
rconn_bad_reply(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
                const char *why, size_t nchecks)
{
    count_error(RL_RERR_BAD_REPLY, nchecks);
    errlog_add(el, st, name, why, nchecks);
}

void
rconn_errlog_end(struct rconn_errlog *el, const struct rconn_status *st, const char *name)
{
    if (el->active)
        errlog_summary(el, st, name, 1);
}

/* ---- coalescing -------------------------------------------------------------- */

static void
queue_flush(struct rconn_queue *q)
{
    size_t n = q->n;

    if (n == 0)
        return;
    q->n = 0;
    q->flush(q->owner, q->items, n);
}

static void
on_queue(evutil_socket_t fd, short what, void *arg)
{
    queue_flush(arg);
    (void)fd;
    (void)what;
}

void
rconn_queue_init(struct rconn_queue *q, struct event_base *evb, size_t max,
                 rconn_flush_fn flush, void *owner)
{
    memset(q, 0, sizeof(*q));
    q->items = xcalloc(max, sizeof(*q->items));
    q->max = max;
    q->flush = flush;
    q->owner = owner;
    q->ev = event_new(evb, -1, 0, on_queue, q);
}

void
rconn_queue_add(struct rconn_queue *q, void *item)
{
    /* event_active puts the flush behind the callbacks already active */
    q->items[q->n++] = item;
    if (q->n == q->max)
        queue_flush(q);
    else if (q->n == 1)
        event_active(q->ev, EV_TIMEOUT, 1);
}

void
rconn_queue_free(struct rconn_queue *q)
{
    if (q->ev != NULL)
        event_free(q->ev);
    free(q->items);
    memset(q, 0, sizeof(*q));
}

/* ---- the connection object -------------------------------------------------- */

static void start_attempt(struct rconn *c);

/* When waiting for a reply sent now stops making sense: its own deadline,
 * never sooner than RCONN_STALL_MIN_MS or the connect timeout. */
static int64_t
due_us(const struct rconn *c, int64_t now_us, int64_t wait_ms)
{
    if (wait_ms < RCONN_STALL_MIN_MS)
        wait_ms = RCONN_STALL_MIN_MS;
    if (wait_ms < c->conf.connect_timeout_ms)
        wait_ms = c->conf.connect_timeout_ms;
    return now_us + wait_ms * 1000;
}

static void
set_state(struct rconn *c, enum rconn_state s, const char *reason)
{
    int again = c->st.was_ready;

    if (s == RCONN_DOWN)
        rconn_errlog_end(&c->errs, &c->st, c->conf.name);
    if (rconn_set_state(&c->st, s, reason, c->conf.name, c->closing) &&
        c->conf.hooks->ready != NULL)
        c->conf.hooks->ready(c, again);
}

static void
schedule_reconnect(struct rconn *c)
{
    struct timeval tv;

    if (c->closing || evtimer_pending(c->retry_ev, NULL))
        return;
    tv = rconn_backoff(&c->backoff_ms);
    evtimer_add(c->retry_ev, &tv);
}

/* The attempt or the connection is over (c->ac is not ours any more): DOWN,
 * the owner told, the next attempt scheduled. */
static void
went_down(struct rconn *c, const char *why)
{
    evtimer_del(c->connect_ev);
    c->pending = 0; /* the last connection's callbacks all ran */
    c->reloading = 0;
    c->sent_head = 0;
    set_state(c, RCONN_DOWN, why);
    if (c->closing)
        return;
    schedule_reconnect(c);
    if (c->conf.hooks->down != NULL)
        c->conf.hooks->down(c);
}

/* Not from one of ac's callbacks: every pending one runs now with NULL. */
static void
free_ac(struct rconn *c)
{
    redisAsyncContext *ac = c->ac;

    if (ac == NULL)
        return;
    c->ac = NULL;
    redisAsyncFree(ac);
}

/*
 * Redis 7's answer to FUNCTION LOAD of a library name it holds.  Our name is
 * the hash of our code, so that library is ours byte for byte: loaded, as if
 * this load had done it.  Matched whole (name included), since another error
 * that merely starts alike must still mean EVALSHA.
 */
static bool
library_exists(const redisReply *r)
{
    static const char pre[] = "ERR Library '", post[] = "' already exists";
    size_t n = strlen(rl_lua_check_fn);

    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, pre, sizeof(pre) - 1) == 0 &&
           strncmp(r->str + sizeof(pre) - 1, rl_lua_check_fn, n) == 0 &&
           strcmp(r->str + sizeof(pre) - 1 + n, post) == 0;
}

/* The reply to FUNCTION LOAD (without REPLACE: a library already there is
 * ours, and replacing it would replicate and log its ~43 KB on every
 * handshake of every daemon): FCALL from now on when it names our library
 * or says it exists, else EVALSHA (said once per connection object: a Redis
 * 6 is no news on every reconnect). */
static void
functions_loaded(struct rconn *c, const redisReply *r)
{
    c->functions = (r->type == REDIS_REPLY_STRING && strcmp(r->str, rl_lua_check_fn) == 0) ||
                   library_exists(r);
    if (c->functions || c->functions_noted)
        return;
    c->functions_noted = 1;
    log_info(
        LOG_MSGJ(c->conf.what, ": no function library, calls are EVALSHA", NULL),
        LOG_S(c->conf.field, c->conf.name),
        LOG_QN("reply",
               r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STRING ? r->str : "",
               120));
}

/* ---- handshake -------------------------------------------------------------- */

/*
 * Queue the handshake: AUTH, SELECT and ROLE as the login asks, then SCRIPT
 * LOAD of the check script and FUNCTION LOAD of the same as a library (its
 * reply says whether calls can be FCALLs).  Each reply goes to `fn` with the
 * step's name as privdata, for handshake_step; the commands are timed by the
 * same ring as every other.  RL_ERR when a command could not be queued.
 */
static int
handshake_send(struct rconn *c, redisCallbackFn *fn)
{
    const struct rconn_login *login = &c->conf.login;
    int rc = RL_OK;

    if (login->password != NULL && login->username != NULL)
        rc |= rconn_sendf(c, fn, (void *)"auth", "AUTH %s %s", login->username,
                          login->password);
    else if (login->password != NULL)
        rc |= rconn_sendf(c, fn, (void *)"auth", "AUTH %s", login->password);
    if (login->db != 0)
        rc |= rconn_sendf(c, fn, (void *)"select", "SELECT %d", login->db);
    if (login->role == RCONN_ROLE_MUST)
        rc |= rconn_sendf(c, fn, (void *)"role", "ROLE");
    else if (login->role == RCONN_ROLE_IF_ALLOWED)
        rc |= rconn_sendf(c, fn, (void *)"role-if-allowed", "ROLE");
    rc |= rconn_sendf(c, fn, (void *)"script", "SCRIPT LOAD %b", rl_lua_check,
                      rl_lua_check_len);
    rc |= rconn_sendf(c, fn, (void *)"function", "FUNCTION LOAD %b", rl_lua_check_lib,
                      rl_lua_check_lib_len);
    return rc == RL_OK ? RL_OK : RL_ERR;
}

/*
 * The handshake read reply by reply (an incremental reader, rl.h): the reply
 * `r` to step `step` leaves more to come, ends it (the connection is ready),
 * or fails it (*why, static).
 */
static enum rl_parse
handshake_step(const struct rconn *c, const redisReply *r, const char *step, const char **why)
{
    /* the last step, and never fatal: a server without FUNCTION runs EVALSHA */
    if (strcmp(step, "function") == 0)
        return RL_PARSE_DONE;
    if (r->type == REDIS_REPLY_ERROR && strcmp(step, "role-if-allowed") == 0 &&
        strncmp(r->str, "NOPERM", 6) == 0)
        return RL_PARSE_MORE;
    if (r->type == REDIS_REPLY_ERROR) {
        *why = "handshake failed";
        return RL_PARSE_ERR;
    }
    if (strncmp(step, "role", 4) == 0 && (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                                          r->element[0]->type != REDIS_REPLY_STRING ||
                                          strcmp(r->element[0]->str, "master") != 0)) {
        /* a sentinel's answer can be stale: only a master takes writes */
        *why = "not a master";
        return RL_PARSE_ERR;
    }
    if (strcmp(step, "script") != 0)
        return RL_PARSE_MORE;
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, rl_lua_check_sha) != 0)
        log_error(LOG_MSG("SCRIPT LOAD returned an unexpected digest"),
                  LOG_S("redis", c->conf.name));
    return RL_PARSE_MORE;
}

static void
on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rconn *c = ac->data;
    redisReply *r = reply;
    const char *step = privdata, *why;

    rconn_replied(c, ac, reply);
    if (r == NULL || c->ac != ac || c->st.state != RCONN_HANDSHAKE)
        return;
    if (strcmp(step, "function") == 0)
        functions_loaded(c, r);
    switch (handshake_step(c, r, step, &why)) {
    case RL_PARSE_MORE: break;
    case RL_PARSE_ERR:
        if (r->type == REDIS_REPLY_ERROR) /* what the server said, never the credentials */
            log_error(LOG_MSGJ(c->conf.what, " handshake failed", NULL),
                      LOG_S(c->conf.field, c->conf.name), LOG_S("step", step),
                      LOG_QN("error", r->str, 200));
        else if (!c->st.announced_down)
            log_warn(LOG_MSGJ(c->conf.what, " is not a master, retrying", NULL),
                     LOG_S(c->conf.field, c->conf.name));
        rconn_drop(c, why);
        break;
    case RL_PARSE_DONE:
        evtimer_del(c->connect_ev);
        c->backoff_ms = RCONN_BACKOFF_MIN_MS;
        c->last_reply_us = now_monotonic_us();
        set_state(c, RCONN_READY, NULL);
        break;
    }
}

static void
on_connect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    struct rconn *c = ac->data;

    if (c->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this returns */
        log_debug(LOG_MSGJ(c->conf.what, " connect failed", NULL),
                  LOG_S(c->conf.field, c->conf.name), LOG_Q("error", ac->errstr));
        c->ac = NULL;
        went_down(c, "connection refused");
        return;
    }
    c->last_reply_us = now_monotonic_us();
    set_state(c, RCONN_HANDSHAKE, NULL);
    /* a command not queued leaves the handshake to its deadline */
    (void)handshake_send(c, on_handshake);
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rconn *c = ac->data;

    /* hiredis frees the context after this returns.  A context we dropped
     * on purpose is no longer c->ac: whoever dropped it set the state. */
    if (c->ac != ac)
        return;
    c->ac = NULL;
    went_down(c, status == REDIS_OK ? "disconnected" : "connection lost");
}

static void
connect_ip(void *arg, const char *ip, const char *why)
{
    struct rconn *c = arg;

    c->lookup = NULL;
    if (ip == NULL) {
        log_debug(LOG_MSG("cannot resolve a host"), LOG_S(c->conf.field, c->conf.name),
                  LOG_Q("error", why));
        went_down(c, "cannot resolve the host");
        return;
    }
    c->pending = 0;
    c->sent_head = 0;
    why = rconn_open(c->conf.evb, c->host, ip, c->port, c->conf.path, c, on_connect,
                     on_disconnect, &c->ac);
    if (why != NULL)
        went_down(c, why);
}

void
rconn_connect_host(struct rconn *c, const char *host, int port)
{
    struct rconn_lookup *l;

    if (host != c->host) {
        free(c->host);
        c->host = xstrdup(host);
    }
    c->port = port;
    l = rconn_resolve(c->conf.dns, c->conf.evb, c->host, connect_ip, c);
    if (l != NULL)
        c->lookup = l; /* else connect_ip ran already */
}

void
rconn_fail(struct rconn *c, const char *why)
{
    went_down(c, why);
}

static void
start_attempt(struct rconn *c)
{
    struct timeval tv = {c->conf.connect_timeout_ms / 1000,
                         (c->conf.connect_timeout_ms % 1000) * 1000};

    set_state(c, RCONN_CONNECTING, NULL);
    evtimer_add(c->connect_ev, &tv);
    if (c->conf.hooks->locate != NULL)
        c->conf.hooks->locate(c);
    else if (c->conf.path != NULL)
        connect_ip(c, "", NULL);
    else
        rconn_connect_host(c, c->host, c->port);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    start_attempt(arg);
    (void)fd;
    (void)what;
}

static void
on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct rconn *c = arg;

    if (c->lookup != NULL) {
        rconn_abandon(c->lookup);
        c->lookup = NULL;
        log_debug(LOG_MSGJ(c->conf.what, " resolution timed out", NULL),
                  LOG_S(c->conf.field, c->conf.name));
        went_down(c, "resolve timeout");
    } else if (c->conf.hooks->abandon != NULL && c->conf.hooks->abandon(c)) {
        went_down(c, "no answer in time");
    } else if (c->ac != NULL && c->st.state != RCONN_READY) {
        log_debug(LOG_MSGJ(c->conf.what, " connect timed out", NULL),
                  LOG_S(c->conf.field, c->conf.name));
        /* a timer, not a hiredis callback: freeing here is safe */
        free_ac(c);
        went_down(c, "connect timeout");
    }
    (void)fd;
    (void)what;
}

static void
on_drop(evutil_socket_t fd, short what, void *arg)
{
    struct rconn *c = arg;

    if (c->ac == NULL)
        return;
    if (c->drop_was_ready)
        log_warn(LOG_MSGJ("dropping the ", c->conf.what, " connection"),
                 LOG_S(c->conf.field, c->conf.name), LOG_Q("reason", c->drop_reason),
                 LOG_U("pending", c->pending));
    /* Free, not Disconnect: Disconnect waits for replies a hung server will
     * never send.  Every pending callback runs now with NULL. */
    free_ac(c);
    went_down(c, c->drop_reason);
    (void)fd;
    (void)what;
}

void
rconn_drop(struct rconn *c, const char *why)
{
    if (c->ac == NULL || c->closing)
        return;
    c->drop_reason = why;
    c->drop_was_ready = c->st.state == RCONN_READY;
    /* checks that come before the drop runs fail fast */
    if (c->st.state != RCONN_DOWN)
        set_state(c, RCONN_DOWN, why);
    event_active(c->drop_ev, EV_TIMEOUT, 0);
}

/* A command queued on c: its deadline goes into the ring. */
static void
note_sent(struct rconn *c, int64_t wait_ms)
{
    int64_t now = now_monotonic_us(); /* one read for both */

    if (c->pending == 0)
        c->last_reply_us = now;
    c->sent[(c->sent_head + c->pending) % c->sent_cap] = due_us(c, now, wait_ms);
    c->pending++;
}

int
rconn_send(struct rconn *c, redisCallbackFn *fn, void *priv, int64_t wait_ms, const char *cmd,
           size_t len)
{
    if (c->ac == NULL || c->pending >= c->sent_cap ||
        redis_ev_command(c->ac, fn, priv, cmd, len) != RL_OK)
        return RL_ERR;
    note_sent(c, wait_ms);
    return RL_OK;
}

int
rconn_sendf(struct rconn *c, redisCallbackFn *fn, void *priv, const char *fmt, ...)
{
    va_list ap;
    int rc;

    if (c->ac == NULL || c->pending >= c->sent_cap)
        return RL_ERR;
    va_start(ap, fmt);
    rc = redisvAsyncCommand(c->ac, fn, priv, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK)
        return RL_ERR;
    note_sent(c, 0);
    return RL_OK;
}

void
rconn_hold(struct rconn *c)
{
    if (c->ac != NULL)
        redis_ev_hold(c->ac);
}

void
rconn_release(struct rconn *c)
{
    if (c->ac != NULL)
        redis_ev_release(c->ac);
}

void
rconn_replied(struct rconn *c, const redisAsyncContext *ac, const void *reply)
{
    /* a context given up: its count went with it */
    if (ac != c->ac || c->pending == 0)
        return;
    c->sent_head = (c->sent_head + 1) % c->sent_cap;
    c->pending--;
    if (reply != NULL)
        c->last_reply_us = now_monotonic_us();
}

bool
rconn_stalled(const struct rconn *c, int64_t now_us)
{
    return c->ac != NULL && c->pending > 0 && now_us > c->sent[c->sent_head];
}

static void
on_reload(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rconn *c = ac->data;

    rconn_replied(c, ac, reply);
    if (c->ac != ac)
        return;
    c->reloading = 0;
    if (reply != NULL)
        functions_loaded(c, reply);
    (void)privdata;
}

bool
rconn_script_missing(struct rconn *c, const redisAsyncContext *ac, const char *err)
{
    const struct error_code *e = error_code(err);

    if (e == NULL || e->kind != RL_RERR_NOSCRIPT)
        return false;
    if (strcmp(err, FUNCTION_NOT_FOUND) == 0 && c->ac == ac && !c->reloading &&
        rconn_sendf(c, on_reload, NULL, "FUNCTION LOAD %b", rl_lua_check_lib,
                    rl_lua_check_lib_len) == RL_OK)
        c->reloading = 1;
    return true;
}

static void
on_probe(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rconn *c = ac->data;
    redisReply *r = reply;

    rconn_replied(c, ac, reply);
    c->probe_out = 0;
    if (r == NULL || c->ac != ac)
        return;
    if (r->type == REDIS_REPLY_ERROR) {
        c->probe_plain = 1;
    } else if (c->conf.login.role != RCONN_ROLE_NONE && r->type == REDIS_REPLY_ARRAY &&
               r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
               strcmp(r->element[0]->str, "master") != 0 && c->st.state == RCONN_READY) {
        /* demoted: PING would still answer, checks would not */
        log_warn(LOG_MSGJ(c->conf.what, " is no longer a master", NULL),
                 LOG_S(c->conf.field, c->conf.name), LOG_SN("role", r->element[0]->str, 20));
        rconn_drop(c, "redis is no longer a master");
    }
    (void)privdata;
}

static void
on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    struct rconn *c = arg;
    int64_t now = now_monotonic_us();

    if (rconn_stalled(c, now)) {
        rconn_drop(c, "redis stalled");
    } else if (c->st.state == RCONN_READY && !c->probe_out &&
               now - c->last_probe_us > RCONN_PROBE_MS * 1000LL) {
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        static const char role[] = "*1\r\n$4\r\nROLE\r\n";
        const char *cmd = c->probe_plain || c->conf.login.role == RCONN_ROLE_NONE ? ping
                                                                                  : role;

        /* one at a time: a hung server gets no pile of them */
        if (rconn_send(c, on_probe, NULL, 0, cmd, sizeof(ping) - 1) == RL_OK)
            c->probe_out = 1;
        c->last_probe_us = now;
    }
    (void)fd;
    (void)what;
}

void
rconn_init(struct rconn *c, const struct rconn_conf *conf)
{
    memset(c, 0, sizeof(*c));
    c->conf = *conf;
    c->owner = conf->owner;
    c->host = conf->host != NULL ? xstrdup(conf->host) : NULL;
    c->port = conf->port;
    c->backoff_ms = RCONN_BACKOFF_MIN_MS;
    c->st.down_reason = "not connected yet";
    c->st.what = conf->what;
    c->st.field = conf->field;
    /* room for the handshake and a heartbeat besides max_pending requests */
    c->sent_cap = conf->max_pending + 16;
    c->sent = xcalloc(c->sent_cap, sizeof(*c->sent));
    c->retry_ev = evtimer_new(conf->evb, on_retry, c);
    c->connect_ev = evtimer_new(conf->evb, on_connect_timeout, c);
    c->drop_ev = evtimer_new(conf->evb, on_drop, c);
    if (conf->heartbeat) {
        struct timeval tv = {0, RCONN_HEARTBEAT_MS * 1000};

        c->heartbeat_ev = event_new(conf->evb, -1, EV_PERSIST, on_heartbeat, c);
        event_add(c->heartbeat_ev, &tv);
    }
}

void
rconn_start(struct rconn *c)
{
    start_attempt(c);
}

void
rconn_close(struct rconn *c)
{
    c->closing = 1;
    rconn_abandon(c->lookup);
    c->lookup = NULL;
    free_ac(c);
    if (c->retry_ev != NULL)
        event_free(c->retry_ev);
    if (c->connect_ev != NULL)
        event_free(c->connect_ev);
    if (c->drop_ev != NULL)
        event_free(c->drop_ev);
    if (c->heartbeat_ev != NULL)
        event_free(c->heartbeat_ev);
    c->retry_ev = c->connect_ev = c->drop_ev = c->heartbeat_ev = NULL;
    free(c->sent);
    c->sent = NULL;
    free(c->host);
    c->host = NULL;
}
