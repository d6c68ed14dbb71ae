/*
 * config.h — the daemon's configuration: built-in defaults, then the JSON
 * file, then environment, then flags (docs/API.md precedence).  The options are
 * tables of rows (config.c) walked by schema.c; every problem is collected
 * with where it is, so `-t` can report them all at once.  What is derived
 * from the options (the overrides' policies, defaults that depend on other
 * options, uids, the partition key) is built in one pass after loading.
 *
 * A loaded config is immutable and reference counted: a check holds the
 * config it started with, so a reload never changes the rules under it.
 */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "netaddr.h"
#include "policy.h"
#include "rl.h"
#include "schema.h"
#include "transport_conf.h"

enum rl_backend_kind { RL_BACKEND_REDIS = 0, RL_BACKEND_MEMORY };
enum rl_failure_mode { RL_FAIL_OPEN = 0, RL_FAIL_CLOSED, RL_FAIL_LOCAL };
/* forwarded_request_headers: which family of original-request headers the
 * trusted proxies write (the other may be the client's, passed through).
 * auto: forwarded with forward_auth on (what Traefik and Caddy send, and
 * both pass a client's own X-Original-URI on), original otherwise. */
enum rl_request_headers { RL_REQHDR_ORIGINAL = 0, RL_REQHDR_FORWARDED, RL_REQHDR_AUTO };
/* unnormalizable_path: what a path that cannot be normalised gets */
enum rl_bad_path { RL_BADPATH_REJECT = 0, RL_BADPATH_RAW };
/* x_ratelimit_reset: seconds from now, or the Unix time of the reset */
enum rl_reset_format { RL_RESET_DELTA = 0, RL_RESET_EPOCH };

struct rl_config {
    char *file; /* where it came from, NULL for defaults */
    char *listen;
    /* what set listen last, when not the file ("-l", "RATELIMITD_LISTEN"):
     * its problems are told as that source's (static text, NULL: the file) */
    const char *listen_origin;
    int64_t workers;
    enum rl_backend_kind backend;
    struct rl_redis_conf redis;
    enum rl_failure_mode failure_mode;
    struct rl_identity_chain identity;
    struct rl_cidr_list trusted_proxies;
    int forwarded_rfc7239;            /* forwarded_header: 0 X-Forwarded-For, 1 Forwarded */
    int64_t ipv4_prefix, ipv6_prefix; /* an address identity's network */
    enum rl_request_headers request_headers; /* forwarded_request_headers */
    int merge_slashes;                       /* "//" is "/" in paths before matching */
    unsigned path_fold;                      /* RL_PATHFOLD_* (pathnorm.h) */
    enum rl_bad_path bad_path;               /* unnormalizable_path */
    enum rl_reset_format reset_format;       /* x_ratelimit_reset */
    char *partition_key;                     /* the secret of the pk parameter; NULL: no pk */
    uint64_t pk_k0, pk_k1;                   /* the SipHash key made from it; not a field */
    int64_t max_body;
    int64_t max_inflight; /* per worker; past it a fast 503 */
    int64_t max_delayed;  /* per worker: checks held for max_delay at once */
    /* per worker: charges kept for the backend (pending.h) */
    int64_t max_pending_charges;
    int deny_cache;            /* answer known denials locally */
    int forward_auth;          /* any method on /check and /check/... */
    int64_t access_log;        /* log one check in N; 0: off */
    int64_t deny_cache_size;   /* slots per worker */
    int64_t top_k;             /* counters of each heavy-hitters sketch (top.h); 0: none */
    int64_t hybrid_table_size; /* hybrid keys known per worker, at most */
    int64_t shutdown_grace_ms;
    struct rl_http_conf http;
    struct rl_rls_conf rls;
    enum rl_log_level log_level;
    enum rl_log_format log_format;
    int watch_files; /* reload when a file it reads changes on disk */
    struct rl_policy *policies;
    size_t npolicies;
    char *admin_listen;     /* NULL: no admin API (admin.h) */
    int admin_allow_remote; /* a non-loopback admin_listen is meant */
    char *admin_token_file;
    char *admin_token;      /* read from it at every load; not a field */
    char *metrics_listen;   /* NULL: GET /metrics on `listen` only */
    char *debug_listen;     /* NULL: no debug listener (debug.h) */
    int debug_allow_remote; /* a non-loopback debug_listen is meant */

    uint64_t hash; /* FNV-1a of the file's bytes, 0 for defaults */
    int refs;      /* atomic; see config_ref() */
};

/* A config with every built-in default. */
struct rl_config *config_new_defaults(void);

/*
 * Load FILE over the defaults.  On RL_ERR *errs holds every problem and
 * *out is NULL.  The file is read whole; comments are not JSON and not allowed.
 */
int config_load_file(const char *file, struct rl_config **out, struct rl_errors *errs) RL_WUR;

/* Set one option by its dotted name ("redis.url") from text (flag or env);
 * origin must outlive cfg (it may name a problem found by config_validate). */
int config_set_option(struct rl_config *cfg, const char *name, const char *text,
                      const char *origin, struct rl_errors *errs) RL_WUR;

/* The same, the object holding it not checked yet: config_check_option,
 * once every option of a source is set (rls.tls.cert_file, then key_file). */
int config_set_option_deferred(struct rl_config *cfg, const char *name, const char *text,
                               const char *origin, struct rl_errors *errs) RL_WUR;
int config_check_option(struct rl_config *cfg, const char *name, const char *origin,
                        struct rl_errors *errs) RL_WUR;

/* Cross-field checks after every source is applied; then the rule files of
 * rls.config are read (their problems are the config's). */
int config_validate(struct rl_config *cfg, struct rl_errors *errs) RL_WUR;

/*
 * What is allowed but likely a mistake or costly, each message with where
 * it is (a sliding_window_log whose limit makes each caller's key large):
 * printed by -t, logged at start and at every reload.
 */
void config_warnings(const struct rl_config *cfg, struct rl_errors *warns);

/*
 * Before a reload swaps `next` in: options that only a restart can change
 * (listen, workers, backend, redis.url, ...) take the running values; the
 * names of those the new file tried to change are added to *changed.
 */
void config_keep_restart_options(struct rl_config *next, const struct rl_config *running,
                                 struct rl_errors *changed);

/*
 * The last of the derived data, given by a module above this one: each
 * policy's metrics id is id_of(its name), and its overrides' policies count
 * under the same id; the policies of rls.config's rules count under
 * id_of("rls").
 */
void config_set_metrics_ids(struct rl_config *cfg, int (*id_of)(const char *name));

struct rl_config *config_ref(struct rl_config *cfg);
void config_unref(struct rl_config *cfg);

/* failure_mode as the file spells it: "open", "closed", "local". */
const char *config_failure_mode_name(enum rl_failure_mode m);

/* The family of original-request headers believed, auto resolved. */
static inline enum rl_request_headers
config_request_headers(const struct rl_config *cfg)
{
    if (cfg->request_headers != RL_REQHDR_AUTO)
        return cfg->request_headers;
    return cfg->forward_auth ? RL_REQHDR_FORWARDED : RL_REQHDR_ORIGINAL;
}
/* Policy by exact name, NULL when none. */
const struct rl_policy *config_policy(const struct rl_config *cfg, const char *name);

#endif
