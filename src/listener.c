/* listener.c — see listener.h. */
#include <errno.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "listener.h"
#include "log.h"
#include "util.h"

#define ACCEPT_PAUSE_MS 100

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct listener *l = arg;

    if (l->lev != NULL && !l->paused)
        evconnlistener_enable(l->lev);
    (void)fd;
    (void)what;
}

static void
on_error(struct evconnlistener *lev, void *arg)
{
    struct listener *l = arg;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};

    log_warn(LOG_MSG("accept failed, pausing 100ms"), LOG_S("listener", l->who),
             LOG_Q("error", evutil_socket_error_to_string(err)));
    evconnlistener_disable(lev);
    event_base_once(l->base, -1, EV_TIMEOUT, on_resume, l, &tv);
}

static void pause_or_resume(struct listener *l);

static void
on_listener_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                   int salen, void *arg)
{
    struct listener *l = arg;

    l->open++;
    pause_or_resume(l);
    l->cb(fd, sa, salen, l->arg);
    (void)lev;
}

int
listener_start(struct listener *l, struct event_base *base, int fd, listener_accept_cb cb,
               void *arg, size_t cap, const char *who, char **cause)
{
    l->base = base;
    l->cb = cb;
    l->arg = arg;
    l->open = 0;
    l->cap = cap > 0 ? cap : 1;
    l->paused = 0;
    l->who = who;
    l->lev = evconnlistener_new(base, on_listener_accept, l,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (l->lev == NULL) {
        *cause = xstrdup("cannot listen on the socket");
        return RL_ERR;
    }
    evconnlistener_set_error_cb(l->lev, on_error);
    return RL_OK;
}

static void
pause_or_resume(struct listener *l)
{
    if (l->lev == NULL)
        return;
    if (l->paused && l->open < l->cap) {
        evconnlistener_enable(l->lev);
        l->paused = 0;
    } else if (!l->paused && l->open >= l->cap) {
        evconnlistener_disable(l->lev);
        l->paused = 1;
    }
}

void
listener_closed(struct listener *l)
{
    l->open--;
    pause_or_resume(l);
}

void
listener_set_cap(struct listener *l, size_t cap)
{
    l->cap = cap > 0 ? cap : 1;
    pause_or_resume(l);
}

void
listener_take_queued(struct listener *l)
{
    evutil_socket_t lfd;

    if (l->lev == NULL || (lfd = evconnlistener_get_fd(l->lev)) < 0)
        return;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return; /* EAGAIN: none left; EMFILE: the rest are lost anyway */
        }
        l->open++;
        l->cb(fd, (struct sockaddr *)&ss, (int)len, l->arg);
    }
}

void
listener_stop(struct listener *l)
{
    if (l->lev != NULL) {
        evconnlistener_free(l->lev);
        l->lev = NULL;
    }
}
