/*
 * log.h — one line per event in logfmt (`ts=... level=... msg="..." k=v`) on
 * stderr, which journald and container runtimes collect.  The level is
 * checked before anything is formatted.  Never pass a secret or a raw API key.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include "rl.h"

enum rl_log_level { RL_LOG_ERROR = 0, RL_LOG_WARN, RL_LOG_INFO, RL_LOG_DEBUG };

/* "error", "warn", "info", "debug" by level, NULL-terminated. */
extern const char *const log_level_names[];

extern int rl_log_level; /* enum rl_log_level; read racily, written rarely */

void log_set_level(enum rl_log_level level);

int log_level_parse(const char *s, enum rl_log_level *out) RL_WUR;
/* "?" for a value that is no level. */
const char *log_level_name(enum rl_log_level l);
void log_write(enum rl_log_level level, const char *fmt, ...) RL_PRINTF(2, 3);

#define log_error(...) log_write(RL_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) \
    do { \
        if (rl_log_level >= RL_LOG_WARN) \
            log_write(RL_LOG_WARN, __VA_ARGS__); \
    } while (0)
#define log_info(...) \
    do { \
        if (rl_log_level >= RL_LOG_INFO) \
            log_write(RL_LOG_INFO, __VA_ARGS__); \
    } while (0)
#define log_debug(...) \
    do { \
        if (rl_log_level >= RL_LOG_DEBUG) \
            log_write(RL_LOG_DEBUG, __VA_ARGS__); \
    } while (0)

#endif
