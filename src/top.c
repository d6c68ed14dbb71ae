/* top.c — see top.h. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "config.h"
#include "keytable.h"
#include "sketch.h"
#include "top.h"
#include "util.h"

/* A minute no slot holds yet (and one being cleared). */
#define NO_MINUTE UINT64_MAX

/* One policy's on one worker. */
struct top_policy {
    uint64_t minute[TOP_SLOTS]; /* what slot i holds (atomic for readers) */
    struct sketch *s[TOP_SLOTS][TOP_BY_COUNT];
};

struct rl_top {
    uint32_t k;
    /* set once on the worker, read by others: atomic pointers */
    struct top_policy *p[TOP_IDS];
    uint32_t rls_rules;   /* of p past RL_METRICS_POLICIES taken */
    uint64_t rls_refused; /* checks of rules past TOP_RLS_RULES_MAX (atomic) */
};

struct rl_top *
top_new(uint32_t k)
{
    struct rl_top *t = xcalloc(1, sizeof(*t));

    t->k = k < 1 ? 1 : k > TOP_K_MAX ? TOP_K_MAX : k;
    return t;
}

void
top_free(struct rl_top *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < RL_ARRAY_LEN(t->p); i++) {
        if (t->p[i] == NULL)
            continue;
        for (int j = 0; j < TOP_SLOTS; j++)
            for (int b = 0; b < TOP_BY_COUNT; b++)
                sketch_free(t->p[i]->s[j][b]);
        free(t->p[i]);
    }
    free(t);
}

size_t
top_policy_bytes(uint32_t k)
{
    return sizeof(struct top_policy) + (size_t)TOP_SLOTS * TOP_BY_COUNT * sketch_size(k);
}

static struct top_policy *
policy_new(uint32_t k)
{
    struct top_policy *p = xcalloc(1, sizeof(*p));

    for (int j = 0; j < TOP_SLOTS; j++) {
        p->minute[j] = NO_MINUTE;
        for (int b = 0; b < TOP_BY_COUNT; b++)
            p->s[j][b] = sketch_new(k);
    }
    return p;
}

void
top_record(struct rl_top *t, int policy_id, const char *id, size_t len, uint64_t hash,
           bool denied, int64_t units, int64_t now_us)
{
    struct top_policy *p;
    uint64_t minute = (uint64_t)(now_us / TOP_SLOT_US);
    int slot = (int)(minute % TOP_SLOTS);

    if ((unsigned)policy_id >= TOP_IDS || (!denied && units <= 0) || len == 0)
        return;
    p = t->p[policy_id];
    if (p == NULL && policy_id >= RL_METRICS_POLICIES) {
        /* an RLS rule: there may be 100,000; sketches for a few */
        if (t->rls_rules >= TOP_RLS_RULES_MAX) {
            __atomic_add_fetch(&t->rls_refused, 1, __ATOMIC_RELAXED);
            return;
        }
        t->rls_rules++;
    }
    if (p == NULL) {
        p = policy_new(t->k);
        __atomic_store_n(&t->p[policy_id], p, __ATOMIC_RELEASE);
    }
    if (p->minute[slot] != minute) {
        /* a new minute in this slot: readers skip it while it is cleared */
        __atomic_store_n(&p->minute[slot], NO_MINUTE, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        for (int b = 0; b < TOP_BY_COUNT; b++)
            sketch_clear(p->s[slot][b]);
        __atomic_store_n(&p->minute[slot], minute, __ATOMIC_RELEASE);
    }
    sketch_add(p->s[slot][denied ? TOP_BY_DENIED : TOP_BY_UNITS],
               hash != 0 ? hash : keytable_hash(id, len), id, len,
               denied ? 1 : (uint64_t)units);
}

bool
top_counted(struct rl_top *const *tops, size_t n, int id)
{
    if ((unsigned)id >= TOP_IDS)
        return false;
    for (size_t w = 0; w < n; w++)
        if (tops[w] != NULL && __atomic_load_n(&tops[w]->p[id], __ATOMIC_ACQUIRE) != NULL)
            return true;
    return false;
}

/* Add the minutes [first, last] of every worker's policy to m. */
static void
merge_kind(struct rl_top *const *tops, size_t n, int policy_id, enum top_by by, uint64_t first,
           uint64_t last, struct sketch_merge *m)
{
    struct sketch_entry *got = NULL;

    for (size_t w = 0; w < n; w++) {
        const struct top_policy *p;

        if (tops[w] == NULL ||
            (p = __atomic_load_n(&tops[w]->p[policy_id], __ATOMIC_ACQUIRE)) == NULL)
            continue;
        if (got == NULL)
            got = xmalloc((size_t)tops[w]->k * sizeof(*got));
        for (int j = 0; j < TOP_SLOTS; j++) {
            uint64_t a = __atomic_load_n(&p->minute[j], __ATOMIC_ACQUIRE), total;
            uint32_t k = p->s[j][by]->k, got_n;

            if (a == NO_MINUTE || a < first || a > last)
                continue;
            got_n = sketch_read(p->s[j][by], got, &total);
            /* a caller by its name (a whole one): the hash a check gave
             * it may differ across a reload */
            for (uint32_t e = 0; e < got_n; e++)
                if (got[e].idlen == got[e].fulllen)
                    got[e].hash = keytable_hash(got[e].id, got[e].idlen);
            /* kept only if the slot still held that minute after: one
             * cleared meanwhile is left out (its minute is over) */
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&p->minute[j], __ATOMIC_RELAXED) == a)
                sketch_merge_entries(m, got, got_n, k, total);
        }
    }
    free(got);
    sketch_merge_finish(m);
}

/* The escaped identity (identity.h: %XX for a byte) as the caller sent it. */
static size_t
unescape(const char *s, size_t n, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        int hi, lo;

        if (s[i] != '%') {
            out[o++] = s[i];
        } else if (i + 2 >= n) {
            break; /* cut inside an escape */
        } else if (hex_digit((unsigned char)s[i + 1], &hi) &&
                   hex_digit((unsigned char)s[i + 2], &lo)) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

void
top_read(struct rl_top *const *tops, size_t n, int policy_id, enum top_by by, int minutes,
         size_t max, int64_t now_us, struct top_answer *out)
{
    struct sketch_merge m[TOP_BY_COUNT];
    uint64_t last = (uint64_t)(now_us / TOP_SLOT_US), first;

    memset(out, 0, sizeof(*out));
    if (minutes < 1)
        minutes = 1;
    if (minutes > TOP_SLOTS - 1)
        minutes = TOP_SLOTS - 1;
    first = last >= (uint64_t)minutes ? last - (uint64_t)minutes : 0;
    out->interval_us = (int64_t)minutes * TOP_SLOT_US + now_us % TOP_SLOT_US;
    if ((unsigned)policy_id >= TOP_IDS)
        return;
    for (int b = 0; b < TOP_BY_COUNT; b++) {
        sketch_merge_init(&m[b]);
        merge_kind(tops, n, policy_id, (enum top_by)b, first, last, &m[b]);
    }
    out->total = m[by].total;
    out->n = m[by].n < max ? m[by].n : max;
    out->callers = xcalloc(out->n > 0 ? out->n : 1, sizeof(*out->callers));
    for (size_t i = 0; i < out->n; i++) {
        const struct sketch_row *row = &m[by].rows[i];
        struct top_caller *c = &out->callers[i];

        /* an RLS caller as its key shows it, escaped (its separators) */
        if (policy_id >= RL_METRICS_POLICIES) {
            memcpy(c->identity, row->id, row->idlen);
            c->identity[row->idlen] = '\0';
            c->identity_len = row->idlen;
        } else {
            c->identity_len = unescape(row->id, row->idlen, c->identity);
        }
        c->cut = row->fulllen > row->idlen;
        c->figure[by] = row->count;
        c->error_bound = row->err;
        for (int b = 0; b < TOP_BY_COUNT; b++) {
            const struct sketch_row *o;

            if (b != (int)by && (o = sketch_merge_find(&m[b], row->hash)) != NULL)
                c->figure[b] = o->count;
        }
    }
    for (int b = 0; b < TOP_BY_COUNT; b++)
        sketch_merge_free(&m[b]);
}

void
top_answer_free(struct top_answer *a)
{
    free(a->callers);
    memset(a, 0, sizeof(*a));
}

void
top_format_metrics(struct evbuffer *out, struct rl_top *const *tops, size_t n,
                   const struct rl_config *cfg, int64_t now_us)
{
    evbuffer_add_printf(out, "# HELP ratelimitd_top_caller_share The heaviest caller's share "
                             "of the policy's denied checks over the last minute.\n"
                             "# TYPE ratelimitd_top_caller_share gauge\n");
    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct rl_policy *p = &cfg->policies[i];
        struct top_answer a;
        double share = 0;

        top_read(tops, n, p->metrics_id, TOP_BY_DENIED, 1, 1, now_us, &a);
        if (a.n > 0 && a.total > 0) {
            uint64_t c = a.callers[0].figure[TOP_BY_DENIED];
            share = (double)(c < a.total ? c : a.total) / (double)a.total;
        }
        evbuffer_add_printf(out, "ratelimitd_top_caller_share{policy=\"%s\"} %.6g\n", p->name,
                            share);
        top_answer_free(&a);
    }
    uint64_t refused = 0;
    for (size_t w = 0; w < n; w++)
        if (tops[w] != NULL)
            refused += __atomic_load_n(&tops[w]->rls_refused, __ATOMIC_RELAXED);
    evbuffer_add_printf(out,
                        "# HELP ratelimitd_top_rls_refused_total RLS checks not counted by "
                        "GET /admin/top: their worker keeps sketches for %d rules already.\n"
                        "# TYPE ratelimitd_top_rls_refused_total counter\n"
                        "ratelimitd_top_rls_refused_total %" PRIu64 "\n",
                        TOP_RLS_RULES_MAX, refused);
}
