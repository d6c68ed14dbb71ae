/*
 * fuzz_pathnorm.c — libFuzzer target: the path normaliser (pathnorm.c).
 *
 * Input: byte 0 bit 0 keeps runs of '/'; the rest is the path.
 *
 * Oracles besides ASan/UBSan: a normalised path is no longer than its input,
 * starts with '/', holds no NUL, no "." or ".." segment, no escape of an
 * unreserved byte or of '/', only upper-case hex, and (merging) no "//";
 * normalising it again changes nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "pathnorm.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

static int
hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;      /* lower case is not canonical */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned flags;
    const char *in;
    char *out, *again, *cause = NULL;
    size_t len, n, n2;

    if (size < 1)
        return 0;
    flags = (data[0] & 1) ? RL_PATHNORM_KEEP_SLASHES : 0;
    in = (const char *)data + 1;
    len = size - 1;
    out = xmalloc(len + 1);
    if (pathnorm(in, len, flags, out, &n, &cause) != RL_OK) {
        if (cause == NULL)
            abort();
        free(cause);
        free(out);
        return 0;
    }
    if (n > len || n == 0 || out[0] != '/' || out[n] != '\0' || memchr(out, '\0', n) != NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (out[i] == '%') {
            if (i + 2 >= n)
                abort();
            int hi = hexval((unsigned char)out[i + 1]), lo = hexval((unsigned char)out[i + 2]);
            if (hi < 0 || lo < 0)
                abort();
            unsigned char v = (unsigned char)(hi << 4 | lo);
            if (unreserved(v) || v == '/' || v == 0)
                abort();
        }
        if (out[i] == '/') {
            size_t e = i + 1;
            while (e < n && out[e] != '/')
                e++;
            size_t seg = e - i - 1;
            if ((seg == 1 && out[i + 1] == '.') ||
                (seg == 2 && out[i + 1] == '.' && out[i + 2] == '.'))
                abort();
            if (!(flags & RL_PATHNORM_KEEP_SLASHES) && seg == 0 && e < n)
                abort();
        }
    }
    again = xmalloc(n + 1);
    if (pathnorm(out, n, flags, again, &n2, &cause) != RL_OK || n2 != n ||
        memcmp(again, out, n) != 0)
        abort();
    free(again);
    free(out);
    return 0;
}
