/* redis_reply.c — see redis_reply.h. */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis_reply.h"

/*
 * The root's first block is sized to hold the whole reply (a guess from its
 * element count); a reply that outgrows it chains more blocks to the root.
 * A reply lives only during its callback (hiredis frees the root after it),
 * which nothing here outlives.
 *
 * An array of up to REPLY_SLOTS_MAX elements has their objects right behind
 * its element pointers, one slot each: an integer or a nil element is set
 * in its slot, with no walk to the root and no allocation (a string's bytes
 * and a nested array's pointers still come from the root's blocks).  And a
 * thread keeps one freed block of REPLY_SPARE_CAP bytes for the next root:
 * a check's reply took a malloc and a free of its block (what both cost:
 * docs/BENCHMARKS.md, "Measurements behind the code").
 */
struct reply_block {
    struct reply_block *next;
    size_t used, cap;
    max_align_t data[];
};

/* Room for a root and its elements, each an integer or a short string (a
 * longer reply takes more blocks: the guess never sizes one past 256); an
 * array's slots hold its elements' objects, not their bytes. */
#define REPLY_BLOCK_GUESS(n) \
    (sizeof(struct reply_root) + ((n) < 256 ? (n) : 256) * (sizeof(redisReply) + 48))
#define REPLY_ROOT_GUESS(n) (sizeof(struct reply_root) + ((n) < 256 ? (n) : 256) * 16)

/* Elements an array may have and still hold their objects in its slots:
 * above this (a hostile "*1000000"), the pointers alone are allocated. */
#define REPLY_SLOTS_MAX 4096

/* The block a thread keeps: the reply of a batch of 64 one-limit checks
 * fits. */
#define REPLY_SPARE_CAP (16 * 1024)

static __thread struct reply_block *spare;
static __thread bool spare_keyed; /* spare_key set: spare_free runs at the end */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

/* A thread's end: its spare freed. */
static void
spare_free(void *unused)
{
    free(spare);
    spare = NULL;
    (void)unused;
}

static void
spare_init(void)
{
    if (pthread_key_create(&spare_key, spare_free) != 0)
        abort();
}

/* Whether this thread may keep a spare: one that will be freed at its end. */
static bool
spare_keep(void)
{
    if (!spare_keyed) {
        pthread_once(&spare_once, spare_init);
        spare_keyed = pthread_setspecific(spare_key, &spare_keyed) == 0;
    }
    return spare_keyed;
}

/* NULL when out of memory: hiredis then fails the reader (as its own
 * allocator would), rather than the process on a server's "*2000000000". */
static void *
reply_alloc(struct reply_block **head, size_t n, size_t guess)
{
    struct reply_block *b = *head;
    void *p;

    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > guess ? n : guess;

        if (b == NULL && spare != NULL && cap <= REPLY_SPARE_CAP) {
            b = spare; /* a root's first block */
            spare = NULL;
        } else {
            if (b == NULL && cap < REPLY_SPARE_CAP)
                cap = REPLY_SPARE_CAP; /* a root's: it may be kept */
            if (cap > SIZE_MAX - sizeof(*b) || (b = malloc(sizeof(*b) + cap)) == NULL)
                return NULL;
            b->cap = cap;
        }
        b->used = 0;
        b->next = *head;
        *head = b;
    }
    p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

/* A root object: its blocks' list just before it, in its first block. */
struct reply_root {
    struct reply_block *blocks;
    redisReply r;
};

/* The slots of an array of n elements, behind its pointers; none past
 * REPLY_SLOTS_MAX. */
static size_t
slots_size(size_t n)
{
    return n <= REPLY_SLOTS_MAX ? n * sizeof(redisReply) : 0;
}

static redisReply *
reply_init(redisReply *r, int type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    return r;
}

/* An object of `type` with `extra` bytes behind it; `n` elements when an
 * array (hiredis sets task->elements only after creating it). */
static redisReply *
reply_object(const redisReadTask *task, int type, size_t extra, size_t n)
{
    const redisReadTask *t = task;
    struct reply_root *root;
    redisReply *r, *parent;
    char *more;

    if (task->parent == NULL) {
        struct reply_block *head = NULL;

        root = reply_alloc(&head, sizeof(*root) + extra, REPLY_ROOT_GUESS(n) + extra);
        if (root == NULL)
            return NULL;
        root->blocks = head;
        return reply_init(&root->r, type);
    }
    while (t->parent != NULL)
        t = t->parent;
    root = (struct reply_root *)((char *)t->obj - offsetof(struct reply_root, r));
    parent = task->parent->obj;
    if (parent->elements <= REPLY_SLOTS_MAX) {
        /* the object in its slot, the bytes behind it from the blocks */
        r = (redisReply *)(parent->element + parent->elements) + task->idx;
        more = extra > 0 ? reply_alloc(&root->blocks, extra, REPLY_BLOCK_GUESS(16)) : NULL;
        if (extra > 0 && more == NULL)
            return NULL;
    } else {
        if ((r = reply_alloc(&root->blocks, sizeof(*r) + extra, REPLY_BLOCK_GUESS(16))) ==
            NULL)
            return NULL;
        more = (char *)(r + 1);
    }
    reply_init(r, type);
    r->str = more; /* the string's bytes, or the array's pointers: set by the caller */
    parent->element[task->idx] = r;
    return r;
}

static void *
reply_string(const redisReadTask *task, char *str, size_t len)
{
    redisReply *r = reply_object(task, task->type, len + 1, 0);

    if (r == NULL)
        return NULL;
    if (task->parent == NULL)
        r->str = (char *)(r + 1);
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    return r;
}

/*
 * Elements one array may have.  Our largest replies are a batch's answer
 * (1024 checks at most, 1 + 3 numbers per limit each) and CLUSTER SLOTS (up
 * to 16384 ranges); an array past this comes from a broken or hostile
 * server, whose "*2000000000" would otherwise have the daemon allocate and
 * zero 16 GB of element pointers.  Refused, it fails the reader as an
 * allocation failure does: the connection is dropped.
 */
#define REPLY_MAX_ELEMENTS (1 << 20)

static void *
reply_array(const redisReadTask *task, int elements)
{
    size_t n = elements > 0 ? (size_t)elements : 0;
    redisReply *r;
    redisReply **element;

    if (n > REPLY_MAX_ELEMENTS)
        return NULL;
    r = reply_object(task, REDIS_REPLY_ARRAY, n * sizeof(redisReply *) + slots_size(n), n);
    if (r == NULL)
        return NULL;
    element = task->parent == NULL ? (redisReply **)(r + 1) : (redisReply **)r->str;
    r->str = NULL;
    r->elements = n;
    /* NULL until read, as hiredis' own: a reply cut short is freed whole */
    r->element = n > 0 ? memset(element, 0, n * sizeof(redisReply *)) : NULL;
    return r;
}

/* An integer or a nil element in its slot, else as any object. */
static redisReply *
reply_scalar(const redisReadTask *task, int type)
{
    redisReply *parent, *r;

    if (task->parent == NULL)
        return reply_object(task, type, 0, 0);
    parent = task->parent->obj;
    if (parent->elements > REPLY_SLOTS_MAX)
        return reply_object(task, type, 0, 0);
    r = reply_init((redisReply *)(parent->element + parent->elements) + task->idx, type);
    parent->element[task->idx] = r;
    return r;
}

static void *
reply_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_scalar(task, REDIS_REPLY_INTEGER);

    if (r != NULL)
        r->integer = value;
    return r;
}

static void *
reply_nil(const redisReadTask *task)
{
    return reply_scalar(task, REDIS_REPLY_NIL);
}

static void
reply_free(void *reply)
{
    struct reply_block *b;

    if (reply == NULL)
        return;
    b = ((struct reply_root *)((char *)reply - offsetof(struct reply_root, r)))->blocks;
    while (b != NULL) {
        struct reply_block *next = b->next;

        /* the root's first block, last in the list: kept if none is */
        if (next == NULL && spare == NULL && b->cap == REPLY_SPARE_CAP && spare_keep()) {
            spare = b;
            return;
        }
        free(b);
        b = next;
    }
}

/* by name: hiredis 1.x adds createDouble and createBool (RESP3 only, which
 * these connections never speak), and positions would shift */
static redisReplyObjectFunctions reply_fns = {
    .createString = reply_string,
    .createArray = reply_array,
    .createInteger = reply_integer,
    .createNil = reply_nil,
    .freeObject = reply_free,
};

void
redis_reply_attach(redisReader *r)
{
    r->fn = &reply_fns;
}
