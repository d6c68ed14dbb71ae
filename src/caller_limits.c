/* caller_limits.c — see caller_limits.h. */
#include <stdlib.h>
#include <string.h>

#include "caller_limits.h"
#include "policy.h"
#include "util.h"

/* Plans are few; a bounded table, replaced slot by slot. */
#define MEMO_SLOTS 64
/* Longer lists are read every time rather than kept. */
#define MEMO_TEXT_MAX 2048

struct memo_entry {
    uint64_t hash;
    size_t len, n;
    struct rl_limit limits[RL_LIMITS_MAX];
    char text[]; /* len bytes */
};

struct rl_caller_limits {
    uint64_t k0, k1; /* the hash's key: callers choose the bytes */
    struct memo_entry *slot[MEMO_SLOTS];
};

struct rl_caller_limits *
caller_limits_new(void)
{
    struct rl_caller_limits *m = xcalloc(1, sizeof(*m));
    uint64_t seed = (uint64_t)now_monotonic_us() ^ (uint64_t)(uintptr_t)m;

    m->k0 = fnv1a(FNV1A_INIT, (const char *)&seed, sizeof(seed));
    m->k1 = fnv1a(m->k0 ^ 0x9e3779b97f4a7c15ULL, (const char *)&seed, sizeof(seed));
    return m;
}

void
caller_limits_free(struct rl_caller_limits *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < MEMO_SLOTS; i++)
        free(m->slot[i]);
    free(m);
}

static bool
zones_current(const struct rl_limit *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!period_tz_current(l[i].period.tz))
            return false;
    return true;
}

bool
caller_limits_find(struct rl_caller_limits *m, const char *text, size_t len,
                   struct rl_limit *out, size_t *n)
{
    uint64_t h;
    const struct memo_entry *e;

    if (m == NULL || len > MEMO_TEXT_MAX)
        return false;
    h = siphash24(m->k0, m->k1, text, len);
    e = m->slot[h % MEMO_SLOTS];
    if (e == NULL || e->hash != h || e->len != len || memcmp(e->text, text, len) != 0 ||
        !zones_current(e->limits, e->n))
        return false;
    memcpy(out, e->limits, e->n * sizeof(*out));
    *n = e->n;
    return true;
}

int
caller_limits_read(struct rl_caller_limits *m, const char *text, size_t len, struct json_t *v,
                   struct rl_limit *out, size_t *n, char **cause)
{
    struct memo_entry *e;
    uint64_t h;

    if (policy_parse_limits(v, out, n, cause) != RL_OK)
        return RL_ERR;
    if (m == NULL || text == NULL || len > MEMO_TEXT_MAX)
        return RL_OK;
    h = siphash24(m->k0, m->k1, text, len);
    e = m->slot[h % MEMO_SLOTS];
    if (e == NULL || e->len < len) {
        free(e);
        e = m->slot[h % MEMO_SLOTS] = xmalloc(sizeof(*e) + len);
    }
    e->hash = h;
    e->len = len;
    e->n = *n;
    memcpy(e->limits, out, *n * sizeof(*out));
    memcpy(e->text, text, len);
    return RL_OK;
}

int
caller_limits_allowed(const struct rl_policy *p, const struct rl_limit *l, size_t n,
                      char **cause)
{
    /* the policy's caps are counted with them, in one script call */
    if (n + p->ncaps > RL_LIMITS_MAX) {
        *cause = xasprintf("limits: must be a list of 1..%zu limits under policy \"%s\" (its "
                           "request_limits_cap takes %zu of %d)",
                           RL_LIMITS_MAX - p->ncaps, p->name, p->ncaps, RL_LIMITS_MAX);
        return RL_ERR;
    }
    if (p->request_limits_max == 0)
        return RL_OK;
    for (size_t i = 0; i < n; i++) {
        const char *what = l[i].limit > p->request_limits_max   ? "limit"
                           : l[i].burst > p->request_limits_max ? "burst"
                                                                : NULL;
        if (what != NULL) {
            *cause = xasprintf("limits[%zu].%s: at most %lld for policy \"%s\" "
                               "(its request_limits_max)",
                               i, what, (long long)p->request_limits_max, p->name);
            return RL_ERR;
        }
    }
    return RL_OK;
}
