/*
 * check_redis_reply.c — the block reply allocator (src/redis_reply.c)
 * against hiredis's own reader: the same RESP bytes through both, fed whole
 * and one byte at a time, must build the same tree; replies that need more
 * than one block, nested arrays, empty and nil ones, and a reply cut by a
 * protocol error (freed whole by the reader: ASan and valgrind, which run
 * the unit tests too, see a leak or a bad free).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include <hiredis/hiredis.h>

#include "redis_reply.h"

/* Every reply in `resp`, read by a reader of either kind (ours: blocks). */
static void
read_all(const char *resp, size_t len, int ours, int bytewise, redisReply **out, size_t max,
         size_t *n)
{
    redisReader *r = redisReaderCreate();
    void *reply;

    ck_assert_ptr_nonnull(r);
    if (ours)
        redis_reply_attach(r);
    *n = 0;
    for (size_t at = 0; at < len;) {
        size_t step = bytewise ? 1 : len - at;

        ck_assert_int_eq(redisReaderFeed(r, resp + at, step), REDIS_OK);
        at += step;
        do {
            ck_assert_int_eq(redisReaderGetReply(r, &reply), REDIS_OK);
            if (reply != NULL) {
                ck_assert_uint_lt(*n, max);
                out[(*n)++] = reply;
            }
        } while (reply != NULL);
    }
    /* the replies outlive the reader here; ours are freed through fn */
    if (ours) {
        for (size_t i = 0; i < *n; i++)
            ck_assert_ptr_nonnull(out[i]);
    }
    redisReaderFree(r);
}

static void
same(const redisReply *a, const redisReply *b)
{
    ck_assert_int_eq(a->type, b->type);
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        ck_assert(a->integer == b->integer);
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        ck_assert_uint_eq(a->len, b->len);
        ck_assert(memcmp(a->str, b->str, a->len) == 0);
        ck_assert_int_eq(a->str[a->len], '\0');
        break;
    case REDIS_REPLY_ARRAY:
        ck_assert_uint_eq(a->elements, b->elements);
        for (size_t i = 0; i < a->elements; i++)
            same(a->element[i], b->element[i]);
        break;
    default:
        break;
    }
}

/* Frees one of our replies the way hiredis does: through the reader's fn. */
static void
free_ours(redisReply *reply)
{
    redisReader *r = redisReaderCreate();

    redis_reply_attach(r);
    r->fn->freeObject(reply);
    redisReaderFree(r);
}

static void
compare(const char *resp, size_t len)
{
    redisReply *a[64], *b[64];
    size_t na, nb;

    for (int bytewise = 0; bytewise < 2; bytewise++) {
        read_all(resp, len, 0, bytewise, a, 64, &na);
        read_all(resp, len, 1, bytewise, b, 64, &nb);
        ck_assert_uint_eq(na, nb);
        ck_assert_uint_gt(na, 0);
        for (size_t i = 0; i < na; i++) {
            same(a[i], b[i]);
            freeReplyObject(a[i]);
            free_ours(b[i]);
        }
    }
}

START_TEST(small_replies_match_hiredis)
{
    static const char resp[] = "+OK\r\n-ERR wrong\r\n:-42\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n"
                               "*-1\r\n*0\r\n*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n-WRONGTYPE x\r\n";

    compare(resp, sizeof(resp) - 1);
}
END_TEST

/* A batch's answer as the check script gives it: per check allowed,
 * remaining, reset, retry; long enough for several blocks, with strings
 * longer than the block guess's 48 bytes and an array nested deep. */
START_TEST(large_and_nested_replies_match_hiredis)
{
    size_t cap = 1 << 20, len = 0;
    char *resp = malloc(cap);

    ck_assert_ptr_nonnull(resp);
    len += (size_t)snprintf(resp + len, cap - len, "*2000\r\n");
    for (int i = 0; i < 2000; i++)
        len += (size_t)snprintf(resp + len, cap - len, ":%d\r\n", i * 7 - 3000);
    len += (size_t)snprintf(resp + len, cap - len, "*300\r\n");
    for (int i = 0; i < 300; i++) {
        len += (size_t)snprintf(resp + len, cap - len, "$%d\r\n", i);
        memset(resp + len, 'a' + i % 26, (size_t)i);
        len += (size_t)i;
        len += (size_t)snprintf(resp + len, cap - len, "\r\n");
    }
    len += (size_t)snprintf(resp + len, cap - len, "*1\r\n*1\r\n*1\r\n*2\r\n:5\r\n*0\r\n");
    compare(resp, len);
    free(resp);
}
END_TEST

/* Arrays either side of the bound on an array's slots (4096 elements: the
 * objects of its elements behind its pointers up to it, each from the
 * blocks past it), holding integers, nils, strings, errors and arrays
 * nested in them, read whole and a byte at a time (compare): a slot or a
 * block overrun corrupts a neighbour, which the comparison of the trees
 * sees though ASan does not (both are inside one allocation). */
START_TEST(arrays_at_the_slots_bound_match_hiredis)
{
    static const int sizes[] = {4096, 4097};
    size_t cap = 1 << 20;
    char *resp = malloc(cap);

    ck_assert_ptr_nonnull(resp);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t len = (size_t)snprintf(resp, cap, "*%d\r\n", sizes[k]);

        for (int i = 0; i < sizes[k]; i++) {
            char *at = resp + len;
            size_t room = cap - len;

            if (i % 50 == 4)
                len += (size_t)snprintf(at, room, "*3\r\n:%d\r\n*2\r\n$-1\r\n$3\r\nabc\r\n*-1\r\n", i);
            else if (i % 5 == 0)
                len += (size_t)snprintf(at, room, ":%d\r\n", i);
            else if (i % 5 == 1)
                len += (size_t)snprintf(at, room, "$-1\r\n");
            else if (i % 5 == 2)
                len += (size_t)snprintf(at, room, "$4\r\n%04d\r\n", i % 10000);
            else
                len += (size_t)snprintf(at, room, "-ERR %d\r\n", i);
        }
        ck_assert_uint_lt(len, cap);
        compare(resp, len);
    }
    free(resp);
}
END_TEST

/* A reply cut by a protocol error: the reader fails and frees what it
 * built (the sanitizers see the rest). */
START_TEST(a_broken_reply_is_freed_whole)
{
    static const char resp[] = "*3\r\n:1\r\n$3\r\nabc\r\n!oops\r\n";
    redisReader *r = redisReaderCreate();
    void *reply = NULL;

    redis_reply_attach(r);
    ck_assert_int_eq(redisReaderFeed(r, resp, sizeof(resp) - 1), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(r, &reply), REDIS_ERR);
    ck_assert_ptr_null(reply);
    redisReaderFree(r);
}
END_TEST

/* An array header past any reply of ours (2 million elements): refused at
 * once, not allocated, the reader failed. */
START_TEST(an_oversized_array_is_refused)
{
    static const char resp[] = "*2000000\r\n:1\r\n";
    redisReader *r = redisReaderCreate();
    void *reply = NULL;

    redis_reply_attach(r);
    ck_assert_int_eq(redisReaderFeed(r, resp, sizeof(resp) - 1), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(r, &reply), REDIS_ERR);
    ck_assert_ptr_null(reply);
    redisReaderFree(r);
}
END_TEST

static Suite *
redis_reply_suite(void)
{
    Suite *s = suite_create("redis_reply");
    TCase *tc = tcase_create("redis_reply");

    tcase_add_test(tc, small_replies_match_hiredis);
    tcase_add_test(tc, large_and_nested_replies_match_hiredis);
    tcase_add_test(tc, arrays_at_the_slots_bound_match_hiredis);
    tcase_add_test(tc, a_broken_reply_is_freed_whole);
    tcase_add_test(tc, an_oversized_array_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(redis_reply_suite(), CK_FORK_GETENV);
}
