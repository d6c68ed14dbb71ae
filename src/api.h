/*
 * api.h — the check listener's routes (docs/API.md): POST /check (and, with
 * forward_auth, any method on /check and /check/<path>), POST /json (Envoy's
 * rate limit service as envoyproxy/ratelimit's HTTP form), GET|HEAD /healthz,
 * /readyz and /metrics.  Every answer, errors included, is JSON but
 * /metrics'.  The HTTP layer (http.c) calls api_handle for each request.
 */
#ifndef RL_API_H
#define RL_API_H

struct http_req;

/* An http_handler; arg is the struct rl_worker that serves the listener. */
void api_handle(struct http_req *r, void *arg);
/* metrics_listen's: GET|HEAD /metrics alone, the same text as the check
 * listener's (envoyproxy/ratelimit's PROMETHEUS_ADDR). */
void api_metrics_handle(struct http_req *r, void *arg);

#endif
