/* sketch.c — see sketch.h. */
#include <stdlib.h>
#include <string.h>

#include "sketch.h"
#include "util.h"

/* Attempts at copying an entry the writer keeps changing. */
#define READ_TRIES 64

static uint32_t
index_slots(uint32_t k)
{
    uint32_t n = 16;

    /* a quarter full at most: a newcomer's probe ends in a step or two */
    while (n < 4 * k)
        n <<= 1;
    return n;
}

size_t
sketch_size(uint32_t k)
{
    return sizeof(struct sketch) + (size_t)k * sizeof(struct sketch_entry) +
           index_slots(k) * sizeof(uint16_t);
}

struct sketch *
sketch_new(uint32_t k)
{
    struct sketch *s;

    if (k < 1)
        k = 1;
    if (k > SKETCH_K_MAX)
        k = SKETCH_K_MAX;
    s = xcalloc(1, sketch_size(k));
    s->k = k;
    s->mask = index_slots(k) - 1;
    s->index = (uint16_t *)(void *)&s->e[k];
    return s;
}

void
sketch_free(struct sketch *s)
{
    free(s);
}

/* The index slot of hash h: its entry's, or the empty one it would take. */
static uint32_t
slot_of(const struct sketch *s, uint64_t h)
{
    uint32_t i = (uint32_t)h & s->mask;

    while (s->index[i] != 0 && s->e[s->index[i] - 1].hash != h)
        i = (i + 1) & s->mask;
    return i;
}

/* Empty index slot i: the entries after it in its run move back (no
 * tombstones, so a lookup stops at the first empty slot). */
static void
index_remove(struct sketch *s, uint32_t i)
{
    uint32_t j = i;

    for (;;) {
        uint32_t home;

        s->index[i] = 0;
        for (;;) {
            j = (j + 1) & s->mask;
            if (s->index[j] == 0)
                return;
            home = (uint32_t)s->e[s->index[j] - 1].hash & s->mask;
            /* j's entry may move to i unless its home lies in (i, j] */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        s->index[i] = s->index[j];
        s->e[s->index[i] - 1].slot = i;
        i = j;
    }
}

/* An entry with the least count (all k in use). */
static struct sketch_entry *
least(struct sketch *s)
{
    struct sketch_entry *m;

    for (uint32_t t = 0; t < s->k; t++) {
        struct sketch_entry *e = &s->e[s->cursor];

        s->cursor = s->cursor + 1 == s->k ? 0 : s->cursor + 1;
        if (e->count <= s->floor)
            return e;
    }
    /* none left at the floor: it rises to the least count */
    m = &s->e[0];
    for (uint32_t j = 1; j < s->k; j++)
        if (s->e[j].count < m->count)
            m = &s->e[j];
    s->floor = m->count;
    return m;
}

static void
write_begin(struct sketch_entry *e)
{
    __atomic_store_n(&e->seq, e->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void
write_end(struct sketch_entry *e)
{
    __atomic_store_n(&e->seq, e->seq + 1, __ATOMIC_RELEASE);
}

void
sketch_add(struct sketch *s, uint64_t h, const char *id, size_t len, uint64_t w)
{
    uint32_t i = slot_of(s, h);
    struct sketch_entry *e;

    __atomic_store_n(&s->total, s->total + w, __ATOMIC_RELAXED);
    if (s->index[i] != 0) {
        e = &s->e[s->index[i] - 1];
        write_begin(e);
        __atomic_store_n(&e->count, e->count + w, __ATOMIC_RELAXED);
        write_end(e);
        return;
    }
    if (s->n < s->k) {
        e = &s->e[s->n++];
        write_begin(e);
        e->err = 0;
        e->count = w;
    } else {
        /* the least counter gives its place: its count is the most the
         * newcomer can have had before */
        e = least(s);
        index_remove(s, e->slot);
        i = slot_of(s, h);
        write_begin(e);
        e->err = e->count;
        e->count += w;
    }
    e->hash = h;
    e->fulllen = (uint16_t)(len < UINT16_MAX ? len : UINT16_MAX);
    e->idlen = (uint16_t)(len < SKETCH_ID_MAX ? len : SKETCH_ID_MAX);
    memcpy(e->id, id, e->idlen);
    write_end(e);
    e->slot = i;
    s->index[i] = (uint16_t)(e - s->e + 1);
}

void
sketch_clear(struct sketch *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        write_begin(&s->e[i]);
        s->e[i].count = 0;
        s->e[i].err = 0;
        write_end(&s->e[i]);
    }
    s->n = 0;
    s->floor = 0;
    s->cursor = 0;
    memset(s->index, 0, (s->mask + 1) * sizeof(*s->index));
    __atomic_store_n(&s->total, 0, __ATOMIC_RELAXED);
}

bool
sketch_read_entry(const struct sketch *s, uint32_t i, struct sketch_entry *out)
{
    const struct sketch_entry *e = &s->e[i];

    for (int t = 0; t < READ_TRIES; t++) {
        uint64_t a = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE), b;

        if (a & 1)
            continue;
        out->hash = __atomic_load_n(&e->hash, __ATOMIC_RELAXED);
        out->count = __atomic_load_n(&e->count, __ATOMIC_RELAXED);
        out->err = __atomic_load_n(&e->err, __ATOMIC_RELAXED);
        out->idlen = __atomic_load_n(&e->idlen, __ATOMIC_RELAXED);
        out->fulllen = __atomic_load_n(&e->fulllen, __ATOMIC_RELAXED);
        if (out->idlen > SKETCH_ID_MAX)
            continue;
        for (uint32_t j = 0; j < out->idlen; j++)
            out->id[j] = __atomic_load_n(&e->id[j], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        b = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
        if (a == b) {
            out->seq = a;
            return true;
        }
    }
    return false;
}

uint64_t
sketch_total(const struct sketch *s)
{
    return __atomic_load_n(&s->total, __ATOMIC_RELAXED);
}

/* ---- merging ---------------------------------------------------------- */

void
sketch_merge_init(struct sketch_merge *m)
{
    memset(m, 0, sizeof(*m));
}

static void
merge_grow(struct sketch_merge *m)
{
    size_t cap = m->cap != 0 ? 2 * m->cap : 64;
    size_t slots = 2 * cap;

    m->rows = xrealloc(m->rows, cap * sizeof(*m->rows));
    m->cap = cap;
    free(m->index);
    m->index = xcalloc(slots, sizeof(*m->index));
    m->mask = slots - 1;
    for (size_t r = 0; r < m->n; r++) {
        size_t i = (size_t)m->rows[r].hash & m->mask;

        while (m->index[i] != 0)
            i = (i + 1) & m->mask;
        m->index[i] = (uint32_t)r + 1;
    }
}

static struct sketch_row *
merge_row(struct sketch_merge *m, const struct sketch_entry *e)
{
    size_t i;
    struct sketch_row *row;

    if (m->n == m->cap)
        merge_grow(m);
    i = (size_t)e->hash & m->mask;
    while (m->index[i] != 0) {
        row = &m->rows[m->index[i] - 1];
        if (row->hash == e->hash)
            return row;
        i = (i + 1) & m->mask;
    }
    row = &m->rows[m->n];
    m->index[i] = (uint32_t)++m->n;
    memset(row, 0, offsetof(struct sketch_row, id));
    row->hash = e->hash;
    row->idlen = e->idlen;
    row->fulllen = e->fulllen;
    memcpy(row->id, e->id, e->idlen);
    return row;
}

uint32_t
sketch_read(const struct sketch *s, struct sketch_entry *out, uint64_t *total)
{
    uint32_t n = 0;

    *total = sketch_total(s);
    for (uint32_t i = 0; i < s->k; i++)
        if (sketch_read_entry(s, i, &out[n]) && out[n].count > 0)
            n++;
    return n;
}

void
sketch_merge_entries(struct sketch_merge *m, const struct sketch_entry *e, uint32_t n,
                     uint32_t k, uint64_t total)
{
    uint64_t least = UINT64_MAX;

    m->total += total;
    for (uint32_t i = 0; i < n; i++)
        if (e[i].count < least)
            least = e[i].count;
    /* not full: a caller it does not hold was never counted there */
    if (n < k)
        least = 0;
    m->floor += least;
    m->gen++;
    for (uint32_t i = 0; i < n; i++) {
        struct sketch_row *row = merge_row(m, &e[i]);

        if (row->gen == m->gen) {
            /* a second entry of this sketch for the caller (one re-keyed
             * by its reader): the floor counts it once already */
            row->count += e[i].count;
            row->err += e[i].err;
            continue;
        }
        row->gen = m->gen;
        row->count += e[i].count - least;
        /* err may be below least: modular sums, whole again with the floor */
        row->err += e[i].err - least;
    }
}

void
sketch_merge_add(struct sketch_merge *m, const struct sketch *s)
{
    struct sketch_entry *got = xmalloc((size_t)s->k * sizeof(*got));
    uint64_t total;
    uint32_t n = sketch_read(s, got, &total);

    sketch_merge_entries(m, got, n, s->k, total);
    free(got);
}

static int
row_cmp(const void *a, const void *b)
{
    const struct sketch_row *x = a, *y = b;

    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

void
sketch_merge_finish(struct sketch_merge *m)
{
    for (size_t r = 0; r < m->n; r++) {
        m->rows[r].count += m->floor;
        m->rows[r].err += m->floor;
    }
    if (m->n > 1)
        qsort(m->rows, m->n, sizeof(*m->rows), row_cmp);
    /* the index points at rows by position: rebuilt for find */
    if (m->index != NULL) {
        memset(m->index, 0, (m->mask + 1) * sizeof(*m->index));
        for (size_t r = 0; r < m->n; r++) {
            size_t i = (size_t)m->rows[r].hash & m->mask;

            while (m->index[i] != 0)
                i = (i + 1) & m->mask;
            m->index[i] = (uint32_t)r + 1;
        }
    }
}

const struct sketch_row *
sketch_merge_find(const struct sketch_merge *m, uint64_t h)
{
    if (m->index == NULL)
        return NULL;
    for (size_t i = (size_t)h & m->mask; m->index[i] != 0; i = (i + 1) & m->mask)
        if (m->rows[m->index[i] - 1].hash == h)
            return &m->rows[m->index[i] - 1];
    return NULL;
}

void
sketch_merge_free(struct sketch_merge *m)
{
    free(m->rows);
    free(m->index);
    memset(m, 0, sizeof(*m));
}
