/* identity.c — see identity.h. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "identity.h"
#include "config.h"
#include "netaddr.h"

static bool
put_typed(const char *type, const char *v, size_t vlen, char *out, size_t size, size_t *len)
{
    size_t tlen = strlen(type);

    if (tlen + vlen > size)
        return false;
    memcpy(out, type, tlen);
    memcpy(out + tlen, v, vlen);
    *len = tlen + vlen;
    return true;
}

static bool
put_ip(int family, const uint8_t *addr, char *out, size_t size, size_t *len)
{
    char text[64];

    ip_format(family, addr, text, sizeof(text));
    return put_typed("ip:", text, strlen(text), out, size, len);
}

/* Next element of a comma-separated header, right to left. */
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

bool
identity_forwarded(const struct rl_cidr_list *trusted, const struct rl_ident_input *in,
                   int *family, uint8_t addr[16])
{
    char h[RL_FORWARDED_MAX];
    const char *item;
    size_t end, ilen;
    bool found = false;
    int rfc;

    if (in->peer_family == 0 || !cidr_list_contains(trusted, in->peer_family, in->peer_addr))
        return false;
    /* Several header lines are one list (RFC 9110 5.3): a proxy that adds its
     * own line must not let the client's earlier line pick the identity. */
    rfc = in->forwarded_rfc7239;
    end = in->header_all(in->hctx, rfc ? "Forwarded" : "X-Forwarded-For", h, sizeof(h));
    /* Absent, or too long to read whole: the rightmost hops, the only ones
     * we can trust, would be the ones cut off. */
    if (end == 0 || end >= sizeof(h))
        return false;
    while (prev_item(h, &end, &item, &ilen)) {
        const char *v = item;
        size_t vlen = ilen;
        int f;
        uint8_t a[16];
        if (rfc && !forwarded_for(item, ilen, &v, &vlen))
            return found;
        if (ip_parse(v, vlen, &f, a) != RL_OK)
            /* "unknown" or an obfuscated node: the chain is broken here. */
            return found;
        *family = f;
        memcpy(addr, a, 16);
        found = true;
        if (!cidr_list_contains(trusted, f, a))
            return true;
    }
    /* Every hop was a trusted proxy: the leftmost is the best we know. */
    return found;
}

bool
identity_resolve(const struct rl_identity_chain *chain, const struct rl_cidr_list *trusted,
                 const struct rl_ident_input *in, char *out, size_t size, size_t *len)
{
    for (size_t i = 0; i < chain->n; i++) {
        const struct rl_id_source *s = &chain->v[i];
        switch (s->kind) {
        case RL_ID_BODY:
            if (in->body_key != NULL)
                return put_typed("k:", in->body_key, in->body_key_len, out, size, len);
            break;
        case RL_ID_HEADER: {
            const char *v = in->header(in->hctx, s->header);
            size_t vlen = v ? strlen(v) : 0;
            if (vlen > 0 && vlen <= RL_KEY_MAX)
                return put_typed("k:", v, vlen, out, size, len);
            break;
        }
        case RL_ID_FORWARDED: {
            int f;
            uint8_t a[16];
            if (identity_forwarded(trusted, in, &f, a))
                return put_ip(f, a, out, size, len);
            break;
        }
        case RL_ID_PEER:
            if (in->peer_family != 0)
                return put_ip(in->peer_family, in->peer_addr, out, size, len);
            return put_typed("unix:", "", 0, out, size, len);
        }
    }
    return false;
}

static bool
safe_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_' || c == '@' || c == '/' || c == '=' || c == '+';
}

int
identity_key(const char *prefix, const char *policy, const char *id, size_t idlen, char *buf,
             size_t size, size_t *len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t plen = strlen(prefix), nlen = strlen(policy), o = 0;
    /* The type ("k:", "ip:") is ours: keep its colon readable. */
    const char *colon = memchr(id, ':', idlen);
    size_t typelen = colon ? (size_t)(colon - id) + 1 : 0;

    if (plen + nlen + typelen + 3 * (idlen - typelen) + 4 > size)
        return RL_ERR;
    buf[o++] = '{';
    memcpy(buf + o, prefix, plen), o += plen;
    memcpy(buf + o, policy, nlen), o += nlen;
    buf[o++] = ':';
    memcpy(buf + o, id, typelen), o += typelen;
    for (size_t i = typelen; i < idlen; i++) {
        unsigned char c = (unsigned char)id[i];
        if (safe_byte(c)) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o++] = '}';
    buf[o] = '\0';
    *len = o;
    return RL_OK;
}
