/* pathnorm.c — see pathnorm.h. */
#include <stdbool.h>
#include <string.h>

#include "pathnorm.h"
#include "util.h"

/* RFC 3986 §2.3: the only bytes whose escapes mean the same as themselves. */
static bool
unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/*
 * Step 1, §6.2.2.1 and §6.2.2.2: escapes of unreserved bytes decoded, the
 * hex digits of the others upper-cased.  In place is safe: never longer.
 * What stops it (static text), or NULL when it went through.
 */
static const char *
decode(const char *in, size_t len, char *out, size_t *olen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '\0') {
            return "a NUL byte";
        }
        if (c != '%') {
            out[o++] = (char)c;
            continue;
        }
        int hi, lo;
        if (i + 2 >= len || !hex_digit((unsigned char)in[i + 1], &hi) ||
            !hex_digit((unsigned char)in[i + 2], &lo))
            return "a '%' not followed by two hex digits";
        unsigned char v = (unsigned char)(hi << 4 | lo);
        if (v == '\0') {
            return "an encoded NUL (%00)";
        }
        /* The application may or may not decode it into a separator, so
         * which segments it routes on cannot be known. */
        if (v == '/') {
            return "an encoded '/' (%2F)";
        }
        if (unreserved(v)) {
            out[o++] = (char)v;
        } else {
            out[o++] = '%';
            out[o++] = hex[v >> 4];
            out[o++] = hex[v & 15];
        }
        i += 2;
    }
    *olen = o;
    return NULL;
}

/*
 * Steps 2 and 3, §6.2.2.3 (the algorithm of §5.2.4) with runs of '/'
 * merged, segment by segment.  Unlike §5.2.4 a ".." above the root is an
 * error: servers disagree on it (nginx refuses it, others clamp it).  What
 * stops it (static text), or NULL when it went through.
 */
static const char *
segments(char *p, size_t len, unsigned flags, size_t *olen)
{
    size_t i = 0, o = 0;

    while (i < len) {
        /* p[i] is '/': the segment is p[i+1 .. e) */
        size_t s = i + 1, e = s;
        while (e < len && p[e] != '/')
            e++;
        size_t n = e - s;
        int last = e == len;

        if (n == 0 && !(flags & RL_PATHNORM_KEEP_SLASHES) && !last) {
            i = e; /* "//": one '/' is enough */
        } else if (n == 1 && p[s] == '.') {
            if (last)
                p[o++] = '/'; /* "/a/." is "/a/" */
            i = e;
        } else if (n == 2 && p[s] == '.' && p[s + 1] == '.') {
            if (o == 0)
                return "a \"..\" above the root";
            while (o > 0 && p[o - 1] != '/')
                o--;
            o--; /* the '/' before the removed segment */
            if (last)
                p[o++] = '/'; /* "/a/b/.." is "/a/" */
            i = e;
        } else {
            memmove(p + o, p + i, n + 1);
            o += n + 1;
            i = e;
        }
    }
    if (o == 0)
        p[o++] = '/';
    *olen = o;
    return NULL;
}

int
pathnorm(const char *in, size_t len, unsigned flags, char *out, size_t *outlen, char **cause)
{
    const char *why = "not starting with '/'";
    size_t n;

    /* the helpers name the fault with static text; the caller gets a copy */
    if (len == 0 || in[0] != '/' || (why = decode(in, len, out, &n)) != NULL ||
        (why = segments(out, n, flags, &n)) != NULL) {
        *cause = xstrdup(why);
        return RL_ERR;
    }
    out[n] = '\0';
    *outlen = n;
    return RL_OK;
}

size_t
pathnorm_fold(char *path, size_t len, unsigned folds)
{
    size_t o = 0;
    int param = 0;

    for (size_t i = 0; i < len; i++) {
        char c = path[i];

        if (c == '/')
            param = 0;
        else if (c == ';' && (folds & RL_PATHFOLD_PARAMS))
            param = 1;
        if (param)
            continue;
        if ((folds & RL_PATHFOLD_CASE) && c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        path[o++] = c;
    }
    if (o < len)
        path[o] = '\0';
    return o;
}
