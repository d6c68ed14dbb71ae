/* log.c — see log.h. */
#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"

int rl_log_level = RL_LOG_INFO;

void
log_set_level(enum rl_log_level level)
{
    __atomic_store_n(&rl_log_level, (int)level, __ATOMIC_RELAXED);
}

void
log_write(enum rl_log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timeval tv;
    struct tm tm;
    size_t n;
    va_list ap;

    if ((int)level > rl_log_level)
        return;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s ",
                          (long)(tv.tv_usec / 1000), log_level_name(level));
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += (size_t)m;
    if (n >= sizeof(line) - 1)
        n = sizeof(line) - 2;   /* truncated: still one line */
    line[n++] = '\n';
    /* One write per line so lines from several threads never interleave. */
    fwrite(line, 1, n, stderr);
}
