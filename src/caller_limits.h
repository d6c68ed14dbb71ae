/*
 * caller_limits.h — limits a check brings along: POST /check's "limits",
 * for a policy with "request_limits": true (issue 22; docs/API.md).  The
 * caller (the service that knows a tenant's plan) says the limits of this
 * check; they replace the policy's, with the same keys a policy's limits of
 * the same algorithm and window would have, so a plan that changes keeps its
 * counts.
 *
 * Read by the configuration's own rules (policy_parse_limits: one set of
 * checks, one set of messages), then capped by the policy's
 * request_limits_max.  A tenant sends the same bytes with every check, so a
 * worker keeps what it read by the bytes: the common check reads no JSON
 * tree for them.
 */
#ifndef RL_CALLER_LIMITS_H
#define RL_CALLER_LIMITS_H

#include <stdbool.h>
#include <stddef.h>

#include "algo.h"
#include "rl.h"

struct json_t;
struct rl_policy;

/* One worker's memo of limits read, by their bytes (not shared). */
struct rl_caller_limits;

struct rl_caller_limits *caller_limits_new(void);
void caller_limits_free(struct rl_caller_limits *m);

/*
 * The limits `text` (len bytes, the JSON list exactly as the body has it)
 * stands for, from the memo m: true and out[0..*n) when it read the same
 * bytes before (and every zone they name is still current).
 */
bool caller_limits_find(struct rl_caller_limits *m, const char *text, size_t len,
                        struct rl_limit *out, size_t *n);

/*
 * Read the JSON list v into out[0..*n), and when text is not NULL (the same
 * list's bytes) keep it in m under them.  RL_ERR: *cause names the field
 * (caller frees).
 */
int caller_limits_read(struct rl_caller_limits *m, const char *text, size_t len,
                       struct json_t *v, struct rl_limit *out, size_t *n, char **cause) RL_WUR;

/* The policy's cap on limits[0..n): RL_ERR and *cause when a limit or a
 * burst is above request_limits_max, or when they and the policy's
 * request_limits_cap are more than one script call decides (caller frees). */
int caller_limits_allowed(const struct rl_policy *p, const struct rl_limit *l, size_t n,
                          char **cause) RL_WUR;

#endif
