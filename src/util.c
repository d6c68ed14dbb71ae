/* util.c — see util.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "util.h"

static void RL_NORETURN
oom(size_t n)
{
    /* No allocation from here on: write straight to stderr. */
    fprintf(stderr, "level=error msg=\"out of memory\" bytes=%zu\n", n);
    abort();
}

void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *
xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        oom(n * size);
    return p;
}

void *
xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        oom(n);
    return q;
}

char *
xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *
xvasprintf(const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0)
        oom(0);
    char *p = xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *
xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = xvasprintf(fmt, ap);
    va_end(ap);
    return p;
}

/* The clock `id` read in units of 1/per_s of a second. */
static inline int64_t
clock_read(clockid_t id, int64_t per_s)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * per_s + ts.tv_nsec / (1000000000 / per_s);
}

int64_t
now_monotonic_us(void)
{
    return clock_read(CLOCK_MONOTONIC, 1000000);
}

int64_t
now_coarse_ms(void)
{
    return clock_read(CLOCK_MONOTONIC_COARSE, 1000);
}

int64_t
now_unix_us(void)
{
    return clock_read(CLOCK_REALTIME, 1000000);
}

int
read_file_bounded(const char *file, size_t max, char **text, size_t *len, char **cause)
{
    FILE *f = fopen(file, "rb");
    size_t cap = 4096, n = 0, r;
    char *buf;

    if (f == NULL) {
        *cause = xasprintf("%s: %s", file, strerror(errno));
        return RL_ERR;
    }
    buf = xmalloc(cap);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            if (cap >= max) {
                *cause = xasprintf("%s: larger than %zu bytes", file, max);
                fclose(f);
                free(buf);
                return RL_ERR;
            }
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
    }
    if (ferror(f)) {
        *cause = xasprintf("%s: %s", file, strerror(errno));
        fclose(f);
        free(buf);
        return RL_ERR;
    }
    fclose(f);
    *text = buf;
    *len = n;
    return RL_OK;
}

bool
str_ieq(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* The slow side of sb_mem: what fits, cut, and the length still counted. */
void
sb_cut(struct strbuf *sb, const char *s, size_t n)
{
    if (sb->len < sb->size) {
        size_t room = sb->size - 1 - sb->len;
        memcpy(sb->buf + sb->len, s, n < room ? n : room);
        sb->buf[sb->len + (n < room ? n : room)] = '\0';
    }
    sb->len += n;
}

static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* u's digits written backwards, ending before p: two a division, in 32 bits
 * below 2^32 (a 64-bit division by 100 costs half as much again). */
static inline char *
digits_back(char *p, uint64_t u)
{
    uint32_t w;

    while (u > UINT32_MAX) {
        uint64_t q = u / 100;

        p -= 2;
        memcpy(p, digit_pairs + (unsigned)(u - q * 100) * 2, 2);
        u = q;
    }
    for (w = (uint32_t)u; w >= 100;) {
        uint32_t q = w / 100;

        p -= 2;
        memcpy(p, digit_pairs + (w - q * 100) * 2, 2);
        w = q;
    }
    if (w >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + w * 2, 2);
    } else {
        *--p = (char)('0' + w);
    }
    return p;
}

/* Decimal digits of u, 1 for 0 (u | 1 has as many): log2 times log10(2)
 * as 1233/4096, one too many at most, which a power of ten corrects. */
static inline size_t
digits10(uint64_t u)
{
    static const uint64_t pow10[20] = {
        1ULL,
        10ULL,
        100ULL,
        1000ULL,
        10000ULL,
        100000ULL,
        1000000ULL,
        10000000ULL,
        100000000ULL,
        1000000000ULL,
        10000000000ULL,
        100000000000ULL,
        1000000000000ULL,
        10000000000000ULL,
        100000000000000ULL,
        1000000000000000ULL,
        10000000000000000ULL,
        100000000000000000ULL,
        1000000000000000000ULL,
        10000000000000000000ULL,
    };
    uint64_t v = u | 1;
    unsigned t = (unsigned)(64 - __builtin_clzll(v)) * 1233 >> 12;

    return t - (v < pow10[t]) + 1;
}

/* sb_i64 where the number may not fit: through a buffer, and cut. */
static void __attribute__((noinline)) sb_i64_cut(struct strbuf *sb, uint64_t u, bool neg)
{
    char tmp[24], *end = tmp + sizeof(tmp), *p = digits_back(end, u);

    if (neg)
        *--p = '-';
    sb_cut(sb, p, (size_t)(end - p));
}

/*
 * Two digits per division: the hot path formats a couple of dozen numbers a
 * check.  Its digits counted first, a number is written in place, from its
 * end: no buffer of its own, no copy, no call to memcpy (docs/BENCHMARKS.md,
 * "Measurements behind the code").
 */
void
sb_i64(struct strbuf *sb, int64_t v)
{
    /* negate as unsigned: INT64_MIN has no positive twin */
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    size_t n = digits10(u) + (v < 0);
    char *p;

    if (sb->len + n >= sb->size) {
        sb_i64_cut(sb, u, v < 0);
        return;
    }
    p = sb->buf + sb->len + n;
    *p = '\0';
    p = digits_back(p, u);
    if (v < 0)
        p[-1] = '-';
    sb->len += n;
}

/* SipHash-2-4 (Aumasson and Bernstein), little-endian words. */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND \
    do { \
        v0 += v1; \
        v1 = ROTL(v1, 13); \
        v1 ^= v0; \
        v0 = ROTL(v0, 32); \
        v2 += v3; \
        v3 = ROTL(v3, 16); \
        v3 ^= v2; \
        v0 += v3; \
        v3 = ROTL(v3, 21); \
        v3 ^= v0; \
        v2 += v1; \
        v1 = ROTL(v1, 17); \
        v1 ^= v2; \
        v2 = ROTL(v2, 32); \
    } while (0)

/* The little-endian word at p: one load where the host is little-endian
 * (a check hashes its key: byte by byte, the loads were a third of it). */
static inline uint64_t
le64(const unsigned char *p)
{
    uint64_t m;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&m, p, 8);
#else
    m = 0;
    for (int j = 7; j >= 0; j--)
        m = m << 8 | p[j];
#endif
    return m;
}

uint64_t
siphash24(uint64_t k0, uint64_t k1, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    uint64_t m, b = (uint64_t)len << 56;
    size_t i, tail = len & 7;

    for (i = 0; i + 8 <= len; i += 8) {
        m = le64(p + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t j = 0; j < tail; j++)
        b |= (uint64_t)p[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
