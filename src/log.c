/* log.c — see log.h. */
#include <stdarg.h>
#include <stdbool.h>
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
    size_t cap; /* bytes usable for text (the '\n' is extra) */
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

/* One conversion of the caller's format, as read. */
struct spec {
    char text[48]; /* "%", flags, width, precision, then length and conversion */
    size_t len;
    int prec;  /* -1: none */
    int lmod;  /* 'h' 'H'(hh) 'l' 'L'(ll) 'z' 'j' 't' 'D'(L), 0: none */
    char conv; /* '\0': the format ended inside the conversion */
};

/*
 * Flags, width, precision and length modifier after a '%', then the
 * conversion; '*' arguments are taken from ap (a pointer: the caller goes on
 * with the arguments after them).
 */
static void
read_spec(const char **pp, struct spec *sp, va_list *ap)
{
    const char *p = *pp;

    sp->len = 0;
    sp->prec = -1;
    sp->lmod = 0;
    sp->text[sp->len++] = '%';
    while (*p != '\0' && strchr("-+ #0", *p) != NULL && sp->len < 8)
        sp->text[sp->len++] = *p++;
    if (*p == '*') {
        sp->len += (size_t)snprintf(sp->text + sp->len, sizeof(sp->text) - sp->len, "%d",
                                    va_arg(*ap, int));
        p++;
    }
    while (*p >= '0' && *p <= '9' && sp->len < 16)
        sp->text[sp->len++] = *p++;
    if (*p == '.') {
        p++;
        if (*p == '*') {
            sp->prec = va_arg(*ap, int);
            p++;
        } else {
            sp->prec = 0;
            while (*p >= '0' && *p <= '9')
                sp->prec = sp->prec * 10 + (*p++ - '0');
        }
        sp->len += (size_t)snprintf(sp->text + sp->len, sizeof(sp->text) - sp->len, ".%d",
                                    sp->prec < 0 ? 0 : sp->prec);
    }
    if (p[0] == 'h' && p[1] == 'h') {
        sp->lmod = 'H';
        p += 2;
    } else if (p[0] == 'l' && p[1] == 'l') {
        sp->lmod = 'L';
        p += 2;
    } else if (*p != '\0' && strchr("hlzjtL", *p) != NULL) {
        sp->lmod = *p == 'L' ? 'D' : *p;
        p++;
    }
    sp->conv = *p;
    if (*p != '\0')
        p++;
    *pp = p;
}

/* The length modifier again, then the conversion: a spec snprintf takes. */
static void
close_spec(struct spec *sp)
{
    switch (sp->lmod) {
    case 'H':
        sp->text[sp->len++] = 'h';
        sp->text[sp->len++] = 'h';
        break;
    case 'L':
        sp->text[sp->len++] = 'l';
        sp->text[sp->len++] = 'l';
        break;
    case 'D': sp->text[sp->len++] = 'L'; break;
    case 0: break;
    default: sp->text[sp->len++] = (char)sp->lmod;
    }
    sp->text[sp->len++] = sp->conv;
    sp->text[sp->len] = '\0';
}

/* A conversion other than %s, through snprintf; false when it is unknown
 * (then the arguments cannot be followed). */
static bool
put_converted(struct line *l, struct spec *sp, va_list *ap)
{
    const char *spec = sp->text;
    char tmp[128];
    int m;

    close_spec(sp);
    switch (sp->conv) {
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
        switch (sp->lmod) {
        case 'l': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, long)); break;
        case 'L': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, long long)); break;
        case 'z': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, size_t)); break;
        case 'j': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, intmax_t)); break;
        case 't': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, ptrdiff_t)); break;
        default: m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, int)); break;
        }
        break;
    case 'c': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, int)); break;
    case 'p': m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, void *)); break;
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
        if (sp->lmod == 'D')
            m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, long double));
        else
            m = snprintf(tmp, sizeof(tmp), spec, va_arg(*ap, double));
        break;
    default: return false;
    }
    if (m > 0)
        put(l, tmp, (size_t)m < sizeof(tmp) ? (size_t)m : sizeof(tmp) - 1);
    return true;
}

/*
 * printf for log lines: every conversion but %s goes to snprintf as it is;
 * %s goes through put_value, quoted when the format put a '"' before it.
 */
static void
format_line(struct line *l, const char *fmt, va_list ap_in)
{
    const char *p = fmt;
    struct spec sp;
    va_list ap;

    va_copy(ap, ap_in);
    while (*p != '\0') {
        const char *pct = strchr(p, '%');
        if (pct == NULL) {
            put(l, p, strlen(p));
            break;
        }
        put(l, p, (size_t)(pct - p));
        p = pct + 1;
        if (*p == '%') {
            putc_(l, '%');
            p++;
            continue;
        }
        read_spec(&p, &sp, &ap);
        if (sp.conv == 's') {
            const char *s = va_arg(ap, const char *);
            if (s == NULL)
                s = "(null)";
            size_t len = sp.prec >= 0 ? strnlen(s, (size_t)sp.prec) : strlen(s);
            put_value(l, s, len, pct > fmt && pct[-1] == '"');
        } else if (sp.conv == '\0' || !put_converted(l, &sp, &ap)) {
            break;
        }
    }
    va_end(ap);
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
