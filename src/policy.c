/* policy.c — see policy.h. */
#include <stdbool.h>
#include <string.h>

#include "policy.h"
#include "config.h"
#include "pathnorm.h"

bool
policy_glob(const char *p, const char *s, size_t len)
{
    const char *star = NULL;
    size_t i = 0, mark = 0;

    /* Iterative with one backtrack point: linear-ish, no recursion to blow. */
    while (i < len) {
        if (*p == '*') {
            star = p++;
            mark = i;
        } else if (*p != '\0' && (*p == '?' || *p == s[i])) {
            p++;
            i++;
        } else if (star != NULL) {
            p = star + 1;
            i = ++mark;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

/* s (n bytes) and path (len) equal, or equal but for one trailing '/' of
 * one of them (path_fold "trailing_slash"). */
static bool
same_but_slash(const char *s, size_t n, const char *path, size_t len)
{
    if (n == len + 1 && s[n - 1] == '/')
        n--;
    else if (len == n + 1 && path[len - 1] == '/')
        len--;
    return n == len && memcmp(s, path, n) == 0;
}

static bool
match_fits(const struct rl_match *m, const char *path, size_t len, unsigned method,
           unsigned folds)
{
    if (m->methods != 0 && (m->methods & method) == 0)
        return false;
    if (m->path != NULL) {
        size_t n = strlen(m->path);
        if (folds & RL_PATHFOLD_SLASH)
            return same_but_slash(m->path, n, path, len);
        return n == len && memcmp(m->path, path, len) == 0;
    }
    if (m->path_prefix != NULL) {
        size_t n = strlen(m->path_prefix);
        /* "/api/" meets "/api" when the slash does not count */
        if ((folds & RL_PATHFOLD_SLASH) && n > 1 && m->path_prefix[n - 1] == '/' &&
            len == n - 1 && memcmp(m->path_prefix, path, len) == 0)
            return true;
        return n <= len && memcmp(m->path_prefix, path, n) == 0;
    }
    if (m->path_glob != NULL)
        return policy_glob(m->path_glob, path, len);
    return true;
}

const struct rl_policy *
policy_match(const struct rl_config *cfg, const char *path, size_t len, unsigned method)
{
    for (size_t i = 0; i < cfg->npolicies; i++)
        if (match_fits(&cfg->policies[i].match, path, len, method, cfg->path_fold))
            return &cfg->policies[i];
    return NULL;
}
