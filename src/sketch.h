/*
 * sketch.h — the heaviest callers of a stream in bounded memory: Space-Saving
 * (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k
 * elements in data streams", ICDT 2005) over k counters.
 *
 * A caller is named by a 64-bit hash its owner computes (keyed: keytable.h)
 * and a few bytes kept to show it.  A caller already counted adds to its
 * counter; a new one takes a free counter, or, all k in use, the one with
 * the least count: it inherits that count as its error.  So every counter's
 * `count` is at least the caller's true total and `count - err` at most it;
 * err is at most total / k: a caller above total / k is always held, and
 * its count is exact within that bound.
 *
 * One writer (a worker's thread); readers on other threads copy entries
 * through each entry's sequence number (a seqlock: odd while written), so
 * the writer never waits and never takes a lock.  Merging the copies of
 * several sketches (workers, time slots) is sketch_merge_*.
 */
#ifndef RL_SKETCH_H
#define RL_SKETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/* Bytes of a caller's name kept to show it (longer ones are cut). */
#define SKETCH_ID_MAX 120
/* Counters of one sketch at most. */
#define SKETCH_K_MAX 1024

struct sketch_entry {
    uint64_t seq; /* odd while the writer changes the entry */
    uint64_t hash;
    uint64_t count; /* 0: unused */
    uint64_t err;
    uint16_t idlen;   /* bytes of id kept */
    uint16_t fulllen; /* the name's length (at most 65535): over idlen when cut */
    uint32_t slot;    /* its place in the index (the writer's) */
    char id[SKETCH_ID_MAX];
};

struct sketch {
    uint32_t k;      /* counters */
    uint32_t n;      /* in use */
    uint32_t mask;   /* index slots - 1 */
    uint16_t *index; /* entry + 1 by hash, 0 empty (linear probing) */
    uint64_t total;  /* the weight of everything added */
    /* at most the least count (counts only grow): an entry at it is a
     * least one; looked for from cursor on, round robin, so that a stream
     * of newcomers finds one in a step or two, not a scan of k */
    uint64_t floor;
    uint32_t cursor;
    struct sketch_entry e[];
};

/* A sketch of k counters (1..SKETCH_K_MAX), empty: one allocation. */
struct sketch *sketch_new(uint32_t k);
void sketch_free(struct sketch *s);
/* The bytes sketch_new(k) takes. */
size_t sketch_size(uint32_t k);

/* Count `w` (> 0) for the caller named by hash h and (id, len). */
void sketch_add(struct sketch *s, uint64_t h, const char *id, size_t len, uint64_t w);
/* Empty it (the writer). */
void sketch_clear(struct sketch *s);

/* ---- readers, on any thread ---- */

/* Copy s's entry i (0..k-1) into *out as one consistent state; false when
 * the writer kept changing it (then *out is not to be used). */
bool sketch_read_entry(const struct sketch *s, uint32_t i, struct sketch_entry *out);
uint64_t sketch_total(const struct sketch *s);

/*
 * A merge of several sketches' copies: each caller's count the sum over the
 * sketches of its count where it is held, and where it is not, of that
 * sketch's least count when the sketch is full (the most it can have had
 * there); its err likewise.  count - err is still at most the true total.
 */
struct sketch_row {
    uint64_t hash;
    uint64_t gen; /* the last sketch added to it (sketch_merge.gen) */
    uint64_t count, err;
    uint32_t idlen, fulllen;
    char id[SKETCH_ID_MAX];
};

struct sketch_merge {
    struct sketch_row *rows;
    size_t n, cap;
    uint32_t *index; /* row + 1 by hash */
    size_t mask;
    uint64_t floor; /* the sum of the full sketches' least counts */
    uint64_t gen;   /* sketches added */
    uint64_t total;
};

void sketch_merge_init(struct sketch_merge *m);
/* Copy s's entries in use into out (room for s->k), each read as one
 * consistent state: how many; *total s's total. */
uint32_t sketch_read(const struct sketch *s, struct sketch_entry *out, uint64_t *total);
/* Add one sketch of k counters, as sketch_read copied it. */
void sketch_merge_entries(struct sketch_merge *m, const struct sketch_entry *e, uint32_t n,
                          uint32_t k, uint64_t total);
/* Both. */
void sketch_merge_add(struct sketch_merge *m, const struct sketch *s);
/* The rows by count, highest first (ties by hash), the floor applied. */
void sketch_merge_finish(struct sketch_merge *m);
/* The merged row of hash h, NULL when no sketch held it (after finish). */
const struct sketch_row *sketch_merge_find(const struct sketch_merge *m, uint64_t h);
void sketch_merge_free(struct sketch_merge *m);

#endif
