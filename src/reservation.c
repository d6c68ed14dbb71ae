/* reservation.c — see reservation.h. */
#include <string.h>

#include "algo.h"
#include "lease.h"
#include "reservation.h"
#include "util.h"

static const char hexd[] = "0123456789abcdef";

uint64_t
reservation_limits_hash(const struct rl_limit *l, size_t n)
{
    uint64_t h = FNV1A_INIT;

    for (size_t i = 0; i < n; i++) {
        char buf[RL_LIMIT_KEY_MAX];
        struct strbuf sb;

        sb_init(&sb, buf, sizeof(buf));
        algo_key_suffix(&l[i], &sb);
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].limit);
        sb_mem(&sb, " ", 1);
        sb_i64(&sb, l[i].burst);
        sb_mem(&sb, ";", 1);
        h = fnv1a(h, buf, sb.len);
    }
    return h;
}

size_t
reservation_claim(int64_t estimate, uint64_t h, char buf[RL_RSV_CLAIM_MAX])
{
    struct strbuf sb;
    char hex[12];

    for (int i = 0; i < 12; i++)
        hex[i] = hexd[(h >> (44 - 4 * i)) & 0xf];
    sb_init(&sb, buf, RL_RSV_CLAIM_MAX);
    sb_i64(&sb, estimate);
    sb_mem(&sb, ".", 1);
    sb_mem(&sb, hex, sizeof(hex));
    return sb.len;
}

int
reservation_id_format(const struct rl_lease *nonce, const char *claim, size_t clen,
                      const char *key, size_t klen, char *buf, size_t size)
{
    char hex[RL_LEASE_HEX];
    struct strbuf sb;

    lease_hex(nonce, hex);
    sb_init(&sb, buf, size);
    sb_mem(&sb, hex, sizeof(hex));
    sb_mem(&sb, ".", 1);
    sb_mem(&sb, claim, clen);
    sb_mem(&sb, ".", 1);
    lease_key_encode(&sb, key, klen);
    return sb_ok(&sb) ? RL_OK : RL_ERR;
}

/* n lower-case hex digits of s into *v: false when one is not. */
static bool
hex_read(const char *s, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = s[i] != '\0' ? strchr(hexd, s[i]) : NULL;

        if (p == NULL)
            return false;
        *v = *v << 4 | (uint64_t)(p - hexd);
    }
    return true;
}

bool
reservation_id_parse(const char *s, size_t len, struct rl_lease *nonce,
                     char claim[RL_RSV_CLAIM_MAX], size_t *clen, int64_t *estimate,
                     uint64_t *h, char *key, size_t size, size_t *klen)
{
    const char *e, *dot;
    int64_t est = 0;

    /* nonce '.' at least one digit '.' 12 hex '.' at least two key bytes */
    if (len < RL_LEASE_HEX + 1 + 1 + 1 + 12 + 1 + 2 || s[RL_LEASE_HEX] != '.' ||
        !hex_read(s, 16, &nonce->hi) || !hex_read(s + 16, 16, &nonce->lo) ||
        (nonce->hi | nonce->lo) == 0)
        return false;
    e = s + RL_LEASE_HEX + 1;
    dot = memchr(e, '.', len - (size_t)(e - s));
    /* 1..16 digits, no leading zero (no estimate is 0: cost >= 1) */
    if (dot == NULL || dot == e || dot - e > 16 || e[0] == '0')
        return false;
    for (const char *p = e; p < dot; p++) {
        if (*p < '0' || *p > '9')
            return false;
        est = est * 10 + (*p - '0');
    }
    if (est > RL_COST_MAX || (size_t)(s + len - dot) < 1 + 12 + 1 + 2 || dot[13] != '.' ||
        !hex_read(dot + 1, 12, h))
        return false;
    *estimate = est;
    *clen = (size_t)(dot + 13 - e);
    memcpy(claim, e, *clen);
    claim[*clen] = '\0';
    return lease_key_decode(dot + 14, (size_t)(s + len - dot - 14), key, size, klen);
}
