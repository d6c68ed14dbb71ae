/*
 * grpc.c — see grpc.h.
 *
 * The cost model is http.c's: a batch of calls on a connection is one
 * read() and one write(), whatever the number of streams in it; read
 * interest stays registered; nothing is allocated per call once a
 * connection has served a few (calls come from a free list with their
 * timer, a message of up to INLINE_IN bytes lives in the call).  Answers
 * that come later (from Redis) are not written one by one: the first marks
 * the connection and an event at the end of the loop pass writes them all.
 *
 * Bounds: a stream's header list (rls.max_header_list) and message
 * (rls.max_message), streams per connection (SETTINGS, nghttp2 refuses the
 * rest), connections (rls.max_connections), idle time (rls.idle_timeout,
 * one sweep with a coarse clock), and output: past WBUF_HIGH unsent bytes
 * nothing more is read, so a client that does not read cannot make the
 * daemon queue answers, PING or SETTINGS acknowledgements without bound
 * (nghttp2 ends a session holding more than MAX_OUTBOUND_ACK of them).
 *
 * Request bytes: a message's buffer grows as its bytes arrive, never to
 * the length its prefix only declares, and past INLINE_IN it comes from
 * the daemon-wide pool of http.max_buffered (bufpool.h), shared with the
 * HTTP/1.1 listener; a message the pool cannot take is refused with
 * RESOURCE_EXHAUSTED.  The windows are no such bound and do not try to be:
 * a stream's is one message (max_message + 5), the connection's nghttp2's
 * 64 KiB, returned as bytes are read.  A window that held back what the
 * pool cannot take would let concurrent large messages stall each other
 * for good; the refusal frees the stream's bytes at once instead.
 *
 * A call outlives its stream when the handler still owes its answer: the
 * stream's close detaches it (conn = NULL) and grpc_respond() frees it.
 * Nothing is freed inside nghttp2's callbacks but calls that nobody owes;
 * a connection is freed only outside its own callbacks (busy).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bufpool.h"
#include "transport_conf.h"
#include "grpc.h"
#include "grpc_head.h"
#include "grpc_tls.h"
#include "listener.h"
#include "log.h"
#include "slab.h"
#include "util.h"

/* Unsent bytes past this: read no more until the client reads. */
#define WBUF_HIGH (64 * 1024)
/* Bytes read per readable event (TLS: records decrypted per event). */
#define READ_MAX (64 * 1024)
#define SWEEP_MS 100
/* max_connection_age: from the GOAWAY that names no stream to the one that
 * does (a round trip, with room) */
#define AGE_NOTICE_MS 1000
#define CALL_FREE_MAX 256
#define INLINE_IN 512
#define INLINE_OUT 256
#define PATH_MAX_LEN 128
/* gRPC's message prefix: a compressed flag and a 32-bit length. */
#define PREFIX_LEN 5
/* nghttp2's flood limits, said here rather than left to its defaults:
 * acknowledgements queued (PING, SETTINGS), entries per SETTINGS, frames
 * continuing one header block, and the rate of streams a client may reset
 * (CVE-2023-44487: a token bucket, GOAWAY when empty). */
#define MAX_OUTBOUND_ACK 1000
#define MAX_SETTINGS 32
#define MAX_CONTINUATIONS 8
#define RESET_BURST 1000
#define RESET_RATE 33
/* A header block past this many bytes is not a refusal but an attack: the
 * connection goes (nghttp2 decodes the whole block before we see its end). */
#define HEADER_HARD_MAX(limit) ((limit)*4 + 64 * 1024)

struct grpc_call {
    struct grpc_server *srv;
    struct grpc_conn *conn; /* NULL once its stream is closed */
    int32_t stream_id;
    unsigned owed : 1;     /* the handler has it and has not answered */
    unsigned replied : 1;  /* an answer went to nghttp2 */
    unsigned ended : 1;    /* the client's side of the stream ended */
    unsigned post : 1;     /* :method POST */
    unsigned grpc_ct : 1;  /* content-type application/grpc... */
    unsigned encoding : 1; /* grpc-encoding given, and not identity */
    unsigned has_reply : 1;
    unsigned stop : 1;      /* answered early: RST_STREAM after it, unless it ended */
    unsigned timer_on : 1;  /* deadline_ev is added (event_del takes libevent's lock) */
    unsigned malformed : 1; /* reset with PROTOCOL_ERROR: nothing more of it is read */
    int refusal;            /* decided before dispatch: a grpc-status, -1: none */
    const char *why;        /* its message (static) */
    size_t hdr_bytes;
    int64_t deadline_us;   /* 0: none */
    struct grpc_head head; /* HTTP's rules (grpc_head.h) */
    char path[PATH_MAX_LEN];
    size_t path_len; /* > PATH_MAX_LEN: too long to be one of ours */
    /* the request: [prefix][message], in_inline or malloc'd (then
     * in_cap - INLINE_IN of it taken from the pool) */
    uint8_t *in;
    size_t in_len, in_cap;
    /* the answer, framed: out_inline or malloc'd */
    uint8_t *out;
    size_t out_len, out_off;
    struct event *deadline_ev;
    struct grpc_call *prev, *next; /* the connection's calls, or the free list */
    uint8_t in_inline[INLINE_IN];
    uint8_t out_inline[INLINE_OUT];
};

/*
 * What a connection has to write, in one piece: nghttp2 hands out a frame
 * at a time, copied here, and the socket takes them in one write(), not
 * an evbuffer's chains and writev (what they cost: docs/BENCHMARKS.md,
 * "Measurements behind the code").  At most WBUF_HIGH and a frame; a buffer
 * grown past OBUF_KEEP is freed once written out (a stalled reader's does
 * not stay).
 */
struct obuf {
    uint8_t *p;
    size_t off, len, cap; /* unsent: p[off..len) */
};

#define OBUF_FIRST 4096
#define OBUF_KEEP (16 * 1024)

struct grpc_conn {
    struct grpc_server *srv;
    int fd;
    SSL *ssl;   /* NULL: h2c */
    int tls_ok; /* the handshake is done (or no TLS) */
    int tls_rw; /* TLS wants to write to go on reading (or the reverse) */
    struct event *rev, *wev, *flush_ev;
    nghttp2_session *h2;
    int reading, writing;
    int busy;            /* inside our own callbacks: not freed there */
    int dead;            /* free at the next safe point */
    int eof;             /* the client closed its side */
    int raw;             /* not HTTP/2: only out goes out, then close */
    int flush_pending;   /* flush_ev is active */
    int goaway;          /* we sent (queued) a GOAWAY */
    int32_t goaway_last; /* the last stream that GOAWAY names */
    size_t nopen;        /* streams open (calls attached) */
    size_t nowed;        /* calls the handler owes on this connection */
    int64_t active_ms;   /* the last sign of use, for idle_timeout */
    int64_t born_ms;     /* accepted, for max_connection_age */
    int64_t aged_ms;     /* told GOAWAY for its age (0: not), for the grace */
    int age_permille;    /* its share of max_connection_age: 900..1100 */
    int64_t wstall_ms;   /* since when unsent bytes wait (0: none) */
    struct obuf out;     /* frames not yet taken by the socket */
    struct grpc_call *calls;
    struct grpc_call *last; /* the call stream_call found last (NULL: none) */
    struct grpc_conn *prev, *next;
};

struct grpc_server {
    struct event_base *base;
    struct listener ls; /* ls.open: connections open */
    struct event *sweep_ev;
    const struct rl_rls_conf *limits;
    const int64_t *max_buffered; /* http.max_buffered: the pool's bound */
    grpc_handler handler;
    void *arg;
    struct grpc_counters *counters;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    struct grpc_conn *conns;
    int draining;
    void (*empty)(void *);
    void *empty_arg;
    struct grpc_call *free_calls;
    size_t nfree;
    struct slab slab;  /* nghttp2's memory (h2mem) */
    nghttp2_mem h2mem; /* every session's allocator, on slab */
    uint8_t rbuf[READ_MAX];
};

static void gconn_settle(struct grpc_conn *c);
static void on_io(evutil_socket_t fd, short what, void *arg);

#define COUNT(srv, field) __atomic_add_fetch(&(srv)->counters->field, 1, __ATOMIC_RELAXED)

const char *
grpc_status_name(enum grpc_status s)
{
    static const char *const names[GRPC_STATUS_COUNT] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    return (unsigned)s < GRPC_STATUS_COUNT ? names[s] : "UNKNOWN";
}

const char *
grpc_refusal_name(enum grpc_refusal r)
{
    static const char *const names[GRPC_REF_COUNT] = {
        "preface", "protocol", "tls", "method", "content_type", "header_list", "buffered"};
    return (unsigned)r < GRPC_REF_COUNT ? names[r] : "other";
}

/* ---- calls ------------------------------------------------------------------ */

static void on_deadline(evutil_socket_t fd, short what, void *arg);

static struct grpc_call *
call_get(struct grpc_server *srv)
{
    struct grpc_call *call = srv->free_calls;
    struct event *ev;

    if (call != NULL) {
        srv->free_calls = call->next;
        srv->nfree--;
        ev = call->deadline_ev;
    } else {
        call = xmalloc(sizeof(*call));
        ev = evtimer_new(srv->base, on_deadline, call);
    }
    /* everything before the inline buffers: they need no clearing */
    memset(call, 0, offsetof(struct grpc_call, in_inline));
    call->srv = srv;
    call->deadline_ev = ev;
    call->refusal = -1;
    grpc_head_init(&call->head);
    call->in = call->in_inline;
    call->in_cap = INLINE_IN;
    call->out = call->out_inline;
    return call;
}

/* A message's buffer back to the pool (its bytes are not needed any more). */
static void
call_drop_input(struct grpc_call *call)
{
    if (call->in == call->in_inline)
        return;
    free(call->in);
    bufpool_give((int64_t)(call->in_cap - INLINE_IN));
    call->in = call->in_inline;
    call->in_cap = INLINE_IN;
}

/* Most calls have no deadline: no event_del (a lock and a search) for them. */
static void
call_timer_stop(struct grpc_call *call)
{
    if (call->timer_on) {
        evtimer_del(call->deadline_ev);
        call->timer_on = 0;
    }
}

static void
call_put(struct grpc_call *call)
{
    struct grpc_server *srv = call->srv;

    call_timer_stop(call);
    call_drop_input(call);
    if (call->out != call->out_inline)
        free(call->out);
    if (srv->nfree >= CALL_FREE_MAX) {
        event_free(call->deadline_ev);
        free(call);
        return;
    }
    call->next = srv->free_calls;
    srv->free_calls = call;
    srv->nfree++;
}

static void
call_link(struct grpc_conn *c, struct grpc_call *call)
{
    call->conn = c;
    call->prev = NULL;
    call->next = c->calls;
    if (c->calls != NULL)
        c->calls->prev = call;
    c->calls = call;
    c->nopen++;
}

/* The stream is gone: the call stays only while its answer is owed. */
static void
call_detach(struct grpc_call *call)
{
    struct grpc_conn *c = call->conn;

    if (call->prev != NULL)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next != NULL)
        call->next->prev = call->prev;
    c->nopen--;
    if (c->last == call)
        c->last = NULL;
    if (call->owed)
        c->nowed--;
    call->conn = NULL;
    call->prev = call->next = NULL;
    call_timer_stop(call);
    if (!call->owed)
        call_put(call);
}

/* ---- answering ----------------------------------------------------------------- */

/* Written at the end of this loop pass, with whatever else is answered in
 * it: one write for a batch of answers from one Redis reply. */
static void
schedule_flush(struct grpc_conn *c)
{
    if (!c->flush_pending && !c->busy) {
        c->flush_pending = 1;
        event_active(c->flush_ev, EV_WRITE, 0);
    }
}

/* grpc-message is percent-encoded: bytes outside printable ASCII and '%'. */
static void
pct_encode(const char *in, char *out, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (; *in != '\0' && o + 4 < size; in++) {
        unsigned char ch = (unsigned char)*in;
        if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
}

#define NV(n, v) \
    { \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, \
            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE \
    }

static const char *const status_text[GRPC_STATUS_COUNT] = {"0",  "1",  "2",  "3",  "4",  "5",
                                                           "6",  "7",  "8",  "9",  "10", "11",
                                                           "12", "13", "14", "15", "16"};

static ssize_t
read_answer(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
            uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
    struct grpc_call *call = source->ptr;
    size_t n = call->out_len - call->out_off;
    nghttp2_nv ok[] = {NV("grpc-status", "0")};

    if (n > length)
        n = length;
    memcpy(buf, call->out + call->out_off, n);
    call->out_off += n;
    if (call->out_off == call->out_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, stream_id, ok, RL_ARRAY_LEN(ok)) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    (void)user_data;
    return (ssize_t)n;
}

/*
 * The answer, to nghttp2: the message and trailers, or trailers only (a
 * status other than OK, or http_status for a request that is not gRPC).
 */
static void
submit(struct grpc_call *call, int http_status, enum grpc_status status, const char *msg)
{
    struct grpc_conn *c = call->conn;
    nghttp2_session *h2 = c->h2;
    char enc[256];
    nghttp2_nv hd[5] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    size_t n = 2;

    call->replied = 1;
    call_timer_stop(call);
    __atomic_add_fetch(&c->srv->counters->status[status], 1, __ATOMIC_RELAXED);
    c->active_ms = now_coarse_ms();
    if (status == GRPC_OK && call->has_reply) {
        nghttp2_data_provider prd;
        prd.source.ptr = call;
        prd.read_callback = read_answer;
        if (nghttp2_submit_response(h2, call->stream_id, hd, n, &prd) != 0)
            c->dead = 1;
        return;
    }
    if (http_status == 405)
        hd[0].value = (uint8_t *)"405", hd[0].valuelen = 3;
    else if (http_status == 415)
        hd[0].value = (uint8_t *)"415", hd[0].valuelen = 3;
    hd[n].name = (uint8_t *)"grpc-status";
    hd[n].namelen = 11;
    hd[n].value = (uint8_t *)status_text[status];
    hd[n].valuelen = strlen(status_text[status]);
    hd[n++].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    if (msg != NULL && *msg != '\0') {
        pct_encode(msg, enc, sizeof(enc));
        hd[n].name = (uint8_t *)"grpc-message";
        hd[n].namelen = 12;
        hd[n].value = (uint8_t *)enc; /* copied by nghttp2 */
        hd[n].valuelen = strlen(enc);
        hd[n++].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME;
    }
    if (http_status == 405) {
        hd[n].name = (uint8_t *)"allow";
        hd[n].namelen = 5;
        hd[n].value = (uint8_t *)"POST";
        hd[n].valuelen = 4;
        hd[n++].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    }
    if (nghttp2_submit_response(h2, call->stream_id, hd, n, NULL) != 0) {
        c->dead = 1;
        return;
    }
}

/* The transport answers a request itself (before, or instead of, the
 * handler). */
static void
call_refuse(struct grpc_call *call, int http_status, enum grpc_status status, const char *why)
{
    if (call->replied)
        return;
    call->refusal = status;
    call->why = why;
    call_drop_input(call); /* what follows is dropped too (take_data) */
    submit(call, http_status, status, why);
}

uint8_t *
grpc_reply_buf(struct grpc_call *call, size_t len)
{
    const struct rl_rls_conf *lim = call->srv->limits;
    size_t need = PREFIX_LEN + len;

    if ((int64_t)len > lim->max_message)
        return NULL;
    if (need > INLINE_OUT) {
        if (call->out != call->out_inline)
            free(call->out);
        call->out = xmalloc(need);
    }
    call->out[0] = 0; /* not compressed */
    call->out[1] = (uint8_t)(len >> 24);
    call->out[2] = (uint8_t)(len >> 16);
    call->out[3] = (uint8_t)(len >> 8);
    call->out[4] = (uint8_t)len;
    call->out_len = need;
    call->out_off = 0;
    call->has_reply = 1;
    return call->out + PREFIX_LEN;
}

void
grpc_respond(struct grpc_call *call, enum grpc_status status, const char *message)
{
    struct grpc_conn *c = call->conn;

    call->owed = 0;
    if (c == NULL) { /* its stream is gone: nobody to tell */
        call_put(call);
        return;
    }
    c->nowed--;
    if (!call->replied && !c->dead)
        submit(call, 200, status, message);
    /* the stream's close frees the call, once its answer is out */
    schedule_flush(c);
}

void *
grpc_call_arg(const struct grpc_call *call)
{
    return call->srv->arg;
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct grpc_call *call = arg;
    struct grpc_conn *c = call->conn;

    call->timer_on = 0; /* it fired: no longer added */
    if (c == NULL || call->replied)
        return;
    call_refuse(call, 200, GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed");
    schedule_flush(c);
    (void)fd;
    (void)what;
}

/* ---- one request ---------------------------------------------------------------- */

/* grpc-timeout: 1 to 8 digits and a unit; rounded up to whole ms.  -1 when
 * malformed. */
static int64_t
parse_timeout(const uint8_t *v, size_t n)
{
    int64_t x = 0;

    if (n < 2 || n > 9)
        return -1;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H': return x * 3600 * 1000;
    case 'M': return x * 60 * 1000;
    case 'S': return x * 1000;
    case 'm': return x;
    case 'u': return (x + 999) / 1000;
    case 'n': return (x + 999999) / 1000000;
    default: return -1;
    }
}

static bool
name_is(const uint8_t *name, size_t len, const char *want, size_t wlen)
{
    return len == wlen && memcmp(name, want, wlen) == 0;
}

/* "application/grpc", or it with a subtype ("+proto") or parameters. */
static bool
grpc_content_type(const uint8_t *v, size_t n)
{
    return n >= 16 && memcmp(v, "application/grpc", 16) == 0 &&
           (n == 16 || v[16] == '+' || v[16] == ';');
}

static void
take_header(struct grpc_call *call, const uint8_t *name, size_t nlen, const uint8_t *value,
            size_t vlen)
{
    int64_t ms;

    if (name_is(name, nlen, ":method", 7)) {
        call->post = vlen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (name_is(name, nlen, ":path", 5)) {
        call->path_len = vlen;
        if (vlen <= PATH_MAX_LEN)
            memcpy(call->path, value, vlen);
    } else if (name_is(name, nlen, "content-type", 12)) {
        call->grpc_ct = grpc_content_type(value, vlen);
    } else if (name_is(name, nlen, "grpc-encoding", 13)) {
        call->encoding = !(vlen == 8 && memcmp(value, "identity", 8) == 0);
    } else if (name_is(name, nlen, "grpc-timeout", 12)) {
        if ((ms = parse_timeout(value, vlen)) < 0)
            call->refusal = GRPC_INTERNAL, call->why = "grpc-timeout: malformed";
        else
            call->deadline_us = now_monotonic_us() + ms * 1000;
    }
}

/* The request's head is in: refuse what is not a gRPC call we can take,
 * start its deadline. */
static void
head_done(struct grpc_call *call)
{
    if (call->refusal == GRPC_RESOURCE_EXHAUSTED) {
        COUNT(call->srv, refused[GRPC_REF_HEADERS]);
        call_refuse(call, 200, GRPC_RESOURCE_EXHAUSTED, call->why);
    } else if (!call->post) {
        COUNT(call->srv, refused[GRPC_REF_METHOD]);
        call_refuse(call, 405, GRPC_UNIMPLEMENTED, "method: gRPC calls are POST");
    } else if (!call->grpc_ct) {
        COUNT(call->srv, refused[GRPC_REF_CONTENT_TYPE]);
        call_refuse(call, 415, GRPC_INTERNAL, "content-type: expected application/grpc");
    } else if (call->refusal >= 0) {
        call_refuse(call, 200, (enum grpc_status)call->refusal, call->why);
    } else if (call->deadline_us != 0) {
        int64_t left = call->deadline_us - now_monotonic_us();
        struct timeval tv = {left / 1000000, left % 1000000};
        if (left <= 0) {
            call_refuse(call, 200, GRPC_DEADLINE_EXCEEDED,
                        "the deadline (grpc-timeout) passed");
            return;
        }
        evtimer_add(call->deadline_ev, &tv);
        call->timer_on = 1;
    }
}

static uint32_t
msg_len(const uint8_t *p)
{
    return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
}

/*
 * Room for `need` bytes of a message of `most` in all (prefix included):
 * the buffer grows as they arrive, doubling up to `most`, and what it takes
 * past INLINE_IN comes from the pool.  RL_ERR (nothing changed) when the
 * pool is full.
 */
static int
grow_input(struct grpc_call *call, size_t need, size_t most)
{
    size_t cap = bufpool_next_cap(call->in_cap, need, most);

    if (bufpool_take((int64_t)(cap - call->in_cap), *call->srv->max_buffered) != RL_OK)
        return RL_ERR;
    if (call->in == call->in_inline) {
        call->in = xmalloc(cap);
        memcpy(call->in, call->in_inline, call->in_len);
    } else {
        call->in = xrealloc(call->in, cap);
    }
    call->in_cap = cap;
    return RL_OK;
}

/* Request bytes: at most one message of at most max_message. */
static void
take_data(struct grpc_call *call, const uint8_t *data, size_t len)
{
    const struct rl_rls_conf *lim = call->srv->limits;
    size_t want;

    if (call->replied)
        return; /* refused already: what follows is dropped */
    if (call->in_len < PREFIX_LEN) {
        size_t n = PREFIX_LEN - call->in_len < len ? PREFIX_LEN - call->in_len : len;
        memcpy(call->in + call->in_len, data, n);
        call->in_len += n;
        data += n;
        len -= n;
        if (call->in_len < PREFIX_LEN)
            return;
        if (call->in[0] > 1) {
            call_refuse(call, 200, GRPC_INTERNAL,
                        "message: the compressed flag is neither 0 nor 1");
            return;
        }
        if ((int64_t)msg_len(call->in) > lim->max_message) {
            call_refuse(call, 200, GRPC_RESOURCE_EXHAUSTED,
                        "message: larger than rls.max_message");
            /* no use sending the rest: told to stop once the answer is out
             * (on_frame_send; nghttp2 would send an RST_STREAM submitted
             * now before the HEADERS).  Other refusals read the rest and
             * drop it: curl, for one, takes such a reset for an error. */
            call->stop = 1;
            return;
        }
    }
    want = PREFIX_LEN + msg_len(call->in);
    if (len > want - call->in_len) {
        call_refuse(call, 200, GRPC_INTERNAL, "a unary call takes one message");
        return;
    }
    if (call->in_len + len > call->in_cap &&
        grow_input(call, call->in_len + len, want) != RL_OK) {
        COUNT(call->srv, refused[GRPC_REF_BUFFERED]);
        bufpool_refused("rls", *call->srv->max_buffered);
        call_refuse(call, 200, GRPC_RESOURCE_EXHAUSTED,
                    "busy: the daemon buffers http.max_buffered request bytes already");
        call->stop = 1; /* as for a message too large: stop sending */
        return;
    }
    memcpy(call->in + call->in_len, data, len);
    call->in_len += len;
}

/* The client's side ended: a whole request goes to the handler. */
static void
request_done(struct grpc_call *call)
{
    struct grpc_server *srv = call->srv;
    struct grpc_conn *c = call->conn;
    struct grpc_request rq;
    uint8_t *heap;
    size_t heap_cap;

    if (call->replied)
        return;
    if (call->in_len < PREFIX_LEN || call->in_len != PREFIX_LEN + msg_len(call->in)) {
        call_refuse(call, 200, GRPC_INTERNAL,
                    call->in_len == 0 ? "no message in the request"
                                      : "the request ended inside its message");
        return;
    }
    if (call->in[0] == 1) {
        /* gRPC over HTTP/2: a compressed message says its encoding */
        call_refuse(call, 200, call->encoding ? GRPC_UNIMPLEMENTED : GRPC_INTERNAL,
                    call->encoding ? "grpc-encoding: only identity is accepted"
                                   : "message: compressed without grpc-encoding");
        return;
    }
    rq.path = call->path;
    rq.path_len = call->path_len <= PATH_MAX_LEN ? call->path_len : 0;
    rq.msg = call->in + PREFIX_LEN;
    rq.msg_len = call->in_len - PREFIX_LEN;
    rq.timeout_ms = 0;
    if (call->deadline_us != 0) {
        int64_t left = call->deadline_us - now_monotonic_us();
        rq.timeout_ms = left > 0 ? (left + 999) / 1000 : 1;
    }
    /* a large request's buffer goes when the handler is done with it */
    heap = call->in != call->in_inline ? call->in : NULL;
    heap_cap = call->in_cap;
    call->in = call->in_inline;
    call->in_cap = INLINE_IN;
    call->owed = 1;
    c->nowed++;
    c->active_ms = now_coarse_ms();
    srv->handler(call, &rq, srv->arg);
    if (heap != NULL) {
        free(heap);
        bufpool_give((int64_t)(heap_cap - INLINE_IN));
    }
}

/* ---- nghttp2's callbacks ------------------------------------------------------------ */

/* The call of a stream.  nghttp2 finds a stream's data by a hash lookup;
 * the callbacks of one stream come in a row (a header block is one per
 * header), so the last answer is kept (a stream id is never reused, and
 * call_detach forgets it). */
static struct grpc_call *
stream_call(struct grpc_conn *c, int32_t stream_id)
{
    struct grpc_call *call = c->last;

    if (call != NULL && call->stream_id == stream_id)
        return call;
    call = nghttp2_session_get_stream_user_data(c->h2, stream_id);
    c->last = call;
    return call;
}

/*
 * A request HTTP/2 makes malformed (grpc_head.h): its stream reset with
 * PROTOCOL_ERROR, as nghttp2's HTTP messaging did; nothing more of it goes to
 * the call (nghttp2 takes no frame of a stream it is resetting), which its
 * close frees.
 */
static int
malformed(struct grpc_conn *c, struct grpc_call *call)
{
    call->malformed = 1;
    return nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, call->stream_id,
                                     NGHTTP2_PROTOCOL_ERROR) == 0
               ? RL_OK
               : RL_ERR;
}

static int
on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
    struct grpc_conn *c = user_data;
    struct grpc_call *call;

    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    /* A stream past the last one our GOAWAY names, read while that GOAWAY
     * waited behind unsent frames: nghttp2 takes new streams until the frame
     * is sent, then closes them, and a client sends such a call again (RFC
     * 9113 6.8).  Refused before it is counted, so that it counts once. */
    if (c->goaway && frame->hd.stream_id > c->goaway_last)
        return nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                         NGHTTP2_REFUSED_STREAM) == 0
                   ? 0
                   : NGHTTP2_ERR_CALLBACK_FAILURE;
    call = call_get(c->srv);
    call->stream_id = frame->hd.stream_id;
    call_link(c, call);
    nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, call);
    c->last = call; /* its headers come next */
    COUNT(c->srv, calls);
    c->active_ms = now_coarse_ms();
    return 0;
}

static int
on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *user_data)
{
    struct grpc_conn *c = user_data;
    struct grpc_call *call = stream_call(c, frame->hd.stream_id);
    size_t max = (size_t)c->srv->limits->max_header_list;

    if (call == NULL || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (grpc_head_field(&call->head, name, nlen, value, vlen,
                        frame->headers.cat != NGHTTP2_HCAT_REQUEST) != RL_OK)
        /* nghttp2 then reads the rest of the block without us */
        return malformed(c, call) == RL_OK ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
                                           : NGHTTP2_ERR_CALLBACK_FAILURE;
    /* RFC 9113 6.5.2: a field's size is its name, its value and 32 */
    call->hdr_bytes += nlen + vlen + 32;
    if (call->hdr_bytes > HEADER_HARD_MAX(max))
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* counted as a protocol error */
    if (call->hdr_bytes > max) {
        call->refusal = GRPC_RESOURCE_EXHAUSTED;
        call->why = "headers: larger than rls.max_header_list";
        return 0;
    }
    if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        take_header(call, name, nlen, value, vlen);
    (void)h2;
    (void)flags;
    return 0;
}

static int
on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data,
              size_t len, void *user_data)
{
    struct grpc_call *call = stream_call(user_data, stream_id);

    if (call == NULL || call->malformed)
        return 0;
    if (grpc_head_data(&call->head, len) != RL_OK) /* past its content-length */
        return malformed(user_data, call) == RL_OK ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
    if (flags & NGHTTP2_FLAG_END_STREAM)
        call->ended = 1; /* a refusal needs no RST_STREAM then */
    take_data(call, data, len);
    (void)h2;
    return 0;
}

static int
on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
    struct grpc_call *call;

    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    if ((call = stream_call(user_data, frame->hd.stream_id)) == NULL || call->malformed)
        return 0;
    /* the block's own rules (its pseudo-headers; trailers end the stream),
     * and a content-length the DATA did not match */
    if ((frame->hd.type == NGHTTP2_HEADERS &&
         (frame->headers.cat == NGHTTP2_HCAT_REQUEST
              ? grpc_head_end(&call->head) != RL_OK
              : !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))) ||
        ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && grpc_head_ended(&call->head) != RL_OK))
        return malformed(user_data, call) == RL_OK ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        call->ended = 1; /* a refusal needs no RST_STREAM then */
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        head_done(call);
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        request_done(call);
    (void)h2;
    return 0;
}

static int
on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code, void *user_data)
{
    struct grpc_conn *c = user_data;
    struct grpc_call *call = stream_call(user_data, stream_id);

    if (call == NULL)
        return 0;
    if (!call->replied)
        COUNT(c->srv, cancelled);
    /* no set_stream_user_data(NULL): the stream is destroyed after this
     * callback (no closed streams are kept: make_options), and an id is
     * never reused */
    call_detach(call);
    (void)h2;
    (void)error_code;
    return 0;
}

static int
on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
    struct grpc_conn *c = user_data;
    struct grpc_call *call;

    /* nghttp2 ends a session that broke the protocol (a flood, a bad
     * frame, too many resets) with a GOAWAY carrying the error */
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR)
        COUNT(c->srv, refused[GRPC_REF_PROTOCOL]);
    /* an answer given while the request was still coming in: RFC 9113
     * 8.1, RST_STREAM NO_ERROR after it so the client stops sending */
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        (call = stream_call(c, frame->hd.stream_id)) != NULL && call->stop && !call->ended)
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

static nghttp2_session_callbacks *
make_callbacks(void)
{
    nghttp2_session_callbacks *cbs;

    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    return cbs;
}

/*
 * nghttp2's memory: a call costs it a stream, an item per frame it sends
 * (the answer's HEADERS, DATA and trailers) and a copy of each header list,
 * some six blocks of 40 to 224 bytes, each a malloc and a free.  The
 * worker's sessions take them from its slab instead (one thread: the
 * server's); SLAB_KEEP bounds what it keeps.
 */
#define SLAB_KEEP 512

static void *
h2_malloc(size_t size, void *mem_user_data)
{
    return slab_alloc(mem_user_data, size);
}

static void
h2_free(void *ptr, void *mem_user_data)
{
    slab_release(mem_user_data, ptr);
}

static void *
h2_calloc(size_t nmemb, size_t size, void *mem_user_data)
{
    void *p;

    if (size != 0 && nmemb > SIZE_MAX / size)
        return NULL;
    p = slab_alloc(mem_user_data, nmemb * size);
    memset(p, 0, nmemb * size);
    return p;
}

static void *
h2_realloc(void *ptr, size_t size, void *mem_user_data)
{
    return slab_realloc(mem_user_data, ptr, size);
}

static nghttp2_option *
make_options(void)
{
    nghttp2_option *opt;

    if (nghttp2_option_new(&opt) != 0)
        return NULL;
    nghttp2_option_set_max_outbound_ack(opt, MAX_OUTBOUND_ACK);
    nghttp2_option_set_max_settings(opt, MAX_SETTINGS);
    nghttp2_option_set_max_continuations(opt, MAX_CONTINUATIONS);
    nghttp2_option_set_stream_reset_rate_limit(opt, RESET_BURST, RESET_RATE);
    /* no priorities: closed streams need not be kept for their tree */
    nghttp2_option_set_no_closed_streams(opt, 1);
    /* HTTP's rules for a request are grpc_head.c's */
    nghttp2_option_set_no_http_messaging(opt, 1);
    return opt;
}

/* ---- reading and writing --------------------------------------------------------------- */

static void
want(struct grpc_conn *c, int rd, int wr)
{
    if (rd && !c->reading) {
        event_add(c->rev, NULL);
        c->reading = 1;
    } else if (!rd && c->reading) {
        event_del(c->rev);
        c->reading = 0;
    }
    if (wr && !c->writing) {
        event_add(c->wev, NULL);
        c->writing = 1;
    } else if (!wr && c->writing) {
        event_del(c->wev);
        c->writing = 0;
    }
}

/* Whether TLS's last call only has to wait (for the direction tls_rw then
 * names); else *e is the SSL_ERROR_* that ended it. */
static bool
tls_waits(struct grpc_conn *c, int rc, int *e)
{
    *e = SSL_get_error(c->ssl, rc);
    if (*e == SSL_ERROR_WANT_READ || *e == SSL_ERROR_WANT_WRITE) {
        c->tls_rw = *e == SSL_ERROR_WANT_WRITE;
        return true;
    }
    ERR_clear_error();
    return false;
}

/* Bytes from the socket (plain or TLS) into *got, 0 when none for now;
 * false at the end (eof) or an error (dead). */
static bool
io_read(struct grpc_conn *c, uint8_t *buf, size_t n, size_t *got)
{
    bool end;
    int e;

    *got = 0;
    if (c->ssl == NULL) {
        ssize_t r = read(c->fd, buf, n);
        if (r > 0)
            *got = (size_t)r;
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
            return true;
        end = r == 0;
    } else {
        int rc = SSL_read(c->ssl, buf, (int)n);
        if (rc > 0)
            *got = (size_t)rc;
        if (rc > 0 || tls_waits(c, rc, &e))
            return true;
        end = e == SSL_ERROR_ZERO_RETURN;
    }
    if (end)
        c->eof = 1;
    else
        c->dead = 1;
    return false;
}

static size_t
pending(const struct grpc_conn *c)
{
    return c->out.len - c->out.off;
}

static void
out_add(struct grpc_conn *c, const void *data, size_t n)
{
    struct obuf *b = &c->out;

    if (b->len + n > b->cap) {
        if (b->off > 0) { /* what was written makes room first */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            size_t cap = b->cap > 0 ? b->cap : OBUF_FIRST;
            while (cap < b->len + n)
                cap *= 2;
            b->p = xrealloc(b->p, cap);
            b->cap = cap;
        }
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

/* w bytes went out. */
static void
out_drain(struct grpc_conn *c, size_t w)
{
    struct obuf *b = &c->out;

    b->off += w;
    if (b->off < b->len)
        return;
    b->off = b->len = 0;
    if (b->cap > OBUF_KEEP) {
        free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

/* Write what is pending; the rest waits for the socket. */
static void
gconn_flush(struct grpc_conn *c)
{
    while (!c->dead && pending(c) > 0) {
        size_t n = pending(c);
        ssize_t w;

        if (c->ssl != NULL) {
            int rc = SSL_write(c->ssl, c->out.p + c->out.off,
                               (int)(n > INT32_MAX ? INT32_MAX : n));
            if (rc <= 0) {
                int e;

                if (!tls_waits(c, rc, &e))
                    c->dead = 1;
                return;
            }
            w = rc;
        } else if ((w = write(c->fd, c->out.p + c->out.off, n)) < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                c->dead = 1; /* the peer is gone: nothing to tell it */
            return;
        }
        out_drain(c, (size_t)w);
        c->wstall_ms = 0;
    }
}

/*
 * nghttp2's frames into out, as far as back-pressure allows: true when it
 * stopped there (more may follow once the socket takes some).  Asked first
 * whether nghttp2 has anything: a mem_send that finds nothing is dearer,
 * and most passes (every read of a request) have nothing (docs/BENCHMARKS.md,
 * "Measurements behind the code").
 */
static bool
pump(struct grpc_conn *c)
{
    bool ask = true;

    while (!c->dead && !c->raw) {
        const uint8_t *p;
        ssize_t n;

        if (pending(c) >= WBUF_HIGH)
            return true;
        /* after a frame nghttp2 always wants to write (the frame's own
         * bookkeeping is left for the next mem_send): no need to ask,
         * unless that frame was a GOAWAY, which may end the session's
         * writing (want_write says so; mem_send would not) */
        if (ask && !nghttp2_session_want_write(c->h2))
            return false;
        if ((n = nghttp2_session_mem_send(c->h2, &p)) < 0) {
            c->dead = 1;
            return false;
        }
        if (n == 0)
            return false;
        /* mem_send gives one frame: its type is its fourth byte */
        ask = n < 9 || p[3] == NGHTTP2_GOAWAY;
        out_add(c, p, (size_t)n);
    }
    return false;
}

/* ---- the connection's life -------------------------------------------------------------- */

static void
gconn_free(struct grpc_conn *c)
{
    struct grpc_server *srv = c->srv;

    while (c->calls != NULL)
        call_detach(c->calls); /* owed ones are answered into nothing */
    if (c->h2 != NULL)
        nghttp2_session_del(c->h2);
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    event_free(c->rev);
    event_free(c->wev);
    event_free(c->flush_ev);
    free(c->out.p);
    close(c->fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    listener_closed(&srv->ls);
    __atomic_sub_fetch(&srv->counters->open, 1, __ATOMIC_RELAXED);
    /* its session's memory goes too: once the pool is empty, a trim */
    bufpool_freed((int64_t)sizeof(*c));
    free(c);
    if (srv->draining && srv->ls.open == 0 && srv->empty != NULL)
        srv->empty(srv->empty_arg);
}

/* An answer for an HTTP/1.x client that found the gRPC port; then close. */
static void
answer_http1(struct grpc_conn *c, const uint8_t *p, size_t n)
{
    static const char body[] = "rls.listen speaks gRPC over HTTP/2 (h2c or TLS with ALPN h2) "
                               "only; HTTP/1.1 is served on listen\n";
    char head[160];
    size_t i = 0;

    /* a method token and a space: a request line (but HTTP/2's own "PRI":
     * a preface gone wrong gets a close) */
    while (i < n && i < 16 && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    c->raw = 1;
    if (i == 0 || i >= n || p[i] != ' ' || (i == 3 && memcmp(p, "PRI", 3) == 0))
        return;
    snprintf(head, sizeof(head),
             "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Type: text/plain\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
             sizeof(body) - 1);
    out_add(c, head, strlen(head));
    out_add(c, body, sizeof(body) - 1);
}

/* Bytes read: to nghttp2 (its callbacks run in here). */
static void
feed(struct grpc_conn *c, const uint8_t *p, size_t n)
{
    ssize_t rv;

    c->busy++;
    rv = nghttp2_session_mem_recv(c->h2, p, n);
    c->busy--;
    if (rv >= 0)
        return;
    if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
        COUNT(c->srv, refused[GRPC_REF_PREFACE]);
        answer_http1(c, p, n);
        return;
    }
    /* a flood, a callback's refusal: the session is over; the GOAWAY
     * nghttp2 queued goes out if the socket takes it */
    if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_CALLBACK_FAILURE)
        COUNT(c->srv, refused[GRPC_REF_PROTOCOL]);
    nghttp2_session_terminate_session(c->h2, NGHTTP2_PROTOCOL_ERROR);
    c->busy++;
    pump(c);
    c->busy--;
    c->raw = 1; /* what is in out, then close */
}

static void
read_some(struct grpc_conn *c)
{
    struct grpc_server *srv = c->srv;
    size_t got = 0;

    /* TLS hands out a record per call: drain what it holds, up to READ_MAX
     * per event; plain TCP is one read */
    do {
        size_t n;

        if (!io_read(c, srv->rbuf, sizeof(srv->rbuf), &n) || n == 0)
            return;
        got += n;
        feed(c, srv->rbuf, n);
    } while (c->ssl != NULL && !c->raw && !c->dead && got < READ_MAX &&
             pending(c) < WBUF_HIGH);
}

/* The TLS handshake, record by record (an incremental reader, rl.h): done,
 * more to come, or failed (the connection dead). */
static enum rl_parse
handshake(struct grpc_conn *c)
{
    int rc = SSL_do_handshake(c->ssl), e;

    if (rc == 1) {
        c->tls_ok = 1;
        c->tls_rw = 0;
        return RL_PARSE_DONE;
    }
    if (tls_waits(c, rc, &e))
        return RL_PARSE_MORE;
    COUNT(c->srv, refused[GRPC_REF_TLS]);
    log_debug(
        LOG_MSG("rls TLS handshake failed"),
        LOG_Q("reason", SSL_get_verify_result(c->ssl) != X509_V_OK
                            ? X509_verify_cert_error_string(SSL_get_verify_result(c->ssl))
                            : "handshake"));
    c->dead = 1;
    return RL_PARSE_ERR;
}

/*
 * After anything happened: frames out, bytes written, reading paused or
 * resumed (back-pressure), the connection closed when it is done.  c may be
 * gone when this returns.
 */
static void
gconn_settle(struct grpc_conn *c)
{
    int rd, wr, done;

    if (c->busy)
        return;
    if (!c->dead && c->tls_ok) {
        bool full = pump(c);
        gconn_flush(c);
        if (full) { /* back-pressure stopped it: more may fit now */
            pump(c);
            gconn_flush(c);
        }
    }
    if (c->dead) {
        gconn_free(c);
        return;
    }
    if (pending(c) > 0 && c->wstall_ms == 0)
        c->wstall_ms = now_coarse_ms();
    /* done: nghttp2 has nothing to read or send (GOAWAY both ways, or
     * ours and no stream left), or not HTTP/2, or the client left */
    done = c->tls_ok && pending(c) == 0 &&
           (c->raw || (c->eof && c->nowed == 0) ||
            (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)));
    if (done) {
        gconn_free(c);
        return;
    }
    if (!c->tls_ok) { /* the handshake: what TLS asks for */
        rd = !c->tls_rw;
        wr = c->tls_rw;
    } else {
        rd = !c->eof && !c->raw && pending(c) < WBUF_HIGH;
        /* a TLS read may need the socket writable first */
        wr = pending(c) > 0 || (c->ssl != NULL && c->tls_rw);
    }
    want(c, rd, wr);
}

static void
on_io(evutil_socket_t fd, short what, void *arg)
{
    struct grpc_conn *c = arg;

    if (!c->tls_ok) {
        if (handshake(c) != RL_PARSE_DONE) {
            gconn_settle(c);
            return;
        }
        what |= EV_READ; /* the client's first records may be in already */
    }
    if (c->tls_rw) { /* TLS waited for the other direction: both go on */
        what |= EV_READ | EV_WRITE;
        c->tls_rw = 0;
    }
    if (what & EV_WRITE)
        gconn_flush(c);
    if ((what & EV_READ) && !c->raw && !c->dead && !c->eof)
        read_some(c);
    gconn_settle(c);
    (void)fd;
}

static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct grpc_conn *c = arg;

    c->flush_pending = 0;
    gconn_settle(c);
    (void)fd;
    (void)what;
}

/* Our SETTINGS, the first frame of the session. */
static int
start_session(struct grpc_conn *c)
{
    const struct rl_rls_conf *lim = c->srv->limits;
    int64_t window = lim->max_message + PREFIX_LEN;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)lim->max_concurrent_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)lim->max_header_list},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
         (uint32_t)(window > NGHTTP2_INITIAL_WINDOW_SIZE ? window
                                                         : NGHTTP2_INITIAL_WINDOW_SIZE)},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };

    if (nghttp2_session_server_new3(&c->h2, c->srv->cbs, c, c->srv->opt, &c->srv->h2mem) != 0)
        return RL_ERR;
    return nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, RL_ARRAY_LEN(iv)) == 0
               ? RL_OK
               : RL_ERR;
}

static void
on_grpc_accept(evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct grpc_server *srv = arg;
    struct grpc_conn *c = xcalloc(1, sizeof(*c));
    int tls_on = 0;

    c->srv = srv;
    c->fd = fd;
    c->active_ms = c->born_ms = now_coarse_ms();
    /* grpc-go's +/- 10%: connections accepted together do not all go at
     * once (random() takes its own lock: any worker may call it) */
    c->age_permille = 900 + (int)(random() % 201);
    c->ssl = grpc_tls_session(&tls_on);
    c->tls_ok = c->ssl == NULL;
    c->rev = event_new(srv->base, fd, EV_READ | EV_PERSIST, on_io, c);
    c->wev = event_new(srv->base, fd, EV_WRITE | EV_PERSIST, on_io, c);
    c->flush_ev = event_new(srv->base, -1, 0, on_flush, c);
    c->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = c;
    srv->conns = c;
    COUNT(srv, accepted);
    COUNT(srv, open);
    if ((tls_on && c->ssl == NULL) || (c->ssl != NULL && SSL_set_fd(c->ssl, fd) != 1) ||
        start_session(c) != RL_OK) {
        log_warn(LOG_MSG("rls: cannot set up a connection"), LOG_I("tls", tls_on));
        gconn_free(c);
        return;
    }
    /* our SETTINGS wait for the client's preface: an HTTP/1.x client
     * must read an HTTP/1.x answer, not a frame (answer_http1) */
    if (c->ssl != NULL)
        SSL_set_accept_state(c->ssl);
    want(c, 1, 0);
    (void)sa;
    (void)salen;
}

/* Ask the connection to end: GOAWAY naming the last stream read; it closes
 * once those are answered. */
static void
conn_goaway(struct grpc_conn *c)
{
    if (c->goaway || c->raw)
        return;
    c->goaway = 1;
    c->goaway_last = nghttp2_session_get_last_proc_stream_id(c->h2);
    if (nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, c->goaway_last, NGHTTP2_NO_ERROR, NULL,
                              0) != 0)
        c->dead = 1;
}

/*
 * rls.max_connection_age (envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE,
 * grpc-go's keepalive.ServerParameters): a connection past its age is told
 * to end, so that its client opens a new one (to a new replica, after a
 * scale-up); the streams it has are answered, and past the grace the
 * connection is closed whatever it still owes.  As grpc-go does, the first
 * GOAWAY names no last stream (nghttp2's shutdown notice): a call the client
 * sends before reading it is still served, not refused; the GOAWAY naming
 * the last stream read follows AGE_NOTICE_MS later.  True when the sweep is
 * done with c (told now, or freed).
 */
static bool
conn_aged(struct grpc_conn *c, int64_t now)
{
    const struct rl_rls_conf *l = c->srv->limits;

    if (l->max_connection_age_ms == 0 || !c->tls_ok || c->raw)
        return false;
    if (c->aged_ms != 0) {
        if (now - c->aged_ms >= l->max_connection_age_grace_ms) {
            gconn_free(c);
            return true;
        }
        if (c->goaway || now - c->aged_ms < AGE_NOTICE_MS)
            return false;
        conn_goaway(c);
        gconn_settle(c); /* may free c: nothing was left to answer */
        return true;
    }
    if (c->goaway || now - c->born_ms < l->max_connection_age_ms * c->age_permille / 1000)
        return false;
    COUNT(c->srv, aged);
    c->aged_ms = now;
    if (nghttp2_submit_shutdown_notice(c->h2) != 0)
        c->dead = 1;
    gconn_settle(c); /* frees c when dead */
    return true;
}

static void
on_grpc_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct grpc_server *srv = arg;
    int64_t now = now_coarse_ms(), idle = srv->limits->idle_timeout_ms;
    struct grpc_conn *c, *next;

    bufpool_trim(now);
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (conn_aged(c, now))
            continue;
        if (c->wstall_ms != 0 && now - c->wstall_ms > idle) {
            /* the client has not read its answers for idle_timeout */
            COUNT(srv, idle);
            gconn_free(c);
            continue;
        }
        /* in use: an answer owed, or a request completed or answered
         * within idle_timeout */
        if (c->nowed > 0 || now - c->active_ms <= idle)
            continue;
        if (!c->goaway)
            COUNT(srv, idle);
        if (!c->tls_ok || c->raw || c->goaway) {
            gconn_free(c); /* no session, or it was asked to end already */
            continue;
        }
        conn_goaway(c);
        c->active_ms = now; /* one more idle_timeout to finish */
        gconn_settle(c);
    }
    (void)fd;
    (void)what;
}

/* ---- the server ----------------------------------------------------------------- */

int
grpc_server_new(struct grpc_server **out, struct event_base *base, int fd,
                const struct rl_rls_conf *limits, const int64_t *max_buffered,
                grpc_handler handler, void *arg, struct grpc_counters *counters, char **cause)
{
    struct grpc_server *srv = xcalloc(1, sizeof(*srv));
    struct timeval tv = {0, SWEEP_MS * 1000};

    srv->base = base;
    srv->limits = limits;
    srv->max_buffered = max_buffered;
    srv->handler = handler;
    srv->arg = arg;
    srv->counters = counters;
    slab_init(&srv->slab, SLAB_KEEP);
    srv->h2mem = (nghttp2_mem){&srv->slab, h2_malloc, h2_free, h2_calloc, h2_realloc};
    srv->cbs = make_callbacks();
    srv->opt = make_options();
    if (srv->cbs == NULL || srv->opt == NULL) {
        *cause = xstrdup("cannot set up HTTP/2");
        goto fail;
    }
    if (listener_start(&srv->ls, base, fd, on_grpc_accept, srv,
                       (size_t)limits->max_connections, "rls", cause) != RL_OK)
        goto fail;
    srv->sweep_ev = event_new(base, -1, EV_PERSIST, on_grpc_sweep, srv);
    event_add(srv->sweep_ev, &tv);
    *out = srv;
    return RL_OK;
fail:
    if (srv->cbs != NULL)
        nghttp2_session_callbacks_del(srv->cbs);
    if (srv->opt != NULL)
        nghttp2_option_del(srv->opt);
    free(srv);
    return RL_ERR;
}

void
grpc_server_set_conn_cap(struct grpc_server *srv, size_t cap)
{
    listener_set_cap(&srv->ls, cap);
}

void
grpc_server_set_limits(struct grpc_server *srv, const struct rl_rls_conf *limits,
                       const int64_t *max_buffered)
{
    srv->limits = limits;
    srv->max_buffered = max_buffered;
}

void
grpc_server_drain(struct grpc_server *srv, void (*empty)(void *), void *arg)
{
    struct grpc_conn *c, *next;

    srv->draining = 1;
    srv->empty = empty;
    srv->empty_arg = arg;
    listener_stop(&srv->ls);
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (!c->tls_ok) { /* mid-handshake: nothing read, nothing owed */
            gconn_free(c);
            continue;
        }
        conn_goaway(c);
        gconn_settle(c);
    }
    if (srv->ls.open == 0 && empty != NULL)
        empty(arg);
}

size_t
grpc_server_connections(const struct grpc_server *srv)
{
    return srv->ls.open;
}

void
grpc_server_free(struct grpc_server *srv)
{
    if (srv == NULL)
        return;
    srv->empty = NULL;
    while (srv->conns != NULL)
        gconn_free(srv->conns);
    listener_stop(&srv->ls);
    if (srv->sweep_ev != NULL)
        event_free(srv->sweep_ev);
    while (srv->free_calls != NULL) {
        struct grpc_call *call = srv->free_calls;
        srv->free_calls = call->next;
        event_free(call->deadline_ev);
        free(call);
    }
    nghttp2_session_callbacks_del(srv->cbs);
    nghttp2_option_del(srv->opt);
    slab_purge(&srv->slab); /* after the last session */
    free(srv);
}
