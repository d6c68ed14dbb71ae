/* hybrid.c — see hybrid.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>

#include "hybrid.h"
#include "backend.h"
#include "config.h"
#include "keytable.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* An entry untouched for this many of its sync intervals may go. */
#define IDLE_INTERVALS 2
/* Busy entries (pending, in flight) one eviction pass may step over. */
#define EVICT_SCAN_MAX 256
#define BUCKETS_MIN 64
/* The tick before any hybrid policy was seen. */
#define TICK_DEFAULT_MS 250

#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define SET(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* What Redis last said about one limit of a key. */
struct snap {
    int64_t remaining, reset_ms;
};

struct sync_op;

struct hentry {
    struct rl_kt_node node;       /* in the table, by the key's hash */
    struct hentry *newer, *older; /* by last touch */
    struct hentry *dirty_next;    /* on the list of keys to sync */
    struct rl_config *cfg;        /* a reference: the policy lives in it */
    const struct rl_policy *policy;
    struct sync_op *op;   /* the sync in flight; pins the entry */
    int64_t snap_us;      /* when the snapshot's answer came */
    int64_t snap_sent_us; /* when the request that gave it went */
    int64_t touch_us, sync_us;
    int64_t pending, inflight; /* cost units */
    int64_t block_end_us;      /* blocked until then, as Redis said */
    uint64_t writer, seq;      /* RL_CHECK_ONCE: inflight's */
    int dirty;                 /* on the dirty list */
    int failed;                /* the last sync failed */
    /* pending holds charged units; inflight does (RL_CHECK_CHARGE): such
     * a sync is a charge, so that Redis keeps every unit of it */
    int charged, inflight_charged;
    size_t klen;
    char *key; /* after snap[], same allocation */
    struct snap snap[];
};

struct sync_op {
    struct rl_hybrid *h;
    struct hentry *e;
    int64_t sent_us;
    struct rl_check_req req;
};

struct rl_hybrid {
    struct event_base *base;
    struct rl_backend *be;
    struct rl_metrics *m;
    struct event *tick;
    int64_t tick_ms;
    struct rl_config *cfg;  /* the newest seen (a reference) */
    struct rl_keytable tab; /* the entries by key */
    size_t max;
    struct hentry *newest, *oldest;
    struct hentry *dirty;
    size_t ops;    /* syncs in flight */
    int64_t units; /* pending + inflight, every entry */
    /* RL_CHECK_ONCE: a writer's seqs for one key must only grow, so one
     * entry per (writer, key): a reload's new entries get a new writer while
     * the retired ones still resend under theirs. */
    uint64_t writer, seq; /* this run's id, the last seq */
    uint64_t gen;         /* configs seen */
    int draining, closing;
    void (*idle_cb)(void *arg);
    void *idle_arg;
    int64_t (*now)(void); /* the clock: now_monotonic_us but in tests */
};

static void on_tick(evutil_socket_t fd, short what, void *arg);

static void
gauges(struct rl_hybrid *h)
{
    SET(&h->m->hybrid_entries, (uint64_t)h->tab.n);
    SET(&h->m->hybrid_pending, (uint64_t)h->units);
}

struct rl_hybrid *
hybrid_new(struct event_base *base, struct rl_backend *be, struct rl_metrics *m,
           size_t max_entries)
{
    struct rl_hybrid *h = xcalloc(1, sizeof(*h));

    h->base = base;
    h->be = be;
    h->m = m;
    h->max = max_entries;
    keytable_init(&h->tab, BUCKETS_MIN);
    h->tick_ms = TICK_DEFAULT_MS;
    h->now = now_monotonic_us;
    h->tick = event_new(base, -1, EV_PERSIST, on_tick, h);
    /* Redis tells this table's syncs apart by it: unique per worker and run */
    if (getrandom(&h->writer, sizeof(h->writer), GRND_NONBLOCK) != sizeof(h->writer))
        h->writer = ((uint64_t)random() << 32) ^ (uint64_t)random() ^
                    (uint64_t)now_monotonic_us() ^ (uint64_t)(uintptr_t)h;
    return h;
}

/* ---- the table -------------------------------------------------------------- */

static struct hentry *
find(struct rl_hybrid *h, const struct rl_config *cfg, const struct rl_policy *policy,
     const char *key, size_t klen, uint64_t hash)
{
    for (struct rl_kt_node *n = keytable_first(&h->tab, hash); n != NULL;
         n = keytable_next(&h->tab, n, hash)) {
        struct hentry *e = KEYTABLE_ENTRY(n, struct hentry, node);

        if (e->cfg == cfg && e->policy == policy && e->klen == klen &&
            memcmp(e->key, key, klen) == 0)
            return e;
    }
    return NULL;
}

static void
lru_unlink(struct rl_hybrid *h, struct hentry *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        h->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        h->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void
lru_push(struct rl_hybrid *h, struct hentry *e)
{
    e->older = h->newest;
    e->newer = NULL;
    if (h->newest != NULL)
        h->newest->newer = e;
    h->newest = e;
    if (h->oldest == NULL)
        h->oldest = e;
}

/* Only an entry with no units, not on the dirty list and not pinned by a sync. */
static void
entry_free(struct rl_hybrid *h, struct hentry *e)
{
    keytable_remove(&h->tab, &e->node);
    lru_unlink(h, e);
    config_unref(e->cfg);
    free(e);
}

static void
arm(struct rl_hybrid *h)
{
    struct timeval tv = {h->tick_ms / 1000, (h->tick_ms % 1000) * 1000};

    if (!h->closing && !evtimer_pending(h->tick, NULL))
        evtimer_add(h->tick, &tv);
}

static void
mark_dirty(struct rl_hybrid *h, struct hentry *e)
{
    if (e->dirty)
        return;
    e->dirty = 1;
    e->dirty_next = h->dirty;
    h->dirty = e;
}

static void
take_snapshot(struct hentry *e, const struct rl_check_res *res, int64_t sent_us, int64_t now)
{
    for (size_t i = 0; i < e->policy->nlimits; i++) {
        /* an overdraft as a remaining below 0: the view denies until it
         * is paid back, as Redis does */
        e->snap[i].remaining = res->limits[i].remaining - res->limits[i].overdraft;
        e->snap[i].reset_ms = res->limits[i].reset_ms;
    }
    /* the answer's times run from when it arrived: never earlier than in
     * Redis, so a window is never believed over before it is */
    e->block_end_us = res->blocked_ms > 0 ? now + res->blocked_ms * 1000 : 0;
    e->snap_us = now;
    e->snap_sent_us = sent_us;
}

/* ---- syncs ---------------------------------------------------------------- */

static bool
idle(const struct rl_hybrid *h)
{
    return h->units == 0 && h->ops == 0;
}

bool
hybrid_idle(const struct rl_hybrid *h)
{
    return h == NULL || idle(h);
}

static void
on_sync(const struct rl_check_res *res, void *arg)
{
    struct sync_op *op = arg;
    struct rl_hybrid *h = op->h;
    struct hentry *e = op->e;

    e->op = NULL;
    h->ops--;
    if (res->status == RL_BACKEND_OK && res->nlimits == e->policy->nlimits) {
        /* the answer counts what was in flight */
        h->units -= e->inflight;
        e->inflight = 0;
        e->inflight_charged = 0;
        e->failed = 0;
        if (op->sent_us >= e->snap_sent_us)
            take_snapshot(e, res, op->sent_us, h->now());
        /* a resend carried only the units it had: newer ones go next */
        if (e->pending > 0)
            mark_dirty(h, e); /* the tick runs while there are entries */
    } else {
        /* never dropped: sent again next interval, as they are and under
         * the same seq (RL_CHECK_ONCE), since they may have been applied */
        e->failed = 1;
        mark_dirty(h, e);
        ADD(&h->m->hybrid_sync_failures, 1);
        log_debug(LOG_MSG("hybrid sync failed"), LOG_S("policy", e->policy->name),
                  LOG_I("inflight", e->inflight),
                  LOG_Q("error", res->error ? res->error : ""));
    }
    free(op);
    gauges(h);
    if (h->draining && !h->closing && idle(h) && h->idle_cb != NULL)
        h->idle_cb(h->idle_arg);
}

/*
 * Send what is pending (or a cost-0 refresh); the callback may run before
 * this returns.  RL_ERR when not sent now (a sync in flight, the backend not
 * ready): the caller keeps the entry dirty.
 *
 * A sync is RL_CHECK_SETTLE: it is answered only once it is known to have
 * run (its reply, however late), or not to have been sent, or lost with its
 * connection.  Until then the entry sends nothing more.  And it is
 * RL_CHECK_ONCE: units whose sync failed go again as they were, under the
 * same seq, while newer units wait in pending, so a sync lost with its
 * connection that Redis still runs when it moves again, beside its resend on
 * the new connection, is applied once.
 */
static int
sync_entry(struct rl_hybrid *h, struct hentry *e, int64_t now)
{
    struct sync_op *op;

    if (h->closing || e->op != NULL)
        return RL_ERR;
    if (h->be->ops->not_ready(h->be) != NULL) {
        e->failed = 1; /* the local view is getting old */
        return RL_ERR;
    }
    op = xcalloc(1, sizeof(*op));
    op->h = h;
    op->e = e;
    op->sent_us = now;
    op->req.policy = e->policy;
    op->req.key = e->key;
    op->req.key_len = e->klen;
    if (e->inflight == 0 && e->pending > 0) {
        e->inflight = e->pending;
        e->inflight_charged = e->charged;
        e->pending = 0;
        e->charged = 0;
        e->seq = ++h->seq; /* only grows: a new entry for a key too */
    }
    op->req.cost = e->inflight;
    op->req.flags = RL_CHECK_FORCE | RL_CHECK_SETTLE | (e->inflight > 0 ? RL_CHECK_ONCE : 0) |
                    (e->inflight > 0 && e->inflight_charged ? RL_CHECK_CHARGE : 0);
    op->req.writer = e->writer;
    op->req.seq = e->seq;
    op->req.timeout_ms = e->cfg->redis.timeout_ms;
    e->op = op;
    e->sync_us = now;
    h->ops++;
    ADD(&h->m->hybrid_syncs, 1);
    h->be->ops->check(h->be, &op->req, on_sync, op);
    return RL_OK;
}

static int64_t
interval_us(const struct hentry *e)
{
    return e->policy->sync_interval_ms * 1000;
}

static void
evict(struct rl_hybrid *h, int64_t now)
{
    struct hentry *e = h->oldest, *next;
    int scanned = 0;

    /* oldest touch first; stop at the first entry still in use */
    for (; e != NULL && scanned < EVICT_SCAN_MAX; e = next) {
        next = e->newer;
        if (e->cfg == h->cfg && now - e->touch_us < IDLE_INTERVALS * interval_us(e))
            break;
        if (!e->dirty && e->op == NULL && e->pending + e->inflight == 0)
            entry_free(h, e);
        else
            scanned++;
    }
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct rl_hybrid *h = arg;
    struct hentry *list = h->dirty, *e;
    int64_t now = h->now(), half = h->tick_ms * 500;

    h->dirty = NULL;
    while ((e = list) != NULL) {
        list = e->dirty_next;
        e->dirty = 0;
        e->dirty_next = NULL;
        if (e->cfg != h->cfg || h->draining) {
            /* retired or shutting down: counts only, no refresh */
            if (e->pending + e->inflight > 0 && sync_entry(h, e, now) != RL_OK)
                mark_dirty(h, e);
        } else if (now + half < e->sync_us + interval_us(e) ||
                   sync_entry(h, e, now) != RL_OK) {
            mark_dirty(h, e);
        }
    }
    /* in an outage a snapshot is all there is to go by: keep them */
    if (h->be->ops->not_ready(h->be) == NULL)
        evict(h, now);
    if (h->tab.n == 0)
        evtimer_del(h->tick);
    gauges(h);
    (void)fd;
    (void)what;
}

/* ---- the API ---------------------------------------------------------------- */

/* A new config: the tick follows its shortest sync_interval; the old
 * config's entries are retired, their pending counts sent now. */
static void
use_config(struct rl_hybrid *h, struct rl_config *cfg)
{
    struct rl_config *old = h->cfg;
    int64_t tick = 0;
    int64_t now = h->now();
    struct hentry *e, *next;

    h->cfg = config_ref(cfg);
    h->gen++;
    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct rl_policy *p = &cfg->policies[i];
        if (p->mode == RL_MODE_HYBRID && (tick == 0 || p->sync_interval_ms < tick))
            tick = p->sync_interval_ms;
    }
    if (tick != 0 && tick != h->tick_ms) {
        h->tick_ms = tick;
        if (evtimer_pending(h->tick, NULL)) {
            evtimer_del(h->tick);
            arm(h);
        }
    }
    if (old == NULL)
        return;
    for (e = h->oldest; e != NULL; e = next) {
        next = e->newer;
        if (e->cfg == cfg)
            continue;
        if (e->pending + e->inflight > 0)
            (void)sync_entry(h, e, now); /* else the tick retries it */
        else if (!e->dirty && e->op == NULL)
            entry_free(h, e);
    }
    config_unref(old);
    gauges(h);
}

void
hybrid_set_clock(struct rl_hybrid *h, int64_t (*now_us)(void))
{
    h->now = now_us;
}

void
hybrid_use_config(struct rl_hybrid *h, struct rl_config *cfg)
{
    if (cfg != h->cfg)
        use_config(h, cfg);
}

/* The local view of e at now for a check of `cost`, into res; no change. */
static void
estimate(const struct hentry *e, int64_t now, int64_t cost, struct rl_check_res *res)
{
    const struct rl_policy *policy = e->policy;
    struct rl_algo_seen seen = {
        .elapsed_ms = (now - e->snap_us) / 1000,
        .used = e->pending + e->inflight,
    };

    memset(res, 0, sizeof(*res));
    res->status = RL_BACKEND_OK;
    res->nlimits = policy->nlimits;
    res->allowed = 1;
    for (size_t i = 0; i < policy->nlimits; i++) {
        seen.remaining = e->snap[i].remaining;
        seen.reset_ms = e->snap[i].reset_ms;
        algo_def(policy->limits[i].algo)
            ->estimate(&policy->limits[i], &seen, cost, &res->limits[i]);
        if (!res->limits[i].allowed)
            res->allowed = 0;
    }
    /* a blocked key takes nothing, whatever its limits say */
    if (e->block_end_us > now)
        res->allowed = 0;
    for (size_t i = 0; i < policy->nlimits; i++) {
        struct rl_limit_result *r = &res->limits[i];

        if (res->allowed && cost > 0)
            algo_def(policy->limits[i].algo)->estimate_take(&policy->limits[i], cost, r);
        r->overdraft = r->remaining < 0 ? -r->remaining : 0;
        if (r->remaining < 0)
            r->remaining = 0;
    }
}

bool
hybrid_decide(struct rl_hybrid *h, struct rl_config *cfg, const struct rl_policy *policy,
              const char *key, size_t klen, int64_t cost, bool charge,
              struct rl_check_res *res, int *degraded)
{
    struct hentry *e;
    int64_t now;

    hybrid_use_config(h, cfg);
    e = find(h, cfg, policy, key, klen, keytable_hash(key, klen));
    if (e == NULL)
        return false;
    now = h->now();
    if (charge) {
        /* counted whatever the view says, then the view of a check of
         * cost 0 after it */
        if (cost > 0) {
            e->pending += cost;
            e->charged = 1;
            h->units += cost;
            SET(&h->m->hybrid_pending, (uint64_t)h->units);
        }
        estimate(e, now, 0, res);
    } else {
        estimate(e, now, cost, res);
    }
    if (!charge && res->allowed && cost > 0) {
        e->pending += cost;
        h->units += cost;
        SET(&h->m->hybrid_pending, (uint64_t)h->units);
    }
    if (e->block_end_us > now)
        backend_apply_block(res, algo_us_to_ms_ceil(e->block_end_us - now));
    e->touch_us = now;
    lru_unlink(h, e);
    lru_push(h, e);
    mark_dirty(h, e);
    arm(h);
    /* a failed sync, or one overdue, makes the local view an old one */
    *degraded = e->failed ||
                (e->op != NULL && now - e->op->sent_us > e->cfg->redis.timeout_ms * 1000);
    ADD(&h->m->hybrid_local, 1);
    return true;
}

void
hybrid_seed(struct rl_hybrid *h, struct rl_config *cfg, const struct rl_policy *policy,
            const char *key, size_t klen, int64_t sent_us, const struct rl_check_res *res)
{
    uint64_t hash = keytable_hash(key, klen);
    int64_t now = h->now();
    struct hentry *e;

    /* an answer of a config already replaced seeds nothing */
    if (cfg != h->cfg || h->closing || h->draining || res->nlimits != policy->nlimits)
        return;
    e = find(h, cfg, policy, key, klen, hash);
    if (e == NULL) {
        if (h->tab.n >= h->max)
            return; /* full: this key stays on the exact path */
        e = xcalloc(1, sizeof(*e) + policy->nlimits * sizeof(e->snap[0]) + klen);
        e->key = (char *)(e->snap + policy->nlimits);
        memcpy(e->key, key, klen);
        e->klen = klen;
        e->cfg = config_ref(cfg);
        e->policy = policy;
        e->touch_us = e->sync_us = now;
        e->writer = h->writer ^ (h->gen * 0x9e3779b97f4a7c15ULL);
        keytable_insert(&h->tab, &e->node, hash);
        lru_push(h, e);
        arm(h);
        gauges(h);
    } else if (sent_us < e->snap_sent_us) {
        return; /* a newer answer is in already */
    }
    take_snapshot(e, res, sent_us, now);
}

void
hybrid_admin_done(struct rl_hybrid *h, struct rl_config *cfg, const struct rl_policy *policy,
                  const char *key, size_t klen, int64_t sent_us,
                  const struct rl_check_req *req, const struct rl_check_res *res)
{
    struct hentry *e = find(h, cfg, policy, key, klen, keytable_hash(key, klen));

    if (res->status != RL_BACKEND_OK)
        return;
    /* units admitted here before a reset of everything are forgotten with
     * the rest; a sync already sent ran before the operation */
    if (e != NULL && (req->flags & RL_CHECK_RESET) && req->limit_index < 0) {
        h->units -= e->pending;
        e->pending = 0;
        SET(&h->m->hybrid_pending, (uint64_t)h->units);
    }
    hybrid_seed(h, cfg, policy, key, klen, sent_us, res);
}

void
hybrid_drain(struct rl_hybrid *h, void (*idle_cb)(void *arg), void *arg)
{
    int64_t now = h->now();
    struct hentry *e, *next;

    h->draining = 1;
    h->idle_cb = idle_cb;
    h->idle_arg = arg;
    for (e = h->oldest; e != NULL; e = next) {
        next = e->newer;
        if (e->pending + e->inflight > 0)
            (void)sync_entry(h, e, now); /* else the tick retries it */
    }
}

void
hybrid_close(struct rl_hybrid *h)
{
    if (h == NULL)
        return;
    h->closing = 1;
    evtimer_del(h->tick);
}

void
hybrid_free(struct rl_hybrid *h)
{
    struct hentry *e, *next;
    int64_t lost = 0;
    size_t keys = 0;

    if (h == NULL)
        return;
    for (e = h->oldest; e != NULL; e = next) {
        next = e->newer;
        /* every backend callback has run by now: nothing is in flight */
        if (e->pending + e->inflight > 0) {
            lost += e->pending + e->inflight;
            keys++;
        }
        config_unref(e->cfg);
        free(e);
    }
    if (lost > 0)
        log_warn(LOG_MSG("hybrid counts not synced before exit"), LOG_U("keys", keys),
                 LOG_I("units", lost));
    config_unref(h->cfg);
    event_free(h->tick);
    keytable_destroy(&h->tab);
    free(h);
}
