/* netaddr.c — see netaddr.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netaddr.h"
#include "util.h"

static int
parse_port(const char *s, int *port)
{
    char *end;
    long v;

    if (*s < '0' || *s > '9')
        return RL_ERR;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > 65535)
        return RL_ERR;
    *port = (int)v;
    return RL_OK;
}

int
listen_addr_parse(const char *s, struct rl_listen_addr *out, char **cause)
{
    char host[64];
    const char *colon;
    size_t hlen;
    int port;

    memset(out, 0, sizeof(*out));
    if (strncmp(s, "unix:", 5) == 0) {
        struct sockaddr_un *sun = (struct sockaddr_un *)&out->ss;
        const char *path = s + 5;
        if (*path == '\0' || strlen(path) >= sizeof(sun->sun_path)) {
            *cause = xasprintf("a unix socket path of 1..%zu bytes is needed",
                               sizeof(sun->sun_path) - 1);
            return RL_ERR;
        }
        sun->sun_family = AF_UNIX;
        strcpy(sun->sun_path, path);
        out->family = AF_UNIX;
        out->len = sizeof(*sun);
        out->path = xstrdup(path);
        return RL_OK;
    }
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (rb == NULL || rb[1] != ':')
            goto bad;
        hlen = (size_t)(rb - s - 1);
        if (hlen >= sizeof(host))
            goto bad;
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            goto bad;
        hlen = (size_t)(colon - s);
        if (hlen >= sizeof(host))
            goto bad;
        memcpy(host, s, hlen);
        host[hlen] = '\0';
    }
    if (parse_port(colon + 1, &port) != RL_OK)
        goto bad;
    if (s[0] == '[') {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
            goto bad;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        out->family = AF_INET6;
        out->len = sizeof(*sin6);
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
            goto bad;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        out->family = AF_INET;
        out->len = sizeof(*sin);
    }
    return RL_OK;
bad:
    *cause = xstrdup("must be an address like \"127.0.0.1:8080\", "
                     "\"[::1]:8080\" or \"unix:/path.sock\"");
    return RL_ERR;
}

void
listen_addr_clear(struct rl_listen_addr *a)
{
    free(a->path);
    a->path = NULL;
}

/* ":port" with 1..5 digits, or nothing. */
static bool
port_suffix_ok(const char *s, size_t n)
{
    if (n == 0)
        return true;
    if (s[0] != ':' || n < 2 || n > 6)
        return false;
    for (size_t i = 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

int
ip_parse(const char *s, size_t len, int *family, uint8_t addr[16])
{
    char buf[64];
    const char *p = s;
    size_t n = len;

    if (n >= 2 && s[0] == '[') {
        const char *rb = memchr(s, ']', len);
        if (rb == NULL || !port_suffix_ok(rb + 1, len - (size_t)(rb + 1 - s)))
            return RL_ERR;
        p = s + 1;
        n = (size_t)(rb - p);
    }
    if (n == 0 || n >= sizeof(buf))
        return RL_ERR;
    memcpy(buf, p, n);
    buf[n] = '\0';
    memset(addr, 0, 16);
    if (inet_pton(AF_INET6, buf, addr) == 1) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(addr, mapped, 12) == 0) {
            memmove(addr, addr + 12, 4);
            memset(addr + 4, 0, 12);
            *family = AF_INET;
        } else {
            *family = AF_INET6;
        }
        return RL_OK;
    }
    /* IPv4, possibly with ":port" (X-Forwarded-For from some proxies). */
    char *colon = strchr(buf, ':');
    if (colon != NULL && p == s) {
        if (!port_suffix_ok(colon, strlen(colon)))
            return RL_ERR;
        *colon = '\0';
    }
    if (inet_pton(AF_INET, buf, addr) == 1) {
        *family = AF_INET;
        return RL_OK;
    }
    return RL_ERR;
}

void
ip_format(int family, const uint8_t *addr, char *buf, size_t size)
{
    if (inet_ntop(family, addr, buf, (socklen_t)size) == NULL && size > 0)
        buf[0] = '\0';
}

/* Clear every bit of addr past `bits`. */
static void
mask_bits(uint8_t *addr, int bits, int total)
{
    for (int i = 0; i < total / 8; i++, bits -= 8) {
        if (bits >= 8)
            continue;
        addr[i] &= bits > 0 ? (uint8_t)(0xff << (8 - bits)) : 0;
    }
}

void
ip_format_net(int family, const uint8_t *addr, int prefix, char *buf, size_t size)
{
    int total = family == AF_INET ? 32 : 128;
    uint8_t net[16];
    size_t n;

    if (prefix <= 0 || prefix >= total) {
        ip_format(family, addr, buf, size);
        return;
    }
    memcpy(net, addr, 16);
    mask_bits(net, prefix, total);
    ip_format(family, net, buf, size);
    n = strlen(buf);
    snprintf(buf + n, size > n ? size - n : 0, "/%d", prefix);
}

void
cidr_fold(struct rl_cidr *c, int v4, int v6)
{
    int cut = c->family == AF_INET ? v4 : v6;

    if (cut > 0 && c->prefix > cut)
        c->prefix = cut;
    mask_bits(c->addr, c->prefix, c->family == AF_INET ? 32 : 128);
}

int
cidr_parse(const char *s, struct rl_cidr *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    char buf[64];
    long p;
    char *end;

    memset(out, 0, sizeof(*out));
    if (alen == 0 || alen >= sizeof(buf))
        return RL_ERR;
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    /* Parsed here rather than by ip_parse, which folds mapped addresses and
     * accepts ports: a CIDR has no port, and "::ffff:a.b.c.d/104" is a
     * mapped range whose prefix counts from the IPv6 side. */
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
    } else {
        return RL_ERR;
    }
    if (slash == NULL) {
        p = out->family == AF_INET ? 32 : 128;
    } else {
        errno = 0;
        p = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || errno != 0 || p < 0 ||
            p > (out->family == AF_INET ? 32 : 128))
            return RL_ERR;
    }
    if (out->family == AF_INET6 && memcmp(out->addr, mapped, 12) == 0) {
        /* clients arrive folded to IPv4, so the range must be IPv4 too */
        if (p < 96)
            return RL_ERR;
        memmove(out->addr, out->addr + 12, 4);
        memset(out->addr + 4, 0, 12);
        out->family = AF_INET;
        p -= 96;
    }
    out->prefix = (int)p;
    return RL_OK;
}

static bool
cidr_match(const struct rl_cidr *c, int family, const uint8_t *addr)
{
    int bits = c->prefix, i = 0;

    if (c->family != family)
        return false;
    for (; bits >= 8; bits -= 8, i++)
        if (c->addr[i] != addr[i])
            return false;
    if (bits > 0) {
        uint8_t mask = (uint8_t)(0xff << (8 - bits));
        if ((c->addr[i] & mask) != (addr[i] & mask))
            return false;
    }
    return true;
}

bool
cidr_list_contains(const struct rl_cidr_list *l, int family, const uint8_t *addr)
{
    for (size_t i = 0; i < l->n; i++)
        if (cidr_match(&l->v[i], family, addr))
            return true;
    return false;
}
