/*
 * fuzz_forwarded.c — libFuzzer target: the identity chain and the
 * X-Forwarded-For / Forwarded walk (identity.c), with headers from the input.
 *
 * Input: byte 0 picks the direct peer (bits 0-1: 127.0.0.1, ::1, 203.0.113.9
 * untrusted, a unix socket) and whether a body key is present (bit 2); the
 * rest is header lines "Name: value\n" (a line "Body-Key: v" gives the body
 * key instead).  The trusted proxies are fixed.
 *
 * Oracles besides ASan/UBSan: a forwarded address formats to text that
 * ip_parse reads back to the same address; identities fit their buffer and
 * the Redis key built from them fits its own and keeps its hash tag intact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "config.h"
#include "identity.h"
#include "netaddr.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEADERS 32

static struct rl_cidr_list trusted;
static struct rl_identity_chain chain;

struct input {
    char *name[MAX_HEADERS], *value[MAX_HEADERS];
    size_t n;
};

static const char *
find_header(void *hctx, const char *name)
{
    struct input *in = hctx;

    for (size_t i = 0; i < in->n; i++)
        if (strcasecmp(in->name[i], name) == 0)
            return in->value[i];
    return NULL;
}

/* As http.c joins repeated headers: ",", and >= size when it does not fit. */
/* Every line of a header, first to last, as api.c gives them. */
static size_t
header_lines(void *hctx, const char *name, const char **vals, size_t *lens, size_t max)
{
    struct input *in = hctx;
    size_t n = 0;

    for (size_t i = 0; i < in->n; i++) {
        if (strcasecmp(in->name[i], name) != 0)
            continue;
        if (n < max) {
            vals[n] = in->value[i];
            lens[n] = strlen(in->value[i]);
        }
        n++;
    }
    return n;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const cidrs[] = {"127.0.0.0/8", "::1/128", "10.0.0.0/8",
                                        "2001:db8::/32", "192.168.0.0/16"};
    static struct rl_id_source src[5];

    (void)argc;
    (void)argv;
    trusted.v = xcalloc(RL_ARRAY_LEN(cidrs), sizeof(*trusted.v));
    for (size_t i = 0; i < RL_ARRAY_LEN(cidrs); i++)
        if (cidr_parse(cidrs[i], &trusted.v[trusted.n++]) != RL_OK)
            abort();
    /* a compound first (forwarded+trusted_header:X-User+body), then the
     * single sources */
    static struct rl_id_source user = {RL_ID_TRUSTED_HEADER, (char *)"X-User", NULL};
    static struct rl_id_source body = {RL_ID_BODY, NULL, NULL};
    src[0].kind = RL_ID_FORWARDED;
    src[0].also = &user;
    user.also = &body;
    src[1].kind = RL_ID_BODY;
    src[2].kind = RL_ID_HEADER;
    src[2].header = (char *)"X-Api-Key";
    src[3].kind = RL_ID_FORWARDED;
    src[4].kind = RL_ID_PEER;
    chain.v = src;
    chain.n = 5;
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {0};
    struct rl_ident_input ii;
    char *body_key = NULL;
    size_t body_key_len = 0;
    const char *p = (const char *)data + 1;
    size_t len = size ? size - 1 : 0, i = 0;
    uint8_t addr[16], back[16];
    char text[64], id[RL_IDENTITY_MAX], key[RL_REDIS_KEY_MAX];
    size_t idlen;
    int fam, fam2;
    bool found;
    char *err;

    if (size == 0)
        return 0;
    while (i < len && in.n < MAX_HEADERS) {
        size_t e = i;
        while (e < len && p[e] != '\n')
            e++;
        const char *colon = memchr(p + i, ':', e - i);
        if (colon != NULL && colon > p + i) {
            const char *v = colon + 1;
            while (v < p + e && *v == ' ')
                v++;
            size_t nlen = (size_t)(colon - (p + i)), vlen = (size_t)(p + e - v);
            if (nlen == 8 && strncasecmp(p + i, "Body-Key", 8) == 0 && body_key == NULL) {
                /* any bytes, NUL included, up to the limit check.c enforces */
                body_key_len = vlen > RL_KEY_MAX ? RL_KEY_MAX : vlen;
                body_key = xstrndup(v, body_key_len);
            } else {
                in.name[in.n] = xstrndup(p + i, nlen);
                in.value[in.n] = xstrndup(v, vlen);
                in.n++;
            }
        }
        i = e + 1;
    }

    memset(&ii, 0, sizeof(ii));
    ii.header = find_header;
    ii.header_lines = header_lines;
    ii.ipv6_prefix = data[0] & 8 ? 64 : 0;
    ii.ipv4_prefix = data[0] & 16 ? 24 : 0;
    ii.hctx = &in;
    switch (data[0] & 3) {
    case 0:
        ii.peer_family = AF_INET;
        memcpy(ii.peer_addr, "\x7f\x00\x00\x01", 4);
        break;
    case 1:
        ii.peer_family = AF_INET6;
        memcpy(ii.peer_addr, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16);
        break;
    case 2:
        ii.peer_family = AF_INET;
        memcpy(ii.peer_addr, "\xcb\x00\x71\x09", 4);
        break;
    default:
        ii.peer_family = 0;
        break;
    }
    if (data[0] & 4) {
        ii.body_key = body_key;
        ii.body_key_len = body_key_len;
    }

    memset(addr, 0, sizeof(addr));
    err = NULL;
    if (identity_forwarded(&trusted, &ii, &fam, addr, &found, &err) != RL_OK) {
        if (err == NULL || strstr(err, "too long") == NULL)
            abort();
        free(err);
    } else if (found) {
        if (fam != AF_INET && fam != AF_INET6)
            abort();
        ip_format(fam, addr, text, sizeof(text));
        if (memchr(text, '\0', sizeof(text)) == NULL)
            abort();
        memset(back, 0, sizeof(back));
        if (ip_parse(text, strlen(text), &fam2, back) != RL_OK || fam2 != fam ||
            memcmp(back, addr, fam == AF_INET ? 4 : 16) != 0) {
            fprintf(stderr, "address does not survive format+parse: %s\n", text);
            abort();
        }
    }
    err = NULL;
    if (identity_resolve(&chain, &trusted, &ii, id, sizeof(id), &idlen, &err) != RL_OK) {
        if (err == NULL)
            abort();
        free(err);
    } else if (idlen > 0) {
        if (idlen > sizeof(id))
            abort();
        bool shared = data[0] & 32;
        size_t klen;
        /* one hash tag: the caller's bytes inside it, or (shared) after the
         * policy's, never a brace of theirs */
        const char *close;
        if (identity_key("rl:", "policy", id, idlen, shared, key, sizeof(key), &klen) != RL_OK ||
            klen < 2 || klen >= sizeof(key) || key[0] != '{' ||
            memchr(key + 1, '{', klen - 1) != NULL)
            abort();
        size_t tag = shared ? strlen("{rl:policy}") : klen;
        close = memchr(key + 1, '}', klen - 1);
        if (close != key + tag - 1 ||
            memchr(close + 1, '}', (size_t)(key + klen - close - 1)) != NULL)
            abort();
    }
    free(body_key);
    for (size_t k = 0; k < in.n; k++) {
        free(in.name[k]);
        free(in.value[k]);
    }
    return 0;
}
