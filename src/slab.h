/*
 * slab.h — free lists of small blocks for one thread.  What a hot path
 * allocates and frees by the thousand (nghttp2's stream, frames and header
 * copies: some six blocks of 40 to 224 bytes per gRPC call; rls.c's state
 * of a ShouldRateLimit call, 672 bytes for one descriptor) comes back from
 * a list in a few instructions instead of malloc's and free's hundreds.
 * Blocks of up to SLAB_MAX bytes come in SLAB_CLASSES sizes; larger ones are
 * malloc's.  A list keeps at most `keep` blocks, the rest go back to malloc:
 * what a burst took is given back.  Allocation failure is util.h's (xmalloc).
 *
 * One slab per thread: nothing here takes a lock.
 */
#ifndef RL_SLAB_H
#define RL_SLAB_H

#include <stddef.h>

#include "rl.h"

#define SLAB_CLASSES 5 /* 64, 128, 256, 512, 1024 bytes */
#define SLAB_MAX 1024

/* Under AddressSanitizer a kept block is poisoned, so that a use after
 * release is still caught (here for other free lists too). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SLAB_POISON(p, n) ((void)(p), (void)(n))
#define SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct slab {
    struct slab_list {
        void *head; /* a free block: its first bytes point to the next */
        size_t n;
    } list[SLAB_CLASSES];
    size_t keep; /* blocks kept per list */
};

void slab_init(struct slab *s, size_t keep);
/* Every kept block back to malloc (blocks still out stay valid: releasing
 * one later keeps it again). */
void slab_purge(struct slab *s);

/* n bytes aligned for any type (never NULL). */
void *slab_alloc(struct slab *s, size_t n);
/* p (NULL: nothing) back to its list, or to malloc. */
void slab_release(struct slab *s, void *p);
/* realloc's contract on a block of s (p NULL: slab_alloc). */
void *slab_realloc(struct slab *s, void *p, size_t n);

#endif
