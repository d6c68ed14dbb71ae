/*
 * admin.h — the admin API (docs/operations.md, "Admin API"), served on admin_listen and
 * never on the check listener.  POST /admin/inspect, /admin/reset,
 * /admin/block, /admin/unblock, /admin/reward and /admin/penalty, each
 * naming one caller of one policy the way a check resolves it
 * ({"policy": ..., "key": ...} or {"policy": ..., "ip": ...}), JSON in and
 * out, every error naming its field.  With admin_token_file each request
 * needs "Authorization: Bearer <token>".  Every action is logged (peer,
 * action, policy, key, result) and counted (ratelimitd_admin_actions_total).
 */
#ifndef RL_ADMIN_H
#define RL_ADMIN_H

#include "http.h"

/* An http_handler; arg is the struct rl_worker that serves the listener. */
void admin_handle(struct http_req *r, void *arg);

#endif
