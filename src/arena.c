/* arena.c — see arena.h. */
#include <stdalign.h>
#include <stdlib.h>

#include "arena.h"
#include "util.h"

#define ALIGN alignof(max_align_t)

struct arena_block {
    struct arena_block *prev;
    size_t size;
    alignas(max_align_t) unsigned char data[];
};

static struct arena_block *
block_new(struct arena_block *prev, size_t size)
{
    struct arena_block *b = xmalloc(sizeof(*b) + size);

    b->prev = prev;
    b->size = size;
    return b;
}

void
arena_init(struct arena *a, size_t first, size_t cap)
{
    a->cur = block_new(NULL, first > 0 ? first : 4096);
    a->used = 0;
    a->total = 0;
    a->cap = cap;
}

void
arena_set_cap(struct arena *a, size_t cap)
{
    a->cap = cap;
}

void
arena_free(struct arena *a)
{
    while (a->cur != NULL) {
        struct arena_block *prev = a->cur->prev;
        free(a->cur);
        a->cur = prev;
    }
}

void *
arena_alloc(struct arena *a, size_t n)
{
    size_t need = (n + ALIGN - 1) & ~(ALIGN - 1);
    void *p;

    if (need < n || (a->cap > 0 && (need > a->cap || a->total > a->cap - need)))
        return NULL;
    if (a->cur->size - a->used < need) {
        /* each block at least twice the last: a large message costs few
         * mallocs; the first block stays for the next message */
        size_t size = a->cur->size * 2;
        while (size < need)
            size *= 2;
        a->cur = block_new(a->cur, size);
        a->used = 0;
    }
    p = a->cur->data + a->used;
    a->used += need;
    a->total += need;
    return p;
}

struct arena_mark
arena_mark(const struct arena *a)
{
    struct arena_mark m = {a->cur, a->used, a->total};
    return m;
}

void
arena_release(struct arena *a, struct arena_mark m)
{
    while (a->cur != m.block) {
        struct arena_block *prev = a->cur->prev;
        free(a->cur);
        a->cur = prev;
    }
    a->used = m.used;
    a->total = m.total;
}
