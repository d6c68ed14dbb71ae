/*
 * check_identity.c — who is calling (the identity chain, X-Forwarded-For and
 * RFC 7239 Forwarded behind trusted proxies), the Redis key built from it,
 * and which policy applies (policy_match).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "unit.h"
#include "gen.h"

#include "config.h"
#include "identity.h"
#include "netaddr.h"
#include "pathnorm.h"
#include "policy.h"

/* ---- fixtures --------------------------------------------------------------------- */

struct hdrs {
    size_t n;
    const char *name[8];
    const char *value[8];
};

static const char *
hget(void *ctx, const char *name)
{
    struct hdrs *h = ctx;

    for (size_t i = 0; i < h->n; i++)
        if (strcasecmp(h->name[i], name) == 0)
            return h->value[i];
    return NULL;
}

/* Every line of a header, first to last (as api.c gives them). */
static size_t
hlines(void *ctx, const char *name, const char **vals, size_t *lens, size_t max)
{
    struct hdrs *h = ctx;
    size_t n = 0;

    for (size_t i = 0; i < h->n; i++) {
        if (strcasecmp(h->name[i], name) != 0)
            continue;
        if (n < max) {
            vals[n] = h->value[i];
            lens[n] = strlen(h->value[i]);
        }
        n++;
    }
    return n;
}

static void
hadd(struct hdrs *h, const char *name, const char *value)
{
    ck_assert_uint_lt(h->n, 8);
    h->name[h->n] = name;
    h->value[h->n] = value;
    h->n++;
}

/* An input from peer (NULL: a unix socket), with no body key and no headers. */
static void
input(struct rl_ident_input *in, struct hdrs *h, const char *peer)
{
    memset(in, 0, sizeof(*in));
    memset(h, 0, sizeof(*h));
    in->header = hget;
    in->header_lines = hlines;
    in->hctx = h;
    if (peer != NULL)
        ck_assert_msg(ip_parse(peer, strlen(peer), &in->peer_family, in->peer_addr) == RL_OK,
                      "bad test peer %s", peer);
}

static void
body_key(struct rl_ident_input *in, const char *key, size_t len)
{
    in->body_key = key;
    in->body_key_len = len;
}

/* where the calls expected to succeed would put their error */
static char *no_error;

static struct rl_cidr trusted_v[4];
static struct rl_cidr_list trusted = {trusted_v, 0};

/* 127.0.0.0/8, ::1/128 (the defaults) and 10.0.0.0/8 */
static void
setup_trusted(void)
{
    trusted.n = 0;
    ck_assert_int_eq(cidr_parse("127.0.0.0/8", &trusted_v[trusted.n++]), RL_OK);
    ck_assert_int_eq(cidr_parse("::1/128", &trusted_v[trusted.n++]), RL_OK);
    ck_assert_int_eq(cidr_parse("10.0.0.0/8", &trusted_v[trusted.n++]), RL_OK);
}

static char h_api_key[] = "X-Api-Key";
static char h_user[] = "X-User";

static struct rl_id_source full_chain_v[] = {
    {RL_ID_BODY, NULL, NULL}, {RL_ID_HEADER, h_api_key, NULL}, {RL_ID_FORWARDED, NULL, NULL},
    {RL_ID_PEER, NULL, NULL},
};
static const struct rl_identity_chain full_chain = {full_chain_v, 4};

/* Resolve and compare with the expected typed identity (NULL: none). */
static void
expect_id(const struct rl_identity_chain *chain, const struct rl_ident_input *in,
          const char *want, size_t want_len)
{
    char out[RL_IDENTITY_MAX], *error = NULL;
    size_t len = 99999;
    int rc = identity_resolve(chain, &trusted, in, out, sizeof(out), &len, &error);
    bool found = rc == RL_OK && len > 0;

    ck_assert_msg(rc == RL_OK, "identity_resolve failed: %s", error ? error : "?");
    if (want == NULL) {
        ck_assert_msg(!found, "an identity was found: %.*s", (int)len, out);
        return;
    }
    ck_assert_msg(found, "no identity, expected %s", want);
    ck_assert_msg(len == want_len && memcmp(out, want, len) == 0,
                  "identity \"%.*s\", expected \"%s\"", (int)len, out, want);
}

#define EXPECT_ID(chain, in, s) expect_id((chain), (in), (s), sizeof(s) - 1)
#define EXPECT_NO_ID(chain, in) expect_id((chain), (in), NULL, 0)

/* What identity_forwarded vouches for, as text; "" when nothing. */
static void
forwarded_text(const struct rl_ident_input *in, char *buf, size_t size)
{
    int family = -1;
    uint8_t a[16];
    bool found;
    char *error = NULL;

    buf[0] = '\0';
    ck_assert_int_eq(identity_forwarded(&trusted, in, &family, a, &found, &error), RL_OK);
    if (found)
        ip_format(family, a, buf, size);
}

static void
expect_xff(const char *peer, const char *xff, const char *want)
{
    struct rl_ident_input in;
    struct hdrs h;
    char got[INET6_ADDRSTRLEN];

    input(&in, &h, peer);
    hadd(&h, "X-Forwarded-For", xff);
    forwarded_text(&in, got, sizeof(got));
    ck_assert_msg(strcmp(got, want) == 0, "peer %s, X-Forwarded-For \"%s\": \"%s\", "
                  "expected \"%s\"", peer ? peer : "unix", xff, got, want);
}

static void
expect_fwd(const char *peer, const char *fwd, const char *want)
{
    struct rl_ident_input in;
    struct hdrs h;
    char got[INET6_ADDRSTRLEN];

    input(&in, &h, peer);
    in.forwarded_rfc7239 = 1;
    hadd(&h, "Forwarded", fwd);
    forwarded_text(&in, got, sizeof(got));
    ck_assert_msg(strcmp(got, want) == 0, "peer %s, Forwarded \"%s\": \"%s\", "
                  "expected \"%s\"", peer ? peer : "unix", fwd, got, want);
}

/* ---- the chain ---------------------------------------------------------------------- */

START_TEST(chain_first_hit_wins)
{
    struct rl_ident_input in;
    struct hdrs h;

    /* everything present: body first */
    input(&in, &h, "127.0.0.1");
    body_key(&in, "user-42", 7);
    hadd(&h, "X-Api-Key", "key-from-header");
    hadd(&h, "X-Forwarded-For", "203.0.113.7");
    EXPECT_ID(&full_chain, &in, "k:user-42");

    /* no body key: the header (looked up case-insensitively) */
    input(&in, &h, "127.0.0.1");
    hadd(&h, "x-api-key", "key-from-header");
    hadd(&h, "X-Forwarded-For", "203.0.113.7");
    EXPECT_ID(&full_chain, &in, "k:key-from-header");

    /* no key at all: the forwarded client */
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "203.0.113.7");
    EXPECT_ID(&full_chain, &in, "ip:203.0.113.7");

    /* nothing forwarded: the peer */
    input(&in, &h, "127.0.0.1");
    EXPECT_ID(&full_chain, &in, "ip:127.0.0.1");
    input(&in, &h, "2001:db8::7");
    EXPECT_ID(&full_chain, &in, "ip:2001:db8::7");

    /* a unix socket peer */
    input(&in, &h, NULL);
    EXPECT_ID(&full_chain, &in, "unix:");
}
END_TEST

START_TEST(chain_order_is_the_config_order)
{
    static struct rl_id_source v[] = {{RL_ID_HEADER, h_user, NULL}, {RL_ID_BODY, NULL, NULL}};
    static const struct rl_identity_chain chain = {v, 2};
    static struct rl_id_source only_body_v[] = {{RL_ID_BODY, NULL, NULL}};
    static const struct rl_identity_chain only_body = {only_body_v, 1};
    static struct rl_id_source only_fwd_v[] = {{RL_ID_FORWARDED, NULL, NULL}};
    static const struct rl_identity_chain only_fwd = {only_fwd_v, 1};
    static const struct rl_identity_chain empty = {NULL, 0};
    struct rl_ident_input in;
    struct hdrs h;

    input(&in, &h, "198.51.100.1");
    body_key(&in, "from-body", 9);
    hadd(&h, "X-User", "from-header");
    EXPECT_ID(&chain, &in, "k:from-header");

    input(&in, &h, "198.51.100.1");
    body_key(&in, "from-body", 9);
    EXPECT_ID(&chain, &in, "k:from-body");

    input(&in, &h, "198.51.100.1");
    EXPECT_NO_ID(&chain, &in);
    EXPECT_NO_ID(&only_body, &in);
    EXPECT_NO_ID(&empty, &in);
    /* forwarded alone, from an untrusted peer: nothing */
    hadd(&h, "X-Forwarded-For", "203.0.113.7");
    EXPECT_NO_ID(&only_fwd, &in);
}
END_TEST

START_TEST(body_key_bytes_kept)
{
    struct rl_ident_input in;
    struct hdrs h;

    /* a NUL inside the key is part of it */
    input(&in, &h, "198.51.100.1");
    body_key(&in, "a\0b", 3);
    expect_id(&full_chain, &in, "k:a\0b", 5);
}
END_TEST

START_TEST(header_value_length)
{
    struct rl_ident_input in;
    struct hdrs h;
    char v513[514], v512[513], want[515];

    memset(v513, 'h', 513);
    v513[513] = '\0';
    memset(v512, 'h', 512);
    v512[512] = '\0';

    /* over 512 bytes: refused, naming the header (never the next source:
     * a client would pad its way out of its bucket, issue 24) */
    char out[RL_IDENTITY_MAX], *error = NULL;
    size_t len;
    input(&in, &h, "198.51.100.1");
    hadd(&h, "X-Api-Key", v513);
    ck_assert_int_eq(identity_resolve(&full_chain, &trusted, &in, out, sizeof(out), &len, &error),
                     RL_ERR);
    ck_assert_str_eq(error, "X-Api-Key: longer than 512 bytes");
    free(error);

    /* 512 bytes: taken whole */
    input(&in, &h, "198.51.100.1");
    hadd(&h, "X-Api-Key", v512);
    memcpy(want, "k:", 2);
    memcpy(want + 2, v512, 512);
    expect_id(&full_chain, &in, want, 514);

    /* empty: skipped */
    input(&in, &h, "198.51.100.1");
    hadd(&h, "X-Api-Key", "");
    EXPECT_ID(&full_chain, &in, "ip:198.51.100.1");
}
END_TEST

START_TEST(output_too_small)
{
    struct rl_ident_input in;
    struct hdrs h;
    char out[8];
    size_t len = 0;

    input(&in, &h, "198.51.100.1");
    body_key(&in, "0123456789", 10);
    char *error = NULL;

    memset(out, 'x', sizeof(out));
    /* refused, never the next source */
    ck_assert_int_eq(identity_resolve(&full_chain, &trusted, &in, out, 6, &len, &error),
                     RL_ERR);
    ck_assert_ptr_nonnull(strstr(error, "longer than"));
    free(error);
    ck_assert_int_eq(out[6], 'x');
    ck_assert_int_eq(out[7], 'x');
    error = NULL;
    ck_assert_int_eq(identity_resolve(&full_chain, &trusted, &in, out, 5, &len, &error),
                     RL_ERR);
    free(error);
}
END_TEST

/* ---- forwarded ------------------------------------------------------------------------- */

START_TEST(forwarded_needs_a_trusted_peer)
{
    struct rl_ident_input in;
    struct hdrs h;

    /* a client talking to us directly cannot name itself */
    expect_xff("198.51.100.1", "203.0.113.7", "");
    expect_xff("::2", "203.0.113.7", "");
    expect_xff(NULL, "203.0.113.7", "");
    input(&in, &h, "198.51.100.1");
    hadd(&h, "X-Forwarded-For", "203.0.113.7");
    EXPECT_ID(&full_chain, &in, "ip:198.51.100.1");
    expect_fwd("198.51.100.1", "for=203.0.113.7", "");

    /* through a trusted proxy, over IPv4, IPv6 or IPv4-mapped */
    expect_xff("127.0.0.1", "203.0.113.7", "203.0.113.7");
    expect_xff("127.9.9.9", "203.0.113.7", "203.0.113.7");
    expect_xff("::1", "203.0.113.7", "203.0.113.7");
    expect_xff("::ffff:10.1.1.1", "203.0.113.7", "203.0.113.7");
    expect_fwd("10.1.1.1", "for=203.0.113.7", "203.0.113.7");

    /* a trusted peer without the headers: nothing forwarded, the peer */
    int family;
    uint8_t a[16];
    bool found = true;
    char *error = NULL;
    input(&in, &h, "10.1.1.1");
    ck_assert_int_eq(identity_forwarded(&trusted, &in, &family, a, &found, &error), RL_OK);
    ck_assert(!found);
    EXPECT_ID(&full_chain, &in, "ip:10.1.1.1");
}
END_TEST

START_TEST(xff_right_to_left)
{
    /* the first untrusted address from the right */
    expect_xff("10.0.0.1", "198.51.100.9, 203.0.113.7, 10.0.0.2", "203.0.113.7");
    expect_xff("10.0.0.1", "198.51.100.9, 203.0.113.7, 10.0.0.2, 127.0.0.1",
               "203.0.113.7");
    expect_xff("10.0.0.1", "203.0.113.7", "203.0.113.7");
    /* spacing and empty elements */
    expect_xff("10.0.0.1", " 198.51.100.9 ,\t203.0.113.7 ,10.0.0.2 ", "203.0.113.7");
    expect_xff("10.0.0.1", "203.0.113.7,,10.0.0.2,", "203.0.113.7");
    expect_xff("10.0.0.1", "203.0.113.7,10.0.0.2", "203.0.113.7");
    /* ports, brackets, IPv6 and IPv4-mapped, all normalised */
    expect_xff("10.0.0.1", "203.0.113.7:5555", "203.0.113.7");
    expect_xff("10.0.0.1", "[2001:DB8::1]:443, 10.0.0.2", "2001:db8::1");
    expect_xff("10.0.0.1", "2001:0db8:0:0:0:0:0:1", "2001:db8::1");
    expect_xff("10.0.0.1", "::ffff:203.0.113.7", "203.0.113.7");
    /* a trusted address reached through an IPv4-mapped form is still trusted */
    expect_xff("10.0.0.1", "203.0.113.7, ::ffff:10.0.0.2", "203.0.113.7");
}
END_TEST

START_TEST(xff_spoofed_left_part_ignored)
{
    struct rl_ident_input in;
    struct hdrs h;

    /* the client wrote the left part; the proxy appended the real address */
    expect_xff("127.0.0.1", "6.6.6.6, 203.0.113.7", "203.0.113.7");
    expect_xff("127.0.0.1", "1.1.1.1, 2.2.2.2, 3.3.3.3, 203.0.113.7", "203.0.113.7");
    /* pretending to be a trusted proxy does not help */
    expect_xff("127.0.0.1", "10.0.0.5, 203.0.113.7", "203.0.113.7");
    expect_xff("127.0.0.1", "127.0.0.1, 203.0.113.7", "203.0.113.7");
    expect_xff("127.0.0.1", "garbage, 203.0.113.7", "203.0.113.7");
    expect_xff("127.0.0.1", "\"; DROP, 203.0.113.7", "203.0.113.7");

    /* so two clients with different spoofs get the same identity */
    char a[RL_IDENTITY_MAX], b[RL_IDENTITY_MAX];
    size_t alen = 0, blen = 0;
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "1.1.1.1, 203.0.113.7");
    ck_assert(identity_resolve(&full_chain, &trusted, &in, a, sizeof(a), &alen, &no_error) == RL_OK);
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "2.2.2.2, 10.0.0.9, 203.0.113.7");
    ck_assert(identity_resolve(&full_chain, &trusted, &in, b, sizeof(b), &blen, &no_error) == RL_OK);
    ck_assert_uint_eq(alen, blen);
    ck_assert_mem_eq(a, b, alen);
}
END_TEST

START_TEST(xff_several_header_lines_are_one_list)
{
    struct rl_ident_input in;
    struct hdrs h;
    char got[INET6_ADDRSTRLEN];

    /* the client's own line first, the proxy's line (HAProxy style) after */
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "6.6.6.6");
    hadd(&h, "x-forwarded-for", "203.0.113.7");
    forwarded_text(&in, got, sizeof(got));
    ck_assert_str_eq(got, "203.0.113.7");
    EXPECT_ID(&full_chain, &in, "ip:203.0.113.7");

    input(&in, &h, "127.0.0.1");
    in.forwarded_rfc7239 = 1;
    hadd(&h, "Forwarded", "for=6.6.6.6");
    hadd(&h, "Forwarded", "for=203.0.113.7;proto=https");
    forwarded_text(&in, got, sizeof(got));
    ck_assert_str_eq(got, "203.0.113.7");

    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "6.6.6.6, 203.0.113.7");
    hadd(&h, "X-Forwarded-For", "10.0.0.2");
    forwarded_text(&in, got, sizeof(got));
    ck_assert_str_eq(got, "203.0.113.7");
}
END_TEST

START_TEST(xff_read_from_its_right_end_whatever_its_length)
{
    struct rl_ident_input in;
    struct hdrs h;
    char id[RL_IDENTITY_MAX], *error = NULL;
    size_t n = 0, cap = 64 * 1024 + 64, len;
    char *xff = malloc(cap), *hops = malloc(cap);
    int family;
    uint8_t a[16];
    bool found;

    ck_assert_ptr_nonnull(xff);
    ck_assert_ptr_nonnull(hops);
    /* 64 KiB the client wrote, then the address the proxy appended: read
     * from the right, the client's padding is never reached (issue 24: an
     * 8 KiB buffer read from the left ignored the chain whole, and the
     * caller became the proxy) */
    while (n < 64 * 1024)
        n += (size_t)snprintf(xff + n, cap - n, "6.6.6.6, ");
    snprintf(xff + n, cap - n, "203.0.113.7");
    expect_xff("127.0.0.1", xff, "203.0.113.7");
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", xff);
    EXPECT_ID(&full_chain, &in, "ip:203.0.113.7");
    /* more trusted hops than can be read: a 400 naming the header, never
     * the proxy's own address */
    n = 0;
    for (int i = 0; i < RL_FORWARDED_HOPS_MAX + 1; i++)
        n += (size_t)snprintf(hops + n, cap - n, "%s10.0.0.%d", i ? ", " : "", i % 250 + 1);
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", hops);
    ck_assert_int_eq(identity_forwarded(&trusted, &in, &family, a, &found, &error), RL_ERR);
    ck_assert_ptr_nonnull(strstr(error, "X-Forwarded-For"));
    free(error);
    error = NULL;
    ck_assert_int_eq(identity_resolve(&full_chain, &trusted, &in, id, sizeof(id), &len, &error),
                     RL_ERR);
    ck_assert_ptr_nonnull(strstr(error, "X-Forwarded-For"));
    free(error);
    free(xff);
    free(hops);
}
END_TEST

START_TEST(xff_all_trusted_gives_leftmost)
{
    expect_xff("127.0.0.1", "10.0.0.3, 10.0.0.2", "10.0.0.3");
    expect_xff("127.0.0.1", "10.0.0.3", "10.0.0.3");
    expect_xff("::1", "::1, 127.0.0.5, 10.9.9.9", "::1");
}
END_TEST

START_TEST(xff_garbage)
{
    static const char *const garbage[] = {
        "", " ", ",", ",,, ,", "garbage", "unknown", "_hidden", "[", "[]", "[::1",
        "]]]", "\"\"", "1.2.3", "1.2.3.4.5", "203.0.113.7, garbage",
        "203.0.113.7, ", "::::::", "1.2.3.4/8", "\t\t",
    };

    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        /* what is right of every valid address is broken: nothing vouched for */
        if (strcmp(garbage[i], "203.0.113.7, ") == 0)
            expect_xff("127.0.0.1", garbage[i], "203.0.113.7");
        else
            expect_xff("127.0.0.1", garbage[i], "");
    }

    /* a broken hop: what is left of it was not written by a trusted proxy */
    struct rl_ident_input in;
    struct hdrs h;
    char got[INET6_ADDRSTRLEN];
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "203.0.113.7, garbage, 10.0.0.2");
    forwarded_text(&in, got, sizeof(got));
    ck_assert_str_ne(got, "203.0.113.7");

    /* a long header of junk: no crash, no identity from it */
    size_t n = 64 * 1024;
    char *junk = malloc(n + 1);
    ck_assert_ptr_nonnull(junk);
    for (size_t i = 0; i < n; i++)
        junk[i] = "a,[]: \t\";="[i % 10];
    junk[n] = '\0';
    expect_xff("127.0.0.1", junk, "");
    expect_fwd("127.0.0.1", junk, "");
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", junk);
    EXPECT_ID(&full_chain, &in, "ip:127.0.0.1");
    free(junk);
}
END_TEST

START_TEST(forwarded_rfc7239)
{
    /* RFC 7239 section 4 and 7 examples */
    expect_fwd("127.0.0.1", "for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60");
    expect_fwd("127.0.0.1", "for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17");
    expect_fwd("127.0.0.1", "For=\"[2001:db8:cafe::17]\"", "2001:db8:cafe::17");
    expect_fwd("127.0.0.1", "for=192.0.2.43, for=198.51.100.17", "198.51.100.17");
    expect_fwd("127.0.0.1", "for=192.0.2.43, for=\"[2001:db8:cafe::17]\"",
               "2001:db8:cafe::17");
    /* parameters in any order and case, quoted IPv4 with a port */
    expect_fwd("127.0.0.1", "proto=https;FOR=192.0.2.43", "192.0.2.43");
    expect_fwd("127.0.0.1", "by=10.0.0.1; for=\"192.0.2.43:8080\"; proto=https",
               "192.0.2.43");
    /* right to left, past trusted proxies, a spoofed left part ignored */
    expect_fwd("127.0.0.1", "for=6.6.6.6, for=203.0.113.7, for=\"10.0.0.2\"",
               "203.0.113.7");
    expect_fwd("127.0.0.1", "for=10.0.0.3, for=10.0.0.2", "10.0.0.3");
    expect_fwd("127.0.0.1", "for=\"[::ffff:203.0.113.7]\"", "203.0.113.7");
    /* obfuscated or unknown nodes, and elements without for=, vouch for nothing */
    expect_fwd("127.0.0.1", "for=\"_gazonk\"", "");
    expect_fwd("127.0.0.1", "for=unknown", "");
    expect_fwd("127.0.0.1", "proto=https;by=10.0.0.1", "");
    /* a hop that does not say whom it served breaks the chain there */
    expect_fwd("127.0.0.1", "for=6.6.6.6, proto=https;by=10.0.0.1", "");
    expect_fwd("127.0.0.1", "for=6.6.6.6, for=unknown", "");
    expect_fwd("127.0.0.1", "for=", "");
    expect_fwd("127.0.0.1", "for=\"\"", "");
    expect_fwd("127.0.0.1", "for=\"", "");
    expect_fwd("127.0.0.1", "for=\"[::1\"", "");
    expect_fwd("127.0.0.1", ";;;", "");
    expect_fwd("127.0.0.1", "for", "");
    expect_fwd("127.0.0.1", "=", "");
    expect_fwd("127.0.0.1", "203.0.113.7", "");
}
END_TEST

START_TEST(forwarded_identity_is_typed_ip)
{
    struct rl_ident_input in;
    struct hdrs h;

    input(&in, &h, "127.0.0.1");
    in.forwarded_rfc7239 = 1;
    hadd(&h, "Forwarded", "for=\"[2001:DB8:cafe:0:0:0:0:17]:4711\"");
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:cafe::17");

    /* one caller, one identity: mapped and plain IPv4 are the same */
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "::ffff:203.0.113.7");
    EXPECT_ID(&full_chain, &in, "ip:203.0.113.7");
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-Forwarded-For", "203.0.113.7:4444");
    EXPECT_ID(&full_chain, &in, "ip:203.0.113.7");
}
END_TEST

/* ---- the key --------------------------------------------------------------------------- */

static int
count_byte(const char *s, size_t n, char c)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == c;
    return k;
}

struct key_case {
    const char *id;
    size_t len;
    const char *key;        /* with prefix "rl:" and policy "api" */
};

#define KC(id, key) {id, sizeof(id) - 1, key}

static const struct key_case key_cases[] = {
    KC("k:user-42", "{rl:api:k:user-42}"),
    KC("k:a", "{rl:api:k:a}"),
    KC("k:A", "{rl:api:k:A}"),
    KC("k:ab", "{rl:api:k:ab}"),
    KC("k:a}", "{rl:api:k:a%7D}"),
    KC("k:{a}", "{rl:api:k:%7Ba%7D}"),
    KC("k:}", "{rl:api:k:%7D}"),
    KC("k:a:b", "{rl:api:k:a%3Ab}"),
    KC("k:a\nb", "{rl:api:k:a%0Ab}"),
    KC("k:a\0b", "{rl:api:k:a%00b}"),
    KC("k:a\0", "{rl:api:k:a%00}"),
    KC("k:a b", "{rl:api:k:a%20b}"),
    KC("k:\xc3\xa9", "{rl:api:k:%C3%A9}"),
    KC("k:%C3%A9", "{rl:api:k:%25C3%25A9}"),
    KC("k:a%7D", "{rl:api:k:a%257D}"),
    KC("k:\xff", "{rl:api:k:%FF}"),
    KC("k:user@example.com/x=y+z", "{rl:api:k:user@example.com/x=y+z}"),
    KC("k:1.2.3.4", "{rl:api:k:1.2.3.4}"),
    KC("ip:1.2.3.4", "{rl:api:ip:1.2.3.4}"),
    KC("k:ip:1.2.3.4", "{rl:api:k:ip%3A1.2.3.4}"),
    KC("ip:2001:db8::1", "{rl:api:ip:2001%3Adb8%3A%3A1}"),
    KC("unix:", "{rl:api:unix:}"),
};

/* ---- issue 24: networks, trusted headers, compounds ------------------------------- */

START_TEST(address_is_its_network)
{
    struct rl_ident_input in;
    struct hdrs h;

    /* ipv6_prefix 64: every address of a /64 is one caller */
    input(&in, &h, "2001:db8:1:2:aaaa:bbbb:cccc:5");
    in.ipv6_prefix = 64;
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:1:2::/64");
    input(&in, &h, "2001:db8:1:2::9");
    in.ipv6_prefix = 64;
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:1:2::/64");
    input(&in, &h, "2001:db8:1:3::9");
    in.ipv6_prefix = 64;
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:1:3::/64");
    /* odd lengths cut inside a byte */
    input(&in, &h, "2001:db8:1:2:ffff::1");
    in.ipv6_prefix = 71;
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:1:2:fe00::/71");
    /* IPv4 at 32 (the default) stays the address; at 24 its /24 */
    input(&in, &h, "198.51.100.77");
    in.ipv4_prefix = 32;
    in.ipv6_prefix = 64;
    EXPECT_ID(&full_chain, &in, "ip:198.51.100.77");
    input(&in, &h, "198.51.100.77");
    in.ipv4_prefix = 24;
    EXPECT_ID(&full_chain, &in, "ip:198.51.100.0/24");
    /* IPv4-mapped is IPv4, cut by ipv4_prefix */
    input(&in, &h, "::ffff:198.51.100.77");
    in.ipv4_prefix = 24;
    in.ipv6_prefix = 64;
    EXPECT_ID(&full_chain, &in, "ip:198.51.100.0/24");
    /* a forwarded address likewise; the trusted hops are matched whole */
    input(&in, &h, "127.0.0.1");
    in.ipv6_prefix = 64;
    hadd(&h, "X-Forwarded-For", "2001:db8:7:7:1::2, 10.0.0.3");
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:7:7::/64");
    /* 128: the address itself */
    input(&in, &h, "2001:db8:1:2::9");
    in.ipv6_prefix = 128;
    EXPECT_ID(&full_chain, &in, "ip:2001:db8:1:2::9");
}
END_TEST

START_TEST(trusted_header_only_from_a_trusted_proxy)
{
    static char h_user_name[] = "X-User";
    static struct rl_id_source v[] = {{RL_ID_TRUSTED_HEADER, h_user_name, NULL},
                                      {RL_ID_PEER, NULL, NULL}};
    static const struct rl_identity_chain chain = {v, 2};
    struct rl_ident_input in;
    struct hdrs h;

    /* a client talking to us directly cannot choose it */
    input(&in, &h, "198.51.100.1");
    hadd(&h, "X-User", "alice");
    EXPECT_ID(&chain, &in, "ip:198.51.100.1");
    input(&in, &h, NULL);
    hadd(&h, "X-User", "alice");
    EXPECT_ID(&chain, &in, "unix:");
    /* from a trusted proxy: the last line, the one the proxy wrote */
    input(&in, &h, "127.0.0.1");
    hadd(&h, "X-User", "alice");
    EXPECT_ID(&chain, &in, "k:alice");
    input(&in, &h, "10.0.0.2");
    hadd(&h, "X-User", "mallory");
    hadd(&h, "X-User", "alice");
    EXPECT_ID(&chain, &in, "k:alice");
    /* absent or empty: the next source */
    input(&in, &h, "10.0.0.2");
    EXPECT_ID(&chain, &in, "ip:10.0.0.2");
}
END_TEST

START_TEST(compound_source)
{
    static char h_user_name[] = "X-User";
    static struct rl_id_source body_part = {RL_ID_BODY, NULL, NULL};
    static struct rl_id_source user_part = {RL_ID_HEADER, h_user_name, NULL};
    static struct rl_id_source v[] = {{RL_ID_PEER, NULL, &body_part},
                                      {RL_ID_BODY, NULL, &user_part},
                                      {RL_ID_PEER, NULL, NULL}};
    static const struct rl_identity_chain chain = {v, 3};
    struct rl_ident_input in;
    struct hdrs h;
    char a[RL_IDENTITY_MAX], b[RL_IDENTITY_MAX], ka[RL_REDIS_KEY_MAX], kb[RL_REDIS_KEY_MAX];
    size_t alen, blen;

    /* address and user: every part must give one */
    input(&in, &h, "198.51.100.1");
    body_key(&in, "alice", 5);
    EXPECT_ID(&chain, &in, "+ip:198.51.100.1+k:alice");
    input(&in, &h, "198.51.100.1");
    EXPECT_ID(&chain, &in, "ip:198.51.100.1");
    /* no value can pass for two parts: '+' and '%' escaped */
    input(&in, &h, "198.51.100.1");
    body_key(&in, "a+k:b%", 6);
    EXPECT_ID(&chain, &in, "+ip:198.51.100.1+k:a%2Bk:b%25");
    /* body "a+k:b" alone vs body "a" + header "b": apart */
    input(&in, &h, NULL);
    in.peer_family = 0;
    body_key(&in, "a", 1);
    hadd(&h, "X-User", "b");
    static struct rl_id_source only2[] = {{RL_ID_BODY, NULL, &user_part}};
    static const struct rl_identity_chain c2 = {only2, 1};
    ck_assert_int_eq(identity_resolve(&c2, &trusted, &in, a, sizeof(a), &alen, &no_error),
                     RL_OK);
    input(&in, &h, NULL);
    body_key(&in, "a+k:b", 5);
    ck_assert_int_eq(identity_resolve(&full_chain, &trusted, &in, b, sizeof(b), &blen,
                                      &no_error),
                     RL_OK);
    ck_assert(alen != blen || memcmp(a, b, alen) != 0);
    /* the keys, in one tag per policy (shared) and apart */
    size_t na, nb;
    ck_assert_int_eq(identity_key("rl:", "login", a, alen, true, ka, sizeof(ka), &na), RL_OK);
    ck_assert_int_eq(identity_key("rl:", "login", b, blen, true, kb, sizeof(kb), &nb), RL_OK);
    ck_assert_str_eq(ka, "{rl:login}:+k%3Aa+k%3Ab");
    ck_assert_str_eq(kb, "{rl:login}:k:a+k%3Ab");
    ck_assert_uint_eq(na, strlen(ka));
    ck_assert_uint_eq(nb, strlen(kb));
}
END_TEST

START_TEST(compound_of_two_full_keys_fits)
{
    static char h_user_name[] = "X-User";
    static struct rl_id_source user_part = {RL_ID_HEADER, h_user_name, NULL};
    static struct rl_id_source v[] = {{RL_ID_BODY, NULL, &user_part}};
    static const struct rl_identity_chain chain = {v, 1};
    static char k512[RL_KEY_MAX + 1];
    struct rl_ident_input in;
    struct hdrs h;
    char out[RL_IDENTITY_MAX], key[RL_REDIS_KEY_MAX], *error = NULL;
    size_t len;

    memset(k512, 'x', RL_KEY_MAX);
    input(&in, &h, "198.51.100.1");
    body_key(&in, k512, RL_KEY_MAX);
    hadd(&h, "X-User", k512);
    ck_assert_int_eq(identity_resolve(&chain, &trusted, &in, out, sizeof(out), &len, &error),
                     RL_OK);
    ck_assert_uint_eq(len, 2 * (3 + RL_KEY_MAX));
    size_t klen;
    ck_assert_int_eq(identity_key("rl:", "p", out, len, true, key, sizeof(key), &klen), RL_OK);
    ck_assert_uint_gt(klen, 0);
}
END_TEST

/* identity_key as it was before its escaping went eight bytes a step: a
 * byte at a time through a chain of range tests.  The keys in Redis are
 * these bytes, so the new one must give exactly them. */
static bool
ref_safe_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_' || c == '@' || c == '/' || c == '=' || c == '+';
}

static int
ref_identity_key(const char *prefix, const char *policy, const char *id, size_t idlen,
                 bool shared, char *buf, size_t size, size_t *len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t plen = strlen(prefix), nlen = strlen(policy), o = 0;
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
    for (size_t i = typelen; i < idlen; i++) {
        unsigned char c = (unsigned char)id[i];
        if (ref_safe_byte(c)) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    if (!shared)
        buf[o++] = '}';
    buf[o] = '\0';
    *len = o;
    return RL_OK;
}

/* Both functions on one input, every buffer size around the key's. */
static void
key_same_as_ref(const char *id, size_t idlen, bool shared, const char *what)
{
    static char got[RL_REDIS_KEY_MAX], want[RL_REDIS_KEY_MAX];
    size_t ng = 0, nw = 0;
    int rg = identity_key("rl:", "api", id, idlen, shared, got, sizeof(got), &ng);
    int rw = ref_identity_key("rl:", "api", id, idlen, shared, want, sizeof(want), &nw);

    ck_assert_msg(rg == rw, "%s: %d, the old function %d", what, rg, rw);
    if (rg != RL_OK)
        return;
    ck_assert_msg(ng == nw && memcmp(got, want, nw + 1) == 0, "%s: \"%s\", the old function \"%s\"",
                  what, got, want);
}

START_TEST(key_escaping_same_as_before)
{
    static char id[2 + RL_KEY_MAX];
    char what[96];

    /* every byte value alone, then at each of the 17 places of a 17-byte
     * run (both sides of an eight-byte step), after a type or none */
    for (int c = 0; c < 256; c++) {
        for (int typed = 0; typed < 2; typed++) {
            size_t t = typed ? 2 : 0;

            memcpy(id, "k:", 2);
            id[t] = (char)c;
            snprintf(what, sizeof(what), "byte 0x%02x alone, typed %d", c, typed);
            key_same_as_ref(id, t + 1, typed, what);
            for (size_t at = 0; at < 17; at++) {
                memset(id + t, 'a', 17);
                id[t + at] = (char)c;
                snprintf(what, sizeof(what), "byte 0x%02x at %zu of 17, typed %d", c, at, typed);
                key_same_as_ref(id, t + 17, at % 2 == 0, what);
            }
        }
    }
    /* 20,000 generated identities of 0..RL_KEY_MAX+2 bytes: most bytes
     * safe (a run of eight whole), some any byte */
    for (uint32_t seed = 1; seed <= 20000; seed++) {
        struct gen g = gen_seeded(seed);
        size_t n = gen_next(&g) % (sizeof(id) + 1);
        uint32_t rare = 1 + gen_next(&g) % 64;

        for (size_t i = 0; i < n; i++) {
            uint32_t r = gen_next(&g);
            id[i] = r % rare == 0 ? (char)(r >> 8) : "abcXYZ019.-_@/=+"[(r >> 8) % 16];
        }
        if (n >= 2 && seed % 3 == 0)
            memcpy(id, seed % 2 ? "k:" : "+k", 2);
        snprintf(what, sizeof(what), "seed %u (%zu bytes)", seed, n);
        key_same_as_ref(id, n, seed % 5 == 0, what);
    }
}
END_TEST

START_TEST(key_exact)
{
    const struct key_case *c = &key_cases[_i];
    char buf[RL_REDIS_KEY_MAX];
    size_t n;

    ck_assert_int_eq(identity_key("rl:", "api", c->id, c->len, false, buf, sizeof(buf), &n), RL_OK);
    ck_assert_uint_eq(n, strlen(c->key));
    ck_assert_str_eq(buf, c->key);
}
END_TEST

START_TEST(key_all_distinct_one_hash_tag)
{
    enum { N = RL_ARRAY_LEN(key_cases) + 3 };
    static char big[N][RL_REDIS_KEY_MAX];
    static char k512[2 + RL_KEY_MAX], k511[2 + RL_KEY_MAX], kcurly[2 + RL_KEY_MAX];
    const char *ids[N];
    size_t lens[N];
    size_t n[N];
    size_t m = 0;

    for (size_t i = 0; i < RL_ARRAY_LEN(key_cases); i++, m++) {
        ids[m] = key_cases[i].id;
        lens[m] = key_cases[i].len;
    }
    memcpy(k512, "k:", 2);
    memset(k512 + 2, 'x', RL_KEY_MAX);
    memcpy(k511, k512, sizeof(k511));
    memcpy(kcurly, "k:", 2);
    memset(kcurly + 2, '}', RL_KEY_MAX);
    ids[m] = k512, lens[m++] = 2 + RL_KEY_MAX;
    ids[m] = k511, lens[m++] = 1 + RL_KEY_MAX;
    ids[m] = kcurly, lens[m++] = 2 + RL_KEY_MAX;

    for (size_t i = 0; i < m; i++) {
        ck_assert_msg(identity_key("rl:", "api", ids[i], lens[i], false, big[i], sizeof(big[i]), &n[i]) ==
                          RL_OK && n[i] > 0,
                      "id %zu: no key", i);
        ck_assert_msg(strlen(big[i]) == (size_t)n[i], "id %zu: NUL inside the key", i);
        ck_assert_msg(big[i][0] == '{' && big[i][n[i] - 1] == '}',
                      "id %zu: %s is not one hash tag", i, big[i]);
        ck_assert_msg(count_byte(big[i], (size_t)n[i], '{') == 1 &&
                      count_byte(big[i], (size_t)n[i], '}') == 1,
                      "id %zu: %s has more than one brace", i, big[i]);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(n[i] != n[j] || memcmp(big[i], big[j], (size_t)n[i]) != 0,
                          "ids %zu and %zu share the key %s", j, i, big[i]);
    }
}
END_TEST

START_TEST(key_worst_case_fits)
{
    /* the longest prefix and policy name, 512 bytes that all need escaping */
    char prefix[RL_NAME_MAX + 1], policy[RL_NAME_MAX + 1], id[2 + RL_KEY_MAX];
    char buf[RL_REDIS_KEY_MAX];
    size_t n;

    memset(prefix, 'p', RL_NAME_MAX);
    prefix[RL_NAME_MAX] = '\0';
    memset(policy, 'q', RL_NAME_MAX);
    policy[RL_NAME_MAX] = '\0';
    memcpy(id, "k:", 2);
    memset(id + 2, '}', RL_KEY_MAX);
    ck_assert_int_eq(identity_key(prefix, policy, id, sizeof(id), false, buf, sizeof(buf), &n), RL_OK);
    /* '{' prefix policy ':' "k:" 512 x "%7D" '}' */
    ck_assert_uint_eq(n, 1 + RL_NAME_MAX + RL_NAME_MAX + 1 + 2 + 3 * RL_KEY_MAX + 1);
    ck_assert_int_eq(count_byte(buf, (size_t)n, '}'), 1);
}
END_TEST

START_TEST(key_buffer_too_small)
{
    char buf[32];
    size_t n = 0;
    /* "{rl:api:k:%7D}" is 14 bytes and its NUL */
    memset(buf, 'x', sizeof(buf));
    ck_assert_int_eq(identity_key("rl:", "api", "k:}", 3, false, buf, 15, &n), RL_OK);
    ck_assert_uint_eq(n, 14);
    ck_assert_str_eq(buf, "{rl:api:k:%7D}");
    memset(buf, 'x', sizeof(buf));
    ck_assert_int_eq(identity_key("rl:", "api", "k:}", 3, false, buf, 14, &n), RL_ERR);
    for (size_t i = 0; i < sizeof(buf); i++)
        ck_assert_int_eq(buf[i], 'x');
    ck_assert_int_eq(identity_key("rl:", "api", "k:}", 3, false, buf, 0, &n), RL_ERR);
}
END_TEST

START_TEST(key_typed_apart)
{
    struct rl_ident_input in;
    struct hdrs h;
    char id1[RL_IDENTITY_MAX], id2[RL_IDENTITY_MAX], id3[RL_IDENTITY_MAX];
    char k1[RL_REDIS_KEY_MAX], k2[RL_REDIS_KEY_MAX], k3[RL_REDIS_KEY_MAX];
    size_t l1, l2, l3;

    /* an API key that looks like an address ... */
    input(&in, &h, "1.2.3.4");
    body_key(&in, "1.2.3.4", 7);
    ck_assert(identity_resolve(&full_chain, &trusted, &in, id1, sizeof(id1), &l1, &no_error) == RL_OK);
    /* ... is not that address */
    input(&in, &h, "1.2.3.4");
    ck_assert(identity_resolve(&full_chain, &trusted, &in, id2, sizeof(id2), &l2, &no_error) == RL_OK);
    /* nor is a key that spells the typed form */
    input(&in, &h, "1.2.3.4");
    body_key(&in, "ip:1.2.3.4", 10);
    ck_assert(identity_resolve(&full_chain, &trusted, &in, id3, sizeof(id3), &l3, &no_error) == RL_OK);

    size_t n1, n2, n3;
    ck_assert_int_eq(identity_key("rl:", "login", id1, l1, false, k1, sizeof(k1), &n1), RL_OK);
    ck_assert_int_eq(identity_key("rl:", "login", id2, l2, false, k2, sizeof(k2), &n2), RL_OK);
    ck_assert_int_eq(identity_key("rl:", "login", id3, l3, false, k3, sizeof(k3), &n3), RL_OK);
    ck_assert_str_eq(k1, "{rl:login:k:1.2.3.4}");
    ck_assert_str_eq(k2, "{rl:login:ip:1.2.3.4}");
    ck_assert_str_eq(k3, "{rl:login:k:ip%3A1.2.3.4}");
    ck_assert_uint_eq(n1, strlen(k1));
    ck_assert_uint_eq(n2, strlen(k2));
    ck_assert_uint_eq(n3, strlen(k3));
}
END_TEST

/* ---- policy_match ------------------------------------------------------------------------ */

/* policy_match over a config's policies, as check.c asks it */
static const struct rl_policy *
match(const struct rl_config *cfg, const char *path, size_t len, unsigned method)
{
    return policy_match(cfg->policies, cfg->npolicies, cfg->path_fold, path, len, method);
}

static char p_login[] = "/login", p_api[] = "/api/", g_css[] = "/static/*.css",
            p_root[] = "/";
static char n_exact[] = "exact-login", n_api[] = "api", n_css[] = "css",
            n_reads[] = "reads", n_default[] = "default", n_root[] = "root";

static struct rl_policy pols[] = {
    {.name = n_exact, .match = {.path = p_login, .methods = RL_M_POST}},
    {.name = n_api, .match = {.path_prefix = p_api}},
    {.name = n_css, .match = {.path_glob = g_css}},
    {.name = n_reads, .match = {.methods = RL_M_GET | RL_M_HEAD}},
    {.name = n_default},
};

struct match_case {
    const char *path;
    size_t len;             /* 0: strlen */
    unsigned method;
    int want;               /* index in pols, -1: none */
};

static const struct match_case match_cases[] = {
    {"/login", 0, RL_M_POST, 0},
    {"/login", 0, RL_M_GET, 3},
    {"/login", 0, RL_M_PUT, 4},
    {"/login/", 0, RL_M_POST, 4},
    {"/logi", 0, RL_M_POST, 4},
    {"/login?next=/", 6, RL_M_POST, 0},
    {"/api/v1/users", 0, RL_M_DELETE, 1},
    {"/api/", 0, RL_M_POST, 1},
    {"/api/", 0, RL_M_GET, 1},
    {"/api", 0, RL_M_POST, 4},
    {"/api", 0, RL_M_GET, 3},
    {"/static/a/b.css", 0, RL_M_POST, 2},
    {"/static/a/b.css", 0, RL_M_GET, 2},
    {"/static/a/b.js", 0, RL_M_GET, 3},
    {"/static/a/b.js", 0, RL_M_HEAD, 3},
    {"/static/a/b.js", 0, RL_M_OPTIONS, 4},
    {"/login", 0, 0, 4},        /* an unknown method fits only "any method" */
    {"", 0, RL_M_GET, 3},
};

START_TEST(match_first_wins)
{
    const struct match_case *c = &match_cases[_i];
    struct rl_config cfg;
    const struct rl_policy *p;

    memset(&cfg, 0, sizeof(cfg));
    cfg.policies = pols;
    cfg.npolicies = RL_ARRAY_LEN(pols);
    p = match(&cfg, c->path, c->len ? c->len : strlen(c->path), c->method);
    ck_assert_msg(p == &pols[c->want], "%s (method bit %u) matched %s, expected %s",
                  c->path, c->method, p ? p->name : "nothing", pols[c->want].name);
}
END_TEST

/* path_fold "trailing_slash": a path and the same with a '/' after it are
 * one (case and params are folded before matching: check_pathnorm). */
START_TEST(match_trailing_slash_folded)
{
    struct rl_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.policies = pols;
    cfg.npolicies = RL_ARRAY_LEN(pols);
    ck_assert_ptr_eq(match(&cfg, "/login/", 7, RL_M_POST), &pols[4]);
    ck_assert_ptr_eq(match(&cfg, "/api", 4, RL_M_POST), &pols[4]);
    cfg.path_fold = RL_PATHFOLD_SLASH;
    ck_assert_ptr_eq(match(&cfg, "/login/", 7, RL_M_POST), &pols[0]);
    ck_assert_ptr_eq(match(&cfg, "/login", 6, RL_M_POST), &pols[0]);
    ck_assert_ptr_eq(match(&cfg, "/login//", 8, RL_M_POST), &pols[4]);
    ck_assert_ptr_eq(match(&cfg, "/logi", 5, RL_M_POST), &pols[4]);
    ck_assert_ptr_eq(match(&cfg, "/api", 4, RL_M_POST), &pols[1]);
    ck_assert_ptr_eq(match(&cfg, "/api/x", 6, RL_M_POST), &pols[1]);
    ck_assert_ptr_eq(match(&cfg, "/apix", 5, RL_M_POST), &pols[4]);
}
END_TEST

START_TEST(match_none)
{
    struct rl_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    ck_assert_ptr_null(match(&cfg, "/", 1, RL_M_GET));
    cfg.policies = pols;
    cfg.npolicies = 4;              /* without "default" */
    ck_assert_ptr_null(match(&cfg, "/other", 6, RL_M_POST));
    ck_assert_ptr_null(match(&cfg, "/login", 6, RL_M_PUT));
    ck_assert_ptr_eq(match(&cfg, "/login", 6, RL_M_POST), &pols[0]);
}
END_TEST

START_TEST(match_file_order)
{
    static struct rl_policy v[] = {
        {.name = n_root, .match = {.path_prefix = p_root}},
        {.name = n_exact, .match = {.path = p_login}},
    };
    struct rl_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.policies = v;
    cfg.npolicies = 2;
    /* the broad rule first takes everything, even the exact path */
    ck_assert_ptr_eq(match(&cfg, "/login", 6, RL_M_POST), &v[0]);
    ck_assert_ptr_eq(match(&cfg, "/x", 2, RL_M_GET), &v[0]);
    ck_assert_ptr_null(match(&cfg, "x", 1, RL_M_GET));
}
END_TEST

static Suite *
identity_suite(void)
{
    Suite *s = suite_create("identity");
    TCase *tc;

    tc = tcase_create("chain");
    tcase_add_checked_fixture(tc, setup_trusted, NULL);
    tcase_add_test(tc, chain_first_hit_wins);
    tcase_add_test(tc, chain_order_is_the_config_order);
    tcase_add_test(tc, body_key_bytes_kept);
    tcase_add_test(tc, header_value_length);
    tcase_add_test(tc, output_too_small);
    suite_add_tcase(s, tc);

    tc = tcase_create("forwarded");
    tcase_add_checked_fixture(tc, setup_trusted, NULL);
    tcase_add_test(tc, forwarded_needs_a_trusted_peer);
    tcase_add_test(tc, xff_right_to_left);
    tcase_add_test(tc, xff_spoofed_left_part_ignored);
    tcase_add_test(tc, xff_several_header_lines_are_one_list);
    tcase_add_test(tc, xff_read_from_its_right_end_whatever_its_length);
    tcase_add_test(tc, xff_all_trusted_gives_leftmost);
    tcase_add_test(tc, xff_garbage);
    tcase_add_test(tc, forwarded_rfc7239);
    tcase_add_test(tc, forwarded_identity_is_typed_ip);
    suite_add_tcase(s, tc);

    tc = tcase_create("key");
    tcase_add_checked_fixture(tc, setup_trusted, NULL);
    tcase_add_loop_test(tc, key_exact, 0, (int)RL_ARRAY_LEN(key_cases));
    tcase_add_test(tc, key_all_distinct_one_hash_tag);
    tcase_add_test(tc, key_worst_case_fits);
    tcase_add_test(tc, key_escaping_same_as_before);
    tcase_add_test(tc, key_buffer_too_small);
    tcase_add_test(tc, key_typed_apart);
    tcase_add_test(tc, address_is_its_network);
    tcase_add_test(tc, trusted_header_only_from_a_trusted_proxy);
    tcase_add_test(tc, compound_source);
    tcase_add_test(tc, compound_of_two_full_keys_fits);
    suite_add_tcase(s, tc);

    tc = tcase_create("policy_match");
    tcase_add_loop_test(tc, match_first_wins, 0, (int)RL_ARRAY_LEN(match_cases));
    tcase_add_test(tc, match_none);
    tcase_add_test(tc, match_trailing_slash_folded);
    tcase_add_test(tc, match_file_order);
    suite_add_tcase(s, tc);

    return s;
}

int
main(void)
{
    return rl_unit_run(identity_suite(), CK_FORK_GETENV);
}
