/*
 * util.h — allocation with one failure policy (log and abort: a rate limiter
 * that cannot allocate a few bytes cannot do anything useful), and small
 * string helpers.
 */
#ifndef RL_UTIL_H
#define RL_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rl.h"

void *xmalloc(size_t n) __attribute__((malloc));
void *xcalloc(size_t n, size_t size) __attribute__((malloc));
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s) __attribute__((malloc));
char *xstrndup(const char *s, size_t n) __attribute__((malloc));
char *xasprintf(const char *fmt, ...) RL_PRINTF(1, 2) __attribute__((malloc));
char *xvasprintf(const char *fmt, va_list ap) RL_PRINTF(1, 0);

/* A whole file of at most max bytes into *text (malloc'd, not
 * NUL-terminated), *len its length.  RL_ERR: *cause says why, "FILE: what"
 * (caller frees). */
int read_file_bounded(const char *file, size_t max, char **text, size_t *len,
                      char **cause) RL_WUR;

/* CLOCK_MONOTONIC in microseconds. */
int64_t now_monotonic_us(void);
/* CLOCK_MONOTONIC_COARSE in milliseconds (a tick's precision, no syscall):
 * for deadlines swept now and then, not for measuring. */
int64_t now_coarse_ms(void);
/* The Unix time in microseconds (CLOCK_REALTIME: it may step). */
int64_t now_unix_us(void);

/* Case-insensitive ASCII comparison of the first n bytes. */
bool str_ieq(const char *a, const char *b);

/* SipHash-2-4 of len bytes under the key (k0, k1): a keyed hash, for values
 * a caller must not be able to aim at (hash chains) or to invert. */
uint64_t siphash24(uint64_t k0, uint64_t k1, const void *p, size_t len);

/* FNV-1a of n bytes, continuing from h (start with FNV1A_INIT): a fast,
 * well-spread hash for bytes the operator writes (the config's
 * fingerprint).  Never for a table keyed by bytes a caller chooses: anyone
 * can compute it and aim at one chain (keytable.h). */
#define FNV1A_INIT 14695981039346656037ULL
static inline uint64_t
fnv1a(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Whether c is a hex digit, and its value in *v. */
static inline bool
hex_digit(unsigned char c, int *v)
{
    if (c >= '0' && c <= '9')
        *v = c - '0';
    else if (c >= 'a' && c <= 'f')
        *v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
        *v = c - 'A' + 10;
    else
        return false;
    return true;
}

/*
 * Appending to a fixed buffer without printf: the hot path formats a dozen
 * integers per check, and snprintf parses its format every time
 * (docs/BENCHMARKS.md, "Measurements behind the code").  Past `size` the
 * text is cut (sb.len keeps
 * counting, so sb_ok() tells); the buffer is always NUL-terminated.
 */
struct strbuf {
    char *buf;
    size_t size, len;
};

static inline void
sb_init(struct strbuf *sb, char *buf, size_t size)
{
    sb->buf = buf;
    sb->size = size;
    sb->len = 0;
    if (size > 0)
        buf[0] = '\0';
}

void sb_cut(struct strbuf *sb, const char *s, size_t n);

/* Inline: a check appends some fifty pieces, most of a few bytes. */
static inline void
sb_mem(struct strbuf *sb, const char *s, size_t n)
{
    if (sb->len + n < sb->size) {
        memcpy(sb->buf + sb->len, s, n);
        sb->len += n;
        sb->buf[sb->len] = '\0';
    } else {
        sb_cut(sb, s, n);
    }
}

static inline void
sb_str(struct strbuf *sb, const char *s)
{
    sb_mem(sb, s, strlen(s));
}

void sb_i64(struct strbuf *sb, int64_t v);

/* A name (text as it is) and a number: the pair of every JSON field and
 * header parameter of an answer. */
static inline void
sb_field(struct strbuf *sb, const char *name, int64_t v)
{
    sb_str(sb, name);
    sb_i64(sb, v);
}

/* Everything appended fitted. */
static inline bool
sb_ok(const struct strbuf *sb)
{
    return sb->len < sb->size;
}

#endif
