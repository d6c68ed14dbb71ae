/* backend.c — what every backend shares: the key layout and the marks of an answer. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "lease.h"
#include "policy.h"
#include "util.h"

/* What sb holds, as the key formatters answer. */
static int
key_done(const struct strbuf *sb, size_t *len)
{
    if (!sb_ok(sb))
        return RL_ERR;
    *len = sb->len;
    return RL_OK;
}

int
backend_limit_key(const struct rl_check_req *req, size_t i, char *buf, size_t size,
                  size_t *len)
{
    const struct rl_limit *l = &req->policy->limits[i];
    struct strbuf sb;

    sb_init(&sb, buf, size);
    if (req->limit_key != NULL && req->limit_key[i] != NULL)
        sb_mem(&sb, req->limit_key[i], req->limit_key_len[i]);
    else
        sb_mem(&sb, req->key, req->key_len);
    algo_key_suffix(l, &sb);
    return key_done(&sb, len);
}

int
backend_once_key(const struct rl_check_req *req, char *buf, size_t size, size_t *len)
{
    static const char hex[] = "0123456789abcdef";
    char w[16];
    struct strbuf sb;

    for (int i = 0; i < 16; i++)
        w[i] = hex[(req->writer >> (60 - 4 * i)) & 0xf];
    sb_init(&sb, buf, size);
    sb_mem(&sb, req->key, req->key_len);
    sb_str(&sb, ":once:");
    sb_mem(&sb, w, sizeof(w));
    return key_done(&sb, len);
}

int
backend_rsv_key(const struct rl_check_req *req, char *buf, size_t size, size_t *len)
{
    struct strbuf sb;

    sb_init(&sb, buf, size);
    sb_mem(&sb, req->key, req->key_len);
    sb_str(&sb, ":rsv");
    return key_done(&sb, len);
}

size_t
backend_rsv_member(const struct rl_check_req *req, char buf[RL_RSV_MEMBER_MAX])
{
    size_t n = req->rsv_claim_len < RL_RSV_MEMBER_MAX - RL_LEASE_HEX - 2
                   ? req->rsv_claim_len
                   : RL_RSV_MEMBER_MAX - RL_LEASE_HEX - 2;

    lease_hex(&req->rsv, buf);
    buf[RL_LEASE_HEX] = '.';
    memcpy(buf + RL_LEASE_HEX + 1, req->rsv_claim, n);
    buf[RL_LEASE_HEX + 1 + n] = '\0';
    return RL_LEASE_HEX + 1 + n;
}

int
backend_block_key(const struct rl_check_req *req, char *buf, size_t size, size_t *len)
{
    struct strbuf sb;

    sb_init(&sb, buf, size);
    sb_mem(&sb, req->key, req->key_len);
    sb_str(&sb, ":block");
    return key_done(&sb, len);
}

void
backend_apply_block(struct rl_check_res *res, int64_t blocked_ms)
{
    res->allowed = 0;
    res->blocked_ms = blocked_ms;
    for (size_t i = 0; i < res->nlimits; i++) {
        struct rl_limit_result *l = &res->limits[i];

        l->allowed = 0;
        if (l->retry_after_ms >= 0 && l->retry_after_ms < blocked_ms)
            l->retry_after_ms = blocked_ms;
    }
}

void
backend_apply_delay(struct rl_check_res *res)
{
    res->allowed = 1;
    res->delay_ms = 0;
    for (size_t i = 0; i < res->nlimits; i++) {
        struct rl_limit_result *l = &res->limits[i];

        if (l->retry_after_ms > res->delay_ms)
            res->delay_ms = l->retry_after_ms;
        l->allowed = 1;
        l->retry_after_ms = 0;
    }
}
