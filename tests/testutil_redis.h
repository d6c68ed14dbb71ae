/*
 * testutil_redis.h — a real redis-server for a test program, started on a
 * free loopback port and stopped by pid, the way hiredis's test.sh and
 * redis's own find_available_port do it.  No redis-server is a failure.
 */
#ifndef RL_TESTUTIL_REDIS_H
#define RL_TESTUTIL_REDIS_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

struct test_redis {
    pid_t pid;
    int port;
};

/*
 * Start `$REDIS_SERVER` (default redis-server, from PATH) with no persistence
 * and wait until it answers PING.  On failure print why to stderr and return
 * -1.  The server dies with the calling process (PR_SET_PDEATHSIG), so a
 * crashed test leaves nothing behind.
 */
int test_redis_start(struct test_redis *r);
void test_redis_stop(struct test_redis *r);

/* A synchronous connection, or NULL (with a message on stderr). */
redisContext *test_redis_connect(const struct test_redis *r);

#endif
