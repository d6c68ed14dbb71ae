/*
 * check_http_parse.c — the HTTP/1.1 request parser on its own (http_parse.h):
 * http_parse_head, http_head_find and http_chunked_decode, against byte-exact
 * streams written out by hand.
 *
 * Every stream, valid or not, is also fed as it would arrive from a socket
 * that delivers one byte at a time: the length grows over the same bytes with
 * *scan carried, and the first call that does not ask for more must give the
 * verdict the whole stream gets at once.  Each call gets its own buffer of
 * exactly `len` bytes, so a parser that looks past len trips ASan.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "unit.h"

#include "http_parse.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_HEAD 8192

/* a byte string that may hold NULs */
struct bytes {
    const char *p;
    size_t n;
};
#define B(s) {(s), sizeof(s) - 1}

static char *
dup_bytes(const char *p, size_t n)
{
    char *b = malloc(n ? n : 1);

    ck_assert_ptr_nonnull(b);
    memcpy(b, p, n);
    return b;
}

/* The readers' answers as one number each, as the cases compare them: the
 * head's length (1 for the end of a chunked body), 0 for more, -status for a
 * refusal (*why set to its reason). */
static ssize_t
head_verdict(char *buf, size_t len, size_t max, size_t *scan, struct http_head *h,
             const char **why)
{
    struct http_refusal no = {0, NULL};

    switch (http_parse_head(buf, len, max, scan, h, &no)) {
    case RL_PARSE_DONE: return (ssize_t)h->len;
    case RL_PARSE_MORE: return 0;
    default: *why = no.why; return -no.status;
    }
}

static int
chunked_verdict(struct http_chunked *c, char *buf, size_t len, int64_t max_body,
                const char **why)
{
    struct http_refusal no = {0, NULL};

    switch (http_chunked_decode(c, buf, len, max_body, &no)) {
    case RL_PARSE_DONE: return 1;
    case RL_PARSE_MORE: return 0;
    default: *why = no.why; return -no.status;
    }
}

/* The whole stream at once, in a buffer of exactly n bytes (kept for the
 * caller to read the in-place strings from; free it). */
static ssize_t
parse_whole(const char *p, size_t n, size_t max, struct http_head *h, const char **why,
            char **bufp)
{
    size_t scan = 0;
    char *buf = dup_bytes(p, n);

    *why = NULL;
    *bufp = buf;
    return head_verdict(buf, n, max, &scan, h, why);
}

/* Byte by byte: the first verdict that is not "more" and where it came. */
static ssize_t
parse_split(const char *p, size_t n, size_t max, size_t *at)
{
    static struct http_head h;
    size_t scan = 0;
    ssize_t r = 0;

    for (size_t k = 0; k <= n; k++) {
        char *buf = dup_bytes(p, k);
        const char *why = NULL;

        r = head_verdict(buf, k, max, &scan, &h, &why);
        free(buf);
        ck_assert_msg(scan <= k, "scan %zu past len %zu", scan, k);
        if (r != 0) {
            ck_assert_msg(r > 0 || why != NULL, "refused without a reason at len %zu", k);
            *at = k;
            return r;
        }
    }
    *at = n;
    return 0;
}

/* ---- valid heads, field by field ------------------------------------------------ */

struct good_head {
    const char *raw;            /* the head */
    const char *after;          /* bytes after it (a body, the next request) */
    enum http_method method;
    const char *method_name, *target, *path;     /* path: up to path_len */
    int minor, keep_alive, chunked, expect_continue;
    int64_t content_length;
    size_t nheaders;
};

static const struct good_head good_heads[] = {
    {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 1, 1, 0, 0, -1, 1},
    {"POST /check HTTP/1.1\r\nHost: a\r\nContent-Length: 24\r\n"
     "Content-Type: application/json\r\n\r\n", "{\"policy\":\"p\",\"cost\":0}",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 0, 24, 3},
    {"GET /check?a=b&c=/d HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_GET, "GET", "/check?a=b&c=/d", "/check", 1, 1, 0, 0, -1, 1},
    {"GET /? HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_GET, "GET", "/?", "/", 1, 1, 0, 0, -1, 1},
    /* absolute-form: the path is what follows the authority */
    {"GET http://example.com:8080/check?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", "",
     HTTP_M_GET, "GET", "http://example.com:8080/check?x=1", "/check", 1, 1, 0, 0, -1, 1},
    {"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", "",
     HTTP_M_GET, "GET", "http://example.com", "/", 1, 1, 0, 0, -1, 1},
    {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_OPTIONS, "OPTIONS", "*", "*", 1, 1, 0, 0, -1, 1},
    {"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "",
     HTTP_M_CONNECT, "CONNECT", "example.com:443", "example.com:443", 1, 1, 0, 0, -1, 1},
    /* HTTP/1.0: no Host needed, close unless asked */
    {"GET /healthz HTTP/1.0\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 0, 0, 0, 0, -1, 0},
    {"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 0, 1, 0, 0, -1, 1},
    {"GET /healthz HTTP/1.0\r\nConnection: Upgrade, Keep-Alive\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 0, 1, 0, 0, -1, 1},
    {"GET /healthz HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 0, 0, 0, 0, -1, 1},
    /* HTTP/1.1: keep-alive unless a close token */
    {"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "",
     HTTP_M_GET, "GET", "/", "/", 1, 0, 0, 0, -1, 2},
    {"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo,CLOSE\r\n\r\n", "",
     HTTP_M_GET, "GET", "/", "/", 1, 0, 0, 0, -1, 2},
    {"GET / HTTP/1.1\r\nHost: x\r\nConnection: te\r\nConnection:  close \r\n\r\n", "",
     HTTP_M_GET, "GET", "/", "/", 1, 0, 0, 0, -1, 3},
    {"GET / HTTP/1.1\r\nHost: x\r\nConnection: closed, enclose\r\n\r\n", "",
     HTTP_M_GET, "GET", "/", "/", 1, 1, 0, 0, -1, 2},
    /* Expect */
    {"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n", "{}",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 1, 2, 3},
    {"POST /check HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n", "{}",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 1, 2, 3},
    /* RFC 9110 10.1.1: ignored in an HTTP/1.0 request */
    {"POST /check HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", "{}",
     HTTP_M_POST, "POST", "/check", "/check", 0, 0, 0, 0, 2, 2},
    /* leading empty lines are skipped and counted (RFC 9112 2.2) */
    {"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_GET, "GET", "/healthz", "/healthz", 1, 1, 0, 0, -1, 1},
    {"POST /check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "2\r\n{}\r\n0\r\n\r\n",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 1, 0, -1, 2},
    {"POST /check HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nHost: x\r\n\r\n", "0\r\n\r\n",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 1, 0, -1, 2},
    /* the same length twice is one length */
    {"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n", "{}",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 0, 2, 3},
    {"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 007\r\n\r\n", "{\"a\":1}",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 0, 7, 2},
    {"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "GET / HTTP/1.1\r\n",
     HTTP_M_POST, "POST", "/check", "/check", 1, 1, 0, 0, 0, 2},
    /* methods we do not serve are still tokens */
    {"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_OTHER, "BREW", "/pot", "/pot", 1, 1, 0, 0, -1, 1},
    {"get / HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_OTHER, "get", "/", "/", 1, 1, 0, 0, -1, 1},
    {"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_HEAD, "HEAD", "/readyz", "/readyz", 1, 1, 0, 0, -1, 1},
    {"TRACE / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", "hello",
     HTTP_M_TRACE, "TRACE", "/", "/", 1, 1, 0, 0, 5, 2},
    /* a higher 1.x minor is answered as 1.1 (RFC 9110 2.5) */
    {"GET /x HTTP/1.2\r\nHost: x\r\n\r\n", "",
     HTTP_M_GET, "GET", "/x", "/x", 1, 1, 0, 0, -1, 1},
    {"DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_DELETE, "DELETE", "/x", "/x", 1, 1, 0, 0, -1, 1},
    {"PUT /x HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_PUT, "PUT", "/x", "/x", 1, 1, 0, 0, -1, 1},
    {"PATCH /x HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_PATCH, "PATCH", "/x", "/x", 1, 1, 0, 0, -1, 1},
    /* a tchar-only method and a target of every visible byte */
    {"M-1.!#$%&'*+^_`|~ /a%20b;c=d@e:f!$&'()*+,;=~ HTTP/1.1\r\nHost: x\r\n\r\n", "",
     HTTP_M_OTHER, "M-1.!#$%&'*+^_`|~", "/a%20b;c=d@e:f!$&'()*+,;=~", "/a%20b;c=d@e:f!$&'()*+,;=~",
     1, 1, 0, 0, -1, 1},
};

START_TEST(head_good)
{
    const struct good_head *c = &good_heads[_i];
    size_t hn = strlen(c->raw), an = strlen(c->after), at;
    char *stream = malloc(hn + an + 1), *buf;
    struct http_head h;
    const char *why;
    ssize_t r;

    memcpy(stream, c->raw, hn);
    memcpy(stream + hn, c->after, an);
    r = parse_whole(stream, hn + an, MAX_HEAD, &h, &why, &buf);
    ck_assert_msg(r == (ssize_t)hn, "\"%s\": %zd (%s), want the head's length %zu", c->raw, r,
                  why ? why : "-", hn);
    ck_assert_int_eq(h.method, c->method);
    ck_assert_str_eq(h.method_name, c->method_name);
    ck_assert_uint_eq(h.method_len, strlen(c->method_name));
    ck_assert_str_eq(h.target, c->target);
    ck_assert_uint_eq(h.target_len, strlen(c->target));
    ck_assert_uint_eq(h.path_len, strlen(c->path));
    ck_assert_msg(memcmp(h.path, c->path, h.path_len) == 0, "path \"%.*s\", want \"%s\"",
                  (int)h.path_len, h.path, c->path);
    ck_assert_int_eq(h.minor, c->minor);
    ck_assert_int_eq(h.keep_alive, c->keep_alive);
    ck_assert_int_eq(h.chunked, c->chunked);
    ck_assert_int_eq(h.expect_continue, c->expect_continue);
    ck_assert_int_eq(h.content_length, c->content_length);
    ck_assert_uint_eq(h.nheaders, c->nheaders);
    /* what follows the head is untouched */
    ck_assert_msg(memcmp(buf + hn, c->after, an) == 0, "the bytes after the head changed");
    free(buf);

    /* a byte at a time: "more" until the whole head is there */
    r = parse_split(stream, hn + an, MAX_HEAD, &at);
    ck_assert_msg(r == (ssize_t)hn && at == hn, "\"%s\" split: %zd at len %zu, want %zu at %zu",
                  c->raw, r, at, hn, hn);
    free(stream);
}
END_TEST

START_TEST(head_fields_in_place)
{
    static const char raw[] =
        "POST /check HTTP/1.1\r\n"
        "Host: example.com\r\n"
        "X-A: \t v a \t\r\n"
        "X-Empty:\r\n"
        "X-Spaces:    \r\n"
        "x-a: second\r\n"
        "X-Obs: caf\xc3\xa9 \x80\xff\r\n"
        "X-Tab: a\tb\r\n"
        "Content-Length: 2\r\n"
        "\r\n{}";
    struct http_head h;
    const char *why;
    const struct http_header *f;
    char *buf;
    ssize_t r = parse_whole(raw, sizeof(raw) - 1, MAX_HEAD, &h, &why, &buf);

    ck_assert_int_eq(r, (ssize_t)(sizeof(raw) - 3));
    ck_assert_uint_eq(h.nheaders, 8);
    ck_assert_str_eq(h.headers[0].name, "Host");
    ck_assert_uint_eq(h.headers[0].name_len, 4);
    ck_assert_str_eq(h.headers[0].value, "example.com");
    ck_assert_uint_eq(h.headers[0].value_len, 11);
    /* OWS trimmed on both sides, inner whitespace kept */
    ck_assert_str_eq(h.headers[1].value, "v a");
    ck_assert_uint_eq(h.headers[1].value_len, 3);
    ck_assert_str_eq(h.headers[2].name, "X-Empty");
    ck_assert_str_eq(h.headers[2].value, "");
    ck_assert_uint_eq(h.headers[2].value_len, 0);
    ck_assert_str_eq(h.headers[3].value, "");
    ck_assert_uint_eq(h.headers[3].value_len, 0);
    /* obs-text passes as opaque bytes (RFC 9110 5.5) */
    ck_assert_str_eq(h.headers[5].value, "caf\xc3\xa9 \x80\xff");
    ck_assert_str_eq(h.headers[6].value, "a\tb");

    /* find: case-insensitive, the first of repeated names */
    f = http_head_find(&h, "x-A");
    ck_assert_ptr_eq(f, &h.headers[1]);
    f = http_head_find(&h, "CONTENT-LENGTH");
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(f->value, "2");
    ck_assert_ptr_null(http_head_find(&h, "X-None"));
    ck_assert_ptr_null(http_head_find(&h, "X"));
    ck_assert_ptr_null(http_head_find(&h, "X-A-"));
    /* the strings are in the caller's buffer */
    ck_assert(h.headers[0].name >= buf && h.headers[0].name < buf + sizeof(raw));
    ck_assert(h.target >= buf && h.target < buf + sizeof(raw));
    ck_assert_mem_eq(buf + r, "{}", 2);
    free(buf);
}
END_TEST

START_TEST(head_max_headers)
{
    char raw[4096];
    size_t n = 0;
    struct http_head h;
    const char *why;
    char *buf;

    /* HTTP_HEADERS_MAX lines: served */
    n += (size_t)snprintf(raw + n, sizeof(raw) - n, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 1; i < HTTP_HEADERS_MAX; i++)
        n += (size_t)snprintf(raw + n, sizeof(raw) - n, "X-H%d: %d\r\n", i, i);
    n += (size_t)snprintf(raw + n, sizeof(raw) - n, "\r\n");
    ck_assert_int_eq(parse_whole(raw, n, MAX_HEAD, &h, &why, &buf), (ssize_t)n);
    ck_assert_uint_eq(h.nheaders, HTTP_HEADERS_MAX);
    ck_assert_str_eq(h.headers[HTTP_HEADERS_MAX - 1].value, "63");
    free(buf);

    /* one more: 431 */
    n -= 2;
    n += (size_t)snprintf(raw + n, sizeof(raw) - n, "X-Last: 1\r\n\r\n");
    ck_assert_int_eq(parse_whole(raw, n, MAX_HEAD, &h, &why, &buf), -431);
    ck_assert_ptr_nonnull(why);
    free(buf);
}
END_TEST

START_TEST(head_max_head_bytes)
{
    const size_t max = 256;
    char raw[512];
    struct http_head h;
    const char *why;
    char *buf;
    size_t at, n;

    /* a head of exactly max bytes is served */
    n = (size_t)snprintf(raw, sizeof(raw), "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    memset(raw + n, 'a', max - n - 4);
    memcpy(raw + max - 4, "\r\n\r\n", 4);
    ck_assert_int_eq(parse_whole(raw, max, max, &h, &why, &buf), (ssize_t)max);
    free(buf);
    ck_assert_int_eq(parse_split(raw, max, max, &at), (ssize_t)max);

    /* one byte more is 431, whole or split */
    memmove(raw + max - 3, raw + max - 4, 4);
    raw[max - 4] = 'a';
    ck_assert_int_eq(parse_whole(raw, max + 1, max, &h, &why, &buf), -431);
    free(buf);
    ck_assert_int_eq(parse_split(raw, max + 1, max, &at), -431);

    /* a head that does not end is refused as soon as max + 1 bytes are in */
    memset(raw, 'a', sizeof(raw));
    memcpy(raw, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ", 32);
    ck_assert_int_eq(parse_split(raw, sizeof(raw), max, &at), -431);
    ck_assert_uint_eq(at, max + 1);
    /* ... even when its bytes arrive all at once */
    ck_assert_int_eq(parse_whole(raw, sizeof(raw), max, &h, &why, &buf), -431);
    free(buf);
}
END_TEST

/*
 * http_parse.h: "a head that arrives a byte at a time is still read in
 * linear time" - also when it starts with empty lines.  Those are rescanned
 * on every call, so their number is bounded: 8 are skipped (RFC 9112 2.2),
 * the 9th is refused as soon as it is complete, however many follow.
 */
START_TEST(head_leading_crlfs_bounded)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t n = 64 * 1024, scan = 0, k;
    char *b = malloc(n);
    struct http_head h;
    const char *why = NULL;
    ssize_t r = 0;

    for (size_t i = 0; i < n; i++)
        b[i] = i % 2 ? '\n' : '\r';
    for (k = 1; k <= n && r == 0; k++)
        r = head_verdict(b, k, n, &scan, &h, &why);
    ck_assert_int_eq(r, -400);
    ck_assert_uint_eq(k - 1, 18);       /* refused at the 9th CRLF */
    ck_assert_ptr_nonnull(why);

    /* eight are skipped and counted in the head's length */
    memcpy(b + 16, req, sizeof(req) - 1);
    scan = 0;
    r = head_verdict(b, 16 + sizeof(req) - 1, n, &scan, &h, &why);
    ck_assert_int_eq(r, (ssize_t)(16 + sizeof(req) - 1));
    ck_assert_int_eq(h.method, HTTP_M_GET);
    free(b);
}
END_TEST

/* ---- refused heads ----------------------------------------------------------------- */

struct bad_head {
    struct bytes raw;
    int status;             /* 400, 431, 501, 505 */
    const char *what;
};

static const struct bad_head bad_heads[] = {
    /* framing: one Content-Length or chunked, never both (RFC 9112 6.1, 6.3) */
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400,
     "CL then TE"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"), 400,
     "TE then CL"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400,
     "two differing CLs"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n"), 400, "a CL list"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n"), 400, "a CL list of one value"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n"), 400, "CL +5"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"), 400, "CL -1"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\n"), 400, "CL 5x"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n"), 400, "CL 0x5"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n"), 400, "CL 1 2"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n"), 400, "CL empty"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400,
     "CL past int64"},
    /* RFC 9112 5.1: no whitespace between name and colon */
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\n"), 400, "space before colon"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nContent-Length\t: 5\r\n\r\n"), 400, "tab before colon"},
    {B("GET / HTTP/1.1\r\nHost : x\r\n\r\n"), 400, "space before Host's colon"},
    /* RFC 9112 5.2: obs-fold */
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"), 400, "obs-fold SP"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n"), 400, "obs-fold HTAB"},
    {B("GET / HTTP/1.1\r\n Host: x\r\n\r\n"), 400, "first header line folded"},
    /* RFC 9112 2.2: CRLF, never a bare LF or a bare CR */
    {B("GET / HTTP/1.1\nHost: x\r\n\r\n"), 400, "bare LF after the request line"},
    {B("GET / HTTP/1.1\r\nHost: x\n\r\n"), 400, "bare LF after a header"},
    {B("GET / HTTP/1.1\r\nHost: x\r\n\n"), 400, "bare LF ending the head"},
    {B("GET / HTTP/1.1\nHost: x\n\n"), 400, "bare LF everywhere"},
    {B("\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "a leading bare LF"},
    {B("\r\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "a bare LF after a leading CRLF"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n"), 400, "bare CR in a value"},
    {B("GET / HTTP/1.1\rHost: x\r\n\r\n"), 400, "bare CR after the request line"},
    {B("GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "bare CR in the target"},
    /* Host (RFC 9112 3.2) */
    {B("GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"), 400, "two Host headers"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nhOST: x\r\n\r\n"), 400, "two Host headers, same value"},
    {B("GET / HTTP/1.1\r\nX-A: b\r\n\r\n"), 400, "HTTP/1.1 without Host"},
    {B("GET / HTTP/1.1\r\n\r\n"), 400, "HTTP/1.1 without any header"},
    /* Transfer-Encoding */
    {B("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"), 501, "TE gzip"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n"), 501, "TE identity"},
    {B("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501,
     "TE gzip, chunked"},
    {B("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400, "TE on HTTP/1.0"},
    {B("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"), 400,
     "TE and CL on HTTP/1.0"},
    /* versions */
    {B("GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505, "HTTP/2.0"},
    {B("GET / HTTP/3.0\r\nHost: x\r\n\r\n"), 505, "HTTP/3.0"},
    {B("GET / HTTP/0.9\r\nHost: x\r\n\r\n"), 505, "HTTP/0.9"},
    {B("GET / HTTP/1.1x\r\nHost: x\r\n\r\n"), 400, "HTTP/1.1x"},
    {B("GET / HTTP/1.\r\nHost: x\r\n\r\n"), 400, "HTTP/1."},
    {B("GET / HTTP/11\r\nHost: x\r\n\r\n"), 400, "HTTP/11"},
    {B("GET / HTTP/1.10\r\nHost: x\r\n\r\n"), 400, "HTTP/1.10"},
    {B("GET / http/1.1\r\nHost: x\r\n\r\n"), 400, "http/1.1"},
    {B("GET / HTTP/1.1 \r\nHost: x\r\n\r\n"), 400, "space after the version"},
    {B("GET /\r\nHost: x\r\n\r\n"), 400, "no version"},
    /* request line */
    {B("GARBAGE\r\n\r\n"), 400, "one word"},
    {B("GET  / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "two spaces"},
    {B("GET /  HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "two spaces after the target"},
    {B(" GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "leading space"},
    {B("GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "tab separator"},
    {B("G(T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "non-tchar in the method"},
    {B("G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "control character in the method"},
    {B("GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "DEL in the target"},
    {B("GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "control character in the target"},
    {B("GET /a\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "non-ASCII in the target"},
    {B("GET /a\0b HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "NUL in the target"},
    /* header lines */
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01z\r\n\r\n"), 400, "control character in a value"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fz\r\n\r\n"), 400, "DEL in a value"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0z\r\n\r\n"), 400, "NUL in a value"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX-A: \x1b[0m\r\n\r\n"), 400, "ESC in a value"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n"), 400, "space in a name"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX@A: b\r\n\r\n"), 400, "non-tchar in a name"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nX\0A: b\r\n\r\n"), 400, "NUL in a name"},
    {B("GET / HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n"), 400, "empty name"},
    {B("GET / HTTP/1.1\r\nHost: x\r\nGarbage\r\n\r\n"), 400, "no colon"},
    {B("GET / HTTP/1.1\r\nHost: x\r\n\x80X: b\r\n\r\n"), 400, "obs-text in a name"},
};

START_TEST(head_bad)
{
    const struct bad_head *c = &bad_heads[_i];
    struct http_head h;
    const char *why;
    char *buf;
    size_t at;
    ssize_t r = parse_whole(c->raw.p, c->raw.n, MAX_HEAD, &h, &why, &buf);

    free(buf);
    ck_assert_msg(r == -c->status, "%s: %zd (%s), want %d", c->what, r, why ? why : "accepted",
                  -c->status);
    ck_assert_msg(why != NULL && why[0] != '\0', "%s: refused without a reason", c->what);
    r = parse_split(c->raw.p, c->raw.n, MAX_HEAD, &at);
    ck_assert_msg(r == -c->status, "%s, split: %zd at len %zu, want %d", c->what, r, at, -c->status);
}
END_TEST

/* A complete valid head, then garbage: the head is read, the rest left. */
/* Every byte in a header value, against RFC 9110 5.5's field-value: HTAB,
 * SP, VCHAR and obs-text taken, any other control byte and DEL refused (CR
 * and LF end the line: not values' bytes) */
START_TEST(head_value_every_byte)
{
    for (int b = 0; b < 256; b++) {
        char raw[64];
        int n = snprintf(raw, sizeof(raw), "GET / HTTP/1.1\r\nHost: x\r\nX-A: a%cz\r\n\r\n", b);
        bool ok = b == '\t' || (b >= 0x20 && b != 0x7f);
        struct http_head h;
        const char *why = NULL;
        char *buf;
        ssize_t r;

        if (b == '\r' || b == '\n')
            continue;
        ck_assert_int_eq((unsigned char)raw[n - 6], b); /* %c writes even a NUL */
        r = parse_whole(raw, (size_t)n, MAX_HEAD, &h, &why, &buf);
        free(buf);
        if (ok)
            ck_assert_msg(r == n, "byte 0x%02x: %zd (%s), want taken", b, r, why ? why : "");
        else
            ck_assert_msg(r == -400, "byte 0x%02x: %zd, want 400", b, r);
    }
}
END_TEST

/* Every byte at every place of a value longer than a word or two (the
 * values are tested eight bytes at a time): refused or taken as
 * head_value_every_byte says, wherever it is. */
START_TEST(head_value_every_byte_every_place)
{
    for (int at = 0; at < 20; at++) {
        for (int b = 0; b < 256; b++) {
            char raw[96], v[21];
            bool ok = b == '\t' || (b >= 0x20 && b != 0x7f);
            struct http_head h;
            const char *why = NULL;
            char *buf;
            ssize_t r;
            int n;

            if (b == '\r' || b == '\n' || ((b == ' ' || b == '\t') && (at == 0 || at == 19)))
                continue; /* line ends; OWS at an end is not the value's */
            memset(v, 'v', 20);
            v[at] = (char)b;
            v[20] = '\0';
            n = snprintf(raw, sizeof(raw), "GET / HTTP/1.1\r\nHost: x\r\nX-A: ");
            memcpy(raw + n, v, 20);
            n += 20;
            n += snprintf(raw + n, sizeof(raw) - (size_t)n, "\r\n\r\n");
            r = parse_whole(raw, (size_t)n, MAX_HEAD, &h, &why, &buf);
            if (ok) {
                ck_assert_msg(r == n, "byte 0x%02x at %d: %zd (%s), want taken", b, at, r,
                              why ? why : "");
                ck_assert_uint_eq(h.headers[1].value_len, 20);
                ck_assert_int_eq(memcmp(h.headers[1].value, v, 20), 0);
            } else {
                ck_assert_msg(r == -400, "byte 0x%02x at %d: %zd, want 400", b, at, r);
                ck_assert_str_eq(why, "control character in a header value");
            }
            free(buf);
        }
    }
}
END_TEST

/* Header names match in any case of their letters, and only so: '^' and
 * '~' (one bit apart, as 'a' and 'A') are two bytes. */
START_TEST(head_names_any_case)
{
    static const char raw[] = "POST / HTTP/1.1\r\nhOsT: x\r\ncOnTeNt-LeNgTh: 5\r\n"
                              "X~a: tilde\r\nX-Key1: k\r\n\r\n";
    struct http_head h;
    const char *why = NULL;
    char *buf;

    ck_assert_int_eq(parse_whole(raw, sizeof(raw) - 1, MAX_HEAD, &h, &why, &buf),
                     (ssize_t)sizeof(raw) - 1);
    ck_assert_int_eq(h.content_length, 5);
    ck_assert_ptr_null(http_head_find(&h, "X^a"));
    ck_assert_ptr_null(http_head_find(&h, "X^A"));
    ck_assert_str_eq(http_head_find(&h, "x~A")->value, "tilde");
    ck_assert_str_eq(http_head_find(&h, "x-kEY1")->value, "k");
    ck_assert_ptr_null(http_head_find(&h, "x-kEY!"));
    ck_assert_ptr_null(http_head_find(&h, "X-Key2"));
    ck_assert_ptr_null(http_head_find(&h, "X-Ke"));
    free(buf);
}
END_TEST

START_TEST(head_then_garbage)
{
    static const char raw[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\n\0\x01GARBAGE";
    struct http_head h;
    const char *why;
    char *buf;

    ck_assert_int_eq(parse_whole(raw, sizeof(raw) - 1, MAX_HEAD, &h, &why, &buf), 27);
    free(buf);
}
END_TEST

/* Two pipelined requests: each call reads one, the next starts where it ended. */
START_TEST(head_pipelined)
{
#define FIRST_HEAD "POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
    static const char raw[] = FIRST_HEAD "abc"
                              "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *buf = dup_bytes(raw, sizeof(raw) - 1);
    struct http_head h;
    const char *why;
    size_t scan = 0, off;
    ssize_t r = head_verdict(buf, sizeof(raw) - 1, MAX_HEAD, &scan, &h, &why);

    ck_assert_int_eq(r, (ssize_t)strlen(FIRST_HEAD));
    ck_assert_int_eq(h.content_length, 3);
    off = (size_t)r + 3;
    scan = 0;
    r = head_verdict(buf + off, sizeof(raw) - 1 - off, MAX_HEAD, &scan, &h, &why);
    ck_assert_int_eq(r, (ssize_t)(sizeof(raw) - 1 - off));
    ck_assert_int_eq(h.method, HTTP_M_GET);
    ck_assert_str_eq(h.target, "/healthz");
    ck_assert_int_eq(h.keep_alive, 0);
    free(buf);
}
END_TEST

/* ---- chunked ------------------------------------------------------------------------- */

#define PREFIX "HEAD"           /* the decoder starts past bytes it must not touch */
#define PREFIX_LEN 4

struct good_chunked {
    struct bytes raw;           /* the chunked body, then `tail` bytes of what follows */
    size_t tail;
    struct bytes body;
    const char *what;
};

static const struct good_chunked good_chunks[] = {
    {B("1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 0, B("abcdefghijklmnopqrstuvwxyz"), "1a"},
    {B("1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 0, B("abcdefghijklmnopqrstuvwxyz"), "1A"},
    {B("0\r\n\r\n"), 0, B(""), "empty body"},
    {B("3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n"), 0, B("{\"a\":1}"), "two chunks"},
    {B("1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n"), 0, B("abc"), "one byte chunks"},
    {B("0005\r\nhello\r\n0\r\n\r\n"), 0, B("hello"), "leading zeros"},
    {B("5;name=val\r\nhello\r\n0;last\r\n\r\n"), 0, B("hello"), "extensions"},
    {B("5;a=\"q;\\\"x\";b\r\nhello\r\n0\r\n\r\n"), 0, B("hello"), "quoted extension"},
    {B("5 ;a=b\r\nhello\r\n0\r\n\r\n"), 0, B("hello"), "BWS before an extension"},
    /* http_parse.h: "whitespace may follow the size" (with or without an extension) */
    {B("5 \r\nhello\r\n0\t\r\n\r\n"), 0, B("hello"), "whitespace after the size"},
    {B("5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: two words\r\n\r\n"), 0, B("hello"), "trailers"},
    {B("5\r\nhe\r\nl\r\n0\r\n\r\n"), 0, B("he\r\nl"), "CRLF inside chunk data"},
    {B("5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n"), 16, B("hello"), "the next request after"},
    {B("5\r\n\0\x01\r\n\xff\r\n0\r\n\r\n"), 0, B("\0\x01\r\n\xff"), "binary chunk data"},
};

/* Decode raw (after PREFIX) with max_body; whole or growing by one byte. */
static int
decode(const char *raw, size_t n, int64_t max_body, int split, char **bufp,
       struct http_chunked *c, const char **why)
{
    char *buf = malloc(PREFIX_LEN + n);
    int r = 0;

    memcpy(buf, PREFIX, PREFIX_LEN);
    memcpy(buf + PREFIX_LEN, raw, n);
    memset(c, 0, sizeof(*c));
    c->in = c->out = PREFIX_LEN;
    *why = NULL;
    if (!split) {
        r = chunked_verdict(c, buf, PREFIX_LEN + n, max_body, why);
    } else {
        for (size_t k = PREFIX_LEN; k <= PREFIX_LEN + n; k++) {
            r = chunked_verdict(c, buf, k, max_body, why);
            ck_assert_msg(c->out <= c->in && c->in <= k, "out %zu in %zu len %zu", c->out, c->in, k);
            if (r != 0)
                break;
        }
    }
    ck_assert_mem_eq(buf, PREFIX, PREFIX_LEN);
    *bufp = buf;
    return r;
}

START_TEST(chunked_good)
{
    const struct good_chunked *t = &good_chunks[_i];
    size_t blen = t->body.n;

    for (int split = 0; split <= 1; split++) {
        struct http_chunked c;
        const char *why;
        char *buf;
        int r = decode(t->raw.p, t->raw.n, 1 << 20, split, &buf, &c, &why);

        ck_assert_msg(r == 1, "%s%s: %d (%s)", t->what, split ? " split" : "", r, why ? why : "-");
        ck_assert_uint_eq(c.in, PREFIX_LEN + t->raw.n - t->tail);
        ck_assert_uint_eq(c.out - PREFIX_LEN, blen);
        ck_assert_msg(memcmp(buf + PREFIX_LEN, t->body.p, blen) == 0, "%s: body differs", t->what);
        /* what follows the message is untouched */
        ck_assert_msg(memcmp(buf + c.in, t->raw.p + t->raw.n - t->tail, t->tail) == 0,
                      "%s: the bytes after the message changed", t->what);
        free(buf);
    }
}
END_TEST

struct bad_chunked {
    struct bytes raw;
    int status;
    const char *what;
};

static const struct bad_chunked bad_chunks[] = {
    {B("0x1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 400, "0x1a"},
    {B(" 1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 400, "leading space"},
    {B("\t1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 400, "leading tab"},
    {B("+1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n"), 400, "+1a"},
    {B("-1\r\na\r\n0\r\n\r\n"), 400, "-1"},
    {B("g\r\n0\r\n\r\n"), 400, "g"},
    {B("1g\r\na\r\n0\r\n\r\n"), 400, "1g"},
    {B("1 a\r\na\r\n0\r\n\r\n"), 400, "1 a"},
    {B("\r\n0\r\n\r\n"), 400, "empty size"},
    {B(";a\r\n0\r\n\r\n"), 400, "extension without size"},
    {B("10000000000000000\r\n"), 400, "2^64"},
    {B("100000000000000000000\r\n"), 400, "2^80"},
    {B("5\nhello\r\n0\r\n\r\n"), 400, "bare LF after the size"},
    {B("5\rhello\r\n0\r\n\r\n"), 400, "bare CR after the size"},
    {B("5\r\nhello\n0\r\n\r\n"), 400, "bare LF after the data"},
    {B("5\r\nhelloX\r\n0\r\n\r\n"), 400, "data longer than the size"},
    {B("5\r\nhello\r\n0\r\n\n"), 400, "bare LF ending the message"},
    {B("5\r\nhello\r\n0\n\r\n"), 400, "bare LF after the last size"},
    {B("5\r\nhello\r\n0\r\nX-T: 1\n\r\n"), 400, "bare LF after a trailer"},
    {B("5\r\nhello\r\n0\r\nX-T: 1\r\n more\r\n\r\n"), 400, "obs-fold in the trailers"},
    {B("5;a\x01\r\nhello\r\n0\r\n\r\n"), 400, "control character in an extension"},
    {B("5;a\0\r\nhello\r\n0\r\n\r\n"), 400, "NUL in an extension"},
    {B("5\r\nhello\r\n0\r\nX-T: \x01\r\n\r\n"), 400, "control character in a trailer"},
    /* more than max_body (64 here), in one chunk or summed */
    {B("41\r\n"), 413, "one chunk over max_body"},
    {B("20\r\n0123456789abcdef0123456789abcdef\r\n21\r\n"), 413, "two chunks over max_body"},
    {B("ffffffffffffffff\r\n"), 413, "2^64-1 at once"},
    /* a size that would wrap the running total must not pass as small */
    {B("1\r\na\r\nffffffffffffffff\r\n"), 413, "total wraps past 2^64"},
    {B("2\r\nab\r\nfffffffffffffffe\r\n"), 413, "total wraps to zero"},
};

START_TEST(chunked_bad)
{
    const struct bad_chunked *t = &bad_chunks[_i];

    for (int split = 0; split <= 1; split++) {
        struct http_chunked c;
        const char *why;
        char *buf;
        int r = decode(t->raw.p, t->raw.n, 64, split, &buf, &c, &why);

        free(buf);
        ck_assert_msg(r == -t->status, "%s%s: %d (%s), want %d", t->what, split ? " split" : "", r,
                      why ? why : "-", -t->status);
        ck_assert_msg(why != NULL && why[0] != '\0', "%s: refused without a reason", t->what);
    }
}
END_TEST

START_TEST(chunked_max_body_exact)
{
    struct http_chunked c;
    const char *why;
    char *buf;
    static const char raw[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";

    ck_assert_int_eq(decode(raw, sizeof(raw) - 1, 5, 0, &buf, &c, &why), 1);
    ck_assert_uint_eq(c.out - PREFIX_LEN, 5);
    free(buf);
    ck_assert_int_eq(decode(raw, sizeof(raw) - 1, 4, 1, &buf, &c, &why), -413);
    free(buf);
}
END_TEST

START_TEST(chunked_long_lines)
{
    /* a size line (leading zeros) or a trailer line without end is refused
     * once it is long, not buffered for ever */
    size_t n = 64 * 1024;
    char *raw = malloc(n);
    struct http_chunked c;
    const char *why;
    char *buf;

    memset(raw, '0', n);
    ck_assert_int_eq(decode(raw, n, 1 << 20, 0, &buf, &c, &why), -400);
    free(buf);
    memcpy(raw, "5;", 2);
    memset(raw + 2, 'e', n - 2);
    ck_assert_int_eq(decode(raw, n, 1 << 20, 0, &buf, &c, &why), -400);
    free(buf);
    memcpy(raw, "0\r\nX-T: ", 8);
    memset(raw + 8, 'v', n - 8);
    ck_assert_int_eq(decode(raw, n, 1 << 20, 0, &buf, &c, &why), -400);
    free(buf);
    free(raw);
}
END_TEST

START_TEST(chunked_many_trailers)
{
    char raw[8192];
    size_t n = (size_t)snprintf(raw, sizeof(raw), "1\r\na\r\n0\r\n");
    struct http_chunked c;
    const char *why;
    char *buf;

    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(raw + n, sizeof(raw) - n, "X-T%d: v\r\n", i);
    n += (size_t)snprintf(raw + n, sizeof(raw) - n, "\r\n");
    ck_assert_int_lt(decode(raw, n, 1 << 20, 0, &buf, &c, &why), 0);
    free(buf);
}
END_TEST

/* The head and the chunked body of one request, as http.c chains them. */
START_TEST(head_then_chunked)
{
    static const char raw[] = "POST /check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "7\r\n{\"polic\r\n10;x=y\r\ny\":\"p\",\"cost\":0}\r\n0\r\n\r\n"
                              "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char *buf = dup_bytes(raw, sizeof(raw) - 1);
    struct http_head h;
    struct http_chunked c;
    const char *why;
    size_t scan = 0;
    ssize_t r = head_verdict(buf, sizeof(raw) - 1, MAX_HEAD, &scan, &h, &why);

    ck_assert_int_gt(r, 0);
    ck_assert_int_eq(h.chunked, 1);
    memset(&c, 0, sizeof(c));
    c.in = c.out = (size_t)r;
    ck_assert_int_eq(chunked_verdict(&c, buf, sizeof(raw) - 1, 1024, &why), 1);
    ck_assert_uint_eq(c.out - (size_t)r, 23);
    ck_assert_mem_eq(buf + r, "{\"policy\":\"p\",\"cost\":0}", 23);
    ck_assert_uint_eq(sizeof(raw) - 1 - c.in, 34);
    ck_assert_mem_eq(buf + c.in, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34);
    free(buf);
}
END_TEST

static Suite *
http_parse_suite(void)
{
    Suite *s = suite_create("http_parse");
    TCase *tc;

    tc = tcase_create("head");
    tcase_add_loop_test(tc, head_good, 0, N_OF(good_heads));
    tcase_add_test(tc, head_fields_in_place);
    tcase_add_test(tc, head_max_headers);
    tcase_add_test(tc, head_max_head_bytes);
    tcase_add_test(tc, head_leading_crlfs_bounded);
    tcase_add_loop_test(tc, head_bad, 0, N_OF(bad_heads));
    tcase_add_test(tc, head_value_every_byte);
    tcase_add_test(tc, head_value_every_byte_every_place);
    tcase_add_test(tc, head_names_any_case);
    tcase_add_test(tc, head_then_garbage);
    tcase_add_test(tc, head_pipelined);
    suite_add_tcase(s, tc);

    tc = tcase_create("chunked");
    tcase_add_loop_test(tc, chunked_good, 0, N_OF(good_chunks));
    tcase_add_loop_test(tc, chunked_bad, 0, N_OF(bad_chunks));
    tcase_add_test(tc, chunked_max_body_exact);
    tcase_add_test(tc, chunked_long_lines);
    tcase_add_test(tc, chunked_many_trailers);
    tcase_add_test(tc, head_then_chunked);
    suite_add_tcase(s, tc);

    return s;
}

int
main(void)
{
    return rl_unit_run(http_parse_suite(), CK_FORK_GETENV);
}
