/* log.c — see log.h. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"

int rl_log_level = RL_LOG_INFO;
static int log_format = RL_LOG_LOGFMT; /* enum rl_log_format; atomic */
const char *const log_format_names[] = {"logfmt", "json", NULL};

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

void
log_set_format(enum rl_log_format format)
{
    __atomic_store_n(&log_format, (int)format, __ATOMIC_RELAXED);
}

/* A bounded line: writes past the end are dropped, the line stays one line. */
struct line {
    char *buf;
    size_t cap; /* bytes usable for text (the '\n' is extra) */
    size_t n;
};

static void
line_put(struct line *l, const char *s, size_t len)
{
    if (len > l->cap - l->n)
        len = l->cap - l->n;
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void
line_putc(struct line *l, char c)
{
    line_put(l, &c, 1);
}

/* Inside quotes '"', '\\' and control bytes are escaped, so a value cannot
 * end its field early or start a new line (a Redis error or a config
 * problem may hold quotes). */
static void
put_escaped(struct line *l, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': line_put(l, "\\\"", 2); break;
        case '\\': line_put(l, "\\\\", 2); break;
        case '\n': line_put(l, "\\n", 2); break;
        case '\r': line_put(l, "\\r", 2); break;
        case '\t': line_put(l, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
                line_put(l, esc, 4);
            } else {
                line_putc(l, (char)c);
            }
        }
    }
}

static void
put_u64(struct line *l, uint64_t v)
{
    char tmp[24];
    size_t n = sizeof(tmp);

    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    line_put(l, tmp + n, sizeof(tmp) - n);
}

static void
put_i64(struct line *l, int64_t v)
{
    if (v < 0) {
        line_putc(l, '-');
        put_u64(l, -(uint64_t)v);
    } else {
        put_u64(l, (uint64_t)v);
    }
}

/* The parts of a text value, each as much as is left of f->max: a NULL first
 * part reads "(null)"; the others are absent when NULL. */
static size_t
text_part(const struct log_kv *f, int i, size_t *left, const char **out)
{
    const char *p = f->s[i];
    size_t n;

    if (p == NULL && i == 0)
        p = "(null)";
    if (p == NULL) {
        *out = "";
        return 0;
    }
    n = strnlen(p, *left);
    *left -= n;
    *out = p;
    return n;
}

/* A value that would split its field (space, '=', '"', control bytes) is
 * quoted and escaped unless the field is always quoted anyway. */
static bool
text_needs_quotes(const struct log_kv *f)
{
    size_t left = f->max > 0 ? f->max : SIZE_MAX;

    for (int i = 0; i < 3; i++) {
        const char *p;
        size_t n = text_part(f, i, &left, &p);

        for (size_t j = 0; j < n; j++) {
            unsigned char c = (unsigned char)p[j];
            if (c <= ' ' || c == '=' || c == '"' || c == 0x7f)
                return true;
        }
    }
    return false;
}

static void
put_text(struct line *l, const struct log_kv *f)
{
    bool quote = f->type == LOG_KV_QUOTED || text_needs_quotes(f);
    size_t left = f->max > 0 ? f->max : SIZE_MAX;

    if (quote)
        line_putc(l, '"');
    for (int i = 0; i < 3; i++) {
        const char *p;
        size_t n = text_part(f, i, &left, &p);

        if (quote)
            put_escaped(l, p, n);
        else
            line_put(l, p, n);
    }
    if (f->with_i)
        put_i64(l, f->i);
    if (quote)
        line_putc(l, '"');
}

/* JSON's string escapes: '"', '\\' and control bytes (RFC 8259 7). */
static void
put_json_escaped(struct line *l, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            line_putc(l, '\\');
            line_putc(l, (char)c);
        } else if (c < 0x20 || c == 0x7f) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            line_put(l, esc, 6);
        } else {
            line_putc(l, (char)c);
        }
    }
}

/* A text field as a JSON string: its parts, then its integer. */
static void
put_json_text(struct line *l, const struct log_kv *f)
{
    size_t left = f->max > 0 ? f->max : SIZE_MAX;

    line_putc(l, '"');
    for (int i = 0; i < 3; i++) {
        const char *p;
        size_t n = text_part(f, i, &left, &p);
        put_json_escaped(l, p, n);
    }
    if (f->with_i)
        put_i64(l, f->i);
    line_putc(l, '"');
}

/* The fields as one JSON object, without its closing brace; a field that
 * does not fit is left out with those after it: true then. */
static bool
put_json(struct line *l, const char *ts, enum rl_log_level level, const struct log_kv *kv,
         size_t n)
{
    line_put(l, "{\"ts\":\"", 7);
    line_put(l, ts, strlen(ts));
    line_put(l, "\",\"level\":\"", 11);
    line_put(l, log_level_name(level), strlen(log_level_name(level)));
    line_putc(l, '"');
    for (size_t i = 0; i < n; i++) {
        size_t at = l->n;

        line_put(l, ",\"", 2);
        put_json_escaped(l, kv[i].key, strlen(kv[i].key));
        line_put(l, "\":", 2);
        switch (kv[i].type) {
        case LOG_KV_INT: put_i64(l, kv[i].i); break;
        case LOG_KV_UINT: put_u64(l, kv[i].u); break;
        default: put_json_text(l, &kv[i]); break;
        }
        if (l->n == l->cap) { /* cut: the line stays valid JSON without it */
            l->n = at;
            return true;
        }
    }
    return false;
}

void
log_kv(enum rl_log_level level, const struct log_kv *kv, size_t n)
{
    char buf[2048];
    struct line l = {buf, sizeof(buf) - 1, 0};
    struct timeval tv;
    struct tm tm;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    if (__atomic_load_n(&log_format, __ATOMIC_RELAXED) == RL_LOG_JSON) {
        char ts[40];
        size_t tn = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

        static const char cut[] = ",\"truncated\":true";

        snprintf(ts + tn, sizeof(ts) - tn, ".%03ldZ", (long)(tv.tv_usec / 1000));
        l.cap -= sizeof(cut); /* room for it and the closing brace */
        if (put_json(&l, ts, level, kv, n)) {
            memcpy(buf + l.n, cut, sizeof(cut) - 1);
            l.n += sizeof(cut) - 1;
        }
        buf[l.n++] = '}';
        buf[l.n++] = '\n';
        fwrite(buf, 1, l.n, stderr);
        return;
    }
    l.n = strftime(buf, sizeof(buf), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    l.n += (size_t)snprintf(buf + l.n, sizeof(buf) - l.n, ".%03ldZ level=%s",
                            (long)(tv.tv_usec / 1000), log_level_name(level));
    for (size_t i = 0; i < n; i++) {
        line_putc(&l, ' ');
        line_put(&l, kv[i].key, strlen(kv[i].key));
        line_putc(&l, '=');
        switch (kv[i].type) {
        case LOG_KV_INT: put_i64(&l, kv[i].i); break;
        case LOG_KV_UINT: put_u64(&l, kv[i].u); break;
        default: put_text(&l, &kv[i]); break;
        }
    }
    buf[l.n++] = '\n';
    /* One write per line so lines from several threads never interleave. */
    fwrite(buf, 1, l.n, stderr);
}
