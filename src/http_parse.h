/*
 * http_parse.h — strict HTTP/1.1 request framing (RFC 9112), without I/O and
 * without allocation: every string points into the caller's buffer.
 *
 * Strict because a rate limiter sits beside a proxy: any request two parsers
 * could read two ways (two lengths, a bare LF, a folded line, a space before
 * the colon) lets a client hide a request from one of them.  So whatever is
 * not plainly one request is refused, and the connection closed.
 */
#ifndef RL_HTTP_PARSE_H
#define RL_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/* More header lines than this: 431. */
#define HTTP_HEADERS_MAX 64

enum http_method {
    HTTP_M_OTHER = 0, /* a valid token we do not serve */
    HTTP_M_GET,
    HTTP_M_HEAD,
    HTTP_M_POST,
    HTTP_M_PUT,
    HTTP_M_DELETE,
    HTTP_M_OPTIONS,
    HTTP_M_TRACE,
    HTTP_M_CONNECT,
    HTTP_M_PATCH
};

struct http_header {
    const char *name;  /* NUL-terminated in place, as sent */
    const char *value; /* NUL-terminated in place, OWS trimmed */
    size_t name_len, value_len;
};

struct http_head {
    enum http_method method;
    const char *method_name; /* NUL-terminated in place */
    size_t method_len;
    const char *target; /* request-target as sent, NUL-terminated */
    size_t target_len;
    const char *path;       /* origin-form path (absolute-form: the
                                     * part after the authority, "/" if none;
                                     * '*' and authority-form: the target) */
    size_t path_len;        /* up to '?' (not NUL-terminated there) */
    int minor;              /* HTTP/1.<minor>: 0 or 1 */
    int keep_alive;         /* what the client asked for */
    int chunked;            /* Transfer-Encoding: chunked */
    int64_t content_length; /* -1 when absent */
    int expect_continue;    /* Expect: 100-continue */
    size_t len;             /* of the head in buf, empty lines before it included */
    size_t nheaders;
    struct http_header headers[HTTP_HEADERS_MAX];
};

/* Why a request is refused: the status to answer (400, 413, 414, 431, 501 or
 * 505) and what is wrong in a few words (static text). */
struct http_refusal {
    int status;
    const char *why;
};

/*
 * Parse the request head (request line, header fields, the empty line) at
 * the start of buf[0..len), an incremental reader (rl.h):
 *   RL_PARSE_DONE  h is filled, h->len is the head's length, and the head's
 *                  bytes were rewritten in place (NULs end each name, value,
 *                  method and target);
 *   RL_PARSE_MORE  not complete yet: call again with more bytes (same buf
 *                  start);
 *   RL_PARSE_ERR   the request is refused, *no says how and why.
 * *scan carries how far earlier calls looked (start at 0 for each request),
 * so a head that arrives a byte at a time is still read in linear time.
 * A head longer than max_head bytes is refused with 431 as soon as that many
 * bytes are seen without its end.  Up to 8 empty lines (CRLF) before the
 * request line are skipped and counted in h->len; more: 400.
 */
enum rl_parse http_parse_head(char *buf, size_t len, size_t max_head, size_t *scan,
                              struct http_head *h, struct http_refusal *no) RL_WUR;

/* The first header named `name` (case-insensitive), or NULL. */
const struct http_header *http_head_find(const struct http_head *h, const char *name);

/*
 * Chunked transfer coding (RFC 9112 7.1), decoded in place: raw bytes at
 * buf[c->in..len) become body bytes at buf[c->out..), and c->out <= c->in
 * always, so the body ends up contiguous where the raw data began.  Start
 * with c zeroed and c->in = c->out = the offset of the body's first byte.
 * Chunk extensions and trailer fields are read and ignored; whitespace may
 * follow the size (BWS before an extension, RFC 9112 7.1.1), nothing else.
 */
struct http_chunked {
    int state;
    uint64_t left;   /* bytes of the current chunk still to copy */
    uint64_t body;   /* body bytes decoded so far */
    size_t line;     /* bytes of the current size/trailer line */
    size_t trailers; /* trailer lines read */
    size_t in, out;  /* raw input read up to, decoded body end */
};

/*
 * An incremental reader (rl.h): RL_PARSE_DONE when the last chunk and its
 * trailers have been read (c->in is then the end of the message in buf,
 * c->out the end of the body); RL_PARSE_MORE when more input is needed;
 * RL_PARSE_ERR with *no (400; 413 when the body passes max_body).
 */
enum rl_parse http_chunked_decode(struct http_chunked *c, char *buf, size_t len,
                                  int64_t max_body, struct http_refusal *no) RL_WUR;

#endif
