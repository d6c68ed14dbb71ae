/* rls_grpc.c — see rls_grpc.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "config.h"
#include "grpc.h"
#include "metrics.h"
#include "rls.h"
#include "rls_codec.h"
#include "rls_grpc.h"
#include "util.h"
#include "worker.h"

#define SHOULD_RATE_LIMIT "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define HEALTH_CHECK "/grpc.health.v1.Health/Check"
/* The service names Health/Check answers for: the server as a whole, and
 * the name envoyproxy/ratelimit registers. */
#define HEALTH_SERVICE "ratelimit"

/* Decoding a message may take at most this many times its size
 * (protobuf-c makes an object per field: an empty entry is 2 bytes on the
 * wire and some 100 in memory), plus a floor. */
#define ARENA_FACTOR 32
#define ARENA_FLOOR (1024 * 1024)
/* The arena's first block: it holds a usual request. */
#define ARENA_FIRST (16 * 1024)

/* The door on one worker: the messages of its calls live in its arena. */
struct rls_grpc {
    struct rl_worker *w;
    struct arena arena;
};

struct rls_grpc *
rls_grpc_new(struct rl_worker *w)
{
    struct rls_grpc *d = xcalloc(1, sizeof(*d));

    d->w = w;
    arena_init(&d->arena, ARENA_FIRST, 0);
    return d;
}

void
rls_grpc_free(void *door)
{
    struct rls_grpc *d = door;

    if (d == NULL)
        return;
    arena_free(&d->arena);
    free(d);
}

static bool
grpc_path_is(const struct grpc_request *rq, const char *p)
{
    size_t n = strlen(p);

    return rq->path_len == n && memcmp(rq->path, p, n) == 0;
}

/* The decision, as a RateLimitResponse (or the status rls says), written
 * straight into the call's answer. */
static void
on_decided(const struct rls_response *resp, void *arg)
{
    struct grpc_call *c = arg;
    struct rls_grpc *d = grpc_call_arg(c);
    struct rls_codec_plan plan;
    uint8_t *buf;

    if (resp->grpc_status != 0) {
        grpc_respond(c, (enum grpc_status)resp->grpc_status, resp->message);
    } else if ((buf = grpc_reply_buf(c, rls_codec_response_plan(resp, &plan))) == NULL) {
        grpc_respond(c, GRPC_RESOURCE_EXHAUSTED, "the answer is larger than rls.max_message");
    } else {
        (void)rls_codec_response_write_plan(resp, &plan, buf);
        grpc_respond(c, GRPC_OK, NULL);
    }
    worker_check_done(d->w);
}

static void
should_rate_limit(struct rls_grpc *d, struct grpc_call *c, const struct grpc_request *rq)
{
    struct rl_worker *w = d->w;
    struct rl_config *cfg = worker_config(w);
    struct arena_mark m = arena_mark(&d->arena);
    struct rls_request req;
    const char *why = NULL;
    char *cause = NULL;

    /* as POST /check: a backend that slows down must not grow a queue */
    if (!worker_admit(w)) {
        grpc_respond(c, GRPC_UNAVAILABLE, "overloaded: too many checks in flight");
        return;
    }
    if (cfg->rls.rules_missing) { /* as envoyproxy/ratelimit answers then */
        grpc_respond(c, GRPC_UNKNOWN, RL_RLS_NO_RULES);
        return;
    }
    arena_set_cap(&d->arena, (size_t)cfg->rls.max_message * ARENA_FACTOR + ARENA_FLOOR);
    if ((why = rls_codec_decode_request(&d->arena, rq->msg, rq->msg_len, &req)) != NULL) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        grpc_respond(c, why == rls_codec_too_complex ? GRPC_RESOURCE_EXHAUSTED : GRPC_INTERNAL,
                     why);
        arena_release(&d->arena, m);
        return;
    }
    req.timeout_ms = rq->timeout_ms;
    worker_check_begin(w);
    if (rls_start(worker_env(w), cfg, &req, on_decided, c, &cause) != RL_OK) {
        metrics_reject(worker_counters(w), RL_REJ_BAD_REQUEST);
        grpc_respond(c, GRPC_INVALID_ARGUMENT, cause);
        free(cause);
        worker_check_done(w);
    }
    arena_release(&d->arena, m);
}

/* SERVING exactly when GET /serving says 200: worker_serving() is the one
 * predicate (draining, failure_mode, every worker's backend). */
static enum rls_serving
serving(struct rl_worker *w)
{
    const char *reason;

    return worker_serving(w, &reason, NULL) ? RLS_SERVING : RLS_NOT_SERVING;
}

static void
health_check(struct rls_grpc *d, struct grpc_call *c, const struct grpc_request *rq)
{
    struct arena_mark m = arena_mark(&d->arena);
    uint8_t msg[RLS_HEALTH_MAX], *buf;
    struct rls_str svc;
    const char *why = NULL;
    size_t n;

    if ((why = rls_codec_decode_health(&d->arena, rq->msg, rq->msg_len, &svc)) != NULL) {
        grpc_respond(c, GRPC_INTERNAL, why);
    } else if (svc.len != 0 && !(svc.len == strlen(HEALTH_SERVICE) &&
                                 memcmp(svc.p, HEALTH_SERVICE, svc.len) == 0)) {
        grpc_respond(c, GRPC_NOT_FOUND, "unknown service: ask for \"\" or \"ratelimit\"");
    } else {
        /* a few bytes: rls.max_message is at least 256 */
        n = rls_codec_encode_health(serving(d->w), msg);
        buf = grpc_reply_buf(c, n);
        memcpy(buf, msg, n);
        grpc_respond(c, GRPC_OK, NULL);
    }
    arena_release(&d->arena, m);
}

void
rls_grpc_handle(struct grpc_call *c, const struct grpc_request *rq, void *arg)
{
    struct rls_grpc *d = arg;

    if (grpc_path_is(rq, SHOULD_RATE_LIMIT))
        should_rate_limit(d, c, rq);
    else if (grpc_path_is(rq, HEALTH_CHECK))
        health_check(d, c, rq);
    else
        grpc_respond(c, GRPC_UNIMPLEMENTED,
                     "unknown method: this server has " SHOULD_RATE_LIMIT
                     " and " HEALTH_CHECK);
}
