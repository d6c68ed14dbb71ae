/*
 * grpc_head.h — HTTP/2's rules for a request's fields (RFC 9113 8.1.1, 8.2,
 * 8.3), as nghttp2 1.52 enforces them on a server when its HTTP messaging
 * is on.  The gRPC server (grpc.c) turns that off
 * (nghttp2_option_set_no_http_messaging) and asks here instead: the same
 * requests are malformed, and grpc.c resets their streams with
 * PROTOCOL_ERROR as nghttp2 did (tests/integration/test_rls_grpc.py,
 * "malformed requests"; check_grpc_head holds each rule to nghttp2's own
 * check functions).  What it saves: the names and values a gRPC call sends
 * are matched whole (":path" is one of the service's, "te" is "trailers")
 * instead of walked byte by byte through nghttp2's tables (what that cost:
 * docs/BENCHMARKS.md, "Measurements behind the code").  RFC 9218's
 * `priority` field is not read (nghttp2 scheduled a stream's DATA by it; an
 * answer here is one small DATA frame).
 */
#ifndef RL_GRPC_HEAD_H
#define RL_GRPC_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/* One request's state: the pseudo-headers seen, its content-length. */
struct grpc_head {
    uint32_t flags;
    int64_t content_length; /* -1: none given */
    int64_t received;       /* DATA bytes so far */
};

void grpc_head_init(struct grpc_head *h);
/* A field of the request's header block, or of its trailers (trailer):
 * RL_ERR when it makes the request malformed. */
int grpc_head_field(struct grpc_head *h, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, bool trailer) RL_WUR;
/* The request's header block is in: RL_ERR when a pseudo-header it needs is
 * missing or its :path does not fit its :scheme and :method. */
int grpc_head_end(struct grpc_head *h) RL_WUR;
/* n bytes of DATA: RL_ERR past its content-length. */
int grpc_head_data(struct grpc_head *h, size_t n) RL_WUR;
/* The client's side ended: RL_ERR when content-length says otherwise. */
int grpc_head_ended(const struct grpc_head *h) RL_WUR;

#endif
