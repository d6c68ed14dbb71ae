/* redis_reply.c — see redis_reply.h. */
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
 */
struct reply_block {
    struct reply_block *next;
    size_t used, cap;
    max_align_t data[];
};

/* Room for a root and its elements, each an integer or a short string (a
 * longer reply takes more blocks: the guess never sizes one past 256). */
#define REPLY_BLOCK_GUESS(n) \
    (sizeof(struct reply_root) + ((n) < 256 ? (n) : 256) * (sizeof(redisReply) + 48))

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

        if (cap > SIZE_MAX - sizeof(*b) || (b = malloc(sizeof(*b) + cap)) == NULL)
            return NULL;
        b->cap = cap;
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

/* An object of `type` with `extra` bytes behind it; `n` elements when an
 * array (hiredis sets task->elements only after creating it). */
static redisReply *
reply_object(const redisReadTask *task, int type, size_t extra, size_t n)
{
    const redisReadTask *t = task;
    struct reply_root *root;
    redisReply *r;

    if (task->parent == NULL) {
        struct reply_block *head = NULL;

        root = reply_alloc(&head, sizeof(*root) + extra, REPLY_BLOCK_GUESS(n) + extra);
        if (root == NULL)
            return NULL;
        root->blocks = head;
        r = &root->r;
        memset(r, 0, sizeof(*r));
        r->type = type;
        return r;
    }
    while (t->parent != NULL)
        t = t->parent;
    root = (struct reply_root *)((char *)t->obj - offsetof(struct reply_root, r));
    if ((r = reply_alloc(&root->blocks, sizeof(*r) + extra, REPLY_BLOCK_GUESS(16))) == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->type = type;
    ((redisReply *)task->parent->obj)->element[task->idx] = r;
    return r;
}

static void *
reply_string(const redisReadTask *task, char *str, size_t len)
{
    redisReply *r = reply_object(task, task->type, len + 1, 0);

    if (r == NULL)
        return NULL;
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

    if (n > REPLY_MAX_ELEMENTS)
        return NULL;
    r = reply_object(task, REDIS_REPLY_ARRAY, n * sizeof(redisReply *), n);
    if (r == NULL)
        return NULL;
    r->elements = n;
    /* NULL until read, as hiredis' own: a reply cut short is freed whole */
    r->element = n > 0 ? memset(r + 1, 0, n * sizeof(redisReply *)) : NULL;
    return r;
}

static void *
reply_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_object(task, REDIS_REPLY_INTEGER, 0, 0);

    if (r != NULL)
        r->integer = value;
    return r;
}

static void *
reply_nil(const redisReadTask *task)
{
    return reply_object(task, REDIS_REPLY_NIL, 0, 0);
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
