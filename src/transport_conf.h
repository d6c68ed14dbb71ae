/*
 * transport_conf.h — the settings of the transports, as config.c reads them:
 * the HTTP layer's bounds, the gRPC listener of Envoy's rate limit service,
 * Redis (Sentinel, TLS).  A transport includes this, not config.h: it needs
 * its own settings, not the policies.
 */
#ifndef RL_TRANSPORT_CONF_H
#define RL_TRANSPORT_CONF_H

#include <stdint.h>

#include "schema.h"

struct rls_rules;

struct rl_sentinel_conf {
    char *master;            /* the monitored master's name */
    struct rl_strlist nodes; /* "host:port" of the sentinels */
    char *password;          /* AUTH to each sentinel (its requirepass); NULL: none */
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

/* rls.header_names: envoyproxy/ratelimit's three headers under these names
 * instead of /check's (all three, or none). */
struct rl_rls_header_names {
    char *limit;     /* the limit's requests_per_unit */
    char *remaining; /* its limit_remaining */
    char *reset;     /* seconds until its window ends */
};

/*
 * rls: Envoy's rate limit service (envoy.service.ratelimit.v3) over gRPC on
 * a listener of its own, with envoyproxy/ratelimit's YAML rule files
 * (docs/API.md, "Envoy's rate limit service").
 */
struct rl_rls_conf {
    char *listen; /* "host:port" or "unix:PATH"; NULL: no gRPC listener */
    struct rl_rls_tls_conf tls;
    char *config;         /* one YAML file, or a directory of *.yaml / *.yml */
    int response_headers; /* the RateLimit fields in response_headers_to_add */
    /* limit != NULL: envoyproxy/ratelimit's three headers instead */
    struct rl_rls_header_names header_names;
    int shadow_mode;                     /* every OVER_LIMIT answered OK (counted) */
    int envoy_metrics;                   /* the rules' counts under its names too */
    int all_or_nothing;                  /* a request's descriptors in one decision */
    double near_limit_ratio;             /* hits past this share of a limit are "near" */
    int request_limits;                  /* a descriptor's own limit counts (else refused) */
    int64_t request_limits_max;          /* the largest requests_per_unit it may ask; 0: any */
    int64_t max_message;                 /* bytes of one gRPC message, either way */
    int64_t max_concurrent_streams;      /* per connection (SETTINGS) */
    int64_t max_header_list;             /* bytes of a stream's header list */
    int64_t max_connections;             /* open at once, the whole daemon */
    int64_t idle_timeout_ms;             /* a connection with no stream open */
    int64_t max_connection_age_ms;       /* then GOAWAY (+/- 10% each); 0: never */
    int64_t max_connection_age_grace_ms; /* after that GOAWAY, then closed */
    /* The rules of `config`, read by config_validate at every load (a
     * reload reads them again); NULL without config.  Not a field. */
    struct rls_rules *rules;
};

#endif
