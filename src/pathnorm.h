/*
 * pathnorm.h — the path a policy is matched against, made canonical the way
 * the application behind the proxy will see it (RFC 3986 §6.2.2): a caller
 * who writes /%61pi/./items or //api/items must meet the /api/items policy.
 *
 * Paths the application might read in more than one way cannot be made
 * canonical and are refused, not guessed: an encoded '/' (%2F), a NUL (raw
 * or %00), a ".." that climbs above the root, a broken %-escape.
 */
#ifndef RL_PATHNORM_H
#define RL_PATHNORM_H

#include <stddef.h>

#include "rl.h"

/* Do not merge runs of '/' into one (for apps that route on empty segments). */
#define RL_PATHNORM_KEEP_SLASHES 0x1

/*
 * Normalise the path `in` (len bytes, starting with '/'; no query string)
 * into `out`, which must hold len + 1 bytes: the result is never longer.
 * On RL_OK *outlen is its length and out is NUL-terminated.  On RL_ERR
 * *cause (the caller frees it) says why the path cannot be normalised.
 */
int pathnorm(const char *in, size_t len, unsigned flags, char *out, size_t *outlen,
             char **cause) RL_WUR;

#endif
