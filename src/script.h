/*
 * script.h — calling the check script and reading its answer: what the
 * standalone/Sentinel backend (backend_redis.c) and the Cluster backend
 * (cluster_op.c) send and parse alike, down to walking a batch's reply.
 */
#ifndef RL_SCRIPT_H
#define RL_SCRIPT_H

#include <stdbool.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend.h"

struct rconn;

/*
 * A policy's limits as the script reads them, prebuilt: the whole protocol
 * argument "$<len>\r\n<tag> <limit> <window_ms> <burst>...\r\n", the same
 * bytes for every check of the policy.  Cached by a hash of the limits and
 * checked against a copy of them, so limits freed by a reload, or a caller's
 * own (request limits, which live as long as their check), are never taken
 * for others.  A calendar period's limit carries the boundaries of its
 * periods around the daemon's clock: its spec holds while that clock is in
 * [from_us, until_us), and is built again after.
 */
#define RL_SCRIPT_SPEC_MAX 1024
#define RL_SCRIPT_SPECS 16
/* Room for a limit's key suffix (algo_key_suffix): a longer one is
 * formatted for each key as before. */
#define RL_SCRIPT_SUFFIX_MAX 96

struct rl_script_spec {
    uint64_t hash;
    size_t n;
    struct rl_limit limits[RL_LIMITS_MAX];
    int periods; /* some limit has a period: from_us and until_us matter */
    int64_t from_us, until_us;
    size_t len;
    char bytes[RL_SCRIPT_SPEC_MAX];
    /* each limit's key suffix, made once for every key of the policy's
     * checks (what formatting it per key cost: docs/BENCHMARKS.md,
     * "Measurements behind the code"); length 0: did not fit */
    unsigned char suffix_len[RL_LIMITS_MAX];
    char suffix[RL_LIMITS_MAX][RL_SCRIPT_SUFFIX_MAX];
};

/*
 * One script call deciding a batch of checks (coalescing: the checks that
 * arrive in one event-loop pass share one call), formatted as the Redis
 * protocol so hiredis only copies it (redisAsyncFormattedCommand), not
 * through its printf-style formatting (docs/BENCHMARKS.md, "Measurements
 * behind the code").
 * Reused from call to call, with the specs of the policies it carried
 * lately; one per connection (never shared between threads).
 */
struct rl_script_call {
    char *buf;
    size_t len, cap;
    struct rl_script_spec *specs[RL_SCRIPT_SPECS];
    struct rl_script_spec *last; /* the last one asked for: mostly the next */
    /* last's limits, as asked for in this call (whose checks hold them):
     * the same again is last, with nothing compared */
    const struct rl_limit *last_l;
};

void script_call_free(struct rl_script_call *c);

/* How a call names the script: FCALL of the function library the handshake
 * loaded, EVALSHA where the server has no FUNCTION, and EVAL with the whole
 * text once when the server forgot either (NOSCRIPT, "Function not found"). */
enum script_cmd { SCRIPT_EVALSHA, SCRIPT_EVAL, SCRIPT_FCALL };

/*
 * FCALL fn|EVALSHA sha|EVAL text, then nkeys key... '' n (spec cost[flags]
 * [seq])... for reqs[0..n) (scripts/lua/check.lua describes the arguments).
 * The empty "now" makes the script read Redis TIME.
 */
int script_call_build(struct rl_script_call *c, const struct rl_check_req *const *reqs,
                      size_t n, enum script_cmd cmd) RL_WUR;

/*
 * The reply to a batch is one flat array: per check, allowed (1, 0, or
 * -blocked_ms for a blocked key) then
 * (remaining, reset_ms, retry_after_ms) per limit, all integers; or, for a
 * check that failed alone (a key of the wrong type), an error in place of
 * allowed, then integers.  What is wrong with r as that answer, `len`
 * elements each an integer or an error (static text), or NULL when nothing.
 */
const char *script_reply_problem(const redisReply *r, size_t len);

/* Elements of a batch reply that answer one check of `nlimits` limits,
 * and `list` (RL_CHECK_RSV_LIST) its open reservations: their number, then
 * (estimate, expires_in_ms) pairs, RL_RSV_LIST_MAX of them, zeros past the
 * last (check.lua). */
static inline size_t
script_reply_len(size_t nlimits, int list)
{
    return 1 + 3 * nlimits + (list ? 1 + 2 * RL_RSV_LIST_MAX : 0);
}

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
    size_t nlimits; /* req's: its part of a reply, known once req is gone */
    int rsv_list;   /* req's RL_CHECK_RSV_LIST: as nlimits */
    int answered;
};

void script_answer_status(struct rl_script_wait *w, enum rl_backend_status st,
                          const char *why);
/* The check's part of a reply script_reply_problem() found fine: its elements
 * from `at` on.  An error there answers the check RL_BACKEND_ERROR (static
 * text naming the error's code, rconn_error_text), and it alone. */
void script_answer_reply(struct rl_script_wait *w, const redisReply *r, size_t at);

/*
 * One script call's reply, walked the same way by both Redis backends: the
 * connection lost, a malformed reply, the error log and its counts, the
 * errors that say the server cannot serve checks (its connection dropped),
 * a forgotten script, and each check answered from its part.  A backend
 * hands in only what is its own: the errors it classifies itself (Cluster:
 * MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and how it sends a call again.
 */
struct script_batch {
    struct rconn *c;             /* the connection that carried the call */
    const redisAsyncContext *ac; /* the reply's context (c's, unless replaced) */
    struct rl_script_wait **w;   /* the call's checks, in its order */
    size_t n;
    bool eval; /* the call was an EVAL already */
    /* An error reply of the backend's own kind, answering check i: the
     * call's error (for every check still waiting) or the check's own.  The
     * backend deals with it (follows it, retries); NULL: no kind of its own. */
    bool (*own)(const char *err);
    void (*take)(void *arg, size_t i, const char *err);
    /* The server forgot the script (NOSCRIPT, "Function not found"): send the
     * checks still waiting again as EVAL, or answer them.  True when the
     * call was sent again as one, so its batch lives on. */
    bool (*resend)(void *arg);
    /* The server cannot serve checks (rconn_unusable): the walker drops the
     * connection and says so here too (NULL: nothing more to do). */
    void (*unusable)(void *arg);
    void *arg;
};

/* Walk r (NULL: the connection ended) for b; true when b was sent again. */
bool script_batch_reply(const struct script_batch *b, const redisReply *r);

#endif
