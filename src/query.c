/* query.c — see query.h. */
#include <string.h>

#include "query.h"
#include "util.h"

/* Decode s[0..n) into out (size bytes, NUL-terminated); NULL or the why. */
static const char *
decode(const char *s, size_t n, char *out, size_t size, size_t *len)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        char c = s[i];

        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (i + 2 >= n)
                return "a '%' without two hex digits";
            if (!hex_digit((unsigned char)s[i + 1], &hi) ||
                !hex_digit((unsigned char)s[i + 2], &lo))
                return "a '%' without two hex digits";
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (c == '\0')
            return "a NUL byte";
        if (o + 1 >= size)
            return "too long";
        out[o++] = c;
    }
    out[o] = '\0';
    *len = o;
    return NULL;
}

int
query_parse(const char *target, size_t len, struct query_param *params, size_t n,
            const char **why, int *which)
{
    const char *q = memchr(target, '?', len), *end;

    for (size_t i = 0; i < n; i++) {
        params[i].seen = false;
        params[i].len = 0;
        if (params[i].size > 0)
            params[i].out[0] = '\0';
    }
    if (q == NULL)
        return RL_OK;
    q++;
    end = memchr(q, '#', (size_t)(target + len - q));
    if (end == NULL)
        end = target + len;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q)), *eq;
        size_t plen;
        int p = -1;

        if (amp == NULL)
            amp = end;
        plen = (size_t)(amp - q);
        eq = memchr(q, '=', plen);
        if (plen > 0) {
            size_t nlen = eq != NULL ? (size_t)(eq - q) : plen;

            for (size_t i = 0; i < n; i++)
                if (strlen(params[i].name) == nlen && memcmp(params[i].name, q, nlen) == 0)
                    p = (int)i;
            *which = p;
            if (p < 0) {
                *why = "a parameter this route does not take";
                return RL_ERR;
            }
            if (params[p].seen) {
                *why = "given twice";
                return RL_ERR;
            }
            params[p].seen = true;
            if (eq != NULL && (*why = decode(eq + 1, (size_t)(amp - eq - 1), params[p].out,
                                             params[p].size, &params[p].len)) != NULL)
                return RL_ERR;
        }
        q = amp + 1;
    }
    return RL_OK;
}
