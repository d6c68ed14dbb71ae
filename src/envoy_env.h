/*
 * envoy_env.h — envoyproxy/ratelimit's environment read as ratelimitd's
 * options (docs/envoy.md, "Moving from envoyproxy/ratelimit"), for a daemon
 * started as `ratelimit` or with --envoy-env: Envoy Gateway runs the image
 * with that environment and nothing else.
 *
 * One table (envoy_env.c) holds every variable of envoyproxy/ratelimit's
 * settings: the option it sets, the converter that reads it as
 * envoyproxy/ratelimit reads it (Go's booleans, durations and integers; its
 * defaults), or why it has no effect here.  A variable without effect, and
 * an unknown one with one of its prefixes, is told once, by name, in *notes
 * (never its value: REDIS_AUTH is one of them).
 */
#ifndef RL_ENVOY_ENV_H
#define RL_ENVOY_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"
#include "schema.h"

/* An option set from the environment: name ("rls.listen"), its text as a
 * flag would give it, and the variable it came from (static text). */
typedef void (*envoy_env_set_fn)(const char *option, const char *text, const char *origin,
                                 void *arg);

/* The texts handed to set(): they live as long as this does (a reload
 * applies them again). */
struct envoy_env {
    char **owned;
    size_t n;
};

/*
 * Read envp ("NAME=value" strings, NULL-terminated) and call set() for each
 * option it gives.  *notes gets one line per variable that has no effect
 * ("USE_STATSD: ..."); *errs one per value envoyproxy/ratelimit would refuse
 * too (a boolean that is not one, a bad duration or port, a Redis URL of the
 * wrong form).  RL_ERR when *errs grew.
 */
int envoy_env_read(struct envoy_env *ee, char *const *envp, envoy_env_set_fn set, void *arg,
                   struct rl_errors *notes, struct rl_errors *errs) RL_WUR;

void envoy_env_free(struct envoy_env *ee);

/* Whether argv[0] names envoyproxy/ratelimit's command ("ratelimit",
 * "/bin/ratelimit"). */
bool envoy_env_command(const char *argv0);

/* Go's strconv.ParseBool: 1 t T TRUE true True, 0 f F FALSE false False. */
int envoy_env_bool(const char *s, bool *out) RL_WUR;

/* Go's time.ParseDuration ("10s", "1h30m", "1.5s", "300ms", "0"), into
 * milliseconds, a fraction of one rounded up; negative refused. */
int envoy_env_duration_ms(const char *s, int64_t *ms) RL_WUR;

/* One row of the table, for the tests and the docs: the variable's option
 * (NULL: none) and whether a converter reads it.  NULL past the end. */
const char *envoy_env_row(size_t i, const char **option, bool *read);

#endif
