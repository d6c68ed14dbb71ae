/* body.c — see body.h. */
#include <string.h>

#include "body.h"

#define MEMBERS_MAX 16
/* how deep a "limits" list may nest: a list of objects of scalars */
#define LIMITS_DEPTH_MAX 4

struct cursor {
    const char *p, *end;
};

static void
skip_ws(struct cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* A string of printable ASCII without escapes; its contents in (*s, *n). */
static int
scan_string(struct cursor *c, const char **s, size_t *n)
{
    const char *q;

    if (c->p >= c->end || *c->p != '"')
        return RL_ERR;
    q = ++c->p;
    while (q < c->end && *q != '"') {
        unsigned char b = (unsigned char)*q;
        if (b < 0x20 || b > 0x7e || b == '\\')
            return RL_ERR;
        q++;
    }
    if (q >= c->end)
        return RL_ERR;
    *s = c->p;
    *n = (size_t)(q - c->p);
    c->p = q + 1;
    return RL_OK;
}

static int
literal(struct cursor *c, const char *word, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return RL_ERR;
    c->p += n;
    return RL_OK;
}

/* -?(0|[1-9][0-9]*) of at most 18 digits: jansson's integers, none too big. */
static int
scan_int(struct cursor *c, int64_t *v)
{
    int neg = 0;
    size_t digits = 0;
    int64_t x = 0;

    if (c->p < c->end && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (digits == 1 && x == 0)
            return RL_ERR; /* a leading zero: invalid JSON */
        if (++digits > 18)
            return RL_ERR;
        x = x * 10 + (*c->p - '0');
        c->p++;
    }
    if (digits == 0)
        return RL_ERR;
    /* a fraction or exponent makes a real: jansson decides what it means */
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return RL_ERR;
    *v = neg ? -x : x;
    return RL_OK;
}

enum kind { V_STRING, V_INT, V_NULL, V_LIST, V_TRUE, V_FALSE };

/*
 * A list, skipped: brackets and braces pair up and strings (plain ASCII, no
 * escapes) are stepped over, nothing more; its bytes in (*s, *n).  Whether
 * it is JSON is for whoever reads it (jansson), which then reads the whole
 * body.
 */
static int
skip_list(struct cursor *c, const char **s, size_t *n)
{
    char open[LIMITS_DEPTH_MAX];
    size_t depth = 0;
    const char *start = c->p;

    while (c->p < c->end) {
        char b = *c->p;
        const char *str;
        size_t len;

        if (b == '"') {
            if (scan_string(c, &str, &len) != RL_OK)
                return RL_ERR;
            continue;
        }
        if (b == '[' || b == '{') {
            if (depth == LIMITS_DEPTH_MAX)
                return RL_ERR;
            open[depth++] = b;
        } else if (b == ']' || b == '}') {
            if (depth == 0 || open[depth - 1] != (b == ']' ? '[' : '{'))
                return RL_ERR;
            if (--depth == 0) {
                c->p++;
                *s = start;
                *n = (size_t)(c->p - start);
                return RL_OK;
            }
        } else if ((unsigned char)b < 0x20 && b != ' ' && b != '\t' && b != '\n' &&
                   b != '\r') {
            return RL_ERR;
        } else if ((unsigned char)b > 0x7e) {
            return RL_ERR;
        }
        c->p++;
    }
    return RL_ERR;
}

static int
scan_value(struct cursor *c, enum kind *k, const char **s, size_t *n, int64_t *v)
{
    if (c->p >= c->end)
        return RL_ERR;
    switch (*c->p) {
    case '"': *k = V_STRING; return scan_string(c, s, n);
    case '[': *k = V_LIST; return skip_list(c, s, n);
    case 'n': *k = V_NULL; return literal(c, "null", 4);
    case 't': *k = V_TRUE; return literal(c, "true", 4);
    case 'f': *k = V_FALSE; return literal(c, "false", 5);
    default: *k = V_INT; return scan_int(c, v);
    }
}

static int
copy_z(char *dst, size_t size, const char *s, size_t n)
{
    if (n >= size)
        return RL_ERR;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return RL_OK;
}

/* One member of the object: a known field takes its value when the type is
 * the one it needs; any other type of a known field is for jansson to name. */
static int
take(struct rl_body_fields *f, const char *name, size_t nlen, enum kind k, const char *s,
     size_t n, int64_t v)
{
#define IS(lit) (nlen == sizeof(lit) - 1 && memcmp(name, lit, nlen) == 0)
    if (IS("limits")) {
        if (k == V_NULL)
            return RL_OK;
        if (k != V_LIST)
            return RL_ERR;
        f->limits = s;
        f->limits_len = n;
        return RL_OK;
    }
    if (k == V_LIST)
        return RL_ERR; /* nesting elsewhere: for jansson */
    if (IS("cost")) {
        if (k == V_NULL)
            return RL_OK;
        if (k != V_INT)
            return RL_ERR;
        f->cost = v;
        return RL_OK;
    }
    if (!IS("key") && !IS("policy") && !IS("path") && !IS("method")) {
        if (!IS("reserve"))
            return RL_OK; /* unknown fields are ignored */
        if (k != V_NULL && k != V_TRUE && k != V_FALSE)
            return RL_ERR;
        f->reserve = k == V_TRUE;
        return RL_OK;
    }
    if (k == V_NULL)
        return RL_OK;
    if (k != V_STRING)
        return RL_ERR;
    if (IS("key")) {
        f->key = s;
        f->key_len = n;
    } else if (IS("path")) {
        f->path = s;
        f->path_len = n;
    } else if (IS("policy")) {
        if (copy_z(f->policy_buf, sizeof(f->policy_buf), s, n) != RL_OK)
            return RL_ERR;
        f->policy = f->policy_buf;
        f->policy_len = n;
    } else {
        if (copy_z(f->method_buf, sizeof(f->method_buf), s, n) != RL_OK)
            return RL_ERR;
        f->method = f->method_buf;
        f->method_len = n;
    }
    return RL_OK;
#undef IS
}

int
body_scan(const char *buf, size_t len, struct rl_body_fields *f)
{
    struct cursor c = {buf, buf + len};
    const char *names[MEMBERS_MAX];
    size_t nlens[MEMBERS_MAX], nmembers = 0;

    f->key = f->policy = f->path = f->method = f->limits = NULL;
    f->key_len = f->policy_len = f->path_len = f->method_len = f->limits_len = 0;
    f->cost = 1;
    f->reserve = 0;
    skip_ws(&c);
    if (c.p >= c.end || *c.p++ != '{')
        return RL_ERR;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            const char *name, *s = NULL;
            size_t nlen, n = 0;
            int64_t v = 0;
            enum kind k;

            if (scan_string(&c, &name, &nlen) != RL_OK || nmembers == MEMBERS_MAX)
                return RL_ERR;
            for (size_t i = 0; i < nmembers; i++)
                if (nlens[i] == nlen && memcmp(names[i], name, nlen) == 0)
                    return RL_ERR; /* a duplicate: jansson refuses it */
            names[nmembers] = name;
            nlens[nmembers++] = nlen;
            skip_ws(&c);
            if (c.p >= c.end || *c.p++ != ':')
                return RL_ERR;
            skip_ws(&c);
            if (scan_value(&c, &k, &s, &n, &v) != RL_OK ||
                take(f, name, nlen, k, s, n, v) != RL_OK)
                return RL_ERR;
            skip_ws(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                skip_ws(&c);
                continue;
            }
            if (c.p < c.end && *c.p == '}') {
                c.p++;
                break;
            }
            return RL_ERR;
        }
    }
    skip_ws(&c);
    return c.p == c.end ? RL_OK : RL_ERR;
}
