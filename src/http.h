/*
 * http.h — the HTTP face, kept thin: route, read the body, hand it to
 * check.c, write the decision back.  Every error is JSON and keeps the
 * connection alive (evhttp_send_error would close it and send HTML).
 */
#ifndef RL_HTTP_H
#define RL_HTTP_H

#include "worker.h"

/* Create the worker's evhttp on its base and listening socket. */
int http_init(struct rl_worker *w, struct rl_config *cfg, char **cause) RL_WUR;
/* Stop accepting new connections (drain). */
void http_stop_accepting(struct rl_worker *w);

#endif
