/*
 * notify.h — the systemd readiness protocol (sd_notify) without libsystemd:
 * one datagram to $NOTIFY_SOCKET.  A no-op when not started by systemd.
 */
#ifndef RL_NOTIFY_H
#define RL_NOTIFY_H

/* "READY=1", "RELOADING=1", "STOPPING=1", "STATUS=..."; errors are ignored:
 * a daemon must not fail because its supervisor went away. */
void notify_systemd(const char *state);

#endif
