/*
 * check_parse.c — the small parsers: durations, sizes, Redis URLs, listen
 * addresses, CIDRs, client addresses (and their canonical text), the path
 * glob and log level names.  Every expected value is written out by hand.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "unit.h"

#include "config.h"
#include "netaddr.h"
#include "policy.h"
#include "redis_url.h"

/* ---- durations ------------------------------------------------------------ */

struct dur_case {
    const char *text;
    int64_t ms;
};

static const struct dur_case good_durations[] = {
    {"500ms", 500},
    {"10s", 10000},
    {"1m", 60000},
    {"1h", 3600000},
    {"0ms", 0},
    {"0s", 0},
    {"1ms", 1},
    {"90m", 5400000},
    {"24h", 86400000},
    {"007s", 7000},
    /* INT64_MAX / 3600000 = 2562047788015 (rest 754...): still fits */
    {"2562047788015h", 9223372036854000000LL},
    {"9223372036854775807ms", INT64_MAX},
};

START_TEST(duration_good)
{
    const struct dur_case *c = &good_durations[_i];
    int64_t v = -12345;

    ck_assert_msg(schema_parse_duration_ms(c->text, &v) == RL_OK, "rejected \"%s\"", c->text);
    ck_assert_msg(v == c->ms, "\"%s\" gave %lld, not %lld", c->text, (long long)v,
                  (long long)c->ms);
}
END_TEST

static const char *const bad_durations[] = {
    "", "10", "1d", "-1s", "1.5s", "s", "ms", "+1s", " 1s", "1s ", "1 s", "1S",
    "1MS", "1sec", "1msx", "1hm", "0x10s", "1e3ms",
    "99999999999999999999ms",       /* does not fit strtoll */
    "2562047788016h",               /* fits, but not once multiplied */
    "9223372036854776s",
    "9223372036854775808ms",
    "153722867280912931m",
};

START_TEST(duration_bad)
{
    const char *s = bad_durations[_i];
    int64_t v = -12345;

    ck_assert_msg(schema_parse_duration_ms(s, &v) == RL_ERR, "accepted \"%s\" as %lld", s,
                  (long long)v);
    ck_assert_msg(v == -12345, "\"%s\" wrote the output on failure", s);
}
END_TEST

/* ---- sizes ------------------------------------------------------------------ */

struct size_case {
    const char *text;
    int64_t bytes;
};

static const struct size_case good_sizes[] = {
    {"64k", 65536},
    {"64K", 65536},
    {"1m", 1048576},
    {"1M", 1048576},
    {"1024", 1024},
    {"0", 0},
    {"1kb", 1024},
    {"1KB", 1024},
    {"2mb", 2097152},
    {"10b", 10},
    {"9223372036854775807", INT64_MAX},
};

START_TEST(size_good)
{
    const struct size_case *c = &good_sizes[_i];
    int64_t v = -12345;

    ck_assert_msg(schema_parse_size(c->text, &v) == RL_OK, "rejected \"%s\"", c->text);
    ck_assert_msg(v == c->bytes, "\"%s\" gave %lld, not %lld", c->text, (long long)v,
                  (long long)c->bytes);
}
END_TEST

static const char *const bad_sizes[] = {
    "", "k", "m", "kb", "-1", "-1k", "+1k", " 1k", "1k ", "1 k", "1.5k", "1g",
    "1G", "1t", "1kk", "1bk", "1kbb", "0x10", "1e3",
    "99999999999999999999",
    "9007199254740992k",        /* 2^53 * 2^10 = 2^63: one past INT64_MAX */
    "8796093022208m",           /* 2^43 * 2^20 = 2^63 */
};

START_TEST(size_bad)
{
    const char *s = bad_sizes[_i];
    int64_t v = -12345;

    ck_assert_msg(schema_parse_size(s, &v) == RL_ERR, "accepted \"%s\" as %lld", s,
                  (long long)v);
    ck_assert_msg(v == -12345, "\"%s\" wrote the output on failure", s);
}
END_TEST

START_TEST(size_largest_multiples)
{
    int64_t v;

    /* 2^53 - 1 kibibytes = 2^63 - 1024: the largest that fits */
    ck_assert_int_eq(schema_parse_size("9007199254740991k", &v), RL_OK);
    ck_assert_int_eq(v, INT64_MAX - 1023);
    ck_assert_int_eq(schema_parse_size("8796093022207m", &v), RL_OK);
    ck_assert_int_eq(v, INT64_MAX - (1024 * 1024 - 1));
}
END_TEST

/* ---- Redis URLs ------------------------------------------------------------- */

struct url_case {
    const char *url;
    const char *host;       /* NULL: unix socket */
    int port;
    int db;
    const char *path;
    const char *username;
    const char *password;
    const char *display;
};

static const struct url_case good_urls[] = {
    {"redis://127.0.0.1:6379/0", "127.0.0.1", 6379, 0, NULL, NULL, NULL,
     "redis://127.0.0.1:6379/0"},
    {"redis://localhost", "localhost", 6379, 0, NULL, NULL, NULL,
     "redis://localhost:6379/0"},
    {"redis://localhost/", "localhost", 6379, 0, NULL, NULL, NULL,
     "redis://localhost:6379/0"},
    {"redis://redis.internal:6380/3", "redis.internal", 6380, 3, NULL, NULL, NULL,
     "redis://redis.internal:6380/3"},
    {"redis://h:1", "h", 1, 0, NULL, NULL, NULL, "redis://h:1/0"},
    {"redis://h:65535/15", "h", 65535, 15, NULL, NULL, NULL, "redis://h:65535/15"},
    {"redis://user:secret@10.0.0.1:6390/2", "10.0.0.1", 6390, 2, NULL, "user",
     "secret", "redis://10.0.0.1:6390/2"},
    {"redis://:secret@10.0.0.1", "10.0.0.1", 6379, 0, NULL, NULL, "secret",
     "redis://10.0.0.1:6379/0"},
    {"redis://secret@10.0.0.1", "10.0.0.1", 6379, 0, NULL, NULL, "secret",
     "redis://10.0.0.1:6379/0"},
    /* the password may hold ':' and '@'; the last '@' ends the credentials */
    {"redis://app:pa:ss@w@db:7000/1", "db", 7000, 1, NULL, "app", "pa:ss@w",
     "redis://db:7000/1"},
    {"redis://[::1]:6380/1", "::1", 6380, 1, NULL, NULL, NULL,
     "redis://[::1]:6380/1"},
    {"redis://[::1]", "::1", 6379, 0, NULL, NULL, NULL, "redis://[::1]:6379/0"},
    {"redis://u:p@[2001:db8::5]:7001/9", "2001:db8::5", 7001, 9, NULL, "u", "p",
     "redis://[2001:db8::5]:7001/9"},
    /* TLS: the same URL, and the display keeps saying so */
    {"rediss://h:6379", "h", 6379, 0, NULL, NULL, NULL, "rediss://h:6379/0"},
    {"rediss://u:p@[::1]:7000/2", "::1", 7000, 2, NULL, "u", "p", "rediss://[::1]:7000/2"},
    {"unix:///var/run/redis/redis.sock", NULL, 6379, 0,
     "/var/run/redis/redis.sock", NULL, NULL, "unix:///var/run/redis/redis.sock"},
};

static void
ck_str_or_null(const char *what, const char *url, const char *got, const char *want)
{
    if (want == NULL)
        ck_assert_msg(got == NULL, "%s: %s is \"%s\", expected none", url, what, got);
    else
        ck_assert_msg(got != NULL && strcmp(got, want) == 0,
                      "%s: %s is \"%s\", expected \"%s\"", url, what,
                      got ? got : "(null)", want);
}

START_TEST(redis_url_good)
{
    const struct url_case *c = &good_urls[_i];
    struct rl_redis_url u;
    char *cause = NULL;

    ck_assert_msg(redis_url_parse(c->url, &u, &cause) == RL_OK, "%s rejected: %s",
                  c->url, cause ? cause : "");
    ck_assert_ptr_null(cause);
    ck_str_or_null("host", c->url, u.host, c->host);
    ck_str_or_null("path", c->url, u.path, c->path);
    ck_str_or_null("username", c->url, u.username, c->username);
    ck_str_or_null("password", c->url, u.password, c->password);
    if (c->host != NULL) {
        ck_assert_int_eq(u.port, c->port);
        ck_assert_int_eq(u.db, c->db);
    }
    char *d = redis_url_display(&u);
    ck_assert_str_eq(d, c->display);
    free(d);
    redis_url_clear(&u);
    ck_assert_ptr_null(u.host);
    ck_assert_ptr_null(u.password);
}
END_TEST

static const char *const bad_urls[] = {
    "", "http://h:6379", "redisss://h:6379", "rediss:/h", "rediss://", "rediss://:1",
    "redis:/h", "redis://",
    "redis://:6379", "redis://h:", "redis://h:0", "redis://h:65536",
    "redis://h:-1", "redis://h:abc", "redis://h:6379x", "redis://h:6379/x",
    "redis://h:6379/-1", "redis://h:6379/0/1", "redis://h:6379/1x",
    "redis://user:pass@", "redis://user:pass@:6379", "redis://[::1",
    "redis://[::1]x", "redis://[::1]:", "redis://[::1]:99999", "redis://[]:6379",
    "unix://relative/redis.sock", "unix://", "unix:/tmp/redis.sock",
};

START_TEST(redis_url_bad)
{
    const char *s = bad_urls[_i];
    struct rl_redis_url u;
    char *cause = NULL;

    ck_assert_msg(redis_url_parse(s, &u, &cause) == RL_ERR, "accepted \"%s\"", s);
    ck_assert_msg(cause != NULL && cause[0] != '\0', "\"%s\": no cause", s);
    free(cause);
}
END_TEST

START_TEST(redis_url_display_hides_credentials)
{
    static const char *const urls[] = {
        "redis://admin:hunter2@10.1.2.3:6379/4",
        "redis://:hunter2@10.1.2.3",
        "redis://hunter2@10.1.2.3",
        "redis://admin:hunter2@[2001:db8::9]:6379/4",
    };
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        struct rl_redis_url u;
        char *cause = NULL;
        ck_assert_int_eq(redis_url_parse(urls[i], &u, &cause), RL_OK);
        ck_assert_str_eq(u.password, "hunter2");
        char *d = redis_url_display(&u);
        ck_assert_msg(strstr(d, "hunter2") == NULL, "%s shows the password: %s",
                      urls[i], d);
        ck_assert_msg(strstr(d, "admin") == NULL, "%s shows the user: %s", urls[i], d);
        ck_assert_msg(strchr(d, '@') == NULL, "%s shows credentials: %s", urls[i], d);
        free(d);
        redis_url_clear(&u);
    }
}
END_TEST

/* ---- listen addresses ------------------------------------------------------- */

START_TEST(listen_v4)
{
    struct rl_listen_addr a;
    char *cause = NULL;
    const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&a.ss;

    ck_assert_int_eq(listen_addr_parse("127.0.0.1:8080", &a, &cause), RL_OK);
    ck_assert_int_eq(a.family, AF_INET);
    ck_assert_int_eq(sin->sin_family, AF_INET);
    ck_assert_int_eq(ntohs(sin->sin_port), 8080);
    ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x7f000001u);
    ck_assert_uint_eq(a.len, sizeof(struct sockaddr_in));
    ck_assert_ptr_null(a.path);
    listen_addr_clear(&a);

    ck_assert_int_eq(listen_addr_parse("0.0.0.0:1", &a, &cause), RL_OK);
    ck_assert_int_eq(a.family, AF_INET);
    ck_assert_int_eq(ntohs(sin->sin_port), 1);
    ck_assert_uint_eq(sin->sin_addr.s_addr, 0);
    listen_addr_clear(&a);

    ck_assert_int_eq(listen_addr_parse("10.20.30.40:65535", &a, &cause), RL_OK);
    ck_assert_int_eq(ntohs(sin->sin_port), 65535);
    ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x0a141e28u);
    listen_addr_clear(&a);
    ck_assert_ptr_null(cause);
}
END_TEST

START_TEST(listen_v6)
{
    struct rl_listen_addr a;
    char *cause = NULL;
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&a.ss;
    static const uint8_t loop6[16] = {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1};
    static const uint8_t any6[16] = {0};
    static const uint8_t doc6[16] = {0x20,0x01,0x0d,0xb8,0,0,0,0,0,0,0,0,0,0,0,0x42};

    ck_assert_int_eq(listen_addr_parse("[::1]:8080", &a, &cause), RL_OK);
    ck_assert_int_eq(a.family, AF_INET6);
    ck_assert_int_eq(sin6->sin6_family, AF_INET6);
    ck_assert_int_eq(ntohs(sin6->sin6_port), 8080);
    ck_assert_mem_eq(sin6->sin6_addr.s6_addr, loop6, 16);
    ck_assert_uint_eq(a.len, sizeof(struct sockaddr_in6));
    listen_addr_clear(&a);

    ck_assert_int_eq(listen_addr_parse("[::]:443", &a, &cause), RL_OK);
    ck_assert_int_eq(ntohs(sin6->sin6_port), 443);
    ck_assert_mem_eq(sin6->sin6_addr.s6_addr, any6, 16);
    listen_addr_clear(&a);

    ck_assert_int_eq(listen_addr_parse("[2001:DB8::42]:9000", &a, &cause), RL_OK);
    ck_assert_mem_eq(sin6->sin6_addr.s6_addr, doc6, 16);
    listen_addr_clear(&a);
    ck_assert_ptr_null(cause);
}
END_TEST

START_TEST(listen_unix)
{
    struct rl_listen_addr a;
    char *cause = NULL;
    const struct sockaddr_un *sun = (const struct sockaddr_un *)(const void *)&a.ss;
    char longest[sizeof(sun->sun_path) + 5];

    ck_assert_int_eq(listen_addr_parse("unix:/run/ratelimitd.sock", &a, &cause), RL_OK);
    ck_assert_int_eq(a.family, AF_UNIX);
    ck_assert_int_eq(sun->sun_family, AF_UNIX);
    ck_assert_str_eq(sun->sun_path, "/run/ratelimitd.sock");
    ck_assert_str_eq(a.path, "/run/ratelimitd.sock");
    ck_assert_uint_ge(a.len, offsetof(struct sockaddr_un, sun_path) + 21);
    listen_addr_clear(&a);
    ck_assert_ptr_null(a.path);

    /* sun_path holds 107 bytes and the NUL */
    memcpy(longest, "unix:", 5);
    memset(longest + 5, 'p', sizeof(sun->sun_path) - 1);
    longest[sizeof(longest) - 1] = '\0';
    ck_assert_int_eq(listen_addr_parse(longest, &a, &cause), RL_OK);
    ck_assert_uint_eq(strlen(a.path), sizeof(sun->sun_path) - 1);
    listen_addr_clear(&a);
    ck_assert_ptr_null(cause);
}
END_TEST

static const char *const bad_listens[] = {
    "", "127.0.0.1", "127.0.0.1:", ":8080", "127.0.0.1:0", "127.0.0.1:65536",
    "127.0.0.1:80x", "127.0.0.1:+80", "127.0.0.1:-80", "127.0.0.1: 80",
    "256.0.0.1:80", "1.2.3:80", "localhost:8080", "::1:8080", "[::1]",
    "[::1]8080", "[::1]:", "[::1:8080", "[1.2.3.4]:80", "[::1]:0", "unix:",
    "tcp://127.0.0.1:80",
};

START_TEST(listen_bad)
{
    const char *s = bad_listens[_i];
    struct rl_listen_addr a;
    char *cause = NULL;

    ck_assert_msg(listen_addr_parse(s, &a, &cause) == RL_ERR, "accepted \"%s\"", s);
    ck_assert_msg(cause != NULL && cause[0] != '\0', "\"%s\": no cause", s);
    free(cause);
}
END_TEST

START_TEST(listen_unix_too_long)
{
    struct rl_listen_addr a;
    char *cause = NULL;
    char s[5 + sizeof(((struct sockaddr_un *)0)->sun_path) + 1];

    memcpy(s, "unix:", 5);
    memset(s + 5, 'p', sizeof(s) - 6);      /* 108 bytes: no room for the NUL */
    s[sizeof(s) - 1] = '\0';
    ck_assert_int_eq(listen_addr_parse(s, &a, &cause), RL_ERR);
    ck_assert_ptr_nonnull(cause);
    free(cause);
}
END_TEST

/* ---- CIDRs ------------------------------------------------------------------- */

struct cidr_case {
    const char *text;
    int family;
    uint8_t addr[16];
    int prefix;
};

static const struct cidr_case good_cidrs[] = {
    {"10.0.0.0/8", AF_INET, {10, 0, 0, 0}, 8},
    {"127.0.0.0/8", AF_INET, {127, 0, 0, 0}, 8},
    {"192.168.1.0/24", AF_INET, {192, 168, 1, 0}, 24},
    {"0.0.0.0/0", AF_INET, {0}, 0},
    {"203.0.113.7/32", AF_INET, {203, 0, 113, 7}, 32},
    {"203.0.113.7", AF_INET, {203, 0, 113, 7}, 32},
    {"::1/128", AF_INET6, {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1}, 128},
    {"::1", AF_INET6, {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1}, 128},
    {"::/0", AF_INET6, {0}, 0},
    {"2001:db8::/32", AF_INET6, {0x20, 0x01, 0x0d, 0xb8}, 32},
    {"fc00::/7", AF_INET6, {0xfc}, 7},
    /* IPv4-mapped: the same address as the IPv4 one */
    {"::ffff:10.1.2.3", AF_INET, {10, 1, 2, 3}, 32},
    {"::FFFF:10.1.2.3", AF_INET, {10, 1, 2, 3}, 32},
    {"0:0:0:0:0:ffff:a01:203", AF_INET, {10, 1, 2, 3}, 32},
    /* and a mapped prefix counts the IPv6 bits: /104 is the IPv4 /8 */
    {"::ffff:10.0.0.0/104", AF_INET, {10, 0, 0, 0}, 8},
    {"::ffff:10.1.2.3/128", AF_INET, {10, 1, 2, 3}, 32},
    {"::ffff:0.0.0.0/96", AF_INET, {0}, 0},
};

START_TEST(cidr_good)
{
    const struct cidr_case *c = &good_cidrs[_i];
    struct rl_cidr r;

    ck_assert_msg(cidr_parse(c->text, &r) == RL_OK, "rejected \"%s\"", c->text);
    ck_assert_msg(r.family == c->family, "\"%s\": family %d, expected %d", c->text,
                  r.family, c->family);
    ck_assert_msg(r.prefix == c->prefix, "\"%s\": prefix %d, expected %d", c->text,
                  r.prefix, c->prefix);
    ck_assert_msg(memcmp(r.addr, c->addr, c->family == AF_INET ? 4 : 16) == 0,
                  "\"%s\": wrong address", c->text);
}
END_TEST

static const char *const bad_cidrs[] = {
    "", "/8", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/+8",
    "10.0.0.0/8x", "10.0.0.0/ 8", "10.0.0.0/8/8", "10.0.0/8", "10.0.0.0.0/8",
    "::/129", "::1/1000", "::1/99999999999999999999", "[::1]/128", "[::1]",
    "1.2.3.4:80", "1.2.3.4:80/32", "foo/8", "localhost", "10.0.0.0/0x8",
    /* a mapped prefix shorter than 96 is not a set of IPv4 addresses */
    "::ffff:10.0.0.0/8",
};

START_TEST(cidr_bad)
{
    const char *s = bad_cidrs[_i];
    struct rl_cidr r;

    ck_assert_msg(cidr_parse(s, &r) == RL_ERR, "accepted \"%s\" (family %d /%d)", s,
                  r.family, r.prefix);
}
END_TEST

static int
contains(const struct rl_cidr_list *l, const char *ip)
{
    int family;
    uint8_t a[16];

    ck_assert_msg(ip_parse(ip, strlen(ip), &family, a) == RL_OK, "bad test ip %s", ip);
    return cidr_list_contains(l, family, a);
}

START_TEST(cidr_contains)
{
    struct rl_cidr v[4];
    struct rl_cidr_list l = {v, 4};

    ck_assert_int_eq(cidr_parse("10.0.0.0/8", &v[0]), RL_OK);
    ck_assert_int_eq(cidr_parse("192.168.4.0/23", &v[1]), RL_OK);
    ck_assert_int_eq(cidr_parse("2001:db8:ab00::/40", &v[2]), RL_OK);
    ck_assert_int_eq(cidr_parse("::1", &v[3]), RL_OK);

    ck_assert(contains(&l, "10.0.0.0"));
    ck_assert(contains(&l, "10.255.255.255"));
    ck_assert(!contains(&l, "11.0.0.0"));
    ck_assert(!contains(&l, "9.255.255.255"));
    ck_assert(contains(&l, "192.168.4.1"));
    ck_assert(contains(&l, "192.168.5.254"));
    ck_assert(!contains(&l, "192.168.6.0"));
    ck_assert(!contains(&l, "192.168.3.255"));
    ck_assert(contains(&l, "2001:db8:ab00::1"));
    ck_assert(contains(&l, "2001:db8:abff:ffff::"));
    ck_assert(!contains(&l, "2001:db8:ac00::"));
    ck_assert(contains(&l, "::1"));
    ck_assert(!contains(&l, "::2"));
    /* a mapped client is the IPv4 client */
    ck_assert(contains(&l, "::ffff:10.9.9.9"));
    ck_assert(!contains(&l, "::ffff:11.9.9.9"));
    /* families never mix: ::a00:0 is not 10.0.0.0 */
    ck_assert(!contains(&l, "::a00:0"));

    struct rl_cidr all4, all6;
    struct rl_cidr_list l4 = {&all4, 1}, l6 = {&all6, 1}, empty = {NULL, 0};
    ck_assert_int_eq(cidr_parse("0.0.0.0/0", &all4), RL_OK);
    ck_assert_int_eq(cidr_parse("::/0", &all6), RL_OK);
    ck_assert(contains(&l4, "1.2.3.4"));
    ck_assert(!contains(&l4, "::1"));
    ck_assert(contains(&l6, "2001:db8::1"));
    ck_assert(!contains(&l6, "1.2.3.4"));
    ck_assert(!contains(&empty, "1.2.3.4"));
}
END_TEST

/* ---- client addresses ---------------------------------------------------------- */

struct ip_case {
    const char *text;
    int family;
    const char *canonical;
};

static const struct ip_case good_ips[] = {
    {"1.2.3.4", AF_INET, "1.2.3.4"},
    {"1.2.3.4:80", AF_INET, "1.2.3.4"},
    {"255.255.255.255", AF_INET, "255.255.255.255"},
    {"::1", AF_INET6, "::1"},
    {"[::1]", AF_INET6, "::1"},
    {"[::1]:443", AF_INET6, "::1"},
    {"::", AF_INET6, "::"},
    {"::ffff:1.2.3.4", AF_INET, "1.2.3.4"},
    {"::FFFF:1.2.3.4", AF_INET, "1.2.3.4"},
    {"::ffff:102:304", AF_INET, "1.2.3.4"},
    {"[::ffff:1.2.3.4]:8080", AF_INET, "1.2.3.4"},
    {"0:0:0:0:0:ffff:0102:0304", AF_INET, "1.2.3.4"},
    {"2001:DB8:0:0:0:0:0:1", AF_INET6, "2001:db8::1"},
    {"2001:0db8:0000:0000:0000:ff00:0042:8329", AF_INET6, "2001:db8::ff00:42:8329"},
    /* RFC 5952 4.2.3: the longest run of zeros, the first of equal runs */
    {"2001:db8:0:0:1:0:0:1", AF_INET6, "2001:db8::1:0:0:1"},
    {"2001:0:0:1:0:0:0:1", AF_INET6, "2001:0:0:1::1"},
    /* RFC 5952 4.2.2: one 16-bit zero field is not shortened */
    {"2001:db8:0:1:1:1:1:1", AF_INET6, "2001:db8:0:1:1:1:1:1"},
    {"[2001:DB8:CAFE::17]:4711", AF_INET6, "2001:db8:cafe::17"},
    {"fe80:0:0:0:0:0:0:0", AF_INET6, "fe80::"},
};

START_TEST(ip_good)
{
    const struct ip_case *c = &good_ips[_i];
    int family = -1;
    uint8_t a[16];
    char text[INET6_ADDRSTRLEN];

    ck_assert_msg(ip_parse(c->text, strlen(c->text), &family, a) == RL_OK,
                  "rejected \"%s\"", c->text);
    ck_assert_msg(family == c->family, "\"%s\": family %d, expected %d", c->text,
                  family, c->family);
    ip_format(family, a, text, sizeof(text));
    ck_assert_msg(strcmp(text, c->canonical) == 0, "\"%s\" shown as \"%s\", not \"%s\"",
                  c->text, text, c->canonical);
}
END_TEST

START_TEST(ip_mapped_is_ipv4_bytes)
{
    int family;
    uint8_t a[16], b[16];
    static const uint8_t want[16] = {1, 2, 3, 4};

    memset(a, 0xaa, sizeof(a));
    ck_assert_int_eq(ip_parse("::ffff:1.2.3.4", 14, &family, a), RL_OK);
    ck_assert_int_eq(family, AF_INET);
    /* the same 16 bytes as the plain IPv4 address: one caller, one key */
    ck_assert_mem_eq(a, want, 16);
    memset(b, 0x55, sizeof(b));
    ck_assert_int_eq(ip_parse("1.2.3.4", 7, &family, b), RL_OK);
    ck_assert_mem_eq(b, want, 16);
}
END_TEST

START_TEST(ip_respects_len)
{
    int family;
    uint8_t a[16];
    char text[INET6_ADDRSTRLEN];

    ck_assert_int_eq(ip_parse("1.2.3.4, 5.6.7.8", 7, &family, a), RL_OK);
    ip_format(family, a, text, sizeof(text));
    ck_assert_str_eq(text, "1.2.3.4");
    ck_assert_int_eq(ip_parse("::1xyz", 3, &family, a), RL_OK);
    ck_assert_int_eq(family, AF_INET6);
    ck_assert_int_eq(ip_parse("1.2.3.4", 0, &family, a), RL_ERR);
    ck_assert_int_eq(ip_parse("1.2.3.45", 6, &family, a), RL_ERR);   /* "1.2.3." */
}
END_TEST

static const char *const bad_ips[] = {
    "", "1.2.3", "1.2.3.256", "1.2.3.4.5", "abc", "unknown", "_gazonk", "[",
    "[]", "[::1", "::1]", ":::", "1::2::3", "2001:db8::g", "fe80::1%eth0",
    "1.2.3.4/32", " 1.2.3.4", "[]:80",
    "1111:2222:3333:4444:5555:6666:7777:8888:9999",
    "0000000000000000000000000000000000000000000000000000000000000000001.2.3.4",
};

START_TEST(ip_bad)
{
    const char *s = bad_ips[_i];
    int family = -1;
    uint8_t a[16];

    ck_assert_msg(ip_parse(s, strlen(s), &family, a) == RL_ERR, "accepted \"%s\"", s);
}
END_TEST

START_TEST(ip_format_small_buffer)
{
    static const uint8_t a6[16] = {0x20,0x01,0x0d,0xb8,1,2,3,4,5,6,7,8,9,10,11,12};
    char buf[8];

    memset(buf, 'x', sizeof(buf));
    ip_format(AF_INET6, a6, buf, 4);
    ck_assert_int_eq(buf[0], '\0');
    ck_assert_int_eq(buf[4], 'x');
}
END_TEST

/* ---- path globs ---------------------------------------------------------------- */

struct glob_case {
    const char *pattern;
    const char *s;
    int match;
};

static const struct glob_case globs[] = {
    {"", "", 1},
    {"", "a", 0},
    {"*", "", 1},
    {"*", "/anything/at/all", 1},
    {"**", "x", 1},
    {"?", "", 0},
    {"?", "a", 1},
    {"?", "ab", 0},
    {"/login", "/login", 1},
    {"/login", "/login/", 0},
    {"/login", "/logi", 0},
    {"/api/*", "/api/", 1},
    {"/api/*", "/api/v1/users/7", 1},        /* '*' crosses '/' */
    {"/api/*", "/api", 0},
    {"/api/*/users", "/api/v1/users", 1},
    {"/api/*/users", "/api/v1/x/users", 1},
    {"/api/*/users", "/api/users", 0},
    {"/api/*/users", "/api/v1/users/", 0},
    {"*.css", "/static/a/b.css", 1},
    {"*.css", "/static/a/b.cssx", 0},
    {"/a?c", "/abc", 1},
    {"/a?c", "/a/c", 1},
    {"/a?c", "/ac", 0},
    {"/a?c", "/abbc", 0},
    {"*ab", "aab", 1},
    {"*ab", "aba", 0},
    {"a*b*c", "abc", 1},
    {"a*b*c", "aXbYbZc", 1},
    {"a*b*c", "acb", 0},
    {"?*", "", 0},
    {"?*", "a", 1},
    {"*?", "a", 1},
    {"/v?/*/item?", "/v2/x/y/item7", 1},
    {"/v?/*/item?", "/v2/x/y/item", 0},
    {"*a*a*a*a*b", "aaaab", 1},
    {"*a*a*a*a*b", "aaaa", 0},
};

START_TEST(glob_cases)
{
    const struct glob_case *c = &globs[_i];

    ck_assert_msg(policy_glob(c->pattern, c->s, strlen(c->s)) == c->match,
                  "glob \"%s\" on \"%s\": expected %d", c->pattern, c->s, c->match);
}
END_TEST

START_TEST(glob_respects_len)
{
    ck_assert_int_eq(policy_glob("/api/*", "/api/x?q=1", 6), 1);
    ck_assert_int_eq(policy_glob("/api", "/api/x", 4), 1);
    ck_assert_int_eq(policy_glob("/api/x", "/api/x", 5), 0);
    /* bytes after len, and NUL bytes inside it, are plain bytes */
    ck_assert_int_eq(policy_glob("a?b", "a\0b", 3), 1);
    ck_assert_int_eq(policy_glob("a*", "a\0\0", 3), 1);
    ck_assert_int_eq(policy_glob("abc", "ab\0", 3), 0);
}
END_TEST

static double
elapsed_s(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

START_TEST(glob_pathological_is_fast)
{
    enum { N = 200000 };
    char *s = malloc(N + 1);
    struct timespec t0;

    ck_assert_ptr_nonnull(s);
    memset(s, 'a', N);
    s[N] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(policy_glob("*a*a*a*a*b", s, N), 0);
    ck_assert_int_eq(policy_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", s, N), 0);
    ck_assert_int_eq(policy_glob("*?*?*?*?*?*?*?*?*b", s, N), 0);
    s[N - 1] = 'b';
    ck_assert_int_eq(policy_glob("*a*a*a*a*b", s, N), 1);
    ck_assert_int_eq(policy_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", s, N), 1);
    /* exponential backtracking would take far longer than this */
    ck_assert_msg(elapsed_s(&t0) < 0.5, "pathological globs took %.3fs", elapsed_s(&t0));
    free(s);
}
END_TEST

/* ---- log levels ------------------------------------------------------------------ */

START_TEST(log_levels)
{
    static const struct { const char *name; enum rl_log_level l; } levels[] = {
        {"error", RL_LOG_ERROR}, {"warn", RL_LOG_WARN},
        {"info", RL_LOG_INFO}, {"debug", RL_LOG_DEBUG},
    };
    static const char *const bad[] = {
        "", "ERROR", "Warn", "warning", "information", "trace", "debug ", "err",
    };
    enum rl_log_level l;

    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        l = (enum rl_log_level)99;
        ck_assert_int_eq(log_level_parse(levels[i].name, &l), RL_OK);
        ck_assert_int_eq(l, levels[i].l);
        ck_assert_str_eq(log_level_name(levels[i].l), levels[i].name);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(log_level_parse(bad[i], &l) == RL_ERR, "accepted \"%s\"", bad[i]);
    ck_assert_str_eq(log_level_name((enum rl_log_level)4), "?");
    ck_assert_str_eq(log_level_name((enum rl_log_level)-1), "?");
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *
parse_suite(void)
{
    Suite *s = suite_create("parse");
    TCase *tc;

    tc = tcase_create("duration");
    tcase_add_loop_test(tc, duration_good, 0, N_OF(good_durations));
    tcase_add_loop_test(tc, duration_bad, 0, N_OF(bad_durations));
    suite_add_tcase(s, tc);

    tc = tcase_create("size");
    tcase_add_loop_test(tc, size_good, 0, N_OF(good_sizes));
    tcase_add_loop_test(tc, size_bad, 0, N_OF(bad_sizes));
    tcase_add_test(tc, size_largest_multiples);
    suite_add_tcase(s, tc);

    tc = tcase_create("redis_url");
    tcase_add_loop_test(tc, redis_url_good, 0, N_OF(good_urls));
    tcase_add_loop_test(tc, redis_url_bad, 0, N_OF(bad_urls));
    tcase_add_test(tc, redis_url_display_hides_credentials);
    suite_add_tcase(s, tc);

    tc = tcase_create("listen");
    tcase_add_test(tc, listen_v4);
    tcase_add_test(tc, listen_v6);
    tcase_add_test(tc, listen_unix);
    tcase_add_loop_test(tc, listen_bad, 0, N_OF(bad_listens));
    tcase_add_test(tc, listen_unix_too_long);
    suite_add_tcase(s, tc);

    tc = tcase_create("cidr");
    tcase_add_loop_test(tc, cidr_good, 0, N_OF(good_cidrs));
    tcase_add_loop_test(tc, cidr_bad, 0, N_OF(bad_cidrs));
    tcase_add_test(tc, cidr_contains);
    suite_add_tcase(s, tc);

    tc = tcase_create("ip");
    tcase_add_loop_test(tc, ip_good, 0, N_OF(good_ips));
    tcase_add_test(tc, ip_mapped_is_ipv4_bytes);
    tcase_add_test(tc, ip_respects_len);
    tcase_add_loop_test(tc, ip_bad, 0, N_OF(bad_ips));
    tcase_add_test(tc, ip_format_small_buffer);
    suite_add_tcase(s, tc);

    tc = tcase_create("glob");
    tcase_add_loop_test(tc, glob_cases, 0, N_OF(globs));
    tcase_add_test(tc, glob_respects_len);
    tcase_add_test(tc, glob_pathological_is_fast);
    suite_add_tcase(s, tc);

    tc = tcase_create("log_level");
    tcase_add_test(tc, log_levels);
    suite_add_tcase(s, tc);

    return s;
}

int
main(void)
{
    return rl_unit_run(parse_suite(), CK_FORK_GETENV);
}
