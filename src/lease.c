/* lease.c — see lease.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "algo.h"
#include "lease.h"
#include "util.h"

static const char hexd[] = "0123456789abcdef";
static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void
lease_draw(struct rl_lease *id)
{
    uint64_t v[2] = {0, 0};

    /* urandom never blocks once the pool is up; before that (early boot),
     * GRND_NONBLOCK fails and the ids must still be unguessable: wait */
    while (getrandom(v, sizeof(v), 0) != (ssize_t)sizeof(v))
        ;
    id->hi = v[0];
    id->lo = v[1] | 1; /* never all zero: that is an anonymous slot */
}

void
lease_hex(const struct rl_lease *id, char hex[32])
{
    for (int i = 0; i < 16; i++) {
        hex[i] = hexd[(id->hi >> (60 - 4 * i)) & 0xf];
        hex[16 + i] = hexd[(id->lo >> (60 - 4 * i)) & 0xf];
    }
}

void
lease_key_encode(struct strbuf *sb, const char *key, size_t klen)
{
    size_t i;

    for (i = 0; i + 3 <= klen; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)key[i] << 16 |
                     (uint32_t)(unsigned char)key[i + 1] << 8 | (unsigned char)key[i + 2];
        char q[4] = {b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63], b64[v & 63]};

        sb_mem(sb, q, 4);
    }
    if (klen - i == 1) {
        uint32_t v = (uint32_t)(unsigned char)key[i] << 16;
        char q[2] = {b64[v >> 18], b64[(v >> 12) & 63]};

        sb_mem(sb, q, 2);
    } else if (klen - i == 2) {
        uint32_t v = (uint32_t)(unsigned char)key[i] << 16 |
                     (uint32_t)(unsigned char)key[i + 1] << 8;
        char q[3] = {b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63]};

        sb_mem(sb, q, 3);
    }
}

int
lease_id_format(const struct rl_lease *id, int64_t lease_ms, const char *key, size_t klen,
                char *buf, size_t size)
{
    char hex[RL_LEASE_HEX];
    struct strbuf sb;

    lease_hex(id, hex);
    sb_init(&sb, buf, size);
    sb_mem(&sb, hex, sizeof(hex));
    sb_mem(&sb, ".", 1);
    sb_i64(&sb, lease_ms);
    sb_mem(&sb, ".", 1);
    lease_key_encode(&sb, key, klen);
    return sb_ok(&sb) ? RL_OK : RL_ERR;
}

static int
b64_value(unsigned char c)
{
    const char *p = c != 0 ? strchr(b64, c) : NULL;

    return p != NULL ? (int)(p - b64) : -1;
}

bool
lease_key_decode(const char *s, size_t len, char *out, size_t size, size_t *n)
{
    uint32_t acc = 0;
    int bits = 0;

    *n = 0;
    if (len % 4 == 1)
        return false;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);

        if (v < 0)
            return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (*n >= size)
                return false;
            out[(*n)++] = (char)((acc >> bits) & 0xff);
        }
    }
    return (acc & ((1u << bits) - 1)) == 0;
}

bool
lease_id_parse(const char *s, size_t len, struct rl_lease *id, int64_t *lease_ms, char *key,
               size_t size, size_t *klen)
{
    const char *dot;
    int64_t ms = 0;
    size_t i;

    if (len < RL_LEASE_HEX + 4 || s[RL_LEASE_HEX] != '.')
        return false;
    id->hi = id->lo = 0;
    for (i = 0; i < RL_LEASE_HEX; i++) {
        int v = (s[i] >= '0' && s[i] <= '9')   ? s[i] - '0'
                : (s[i] >= 'a' && s[i] <= 'f') ? s[i] - 'a' + 10
                                               : -1;
        if (v < 0)
            return false;
        if (i < 16)
            id->hi = id->hi << 4 | (uint64_t)v;
        else
            id->lo = id->lo << 4 | (uint64_t)v;
    }
    s += RL_LEASE_HEX + 1;
    len -= RL_LEASE_HEX + 1;
    dot = memchr(s, '.', len);
    if (dot == NULL || dot == s || dot - s > 12 || s[0] == '0')
        return false;
    for (const char *p = s; p < dot; p++) {
        if (*p < '0' || *p > '9')
            return false;
        ms = ms * 10 + (*p - '0');
    }
    *lease_ms = ms;
    len -= (size_t)(dot + 1 - s);
    return len > 0 && lease_key_decode(dot + 1, len, key, size, klen) &&
           (id->hi | id->lo) != 0;
}
