/*
 * check_redis_conn.c — the deadline ring of a Redis connection (redis_conn.h:
 * rconn_send, rconn_replied, rconn_stalled): every command sent notes by
 * when its reply is due, replies come back in order, and the connection is
 * stalled when the oldest reply owed is overdue.  A ring that loses its
 * place drops healthy connections or keeps hung ones; one that overflows
 * writes past its end.
 *
 * The connection is a real hiredis context to a loopback socket that
 * listens and never answers (the kernel completes the handshake): commands
 * queue in its buffer, nothing is read, and the test says when each reply
 * "came" with rconn_replied.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "unit.h"

#include "redis_conn.h"
#include "rl.h"
#include "util.h"

#define MS 1000LL /* microseconds */
#define PING "*1\r\n$4\r\nPING\r\n"
#define MAX_PENDING 8
#define CONNECT_TIMEOUT_MS 2000

static struct event_base *evb;
static int listener = -1, port;
static struct rconn conn;
static int answered; /* callbacks run (with NULL, when the context is freed) */

static void
on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    answered++;
}

static const struct rconn_hooks no_hooks;

static void
setup(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    struct rconn_conf conf;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(listener, 0);
    ck_assert_int_eq(bind(listener, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(listener, 16), 0);
    ck_assert_int_eq(getsockname(listener, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    evb = event_base_new();
    ck_assert_ptr_nonnull(evb);

    memset(&conf, 0, sizeof(conf));
    conf.evb = evb;
    conf.host = "127.0.0.1";
    conf.port = port;
    conf.name = "127.0.0.1:test";
    conf.what = conf.field = "redis";
    conf.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    conf.max_pending = MAX_PENDING;
    conf.hooks = &no_hooks;
    rconn_init(&conn, &conf);
    answered = 0;
}

static void
teardown(void)
{
    rconn_close(&conn);
    event_base_free(evb);
    close(listener);
}

/* The connection is up on a context of the test's own. */
static void
connect_now(void)
{
    conn.ac = redisAsyncConnect("127.0.0.1", port);
    ck_assert_ptr_nonnull(conn.ac);
    ck_assert_int_eq(conn.ac->err, 0);
}

static int
send_ping(int64_t wait_ms)
{
    return rconn_send(&conn, on_reply, NULL, wait_ms, PING, strlen(PING));
}

/* A reply to the oldest command owed, on the current context. */
static void
reply_one(void)
{
    static const int reply;

    rconn_replied(&conn, conn.ac, &reply);
}

START_TEST(nothing_owed_is_never_stalled)
{
    int64_t now = now_monotonic_us();

    ck_assert_int_eq(rconn_stalled(&conn, now + 3600 * 1000 * MS), 0);
    ck_assert_int_eq(send_ping(0), RL_ERR); /* not connected: refused */
    connect_now();
    ck_assert_int_eq(rconn_stalled(&conn, now + 3600 * 1000 * MS), 0);
    ck_assert_int_eq(send_ping(5000), RL_OK);
    reply_one();
    ck_assert_uint_eq(conn.pending, 0);
    ck_assert_int_eq(rconn_stalled(&conn, now + 3600 * 1000 * MS), 0);
}
END_TEST

START_TEST(stalled_once_the_oldest_reply_is_overdue)
{
    int64_t before, after;

    connect_now();
    before = now_monotonic_us();
    ck_assert_int_eq(send_ping(5000), RL_OK);
    after = now_monotonic_us();
    ck_assert_uint_eq(conn.pending, 1);
    ck_assert_int_eq(rconn_stalled(&conn, before + 5000 * MS - 1), 0);
    ck_assert_int_eq(rconn_stalled(&conn, after + 5000 * MS + 1), 1);
    reply_one();
    ck_assert_int_eq(rconn_stalled(&conn, after + 5000 * MS + 1), 0);
}
END_TEST

START_TEST(a_short_wait_is_raised_to_the_floor)
{
    int64_t before, after;

    /* never sooner than RCONN_STALL_MIN_MS nor connect_timeout (2 s here) */
    ck_assert_int_gt(CONNECT_TIMEOUT_MS, RCONN_STALL_MIN_MS);
    connect_now();
    before = now_monotonic_us();
    ck_assert_int_eq(send_ping(10), RL_OK);
    ck_assert_int_eq(rconn_sendf(&conn, on_reply, NULL, "PING"), RL_OK); /* wait 0 */
    after = now_monotonic_us();
    ck_assert_int_eq(rconn_stalled(&conn, before + CONNECT_TIMEOUT_MS * MS - 1), 0);
    ck_assert_int_eq(rconn_stalled(&conn, after + CONNECT_TIMEOUT_MS * MS + 1), 1);
    reply_one();
    ck_assert_int_eq(rconn_stalled(&conn, before + CONNECT_TIMEOUT_MS * MS - 1), 0);
    ck_assert_int_eq(rconn_stalled(&conn, after + CONNECT_TIMEOUT_MS * MS + 1), 1);
}
END_TEST

START_TEST(replies_come_in_order_so_the_head_decides)
{
    int64_t t0, t1;

    connect_now();
    t0 = now_monotonic_us();
    ck_assert_int_eq(send_ping(60000), RL_OK); /* due in a minute */
    ck_assert_int_eq(send_ping(3000), RL_OK);  /* due in 3 s, behind it */
    t1 = now_monotonic_us();
    /* the second is overdue at +10 s, but the first is owed before it */
    ck_assert_int_eq(rconn_stalled(&conn, t1 + 10000 * MS), 0);
    reply_one();
    ck_assert_int_eq(rconn_stalled(&conn, t1 + 10000 * MS), 1);
    ck_assert_int_eq(rconn_stalled(&conn, t0 + 3000 * MS - 1), 0);
    reply_one();
    ck_assert_uint_eq(conn.pending, 0);
    ck_assert_int_eq(rconn_stalled(&conn, t1 + 120000 * MS), 0);
}
END_TEST

/* The wait of the i-th command of the_ring_wraps: past the floor (connect
 * timeout), each later one due later. */
static int64_t
wrap_wait_ms(unsigned i)
{
    return CONNECT_TIMEOUT_MS + 1000 + 1000 * (int64_t)i;
}

START_TEST(the_ring_wraps_and_keeps_its_place)
{
    unsigned cap = MAX_PENDING + 16; /* rconn_init: room for the handshake and a probe */
    int64_t sent_at[5 * (MAX_PENDING + 16)];

    connect_now();
    /* three owed at a time, round and round past the ring's end: the head is
     * always the i-3rd command, due wait(i-3) after it was sent */
    for (unsigned i = 0; i < 5 * cap; i++) {
        if (i >= 3) {
            int64_t now = now_monotonic_us();

            ck_assert_uint_eq(conn.pending, 3);
            ck_assert_int_eq(rconn_stalled(&conn, sent_at[i - 3] + wrap_wait_ms(i - 3) * MS - 1),
                             0);
            ck_assert_int_eq(rconn_stalled(&conn, now + wrap_wait_ms(i - 3) * MS + 1), 1);
            reply_one();
        }
        sent_at[i] = now_monotonic_us();
        ck_assert_int_eq(send_ping(wrap_wait_ms(i)), RL_OK);
        ck_assert_uint_lt(conn.sent_head, cap);
    }
}
END_TEST

START_TEST(a_full_ring_refuses)
{
    unsigned cap = MAX_PENDING + 16, i;

    connect_now();
    for (i = 0; i < cap; i++)
        ck_assert_int_eq(send_ping(1000), RL_OK);
    ck_assert_uint_eq(conn.pending, cap);
    ck_assert_int_eq(send_ping(1000), RL_ERR);
    ck_assert_int_eq(rconn_sendf(&conn, on_reply, NULL, "PING"), RL_ERR);
    ck_assert_uint_eq(conn.pending, cap);
    reply_one();
    ck_assert_int_eq(send_ping(1000), RL_OK);
    ck_assert_int_eq(send_ping(1000), RL_ERR);
}
END_TEST

START_TEST(a_reply_from_a_context_given_up_is_not_counted)
{
    redisAsyncContext *old;

    connect_now();
    ck_assert_int_eq(send_ping(1000), RL_OK);
    ck_assert_int_eq(send_ping(1000), RL_OK);
    old = conn.ac;
    rconn_replied(&conn, (const redisAsyncContext *)&conn, NULL); /* another context */
    ck_assert_uint_eq(conn.pending, 2);
    rconn_replied(&conn, old, NULL); /* NULL (the context going): owed no more */
    ck_assert_uint_eq(conn.pending, 1);
    reply_one();
    reply_one(); /* none owed: nothing to take */
    ck_assert_uint_eq(conn.pending, 0);
    ck_assert_int_eq(send_ping(1000), RL_OK);
    ck_assert_uint_eq(conn.pending, 1);
}
END_TEST

START_TEST(every_callback_runs_once_at_close)
{
    connect_now();
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(send_ping(1000), RL_OK);
    rconn_close(&conn);
    ck_assert_int_eq(answered, 5);
    ck_assert_ptr_null(conn.ac);
    /* teardown closes again: a closed connection closes as a no-op */
}
END_TEST

static Suite *
redis_conn_suite(void)
{
    Suite *s = suite_create("redis_conn");
    TCase *ring = tcase_create("deadline_ring");

    tcase_add_checked_fixture(ring, setup, teardown);
    tcase_add_test(ring, nothing_owed_is_never_stalled);
    tcase_add_test(ring, stalled_once_the_oldest_reply_is_overdue);
    tcase_add_test(ring, a_short_wait_is_raised_to_the_floor);
    tcase_add_test(ring, replies_come_in_order_so_the_head_decides);
    tcase_add_test(ring, the_ring_wraps_and_keeps_its_place);
    tcase_add_test(ring, a_full_ring_refuses);
    tcase_add_test(ring, a_reply_from_a_context_given_up_is_not_counted);
    tcase_add_test(ring, every_callback_runs_once_at_close);
    suite_add_tcase(s, ring);
    return s;
}

int
main(void)
{
    return rl_unit_run(redis_conn_suite(), CK_FORK_GETENV);
}
