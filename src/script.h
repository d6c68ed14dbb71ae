/*
 * script.h — calling the check script and reading its answer: what the
 * standalone/Sentinel backend (backend_redis.c) and the Cluster backend
 * (backend_cluster.c) send and parse alike.
 */
#ifndef RL_SCRIPT_H
#define RL_SCRIPT_H

#include <hiredis/hiredis.h>

#include "backend.h"

/* EVALSHA (or EVAL) argv for one check; the strings live in the struct. */
struct rl_script_call {
    int argc;
    const char *argv[5 + RL_LIMITS_MAX * 5];
    size_t lens[5 + RL_LIMITS_MAX * 5];
    char keys[RL_LIMITS_MAX][RL_LIMIT_KEY_MAX];
    char nums[2 + RL_LIMITS_MAX * 3][24];
};

/*
 * EVALSHA sha n key... '' cost (tag limit window_ms burst)... — or EVAL with
 * the script's text.  The empty "now" makes the script read Redis TIME.
 */
int script_call_build(struct rl_script_call *c, const struct rl_check_req *req,
                      int eval) RL_WUR;

/* { allowed, remaining_i, reset_ms_i, retry_after_ms_i ... } into *res;
 * RL_ERR and a static *why for any other shape. */
int script_reply_parse(const redisReply *r, size_t nlimits, struct rl_check_res *res,
                       const char **why) RL_WUR;

/*
 * A check waiting for the script, answered exactly once: by its reply, by
 * its deadline or by the connection's end, whichever comes first.  After the
 * answer, req is NULL (the caller may free it); the waiting struct itself
 * lives on until hiredis hands back the reply it owes.
 */
struct rl_script_wait {
    const struct rl_check_req *req;
    rl_check_cb cb;
    void *arg;
    int answered;
};

void script_answer_status(struct rl_script_wait *w, enum rl_backend_status st,
                          const char *why);
/* The script's reply, or RL_BACKEND_ERROR when it is not the script's shape. */
void script_answer_reply(struct rl_script_wait *w, const redisReply *r);

#endif
