/*
 * log.h — one line per event in logfmt (`ts=... level=... msg="..." k=v`) on
 * stderr, which journald and container runtimes collect.  A line is a list
 * of key/value fields, each saying how it is written, so that no value can
 * break its field or the line whatever it holds:
 *
 *   log_warn(LOG_MSG("redis TLS connection failed"), LOG_S("server", peer),
 *            LOG_Q("reason", why));
 *
 * The level is checked before any field is evaluated or formatted.  Never
 * pass a secret or a raw API key.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

enum rl_log_level { RL_LOG_ERROR = 0, RL_LOG_WARN, RL_LOG_INFO, RL_LOG_DEBUG };

/* "error", "warn", "info", "debug" by level, NULL-terminated. */
extern const char *const log_level_names[];

extern int rl_log_level; /* enum rl_log_level; read racily, written rarely */

void log_set_level(enum rl_log_level level);

/* logfmt (key=value) or JSON lines ({"ts":...,"level":...,"msg":...}): the
 * same fields either way (log_format). */
enum rl_log_format { RL_LOG_LOGFMT = 0, RL_LOG_JSON };

/* "logfmt", "json" by format, NULL-terminated. */
extern const char *const log_format_names[];

void log_set_format(enum rl_log_format format);

int log_level_parse(const char *s, enum rl_log_level *out) RL_WUR;
/* "?" for a value that is no level. */
const char *log_level_name(enum rl_log_level l);

enum log_kv_type {
    LOG_KV_TEXT,   /* written as it is, or quoted and escaped when it must be */
    LOG_KV_QUOTED, /* always quoted, escaped inside: text for people */
    LOG_KV_INT,
    LOG_KV_UINT
};

/*
 * One field.  A text value is made of up to three parts joined (NULL: none),
 * then the integer `i` when `with_i`; cut at `max` bytes (0: whole) before it
 * is escaped.  Written with the LOG_* macros below.
 */
struct log_kv {
    const char *key;
    enum log_kv_type type;
    const char *s[3];
    size_t max;
    bool with_i;
    int64_t i;
    uint64_t u;
};

/* Text, quoted only when it holds a space, '=', '"' or a control byte. */
#define LOG_S(k, v) \
    { \
        .key = (k), .type = LOG_KV_TEXT, .s = {(v) } \
    }
#define LOG_SN(k, v, n) \
    { \
        .key = (k), .type = LOG_KV_TEXT, .s = {(v)}, .max = (n) \
    }
/* Text always quoted (a reason, an error: words for people). */
#define LOG_Q(k, v) \
    { \
        .key = (k), .type = LOG_KV_QUOTED, .s = {(v) } \
    }
#define LOG_QN(k, v, n) \
    { \
        .key = (k), .type = LOG_KV_QUOTED, .s = {(v)}, .max = (n) \
    }
/* Text made of parts ("redis" " ready"; c may be NULL). */
#define LOG_J(k, a, b, c) \
    { \
        .key = (k), .type = LOG_KV_TEXT, .s = {(a), (b), (c) } \
    }
/* "host:port". */
#define LOG_HP(k, host, port) \
    { \
        .key = (k), .type = LOG_KV_TEXT, .s = {(host), ":"}, .with_i = true, .i = (port) \
    }
#define LOG_I(k, v) \
    { \
        .key = (k), .type = LOG_KV_INT, .i = (int64_t)(v) \
    }
#define LOG_U(k, v) \
    { \
        .key = (k), .type = LOG_KV_UINT, .u = (uint64_t)(v) \
    }
/* The event, first on every line. */
#define LOG_MSG(text) LOG_S("msg", text)
#define LOG_MSGJ(a, b, c) LOG_J("msg", a, b, c)

/* Write one line of the n fields at `level` (whatever rl_log_level says). */
void log_kv(enum rl_log_level level, const struct log_kv *kv, size_t n);

/* A line of fields at `level`, when the level is on: the fields are not
 * even evaluated otherwise. */
#define log_at(level, ...) \
    do { \
        if (rl_log_level >= (level)) { \
            const struct log_kv log_kv_[] = {__VA_ARGS__}; \
            log_kv((level), log_kv_, RL_ARRAY_LEN(log_kv_)); \
        } \
    } while (0)

#define log_error(...) log_at(RL_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(RL_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(RL_LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(RL_LOG_DEBUG, __VA_ARGS__)

#endif
