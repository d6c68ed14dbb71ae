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

/*
 * path_fold: what an application's router may take as the same path, made
 * the same before matching (the config's patterns too), so that a policy
 * on /login also meets /Login, /login;jsessionid=x and /login/.
 */
#define RL_PATHFOLD_CASE 0x1   /* ASCII letters to lower case */
#define RL_PATHFOLD_PARAMS 0x2 /* ";..." dropped from every segment */
#define RL_PATHFOLD_SLASH 0x4  /* a trailing '/' does not count (policy.c) */

/* Fold a normalised path in place (case, params; the slash is policy.c's
 * to compare); returns its new length, never longer. */
size_t pathnorm_fold(char *path, size_t len, unsigned folds);

#endif
