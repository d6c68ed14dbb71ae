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
struct rls_grpc;

/* The services of one worker (its arena for the messages). */
struct rls_grpc *rls_grpc_new(struct rl_worker *w);
void rls_grpc_free(struct rls_grpc *g);

/* A grpc_handler; arg is the struct rls_grpc of the worker serving it. */
void rls_grpc_handle(struct grpc_call *c, const struct grpc_request *rq, void *arg);

#endif
