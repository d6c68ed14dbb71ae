/* redis_url.c — see redis_url.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "redis_url.h"
#include "util.h"

static int
parse_int(const char *s, size_t n, long lo, long hi, int *out)
{
    long v = 0;

    if (n == 0 || n > 9)
        return RL_ERR;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return RL_ERR;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return RL_ERR;
    *out = (int)v;
    return RL_OK;
}

int
redis_url_parse(const char *url, struct rl_redis_url *out, char **cause)
{
    const char *p, *at, *slash, *colon, *hostend;

    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        if (url[7] != '/') {
            *cause = xstrdup("a unix URL needs an absolute path: unix:///path/redis.sock");
            return RL_ERR;
        }
        out->path = xstrdup(url + 7);
        return RL_OK;
    }
    if (strncmp(url, "rediss://", 9) == 0) {
        out->tls = 1;
        p = url + 9;
    } else if (strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else {
        *cause = xstrdup("must be redis://[user:password@]host:port[/db] "
                         "(rediss:// for TLS) or unix:///path/redis.sock");
        return RL_ERR;
    }
    slash = strchr(p, '/');
    at = memrchr(p, '@', slash ? (size_t)(slash - p) : strlen(p));
    if (at != NULL) {
        const char *sep = memchr(p, ':', (size_t)(at - p));
        if (sep != NULL) {
            if (sep > p)
                out->username = xstrndup(p, (size_t)(sep - p));
            out->password = xstrndup(sep + 1, (size_t)(at - sep - 1));
        } else if (at > p) {
            out->password = xstrndup(p, (size_t)(at - p));
        }
        p = at + 1;
    }
    hostend = slash ? slash : p + strlen(p);
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hostend - p));
        if (rb == NULL)
            goto bad;
        out->host = xstrndup(p + 1, (size_t)(rb - p - 1));
        colon = rb + 1 < hostend && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 != hostend && colon == NULL)
            goto bad;
    } else {
        colon = memchr(p, ':', (size_t)(hostend - p));
        out->host = xstrndup(p, (size_t)((colon ? colon : hostend) - p));
    }
    if (out->host[0] == '\0')
        goto bad;
    if (colon != NULL &&
        parse_int(colon + 1, (size_t)(hostend - colon - 1), 1, 65535, &out->port) != RL_OK)
        goto bad;
    if (slash != NULL && slash[1] != '\0' &&
        parse_int(slash + 1, strlen(slash + 1), 0, 1000000, &out->db) != RL_OK)
        goto bad;
    return RL_OK;
bad:
    redis_url_clear(out);
    *cause = xstrdup("must be redis://[user:password@]host:port[/db] "
                     "(rediss:// for TLS) or unix:///path/redis.sock");
    return RL_ERR;
}

void
redis_url_clear(struct rl_redis_url *u)
{
    free(u->host);
    free(u->path);
    free(u->username);
    if (u->password != NULL) {
        /* explicit_bzero keeps the compiler from skipping the wipe */
        explicit_bzero(u->password, strlen(u->password));
        free(u->password);
    }
    memset(u, 0, sizeof(*u));
}

char *
redis_url_display(const struct rl_redis_url *u)
{
    if (u->path != NULL)
        return xasprintf("unix://%s", u->path);
    if (strchr(u->host, ':') != NULL)
        return xasprintf("%s://[%s]:%d/%d", u->tls ? "rediss" : "redis", u->host, u->port,
                         u->db);
    return xasprintf("%s://%s:%d/%d", u->tls ? "rediss" : "redis", u->host, u->port, u->db);
}

int
redis_url_hostport(const char *s, char **host, int *port)
{
    const char *colon = strrchr(s, ':');
    size_t hlen;

    if (colon == NULL || colon == s ||
        parse_int(colon + 1, strlen(colon + 1), 1, 65535, port) != RL_OK)
        return RL_ERR;
    hlen = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hlen <= 2 || s[hlen - 1] != ']')
            return RL_ERR;
        *host = xstrndup(s + 1, hlen - 2);
    } else {
        if (memchr(s, ':', hlen) != NULL)
            return RL_ERR;
        *host = xstrndup(s, hlen);
    }
    return RL_OK;
}
