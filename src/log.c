/* log.c — see log.h. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"

int rl_log_level = RL_LOG_INFO;

const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};

int
log_level_parse(const char *s, enum rl_log_level *out)
{
    for (int i = 0; log_level_names[i] != NULL; i++) {
        if (strcmp(s, log_level_names[i]) == 0) {
            *out = (enum rl_log_level)i;
            return RL_OK;
        }
    }
    return RL_ERR;
}

const char *
log_level_name(enum rl_log_level l)
{
    return (unsigned)l < RL_ARRAY_LEN(log_level_names) - 1 ? log_level_names[l] : "?";
}

void
log_set_level(enum rl_log_level level)
{
    __atomic_store_n(&rl_log_level, (int)level, __ATOMIC_RELAXED);
}

/* A bounded line: writes past the end are dropped, the line stays one line. */
struct line {
    char *buf;
    size_t cap;                 /* bytes usable for text (the '\n' is extra) */
    size_t n;
};

static void
put(struct line *l, const char *s, size_t len)
{
    if (len > l->cap - l->n)
        len = l->cap - l->n;
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void
putc_(struct line *l, char c)
{
    put(l, &c, 1);
}

/*
 * A %s value as logfmt wants it.  Inside quotes the format already wrote,
 * '"', '\\' and control bytes are escaped, so a value cannot end its field
 * early or start a new line (a Redis error or a config problem may hold
 * quotes).  Unquoted, a value that would split the field (space, '=', '"',
 * control bytes) is quoted and escaped; a plain one is written as it is.
 */
static void
put_value(struct line *l, const char *s, size_t len, int quoted)
{
    int quote = 0;

    if (!quoted) {
        for (size_t i = 0; i < len && !quote; i++) {
            unsigned char c = (unsigned char)s[i];
            quote = c <= ' ' || c == '=' || c == '"' || c == 0x7f;
        }
        if (!quote) {
            put(l, s, len);
            return;
        }
        putc_(l, '"');
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': put(l, "\\\"", 2); break;
        case '\\': put(l, "\\\\", 2); break;
        case '\n': put(l, "\\n", 2); break;
        case '\r': put(l, "\\r", 2); break;
        case '\t': put(l, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(esc, sizeof(esc), "\\x%02x", c);
                put(l, esc, 4);
            } else {
                putc_(l, (char)c);
            }
        }
    }
    if (quote)
        putc_(l, '"');
}

/*
 * The specs handed to snprintf below are cut from the caller's format, a
 * literal that RL_PRINTF checked against its arguments at the call site.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

/*
 * printf for log lines: every conversion but %s goes to snprintf as it is;
 * %s goes through put_value, quoted when the format put a '"' before it.
 */
static void
format_line(struct line *l, const char *fmt, va_list ap)
{
    const char *p = fmt;

    while (*p != '\0') {
        const char *pct = strchr(p, '%');
        char spec[32], tmp[128];
        size_t sl = 0;
        int prec = -1, lmod = 0;        /* lmod: 'h' 'H'(hh) 'l' 'L'(ll) 'z' 'j' 't' 'D' */

        if (pct == NULL) {
            put(l, p, strlen(p));
            return;
        }
        put(l, p, (size_t)(pct - p));
        p = pct + 1;
        if (*p == '%') {
            putc_(l, '%');
            p++;
            continue;
        }
        spec[sl++] = '%';
        while (*p != '\0' && strchr("-+ #0", *p) != NULL && sl < 8)
            spec[sl++] = *p++;
        if (*p == '*') {
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, "%d", va_arg(ap, int));
            p++;
        }
        while (*p >= '0' && *p <= '9' && sl < 16)
            spec[sl++] = *p++;
        if (*p == '.') {
            p++;
            if (*p == '*') {
                prec = va_arg(ap, int);
                p++;
            } else {
                prec = 0;
                while (*p >= '0' && *p <= '9')
                    prec = prec * 10 + (*p++ - '0');
            }
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, ".%d", prec < 0 ? 0 : prec);
        }
        if (p[0] == 'h' && p[1] == 'h') { lmod = 'H'; p += 2; }
        else if (p[0] == 'l' && p[1] == 'l') { lmod = 'L'; p += 2; }
        else if (*p != '\0' && strchr("hlzjtL", *p) != NULL) {
            lmod = *p == 'L' ? 'D' : *p;
            p++;
        }
        char conv = *p;
        if (conv == '\0')
            return;
        p++;
        if (conv == 's') {
            const char *s = va_arg(ap, const char *);
            if (s == NULL)
                s = "(null)";
            size_t len = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
            put_value(l, s, len, pct > fmt && pct[-1] == '"');
            continue;
        }
        /* the length modifier again, then the conversion */
        switch (lmod) {
        case 'H': spec[sl++] = 'h'; spec[sl++] = 'h'; break;
        case 'L': spec[sl++] = 'l'; spec[sl++] = 'l'; break;
        case 'D': spec[sl++] = 'L'; break;
        case 0: break;
        default: spec[sl++] = (char)lmod;
        }
        spec[sl++] = conv;
        spec[sl] = '\0';
        int m;
        switch (conv) {
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
            switch (lmod) {
            case 'l': m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long)); break;
            case 'L': m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long long)); break;
            case 'z': m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, size_t)); break;
            case 'j': m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, intmax_t)); break;
            case 't': m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, ptrdiff_t)); break;
            default: m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, int)); break;
            }
            break;
        case 'c':
            m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, int));
            break;
        case 'p':
            m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, void *));
            break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
            if (lmod == 'D')
                m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, long double));
            else
                m = snprintf(tmp, sizeof(tmp), spec, va_arg(ap, double));
            break;
        default:
            return;             /* unknown: the arguments cannot be followed */
        }
        if (m > 0)
            put(l, tmp, (size_t)m < sizeof(tmp) ? (size_t)m : sizeof(tmp) - 1);
    }
}

#pragma GCC diagnostic pop

void
log_write(enum rl_log_level level, const char *fmt, ...)
{
    char buf[2048];
    struct line l = {buf, sizeof(buf) - 1, 0};
    struct timeval tv;
    struct tm tm;
    va_list ap;

    if ((int)level > rl_log_level)
        return;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    l.n = strftime(buf, sizeof(buf), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    l.n += (size_t)snprintf(buf + l.n, sizeof(buf) - l.n, ".%03ldZ level=%s ",
                            (long)(tv.tv_usec / 1000), log_level_name(level));
    va_start(ap, fmt);
    format_line(&l, fmt, ap);
    va_end(ap);
    buf[l.n++] = '\n';
    /* One write per line so lines from several threads never interleave. */
    fwrite(buf, 1, l.n, stderr);
}
