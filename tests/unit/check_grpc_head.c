/*
 * check_grpc_head.c — grpc_head.c against nghttp2's own HTTP messaging:
 * generated requests (header fields drawn from pseudo-headers, the fields
 * HTTP/2 forbids or constrains and ordinary ones, with good, empty and bad
 * values, in any order; a content-length, END_STREAM on the HEADERS or on
 * DATA of some length) go to an nghttp2 server session with its HTTP
 * messaging on, and through grpc_head.  A request is malformed for one
 * exactly when the other resets its stream with PROTOCOL_ERROR.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <nghttp2/nghttp2.h>

#include "grpc_head.h"
#include "gen.h"
#include "unit.h"

#define SRL "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

static const char *const names[] = {
    ":method", ":path", ":scheme", ":authority", ":protocol", ":status", ":x",
    "host", "te", "content-length", "connection", "keep-alive", "transfer-encoding",
    "upgrade", "proxy-connection", "content-type", "user-agent", "grpc-timeout",
    "x-a", "X-Upper", "x y", "", "priority"};
static const char *const values[] = {
    "POST", "GET", "CONNECT", "OPTIONS", "", " ", "http", "https", "HTTP", "h2+x.y-z", "1http",
    "/", "*", "/a b", SRL, "127.0.0.1", "a b", "trailers", "Trailers", "gzip", "5", "0", "-1",
    "99999999999999999999", "application/grpc", " lead", "trail ", "a\nb", "a\x01" "b", "ok",
    "u=1"};
#define N(a) (sizeof(a) / sizeof((a)[0]))

struct seen {
    int reset; /* RST_STREAM PROTOCOL_ERROR on stream 1 */
};

static ssize_t
frames_out(nghttp2_session *s, struct seen *seen)
{
    const uint8_t *p;
    ssize_t n;

    while ((n = nghttp2_session_mem_send(s, &p)) > 0) {
        for (ssize_t i = 0; i + 9 <= n;) {
            size_t len = (size_t)p[i] << 16 | (size_t)p[i + 1] << 8 | p[i + 2];
            uint32_t sid = ((uint32_t)p[i + 5] << 24 | (uint32_t)p[i + 6] << 16 |
                            (uint32_t)p[i + 7] << 8 | p[i + 8]) & 0x7fffffff;
            if (p[i + 3] == 0x3 && sid == 1 && len == 4 && p[i + 12] == NGHTTP2_PROTOCOL_ERROR)
                seen->reset = 1;
            i += 9 + (ssize_t)len;
        }
    }
    return n;
}

static void
put_frame(uint8_t *out, size_t *at, uint8_t type, uint8_t flags, uint32_t sid,
          const uint8_t *payload, size_t len)
{
    uint8_t *p = out + *at;

    p[0] = (uint8_t)(len >> 16);
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    p[3] = type;
    p[4] = flags;
    p[5] = (uint8_t)(sid >> 24);
    p[6] = (uint8_t)(sid >> 16);
    p[7] = (uint8_t)(sid >> 8);
    p[8] = (uint8_t)sid;
    if (len > 0)
        memcpy(p + 9, payload, len);
    *at += 9 + len;
}

START_TEST(agrees_with_nghttp2)
{
    int malformed = 0, taken = 0;

    for (uint32_t seed = 1; seed <= 20000; seed++) {
        struct gen g = gen_seeded(seed);
        nghttp2_nv nv[10];
        size_t nnv = 0, at = 0, datalen;
        nghttp2_hd_deflater *def;
        nghttp2_session_callbacks *cbs;
        nghttp2_session *s;
        nghttp2_option *opt;
        uint8_t block[1024], wire[4096], data[64] = {0};
        ssize_t blen;
        struct seen seen = {0};
        struct grpc_head h;
        int ours = 0, end_on_headers;
        static const char *const good[][2] = {{":method", "POST"},
                                               {":scheme", "http"},
                                               {":path", SRL},
                                               {":authority", "127.0.0.1"},
                                               {"content-type", "application/grpc"},
                                               {"te", "trailers"}};

        /* mostly a good request changed a little, else anything */
        if (gen_next(&g) % 4 != 0) {
            for (size_t i = 0; i < N(good); i++)
                if (gen_next(&g) % 12 != 0)
                    nv[nnv++] = (nghttp2_nv){(uint8_t *)good[i][0], (uint8_t *)good[i][1],
                                             strlen(good[i][0]), strlen(good[i][1]),
                                             NGHTTP2_NV_FLAG_NONE};
            if (gen_next(&g) % 2 == 0 && nnv > 0) { /* one field replaced */
                size_t i = gen_next(&g) % nnv;
                const char *v = values[gen_next(&g) % N(values)];
                nv[i].value = (uint8_t *)v;
                nv[i].valuelen = strlen(v);
            }
            if (gen_next(&g) % 3 == 0) { /* one more, anywhere */
                size_t i = gen_next(&g) % (nnv + 1);
                const char *n = names[gen_next(&g) % N(names)];
                const char *v = values[gen_next(&g) % N(values)];
                memmove(&nv[i + 1], &nv[i], (nnv - i) * sizeof(nv[0]));
                nv[i] = (nghttp2_nv){(uint8_t *)n, (uint8_t *)v, strlen(n), strlen(v),
                                     NGHTTP2_NV_FLAG_NONE};
                nnv++;
            }
        } else {
            nnv = gen_next(&g) % 9;
            for (size_t i = 0; i < nnv; i++) {
                const char *n = names[gen_next(&g) % N(names)];
                const char *v = values[gen_next(&g) % N(values)];
                nv[i] = (nghttp2_nv){(uint8_t *)n, (uint8_t *)v, strlen(n), strlen(v),
                                     NGHTTP2_NV_FLAG_NONE};
            }
        }
        end_on_headers = gen_next(&g) % 4 == 0;
        datalen = gen_next(&g) % 8;

        /* nghttp2's verdict */
        ck_assert_int_eq(nghttp2_hd_deflate_new(&def, 4096), 0);
        blen = nghttp2_hd_deflate_hd(def, block, sizeof(block), nv, nnv);
        ck_assert_int_ge(blen, 0);
        nghttp2_hd_deflate_del(def);
        memcpy(wire, NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
        at = NGHTTP2_CLIENT_MAGIC_LEN;
        put_frame(wire, &at, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
        put_frame(wire, &at, NGHTTP2_HEADERS,
                  NGHTTP2_FLAG_END_HEADERS | (end_on_headers ? NGHTTP2_FLAG_END_STREAM : 0), 1,
                  block, (size_t)blen);
        if (!end_on_headers)
            put_frame(wire, &at, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, data, datalen);
        ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
        ck_assert_int_eq(nghttp2_option_new(&opt), 0);
        ck_assert_int_eq(nghttp2_session_server_new2(&s, cbs, NULL, opt), 0);
        ck_assert_int_eq(nghttp2_session_mem_recv(s, wire, at), (ssize_t)at);
        ck_assert_int_eq(frames_out(s, &seen), 0);
        nghttp2_session_del(s);
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);

        /* ours, as grpc.c asks */
        grpc_head_init(&h);
        for (size_t i = 0; i < nnv && !ours; i++)
            ours = grpc_head_field(&h, nv[i].name, nv[i].namelen, nv[i].value, nv[i].valuelen,
                                   false) != RL_OK;
        if (!ours)
            ours = grpc_head_end(&h) != RL_OK;
        if (!ours && !end_on_headers)
            ours = grpc_head_data(&h, datalen) != RL_OK;
        if (!ours)
            ours = grpc_head_ended(&h) != RL_OK;

        if (ours != seen.reset) {
            char desc[2048] = "";
            for (size_t i = 0; i < nnv; i++) {
                size_t l = strlen(desc);
                snprintf(desc + l, sizeof(desc) - l, "[%.*s: %.*s] ", (int)nv[i].namelen,
                         nv[i].name, (int)nv[i].valuelen, nv[i].value);
            }
            ck_abort_msg("seed %u: %s; end on HEADERS %d, DATA %zu: nghttp2 %s, grpc_head %s",
                         seed, desc, end_on_headers, datalen,
                         seen.reset ? "resets" : "takes", ours ? "refuses" : "takes");
        }
        malformed += ours;
        taken += !ours;
    }
    /* both verdicts were compared often */
    ck_assert_int_ge(malformed, 3000);
    ck_assert_int_ge(taken, 3000);
}
END_TEST

/* Trailers: no pseudo-header; their fields are checked as the request's. */
START_TEST(trailers)
{
    struct grpc_head h;

    grpc_head_init(&h);
    ck_assert_int_eq(grpc_head_field(&h, (const uint8_t *)"x-a", 3, (const uint8_t *)"1", 1,
                                     true),
                     RL_OK);
    ck_assert_int_eq(grpc_head_field(&h, (const uint8_t *)":path", 5, (const uint8_t *)"/", 1,
                                     true),
                     RL_ERR);
    ck_assert_int_eq(grpc_head_field(&h, (const uint8_t *)"X-A", 3, (const uint8_t *)"1", 1,
                                     true),
                     RL_ERR);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("grpc_head");
    TCase *tc = tcase_create("head");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, agrees_with_nghttp2);
    tcase_add_test(tc, trailers);
    suite_add_tcase(s, tc);
    return rl_unit_run(s, CK_FORK_GETENV);
}
