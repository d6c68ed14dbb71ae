/* cluster_slots.c — see cluster_slots.h. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "cluster_slots.h"
#include "log.h"
#include "redis_conn.h"
#include "rl.h"
#include "util.h"

#define REFRESH_PERIOD_MS 30000
/* Refreshes asked for by errors come at most this often (more after failed
 * refreshes, up to RCONN_BACKOFF_MAX_MS). */
#define REFRESH_GAP_MS 100
/* While a master is down, the map is asked for this often, so that a
 * promoted replica is found within about a second of its promotion. */
#define REFRESH_DEGRADED_MS 1000

/* CRC16-CCITT (XMODEM), the Redis Cluster key hash. */
/* eight to a line */
/* clang-format off */
static const uint16_t crc16tab[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};
/* clang-format on */

static uint16_t
crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc16tab[((crc >> 8) ^ (uint8_t)buf[i]) & 0xff]);
    return crc;
}

/* The slot of a key: the CRC16 of its hash tag (the bytes between the first
 * '{' and the next '}', when not empty), else of the whole key. */
int
cluster_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open != NULL) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close != NULL && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (CLUSTER_SLOTS - 1);
    }
    return crc16(key, len) & (CLUSTER_SLOTS - 1);
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ..." -> slot, host, port; an empty host
 * (an endpoint the server does not know) means the node that answered. */
int
cluster_parse_redirect(const char *msg, const char *from_host, int *slot, char *host,
                       size_t hsize, int *port)
{
    const char *p = strchr(msg, ' '), *colon;
    char *end;
    long v;
    size_t hlen;

    if (p == NULL)
        return RL_ERR;
    v = strtol(p + 1, &end, 10);
    if (end == p + 1 || *end != ' ' || v < 0 || v >= CLUSTER_SLOTS)
        return RL_ERR;
    *slot = (int)v;
    p = end + 1;
    colon = strrchr(p, ':');
    if (colon == NULL)
        return RL_ERR;
    v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || v < 1 || v > 65535)
        return RL_ERR;
    *port = (int)v;
    hlen = (size_t)(colon - p);
    if (hlen >= 2 && p[0] == '[' && p[hlen - 1] == ']') {
        p++;
        hlen -= 2;
    }
    if (hlen == 0) {
        p = from_host;
        hlen = strlen(p);
    }
    if (hlen >= hsize)
        return RL_ERR;
    memcpy(host, p, hlen);
    host[hlen] = '\0';
    return RL_OK;
}

static bool
valid_range(const redisReply *e)
{
    const redisReply *m;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
        return false;
    if (e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    if (e->element[0]->integer < 0 || e->element[1]->integer >= CLUSTER_SLOTS ||
        e->element[0]->integer > e->element[1]->integer)
        return false;
    m = e->element[2];
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2)
        return false;
    if (m->element[0]->type != REDIS_REPLY_STRING && m->element[0]->type != REDIS_REPLY_NIL)
        return false;
    if (m->element[0]->type == REDIS_REPLY_STRING && m->element[0]->len >= CLUSTER_HOST_MAX)
        return false;
    return m->element[1]->type == REDIS_REPLY_INTEGER && m->element[1]->integer >= 1 &&
           m->element[1]->integer <= 65535;
}

const char *
cluster_map_apply(struct cluster_map *m, const redisReply *r, const char *from_host,
                  cluster_node_fn node, void *arg, bool *applied, bool *changed)
{
    void **map;
    int covered = 0;

    *applied = false;
    *changed = !m->loaded;
    if (r->type == REDIS_REPLY_ERROR)
        return r->str;
    if (r->type != REDIS_REPLY_ARRAY)
        return "CLUSTER SLOTS did not answer an array";
    for (size_t i = 0; i < r->elements; i++)
        if (!valid_range(r->element[i]))
            return "malformed CLUSTER SLOTS reply";
    map = xcalloc(CLUSTER_SLOTS, sizeof(*map));
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *mm = e->element[2];
        const char *host = mm->element[0]->type == REDIS_REPLY_STRING ? mm->element[0]->str
                                                                      : "";
        void *n;

        if (strcmp(host, "?") == 0)
            continue;
        if (host[0] == '\0')
            host = from_host;
        n = node(arg, host, (int)mm->element[1]->integer);
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            map[s] = n;
    }
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        if (map[s] != NULL)
            covered++;
        if (map[s] != m->owner[s])
            *changed = true;
    }
    memcpy(m->owner, map, sizeof(m->owner));
    free(map);
    m->loaded = 1;
    m->covered = covered;
    *applied = true;
    return covered < CLUSTER_SLOTS ? "not every slot has a master" : NULL;
}

/* ---- keeping it fresh ---------------------------------------------------------- */

static void
refresh_failed(struct cluster_map *m, const char *node, const char *why)
{
    if (!m->failing)
        log_warn(LOG_MSG("cannot load the redis cluster slot map"), LOG_S("node", node),
                 LOG_QN("reason", why, 200));
    m->failing = 1;
    m->gap_ms = m->gap_ms * 2 > RCONN_BACKOFF_MAX_MS ? RCONN_BACKOFF_MAX_MS : m->gap_ms * 2;
    cluster_map_refresh(m);
}

/* A refresh in `ms`, unless one is already due or out. */
static void
refresh_in(struct cluster_map *m, int64_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    m->want = 1;
    if (!m->inflight && !evtimer_pending(m->refresh_ev, NULL))
        evtimer_add(m->refresh_ev, &tv);
}

/* A CLUSTER SLOTS request out: which map, and which of its requests (a late
 * answer to one given up on is ignored).  The router closes its nodes before
 * the map, so every ticket comes back while the map lives. */
struct ticket {
    struct cluster_map *m;
    uintptr_t gen;
};

static void
on_slots(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct rconn *c = ac->data;
    struct ticket t = *(struct ticket *)privdata;
    struct cluster_map *m = t.m;
    redisReply *r = reply;
    const char *why = "connection lost";
    bool applied = false, changed = false;

    free(privdata);
    rconn_replied(c, ac, reply);
    if (m->closing)
        return;
    if (c->closing || !m->inflight || t.gen != m->gen) {
        m->hooks->replied(m->arg, c); /* a refresh given up on: ignored */
        return;
    }
    m->inflight = 0;
    evtimer_del(m->refresh_ev);
    if (r == NULL || (why = cluster_map_apply(m, r, c->host, m->hooks->node, m->arg, &applied,
                                              &changed)) != NULL) {
        if (r != NULL && applied) /* in use, but asked again soon */
            m->hooks->applied(m->arg, c->conf.name, changed);
        refresh_failed(m, c->conf.name, why);
    } else {
        m->hooks->applied(m->arg, c->conf.name, changed);
        if (m->failing)
            log_info(LOG_MSG("redis cluster slot map loaded again"),
                     LOG_S("from", c->conf.name));
        m->failing = 0;
        m->gap_ms = REFRESH_GAP_MS;
        if (m->want) /* asked for while this one was out */
            cluster_map_refresh(m);
        else if (m->hooks->master_down(m->arg))
            refresh_in(m, REFRESH_DEGRADED_MS);
    }
    m->hooks->replied(m->arg, c);
}

static void
refresh_start(struct cluster_map *m)
{
    struct rconn *c = m->hooks->pick(m->arg);
    struct timeval tv = {m->timeout_ms / 1000, (m->timeout_ms % 1000) * 1000};
    struct ticket *t;

    if (c == NULL) {
        /* Nobody to ask: (re)connect the seeds; the first node to become
         * ready asks (want stays set). */
        m->hooks->connect_seeds(m->arg);
        return;
    }
    t = xcalloc(1, sizeof(*t));
    t->m = m;
    t->gen = ++m->gen;
    if (rconn_sendf(c, on_slots, t, "CLUSTER SLOTS") != RL_OK) {
        free(t);
        refresh_failed(m, c->conf.name, "cannot queue CLUSTER SLOTS");
        return;
    }
    m->want = 0;
    m->inflight = 1;
    m->last_us = now_monotonic_us();
    evtimer_add(m->refresh_ev, &tv); /* now this request's deadline */
}

static void
on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    struct cluster_map *m = arg;

    if (m->inflight) {
        /* The node never answered: forget that request, ask another. */
        m->inflight = 0;
        m->gen++;
        m->want = 1;
        refresh_failed(m, "-", "CLUSTER SLOTS timed out");
        return;
    }
    if (m->want)
        refresh_start(m);
    (void)fd;
    (void)what;
}

void
cluster_map_refresh(struct cluster_map *m)
{
    struct timeval tv;
    int64_t wait_us;

    if (m->closing)
        return;
    m->want = 1;
    if (m->inflight || evtimer_pending(m->refresh_ev, NULL))
        return;
    wait_us = m->last_us + m->gap_ms * 1000 - now_monotonic_us();
    if (wait_us < 0)
        wait_us = 0;
    tv.tv_sec = wait_us / 1000000;
    tv.tv_usec = wait_us % 1000000;
    evtimer_add(m->refresh_ev, &tv);
}

void
cluster_map_ready(struct cluster_map *m)
{
    if (m->want)
        cluster_map_refresh(m);
}

bool
cluster_map_busy(const struct cluster_map *m)
{
    return m->want || m->inflight;
}

bool
cluster_map_coming(const struct cluster_map *m)
{
    return !m->loaded &&
           (m->inflight || (!m->failing && evtimer_pending(m->refresh_ev, NULL)));
}

/* Every REFRESH_PERIOD_MS, give or take 10%: workers and instances started
 * together do not all ask at the same moment. */
static void
arm_period(struct cluster_map *m)
{
    int64_t ms = REFRESH_PERIOD_MS * 9 / 10 + random() % (REFRESH_PERIOD_MS / 5 + 1);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    evtimer_add(m->period_ev, &tv);
}

static void
on_period(evutil_socket_t fd, short what, void *arg)
{
    struct cluster_map *m = arg;

    cluster_map_refresh(m);
    arm_period(m);
    (void)fd;
    (void)what;
}

void
cluster_map_init(struct cluster_map *m, struct event_base *evb, int64_t timeout_ms,
                 const struct cluster_map_hooks *hooks, void *arg)
{
    m->hooks = hooks;
    m->arg = arg;
    m->timeout_ms = timeout_ms;
    m->gap_ms = REFRESH_GAP_MS;
    m->refresh_ev = evtimer_new(evb, on_refresh_timer, m);
    m->period_ev = evtimer_new(evb, on_period, m);
    arm_period(m);
    m->want = 1;
    refresh_start(m);
}

void
cluster_map_close(struct cluster_map *m)
{
    m->closing = 1;
    if (m->refresh_ev != NULL)
        event_free(m->refresh_ev);
    if (m->period_ev != NULL)
        event_free(m->period_ev);
    m->refresh_ev = m->period_ev = NULL;
}
