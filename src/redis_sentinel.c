/* redis_sentinel.c — see redis_sentinel.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "transport_conf.h"
#include "log.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_url.h"
#include "util.h"

struct rl_hostport {
    char *host;
    int port;
};

struct rsentinel {
    struct event_base *evb;
    struct evdns_base **dns;
    const char *display;
    char *master;   /* the name the sentinels know it by */
    char *password; /* AUTH first on every connection to a sentinel; NULL: none */
    struct rl_hostport *nodes;
    size_t nnodes, next, tries;
    struct rconn_lookup *lookup; /* a sentinel's name being resolved */
    redisAsyncContext *ac;       /* asking a sentinel for the master */
    redisAsyncContext *subac;    /* subscribed to +switch-master */
    rsentinel_found_cb found;
    rsentinel_switch_cb switched;
    void *arg;
    int closing;
};

static void ask_next(struct rsentinel *s);

/* ---- +switch-master ------------------------------------------------------------- */

static void
on_switch_master(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rsentinel *s = ac->data;
    redisReply *r = reply;
    size_t n;

    /* ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"] */
    if (r == NULL || s->closing || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    n = strlen(s->master);
    if (strncmp(r->element[2]->str, s->master, n) != 0 || r->element[2]->str[n] != ' ')
        return;
    log_info(LOG_MSG("sentinel switched the master"), LOG_S("redis", s->display),
             LOG_QN("switch", r->element[2]->str, 200));
    s->switched(s->arg);
    (void)privdata;
}

static void
on_sub_connect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    struct rsentinel *s = ac->data;

    if (status != REDIS_OK) {
        if (s->subac == ac)
            s->subac = NULL;
        return;
    }
    /* a refused AUTH fails the SUBSCRIBE too: its error reply is ignored */
    if (s->password != NULL)
        redisAsyncCommand(ac, NULL, NULL, "AUTH %s", s->password);
    redisAsyncCommand(ac, on_switch_master, NULL, "SUBSCRIBE +switch-master");
}

static void
on_sub_disconnect(const redisAsyncContext *ac, int status)
{
    struct rsentinel *s = ac->data;

    /* resubscribed at the next answer from a sentinel */
    if (s->subac == ac)
        s->subac = NULL;
    (void)status;
}

/* Listen for failovers on the sentinel that just answered. */
static void
subscribe(struct rsentinel *s, const char *host, const char *ip, int port)
{
    if (s->subac != NULL || s->closing)
        return;
    /* when none can be made, the next answer from a sentinel tries again */
    (void)rconn_open(s->evb, host, ip, port, NULL, s, on_sub_connect, on_sub_disconnect,
                     &s->subac);
}

/* ---- asking ---------------------------------------------------------------------- */

static void
on_sentinel_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rsentinel *s = ac->data;
    redisReply *r = reply;
    const struct rl_hostport *node = privdata;

    if (s->ac != ac)
        return; /* an answer that no longer matters */
    s->ac = NULL;
    redisAsyncDisconnect(ac); /* deferred by hiredis until we return */
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING || atoi(r->element[1]->str) <= 0) {
        log_debug(LOG_MSG("a sentinel did not name the master"), LOG_S("redis", s->display),
                  LOG_HP("sentinel", node->host, node->port));
        ask_next(s);
        return;
    }
    log_debug(LOG_MSG("sentinel named the master"), LOG_S("redis", s->display),
              LOG_J("master", r->element[0]->str, ":", r->element[1]->str));
    subscribe(s, node->host, ac->c.tcp.host, node->port);
    s->tries = 0;
    s->found(s->arg, r->element[0]->str, atoi(r->element[1]->str), NULL);
}

static void
on_sentinel_connect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    struct rsentinel *s = ac->data;

    if (status != REDIS_OK && s->ac == ac) {
        s->ac = NULL; /* hiredis frees it after this returns */
        ask_next(s);
    }
}

static void
on_sentinel_disconnect(const redisAsyncContext *ac, int status)
{
    struct rsentinel *s = ac->data;

    if (s->ac == ac) { /* lost before it answered */
        s->ac = NULL;
        ask_next(s);
    }
    (void)status;
}

static void
connect_to(void *arg, const char *ip, const char *why)
{
    struct rsentinel *s = arg;
    const struct rl_hostport *node = &s->nodes[(s->next + s->nnodes - 1) % s->nnodes];
    redisAsyncContext *ac;

    s->lookup = NULL;
    if (ip == NULL || rconn_open(s->evb, node->host, ip, node->port, NULL, s,
                                 on_sentinel_connect, on_sentinel_disconnect, &ac) != NULL) {
        ask_next(s);
        return;
    }
    s->ac = ac;
    /* a refused AUTH (NOAUTH, WRONGPASS) makes the next answer an error:
     * that sentinel did not name the master, the next is asked */
    if (s->password != NULL)
        redisAsyncCommand(ac, NULL, NULL, "AUTH %s", s->password);
    redisAsyncCommand(ac, on_sentinel_reply, (void *)node,
                      "SENTINEL get-master-addr-by-name %s", s->master);
}

/* Ask the sentinels in turn; when every one failed, say so. */
static void
ask_next(struct rsentinel *s)
{
    const struct rl_hostport *node;
    struct rconn_lookup *l;

    if (s->closing)
        return;
    if (s->tries++ >= s->nnodes) {
        s->tries = 0;
        s->found(s->arg, NULL, 0, "no sentinel named the master");
        return;
    }
    node = &s->nodes[s->next];
    s->next = (s->next + 1) % s->nnodes;
    l = rconn_resolve(s->dns, s->evb, node->host, connect_to, s);
    if (l != NULL)
        s->lookup = l; /* else connect_to ran already */
}

void
rsentinel_ask(struct rsentinel *s)
{
    ask_next(s);
}

bool
rsentinel_cancel(struct rsentinel *s)
{
    if (s->lookup != NULL) {
        rconn_abandon(s->lookup);
        s->lookup = NULL;
        s->tries = 0;
        return true;
    }
    if (s->ac != NULL) {
        /* a timer's frame, not a hiredis callback: freeing here is safe */
        redisAsyncContext *ac = s->ac;
        s->ac = NULL;
        redisAsyncFree(ac);
        s->tries = 0;
        return true;
    }
    return false;
}

/* ---- life ------------------------------------------------------------------------- */

struct rsentinel *
rsentinel_new(struct event_base *evb, struct evdns_base **dns,
              const struct rl_sentinel_conf *conf, const char *display,
              rsentinel_found_cb found, rsentinel_switch_cb switched, void *arg)
{
    struct rsentinel *s = xcalloc(1, sizeof(*s));

    s->evb = evb;
    s->dns = dns;
    s->display = display;
    s->master = xstrdup(conf->master);
    s->password = conf->password != NULL ? xstrdup(conf->password) : NULL;
    s->nodes = xcalloc(conf->nodes.n > 0 ? conf->nodes.n : 1, sizeof(*s->nodes));
    /* config.c checked every one with the same parser */
    for (size_t i = 0; i < conf->nodes.n; i++)
        if (redis_url_hostport(conf->nodes.v[i], &s->nodes[s->nnodes].host,
                               &s->nodes[s->nnodes].port) == RL_OK)
            s->nnodes++;
    s->found = found;
    s->switched = switched;
    s->arg = arg;
    return s;
}

void
rsentinel_free(struct rsentinel *s)
{
    if (s == NULL)
        return;
    s->closing = 1;
    rconn_abandon(s->lookup);
    if (s->ac != NULL) {
        redisAsyncContext *ac = s->ac;
        s->ac = NULL;
        redisAsyncFree(ac);
    }
    if (s->subac != NULL) {
        redisAsyncContext *ac = s->subac;
        s->subac = NULL;
        redisAsyncFree(ac);
    }
    for (size_t i = 0; i < s->nnodes; i++)
        free(s->nodes[i].host);
    free(s->nodes);
    free(s->master);
    free(s->password);
    free(s);
}
