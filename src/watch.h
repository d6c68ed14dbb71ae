/*
 * watch.h — files that change on disk, told as one event (watch_files):
 * inotify on the directories that hold them, so that a file rewritten in
 * place, renamed over, or swapped behind a symlink (a Kubernetes ConfigMap's
 * `..data`, cert-manager's Secret) is seen, and a burst of changes (one
 * update touches several names) is told once, after it has been quiet for
 * WATCH_QUIET_MS.  Reading the files does not count as a change.
 */
#ifndef RL_WATCH_H
#define RL_WATCH_H

#include <stddef.h>

#include "rl.h"

#define WATCH_QUIET_MS 200

struct event_base;
struct rl_watch;

/* fn(arg) on base's loop after each burst of changes; NULL (logged) when
 * inotify cannot be had. */
struct rl_watch *watch_new(struct event_base *base, void (*fn)(void *arg), void *arg);

/* Watch these paths, replacing what was watched: a directory itself, a
 * file by its directory; NULL entries are skipped.  A path that cannot be
 * watched is logged and skipped. */
void watch_set(struct rl_watch *w, const char *const *paths, size_t n);

void watch_free(struct rl_watch *w);

#endif
