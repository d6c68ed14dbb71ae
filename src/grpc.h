/*
 * grpc.h — our gRPC server on a libevent base: HTTP/2 by nghttp2, with prior
 * knowledge (h2c) or over TLS with ALPN "h2" (grpc_tls.h); unary calls only.
 * It frames and bounds what comes in (gRPC's 5-byte length prefix,
 * rls.max_message, the header list, concurrent streams, connections, idle
 * time, nghttp2's flood limits), honours grpc-timeout, answers with
 * trailers, and drains with GOAWAY.  It knows nothing of rate limits: a
 * handler (rls_grpc.c) gets each whole request and answers it, now or
 * later, with grpc_respond().
 *
 * One server per worker thread and listening socket; nothing is shared
 * between threads but the TLS settings and the config the worker hands in.
 */
#ifndef RL_GRPC_H
#define RL_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct event_base;
struct grpc_server;
struct grpc_call;
struct rl_rls_conf;

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum grpc_status {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_ALREADY_EXISTS = 6,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_ABORTED = 10,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16,
    GRPC_STATUS_COUNT
};

/* Connections and requests the transport turned away itself. */
enum grpc_refusal {
    GRPC_REF_PREFACE = 0,  /* not HTTP/2: HTTP/1.x or garbage before the preface */
    GRPC_REF_PROTOCOL,     /* an HTTP/2 protocol error or flood: GOAWAY */
    GRPC_REF_TLS,          /* a TLS handshake that failed (mTLS: no or a bad certificate) */
    GRPC_REF_METHOD,       /* not POST: 405 */
    GRPC_REF_CONTENT_TYPE, /* not application/grpc: 415 */
    GRPC_REF_HEADERS,      /* a header list over rls.max_header_list */
    GRPC_REF_BUFFERED,     /* a message the pool of http.max_buffered could not take */
    GRPC_REF_COUNT
};

/*
 * What the server counts: the caller's counters (relaxed atomics, read by
 * another thread for /metrics).
 */
struct grpc_counters {
    uint64_t accepted;                  /* connections */
    uint64_t open;                      /* gauge */
    uint64_t idle;                      /* connections closed by rls.idle_timeout */
    uint64_t aged;                      /* connections told GOAWAY by max_connection_age */
    uint64_t calls;                     /* streams opened */
    uint64_t cancelled;                 /* streams the client reset before their answer */
    uint64_t status[GRPC_STATUS_COUNT]; /* answers, by grpc-status */
    uint64_t refused[GRPC_REF_COUNT];
};

/* One whole request, valid during the handler only. */
struct grpc_request {
    const char *path; /* ":path", e.g. "/grpc.health.v1.Health/Check" */
    size_t path_len;
    const uint8_t *msg; /* the message, unframed and uncompressed */
    size_t msg_len;
    int64_t timeout_ms; /* what is left of grpc-timeout; 0: none given */
};

typedef void (*grpc_handler)(struct grpc_call *c, const struct grpc_request *rq, void *arg);

/*
 * Serve on listening socket `fd` (taken) under `limits`, and with messages
 * buffered from the daemon-wide pool (bufpool.h) up to `max_buffered`
 * (http.max_buffered), both read at every use (the caller may repoint them
 * only on the server's thread).  Accepts up to limits->max_connections
 * until grpc_server_set_conn_cap() says otherwise.
 */
int grpc_server_new(struct grpc_server **out, struct event_base *base, int fd,
                    const struct rl_rls_conf *limits, const int64_t *max_buffered,
                    grpc_handler handler, void *arg, struct grpc_counters *counters,
                    char **cause) RL_WUR;
void grpc_server_free(struct grpc_server *srv);

/* This server's share of rls.max_connections (also after a reload). */
void grpc_server_set_conn_cap(struct grpc_server *srv, size_t cap);
/* New bounds after a reload; SETTINGS (streams, header list) apply to
 * connections opened after it. */
void grpc_server_set_limits(struct grpc_server *srv, const struct rl_rls_conf *limits,
                            const int64_t *max_buffered);

/*
 * Drain: stop accepting, send every connection GOAWAY naming the last
 * stream it read, answer those streams, close each connection once it has
 * none.  `empty` is called (on the server's thread) once no connection is
 * left.
 */
void grpc_server_drain(struct grpc_server *srv, void (*empty)(void *), void *arg);
size_t grpc_server_connections(const struct grpc_server *srv);

/*
 * Where the answer's message of `len` bytes goes (the transport frames
 * it), or NULL when it is larger than rls.max_message.  At most once per
 * call, before grpc_respond(c, GRPC_OK, NULL).
 */
uint8_t *grpc_reply_buf(struct grpc_call *c, size_t len);

/*
 * Answer c, exactly once: GRPC_OK with the message of grpc_reply_buf, or a
 * status and a message (text; percent-encoded for grpc-message here).  c
 * is not to be touched after.  A call whose stream is gone meanwhile (the
 * client reset it, its deadline passed, the connection died) is answered
 * into nothing.
 */
void grpc_respond(struct grpc_call *c, enum grpc_status status, const char *message);

/* The handler's arg of the server that read c. */
void *grpc_call_arg(const struct grpc_call *c);

/* "OK", "DEADLINE_EXCEEDED", ... */
const char *grpc_status_name(enum grpc_status s);
/* "preface", "protocol", ... (metrics labels) */
const char *grpc_refusal_name(enum grpc_refusal r);

#endif
