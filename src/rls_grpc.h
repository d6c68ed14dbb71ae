/*
 * rls_grpc.h — the gRPC listener's services (docs/API.md, "Envoy's rate
 * limit service"): envoy.service.ratelimit.v3.RateLimitService/
 * ShouldRateLimit decided by rls_start() (src/rls.h), and
 * grpc.health.v1.Health/Check for "" and "ratelimit".  Any other method is
 * UNIMPLEMENTED.  The transport (grpc.c) calls rls_grpc_handle for each
 * whole request.
 */
#ifndef RL_RLS_GRPC_H
#define RL_RLS_GRPC_H

struct grpc_call;
struct grpc_request;

/* The first block of the worker's arena for the messages (w->rls_arena):
 * it holds a usual request and its answer. */
#define RLS_GRPC_ARENA_FIRST (16 * 1024)

/* A grpc_handler; arg is the struct rl_worker serving the listener, whose
 * rls_arena holds the messages. */
void rls_grpc_handle(struct grpc_call *c, const struct grpc_request *rq, void *arg);

#endif
