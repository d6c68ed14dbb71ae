/*
 * slab.c — see slab.h.
 *
 * Each block has a header of one max_align_t in front of what it hands
 * out, holding its capacity: a class's size (64 << k) for a block of the
 * lists, the size asked for when larger.  Under AddressSanitizer a kept
 * block is poisoned, so that a use after release is still caught.
 */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slab.h"
#include "util.h"

#define HDR alignof(max_align_t)
#define CLASS_MIN 64

/* The class of a block of n bytes; SLAB_CLASSES: too large for one. */
static unsigned
class_of(size_t n)
{
    unsigned k = 0;

    while (k < SLAB_CLASSES && n > (size_t)CLASS_MIN << k)
        k++;
    return k;
}

static size_t *
header(void *p)
{
    return (size_t *)(void *)((unsigned char *)p - HDR);
}

void
slab_init(struct slab *s, size_t keep)
{
    memset(s, 0, sizeof(*s));
    s->keep = keep;
}

void
slab_purge(struct slab *s)
{
    for (unsigned k = 0; k < SLAB_CLASSES; k++) {
        struct slab_list *l = &s->list[k];
        while (l->head != NULL) {
            unsigned char *b = l->head;
            SLAB_UNPOISON(b, HDR + ((size_t)CLASS_MIN << k));
            l->head = *(void **)(void *)(b + HDR);
            free(b);
        }
        l->n = 0;
    }
}

void *
slab_alloc(struct slab *s, size_t n)
{
    unsigned k = class_of(n);
    size_t cap = k < SLAB_CLASSES ? (size_t)CLASS_MIN << k : n;
    unsigned char *b;

    if (k < SLAB_CLASSES && s->list[k].head != NULL) {
        struct slab_list *l = &s->list[k];
        b = l->head;
        SLAB_UNPOISON(b, HDR + cap);
        l->head = *(void **)(void *)(b + HDR);
        l->n--;
    } else {
        /* past SIZE_MAX: xmalloc fails, the one policy */
        b = xmalloc(cap > SIZE_MAX - HDR ? SIZE_MAX : HDR + cap);
    }
    memcpy(b, &cap, sizeof(cap));
    return b + HDR;
}

void
slab_release(struct slab *s, void *p)
{
    unsigned char *b;
    size_t cap;
    unsigned k;

    if (p == NULL)
        return;
    b = (unsigned char *)p - HDR;
    memcpy(&cap, b, sizeof(cap));
    k = class_of(cap);
    if (k >= SLAB_CLASSES || s->list[k].n >= s->keep) {
        free(b);
        return;
    }
    *(void **)p = s->list[k].head;
    s->list[k].head = b;
    s->list[k].n++;
    SLAB_POISON(b, HDR + cap);
}

void *
slab_realloc(struct slab *s, void *p, size_t n)
{
    size_t cap;
    void *q;

    if (p == NULL)
        return slab_alloc(s, n);
    memcpy(&cap, header(p), sizeof(cap));
    if (n <= cap)
        return p;
    q = slab_alloc(s, n);
    memcpy(q, p, cap);
    slab_release(s, p);
    return q;
}
