/*
 * query.h — a request target's query string (RFC 3986 §3.4, the HTML form
 * encoding: '&' between parameters, '=' in each, %XX and '+' for a space),
 * read into the parameters a route names, strictly: a name it does not
 * name, a name given twice, a bad escape or a value too long is an error,
 * as an unknown option of the configuration is.
 */
#ifndef RL_QUERY_H
#define RL_QUERY_H

#include <stdbool.h>
#include <stddef.h>

#include "rl.h"

struct query_param {
    const char *name; /* what the route takes */
    char *out;        /* the value, decoded and NUL-terminated */
    size_t size;      /* of out, the NUL included */
    size_t len;       /* set: the value's length */
    bool seen;        /* set: given */
};

/*
 * The query of `target` (a request-target: what follows its first '?', up
 * to a '#'; none: no parameter) into params[0..n).  RL_ERR with *why
 * (static text) and *which (the param it is about, -1 for one the route
 * does not take) when it cannot be read.
 */
int query_parse(const char *target, size_t len, struct query_param *params, size_t n,
                const char **why, int *which) RL_WUR;

#endif
