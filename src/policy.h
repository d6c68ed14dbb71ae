/*
 * policy.h — the policy model: a policy, its match, its limits (algo.h),
 * its overrides and the identity chain that names its callers; and which
 * policy applies: policies are tried in file order and the first whose match
 * fits the request's path and method wins.
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netaddr.h"
#include "rl.h"
#include "schema.h"

struct rl_limit;
struct policy_text;

/* exact: every check asks the backend; hybrid: see hybrid.h */
enum rl_policy_mode { RL_MODE_EXACT = 0, RL_MODE_HYBRID };

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
    int64_t sync_interval_ms;   /* hybrid: counts go to Redis this often */
    int64_t max_delay_ms;       /* a check that fits within this is held, not denied; 0: off */
    int64_t reservation_ttl_ms; /* a reservation may be settled this long */
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
    /* its answers' constant text (policy_text.h), owned; a copy of the
     * policy has text_self pointing elsewhere and never uses it */
    struct policy_text *text;
    const struct rl_policy *text_self;
};

/* The JSON rows of a policy ("policies": [...] of the config, schema.h),
 * and of a policy's "identity" chain (the config's top-level one too). */
extern const struct schema policy_schema;
extern const struct schema_custom policy_identity_type;

/* What a policy takes from the options around it when it is finalised. */
struct rl_policy_defaults {
    unsigned pathflags;               /* RL_PATHNORM_* the paths are normalised with */
    unsigned path_fold;               /* RL_PATHFOLD_* (pathnorm.h) */
    int64_t ipv4_prefix, ipv6_prefix; /* the top-level values */
};

/*
 * Builds what is derived from policies[i]'s fields (normalised patterns, its
 * uid, its overrides' policies, defaults): after the file and again after
 * flags, so it rebuilds rather than adds.  Problems (a pattern that cannot
 * be normalised) go to ctx.
 */
void policy_finalize(struct rl_policy *p, size_t i, const struct rl_policy_defaults *d,
                     struct schema_ctx *ctx);

/*
 * What is allowed in p but likely a mistake or costly, each message with
 * where it is (file, then path, "policies[0]"): a sliding_window_log whose
 * limit makes each caller's key large.
 */
void policy_warnings(const struct rl_policy *p, const char *path, const char *file,
                     struct rl_errors *warns);

/* A uid no other policy of this process has (struct rl_policy.uid). */
uint64_t policy_new_uid(void);

/* The RL_M_* bit of a method name (any case), 0 when unknown. */
unsigned policy_method_bit(const char *name);

/* The policy for a caller: an override listing `id` (the typed identity of
 * identity_resolve: "k:alice", "ip:10.0.0.7"), else p itself.  A key never
 * matches an address entry, nor an address a key entry. */
const struct rl_policy *policy_for(const struct rl_policy *p, const char *id, size_t idlen);

/* Whether p has a concurrency limit (the one that holds leases: one per
 * policy at most), and its index. */
bool policy_lease_limit(const struct rl_policy *p, size_t *index);

/*
 * A check's own limits (POST /check "limits", a policy with
 * request_limits): the JSON list v read by the rows and checks of a
 * policy's "limits", into out[0..*n) (at most RL_LIMITS_MAX).  RL_ERR:
 * *cause names the first problem, "limits[1].window: ..." (caller frees).
 * The zones of their periods are the ones loaded (or loaded now, once).
 */
int policy_parse_limits(struct json_t *v, struct rl_limit *out, size_t *n,
                        char **cause) RL_WUR;

/* NULL when no policy of policies[0..n) matches (the check is then
 * allowed, policy null); path_fold: RL_PATHFOLD_* (pathnorm.h), as the
 * patterns were folded. */
const struct rl_policy *policy_match(const struct rl_policy *policies, size_t n,
                                     unsigned path_fold, const char *path, size_t path_len,
                                     unsigned method_bit);

/* '*' matches any run of bytes (also '/'), '?' exactly one byte. */
bool policy_glob(const char *pattern, const char *s, size_t len);

#endif
