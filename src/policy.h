/*
 * policy.h — which rule applies: policies are tried in file order and the
 * first whose match fits the request's path and method wins.
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include <stdbool.h>
#include <stddef.h>

struct rl_config;
struct rl_policy;

/* NULL when no policy matches (the check is then allowed, policy null). */
const struct rl_policy *policy_match(const struct rl_config *cfg, const char *path,
                                     size_t path_len, unsigned method_bit);

/* '*' matches any run of bytes (also '/'), '?' exactly one byte. */
bool policy_glob(const char *pattern, const char *s, size_t len);

#endif
