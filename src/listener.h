/*
 * listener.h — a listening socket on a libevent base that keeps to a cap of
 * open connections (accepting pauses at the cap and resumes below it) and,
 * when accept() fails for want of descriptors, pauses a moment rather than
 * spin on a socket that stays readable (tmux server_accept does the same).
 * The HTTP (http.c) and gRPC (grpc.c) servers count their connections
 * through it.
 */
#ifndef RL_LISTENER_H
#define RL_LISTENER_H

#include <stddef.h>

#include <sys/socket.h>

#include <event2/util.h>

#include "rl.h"

struct event_base;
struct evconnlistener;

/* A connection accepted: its socket (non-blocking, close-on-exec), taken. */
typedef void (*listener_accept_cb)(evutil_socket_t fd, struct sockaddr *sa, int salen,
                                   void *arg);

struct listener {
    struct event_base *base;
    struct evconnlistener *lev; /* NULL once stopped */
    listener_accept_cb cb;
    void *arg;
    size_t open; /* connections open */
    size_t cap;
    int paused;      /* by the cap */
    const char *who; /* names the listener in log lines */
};

/* Accept on fd (taken) with cb(arg), up to cap connections open; each
 * accepted connection counts as open until listener_closed. */
int listener_start(struct listener *l, struct event_base *base, int fd, listener_accept_cb cb,
                   void *arg, size_t cap, const char *who, char **cause) RL_WUR;
/* A connection it accepted has closed. */
void listener_closed(struct listener *l);
/* A new cap (a reload): accepting pauses or resumes at once. */
void listener_set_cap(struct listener *l, size_t cap);
/* Accept, now and whatever the cap, every connection the kernel has
 * queued on the socket (before listener_stop on a drain: closing the
 * socket would reset them, requests already sent and all). */
void listener_take_queued(struct listener *l);
/* No more accepting (drain, exit); the socket is closed. */
void listener_stop(struct listener *l);

#endif
