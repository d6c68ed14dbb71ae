/* notify.c — see notify.h. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"

void
notify_systemd(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sun;
    char msg[256];
    size_t plen;
    int fd;

    if (path == NULL || (path[0] != '/' && path[0] != '@'))
        return;
    plen = strlen(path);
    if (plen >= sizeof(sun.sun_path))
        return;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, plen);
    if (path[0] == '@')
        sun.sun_path[0] = '\0'; /* abstract namespace */
    if (strcmp(state, "RELOADING=1") == 0) {
        /* systemd 253+ wants the reload's start time on the same message */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
                 (unsigned long long)ts.tv_sec * 1000000ULL +
                     (unsigned long long)ts.tv_nsec / 1000);
    } else {
        snprintf(msg, sizeof(msg), "%s", state);
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    (void)!sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sun,
                  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen));
    close(fd);
}
