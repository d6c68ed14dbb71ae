/*
 * fuzz_http.c — libFuzzer target: the HTTP/1.1 request parser (http_parse.h)
 * as http.c drives it, head then chunked body, over the bytes of a socket.
 *
 * The first two input bytes choose where reads split the stream (a step of
 * 1..256 bytes) and a small max_body; the rest is the stream.  The stream is
 * fed twice, whole and in steps, each call on a buffer of exactly `len` bytes
 * so that a look past len is an ASan report.
 *
 * Oracles besides ASan/UBSan: whole and stepped give the same verdicts and
 * the same decoded bodies; a head's length is within the stream and within
 * max_head; a refusal is one of the documented statuses with a reason; the
 * fields point into the buffer and agree with what they describe (one of
 * Content-Length or chunked, minor 0 or 1, path within the target); the
 * decoded body never passes max_body and never grows past the raw bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEAD 1024
#define MAX_REQUESTS 8

struct verdict {
    enum rl_parse head;         /* http_parse_head's answer */
    int status;                 /* its refusal's, or the chunked body's */
    size_t head_len;
    enum rl_parse body;         /* http_chunked_decode's, or DONE for a length body */
    size_t body_len;
    uint64_t body_hash;
    size_t next;                /* where the next request starts */
};

/* an oracle failed: say which before the crash libFuzzer records */
#define oops() fail(__LINE__)
static void
fail(int line)
{
    fprintf(stderr, "fuzz_http.c:%d: oracle failed\n", line);
    abort();
}

static uint64_t
hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static int
is_status(int st)
{
    return st == 400 || st == 413 || st == 414 || st == 431 || st == 501 || st == 505;
}

/* The stream's first `len` bytes in a buffer of exactly that size. */
static char *
prefix(const char *s, size_t len)
{
    char *b = malloc(len ? len : 1);

    if (b == NULL)
        oops();
    memcpy(b, s, len);
    return b;
}

static void
check_head(const struct http_head *h, const char *buf)
{
    const char *end = buf + h->len;

    if (h->len > MAX_HEAD)
        oops();
    if (h->minor != 0 && h->minor != 1)
        oops();
    if (h->chunked && h->content_length >= 0)
        oops();
    if (h->nheaders > HTTP_HEADERS_MAX)
        oops();
    if (h->target < buf || h->target + h->target_len > end || h->target_len == 0)
        oops();
    if (strlen(h->target) != h->target_len || strlen(h->method_name) != h->method_len)
        oops();
    if (h->path_len > h->target_len + 1)
        oops();
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct http_header *f = &h->headers[i];
        if (f->name < buf || f->value < buf || f->value + f->value_len > end)
            oops();
        if (strlen(f->name) != f->name_len || strlen(f->value) != f->value_len || f->name_len == 0)
            oops();
        if (http_head_find(h, f->name) == NULL)
            oops();
    }
}

/*
 * Read up to MAX_REQUESTS requests from s[0..n), `step` bytes more per read
 * (step 0: all at once).  Each read gets a fresh exact-size buffer; what was
 * decoded so far is carried over as http.c would keep it.
 */
static size_t
run(const char *s, size_t n, size_t step, int64_t max_body, struct verdict *v)
{
    size_t off = 0, nv = 0;

    while (nv < MAX_REQUESTS && off < n) {
        struct verdict *out = &v[nv++];
        struct http_head h;
        struct http_refusal no = {0, NULL};
        size_t scan = 0, len = step ? 0 : n - off, r;
        enum rl_parse rc;
        char *buf;

        memset(out, 0, sizeof(*out));
        for (;;) {
            if (step)
                len = len + step < n - off ? len + step : n - off;
            buf = prefix(s + off, len);
            rc = http_parse_head(buf, len, MAX_HEAD, &scan, &h, &no);
            if (rc != RL_PARSE_MORE || len == n - off)
                break;
            free(buf);
        }
        out->head = rc;
        if (rc == RL_PARSE_ERR && (!is_status(no.status) || no.why == NULL))
            oops();
        if (rc != RL_PARSE_DONE) {
            out->status = no.status;
            free(buf);
            return nv;
        }
        r = out->head_len = h.len;
        if (r == 0 || r > len)
            oops();
        check_head(&h, buf);
        free(buf);

        if (h.chunked) {
            /* the whole rest in one buffer, decoded as it grows */
            struct http_chunked c;
            char *body = prefix(s + off, n - off);
            size_t blen = step ? r : n - off;
            enum rl_parse d = RL_PARSE_MORE;

            memset(&c, 0, sizeof(c));
            c.in = c.out = r;
            for (;;) {
                if (step)
                    blen = blen + step < n - off ? blen + step : n - off;
                d = http_chunked_decode(&c, body, blen, max_body, &no);
                if (c.out > c.in || c.in > blen || c.out < r)
                    oops();
                if ((int64_t)(c.out - r) > max_body)
                    oops();
                if (d != RL_PARSE_MORE || blen == n - off)
                    break;
            }
            if (d == RL_PARSE_ERR &&
                ((no.status != 400 && no.status != 413 && no.status != 431) || no.why == NULL))
                oops();
            out->body = d;
            out->status = d == RL_PARSE_ERR ? no.status : 0;
            out->body_len = c.out - r;
            out->body_hash = hash(body + r, out->body_len);
            free(body);
            if (d != RL_PARSE_DONE)
                return nv;
            off += c.in;
        } else {
            int64_t cl = h.content_length < 0 ? 0 : h.content_length;
            if (cl > max_body || (uint64_t)cl > n - off - r) {
                out->body = RL_PARSE_MORE;
                return nv;
            }
            out->body = RL_PARSE_DONE;
            out->body_len = (size_t)cl;
            out->body_hash = hash(s + off + r, (size_t)cl);
            off += r + (size_t)cl;
        }
        out->next = off;
        if (!h.keep_alive)
            return nv;
    }
    return nv;
}

/*
 * Whole and stepped must agree, except on which refusal a head past
 * max_head gets: read at once, a fault beyond max_head (a bare LF) may be
 * seen first (400); read in steps, the bound is (431).  Both refuse.
 */
static int
same_verdict(const struct verdict *a, const struct verdict *b)
{
    if (a->head != b->head)
        return 0;
    if (a->head == RL_PARSE_DONE)
        return a->head_len == b->head_len && a->body == b->body && a->status == b->status;
    if (a->head == RL_PARSE_ERR)
        return a->status == b->status || a->status == 431 || b->status == 431;
    return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct verdict whole[MAX_REQUESTS], stepped[MAX_REQUESTS];
    size_t nw, ns, step;
    int64_t max_body;

    if (size < 2)
        return 0;
    step = (size_t)data[0] + 1;
    max_body = 16 + (int64_t)data[1] * 8;
    data += 2;
    size -= 2;

    nw = run((const char *)data, size, 0, max_body, whole);
    ns = run((const char *)data, size, step, max_body, stepped);
    if (nw != ns)
        oops();
    for (size_t i = 0; i < nw; i++) {
        if (!same_verdict(&whole[i], &stepped[i])) {
            fprintf(stderr, "request %zu: whole head %d (%zu, %d) body %d, stepped (by %zu) "
                    "head %d (%zu, %d) body %d\n", i, whole[i].head, whole[i].head_len,
                    whole[i].status, whole[i].body, step, stepped[i].head, stepped[i].head_len,
                    stepped[i].status, stepped[i].body);
            oops();
        }
        if (whole[i].head == RL_PARSE_DONE && whole[i].body != RL_PARSE_MORE &&
            (whole[i].body_len != stepped[i].body_len || whole[i].body_hash != stepped[i].body_hash ||
             whole[i].next != stepped[i].next))
            oops();
    }
    return 0;
}
