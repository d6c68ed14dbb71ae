/*
 * http.h — our HTTP/1.1 server on a libevent base: connections, framing
 * (http_parse.c), deadlines, pipelining with back-pressure, answers written
 * with one write, lingering close, drain.  It knows nothing of checks: a
 * handler (api.c for the check listener) routes each request and answers it,
 * now or later, with http_respond().
 *
 * One server per worker thread and listening socket; nothing is shared
 * between threads but the config the worker hands in.
 */
#ifndef RL_HTTP_H
#define RL_HTTP_H

#include <stdbool.h>
#include <sys/socket.h>

#include "http_parse.h"
#include "rl.h"

struct event_base;
struct http_server;
struct rl_http_conf;
struct http_conn;

/*
 * One request between its head and its answer.  While the handler runs,
 * `head` and `body` point into the connection's buffer; they are void once
 * the handler returns, so a handler that answers later copies what it needs.
 * The request itself stays valid until http_respond(), even when its
 * connection is gone meanwhile (the answer is then dropped).
 */
struct http_req {
    struct http_server *srv;
    struct http_conn *conn; /* NULL once the connection died */
    struct http_head *head; /* during the handler only */
    const char *body;       /* during the handler only */
    size_t body_len;
    int head_only;  /* HEAD: headers of the GET answer, no body */
    int keep_alive; /* the client's wish */
    int minor;
    int answered;
    int64_t first_us; /* when the read that began it came (now_monotonic_us) */
    int64_t start_us; /* for the handler's own use (access log) */
    unsigned flags;   /* for the handler's own use */
    /* an answer ready before the ones ahead of it on the connection */
    char *out;
    size_t out_len;
    struct http_req *next; /* the connection's queue, or the free list */
};

/* What the handler answers.  Header lines are "Name: value\r\n" each. */
struct http_response {
    int status;
    const char *content_type; /* NULL: application/json */
    const char *headers;      /* extra header lines, or NULL */
    size_t headers_len;
    const char *body;
    size_t body_len;
    int close; /* close the connection after this one */
};

typedef void (*http_handler)(struct http_req *r, void *arg);

/*
 * What the server counts; the caller's counters (relaxed atomics, read by
 * another thread for /metrics), or NULL.
 */
struct http_counters {
    uint64_t accepted;    /* connections */
    uint64_t open;        /* gauge */
    uint64_t bad_request; /* 400-class framing refusals */
    uint64_t too_large;   /* 413, 431 */
    uint64_t timeouts;    /* 408 and idle closes */
    uint64_t overloaded;  /* 503: past http.max_buffered */
};

/*
 * Serve on listening socket `fd` (taken) with `limits` and `max_body`, read
 * at every use (the caller may repoint them only on the server's thread, see
 * http_server_set_limits).  Accepts up to limits->max_connections until
 * http_server_set_conn_cap() says otherwise.
 */
int http_server_new(struct http_server **out, struct event_base *base, int fd,
                    const struct rl_http_conf *limits, const int64_t *max_body,
                    http_handler handler, void *arg, struct http_counters *counters,
                    char **cause) RL_WUR;
void http_server_free(struct http_server *srv);

/* This server's share of max_connections (also after a reload). */
void http_server_set_conn_cap(struct http_server *srv, size_t cap);
/* New bounds after a reload (the pointers must outlive their use). */
void http_server_set_limits(struct http_server *srv, const struct rl_http_conf *limits,
                            const int64_t *max_body);

/*
 * Drain: stop accepting, close idle connections now, answer every request
 * already read with "Connection: close" and close after it.  `empty` is
 * called (on the server's thread) once no connection is left.
 */
void http_server_drain(struct http_server *srv, void (*empty)(void *), void *arg);
bool http_server_draining(const struct http_server *srv);
size_t http_server_connections(const struct http_server *srv);

/* Answer r (exactly once per request). */
void http_respond(struct http_req *r, const struct http_response *resp);

/*
 * Answer r with {"error": msg} (msg escaped: it may quote what the caller
 * sent), status and extra header lines (or NULL).  Every 503 says when to
 * try again, "Retry-After: 1" unless extra says otherwise (gateways pass it
 * on as it is).  Every listener's errors look alike.
 */
void http_respond_error(struct http_req *r, int status, const char *extra, const char *msg);

/* The handler's arg of the server that read r. */
void *http_req_arg(const struct http_req *r);

/* The peer of r's connection (NULL once the connection is gone). */
const struct sockaddr_storage *http_req_peer(const struct http_req *r);
/* The address of r's peer as text, "-" when it has none (a unix socket, or
 * gone). */
void http_req_peer_text(const struct http_req *r, char *buf, size_t size);

/* "GET" etc. for the methods we know, NULL otherwise. */
const char *http_method_name(enum http_method m);
/* The reason phrase of a status code. */
const char *http_reason(int status);

#endif
