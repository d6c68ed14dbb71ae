/*
 * http.c — see http.h.
 *
 * The cost model: a keep-alive check is one read() and one write(), read
 * interest stays registered (no epoll_ctl per request), nothing is formatted
 * with printf and nothing is allocated per request once a connection has
 * served its first one (requests come from a free list, buffers stay with
 * their connection).  Deadlines are one sweep over the connections every
 * SWEEP_MS with a coarse clock, not a timer per request.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <stdio.h>

#include <event2/event.h>
#include <jansson.h>

#include "http.h"
#include "bufpool.h"
#include "transport_conf.h"
#include "listener.h"
#include "log.h"
#include "util.h"

#define RBUF_INIT 4096
/* Unsent answers past this: read no more requests until the client reads. */
#define WBUF_HIGH (64 * 1024)
/* A connection we close while the client may still be sending is read and
 * discarded this long, so it reads our answer instead of a reset. */
#define LINGER_MS 2000
#define SWEEP_MS 100
#define REQ_FREE_MAX 256
/* A body over max_body but under this is read and dropped after its 413, so
 * the connection lives on; a longer one is refused with a close. */
#define DISCARD_MIN (1024 * 1024)
#define DISCARD_FACTOR 4

enum conn_state {
    C_HEAD,    /* reading a request head */
    C_BODY,    /* reading a Content-Length body */
    C_CHUNKED, /* reading a chunked body */
    C_DISCARD, /* reading a body we refused, to keep the connection */
    C_CLOSING, /* the last answer is queued: read nothing more */
    C_LINGER   /* answered and half-closed: discarding input */
};

enum deadline {
    D_NONE, /* we owe an answer: the check has its own deadline */
    D_HEADER,
    D_BODY,
    D_IDLE,
    D_WRITE,
    D_LINGER,
    D_DRAIN /* draining, between requests: http.drain_idle's grace */
};

struct http_conn {
    struct http_server *srv;
    int fd;
    struct event *rev, *wev;
    enum conn_state state;
    int reading; /* rev is added */
    int writing; /* wev is added */
    int busy;    /* inside our own callback: not freed there */
    int dead;    /* free at the next safe point */
    int eof;     /* the client sent FIN */
    int linger;  /* bytes may still come: linger before close */
    int stalled; /* process() stopped for back-pressure */
    enum deadline dkind;
    int64_t deadline_ms;
    int64_t drain_until_ms; /* draining: the grace for a next request ends */
    /* input: unconsumed bytes are rbuf[rpos, rlen) */
    char *rbuf;
    size_t rcap, rlen, rpos; /* rcap - RBUF_INIT of it taken from bufpool.h's pool */
    size_t scan;             /* head bytes already searched for its end */
    int64_t first_us;        /* when the read that began this request came */
    size_t head_len;
    int64_t need; /* C_BODY: body bytes */
    struct http_chunked ch;
    struct http_head head;
    /* output: unsent bytes are wbuf[woff, wlen) */
    char *wbuf;
    size_t wcap, wlen, woff;
    /* requests read and not yet written, oldest first */
    struct http_req *q_head, *q_tail;
    size_t nq;
    struct sockaddr_storage peer;
    struct http_conn *prev, *next;
};

struct http_server {
    struct event_base *base;
    struct listener ls; /* ls.open: connections open */
    struct event *sweep_ev;
    const struct rl_http_conf *limits;
    const int64_t *max_body;
    http_handler handler;
    void *arg;
    struct http_counters *counters;
    struct http_counters own; /* when the caller keeps none */
    struct http_conn *conns;
    int draining;
    void (*empty)(void *);
    void *empty_arg;
    struct http_req *free_reqs;
    size_t nfree;
    time_t date_t;
    char date[40]; /* "Date: ...\r\n" of date_t */
    size_t date_len;
    /* "Keep-Alive: timeout=N\r\n" of idle_timeout_ms ka_ms (-1: none yet),
     * written again only when a reload changes it */
    int64_t ka_ms;
    char ka[48];
    size_t ka_len;
};

static void conn_settle(struct http_conn *c);
static void on_write(evutil_socket_t fd, short what, void *arg);

/* ---- small things ---------------------------------------------------------- */

#define COUNT(srv, field) __atomic_add_fetch(&(srv)->counters->field, 1, __ATOMIC_RELAXED)

const char *
http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

const char *
http_method_name(enum http_method m)
{
    static const char *const names[] = {
        [HTTP_M_GET] = "GET",     [HTTP_M_HEAD] = "HEAD",       [HTTP_M_POST] = "POST",
        [HTTP_M_PUT] = "PUT",     [HTTP_M_DELETE] = "DELETE",   [HTTP_M_OPTIONS] = "OPTIONS",
        [HTTP_M_TRACE] = "TRACE", [HTTP_M_CONNECT] = "CONNECT", [HTTP_M_PATCH] = "PATCH",
    };
    return (size_t)m < RL_ARRAY_LEN(names) ? names[m] : NULL;
}

/* RFC 9110 6.6.1: an origin server with a clock sends Date; formatted once
 * a second, not per answer. */
static void
date_line(struct http_server *srv, struct strbuf *sb)
{
    time_t now = time(NULL);

    if (now != srv->date_t) {
        struct tm tm;
        gmtime_r(&now, &tm);
        srv->date_len = strftime(srv->date, sizeof(srv->date),
                                 "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        srv->date_t = now;
    }
    sb_mem(sb, srv->date, srv->date_len);
}

/* Keep-Alive: how long an idle connection is kept, in whole seconds (at
 * least 1); formatted again only when a reload changes it. */
static void
keep_alive_line(struct http_server *srv, struct strbuf *sb)
{
    int64_t ms = srv->limits->idle_timeout_ms;

    if (ms != srv->ka_ms) {
        struct strbuf ka;
        sb_init(&ka, srv->ka, sizeof(srv->ka));
        sb_str(&ka, "Keep-Alive: timeout=");
        sb_i64(&ka, ms / 1000 > 0 ? ms / 1000 : 1);
        sb_str(&ka, "\r\n");
        srv->ka_len = ka.len;
        srv->ka_ms = ms;
    }
    sb_mem(sb, srv->ka, srv->ka_len);
}

static struct http_req *
req_get(struct http_server *srv)
{
    struct http_req *r = srv->free_reqs;

    if (r != NULL) {
        srv->free_reqs = r->next;
        srv->nfree--;
    } else {
        r = xmalloc(sizeof(*r));
    }
    memset(r, 0, sizeof(*r));
    r->srv = srv;
    return r;
}

static void
req_put(struct http_server *srv, struct http_req *r)
{
    free(r->out);
    if (srv->nfree >= REQ_FREE_MAX) {
        free(r);
        return;
    }
    r->next = srv->free_reqs;
    srv->free_reqs = r;
    srv->nfree++;
}

/* ---- reading and writing ----------------------------------------------------- */

static void
wb_reserve(struct http_conn *c, size_t n)
{
    if (c->woff == c->wlen) {
        c->woff = c->wlen = 0;
    } else if (c->woff > 0 && c->wlen + n > c->wcap) {
        memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
        c->wlen -= c->woff;
        c->woff = 0;
    }
    if (c->wlen + n > c->wcap) {
        size_t cap = c->wcap ? c->wcap : 2048;
        while (cap < c->wlen + n)
            cap *= 2;
        c->wbuf = xrealloc(c->wbuf, cap);
        c->wcap = cap;
    }
}

static void
wb_add(struct http_conn *c, const char *s, size_t n)
{
    wb_reserve(c, n);
    memcpy(c->wbuf + c->wlen, s, n);
    c->wlen += n;
}

static void
want_write(struct http_conn *c, int on)
{
    if (on && !c->writing) {
        if (c->wev == NULL)
            c->wev = event_new(c->srv->base, c->fd, EV_WRITE | EV_PERSIST, on_write, c);
        event_add(c->wev, NULL);
        c->writing = 1;
    } else if (!on && c->writing) {
        event_del(c->wev);
        c->writing = 0;
    }
}

static void
want_read(struct http_conn *c, int on)
{
    if (on && !c->reading && !c->eof) {
        event_add(c->rev, NULL);
        c->reading = 1;
    } else if (!on && c->reading) {
        event_del(c->rev);
        c->reading = 0;
    }
}

/* Bytes the client sent that we have not read: a close() now would answer
 * them with a reset, which may destroy our last answer on its way. */
static int
unread(const struct http_conn *c)
{
    int n = 0;

    return ioctl(c->fd, FIONREAD, &n) == 0 && n > 0;
}

/* Write what is pending; RL_ERR when the connection broke (then dead). */
static int
flush(struct http_conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);
        if (n > 0) {
            c->woff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            want_write(c, 1);
            return RL_OK;
        }
        c->dead = 1; /* the peer is gone: nothing to tell it */
        return RL_ERR;
    }
    c->woff = c->wlen = 0;
    want_write(c, 0);
    return RL_OK;
}

/* The head's strings as offsets from `base`, and back: its bytes may move
 * (compacted, or realloc'd) while its body is read.  A string outside the
 * buffer ("/" of split_path) keeps its pointer: its offset is -1. */
#define HEAD_STRINGS_MAX (3 + 2 * HTTP_HEADERS_MAX)

static const char **
head_string(struct http_head *h, size_t i)
{
    return i == 0             ? &h->method_name
           : i == 1           ? &h->target
           : i == 2           ? &h->path
           : (i - 3) % 2 == 0 ? &h->headers[(i - 3) / 2].name
                              : &h->headers[(i - 3) / 2].value;
}

static void
head_save(struct http_head *h, const char *base, size_t span, ptrdiff_t *off)
{
    for (size_t i = 0; i < 3 + 2 * h->nheaders; i++) {
        uintptr_t p = (uintptr_t)*head_string(h, i), b = (uintptr_t)base;
        off[i] = p >= b && p < b + span ? (ptrdiff_t)(p - b) : -1;
    }
}

static void
head_load(struct http_head *h, const char *base, const ptrdiff_t *off)
{
    for (size_t i = 0; i < 3 + 2 * h->nheaders; i++)
        if (off[i] >= 0)
            *head_string(h, i) = base + off[i];
}

/* rbuf to `cap` bytes (never below RBUF_INIT); what it grows by was taken
 * from the pool already, what it shrinks by goes back. */
static void
resize_rbuf(struct http_conn *c, size_t cap)
{
    size_t was = c->rcap;

    c->rbuf = xrealloc(c->rbuf, cap);
    c->rcap = cap;
    if (cap < was)
        bufpool_give((int64_t)(was - cap));
}

/*
 * Room for `want` unconsumed bytes from rpos on, moving or growing rbuf; a
 * parsed head's pointers move with it.  `most`: what the request needs in
 * all when known (a Content-Length body), 0 otherwise: the buffer grows as
 * bytes arrive, doubling but never past that, so a slow body holds what it
 * sent, not what it announced.  RL_ERR when growing would take the process
 * past http.max_buffered (nothing changed then).
 */
static int
make_room(struct http_conn *c, size_t want, size_t most)
{
    int rebase = c->state == C_BODY || c->state == C_CHUNKED;
    ptrdiff_t off[HEAD_STRINGS_MAX];
    size_t cap = c->rcap;

    if (c->rcap - c->rpos >= want && c->rlen < c->rcap)
        return RL_OK;
    if (c->rcap < want || (c->rpos == 0 && c->rlen == c->rcap)) {
        cap = bufpool_next_cap(c->rcap, want, most);
        if (cap > c->rcap &&
            bufpool_take((int64_t)(cap - c->rcap), c->srv->limits->max_buffered) != RL_OK)
            return RL_ERR;
    }
    if (rebase)
        head_save(&c->head, c->rbuf + c->rpos, c->rlen - c->rpos, off);
    if (c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        if (c->state == C_CHUNKED) {
            c->ch.in -= c->rpos;
            c->ch.out -= c->rpos;
        }
        c->rpos = 0;
    }
    if (cap > c->rcap)
        resize_rbuf(c, cap);
    if (rebase)
        head_load(&c->head, c->rbuf, off);
    return RL_OK;
}

/* A request is done and nothing follows it: a buffer a large one grew goes
 * back to its first size. */
static void
shrink_rbuf(struct http_conn *c)
{
    if (c->rcap > RBUF_INIT && c->rlen == 0)
        resize_rbuf(c, RBUF_INIT);
}

/* ---- answering ------------------------------------------------------------------ */

static void
enqueue(struct http_conn *c, struct http_req *r)
{
    r->conn = c;
    r->next = NULL;
    if (c->q_tail != NULL)
        c->q_tail->next = r;
    else
        c->q_head = r;
    c->q_tail = r;
    c->nq++;
}

static struct http_req *
dequeue(struct http_conn *c)
{
    struct http_req *r = c->q_head;

    c->q_head = r->next;
    if (c->q_head == NULL)
        c->q_tail = NULL;
    c->nq--;
    return r;
}

/* The whole answer as bytes, into (buf, len) of the caller's choice. */
static size_t
answer_size(const struct http_response *resp)
{
    return 256 + resp->headers_len + resp->body_len +
           (resp->content_type ? strlen(resp->content_type) : 0);
}

static size_t
format_answer(struct http_server *srv, const struct http_req *r,
              const struct http_response *resp, int close, char *out, size_t size)
{
    struct strbuf sb;
    const char *reason = http_reason(resp->status);

    sb_init(&sb, out, size);
    if (resp->status >= 100 && resp->status <= 999) { /* its three digits as they are */
        char st[] = "HTTP/1.1 000 ";
        st[9] = (char)('0' + resp->status / 100);
        st[10] = (char)('0' + resp->status / 10 % 10);
        st[11] = (char)('0' + resp->status % 10);
        sb_mem(&sb, st, sizeof(st) - 1);
    } else {
        sb_mem(&sb, "HTTP/1.1 ", 9);
        sb_i64(&sb, resp->status);
        sb_mem(&sb, " ", 1);
    }
    sb_str(&sb, reason);
    sb_mem(&sb, "\r\n", 2);
    date_line(srv, &sb);
    if (resp->content_type == NULL) {
        static const char json[] = "Content-Type: application/json\r\nContent-Length: ";
        sb_mem(&sb, json, sizeof(json) - 1);
    } else {
        sb_mem(&sb, "Content-Type: ", 14);
        sb_str(&sb, resp->content_type);
        sb_mem(&sb, "\r\nContent-Length: ", 18);
    }
    sb_i64(&sb, (int64_t)resp->body_len);
    sb_mem(&sb, "\r\n", 2);
    if (resp->headers_len > 0)
        sb_mem(&sb, resp->headers, resp->headers_len);
    if (close) {
        sb_mem(&sb, "Connection: close\r\n", 19);
    } else {
        if (r->minor == 0)
            sb_mem(&sb, "Connection: keep-alive\r\n", 24);
        keep_alive_line(srv, &sb);
    }
    sb_mem(&sb, "\r\n", 2);
    if (!r->head_only && resp->body_len > 0)
        sb_mem(&sb, resp->body, resp->body_len);
    return sb.len < size ? sb.len : size - 1;
}

/* Answers at the head of the queue go to wbuf, in order. */
static void
pop_answered(struct http_conn *c)
{
    while (c->q_head != NULL && c->q_head->answered) {
        struct http_req *r = dequeue(c);
        wb_add(c, r->out, r->out_len);
        req_put(c->srv, r);
    }
}

void
http_respond(struct http_req *r, const struct http_response *resp)
{
    struct http_conn *c = r->conn;
    struct http_server *srv = r->srv;
    int close;
    size_t n;

    if (c == NULL) { /* its connection died meanwhile */
        req_put(srv, r);
        return;
    }
    /* the last request before a close says so; a request with more behind
     * it on the connection cannot be the last */
    close = (resp->close || !r->keep_alive || c->state == C_CLOSING ||
             (srv->draining && c->state == C_HEAD && c->rlen == c->rpos && !unread(c))) &&
            r->next == NULL;
    if (close)
        c->state = C_CLOSING;
    if (resp->close || !r->keep_alive) {
        c->state = C_CLOSING;
        close = 1;
    }
    n = answer_size(resp);
    if (r == c->q_head) {
        wb_reserve(c, n);
        c->wlen += format_answer(srv, r, resp, close, c->wbuf + c->wlen, n);
        req_put(srv, dequeue(c));
        pop_answered(c);
    } else {
        r->out = xmalloc(n);
        r->out_len = format_answer(srv, r, resp, close, r->out, n);
        r->answered = 1;
    }
    if (!c->busy)
        conn_settle(c);
}

void
http_respond_error(struct http_req *r, int status, const char *extra, const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    struct http_response resp = {.status = status};

    if (status == 503 && extra == NULL)
        extra = "Retry-After: 1\r\n";
    resp.headers = extra;
    resp.headers_len = extra ? strlen(extra) : 0;
    resp.body = s != NULL ? s : "{\"error\":\"internal error\"}";
    resp.body_len = strlen(resp.body);
    http_respond(r, &resp);
    free(s);
    json_decref(o);
}

/* A JSON error for a request we refuse ourselves.  The connection closes
 * after it (what follows on the stream cannot be trusted) unless `keep`. */
static void
refuse_keep(struct http_conn *c, int status, const char *why, int keep)
{
    struct http_req *r = req_get(c->srv);
    struct http_response resp = {.status = status, .close = !keep};
    char body[256];
    struct strbuf sb;

    if (status == 408)
        COUNT(c->srv, timeouts);
    else if (status == 413 || status == 431)
        COUNT(c->srv, too_large);
    else if (status != 503) /* refuse_busy counts its own */
        COUNT(c->srv, bad_request);
    if (status == 503) {
        static const char retry[] = "Retry-After: 1\r\n";

        resp.headers = retry;
        resp.headers_len = sizeof(retry) - 1;
    }
    /* `why` is our own static text: no escaping needed */
    sb_init(&sb, body, sizeof(body));
    sb_str(&sb, "{\"error\":\"");
    sb_str(&sb, why);
    sb_str(&sb, "\"}");
    resp.body = body;
    resp.body_len = sb.len;
    r->keep_alive = keep;
    r->minor = keep ? c->head.minor : 1;
    enqueue(c, r);
    if (!keep) {
        c->state = C_CLOSING;
        c->linger = 1;
    }
    http_respond(r, &resp);
}

static void
refuse(struct http_conn *c, int status, const char *why)
{
    refuse_keep(c, status, why, 0);
}

/* The process holds http.max_buffered request bytes already: this request
 * cannot grow its buffer.  503 with Retry-After, and close. */
static void
refuse_busy(struct http_conn *c)
{
    COUNT(c->srv, overloaded);
    bufpool_refused("http", c->srv->limits->max_buffered);
    refuse(c, 503, "busy: the daemon buffers http.max_buffered request bytes already");
}

/* ---- one request ---------------------------------------------------------------- */

/*
 * `more`: bytes of another request follow this one in the buffer.  While
 * draining, every request already read is answered, and the last of them
 * says close: a client that pipelined several before the SIGTERM gets all
 * its answers, and none after a "Connection: close".
 */
static void
dispatch(struct http_conn *c, const char *body, size_t len, int more)
{
    struct http_server *srv = c->srv;
    struct http_req *r = req_get(srv);

    r->head = &c->head;
    r->body = body;
    r->body_len = len;
    r->first_us = c->first_us;
    r->head_only = c->head.method == HTTP_M_HEAD;
    r->keep_alive = c->head.keep_alive && (!srv->draining || more);
    r->minor = c->head.minor;
    enqueue(c, r);
    if (!r->keep_alive)
        c->state = C_CLOSING;
    srv->handler(r, srv->arg);
    r->head = NULL; /* r may be answered (and reused) already: */
    r = NULL;       /* touch it no more */
}

/* The head is in: decide how its body is framed.  False when the request was
 * refused instead (the connection closing, or discarding its body): then
 * there is no body to read, and processing carries on from the new state. */
static bool
start_body(struct http_conn *c, size_t head_len)
{
    struct http_head *h = &c->head;
    int64_t max = *c->srv->max_body;

    c->head_len = head_len;
    if (h->content_length > max) {
        int64_t cap = max * DISCARD_FACTOR > DISCARD_MIN ? max * DISCARD_FACTOR : DISCARD_MIN;
        /* RFC 9110 10.1.1: refused before any "100 Continue", so the client
         * never sends it, and we cannot wait for it either: close */
        if (h->expect_continue || h->content_length > cap || !h->keep_alive ||
            c->srv->draining) {
            refuse(c, 413, "body: larger than max_body");
            return false;
        }
        refuse_keep(c, 413, "body: larger than max_body", 1);
        c->rpos += head_len;
        c->need = h->content_length;
        c->state = C_DISCARD;
        return false;
    }
    if (h->chunked) {
        memset(&c->ch, 0, sizeof(c->ch));
        c->ch.in = c->ch.out = c->rpos + head_len;
        c->state = C_CHUNKED;
    } else {
        c->need = h->content_length > 0 ? h->content_length : 0;
        c->state = C_BODY;
    }
    if (h->expect_continue && c->nq == 0 &&
        (h->chunked || (size_t)c->need > c->rlen - c->rpos - head_len))
        wb_add(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return true;
}

/* What a step of process() leaves: wait for more bytes (or the close), go
 * on with the next request, or read the body of the head just read. */
enum step { STEP_WAIT, STEP_NEXT, STEP_BODY };

/* The body of a refused request, dropped as it arrives. */
static enum step
read_discard(struct http_conn *c)
{
    size_t drop = c->rlen - c->rpos;

    if ((int64_t)drop > c->need)
        drop = (size_t)c->need;
    c->rpos += drop;
    c->need -= (int64_t)drop;
    if (c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    if (c->need > 0)
        return STEP_WAIT;
    c->state = C_HEAD;
    c->scan = 0;
    return STEP_NEXT;
}

static enum step
read_head(struct http_conn *c)
{
    const struct rl_http_conf *lim = c->srv->limits;
    size_t avail = c->rlen - c->rpos;
    struct http_refusal no;
    enum rl_parse rc;

    if (avail == 0)
        return STEP_WAIT;
    rc = http_parse_head(c->rbuf + c->rpos, avail, (size_t)lim->max_header_bytes, &c->scan,
                         &c->head, &no);
    if (rc == RL_PARSE_ERR) {
        refuse(c, no.status, no.why);
        return STEP_WAIT;
    }
    if (rc == RL_PARSE_MORE) {
        if (make_room(c, avail + 1, 0) != RL_OK)
            refuse_busy(c);
        return STEP_WAIT;
    }
    /* refused: closing, or discarding its body */
    return start_body(c, c->head.len) ? STEP_BODY : STEP_NEXT;
}

/* A body of Content-Length bytes, handed over whole. */
static enum step
read_body(struct http_conn *c)
{
    size_t total = c->head_len + (size_t)c->need;
    size_t have = c->rlen - c->rpos;

    if (have < total) {
        if (make_room(c, have + 1, total) != RL_OK)
            refuse_busy(c);
        return STEP_WAIT;
    }
    dispatch(c, c->rbuf + c->rpos + c->head_len, (size_t)c->need,
             c->rpos + total < c->rlen || (c->srv->draining && unread(c)));
    c->rpos += total;
    return STEP_NEXT;
}

/* A chunked body, decoded in place, handed over once its last chunk came. */
static enum step
read_chunked(struct http_conn *c)
{
    size_t body_at = c->rpos + c->head_len;
    struct http_refusal no;
    enum rl_parse rc = http_chunked_decode(&c->ch, c->rbuf, c->rlen, *c->srv->max_body, &no);

    if (rc == RL_PARSE_ERR) {
        refuse(c, no.status, no.why);
        return STEP_WAIT;
    }
    if (rc == RL_PARSE_MORE) {
        /* decoded bytes stay; the raw tail moves down onto the framing
         * already read */
        if (c->ch.in > c->ch.out) {
            memmove(c->rbuf + c->ch.out, c->rbuf + c->ch.in, c->rlen - c->ch.in);
            c->rlen -= c->ch.in - c->ch.out;
            c->ch.in = c->ch.out;
        }
        if (make_room(c, c->rlen - c->rpos + 1, 0) != RL_OK)
            refuse_busy(c);
        return STEP_WAIT;
    }
    dispatch(c, c->rbuf + body_at, c->ch.out - body_at,
             c->ch.in < c->rlen || (c->srv->draining && unread(c)));
    c->rpos = c->ch.in;
    return STEP_NEXT;
}

/* Read every complete request that is buffered, as far as back-pressure
 * allows. */
static void
process(struct http_conn *c)
{
    const struct rl_http_conf *lim = c->srv->limits;
    enum step step;

    while (!c->dead && c->state <= C_DISCARD) {
        if (c->nq >= (size_t)lim->max_pipelined || c->wlen - c->woff > WBUF_HIGH) {
            want_read(c, 0); /* back-pressure: the client reads first */
            c->stalled = 1;
            return;
        }
        if (c->state == C_DISCARD) {
            if (read_discard(c) == STEP_WAIT)
                break;
            continue;
        }
        if (c->state == C_HEAD && (step = read_head(c)) != STEP_BODY) {
            if (step == STEP_WAIT)
                break;
            continue;
        }
        if ((c->state == C_BODY ? read_body(c) : read_chunked(c)) == STEP_WAIT)
            break;
        if (c->state != C_CLOSING)
            c->state = C_HEAD;
        c->scan = 0;
        if (c->rpos == c->rlen) {
            c->rpos = c->rlen = 0;
            shrink_rbuf(c);
        }
    }
}

/* ---- the connection's life -------------------------------------------------------- */

static void
conn_free(struct http_conn *c)
{
    struct http_server *srv = c->srv;

    while (c->q_head != NULL) {
        struct http_req *r = dequeue(c);
        if (r->answered)
            req_put(srv, r);
        else
            r->conn = NULL; /* its handler answers into the void */
    }
    if (c->rev != NULL)
        event_free(c->rev);
    if (c->wev != NULL)
        event_free(c->wev);
    close(c->fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    listener_closed(&srv->ls);
    __atomic_sub_fetch(&srv->counters->open, 1, __ATOMIC_RELAXED);
    if (c->rcap > RBUF_INIT)
        bufpool_give((int64_t)(c->rcap - RBUF_INIT));
    /* a flood of connections is a flood of buffers too */
    bufpool_freed((int64_t)(RBUF_INIT + c->wcap + sizeof(*c)));
    free(c->rbuf);
    free(c->wbuf);
    free(c);
    if (srv->draining && srv->ls.open == 0 && srv->empty != NULL)
        srv->empty(srv->empty_arg);
}

static void
set_deadline(struct http_conn *c, enum deadline kind, int64_t ms)
{
    if (c->dkind == kind)
        return; /* measured from when the phase began */
    c->dkind = kind;
    c->deadline_ms = kind == D_NONE ? 0 : now_coarse_ms() + ms;
}

/* All answered: half-close and read (discarding) until the client closes
 * or LINGER_MS, so that what it sent meanwhile never turns into a reset
 * ahead of the answers it has still to read. */
static void
start_linger(struct http_conn *c)
{
    shutdown(c->fd, SHUT_WR);
    c->state = C_LINGER;
    c->rpos = c->rlen = 0;
    want_read(c, 1);
    set_deadline(c, D_LINGER, LINGER_MS);
}

/* After anything happened: write, close when done, pick the deadline, and
 * free a dead connection.  c may be gone when this returns. */
static void
conn_settle(struct http_conn *c)
{
    const struct rl_http_conf *lim = c->srv->limits;

    if (!c->dead && c->wlen > c->woff)
        (void)flush(c);
    /* back-pressure released: read the requests already buffered */
    while (!c->dead && c->stalled && c->nq < (size_t)lim->max_pipelined &&
           c->wlen - c->woff <= WBUF_HIGH) {
        c->stalled = 0;
        c->busy++;
        process(c);
        c->busy--;
        if (!c->dead && c->wlen > c->woff)
            (void)flush(c);
    }
    if (c->dead) {
        conn_free(c);
        return;
    }
    if (c->wlen > c->woff) {
        set_deadline(c, D_WRITE, lim->idle_timeout_ms);
        return;
    }
    if (c->nq > 0) {
        set_deadline(c, D_NONE, 0);
        return;
    }
    if (c->state == C_CLOSING || (c->eof && c->state != C_LINGER)) {
        /* all answered: a client that may still be sending gets time to
         * read the answer before the close */
        if (c->eof || (!c->linger && c->rlen == c->rpos && !unread(c))) {
            conn_free(c);
            return;
        }
        start_linger(c);
        return;
    }
    if (c->state == C_LINGER)
        return;
    if (c->state == C_HEAD && c->rlen == c->rpos) {
        if (c->srv->draining) {
            /* between requests: a grace for the one the client is about
             * to send (or sent already: it is in the kernel's buffer),
             * then a lingering close */
            int64_t left = c->drain_until_ms - now_coarse_ms();
            if (left <= 0) {
                start_linger(c);
                return;
            }
            set_deadline(c, D_DRAIN, left);
        } else {
            set_deadline(c, D_IDLE, lim->idle_timeout_ms);
        }
    } else if (c->state == C_HEAD) {
        set_deadline(c, D_HEADER, lim->header_timeout_ms);
    } else {
        set_deadline(c, D_BODY, lim->body_timeout_ms);
    }
    if (!c->reading && !c->stalled)
        want_read(c, 1);
}

/*
 * A request read in part: acknowledge now what was read.  A client that
 * writes its head and body apart without TCP_NODELAY (httpx, many HTTP/1.1
 * clients) holds the body back (Nagle) until the head is acknowledged, and
 * Linux delays that ACK (40 ms and more) on a connection it takes for
 * request/response, hoping to send it with the answer, which waits for the
 * body.  TCP_QUICKACK sends the ACK at once; the kernel clears it again, so
 * it is set after every such read (a system call only then).
 */
static void
ack_now(struct http_conn *c)
{
    int one = 1;

    if (c->peer.ss_family == AF_INET || c->peer.ss_family == AF_INET6)
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

static void
on_read(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    ssize_t n;

    if (c->state == C_LINGER || c->state == C_CLOSING) {
        char sink[4096];
        n = read(fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            if (c->state == C_LINGER) {
                conn_free(c);
                return;
            }
            c->eof = 1;
            want_read(c, 0);
        } else if (n > 0) {
            c->linger = 1;
        }
        return;
    }
    if (c->rlen == c->rcap && make_room(c, c->rlen - c->rpos + 1, 0) != RL_OK) {
        c->busy++;
        refuse_busy(c);
        c->busy--;
        conn_settle(c);
        return;
    }
    if (c->rpos == c->rlen && c->state == C_HEAD)
        c->first_us = now_monotonic_us(); /* this read begins a request */
    n = read(fd, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        c->dead = 1;
    } else if (n == 0) {
        c->eof = 1;
        want_read(c, 0);
        /* a request cut short is not answered; earlier ones are */
        if (c->state != C_HEAD || c->rlen > c->rpos)
            c->state = C_CLOSING;
    } else {
        c->rlen += (size_t)n;
        c->busy++;
        process(c);
        c->busy--;
        if (c->rpos < c->rlen && c->state <= C_CHUNKED)
            ack_now(c);
    }
    conn_settle(c);
    (void)what;
}

static void
on_write(evutil_socket_t fd, short what, void *arg)
{
    conn_settle(arg);
    (void)fd;
    (void)what;
}

static void
on_accept(evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct http_server *srv = arg;
    struct http_conn *c = xcalloc(1, sizeof(*c));

    c->srv = srv;
    c->fd = fd;
    if (sa != NULL && salen > 0 && (size_t)salen <= sizeof(c->peer))
        memcpy(&c->peer, sa, (size_t)salen);
    c->rbuf = xmalloc(RBUF_INIT);
    c->rcap = RBUF_INIT;
    c->rev = event_new(srv->base, fd, EV_READ | EV_PERSIST, on_read, c);
    want_read(c, 1);
    c->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = c;
    srv->conns = c;
    COUNT(srv, accepted);
    COUNT(srv, open);
    /* a fresh connection owes us a request head */
    set_deadline(c, D_HEADER, srv->limits->header_timeout_ms);
}

static void
on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *srv = arg;
    int64_t now = now_coarse_ms();
    struct http_conn *c, *next;

    bufpool_trim(now);
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->dkind == D_NONE || now < c->deadline_ms)
            continue;
        switch (c->dkind) {
        case D_HEADER:
            if (c->rlen == c->rpos) { /* never said a word: just go */
                COUNT(srv, timeouts);
                conn_free(c);
                continue;
            }
            c->busy++;
            refuse(c, 408, "request head not received within http.header_timeout");
            c->busy--;
            conn_settle(c);
            break;
        case D_BODY:
            if (c->state == C_DISCARD) { /* its 413 is out already */
                COUNT(srv, timeouts);
                conn_free(c);
                continue;
            }
            c->busy++;
            refuse(c, 408, "request body not received within http.body_timeout");
            c->busy--;
            conn_settle(c);
            break;
        case D_IDLE:
            COUNT(srv, timeouts);
            conn_free(c);
            break;
        case D_DRAIN: start_linger(c); break;
        default: /* D_WRITE, D_LINGER */ conn_free(c); break;
        }
    }
    (void)fd;
    (void)what;
}

/* ---- the server ----------------------------------------------------------------- */

int
http_server_new(struct http_server **out, struct event_base *base, int fd,
                const struct rl_http_conf *limits, const int64_t *max_body,
                http_handler handler, void *arg, struct http_counters *counters, char **cause)
{
    struct http_server *srv = xcalloc(1, sizeof(*srv));
    struct timeval tv = {0, SWEEP_MS * 1000};

    srv->base = base;
    srv->limits = limits;
    srv->ka_ms = -1;
    srv->max_body = max_body;
    srv->handler = handler;
    srv->arg = arg;
    srv->counters = counters != NULL ? counters : &srv->own;
    if (listener_start(&srv->ls, base, fd, on_accept, srv, (size_t)limits->max_connections,
                       "http", cause) != RL_OK) {
        free(srv);
        return RL_ERR;
    }
    srv->sweep_ev = event_new(base, -1, EV_PERSIST, on_sweep, srv);
    event_add(srv->sweep_ev, &tv);
    *out = srv;
    return RL_OK;
}

void
http_server_set_conn_cap(struct http_server *srv, size_t cap)
{
    listener_set_cap(&srv->ls, cap);
}

void
http_server_set_limits(struct http_server *srv, const struct rl_http_conf *limits,
                       const int64_t *max_body)
{
    srv->limits = limits;
    srv->max_body = max_body;
}

void
http_server_drain(struct http_server *srv, void (*empty)(void *), void *arg)
{
    struct http_conn *c, *next;
    int64_t until = now_coarse_ms() + srv->limits->drain_idle_ms;

    srv->draining = 1;
    srv->empty = empty;
    srv->empty_arg = arg;
    /* the connections the kernel queued for us have sent requests too:
     * taken, they are drained like the others (a close would reset them) */
    listener_take_queued(&srv->ls);
    listener_stop(&srv->ls);
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        c->drain_until_ms = until;
        /* Between requests: conn_settle gives it http.drain_idle for the
         * next one (it may sit in the kernel's buffer already).  Anything
         * else is reading a request or owes answers: every request read
         * is answered, and the last one says close (dispatch,
         * http_respond). */
        if (c->state == C_HEAD && c->rlen == c->rpos && c->nq == 0 && c->wlen == c->woff &&
            !c->busy)
            conn_settle(c);
    }
    if (srv->ls.open == 0 && empty != NULL)
        empty(arg);
}

bool
http_server_draining(const struct http_server *srv)
{
    return srv->draining;
}

size_t
http_server_connections(const struct http_server *srv)
{
    return srv->ls.open;
}

void
http_server_free(struct http_server *srv)
{
    if (srv == NULL)
        return;
    srv->empty = NULL;
    while (srv->conns != NULL)
        conn_free(srv->conns);
    listener_stop(&srv->ls);
    if (srv->sweep_ev != NULL)
        event_free(srv->sweep_ev);
    while (srv->free_reqs != NULL) {
        struct http_req *r = srv->free_reqs;
        srv->free_reqs = r->next;
        free(r);
    }
    free(srv);
}

void *
http_req_arg(const struct http_req *r)
{
    return r->srv->arg;
}

const struct sockaddr_storage *
http_req_peer(const struct http_req *r)
{
    return r->conn != NULL ? &r->conn->peer : NULL;
}

void
http_req_peer_text(const struct http_req *r, char *buf, size_t size)
{
    const struct sockaddr_storage *ss = http_req_peer(r);

    snprintf(buf, size, "-");
    if (ss == NULL)
        return;
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, buf,
                  (socklen_t)size);
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, buf,
                  (socklen_t)size);
}
