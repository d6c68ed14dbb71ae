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
struct rl_worker;
/* The door on one worker, with the arena its messages live in. */
struct rls_grpc;

struct rls_grpc *rls_grpc_new(struct rl_worker *w);
/* A struct rls_grpc, or NULL (worker_serve_rls's arg_free). */
void rls_grpc_free(void *door);

/* A grpc_handler; arg is the struct rls_grpc of the worker serving the
 * listener. */
void rls_grpc_handle(struct grpc_call *c, const struct grpc_request *rq, void *arg);

#endif
