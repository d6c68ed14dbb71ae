/*
 * body.h — the fields of a POST /check body, and a fast reader for the
 * bodies clients actually send.
 *
 * jansson builds a tree, a hash table and a string per member, the largest
 * part of a check's work for a body like {"key":"u42"} (docs/BENCHMARKS.md,
 * "Measurements behind the code").  Almost
 * every body is a flat object of plain ASCII strings and small integers, so
 * body_scan() reads exactly that shape in place and says RL_ERR for
 * anything else (escapes, non-ASCII, nesting, fractions, duplicates, any
 * syntax error): then jansson reads it, and its verdict and error message
 * are the ones the caller gets.  The fast path never accepts a body jansson
 * would refuse, and never reads one differently.  One member may nest: a
 * "limits" list, whose bytes it hands over unread (a check's own limits,
 * caller_limits.h): they are the same bytes for every check of a tenant,
 * read once by jansson and then known by their bytes; a list that is not
 * JSON is found when jansson reads it, and then the whole body is read by
 * jansson.
 */
#ifndef RL_BODY_H
#define RL_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct rl_body_fields {
    const char *key; /* NULL when absent (or null) */
    size_t key_len;
    const char *policy; /* NUL-terminated */
    size_t policy_len;
    const char *path;
    size_t path_len;
    const char *method; /* NUL-terminated */
    size_t method_len;
    int64_t cost; /* 1 when absent */
    int reserve;  /* "reserve": true (a reservation: check.h); 0 when absent */
    /* "limits": the list's bytes as the body has them, from '[' to ']' (the
     * scanner checks only that brackets and strings pair up: whoever reads
     * them reads them as JSON); NULL when absent or null */
    const char *limits;
    size_t limits_len;
    /* where body_scan puts the NUL-terminated copies */
    char policy_buf[RL_NAME_MAX + 1];
    char method_buf[16];
};

/* RL_OK: f holds the fields of buf[0..len), their values not checked yet;
 * RL_ERR: not the simple shape, ask jansson (f holds nothing useful). */
int body_scan(const char *buf, size_t len, struct rl_body_fields *f) RL_WUR;

#endif
