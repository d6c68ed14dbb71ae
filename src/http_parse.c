/* http_parse.c — see http_parse.h. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "http_parse.h"
#include "util.h"

/* The longest chunk-size line (with extensions) or trailer line we read. */
#define CHUNK_LINE_MAX 4096
#define TRAILERS_MAX HTTP_HEADERS_MAX
#define LEADING_EMPTY_MAX 8

/* RFC 9110 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
 * "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1,         ['&'] = 1,         ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1,         ['^'] = 1,         ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1, ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
};

/* field-value bytes: VCHAR, obs-text, SP, HTAB (RFC 9110 5.5) */
static inline bool
value_byte(unsigned char c)
{
    /* HTAB, SP, VCHAR, obs-text: a table, as tchar (a check's header
     * values are some 40 bytes, each tested) */
    static const unsigned char vbyte[256] = {
        ['\t'] = 1, [0x20 ... 0x7e] = 1, [0x80 ... 0xff] = 1};

    return vbyte[c];
}

/* Whether p[0..n) are all field-value bytes: eight at a time, by a test of
 * the word that finds any byte below 0x20 or DEL (a false alarm is
 * possible, a miss is not: such a word, and the rare HTAB, goes byte by
 * byte).  A check's values are some 30 bytes. */
static inline bool
value_bytes(const char *p, size_t n)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, del;
        memcpy(&x, p + i, 8);
        del = x ^ (0x7f * ones);
        if ((((x - 0x20 * ones) & ~x) | ((del - ones) & ~del)) & highs)
            break;
    }
    for (; i < n; i++)
        if (!value_byte((unsigned char)p[i]))
            return false;
    return true;
}

static inline bool
ows(char c)
{
    return c == ' ' || c == '\t';
}

static const struct {
    const char *name;
    size_t len;
    enum http_method m;
} methods[] = {
    {"GET", 3, HTTP_M_GET},     {"POST", 4, HTTP_M_POST},       {"HEAD", 4, HTTP_M_HEAD},
    {"PUT", 3, HTTP_M_PUT},     {"DELETE", 6, HTTP_M_DELETE},   {"OPTIONS", 7, HTTP_M_OPTIONS},
    {"TRACE", 5, HTTP_M_TRACE}, {"CONNECT", 7, HTTP_M_CONNECT}, {"PATCH", 5, HTTP_M_PATCH},
};

static enum http_method
method_of(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (methods[i].len == n && memcmp(methods[i].name, s, n) == 0)
            return methods[i].m;
    return HTTP_M_OTHER;
}

/* Refuse with status st: RL_ERR from a step, RL_PARSE_ERR from a reader. */
#define REFUSE(st, msg, rc) \
    do { \
        no->status = (st); \
        no->why = (msg); \
        return (rc); \
    } while (0)
#define FAIL(st, msg) REFUSE(st, msg, RL_ERR)
#define FAIL_PARSE(st, msg) REFUSE(st, msg, RL_PARSE_ERR)

/*
 * The request line [p, eol) (eol at its CR): method SP target SP version,
 * single spaces, nothing else (RFC 9112 3).
 */
static int
parse_request_line(char *p, char *eol, struct http_head *h, struct http_refusal *no)
{
    char *s = p;

    while (s < eol && tchar[(unsigned char)*s])
        s++;
    if (s == p || s == eol || *s != ' ')
        FAIL(400, "malformed request line");
    h->method_name = p;
    h->method_len = (size_t)(s - p);
    h->method = method_of(p, h->method_len);
    *s++ = '\0';

    p = s;
    while (s < eol && (unsigned char)*s > 0x20 && (unsigned char)*s < 0x7f)
        s++;
    if (s == p || s == eol || *s != ' ')
        FAIL(400, "malformed request target");
    h->target = p;
    h->target_len = (size_t)(s - p);
    *s++ = '\0';

    if (eol - s != 8 || memcmp(s, "HTTP/", 5) != 0 || s[6] != '.' || s[5] < '0' ||
        s[5] > '9' || s[7] < '0' || s[7] > '9')
        FAIL(400, "malformed HTTP version");
    if (s[5] != '1')
        FAIL(505, "HTTP version not supported: use HTTP/1.1");
    /* a higher 1.x minor can be answered as 1.1 (RFC 9110 2.5) */
    h->minor = s[7] == '0' ? 0 : 1;
    return RL_OK;
}

/* Where the path is in the target (RFC 9112 3.2): origin-form as is, the
 * part after the authority of absolute-form, anything else whole. */
static void
split_path(struct http_head *h)
{
    const char *t = h->target, *end = t + h->target_len, *p = t, *q;

    if (t[0] != '/') {
        const char *colon = memchr(t, ':', h->target_len);
        if (colon != NULL && end - colon >= 3 && colon[1] == '/' && colon[2] == '/') {
            p = memchr(colon + 3, '/', (size_t)(end - colon - 3));
            if (p == NULL) {
                h->path = "/";
                h->path_len = 1;
                return;
            }
        }
    }
    q = memchr(p, '?', (size_t)(end - p));
    h->path = p;
    h->path_len = (size_t)((q != NULL ? q : end) - p);
}

/* Does the comma-separated list `v` hold `token` (case-insensitive)? */
static bool
list_has(const char *v, const char *token)
{
    size_t n = strlen(token);

    while (*v != '\0') {
        while (*v == ',' || ows(*v))
            v++;
        const char *s = v;
        while (*v != '\0' && *v != ',' && !ows(*v))
            v++;
        if ((size_t)(v - s) == n && strncasecmp(s, token, n) == 0)
            return true;
        while (ows(*v))
            v++;
    }
    return false;
}

static int
parse_length(const char *v, size_t n, int64_t *out)
{
    int64_t x = 0;

    if (n == 0 || n > 18)
        return RL_ERR;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return RL_ERR;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return RL_OK;
}

/* One header line [p, eol): name ":" OWS value OWS. */
static int
parse_header_field(char *p, char *eol, struct http_head *h, struct http_refusal *no)
{
    char *s = p, *v, *e;

    if (ows(*p))
        FAIL(400, "obsolete line folding");
    while (s < eol && tchar[(unsigned char)*s])
        s++;
    if (s == eol || *s != ':')
        FAIL(400, s < eol && ows(*s) ? "whitespace before a header's colon"
                                     : "malformed header line");
    if (s == p)
        FAIL(400, "empty header name");
    if (h->nheaders == HTTP_HEADERS_MAX)
        FAIL(431, "too many header lines");
    *s = '\0';
    v = s + 1;
    while (v < eol && ows(*v))
        v++;
    e = eol;
    while (e > v && ows(e[-1]))
        e--;
    if (!value_bytes(v, (size_t)(e - v)))
        FAIL(400, "control character in a header value");
    *e = '\0';
    h->headers[h->nheaders].name = p;
    h->headers[h->nheaders].name_len = (size_t)(s - p);
    h->headers[h->nheaders].value = v;
    h->headers[h->nheaders].value_len = (size_t)(e - v);
    h->nheaders++;
    return RL_OK;
}

/* Whether f is named `name`, n bytes, in any case (ASCII): the lengths
 * first, so that most names are told apart without a look at their bytes,
 * then the bytes as written (a few loads where n is known when compiled),
 * then in any case, inline (a call to strncasecmp a name was a tenth of
 * the head's parse). */
static inline bool
named(const struct http_header *f, const char *name, size_t n)
{
    if (f->name_len != n)
        return false;
    if (memcmp(f->name, name, n) == 0) /* as written, the usual: a few loads */
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char a = (unsigned char)f->name[i], b = (unsigned char)name[i];
        /* the same byte, or the two cases of one letter */
        if (a != b && ((a | 0x20) != (b | 0x20) || (unsigned char)((a | 0x20) - 'a') > 25))
            return false;
    }
    return true;
}

#define NAMED(f, lit) named(f, lit, sizeof(lit) - 1)

/* What the fields say about framing and the connection (RFC 9112 6, 9). */
static int
read_semantics(struct http_head *h, struct http_refusal *no)
{
    int hosts = 0, tes = 0, close = 0, ka = 0;

    for (size_t i = 0; i < h->nheaders; i++) {
        const struct http_header *f = &h->headers[i];

        if (NAMED(f, "Content-Length")) {
            int64_t n;
            if (parse_length(f->value, f->value_len, &n) != RL_OK)
                FAIL(400, "malformed Content-Length");
            if (h->content_length >= 0 && h->content_length != n)
                FAIL(400, "conflicting Content-Length headers");
            h->content_length = n;
        } else if (NAMED(f, "Transfer-Encoding")) {
            if (h->minor == 0)
                FAIL(400, "Transfer-Encoding in an HTTP/1.0 request");
            if (tes++ > 0 || strcasecmp(f->value, "chunked") != 0)
                FAIL(501, "unsupported Transfer-Encoding: only chunked");
            h->chunked = 1;
        } else if (NAMED(f, "Host")) {
            if (hosts++ > 0)
                FAIL(400, "more than one Host header");
        } else if (NAMED(f, "Connection")) {
            close |= list_has(f->value, "close");
            ka |= list_has(f->value, "keep-alive");
        } else if (NAMED(f, "Expect")) {
            if (h->minor == 1 && strcasecmp(f->value, "100-continue") == 0)
                h->expect_continue = 1;
        }
    }
    if (h->chunked && h->content_length >= 0)
        FAIL(400, "both Content-Length and Transfer-Encoding");
    if (h->minor == 1 && hosts == 0)
        FAIL(400, "HTTP/1.1 request without Host");
    h->keep_alive = !close && (h->minor == 1 || ka);
    return RL_OK;
}

enum rl_parse
http_parse_head(char *buf, size_t len, size_t max_head, size_t *scan, struct http_head *h,
                struct http_refusal *no)
{
    size_t start = 0, i, end = 0;
    char *p, *eol;

    /* RFC 9112 2.2: empty lines before a request line are ignored (a client
     * may end a body with an extra CRLF); a few, so that rescanning them on
     * every call stays cheap */
    while (start + 1 < len && buf[start] == '\r' && buf[start + 1] == '\n') {
        start += 2;
        if (start > 2 * LEADING_EMPTY_MAX)
            FAIL_PARSE(400, "too many empty lines before the request line");
    }
    if (start < len && buf[start] == '\n')
        FAIL_PARSE(400, "bare LF");
    if (*scan < start)
        *scan = start;
    for (i = *scan; i < len; i++) {
        char *nl = memchr(buf + i, '\n', len - i);
        if (nl == NULL) {
            i = len;
            break;
        }
        i = (size_t)(nl - buf);
        if (i == 0 || buf[i - 1] != '\r')
            FAIL_PARSE(400, "bare LF");
        if (i >= start + 3 && buf[i - 2] == '\n') {
            end = i + 1;
            break;
        }
    }
    if (end == 0) {
        *scan = len;
        if (len > max_head)
            FAIL_PARSE(431, "request head too large");
        return RL_PARSE_MORE;
    }
    if (end > max_head)
        FAIL_PARSE(431, "request head too large");

    memset(h, 0, offsetof(struct http_head, headers));
    h->content_length = -1;
    p = buf + start;
    eol = memchr(p, '\r', end - start);
    if (eol == NULL || eol[1] != '\n')
        FAIL_PARSE(400, "CR without LF");
    if (parse_request_line(p, eol, h, no) != RL_OK)
        return RL_PARSE_ERR;
    for (p = eol + 2; p < buf + end - 2; p = eol + 2) {
        eol = memchr(p, '\r', (size_t)(buf + end - p));
        if (eol[1] != '\n')
            FAIL_PARSE(400, "CR without LF");
        if (parse_header_field(p, eol, h, no) != RL_OK)
            return RL_PARSE_ERR;
    }
    if (read_semantics(h, no) != RL_OK)
        return RL_PARSE_ERR;
    split_path(h);
    h->len = end;
    return RL_PARSE_DONE;
}

const struct http_header *
http_head_find(const struct http_head *h, const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; i < h->nheaders; i++)
        if (named(&h->headers[i], name, n))
            return &h->headers[i];
    return NULL;
}

/* ---- chunked ----------------------------------------------------------------- */

enum {
    CH_SIZE = 0, /* chunk-size hex digits */
    CH_SIZE_WS,  /* whitespace after them */
    CH_EXT,      /* chunk extension, up to CR */
    CH_SIZE_LF,
    CH_DATA,
    CH_DATA_CR,
    CH_DATA_LF,
    CH_TRAILER_START,
    CH_TRAILER, /* a trailer field line, up to CR */
    CH_TRAILER_LF,
    CH_END_LF,
    CH_DONE
};

/* One byte of a chunk-size line or of a trailer line: each counts against
 * CHUNK_LINE_MAX. */
static int
chunk_line_byte(struct http_chunked *c, unsigned char b, struct http_refusal *no)
{
    int x;

    switch (c->state) {
    case CH_SIZE:
        if (hex_digit(b, &x)) {
            if (c->left >> 60)
                FAIL(400, "chunk size too large");
            c->left = c->left << 4 | (unsigned)x;
        } else if (c->line == 0) {
            FAIL(400, "malformed chunk size");
        } else if (b == ';') {
            c->state = CH_EXT;
        } else if (b == '\r') {
            c->state = CH_SIZE_LF;
        } else if (ows((char)b)) {
            c->state = CH_SIZE_WS;
        } else {
            FAIL(400, "malformed chunk size");
        }
        break;
    case CH_SIZE_WS:
        if (b == ';')
            c->state = CH_EXT;
        else if (b == '\r')
            c->state = CH_SIZE_LF;
        else if (!ows((char)b))
            FAIL(400, "malformed chunk size");
        break;
    default: /* CH_EXT, CH_TRAILER */
        if (b == '\r')
            c->state = c->state == CH_EXT ? CH_SIZE_LF : CH_TRAILER_LF;
        else if (!value_byte(b))
            FAIL(400, "control character in a chunk line");
        break;
    }
    if (++c->line > CHUNK_LINE_MAX)
        FAIL(400, "chunk line too long");
    c->in++;
    return RL_OK;
}

/* One byte of what frames the data and the trailers (the line ends, the
 * start of a trailer line): DONE once the message has ended. */
static enum rl_parse
chunk_frame_byte(struct http_chunked *c, unsigned char b, int64_t max_body,
                 struct http_refusal *no)
{
    switch (c->state) {
    case CH_SIZE_LF:
        if (b != '\n')
            FAIL_PARSE(400, "CR without LF in chunked body");
        c->in++;
        c->line = 0;
        if (c->left == 0) {
            c->state = CH_TRAILER_START;
            break;
        }
        /* body <= max_body always: compared this way, nothing wraps */
        if (c->left > (uint64_t)max_body - c->body)
            FAIL_PARSE(413, "body: larger than max_body");
        c->state = CH_DATA;
        break;
    case CH_DATA_CR:
        if (b != '\r')
            FAIL_PARSE(400, "chunk data longer than its size");
        c->state = CH_DATA_LF;
        c->in++;
        break;
    case CH_DATA_LF:
        if (b != '\n')
            FAIL_PARSE(400, "CR without LF in chunked body");
        c->state = CH_SIZE;
        c->in++;
        break;
    case CH_TRAILER_START:
        if (b == '\r') {
            c->state = CH_END_LF;
        } else {
            if (b == '\n')
                FAIL_PARSE(400, "bare LF");
            if (ows((char)b))
                FAIL_PARSE(400, "obsolete line folding");
            if (++c->trailers > TRAILERS_MAX)
                FAIL_PARSE(431, "too many trailer lines");
            c->state = CH_TRAILER;
            c->line = 1;
        }
        c->in++;
        break;
    case CH_TRAILER_LF:
        if (b != '\n')
            FAIL_PARSE(400, "CR without LF in chunked body");
        c->state = CH_TRAILER_START;
        c->line = 0;
        c->in++;
        break;
    case CH_END_LF:
        if (b != '\n')
            FAIL_PARSE(400, "CR without LF in chunked body");
        c->state = CH_DONE;
        c->in++;
        return RL_PARSE_DONE;
    default: return RL_PARSE_DONE;
    }
    return RL_PARSE_MORE;
}

/* The data of a chunk, as much of it as buf holds, moved down over what
 * framed it. */
static void
chunk_data(struct http_chunked *c, char *buf, size_t len)
{
    size_t n = len - c->in;

    if (n > c->left)
        n = (size_t)c->left;
    if (c->out != c->in)
        memmove(buf + c->out, buf + c->in, n);
    c->in += n;
    c->out += n;
    c->body += n;
    c->left -= n;
    if (c->left == 0)
        c->state = CH_DATA_CR;
}

enum rl_parse
http_chunked_decode(struct http_chunked *c, char *buf, size_t len, int64_t max_body,
                    struct http_refusal *no)
{
    enum rl_parse rc = RL_PARSE_MORE;

    while (c->in < len && rc == RL_PARSE_MORE) {
        unsigned char b = (unsigned char)buf[c->in];

        switch (c->state) {
        case CH_SIZE:
        case CH_SIZE_WS:
        case CH_EXT:
        case CH_TRAILER:
            if (chunk_line_byte(c, b, no) != RL_OK)
                rc = RL_PARSE_ERR;
            break;
        case CH_DATA: chunk_data(c, buf, len); break;
        case CH_DONE: return RL_PARSE_DONE;
        default: rc = chunk_frame_byte(c, b, max_body, no); break;
        }
    }
    return rc != RL_PARSE_MORE ? rc : c->state == CH_DONE ? RL_PARSE_DONE : RL_PARSE_MORE;
}
