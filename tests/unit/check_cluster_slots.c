/*
 * check_cluster_slots.c — what names a Redis Cluster slot: the key hash
 * (CRC16 of the hash tag, as the cluster specification defines it and
 * CLUSTER KEYSLOT answers) and the MOVED/ASK redirections a node answers
 * with.  A wrong slot sends every check of a key to a node that answers
 * MOVED; a redirection read wrong sends it nowhere.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "cluster_slots.h"
#include "rl.h"

static int
slot(const char *key)
{
    return cluster_key_slot(key, strlen(key));
}

START_TEST(slot_of_a_plain_key)
{
    /* the CRC16/XMODEM check value of "123456789" is 0x31C3 */
    ck_assert_int_eq(slot("123456789"), 0x31C3);
    ck_assert_int_eq(slot("foo"), 12182);
    ck_assert_int_eq(slot("bar"), 5061);
    ck_assert_int_eq(slot("user1000"), 3443);
    ck_assert_int_eq(slot(""), 0);
    /* 16 bits folded to 14: 0xAF96 & 0x3FFF */
    ck_assert_int_eq(slot("foo"), 0xAF96 & (CLUSTER_SLOTS - 1));
}
END_TEST

START_TEST(slot_of_a_hash_tag)
{
    /* the bytes between the first '{' and the next '}' */
    ck_assert_int_eq(slot("{user1000}.following"), slot("user1000"));
    ck_assert_int_eq(slot("{user1000}.followers"), slot("user1000"));
    ck_assert_int_eq(slot("foo{bar}{zap}"), slot("bar"));
    ck_assert_int_eq(slot("foo{{bar}}zap"), slot("{bar"));
    ck_assert_int_eq(slot("{rl:p:k:alice}:fw:3600000"), slot("rl:p:k:alice"));
    ck_assert_int_eq(slot("{rl:p:k:alice}:fw:3600000"), 2379);
}
END_TEST

START_TEST(slot_without_a_usable_tag_is_of_the_whole_key)
{
    /* an empty tag, no closing brace, a '}' before the '{': the whole key */
    ck_assert_int_eq(slot("foo{}{bar}"), 8363);
    ck_assert_int_eq(slot("{}"), 15257);
    ck_assert_int_eq(slot("a{b"), 13340);
    ck_assert_int_eq(slot("x}{y}"), slot("y"));
    ck_assert_int_eq(slot("{"), 4092);
}
END_TEST

START_TEST(slot_reads_len_bytes_not_a_string)
{
    /* keys are binary: a NUL is a byte like another, and the length ends them */
    ck_assert_int_eq(cluster_key_slot("a\0c", 3), 12446);
    ck_assert_int_eq(cluster_key_slot("a\0{b}", 5), slot("b"));
    ck_assert_int_eq(cluster_key_slot("{b}", 2), slot("{b"));
    ck_assert_int_eq(cluster_key_slot("foo-and-more", 3), slot("foo"));
    for (int i = 0; i < 2000; i++) {
        char k[32];
        int n = snprintf(k, sizeof(k), "key:%d", i), s = cluster_key_slot(k, (size_t)n);

        ck_assert(s >= 0 && s < CLUSTER_SLOTS);
    }
}
END_TEST

/* A redirection read into fresh buffers: its result, slot, host and port. */
struct redirect {
    int rc, slot, port;
    char host[CLUSTER_HOST_MAX];
};

static struct redirect
redirect_sized(const char *msg, size_t hsize)
{
    struct redirect r;

    memset(&r, 0, sizeof(r));
    r.slot = r.port = -7;
    r.rc = cluster_parse_redirect(msg, "10.0.0.9", &r.slot, r.host, hsize, &r.port);
    return r;
}

static struct redirect
redirect(const char *msg)
{
    return redirect_sized(msg, CLUSTER_HOST_MAX);
}

START_TEST(redirect_moved_and_ask)
{
    struct redirect r = redirect("MOVED 3999 127.0.0.1:6381");

    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_int_eq(r.slot, 3999);
    ck_assert_str_eq(r.host, "127.0.0.1");
    ck_assert_int_eq(r.port, 6381);
    r = redirect("ASK 0 redis-2.example:7000");
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_int_eq(r.slot, 0);
    ck_assert_str_eq(r.host, "redis-2.example");
    ck_assert_int_eq(r.port, 7000);
    r = redirect("MOVED 16383 127.0.0.1:65535");
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_int_eq(r.slot, 16383);
    ck_assert_int_eq(r.port, 65535);
}
END_TEST

START_TEST(redirect_ipv6_and_unknown_endpoint)
{
    struct redirect r = redirect("MOVED 12 [::1]:7001");

    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_str_eq(r.host, "::1");
    ck_assert_int_eq(r.port, 7001);
    /* the last colon ends the host, brackets or not */
    r = redirect("ASK 12 fe80::1:7002");
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_str_eq(r.host, "fe80::1");
    ck_assert_int_eq(r.port, 7002);
    /* an empty host (a node that does not know its endpoint): the node that answered */
    r = redirect("MOVED 12 :6380");
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_str_eq(r.host, "10.0.0.9");
    ck_assert_int_eq(r.port, 6380);
    r = redirect("MOVED 12 []:6380");
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_str_eq(r.host, "10.0.0.9");
}
END_TEST

START_TEST(redirect_malformed_is_refused)
{
    static const char *const bad[] = {
        "MOVED",                       /* nothing after */
        "MOVED ",                      /* no slot */
        "MOVED x 127.0.0.1:6381",      /* not a number */
        "MOVED 16384 127.0.0.1:6381",  /* past the last slot */
        "MOVED -1 127.0.0.1:6381",     /* negative */
        "MOVED 12",                    /* no endpoint */
        "MOVED 12127.0.0.1:6381",      /* no space after the slot */
        "MOVED 12 127.0.0.1",          /* no port */
        "MOVED 12 127.0.0.1:",         /* an empty port */
        "MOVED 12 127.0.0.1:0",        /* port 0 */
        "MOVED 12 127.0.0.1:65536",    /* past 65535 */
        "MOVED 12 127.0.0.1:6381x",    /* a port with a tail */
        "MOVED 12 127.0.0.1:-6381",    /* a negative port */
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct redirect r = redirect(bad[i]);

        ck_assert_msg(r.rc == RL_ERR, "%s was read as slot %d, %s:%d", bad[i], r.slot, r.host,
                      r.port);
    }
}
END_TEST

START_TEST(redirect_host_must_fit)
{
    char msg[CLUSTER_HOST_MAX + 32], host[CLUSTER_HOST_MAX + 1];
    struct redirect r;

    /* 10 bytes and the NUL fit in 11, not in 10 */
    r = redirect_sized("MOVED 1 abcdefghij:6379", 11);
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_str_eq(r.host, "abcdefghij");
    r = redirect_sized("MOVED 1 abcdefghij:6379", 10);
    ck_assert_int_eq(r.rc, RL_ERR);
    /* the node that answered must fit too */
    r = redirect_sized("MOVED 1 :6379", 8);
    ck_assert_int_eq(r.rc, RL_ERR);
    /* a host as long as the buffer: refused, never cut */
    memset(host, 'h', CLUSTER_HOST_MAX);
    host[CLUSTER_HOST_MAX] = '\0';
    snprintf(msg, sizeof(msg), "ASK 5 %s:6379", host);
    r = redirect(msg);
    ck_assert_int_eq(r.rc, RL_ERR);
    host[CLUSTER_HOST_MAX - 1] = '\0';
    snprintf(msg, sizeof(msg), "ASK 5 %s:6379", host);
    r = redirect(msg);
    ck_assert_int_eq(r.rc, RL_OK);
    ck_assert_uint_eq(strlen(r.host), CLUSTER_HOST_MAX - 1);
}
END_TEST

static Suite *
cluster_slots_suite(void)
{
    Suite *s = suite_create("cluster_slots");
    TCase *hash = tcase_create("key_slot"), *redir = tcase_create("redirect");

    tcase_add_test(hash, slot_of_a_plain_key);
    tcase_add_test(hash, slot_of_a_hash_tag);
    tcase_add_test(hash, slot_without_a_usable_tag_is_of_the_whole_key);
    tcase_add_test(hash, slot_reads_len_bytes_not_a_string);
    tcase_add_test(redir, redirect_moved_and_ask);
    tcase_add_test(redir, redirect_ipv6_and_unknown_endpoint);
    tcase_add_test(redir, redirect_malformed_is_refused);
    tcase_add_test(redir, redirect_host_must_fit);
    suite_add_tcase(s, hash);
    suite_add_tcase(s, redir);
    return s;
}

int
main(void)
{
    return rl_unit_run(cluster_slots_suite(), CK_FORK_GETENV);
}
