/* testutil_redis.c — see testutil_redis.h. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil_redis.h"

#define START_TRIES 3           /* another process may take the port first */
#define START_WAIT_MS 10000

static void
sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A port nobody listens on now: bind port 0 and ask which one we got. */
static int
free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int
answers_ping(int port)
{
    struct timeval tv = { 0, 200000 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *rep;
    int ok = 0;

    if (c == NULL)
        return 0;
    if (!c->err && (rep = redisCommand(c, "PING")) != NULL) {
        ok = rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
        freeReplyObject(rep);
    }
    redisFree(c);
    return ok;
}

static pid_t
spawn(const char *bin, int port)
{
    char portstr[16];
    pid_t parent = getpid(), pid;

    snprintf(portstr, sizeof(portstr), "%d", port);
    pid = fork();
    if (pid != 0)
        return pid;
    /* child */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        close(devnull);
    }
    execlp(bin, bin, "--port", portstr, "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", "/tmp", "--daemonize", "no",
           (char *)NULL);
    fprintf(stderr, "testutil_redis: cannot run %s: %s\n", bin, strerror(errno));
    _exit(127);
}

int
test_redis_start(struct test_redis *r)
{
    const char *bin = getenv("REDIS_SERVER");

    if (bin == NULL || *bin == '\0')
        bin = "redis-server";
    for (int attempt = 0; attempt < START_TRIES; attempt++) {
        int port = free_port(), status;
        pid_t pid;

        if (port < 0) {
            fprintf(stderr, "testutil_redis: no free loopback port: %s\n",
                    strerror(errno));
            return -1;
        }
        if ((pid = spawn(bin, port)) < 0) {
            fprintf(stderr, "testutil_redis: fork: %s\n", strerror(errno));
            return -1;
        }
        for (int waited = 0; waited < START_WAIT_MS; waited += 20) {
            if (answers_ping(port)) {
                r->pid = pid;
                r->port = port;
                return 0;
            }
            if (waitpid(pid, &status, WNOHANG) == pid) {
                if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
                    fprintf(stderr, "testutil_redis: %s not found: install "
                            "redis-server (apt-get install redis-server)\n", bin);
                    return -1;
                }
                pid = -1;   /* exited: most likely the port was taken */
                break;
            }
            sleep_ms(20);
        }
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    fprintf(stderr, "testutil_redis: %s did not start\n", bin);
    return -1;
}

void
test_redis_stop(struct test_redis *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGTERM);
    for (int waited = 0; waited < 5000; waited += 10) {
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
            r->pid = 0;
            return;
        }
        sleep_ms(10);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
}

redisContext *
test_redis_connect(const struct test_redis *r)
{
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);

    if (c == NULL || c->err) {
        fprintf(stderr, "testutil_redis: connect to port %d: %s\n", r->port,
                c ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}
