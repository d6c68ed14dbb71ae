/*
 * rls_rules.h — envoyproxy/ratelimit's rule files (rls.config), read as they
 * are: one YAML file, or a directory of *.yaml / *.yml (subdirectories too,
 * names starting with '.' skipped, as a Kubernetes ConfigMap mounts them),
 * each `domain` with its nested `descriptors`.  Loaded by config_validate
 * with the rest of the configuration, its problems collected with the
 * others' (file, YAML path, line), immutable, freed with the config.
 *
 * A file is read by ytree.c from libyaml's events, its bounds applied as
 * they arrive; the rules are validated from that tree, which knows nothing
 * of YAML: another source (xDS's RateLimitConfig) can build the same tree
 * and go through the same validation.  Everything a rule set keeps lives in
 * one arena, freed at once.
 *
 * The matcher finds a request descriptor's rule as envoyproxy/ratelimit
 * does: at each entry an exact key and value first, then a value with '*'
 * (a glob: each '*' any run of bytes), in file order, then the key alone; a
 * rule applies only at the full depth of the descriptor.
 *
 * Each rule that counts carries a struct rl_policy, so check.c decides it
 * like any policy (rls.c drives that).  Beyond envoyproxy/ratelimit's keys a
 * rule may say `algorithm`, `window`, `burst`, `align` (in `rate_limit`),
 * `rate_limits: [...]` (several limits decided atomically), `mode` and
 * `sync_interval` (hybrid), `count_over_limit` (rls.c).
 */
#ifndef RL_RLS_RULES_H
#define RL_RLS_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "arena.h"
#include "rl.h"
#include "schema.h"

struct rl_policy;
struct ytree;

/* RateLimitResponse.RateLimit.Unit, envoy.type.v3.RateLimitUnit: the wire
 * values of both. */
enum rls_unit {
    RLS_UNIT_UNKNOWN = 0,
    RLS_UNIT_SECOND = 1,
    RLS_UNIT_MINUTE = 2,
    RLS_UNIT_HOUR = 3,
    RLS_UNIT_DAY = 4,
    RLS_UNIT_MONTH = 5,
    RLS_UNIT_YEAR = 6,
    RLS_UNIT_WEEK = 7
};

#define RLS_UNIT_COUNT 8

/* Bytes that may hold any byte (a decoder's, or a rule file's); not
 * NUL-terminated. */
struct rls_str {
    const char *p;
    size_t len;
};

struct rls_entry {
    struct rls_str key, value;
};

/* What envoyproxy/ratelimit reports of one limit (current_limit). */
struct rls_rule_limit {
    uint64_t requests_per_unit; /* 0: every hit is over it; at most RL_COST_MAX */
    enum rls_unit unit;         /* UNKNOWN: a `window` that is no unit */
    char *name;                 /* NULL: none */
    /* written with `unit`: duration_until_reset in whole seconds, the
     * window aligned to the epoch, as envoyproxy/ratelimit answers */
    int unit_form;
};

struct rls_rule;

/* The rules under one node: the domain or a rule with `descriptors`. */
struct rls_node {
    struct rls_rule *rules; /* file order */
    size_t nrules;
    struct rls_rule **exact; /* literal values, sorted by key then value */
    size_t nexact;
    struct rls_rule **bykey; /* no value, sorted by key */
    size_t nbykey;
    struct rls_rule **wild; /* values with '*', file order */
    size_t nwild;
};

struct rls_domain;

struct rls_rule {
    struct rls_str key;
    struct rls_str value;  /* p NULL: the key alone (counts per value) */
    struct rls_str *parts; /* a value with '*': the literal runs around them */
    size_t nparts;
    /* flags, bytes: a rule set holds up to RLS_RULES_MAX rules */
    uint8_t share_threshold; /* a wildcard's values share one count */
    uint8_t value_to_metric, detailed_metric, shadow_mode, quota_mode;
    uint8_t has_limit; /* rate_limit or rate_limits: the rule answers here */
    uint8_t unlimited;
    uint8_t dynamic_label; /* see label */
    /* count_over_limit: every hit counts, over the limit too (a charge, as
     * envoyproxy/ratelimit's INCRBY); count_set: the file said which (else
     * count_over is the default of its limits' form) */
    uint8_t count_over, count_set;
    struct rls_rule_limit *limits; /* as many as policy's */
    size_t nlimits;
    size_t zero;  /* 1 + the index of a limit of 0 (always over); 0: none */
    char **names; /* its limits' names, for `replaces` */
    size_t nnames;
    char **replaces;
    size_t nreplaces;
    /* Its limits as check.c decides them (never sent with a limit of 0:
     * every hit is over it); NULL when it has none (unlimited). */
    struct rl_policy *policy;
    /* Metrics: its path as envoyproxy/ratelimit names it
     * ("key1_value1.subkey1", "wild_foo*"); dynamic: detailed_metric or
     * value_to_metric on its path, the request's values go in instead. */
    char *label;
    int stat_id; /* metrics id of label, found on first use (atomic); -1 */
    const struct rls_domain *domain;
    struct rls_rule *parent;
    struct rls_node *node; /* its descriptors; NULL: none */
    size_t line;
};

struct rls_domain {
    struct rls_str name;
    char *file;
    struct rls_node node;
};

struct rls_rules {
    struct rls_domain *domains; /* sorted by name */
    size_t ndomains;
    size_t nrules;
    size_t nfiles;
    uint64_t hash;    /* FNV-1a of every file's name and bytes */
    struct arena mem; /* the rules, their strings, limits and policies */
    int refs;         /* atomic: the configs holding it (rules over xDS) */
};

/* Bounds of a rule set: more is a load error naming the bound. */
#define RLS_RULES_MAX 100000 /* rules in all files */
#define RLS_DEPTH_MAX 32     /* nested descriptors */
#define RLS_FILES_MAX 10000  /* files of a directory */
#define RLS_FILE_MAX (16 * 1024 * 1024)
/* A file's YAML, bounded as it is read: nesting of lists and mappings
 * (metadata's too), and nodes with every alias counted as the nodes it
 * names (a file without aliases stays well under it). */
#define RLS_YAML_DEPTH_MAX 100
#define RLS_YAML_NODES_MAX 8000000

/*
 * Load the rules of `where` (a file or a directory).  RL_ERR with every
 * problem added to errs, each "FILE:LINE: path: what"; RL_OK with *out.
 * Every rule's policy gets its uid from new_uid (unique in the process).
 */
int rls_rules_load(const char *where, uint64_t (*new_uid)(void), struct rls_rules **out,
                   struct rl_errors *errs) RL_WUR;
/*
 * The same from documents already read into trees, as the YAML files'
 * would be (rules over xDS: each RateLimitConfig resource's): docs[i]'s
 * problems are told as "NAME: path: what", NAME its resource's name.
 */
struct rls_doc {
    const char *name;
    const struct ytree *tree;
    /* the bytes it was read from, hashed with its name into the set's
     * hash (what knows a rule set: /rlconfig's text is kept by it) */
    const void *src;
    size_t src_len;
    /* NULL: tree holds every descriptor.  Else tree's top `descriptors`
     * list holds placeholders, and item(item_arg, i, &cause) gives the tree
     * whose root is descriptor i (valid until its next call; NULL: cause
     * says why it is none): a decoder converts them one at a time, and an
     * update never holds all of them beside the rules in force and the
     * rules it builds */
    const struct ytree *(*item)(void *item_arg, size_t i, const char **cause);
    void *item_arg;
};
int rls_rules_from_docs(const struct rls_doc *docs, size_t n, uint64_t (*new_uid)(void),
                        struct rls_rules **out, struct rl_errors *errs) RL_WUR;

/* Another holder of r (a config built over it); rls_rules_free drops one
 * and frees with the last. */
struct rls_rules *rls_rules_ref(struct rls_rules *r);
void rls_rules_free(struct rls_rules *r);

/* Every rule policy's metrics_id (they count under one name, see rls.c). */
void rls_rules_set_metrics_id(struct rls_rules *r, int id);

/* The domain named `name`; NULL when no file has it. */
const struct rls_domain *rls_rules_domain(const struct rls_rules *r, const char *name,
                                          size_t len);

/*
 * The rule of a descriptor of n entries under domain d: NULL when none
 * applies at its depth.  shared[i] (n of them) is set to the pattern an
 * entry counts under (a wildcard with share_threshold), else to NULL: the
 * entry's own value.
 */
const struct rls_rule *rls_rules_match(const struct rls_domain *d, const struct rls_entry *e,
                                       size_t n, const struct rls_str **shared);

/* The rule of domain d whose metrics label is `label` (stat_id: the label's
 * metrics id, or -1): NULL when none is (a label made of a request's
 * values: detailed_metric, value_to_metric; a descriptor's own limit). */
const struct rls_rule *rls_rules_by_label(const struct rls_domain *d, const char *label,
                                          size_t len, int stat_id);

/* Each '*' of pattern any run of bytes (empty too), the rest literally. */
bool rls_rules_glob(const struct rls_str *parts, size_t nparts, const char *s, size_t len);

/* Unit name ("minute") of u, any case as written; NULL for UNKNOWN. */
const char *rls_unit_name(enum rls_unit u);
/* Its length in ms (30 days a month, 365 a year, as envoyproxy/ratelimit);
 * 0 for UNKNOWN. */
int64_t rls_unit_ms(enum rls_unit u);

#endif
