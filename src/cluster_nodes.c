/* cluster_nodes.c — see cluster_nodes.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/util.h>

#include "cluster_nodes.h"
#include "config.h"
#include "log.h"
#include "redis_url.h"
#include "util.h"

static void
tidy_soon(struct cnodes *s)
{
    static const struct timeval zero = {0, 0};

    if (!s->closing && !evtimer_pending(s->tidy_ev, NULL))
        evtimer_add(s->tidy_ev, &zero);
}

void
cnode_settle(struct cnode *n)
{
    if (!n->master && n->c.pending == 0 && n->refs == 0)
        tidy_soon(n->set);
}

void
cnode_unref(struct cnode *n)
{
    n->refs--;
    cnode_settle(n);
}

static void
node_ready(struct rconn *c, int again)
{
    struct cnode *n = c->owner;

    cluster_map_ready(n->set->map);
    (void)again;
}

static void
node_down(struct rconn *c)
{
    struct cnode *n = c->owner;

    if (n->master)
        cluster_map_refresh(n->set->map); /* a failover moves masters */
    cnode_settle(n);
}

static const struct rconn_hooks node_hooks = {
    .ready = node_ready,
    .down = node_down,
};

static struct cnode *
node_find(struct cnodes *s, const char *host, int port)
{
    for (struct cnode *n = s->list; n != NULL; n = n->next)
        if (n->port == port && strcmp(n->host, host) == 0)
            return n;
    return NULL;
}

struct cnode *
cnode_get(struct cnodes *s, const char *host, int port)
{
    struct cnode *n = node_find(s, host, port);

    if (n != NULL)
        return n;
    n = xcalloc(1, sizeof(*n));
    n->set = s;
    n->host = xstrdup(host);
    n->port = port;
    n->name = strchr(host, ':') != NULL ? xasprintf("[%s]:%d", host, port)
                                        : xasprintf("%s:%d", host, port);
    {
        /* The cluster has database 0 only: no SELECT; a replica answers
         * MOVED, so no ROLE either. */
        struct rconn_conf conf = {
            .evb = s->evb,
            .dns = &s->dns,
            .host = n->host,
            .port = port,
            .name = n->name,
            .what = "redis cluster node",
            .field = "node",
            .login = {s->username, s->password, 0, RCONN_ROLE_NONE},
            .connect_timeout_ms = s->connect_timeout_ms,
            .max_pending = s->max_pending,
            .heartbeat = 1,
            .hooks = &node_hooks,
            .owner = n,
        };
        rconn_init(&n->c, &conf);
    }
    n->next = s->list;
    s->list = n;
    rconn_start(&n->c);
    return n;
}

/* Never from one of n's own callbacks; with pending == 0 no callback of a
 * check runs here (the router answers those first). */
static void
node_free(struct cnode *n)
{
    rconn_close(&n->c);
    free(n->host);
    free(n->name);
    free(n);
}

bool
cnode_connecting(const struct cnode *n)
{
    return n->c.st.state == RCONN_CONNECTING || n->c.st.state == RCONN_HANDSHAKE;
}

bool
cnodes_map_coming(const struct cnodes *s)
{
    if (s->map->loaded)
        return false;
    if (cluster_map_coming(s->map))
        return true;
    for (const struct cnode *n = s->list; n != NULL; n = n->next)
        if (cnode_connecting(n))
            return true;
    return false;
}

bool
cnodes_masters_ready(const struct cnodes *s)
{
    for (const struct cnode *n = s->list; n != NULL; n = n->next)
        if (n->master && n->c.st.state != RCONN_READY)
            return false;
    return true;
}

/* ---- the slot map's hooks ------------------------------------------------------ */

/* cluster_node_fn */
static void *
map_node(void *arg, const char *host, int port)
{
    return cnode_get(arg, host, port);
}

/* The nodes that own slots are the masters. */
static void
map_applied(void *arg, const char *from, bool changed)
{
    struct cnodes *s = arg;
    int masters = 0;

    for (struct cnode *n = s->list; n != NULL; n = n->next)
        n->master = false;
    for (int slot = 0; slot < CLUSTER_SLOTS; slot++) {
        struct cnode *n = s->map->owner[slot];

        if (n != NULL && !n->master) {
            masters++;
            n->master = true;
        }
    }
    if (changed)
        log_info(LOG_MSG("redis cluster slot map loaded"), LOG_S("from", from),
                 LOG_I("masters", masters), LOG_I("slots_covered", s->map->covered));
    else
        log_debug(LOG_MSG("redis cluster slot map unchanged"), LOG_S("from", from));
}

static bool
map_master_down(void *arg)
{
    struct cnodes *s = arg;

    for (const struct cnode *n = s->list; n != NULL; n = n->next)
        if (n->master && n->c.st.state == RCONN_DOWN)
            return true;
    return false;
}

/* A ready node to ask, masters first, taking turns. */
static struct rconn *
map_pick(void *arg)
{
    struct cnodes *s = arg;

    for (int want_master = 1; want_master >= 0; want_master--) {
        unsigned count = 0, i = 0;
        struct cnode *n;

        for (n = s->list; n != NULL; n = n->next)
            if (n->c.st.state == RCONN_READY && n->c.ac != NULL && (!want_master || n->master))
                count++;
        if (count == 0)
            continue;
        i = s->rr++ % count;
        for (n = s->list; n != NULL; n = n->next)
            if (n->c.st.state == RCONN_READY && n->c.ac != NULL &&
                (!want_master || n->master) && i-- == 0)
                return &n->c;
    }
    return NULL;
}

static void
map_connect_seeds(void *arg)
{
    struct cnodes *s = arg;

    for (size_t i = 0; i < s->nseeds; i++)
        (void)cnode_get(s, s->seeds[i].host, s->seeds[i].port);
}

/* Old masters nobody waits for go at the next tidy. */
static void
map_replied(void *arg, struct rconn *c)
{
    tidy_soon(arg);
    (void)c;
}

const struct cluster_map_hooks cnodes_map_hooks = {
    .node = map_node,
    .pick = map_pick,
    .connect_seeds = map_connect_seeds,
    .applied = map_applied,
    .master_down = map_master_down,
    .replied = map_replied,
};

/* Off every hiredis callback: free the nodes that are no longer masters and
 * that nothing waits for. */
static void
on_tidy(evutil_socket_t fd, short what, void *arg)
{
    struct cnodes *s = arg;
    struct cnode **pp = &s->list, *n;
    /* While a refresh is wanted, the seeds may be all we can ask. */
    bool keep_others = !s->map->loaded || cluster_map_busy(s->map);

    while ((n = *pp) != NULL) {
        if (!keep_others && !n->master && n->c.pending == 0 && n->refs == 0) {
            log_debug(LOG_MSG("redis cluster node closed"), LOG_S("node", n->name));
            *pp = n->next;
            node_free(n);
            continue;
        }
        pp = &n->next;
    }
    (void)fd;
    (void)what;
}

/* ---- life ----------------------------------------------------------------------- */

/* The URL's credentials, completed or overridden by redis.username /
 * redis.password (as backend_redis.c).  The URL's host, port and db are not
 * used. */
static int
login_of(struct cnodes *s, const struct rl_config *cfg, char **cause)
{
    struct rl_redis_url url;

    memset(&url, 0, sizeof(url));
    if (cfg->redis.url != NULL && redis_url_parse(cfg->redis.url, &url, cause) != RL_OK)
        return RL_ERR;
    s->username = cfg->redis.username ? xstrdup(cfg->redis.username) : url.username;
    s->password = cfg->redis.password ? xstrdup(cfg->redis.password) : url.password;
    if (s->username != url.username)
        free(url.username);
    if (s->password != url.password)
        free(url.password);
    url.username = url.password = NULL;
    redis_url_clear(&url);
    return RL_OK;
}

static int
seeds_of(struct cnodes *s, const struct rl_config *cfg, char **cause)
{
    s->seeds = xcalloc(cfg->redis.cluster.n, sizeof(*s->seeds));
    for (size_t i = 0; i < cfg->redis.cluster.n; i++) {
        struct cnode_seed *seed = &s->seeds[s->nseeds];

        if (redis_url_hostport(cfg->redis.cluster.v[i], &seed->host, &seed->port) != RL_OK) {
            *cause = xasprintf("redis.cluster[%zu]: must be \"host:port\" or \"[v6]:port\"",
                               i);
            return RL_ERR;
        }
        s->nseeds++;
    }
    if (s->nseeds == 0) {
        *cause = xstrdup("redis.cluster: no seed node");
        return RL_ERR;
    }
    return RL_OK;
}

int
cnodes_init(struct cnodes *s, struct event_base *evb, struct cluster_map *map,
            const struct rl_config *cfg, char **cause)
{
    memset(s, 0, sizeof(*s));
    s->evb = evb;
    s->map = map;
    s->connect_timeout_ms = cfg->redis.connect_timeout_ms;
    s->max_pending = (unsigned)cfg->redis.max_pending;
    s->tidy_ev = evtimer_new(evb, on_tidy, s);
    if (login_of(s, cfg, cause) != RL_OK || seeds_of(s, cfg, cause) != RL_OK) {
        cnodes_close(s);
        cnodes_free(s);
        return RL_ERR;
    }
    return RL_OK;
}

void
cnodes_close(struct cnodes *s)
{
    s->closing = true;
    for (struct cnode *n = s->list; n != NULL; n = n->next)
        rconn_close(&n->c);
}

void
cnodes_free(struct cnodes *s)
{
    struct cnode *n;

    while ((n = s->list) != NULL) {
        s->list = n->next;
        node_free(n);
    }
    if (s->tidy_ev != NULL)
        event_free(s->tidy_ev);
    rconn_dns_free(s->dns);
    for (size_t i = 0; i < s->nseeds; i++)
        free(s->seeds[i].host);
    free(s->seeds);
    free(s->username);
    free(s->password);
    memset(s, 0, sizeof(*s));
}
