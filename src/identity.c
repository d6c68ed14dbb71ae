/* identity.c — see identity.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "identity.h"
#include "policy.h"
#include "netaddr.h"
#include "util.h"

/* Where one source's typed value goes: out[*len..size), escaped when it is
 * a part of a compound. */
struct sink {
    char *out;
    size_t size, len;
    int compound;
};

/* Append "<type><value>"; a compound's part gets its '+' first and its '%'
 * and '+' escaped.  false when it does not fit. */
static bool
put_typed(struct sink *k, const char *type, const char *v, size_t vlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t tlen = strlen(type), o = k->len;

    if (k->compound) {
        if (o + 1 > k->size)
            return false;
        k->out[o++] = '+';
    }
    if (o + tlen > k->size)
        return false;
    memcpy(k->out + o, type, tlen);
    o += tlen;
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)v[i];

        if (k->compound && (c == '%' || c == '+')) {
            if (o + 3 > k->size)
                return false;
            k->out[o++] = '%';
            k->out[o++] = hex[c >> 4];
            k->out[o++] = hex[c & 15];
        } else {
            if (o + 1 > k->size)
                return false;
            k->out[o++] = (char)c;
        }
    }
    k->len = o;
    return true;
}

/* The network of an address at the input's prefix lengths. */
static bool
put_ip(struct sink *k, const struct rl_ident_input *in, int family, const uint8_t *addr)
{
    char text[64];
    int prefix = family == AF_INET ? in->ipv4_prefix : in->ipv6_prefix;

    ip_format_net(family, addr, prefix, text, sizeof(text));
    return put_typed(k, "ip:", text, strlen(text));
}

/* Next element of a comma-separated header line, right to left. */
static bool
prev_item(const char *s, size_t *end, const char **item, size_t *ilen)
{
    size_t e = *end, b;

    while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == ','))
        e--;
    if (e == 0)
        return false;
    b = e;
    while (b > 0 && s[b - 1] != ',')
        b--;
    while (b < e && (s[b] == ' ' || s[b] == '\t'))
        b++;
    *item = s + b;
    *ilen = e - b;
    *end = b;
    return true;
}

/* The address of an RFC 7239 element: its for= parameter, maybe quoted. */
static bool
forwarded_for(const char *el, size_t n, const char **v, size_t *vlen)
{
    size_t i = 0;

    while (i < n) {
        size_t j = i;
        while (j < n && el[j] != ';')
            j++;
        const char *p = el + i;
        size_t plen = j - i;
        while (plen > 0 && (*p == ' ' || *p == '\t'))
            p++, plen--;
        if (plen > 4 && strncasecmp(p, "for=", 4) == 0) {
            p += 4, plen -= 4;
            while (plen > 0 && (p[plen - 1] == ' ' || p[plen - 1] == '\t'))
                plen--;
            if (plen >= 2 && p[0] == '"' && p[plen - 1] == '"')
                p++, plen -= 2;
            *v = p;
            *vlen = plen;
            return true;
        }
        i = j + 1;
    }
    return false;
}

int
identity_forwarded(const struct rl_cidr_list *trusted, const struct rl_ident_input *in,
                   int *family, uint8_t addr[16], bool *found, char **error)
{
    const char *vals[RL_HEADER_LINES_MAX];
    size_t lens[RL_HEADER_LINES_MAX], nlines, hops = 0;
    const char *name = in->forwarded_rfc7239 ? "Forwarded" : "X-Forwarded-For";

    *found = false;
    if (in->peer_family == 0 || !cidr_list_contains(trusted, in->peer_family, in->peer_addr))
        return RL_OK;
    /* Several lines are one list (RFC 9110 5.3), read from its right end:
     * the hops the trusted proxies appended, whatever length the client
     * gave the part on the left (a chain read from the left, whole or not
     * at all, let a client that padded it past a buffer fall back to the
     * proxy's own address). */
    nlines = in->header_lines(in->hctx, name, vals, lens, RL_HEADER_LINES_MAX);
    if (nlines > RL_HEADER_LINES_MAX)
        nlines = RL_HEADER_LINES_MAX; /* the HTTP layer takes no more */
    while (nlines-- > 0) {
        const char *item;
        size_t end = lens[nlines], ilen;

        while (prev_item(vals[nlines], &end, &item, &ilen)) {
            const char *v = item;
            size_t vlen = ilen;
            int f;
            uint8_t a[16];

            if (in->forwarded_rfc7239 && !forwarded_for(item, ilen, &v, &vlen))
                return RL_OK;
            if (ip_parse(v, vlen, &f, a) != RL_OK)
                /* "unknown" or an obfuscated node: the chain is broken here. */
                return RL_OK;
            *family = f;
            memcpy(addr, a, 16);
            *found = true;
            if (!cidr_list_contains(trusted, f, a))
                return RL_OK;
            if (++hops >= RL_FORWARDED_HOPS_MAX) {
                *error = xasprintf(
                    "%s: more than %d trusted proxies in the chain: too long to "
                    "read",
                    name, RL_FORWARDED_HOPS_MAX);
                return RL_ERR;
            }
        }
    }
    /* Every hop was a trusted proxy: the leftmost is the best we know. */
    return RL_OK;
}

/* A header's value, for a header source; trusted_only: the last line, and
 * only from a trusted proxy (the first line of a client's may be its own). */
static int
header_value(const struct rl_id_source *s, const struct rl_cidr_list *trusted,
             const struct rl_ident_input *in, const char **v, size_t *vlen, char **error)
{
    *v = NULL;
    *vlen = 0;
    if (s->kind == RL_ID_TRUSTED_HEADER) {
        const char *vals[RL_HEADER_LINES_MAX];
        size_t lens[RL_HEADER_LINES_MAX], n;

        if (in->peer_family == 0 ||
            !cidr_list_contains(trusted, in->peer_family, in->peer_addr))
            return RL_OK;
        n = in->header_lines(in->hctx, s->header, vals, lens, RL_HEADER_LINES_MAX);
        if (n > RL_HEADER_LINES_MAX)
            n = RL_HEADER_LINES_MAX;
        if (n > 0) {
            *v = vals[n - 1];
            *vlen = lens[n - 1];
        }
    } else if ((*v = in->header(in->hctx, s->header)) != NULL) {
        *vlen = strlen(*v);
    }
    if (*vlen > RL_KEY_MAX) {
        /* never the next source instead: a client would pad its way out */
        *error = xasprintf("%s: longer than %d bytes", s->header, RL_KEY_MAX);
        return RL_ERR;
    }
    return RL_OK;
}

/* One part's identity into k; RL_OK with *got false when it gives none. */
static int
resolve_part(const struct rl_id_source *s, const struct rl_cidr_list *trusted,
             const struct rl_ident_input *in, struct sink *k, bool *got, char **error)
{
    *got = false;
    switch (s->kind) {
    case RL_ID_BODY:
        if (in->body_key == NULL)
            return RL_OK;
        *got = true;
        return put_typed(k, "k:", in->body_key, in->body_key_len) ? RL_OK : RL_ERR;
    case RL_ID_HEADER:
    case RL_ID_TRUSTED_HEADER: {
        const char *v;
        size_t vlen;

        if (header_value(s, trusted, in, &v, &vlen, error) != RL_OK)
            return RL_ERR;
        if (vlen == 0)
            return RL_OK;
        *got = true;
        return put_typed(k, "k:", v, vlen) ? RL_OK : RL_ERR;
    }
    case RL_ID_FORWARDED: {
        int f;
        uint8_t a[16];
        bool found;

        if (identity_forwarded(trusted, in, &f, a, &found, error) != RL_OK)
            return RL_ERR;
        if (!found)
            return RL_OK;
        *got = true;
        return put_ip(k, in, f, a) ? RL_OK : RL_ERR;
    }
    case RL_ID_PEER:
    default:
        *got = true;
        if (in->peer_family != 0)
            return put_ip(k, in, in->peer_family, in->peer_addr) ? RL_OK : RL_ERR;
        return put_typed(k, "unix:", "", 0) ? RL_OK : RL_ERR;
    }
}

int
identity_resolve(const struct rl_identity_chain *chain, const struct rl_cidr_list *trusted,
                 const struct rl_ident_input *in, char *out, size_t size, size_t *len,
                 char **error)
{
    *len = 0;
    for (size_t i = 0; i < chain->n; i++) {
        const struct rl_id_source *s = &chain->v[i];
        struct sink k = {out, size, 0, s->also != NULL};
        bool got = true;

        /* a compound gives an identity when every part gives one */
        for (; s != NULL && got; s = s->also) {
            *error = NULL;
            if (resolve_part(s, trusted, in, &k, &got, error) != RL_OK) {
                if (*error == NULL)
                    *error = xasprintf("key: the identity is longer than %zu bytes", size);
                return RL_ERR;
            }
        }
        if (got) {
            *len = k.len;
            return RL_OK;
        }
    }
    return RL_OK;
}

/* The bytes a key keeps as they are: letters, digits and . - _ @ / = +
 * (none from 0x80: the rest of the table is 0). */
static const unsigned char safe_byte[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, /* 0x20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, /* 0x30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, /* 0x50 */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, /* 0x70 */
};

/* Byte c of an identity into buf[o..), escaped unless safe; the new o. */
static inline size_t
put_escaped(char *buf, size_t o, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";

    if (safe_byte[c]) {
        buf[o++] = (char)c;
    } else {
        buf[o++] = '%';
        buf[o++] = hex[c >> 4];
        buf[o++] = hex[c & 15];
    }
    return o;
}

int
identity_key(const char *prefix, const char *policy, const char *id, size_t idlen, bool shared,
             char *buf, size_t size, size_t *len)
{
    size_t plen = strlen(prefix), nlen = strlen(policy), o = 0, i;
    /* The type ("k:", "ip:") is ours: keep its colon readable. */
    const char *colon = memchr(id, ':', idlen);
    size_t typelen = colon != NULL && id[0] != '+' ? (size_t)(colon - id) + 1 : 0;

    if (plen + nlen + typelen + 3 * (idlen - typelen) + 4 > size)
        return RL_ERR;
    buf[o++] = '{';
    memcpy(buf + o, prefix, plen), o += plen;
    memcpy(buf + o, policy, nlen), o += nlen;
    if (shared)
        buf[o++] = '}';
    buf[o++] = ':';
    memcpy(buf + o, id, typelen), o += typelen;
    i = typelen;
    /* Eight bytes a step, copied whole when all are safe (an identity is
     * mostly letters and digits): a byte's test and store cost ~9
     * instructions a byte on every check, this ~3. */
    for (; i + 8 <= idlen; i += 8) {
        const unsigned char *p = (const unsigned char *)id + i;

        if (safe_byte[p[0]] & safe_byte[p[1]] & safe_byte[p[2]] & safe_byte[p[3]] &
            safe_byte[p[4]] & safe_byte[p[5]] & safe_byte[p[6]] & safe_byte[p[7]]) {
            memcpy(buf + o, p, 8);
            o += 8;
        } else {
            for (size_t j = 0; j < 8; j++)
                o = put_escaped(buf, o, p[j]);
        }
    }
    for (; i < idlen; i++)
        o = put_escaped(buf, o, (unsigned char)id[i]);
    if (!shared)
        buf[o++] = '}';
    buf[o] = '\0';
    *len = o;
    return RL_OK;
}
