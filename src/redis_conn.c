/* redis_conn.c — see redis_conn.h. */
#include <arpa/inet.h>
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
#include "redis_tls.h"
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
    redisAsyncContext *ac;

    /* TLS: hiredis speaks to a bridge (redis_tls.h), attached already */
    if (path == NULL && rtls_enabled()) {
        if ((ac = rtls_connect(evb, ip, port, why)) == NULL)
            return NULL;
        goto attached;
    }
    ac = path != NULL ? redisAsyncConnectUnix(path) : redisAsyncConnect(ip, port);
    if (ac == NULL || ac->err) {
        log_debug("msg=\"redis connect failed\" addr=%s:%d error=\"%s\"",
                  path != NULL ? path : ip, port, ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        *why = "connect failed";
        return NULL;
    }
    redisLibeventAttach(ac, evb);
attached:
    ac->data = data;
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
    if (login->role)
        rc |= send(owner, fn, (void *)"role", "ROLE");
    rc |= send(owner, fn, (void *)"script", "SCRIPT LOAD %b", rl_lua_check,
               rl_lua_check_len);
    return rc == RL_OK ? RL_OK : RL_ERR;
}

enum rconn_step
rconn_step(const redisReply *r, const char *step, const char *who, const char **why)
{
    if (r->type == REDIS_REPLY_ERROR) {
        *why = "handshake failed";
        return RCONN_STEP_FAILED;
    }
    if (strcmp(step, "role") == 0 &&
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
