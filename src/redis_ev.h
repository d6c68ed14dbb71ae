/*
 * redis_ev.h — hiredis's async events on libevent, without re-arming them
 * for every command and every reply.
 *
 * hiredis's own adapter (hiredis/adapters/libevent.h) has one-shot events:
 * the read event is added again after every reply, the write event added
 * for every command and deleted when the buffer is written, each time
 * through libevent's event map and two epoll_ctl calls (what that cost:
 * docs/BENCHMARKS.md, "Measurements behind the code").  Here the read event
 * is persistent and stays armed; a command on a connected context is
 * written at the end of the event-loop pass that queued it (the write event
 * activated, no epoll interest), and the write event waits for the socket
 * only while a write is short (or the connect is under way).  hiredis calls
 * the same hooks, in the same places.
 */
#ifndef RL_REDIS_EV_H
#define RL_REDIS_EV_H

#include <event2/event.h>
#include <hiredis/async.h>

#include "rl.h"

/* Attach ac to evb (as redisLibeventAttach); RL_ERR when already attached
 * or libevent refused its events. */
int redis_ev_attach(redisAsyncContext *ac, struct event_base *evb) RL_WUR;

/*
 * Between hold and release, a command queued on a connected ac is not
 * written at the end of the pass but by release, at once, with whatever
 * else was queued since hold: the pass's write event is neither activated
 * nor run (what that saves: docs/BENCHMARKS.md, "Measurements behind the
 * code").  Release runs no callback of hiredis's: a write that fails is
 * handed to the write event, whose callback finds the error and drops the
 * connection as before; a short write waits for the socket as before.
 * A context whose hooks were wrapped by another's (a TLS bridge's) is
 * written at the end of the pass as before: hold and release ignore it.
 */
void redis_ev_hold(redisAsyncContext *ac);
void redis_ev_release(redisAsyncContext *ac);

/*
 * redisAsyncFormattedCommand(ac, fn, priv, cmd, len) for a command that is
 * none of (P)SUBSCRIBE, (P)UNSUBSCRIBE and MONITOR (our every command):
 * hiredis reads each command's name to tell those apart (a strtol of its
 * length, three strncasecmp: what that cost: docs/BENCHMARKS.md,
 * "Measurements behind the code"); here the command is appended and its
 * callback queued as hiredis does for any other.  A context closing,
 * subscribed or monitoring goes through hiredis.  RL_ERR as hiredis's
 * REDIS_ERR.
 */
int redis_ev_command(redisAsyncContext *ac, redisCallbackFn *fn, void *priv, const char *cmd,
                     size_t len) RL_WUR;

#endif
