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
#include "rl.h"
#include "schema.h"

struct rl_limit;
struct rls_rules;

enum rl_backend_kind { RL_BACKEND_REDIS = 0, RL_BACKEND_MEMORY };
enum rl_failure_mode { RL_FAIL_OPEN = 0, RL_FAIL_CLOSED, RL_FAIL_LOCAL };
/* exact: every check asks the backend; hybrid: see hybrid.h */
enum rl_policy_mode { RL_MODE_EXACT = 0, RL_MODE_HYBRID };

/* forwarded_request_headers: which family of original-request headers the
 * trusted proxies write (the other may be the client's, passed through).
 * auto: forwarded with forward_auth on (what Traefik and Caddy send, and
 * both pass a client's own X-Original-URI on), original otherwise. */
enum rl_request_headers { RL_REQHDR_ORIGINAL = 0, RL_REQHDR_FORWARDED, RL_REQHDR_AUTO };
/* unnormalizable_path: what a path that cannot be normalised gets */
enum rl_bad_path { RL_BADPATH_REJECT = 0, RL_BADPATH_RAW };
/* x_ratelimit_reset: seconds from now, or the Unix time of the reset */
enum rl_reset_format { RL_RESET_DELTA = 0, RL_RESET_EPOCH };

/* trusted_header: a header read only from a peer in trusted_proxies (one
 * the proxy sets itself, after authenticating the client) */
enum rl_id_kind {
    RL_ID_BODY = 0,
    RL_ID_HEADER,
    RL_ID_FORWARDED,
    RL_ID_PEER,
    RL_ID_TRUSTED_HEADER
};

/* Parts of a compound source ("forwarded+body") at most. */
#define RL_ID_PARTS_MAX 3

struct rl_id_source {
    enum rl_id_kind kind;
    char *header;              /* RL_ID_HEADER, RL_ID_TRUSTED_HEADER: its name */
    struct rl_id_source *also; /* a compound's next part (owned), or NULL */
};

struct rl_identity_chain {
    struct rl_id_source *v;
    size_t n;
};

/* HTTP methods a policy can match, as a bit set. */
enum {
    RL_M_GET = 1 << 0,
    RL_M_HEAD = 1 << 1,
    RL_M_POST = 1 << 2,
    RL_M_PUT = 1 << 3,
    RL_M_DELETE = 1 << 4,
    RL_M_PATCH = 1 << 5,
    RL_M_OPTIONS = 1 << 6,
    RL_M_CONNECT = 1 << 7,
    RL_M_TRACE = 1 << 8
};

struct rl_match {
    char *path; /* exact */
    char *path_prefix;
    char *path_glob;  /* '*' any run of bytes, '?' one byte */
    unsigned methods; /* 0 = any */
};

struct rl_policy;

/*
 * Limits of their own for some callers (a tier, a partner's keys).  Each
 * override carries a whole policy that shares its parent's name, match and
 * keys' hash tag, so the rest of the daemon sees just another policy.
 */
struct rl_override {
    /* typed, as written: "key:alice", "ip:10.0.0.7", "ip:10.1.0.0/16" */
    struct rl_strlist identities;
    /* built from identities after parsing; not fields */
    struct rl_cidr_list ips;
    char **keys; /* the values of "key:" entries (not owned) */
    size_t nkeys;
    struct rl_limit *limits;
    size_t nlimits;
    struct rl_policy *as_policy; /* built after parsing; not a field */
};

/* request_limits_cap: the most caps a policy has (a caller's own limits
 * then number at most RL_LIMITS_MAX minus the policy's caps). */
#define RL_CAPS_MAX 4

struct rl_policy {
    char *name;
    struct rl_match match;
    struct rl_limit *limits;
    size_t nlimits;
    int shadow;
    struct rl_identity_chain identity; /* n == 0: the global chain */
    struct rl_override *overrides;
    size_t noverrides;
    int metrics_id; /* config_set_metrics_ids() */
    uint64_t uid;   /* never the same for two policies of one
                                 * process, across reloads (an address may be) */
    enum rl_policy_mode mode;
    int64_t sync_interval_ms; /* hybrid: counts go to Redis this often */
    int64_t max_delay_ms;     /* a check that fits within this is held, not denied; 0: off */
    int64_t ipv4_prefix, ipv6_prefix; /* 0: the top-level value */
    int request_limits;               /* a check may bring its own limits ("limits") */
    int64_t request_limits_max;       /* the largest limit (or burst) it may ask; 0: any */
    /* what a check bringing its own limits is counted against as well
     * (their keys ":cap-<tag>:...", every caller's own) */
    struct rl_limit *caps;
    size_t ncaps;
    /* derived by finalize, not fields: */
    int fold4, fold6; /* the address identity's network, in bits */
    int limit_ids;    /* a limit (or an override's) has an identity of its own:
                       * every key of the policy in one hash tag (identity.h) */
};

struct rl_sentinel_conf {
    char *master;            /* the monitored master's name */
    struct rl_strlist nodes; /* "host:port" of the sentinels */
};

/* redis.tls: Redis over TLS (redis_tls.c). */
struct rl_tls_conf {
    int enabled;     /* or a rediss:// URL */
    char *ca_file;   /* NULL: the system's store */
    char *cert_file; /* client certificate (mTLS), with key_file */
    char *key_file;
    char *server_name; /* SNI and the name verified; NULL: the host */
    int verify;
};

struct rl_redis_conf {
    char *url;
    struct rl_strlist cluster;        /* seed nodes "host:port"; n > 0: Cluster */
    struct rl_sentinel_conf sentinel; /* master != NULL: Sentinel */
    int64_t timeout_ms;
    int64_t connect_timeout_ms;
    int64_t max_pending; /* checks outstanding per connection */
    int64_t coalesce;    /* checks per script call at most; 1: off */
    char *key_prefix;
    char *username;
    char *password;
    char *password_file;    /* read into password at every load */
    int password_from_file; /* password came from password_file */
    struct rl_tls_conf tls;
};

/* The HTTP layer's bounds (http.c); every one reloadable. */
struct rl_http_conf {
    int64_t header_timeout_ms; /* first byte of a request to its last header */
    int64_t body_timeout_ms;   /* end of the head to the end of the body */
    int64_t idle_timeout_ms;   /* keep-alive with nothing pending */
    int64_t max_header_bytes;  /* request line + header fields */
    int64_t max_pipelined;     /* requests read ahead of their answers */
    int64_t max_connections;   /* open at once, the whole daemon */
    int64_t drain_idle_ms;     /* draining: the grace for a next request */
    int64_t max_buffered;      /* request bytes buffered, the whole daemon (gRPC too) */
};

/* rls.tls: the gRPC listener over TLS, ALPN "h2" (mTLS with client_ca_file). */
struct rl_rls_tls_conf {
    char *cert_file; /* with key_file: TLS on; both absent: h2c */
    char *key_file;
    char *client_ca_file; /* clients must present a certificate it signed */
};

/*
 * rls: Envoy's rate limit service (envoy.service.ratelimit.v3) over gRPC on
 * a listener of its own, with envoyproxy/ratelimit's YAML rule files
 * (docs/API.md, "Envoy's rate limit service").
 */
struct rl_rls_conf {
    char *listen; /* "host:port" or "unix:PATH"; NULL: no gRPC listener */
    struct rl_rls_tls_conf tls;
    char *config;                   /* one YAML file, or a directory of *.yaml / *.yml */
    int response_headers;           /* the RateLimit fields in response_headers_to_add */
    int shadow_mode;                /* every OVER_LIMIT answered OK (counted) */
    int all_or_nothing;             /* a request's descriptors in one decision */
    double near_limit_ratio;        /* hits past this share of a limit are "near" */
    int request_limits;             /* a descriptor's own limit counts (else refused) */
    int64_t request_limits_max;     /* the largest requests_per_unit it may ask; 0: any */
    int64_t max_message;            /* bytes of one gRPC message, either way */
    int64_t max_concurrent_streams; /* per connection (SETTINGS) */
    int64_t max_header_list;        /* bytes of a stream's header list */
    int64_t max_connections;        /* open at once, the whole daemon */
    int64_t idle_timeout_ms;        /* a connection with no stream open */
    /* The rules of `config`, read by config_validate at every load (a
     * reload reads them again); NULL without config.  Not a field. */
    struct rls_rules *rules;
};

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
    int64_t max_inflight;      /* per worker; past it a fast 503 */
    int64_t max_delayed;       /* per worker: checks held for max_delay at once */
    int deny_cache;            /* answer known denials locally */
    int forward_auth;          /* any method on /check and /check/... */
    int64_t access_log;        /* log one check in N; 0: off */
    int64_t deny_cache_size;   /* slots per worker */
    int64_t hybrid_table_size; /* hybrid keys known per worker, at most */
    int64_t shutdown_grace_ms;
    struct rl_http_conf http;
    struct rl_rls_conf rls;
    enum rl_log_level log_level;
    struct rl_policy *policies;
    size_t npolicies;
    char *admin_listen;     /* NULL: no admin API (admin.h) */
    int admin_allow_remote; /* a non-loopback admin_listen is meant */
    char *admin_token_file;
    char *admin_token; /* read from it at every load; not a field */

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

/* The RL_M_* bit of a method name (any case), 0 when unknown. */
unsigned config_method_bit(const char *name);

/* failure_mode as the file spells it: "open", "closed", "local". */
const char *config_failure_mode_name(enum rl_failure_mode m);

/* The policy for a caller: an override listing `id` (the typed identity of
 * identity_resolve: "k:alice", "ip:10.0.0.7"), else p itself.  A key never
 * matches an address entry, nor an address a key entry. */
const struct rl_policy *config_policy_for(const struct rl_policy *p, const char *id,
                                          size_t idlen);

/*
 * A check's own limits (POST /check "limits", a policy with
 * request_limits): the JSON list v read by the rules of a policy's
 * "limits", into out[0..*n) (at most RL_LIMITS_MAX).  RL_ERR: *cause names
 * the first problem, "limits[1].window: ..." (caller frees).  The zones of
 * their periods are the ones loaded (or loaded now, once).
 */
int config_parse_limits(struct json_t *v, struct rl_limit *out, size_t *n,
                        char **cause) RL_WUR;

/* The family of original-request headers believed, auto resolved. */
static inline enum rl_request_headers
config_request_headers(const struct rl_config *cfg)
{
    if (cfg->request_headers != RL_REQHDR_AUTO)
        return cfg->request_headers;
    return cfg->forward_auth ? RL_REQHDR_FORWARDED : RL_REQHDR_ORIGINAL;
}
/* A uid no other policy of this process has (struct rl_policy.uid). */
uint64_t config_new_uid(void);

/* Whether p has a concurrency limit (the one that holds leases: config.c
 * allows one per policy), and its index. */
bool config_lease_limit(const struct rl_policy *p, size_t *index);

/* Policy by exact name, NULL when none. */
const struct rl_policy *config_policy(const struct rl_config *cfg, const char *name);

#endif
