/* watch.c — see watch.h. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "util.h"
#include "watch.h"

#define WATCH_MAX 16 /* directories */

/* What changes a name: written and closed, created, deleted, renamed in or
 * out (a symlink swapped by rename), its attributes (touch, chmod). */
#define WATCH_MASK \
    (IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | \
     IN_DELETE_SELF | IN_MOVE_SELF)

struct rl_watch {
    int fd;
    struct event *read_ev;
    struct event *quiet_ev; /* the burst has been quiet this long */
    int wd[WATCH_MAX];
    char *dir[WATCH_MAX];
    size_t n;
    void (*fn)(void *arg);
    void *arg;
};

static void
on_quiet(evutil_socket_t fd, short what, void *arg)
{
    struct rl_watch *w = arg;

    w->fn(w->arg);
    (void)fd;
    (void)what;
}

static void
on_read(evutil_socket_t fd, short what, void *arg)
{
    struct rl_watch *w = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct timeval tv = {0, WATCH_QUIET_MS * 1000};
    int any = 0;

    /* the events' names do not matter: any change reloads everything */
    while (read(w->fd, buf, sizeof(buf)) > 0)
        any = 1;
    if (any)
        evtimer_add(w->quiet_ev, &tv); /* (re)started: told once quiet */
    (void)fd;
    (void)what;
}

struct rl_watch *
watch_new(struct event_base *base, void (*fn)(void *arg), void *arg)
{
    struct rl_watch *w = xcalloc(1, sizeof(*w));

    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        log_error(LOG_MSG("cannot watch files (inotify)"), LOG_Q("reason", strerror(errno)));
        free(w);
        return NULL;
    }
    w->fn = fn;
    w->arg = arg;
    w->read_ev = event_new(base, w->fd, EV_READ | EV_PERSIST, on_read, w);
    w->quiet_ev = evtimer_new(base, on_quiet, w);
    event_add(w->read_ev, NULL);
    return w;
}

static void
clear(struct rl_watch *w)
{
    for (size_t i = 0; i < w->n; i++) {
        inotify_rm_watch(w->fd, w->wd[i]);
        free(w->dir[i]);
    }
    w->n = 0;
}

/* The directory to watch for path: itself, or the one holding it. */
static char *
dir_of(const char *path)
{
    struct stat st;
    const char *slash;

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return xstrdup(path);
    slash = strrchr(path, '/');
    if (slash == NULL)
        return xstrdup(".");
    return slash == path ? xstrdup("/") : xstrndup(path, (size_t)(slash - path));
}

void
watch_set(struct rl_watch *w, const char *const *paths, size_t n)
{
    if (w == NULL)
        return;
    clear(w);
    for (size_t i = 0; i < n; i++) {
        char *dir;
        size_t j;
        int wd;

        if (paths[i] == NULL)
            continue;
        dir = dir_of(paths[i]);
        for (j = 0; j < w->n && strcmp(w->dir[j], dir) != 0; j++)
            ;
        if (j < w->n || w->n == WATCH_MAX) {
            free(dir);
            continue;
        }
        wd = inotify_add_watch(w->fd, dir, WATCH_MASK);
        if (wd < 0) {
            log_warn(LOG_MSG("cannot watch a directory for changes"), LOG_S("dir", dir),
                     LOG_Q("reason", strerror(errno)));
            free(dir);
            continue;
        }
        w->wd[w->n] = wd;
        w->dir[w->n++] = dir;
    }
}

void
watch_free(struct rl_watch *w)
{
    if (w == NULL)
        return;
    clear(w);
    event_free(w->read_ev);
    event_free(w->quiet_ev);
    close(w->fd);
    free(w);
}
