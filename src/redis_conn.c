/* redis_conn.c — see redis_conn.h. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/adapters/libevent.h>

#include "log.h"
#include "lua_scripts.h"
#include "metrics.h"
#include "redis_conn.h"
#include "util.h"

static const char *const state_names[] = {"down", "connecting", "handshake", "ready"};

int
rconn_set_state(struct rconn_status *st, enum rconn_state s, const char *reason,
                const char *name, int quiet)
{
    int became_ready = 0;

    if (reason != NULL)
        st->down_reason = reason;
    if (st->state == s)
        return 0;
    if (s == RCONN_READY) {
        log_info("msg=\"%s ready\" %s=%s", st->what, st->field, name);
        if (st->was_ready)
            metrics_reconnect();
        st->was_ready = 1;
        st->announced_down = 0;
        became_ready = 1;
    } else if (s == RCONN_DOWN && !st->announced_down && !quiet) {
        log_warn("msg=\"%s unavailable\" %s=%s reason=\"%s\"", st->what, st->field, name,
                 st->down_reason ? st->down_reason : "");
        st->announced_down = 1;
    }
    log_debug("msg=\"%s state\" %s=%s from=%s to=%s", st->what, st->field, name,
              state_names[st->state], state_names[s]);
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
    rconn_resolved_cb cb;       /* NULL once abandoned */
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
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr,
                  ip, sizeof(ip));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)res->ai_addr)->sin6_addr,
                  ip, sizeof(ip));
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
        return NULL;            /* answered at once (/etc/hosts): l is gone */
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

redisAsyncContext *
rconn_open(struct event_base *evb, const char *ip, int port, const char *path, void *data,
           redisConnectCallback *on_connect, redisDisconnectCallback *on_disconnect,
           const char **why)
{
    redisAsyncContext *ac = path != NULL ? redisAsyncConnectUnix(path)
                                         : redisAsyncConnect(ip, port);

    if (ac == NULL || ac->err) {
        log_debug("msg=\"redis connect failed\" addr=%s:%d error=\"%s\"",
                  path != NULL ? path : ip, port, ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        *why = "connect failed";
        return NULL;
    }
    ac->data = data;
    redisLibeventAttach(ac, evb);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    return ac;
}

/* ---- handshake -------------------------------------------------------------- */

int
rconn_handshake(const struct rconn_login *login, rconn_send_fn send, void *owner,
                redisCallbackFn *fn)
{
    int rc = RL_OK;

    if (login->password != NULL && login->username != NULL)
        rc |= send(owner, fn, (void *)"auth", "AUTH %s %s", login->username, login->password);
    else if (login->password != NULL)
        rc |= send(owner, fn, (void *)"auth", "AUTH %s", login->password);
    if (login->db != 0)
        rc |= send(owner, fn, (void *)"select", "SELECT %d", login->db);
    if (login->role == RCONN_ROLE_MUST)
        rc |= send(owner, fn, (void *)"role", "ROLE");
    else if (login->role == RCONN_ROLE_IF_ALLOWED)
        rc |= send(owner, fn, (void *)"role-if-allowed", "ROLE");
    rc |= send(owner, fn, (void *)"script", "SCRIPT LOAD %b", rl_lua_check,
               rl_lua_check_len);
    return rc == RL_OK ? RL_OK : RL_ERR;
}

enum rconn_step
rconn_step(const redisReply *r, const char *step, const char *who, const char **why)
{
    if (r->type == REDIS_REPLY_ERROR && strcmp(step, "role-if-allowed") == 0 &&
        strncmp(r->str, "NOPERM", 6) == 0)
        return RCONN_STEP_WAIT;
    if (r->type == REDIS_REPLY_ERROR) {
        *why = "handshake failed";
        return RCONN_STEP_FAILED;
    }
    if (strncmp(step, "role", 4) == 0 &&
        (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
         r->element[0]->type != REDIS_REPLY_STRING ||
         strcmp(r->element[0]->str, "master") != 0)) {
        /* a sentinel's answer can be stale: only a master takes writes */
        *why = "not a master";
        return RCONN_STEP_FAILED;
    }
    if (strcmp(step, "script") != 0)
        return RCONN_STEP_WAIT;
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, rl_lua_check_sha) != 0)
        log_error("msg=\"SCRIPT LOAD returned an unexpected digest\" redis=%s", who);
    return RCONN_STEP_READY;
}

/* ---- error replies ---------------------------------------------------------- */

static const struct {
    const char *code;
    enum rl_redis_error kind;
    const char *unusable;       /* not NULL: the connection cannot serve checks */
} error_codes[] = {
    {"READONLY", RL_RERR_READONLY, "redis is a replica (READONLY)"},
    {"MASTERDOWN", RL_RERR_MASTERDOWN, "redis replica without its master (MASTERDOWN)"},
    {"LOADING", RL_RERR_LOADING, "redis is loading its data set (LOADING)"},
    {"OOM", RL_RERR_OOM, NULL},
    {"BUSY", RL_RERR_BUSY, NULL},
    {"NOSCRIPT", RL_RERR_NOSCRIPT, NULL},
    {"WRONGTYPE", RL_RERR_WRONGTYPE, NULL},
    {"MOVED", RL_RERR_CLUSTER, NULL},
    {"ASK", RL_RERR_CLUSTER, NULL},
    {"TRYAGAIN", RL_RERR_CLUSTER, NULL},
    {"CLUSTERDOWN", RL_RERR_CLUSTER, NULL},
};

/* The entry for the error code that starts err, or -1. */
static int
error_code(const char *err)
{
    for (size_t i = 0; i < RL_ARRAY_LEN(error_codes); i++) {
        size_t n = strlen(error_codes[i].code);
        if (strncmp(err, error_codes[i].code, n) == 0 && (err[n] == ' ' || err[n] == '\0'))
            return (int)i;
    }
    return -1;
}

const char *
rconn_unusable(const char *err)
{
    int i = error_code(err);

    return i >= 0 ? error_codes[i].unusable : NULL;
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
            log_warn("msg=\"%s errors %s\" %s=%s error=\"%s\" count=%llu", st->what,
                     last ? "ended" : "go on", st->field, name, el->e[i].text,
                     (unsigned long long)el->e[i].count);
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
        log_warn("msg=\"%s error\" %s=%s error=\"%s\" checks=%zu", st->what, st->field, name,
                 el->e[i].text, nchecks);
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
    int i = error_code(msg);

    metrics_redis_error(i >= 0 ? error_codes[i].kind : RL_RERR_OTHER, nchecks);
    /* NOSCRIPT is answered by sending the script (a restart, SCRIPT FLUSH),
     * a redirection by following it: counted, nothing for an operator to do */
    if (i >= 0 && (error_codes[i].kind == RL_RERR_NOSCRIPT ||
                   error_codes[i].kind == RL_RERR_CLUSTER))
        return;
    errlog_add(el, st, name, msg, nchecks);
}

void
rconn_bad_reply(struct rconn_errlog *el, const struct rconn_status *st, const char *name,
                const char *why, size_t nchecks)
{
    metrics_redis_error(RL_RERR_BAD_REPLY, nchecks);
    errlog_add(el, st, name, why, nchecks);
}

void
rconn_errlog_end(struct rconn_errlog *el, const struct rconn_status *st, const char *name)
{
    if (el->active)
        errlog_summary(el, st, name, 1);
}
