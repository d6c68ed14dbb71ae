/*
 * arena.h — a bump allocator for work that ends with the call that started
 * it: decoding one message and encoding its answer allocate dozens of small
 * objects (protobuf-c makes one per field), freed all at once by moving a
 * pointer back.  Marks nest like a stack: release to a mark frees everything
 * allocated after it.
 *
 * One arena per thread: nothing here takes a lock.
 */
#ifndef RL_ARENA_H
#define RL_ARENA_H

#include <stddef.h>

#include "rl.h"

struct arena_block;

struct arena {
    struct arena_block *cur; /* the newest block; the first one stays */
    size_t used;             /* bytes of cur handed out */
    size_t total;            /* bytes handed out since empty, for the cap */
    size_t cap;              /* arena_alloc fails past it; 0: no cap */
};

struct arena_mark {
    struct arena_block *block;
    size_t used, total;
};

/* An empty arena whose first block holds `first` bytes, handing out at most
 * `cap` bytes between releases (0: unbounded). */
void arena_init(struct arena *a, size_t first, size_t cap);
void arena_free(struct arena *a);
void arena_set_cap(struct arena *a, size_t cap);

/* n bytes aligned for any type, or NULL once the cap would be passed. */
void *arena_alloc(struct arena *a, size_t n);

struct arena_mark arena_mark(const struct arena *a);
/* Everything allocated since m is gone (blocks past the first are freed). */
void arena_release(struct arena *a, struct arena_mark m);

#endif
