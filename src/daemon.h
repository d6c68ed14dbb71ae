/*
 * daemon.h — the process: options from flags and environment, the current
 * config (swapped whole on reload), the listening sockets, the workers and
 * the signals that drive them.
 */
#ifndef RL_DAEMON_H
#define RL_DAEMON_H

#include <stddef.h>

#include "rl.h"

struct rl_config;
struct rl_errors;

/* An option set outside the file: applied over it, again on every reload. */
struct rl_setting {
    const char *name; /* dotted option name, e.g. "redis.url" */
    const char *text;
    const char *origin; /* "-r", "RATELIMITD_REDIS_URL", ... */
};

#define RL_SETTINGS_MAX 64

struct rl_options {
    const char *config_file; /* NULL: built-in defaults */
    struct rl_setting ov[RL_SETTINGS_MAX];
    size_t nov;
};

/* File (or defaults), then overrides, then validation: every problem. */
int daemon_load_config(const struct rl_options *o, struct rl_config **out,
                       struct rl_errors *errs) RL_WUR;

/* Serve until stopped; returns the process exit code: 0, 1 for a config
 * daemon_run cannot use (listen address, TLS files), 2 when it cannot listen
 * or start. */
int daemon_run(const struct rl_options *o, struct rl_config *cfg);

#endif
