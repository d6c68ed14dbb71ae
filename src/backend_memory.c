/*
 * backend_memory.c — counts in this process: `-b memory`, and the local
 * limiter of failure_mode "local".
 *
 * One store per process, shared by every worker thread: created by the first
 * create(), reference counted, freed by the last destroy().  Workers would
 * otherwise each count a caller separately and admit workers x limit.
 *
 * The store is split into shards, each a hash table under its own mutex, so
 * workers contend only when they touch the same shard.  A check locks the
 * shards of all its keys in ascending order (no deadlock), decides every
 * limit with peek(), commits them all only when all allow, and unlocks before
 * calling back: the decision is atomic across the policy's limits.
 *
 * The table is bounded, because distinct callers are unbounded.  Every entry
 * expires at the time its algorithm says its state becomes worthless (ttl_us),
 * and each shard keeps its entries in a min-heap on that time, so
 *  - expired entries are reclaimed lazily (a lookup that finds one drops it)
 *    and by an incremental sweep (each check pops a few expired entries from
 *    the heads of the shards it locked, and of one more shard in turn);
 *  - when a shard is full, the victim is the entry closest to expiry: an
 *    expired one if any, otherwise the one that would be worthless soonest,
 *    i.e. the one whose loss forgives the least.  Evicting a live entry hands
 *    that caller a fresh limit early; the cap keeps memory bounded under a
 *    flood of distinct identities instead.
 * The cap counts entries, not bytes: a sliding_window_log entry grows with
 * its limit (16 bytes per logged check).
 *
 * Times are Unix microseconds (CLOCK_REALTIME), as the script's are (Redis
 * TIME): a window aligned to the epoch (fixed_window's align: epoch,
 * sliding_window_counter's windows) opens at the same moment here and
 * there.  Every algorithm already copes with a clock that steps back, as
 * Redis's can; a step forward only ends states early.
 */
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "keytable.h"
#include "util.h"

#define MEM_MAX_ENTRIES_DEFAULT 1000000
#define MEM_SHARDS_MAX 64  /* a power of two */
#define MEM_SWEEP_BATCH 16 /* expired entries reclaimed per shard visit */
#define MEM_BUCKETS_MIN 16
#define MEM_KEYBUF 2048 /* limit keys of a check, on the stack */
/* ":<tag>:<window_ms>" (or a period's ":<tag>:week-wednesday@<zone of 64>")
 * and a NUL after the check's key */
#define MEM_KEY_EXTRA 96

struct mem_entry {
    struct rl_kt_node node; /* in its shard's table */
    int64_t expires;        /* us; the state is worthless from then on */
    size_t heap;            /* index in the shard's heap */
    struct rl_algo_state st;
    size_t key_len;
    char key[];
};

struct mem_shard {
    pthread_mutex_t lock;
    struct rl_keytable tab;  /* the entries by key */
    struct mem_entry **heap; /* min-heap on expires; n entries */
    size_t n, heap_cap;
    size_t max; /* entries this shard may hold */
} __attribute__((aligned(64)));

struct mem_store {
    int refs;            /* under store_lock */
    unsigned nshards;    /* a power of two */
    unsigned sweep_next; /* round robin, atomic */
    struct mem_shard shards[MEM_SHARDS_MAX];
};

struct mem_backend {
    struct rl_backend base;
    struct mem_store *store;
};

static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_store *store;
static size_t max_entries = MEM_MAX_ENTRIES_DEFAULT;

/*
 * Not in backend.h yet: the cap of the next store (tests, and a future
 * `memory.max_keys` option) and the number of entries held (tests, metrics).
 */

/* ---- the expiry heap ------------------------------------------------------ */

static void
heap_set(struct mem_shard *sh, size_t i, struct mem_entry *e)
{
    sh->heap[i] = e;
    e->heap = i;
}

static void
heap_up(struct mem_shard *sh, size_t i)
{
    struct mem_entry *e = sh->heap[i];

    while (i > 0 && sh->heap[(i - 1) / 2]->expires > e->expires) {
        heap_set(sh, i, sh->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(sh, i, e);
}

static void
heap_down(struct mem_shard *sh, size_t i)
{
    struct mem_entry *e = sh->heap[i];

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sh->n)
            break;
        if (c + 1 < sh->n && sh->heap[c + 1]->expires < sh->heap[c]->expires)
            c++;
        if (sh->heap[c]->expires >= e->expires)
            break;
        heap_set(sh, i, sh->heap[c]);
        i = c;
    }
    heap_set(sh, i, e);
}

/* The entry's expiry changed: restore the heap order. */
static void
heap_fix(struct mem_shard *sh, size_t i)
{
    if (i > 0 && sh->heap[(i - 1) / 2]->expires > sh->heap[i]->expires)
        heap_up(sh, i);
    else
        heap_down(sh, i);
}

/* ---- one shard's table ------------------------------------------------------ */

static struct mem_entry *
shard_find(struct mem_shard *sh, uint64_t hash, const char *key, size_t len)
{
    for (struct rl_kt_node *n = keytable_first(&sh->tab, hash); n != NULL;
         n = keytable_next(&sh->tab, n, hash)) {
        struct mem_entry *e = KEYTABLE_ENTRY(n, struct mem_entry, node);

        if (e->key_len == len && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

static void
shard_remove(struct mem_shard *sh, struct mem_entry *e)
{
    size_t i = e->heap;

    keytable_remove(&sh->tab, &e->node);
    sh->n--;
    if (i < sh->n) {
        heap_set(sh, i, sh->heap[sh->n]);
        heap_fix(sh, i);
    }
    algo_state_release(&e->st);
    free(e);
}

/* Reclaim up to `budget` expired entries; the heap has them first. */
static void
shard_sweep(struct mem_shard *sh, int64_t now, int budget)
{
    while (budget-- > 0 && sh->n > 0 && sh->heap[0]->expires <= now)
        shard_remove(sh, sh->heap[0]);
}

static bool
pinned(struct mem_entry *e, struct mem_entry *const *pin, size_t npin)
{
    for (size_t i = 0; i < npin; i++)
        if (pin[i] == e)
            return true;
    return false;
}

/*
 * Make room for one entry.  The victim is the entry closest to expiry that
 * this check is not using (pin): the heap's head, or failing that the first
 * in heap order.  A shard holds at least RL_LIMITS_MAX entries and a check
 * pins fewer, so there is always one.
 */
static int
shard_evict(struct mem_shard *sh, struct mem_entry *const *pin, size_t npin)
{
    for (size_t i = 0; i < sh->n; i++) {
        if (!pinned(sh->heap[i], pin, npin)) {
            shard_remove(sh, sh->heap[i]);
            return RL_OK;
        }
    }
    return RL_ERR;
}

static struct mem_entry *
shard_insert(struct mem_shard *sh, uint64_t hash, const char *key, size_t len, int64_t now,
             struct mem_entry *const *pin, size_t npin)
{
    struct mem_entry *e;

    shard_sweep(sh, now, MEM_SWEEP_BATCH);
    while (sh->n >= sh->max && shard_evict(sh, pin, npin) == RL_OK)
        ;
    if (sh->n == sh->heap_cap) {
        sh->heap_cap = sh->heap_cap ? sh->heap_cap * 2 : MEM_BUCKETS_MIN;
        sh->heap = xrealloc(sh->heap, sh->heap_cap * sizeof(*sh->heap));
    }
    e = xcalloc(1, sizeof(*e) + len);
    e->expires = now;
    e->key_len = len;
    memcpy(e->key, key, len);
    keytable_insert(&sh->tab, &e->node, hash);
    heap_set(sh, sh->n++, e);
    heap_up(sh, e->heap);
    return e;
}

static void
shard_free(struct mem_shard *sh)
{
    for (size_t i = 0; i < sh->n; i++) {
        algo_state_release(&sh->heap[i]->st);
        free(sh->heap[i]);
    }
    free(sh->heap);
    keytable_destroy(&sh->tab);
    pthread_mutex_destroy(&sh->lock);
}

/* ---- the store ------------------------------------------------------------ */

static struct mem_store *
store_new(size_t cap)
{
    struct mem_store *s = xcalloc(1, sizeof(*s));

    /* every shard must hold more entries than one check can pin */
    if (cap < RL_LIMITS_MAX)
        cap = RL_LIMITS_MAX;
    s->nshards = MEM_SHARDS_MAX;
    while (s->nshards > 1 && cap / s->nshards < 4 * RL_LIMITS_MAX)
        s->nshards /= 2;
    for (unsigned i = 0; i < s->nshards; i++) {
        pthread_mutex_init(&s->shards[i].lock, NULL);
        keytable_init(&s->shards[i].tab, MEM_BUCKETS_MIN);
        s->shards[i].max = cap / s->nshards;
    }
    return s;
}

static void
store_free(struct mem_store *s)
{
    for (unsigned i = 0; i < s->nshards; i++)
        shard_free(&s->shards[i]);
    free(s);
}

void
backend_memory_set_max_entries(size_t n)
{
    pthread_mutex_lock(&store_lock);
    max_entries = n;
    pthread_mutex_unlock(&store_lock);
}

size_t
backend_memory_entries(void)
{
    size_t n = 0;

    pthread_mutex_lock(&store_lock);
    if (store != NULL) {
        for (unsigned i = 0; i < store->nshards; i++) {
            pthread_mutex_lock(&store->shards[i].lock);
            n += store->shards[i].n;
            pthread_mutex_unlock(&store->shards[i].lock);
        }
    }
    pthread_mutex_unlock(&store_lock);
    return n;
}

/* ---- the backend ---------------------------------------------------------- */

static int
mem_create(struct rl_backend **out, struct event_base *base, const struct rl_config *cfg,
           char **cause)
{
    struct mem_backend *mb = xcalloc(1, sizeof(*mb));

    pthread_mutex_lock(&store_lock);
    if (store == NULL)
        store = store_new(max_entries);
    store->refs++;
    mb->store = store;
    pthread_mutex_unlock(&store_lock);
    mb->base.ops = &rl_backend_memory_ops;
    *out = &mb->base;
    return RL_OK;
}

static void
mem_destroy(struct rl_backend *be)
{
    struct mem_backend *mb = (struct mem_backend *)be;

    pthread_mutex_lock(&store_lock);
    if (--mb->store->refs == 0) {
        store_free(mb->store);
        store = NULL;
    }
    pthread_mutex_unlock(&store_lock);
    free(mb);
}

static const char *
mem_not_ready(struct rl_backend *be)
{
    return NULL;
}

static void
fail(struct rl_check_res *res, const char *why, rl_check_cb cb, void *arg)
{
    res->status = RL_BACKEND_ERROR;
    res->error = why;
    res->allowed = 0;
    cb(res, arg);
}

/*
 * One check's keys in the table: its limits' keys, then its block key
 * (index n), then the key's reservations (index n + 1, RL_CHECK_RESERVE,
 * RL_CHECK_RSV_SETTLE and RL_CHECK_RSV_LIST), their hashes and shards, the
 * shards it holds locked, and the entries found.
 *
 * The reservations are the entry of backend_rsv_key, as the script's
 * sorted set: its state's ring holds one record per reservation, RSV_WORDS
 * slots (ring_len and ring_cap count records), in the order taken: its
 * deadline, its nonce, the estimate and the limits hash its claim says (a
 * record is found only with the claim it was taken with).  A record goes
 * when it is settled, or when another is taken twice its ttl after it;
 * the entry expires twice the ttl after the last was taken.
 */
#define RSV_WORDS 5
struct mem_op {
    size_t n, per, last; /* last: the index of the last key (n or n + 1) */
    char stackbuf[MEM_KEYBUF], *kbuf;
    size_t klen[RL_LIMITS_MAX + 2];
    uint64_t hash[RL_LIMITS_MAX + 2];
    unsigned shard[RL_LIMITS_MAX + 2], order[RL_LIMITS_MAX + 2], nlocked;
    struct mem_entry *e[RL_LIMITS_MAX + 2];
};

static void
op_key(struct mem_store *s, struct mem_op *op, size_t i, size_t len)
{
    op->klen[i] = len;
    op->hash[i] = keytable_hash(op->kbuf + i * op->per, op->klen[i]);
    op->shard[i] = (unsigned)(op->hash[i] >> 32) & (s->nshards - 1);
}

static void
op_release(struct mem_op *op)
{
    if (op->kbuf != op->stackbuf)
        free(op->kbuf);
}

static int
op_keys(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req)
{
    size_t n = op->n = req->policy->nlimits, longest = req->key_len, len;

    for (size_t i = 0; req->limit_key != NULL && i < n; i++)
        if (req->limit_key[i] != NULL && req->limit_key_len[i] > longest)
            longest = req->limit_key_len[i];
    op->last = n + ((req->flags &
                     (RL_CHECK_RESERVE | RL_CHECK_RSV_SETTLE | RL_CHECK_RSV_LIST)) != 0);
    op->per = longest + MEM_KEY_EXTRA;
    op->kbuf = op->stackbuf;
    if ((op->last + 1) * op->per > sizeof(op->stackbuf))
        op->kbuf = xmalloc((op->last + 1) * op->per);
    for (size_t i = 0; i < n; i++) {
        if (backend_limit_key(req, i, op->kbuf + i * op->per, op->per, &len) != RL_OK)
            return RL_ERR;
        op_key(s, op, i, len);
    }
    if (backend_block_key(req, op->kbuf + n * op->per, op->per, &len) != RL_OK)
        return RL_ERR;
    op_key(s, op, n, len);
    if (op->last > n) {
        if (backend_rsv_key(req, op->kbuf + (n + 1) * op->per, op->per, &len) != RL_OK)
            return RL_ERR;
        op_key(s, op, n + 1, len);
    }
    return RL_OK;
}

/* Lock each shard of the check's keys once, in ascending order. */
static void
op_lock(struct mem_store *s, struct mem_op *op)
{
    op->nlocked = 0;
    for (size_t i = 0; i <= op->last; i++) {
        unsigned j = op->nlocked;
        int dup = 0;

        for (unsigned k = 0; k < op->nlocked; k++)
            dup |= op->order[k] == op->shard[i];
        if (dup)
            continue;
        while (j > 0 && op->order[j - 1] > op->shard[i]) {
            op->order[j] = op->order[j - 1];
            j--;
        }
        op->order[j] = op->shard[i];
        op->nlocked++;
    }
    for (unsigned k = 0; k < op->nlocked; k++)
        pthread_mutex_lock(&s->shards[op->order[k]].lock);
}

static void
op_unlock(struct mem_store *s, struct mem_op *op)
{
    for (unsigned k = op->nlocked; k-- > 0;)
        pthread_mutex_unlock(&s->shards[op->order[k]].lock);
}

/* Key i's live entry, or NULL (an expired one is dropped). */
static struct mem_entry *
op_find(struct mem_store *s, struct mem_op *op, size_t i, int64_t now)
{
    struct mem_shard *sh = &s->shards[op->shard[i]];
    struct mem_entry *e = shard_find(sh, op->hash[i], op->kbuf + i * op->per, op->klen[i]);

    if (e != NULL && e->expires <= now) {
        shard_remove(sh, e);
        e = NULL;
    }
    return op->e[i] = e;
}

/* Key i's entry, inserted when missing. */
static struct mem_entry *
op_get(struct mem_store *s, struct mem_op *op, size_t i, int64_t now)
{
    struct mem_shard *sh = &s->shards[op->shard[i]];

    if (op->e[i] == NULL) /* two limits on one key insert it once */
        op->e[i] = shard_find(sh, op->hash[i], op->kbuf + i * op->per, op->klen[i]);
    if (op->e[i] == NULL)
        op->e[i] = shard_insert(sh, op->hash[i], op->kbuf + i * op->per, op->klen[i], now,
                                op->e, op->last + 1);
    return op->e[i];
}

static void
op_drop(struct mem_store *s, struct mem_op *op, size_t i, int64_t now)
{
    if (op_find(s, op, i, now) != NULL)
        shard_remove(&s->shards[op->shard[i]], op->e[i]);
    op->e[i] = NULL;
}

/* The entry of limit i changed at now: it expires when its state is worthless. */
static void
op_expire(struct mem_store *s, struct mem_op *op, size_t i, const struct rl_limit *lim,
          int64_t now)
{
    int64_t ttl = algo_def(lim->algo)->ttl_us(lim, &op->e[i]->st, now);

    op->e[i]->expires = now + (ttl > 0 ? ttl : 0);
    heap_fix(&s->shards[op->shard[i]], op->e[i]->heap);
}

/* Give lease req->lease back (a release comes alone): whether it was held. */
static bool
op_release_lease(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req,
                 int64_t now)
{
    const struct rl_policy *pol = req->policy;
    size_t i;
    bool held;

    if (!policy_lease_limit(pol, &i) || op_find(s, op, i, now) == NULL)
        return false;
    held = algo_def(pol->limits[i].algo)
               ->release(&pol->limits[i], &op->e[i]->st, now, &req->lease);
    if (op->e[i]->st.ring_len == 0)
        op_drop(s, op, i, now);
    else
        op_expire(s, op, i, &pol->limits[i], now);
    return held;
}

/* Reset, block, give back: in that order, as the script does. */
static void
op_admin(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req, int64_t now)
{
    const struct rl_policy *pol = req->policy;

    if (req->flags & RL_CHECK_RESET) {
        for (size_t i = 0; i < op->n; i++)
            if (req->limit_index < 0 || (size_t)req->limit_index == i)
                op_drop(s, op, i, now);
        if (req->limit_index < 0)
            op_drop(s, op, op->n, now);
    }
    if (req->flags & RL_CHECK_BLOCK) {
        op_drop(s, op, op->n, now);
        if (req->block_ms > 0) {
            struct mem_entry *b = op_get(s, op, op->n, now);

            b->expires = now + req->block_ms * 1000;
            heap_fix(&s->shards[op->shard[op->n]], b->heap);
        }
    }
    for (size_t i = 0; req->cost < 0 && i < op->n; i++) {
        /* a fresh state has nothing to give back */
        if (op_find(s, op, i, now) == NULL)
            continue;
        algo_def(pol->limits[i].algo)->give(&pol->limits[i], &op->e[i]->st, now, -req->cost);
        op_expire(s, op, i, &pol->limits[i], now);
    }
}

/* A charge (RL_CHECK_CHARGE): every limit but concurrency takes the cost,
 * then the answer is a check of cost 0's (check.lua's charge). */
static void
op_charge(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req, int64_t cost,
          int64_t now, int64_t blocked, struct rl_check_res *res)
{
    static const struct rl_algo_state fresh;
    const struct rl_policy *pol = req->policy;

    res->allowed = 1;
    for (size_t i = 0; i < op->n; i++) {
        const struct rl_limit *lim = &pol->limits[i];
        const struct rl_algo_def *d = algo_def(lim->algo);

        if (cost > 0 && d->charge != NULL) {
            d->charge(lim, &op_get(s, op, i, now)->st, now, cost, &res->limits[i]);
            op_expire(s, op, i, lim, now);
        }
        op_find(s, op, i, now);
        d->peek(lim, op->e[i] ? &op->e[i]->st : &fresh, now, 0, &res->limits[i]);
        if (!res->limits[i].allowed)
            res->allowed = 0;
    }
    res->nlimits = op->n;
    if (blocked > 0)
        backend_apply_block(res, blocked);
}

/* The record of req's reservation (its nonce, its claim's estimate and
 * limits hash) with deadline d into rec (RSV_WORDS slots). */
static void
rsv_rec(const struct rl_check_req *req, int64_t d, int64_t rec[RSV_WORDS])
{
    const char *c = req->rsv_claim, *end = c + req->rsv_claim_len;
    int64_t est = 0;
    uint64_t h = 0;

    /* "<estimate>.<12 hex digits>", as reservation_id_parse read it */
    for (; c < end && *c >= '0' && *c <= '9'; c++)
        est = est * 10 + (*c - '0');
    for (c += c < end; c < end; c++)
        h = h << 4 | (uint64_t)(*c <= '9' ? *c - '0' : (*c | 0x20) - 'a' + 10);
    rec[0] = d;
    rec[1] = (int64_t)req->rsv.hi;
    rec[2] = (int64_t)req->rsv.lo;
    rec[3] = est;
    rec[4] = (int64_t)h;
}

/*
 * A settle (RL_CHECK_RSV_SETTLE), as check.lua's settle: the record found
 * with its claim and within its deadline goes, and the difference from the
 * estimate is charged (more) or given back (less) to every limit but a
 * concurrency one; answered as a charge.  Else nothing changes.
 */
static void
op_settle(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req, int64_t now,
          int64_t blocked, struct rl_check_res *res)
{
    const struct rl_policy *pol = req->policy;
    struct mem_entry *r = op_find(s, op, op->n + 1, now);
    int64_t rec[RSV_WORDS], d;
    uint32_t at = 0;

    res->nlimits = op->n;
    rsv_rec(req, 0, rec);
    while (
        r != NULL && at < r->st.ring_len &&
        memcmp(r->st.ring + RSV_WORDS * (size_t)at + 1, rec + 1, sizeof(rec) - sizeof(*rec)))
        at++;
    if (r == NULL || at == r->st.ring_len) {
        res->rsv = RL_RSV_UNKNOWN;
        return;
    }
    d = r->st.ring[RSV_WORDS * (size_t)at];
    memmove(r->st.ring + RSV_WORDS * (size_t)at, r->st.ring + RSV_WORDS * ((size_t)at + 1),
            RSV_WORDS * sizeof(int64_t) * (r->st.ring_len - at - 1));
    if (--r->st.ring_len == 0)
        op_drop(s, op, op->n + 1, now);
    if (d <= now) {
        res->rsv = RL_RSV_EXPIRED;
        return;
    }
    d = req->cost - req->rsv_estimate;
    for (size_t i = 0; d < 0 && i < op->n; i++) {
        const struct rl_limit *lim = &pol->limits[i];

        /* a fresh state has nothing to give back; a slot is no estimate */
        if (lim->algo == RL_ALGO_CONCURRENCY || op_find(s, op, i, now) == NULL)
            continue;
        algo_def(lim->algo)->give(lim, &op->e[i]->st, now, -d);
        op_expire(s, op, i, lim, now);
    }
    op_charge(s, op, req, d > 0 ? d : 0, now, blocked, res);
    res->rsv = RL_RSV_SETTLED;
}

/* A reservation taken: its record, as the script's rsv_record: those
 * whose deadline is a ttl past go first, the entry lives twice its ttl
 * from now. */
static void
op_record(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req, int64_t now)
{
    struct mem_entry *r = op_get(s, op, op->n + 1, now);
    int64_t half = req->rsv_ttl_ms * 1000;
    struct rl_algo_state *st = &r->st;
    uint32_t kept = 0;

    for (uint32_t i = 0; i < st->ring_len; i++) {
        if (st->ring[RSV_WORDS * (size_t)i] <= now - half)
            continue;
        if (kept != i)
            memmove(st->ring + RSV_WORDS * (size_t)kept, st->ring + RSV_WORDS * (size_t)i,
                    RSV_WORDS * sizeof(int64_t));
        kept++;
    }
    st->ring_len = kept;
    if (st->ring_len == st->ring_cap) {
        st->ring_cap = st->ring_cap ? 2 * st->ring_cap : 4;
        st->ring = xrealloc(st->ring, RSV_WORDS * sizeof(int64_t) * st->ring_cap);
    }
    rsv_rec(req, now + half, st->ring + RSV_WORDS * (size_t)st->ring_len++);
    r->expires = now + 2 * half;
    heap_fix(&s->shards[op->shard[op->n + 1]], r->heap);
}

/* RL_CHECK_RSV_LIST: the open records of the key's reservations (deadline
 * after now) into res, the soonest to end first (the order taken), the
 * first RL_RSV_LIST_MAX into list. */
static void
op_list(struct mem_store *s, struct mem_op *op, int64_t now, struct rl_check_res *res,
        struct rl_rsv_open list[RL_RSV_LIST_MAX])
{
    struct mem_entry *r = op_find(s, op, op->n + 1, now);

    res->rsv_listed = list;
    for (uint32_t i = 0; r != NULL && i < r->st.ring_len; i++) {
        const int64_t *rec = r->st.ring + RSV_WORDS * (size_t)i;

        if (rec[0] <= now)
            continue;
        if (res->rsv_nlisted < RL_RSV_LIST_MAX) {
            list[res->rsv_nlisted].estimate = rec[3];
            list[res->rsv_nlisted++].expires_in_ms = algo_us_to_ms_ceil(rec[0] - now);
        }
        res->rsv_open++;
    }
}

/* Decide (peek every limit, then commit all or none) and answer into res. */
static void
op_decide(struct mem_store *s, struct mem_op *op, const struct rl_check_req *req, int64_t now,
          struct rl_check_res *res)
{
    static const struct rl_algo_state fresh;
    const struct rl_policy *pol = req->policy;
    int64_t cost = backend_is_admin(req) ? 0 : req->cost, blocked = 0;

    if (op_find(s, op, op->n, now) != NULL)
        blocked = algo_us_to_ms_ceil(op->e[op->n]->expires - now);
    if (req->flags & RL_CHECK_CHARGE) {
        op_charge(s, op, req, req->cost, now, blocked, res);
        return;
    }
    if (req->flags & RL_CHECK_RSV_SETTLE) {
        op_settle(s, op, req, now, blocked, res);
        return;
    }
    res->allowed = 1;
    for (size_t i = 0; i < op->n; i++) {
        const struct rl_limit *lim = &pol->limits[i];

        op_find(s, op, i, now);
        algo_def(lim->algo)->peek(lim, op->e[i] ? &op->e[i]->st : &fresh, now, cost,
                                  &res->limits[i]);
        if (!res->limits[i].allowed)
            res->allowed = 0;
    }
    /* a reservation: every limit fits within max_delay_ms, none never */
    bool reserve = !res->allowed && blocked == 0 && cost > 0 && (req->flags & RL_CHECK_DELAY);
    for (size_t i = 0; reserve && i < op->n; i++) {
        int64_t r = res->limits[i].retry_after_ms;

        /* a slot's end is a bound, not a promise: reserved only with a
         * slot free */
        reserve = r >= 0 && r <= req->max_delay_ms &&
                  (pol->limits[i].algo != RL_ALGO_CONCURRENCY || r == 0);
    }
    if ((res->allowed && blocked == 0) || reserve || (req->flags & RL_CHECK_FORCE)) {
        for (size_t i = 0; cost > 0 && i < op->n; i++) {
            const struct rl_limit *lim = &pol->limits[i];

            const struct rl_algo_def *d = algo_def(lim->algo);

            if (d->hold != NULL && (req->flags & RL_CHECK_LEASE))
                d->hold(lim, &op_get(s, op, i, now)->st, now, &req->lease, &res->limits[i]);
            else if (reserve && d->reserve != NULL)
                d->reserve(lim, &op_get(s, op, i, now)->st, now, cost, &res->limits[i]);
            else
                d->commit(lim, &op_get(s, op, i, now)->st, now, cost, &res->limits[i]);
            op_expire(s, op, i, lim, now);
        }
        if (cost > 0 && res->allowed && blocked == 0 && (req->flags & RL_CHECK_RESERVE))
            op_record(s, op, req, now);
    }
    res->nlimits = op->n;
    if (blocked > 0)
        backend_apply_block(res, blocked);
    if (reserve)
        backend_apply_delay(res);
}

static void
mem_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct mem_store *s = ((struct mem_backend *)be)->store;
    struct mem_op op;
    struct rl_check_res res;
    struct rl_rsv_open list[RL_RSV_LIST_MAX];
    int64_t now;

    memset(&res, 0, sizeof(res));
    if (req->policy->nlimits > RL_LIMITS_MAX) {
        fail(&res, "too many limits", cb, arg);
        return;
    }
    if (req->limit_index >= (int)req->policy->nlimits && (req->flags & RL_CHECK_RESET)) {
        fail(&res, "no such limit", cb, arg);
        return;
    }
    memset(op.e, 0, sizeof(op.e));
    if (op_keys(s, &op, req) != RL_OK) {
        op_release(&op);
        fail(&res, "key too long", cb, arg);
        return;
    }
    op_lock(s, &op);
    /* read the clock under the locks: each key sees its times in order */
    now = now_unix_us();
    for (unsigned k = 0; k < op.nlocked; k++)
        shard_sweep(&s->shards[op.order[k]], now, MEM_SWEEP_BATCH);
    if (req->flags & RL_CHECK_RELEASE) {
        /* a release answers whether the lease was held, and zeros (as the
         * script, which reads nothing else) */
        res.released = op_release_lease(s, &op, req, now);
        res.nlimits = op.n;
    } else {
        if (backend_is_admin(req))
            op_admin(s, &op, req, now);
        op_decide(s, &op, req, now, &res);
        if (req->flags & RL_CHECK_RSV_LIST)
            op_list(s, &op, now, &res, list);
    }
    op_unlock(s, &op);
    op_release(&op);

    /* keep shards that no check touches from holding expired entries */
    {
        unsigned i = __atomic_fetch_add(&s->sweep_next, 1, __ATOMIC_RELAXED);
        struct mem_shard *sh = &s->shards[i & (s->nshards - 1)];
        if (pthread_mutex_trylock(&sh->lock) == 0) {
            shard_sweep(sh, now, MEM_SWEEP_BATCH);
            pthread_mutex_unlock(&sh->lock);
        }
    }

    res.status = RL_BACKEND_OK;
    cb(&res, arg);
}

const struct rl_backend_ops rl_backend_memory_ops = {
    .name = "memory",
    .create = mem_create,
    .destroy = mem_destroy,
    .check = mem_check,
    .not_ready = mem_not_ready,
};
