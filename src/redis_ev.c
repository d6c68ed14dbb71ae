/* redis_ev.c — see redis_ev.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "redis_ev.h"
#include "util.h"

struct redis_ev {
    redisAsyncContext *ac;
    struct event *rev, *wev;
    bool reading; /* rev added */
    bool armed;   /* wev added: waiting for the socket to take more */
    bool soon;    /* wev activated: the buffer is written in this pass */
    bool writing; /* in wev's callback: a short write waits for the socket */
    bool held;    /* between redis_ev_hold and _release */
    bool wanted;  /* held: a command waits for release's write */
    bool entered; /* in a callback: a cleanup then frees this after it */
    bool deleted; /* cleaned up inside a callback */
};

static void
on_read(evutil_socket_t fd, short what, void *arg)
{
    struct redis_ev *e = arg;

    e->entered = true;
    redisAsyncHandleRead(e->ac);
    e->entered = false;
    if (e->deleted)
        free(e);
    (void)fd;
    (void)what;
}

static void
on_write(evutil_socket_t fd, short what, void *arg)
{
    struct redis_ev *e = arg;

    e->soon = false;
    e->entered = e->writing = true;
    redisAsyncHandleWrite(e->ac);
    e->entered = e->writing = false;
    if (e->deleted)
        free(e);
    (void)fd;
    (void)what;
}

static void
add_read(void *p)
{
    struct redis_ev *e = p;

    if (!e->reading && event_add(e->rev, NULL) == 0)
        e->reading = true;
}

static void
del_read(void *p)
{
    struct redis_ev *e = p;

    if (e->reading) {
        event_del(e->rev);
        e->reading = false;
    }
}

/* hiredis asks for a write after every command it queues, and again after
 * a short write: the first is done in this pass, the second when the socket
 * can take it (so is a connect's). */
static void
add_write(void *p)
{
    struct redis_ev *e = p;

    if (e->armed || e->soon)
        return;
    if ((e->ac->c.flags & REDIS_CONNECTED) && !e->writing && e->held) {
        e->wanted = true;
    } else if ((e->ac->c.flags & REDIS_CONNECTED) && !e->writing) {
        e->soon = true;
        event_active(e->wev, EV_WRITE, 1);
    } else if (event_add(e->wev, NULL) == 0) {
        e->armed = true;
    }
}

static void
del_write(void *p)
{
    struct redis_ev *e = p;

    /* an activation not yet run is taken back too, a held write too */
    e->wanted = false;
    if (e->armed || e->soon) {
        event_del(e->wev);
        e->armed = e->soon = false;
    }
}

static void
cleanup(void *p)
{
    struct redis_ev *e = p;

    event_free(e->rev);
    event_free(e->wev);
    if (e->entered)
        e->deleted = true;
    else
        free(e);
}

/* ac's redis_ev, or NULL when its hooks are another's (redis_tls_bridge.c
 * wraps them, its own struct in ev.data): such a context is not held. */
static struct redis_ev *
own(redisAsyncContext *ac)
{
    return ac->ev.addWrite == add_write ? ac->ev.data : NULL;
}

void
redis_ev_hold(redisAsyncContext *ac)
{
    struct redis_ev *e = own(ac);

    if (e != NULL)
        e->held = true;
}

/* An output buffer up to this is kept, emptied, for the next command. */
#define REDIS_EV_OBUF_KEEP (16 * 1024)

/*
 * redisBufferWrite, except that a buffer written whole is emptied in place:
 * hiredis frees it after every write, and the next command allocates it
 * again and grows it by a realloc (what that cost: docs/BENCHMARKS.md,
 * "Measurements behind the code").  A longer one is hiredis's to write and
 * free.  RL_ERR on an error of the socket, left for hiredis to meet again.
 */
static int
write_out(redisContext *c, int *done)
{
    size_t len = sdslen(c->obuf);
    ssize_t n;

    if (c->err || len > REDIS_EV_OBUF_KEEP)
        return redisBufferWrite(c, done) == REDIS_OK ? RL_OK : RL_ERR;
    if (len > 0) {
        n = write(c->fd, c->obuf, len);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return RL_ERR;
        if (n == (ssize_t)len)
            sdsclear(c->obuf);
        else if (n > 0)
            sdsrange(c->obuf, (int)n, -1);
    }
    *done = sdslen(c->obuf) == 0;
    return RL_OK;
}

void
redis_ev_release(redisAsyncContext *ac)
{
    struct redis_ev *e = own(ac);
    int done = 0;

    if (e == NULL)
        return;
    e->held = false;
    if (!e->wanted)
        return;
    e->wanted = false;
    if (e->armed || e->soon) /* a write already waits: it takes this one */
        return;
    if (write_out(&e->ac->c, &done) != RL_OK) {
        /* hiredis's own write, in the event's callback, meets the error
         * again and drops the connection there */
        e->soon = true;
        event_active(e->wev, EV_WRITE, 1);
    } else {
        if (!done && event_add(e->wev, NULL) == 0)
            e->armed = true;
        add_read(e); /* as hiredis after a write */
    }
}

/* The callback queue below is hiredis 0.14's (Debian 12's), read from its
 * __redisAsyncCommand and __redisPushCallback; 1.x adds fields and a
 * command timeout refreshed with each write, so another version takes
 * redisAsyncFormattedCommand. */
#define QUEUE_AS_0_14 (HIREDIS_MAJOR == 0 && HIREDIS_MINOR == 14)

int
redis_ev_command(redisAsyncContext *ac, redisCallbackFn *fn, void *priv, const char *cmd,
                 size_t len)
{
    redisContext *c = &ac->c;
    redisCallback *cb;

    /* a context closing refuses it, one subscribed or monitoring files its
     * callback elsewhere: hiredis's own way for those; and every command
     * when built against a hiredis whose queue this was not read from */
    if (!QUEUE_AS_0_14 ||
        c->flags & (REDIS_DISCONNECTING | REDIS_FREEING | REDIS_SUBSCRIBED | REDIS_MONITORING))
        return redisAsyncFormattedCommand(ac, fn, priv, cmd, len) == REDIS_OK ? RL_OK : RL_ERR;
    if (redisAppendFormattedCommand(c, cmd, len) != REDIS_OK)
        return RL_ERR;
    /* as __redisPushCallback: hiredis frees it with free() when the reply
     * comes or the context ends */
    cb = xmalloc(sizeof(*cb));
    memset(cb, 0, sizeof(*cb));
    cb->fn = fn;
    cb->privdata = priv;
    cb->pending_subs = 1;
    if (ac->replies.head == NULL)
        ac->replies.head = cb;
    if (ac->replies.tail != NULL)
        ac->replies.tail->next = cb;
    ac->replies.tail = cb;
    /* as hiredis after every command (the hooks may be a TLS bridge's) */
    if (ac->ev.addWrite != NULL)
        ac->ev.addWrite(ac->ev.data);
    return RL_OK;
}

int
redis_ev_attach(redisAsyncContext *ac, struct event_base *evb)
{
    struct redis_ev *e;

    if (ac->ev.data != NULL)
        return RL_ERR;
    e = xcalloc(1, sizeof(*e));
    e->ac = ac;
    e->rev = event_new(evb, ac->c.fd, EV_READ | EV_PERSIST, on_read, e);
    e->wev = event_new(evb, ac->c.fd, EV_WRITE | EV_PERSIST, on_write, e);
    if (e->rev == NULL || e->wev == NULL) {
        if (e->rev != NULL)
            event_free(e->rev);
        if (e->wev != NULL)
            event_free(e->wev);
        free(e);
        return RL_ERR;
    }
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = e;
    /* as hiredis's adapter: reading, and the connect's end awaited */
    add_read(e);
    add_write(e);
    return RL_OK;
}
