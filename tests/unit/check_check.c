/*
 * check_check.c — check.c's routing with the real memory backend and the
 * clock in the test's hand: which policy a request falls under (by name, by
 * path and method, normalised; none: allowed, nothing counted), an
 * override's limits for its identities, original-request headers believed
 * only from a trusted proxy, bad requests refused, a repeated denial answered
 * by the deny cache, a hybrid policy decided in the worker once its key is
 * known, and failure_mode when the backend is down.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "unit.h"
#include <event2/event.h>

#include "backend.h"
#include "check.h"
#include "config.h"
#include "deny_cache.h"
#include "hybrid.h"
#include "identity.h"
#include "metrics.h"
#include "response.h"
#include "../testutil_core.h"

static const char *const cfg_json =
    "{\"policies\":["
    "{\"name\":\"login\",\"match\":{\"path\":\"/login\",\"methods\":[\"POST\"]},"
    " \"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":2,\"window\":\"1h\"}]},"
    "{\"name\":\"api\",\"match\":{\"path_prefix\":\"/api/\"},"
    " \"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":3,\"window\":\"1h\"}],"
    " \"overrides\":[{\"identities\":[\"key:vip\"],"
    "   \"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":100,\"window\":\"1h\"}]}]},"
    "{\"name\":\"hot\",\"match\":{\"path_prefix\":\"/hot/\"},\"mode\":\"hybrid\","
    " \"sync_interval\":\"10ms\","
    " \"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":5,\"window\":\"1h\"}]}]}";

struct fx {
    struct event_base *base;
    struct rl_backend *mem;
    struct rl_metrics m;
    struct rl_check_env env;
    struct rl_config *cfg;
    /* the request's headers, as the HTTP layer would hand them over */
    const char *hdr_name, *hdr_value;
};

static void
fx_open(struct fx *f, int with_hybrid)
{
    memset(f, 0, sizeof(*f));
    f->base = event_base_new();
    f->mem = tu_memory();
    f->cfg = tu_config(cfg_json);
    /* the daemon's doing: without it every policy counts as "no policy" */
    config_set_metrics_ids(f->cfg, metrics_policy_id);
    f->env.backend = f->mem;
    f->env.metrics = &f->m;
    f->env.deny = deny_cache_new(64);
    f->env.now_us = tu_clock;
    if (with_hybrid) {
        f->env.hybrid = hybrid_new(f->base, f->mem, &f->m, 100);
        hybrid_set_clock(f->env.hybrid, tu_clock);
    }
}

static void
fx_close(struct fx *f)
{
    if (f->env.hybrid != NULL) {
        hybrid_close(f->env.hybrid);
        hybrid_free(f->env.hybrid);
    }
    deny_cache_free(f->env.deny);
    f->mem->ops->destroy(f->mem);
    config_unref(f->cfg);
    event_base_free(f->base);
}

static const char *
header(void *hctx, const char *name)
{
    struct fx *f = hctx;

    return f->hdr_name != NULL && strcasecmp(name, f->hdr_name) == 0 ? f->hdr_value : NULL;
}

static size_t
header_lines(void *hctx, const char *name, const char **vals, size_t *lens, size_t max)
{
    const char *v = header(hctx, name);

    if (v == NULL)
        return 0;
    if (max > 0) {
        vals[0] = v;
        lens[0] = strlen(v);
    }
    return 1;
}

/* The decision a check was answered with. */
struct outcome {
    int calls;
    struct rl_decision d;
};

static void
on_done(const struct rl_decision *d, void *arg)
{
    struct outcome *o = arg;

    o->calls++;
    o->d = *d;
}

/* A request with `body` from `peer` (IPv4 text). */
static struct rl_check_input
request(struct fx *f, const char *peer, const char *body)
{
    struct rl_check_input in = {.body = body, .body_len = strlen(body)};

    in.ident.header = header;
    in.ident.header_lines = header_lines;
    in.ident.hctx = f;
    in.ident.peer_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, peer, in.ident.peer_addr), 1);
    return in;
}

/* The decision a request got (the memory backend answers before
 * check_start returns). */
static struct rl_decision
check_from(struct fx *f, const char *peer, const char *body)
{
    struct rl_check_input in = request(f, peer, body);
    struct outcome o = {0};
    char *error = NULL;
    int status = 0;

    ck_assert_msg(check_start(&f->env, f->cfg, &in, on_done, &o, &status, &error) == RL_OK,
                  "refused: %s", error != NULL ? error : "?");
    ck_assert_int_eq(o.calls, 1);
    return o.d;
}

static struct rl_decision
check(struct fx *f, const char *body)
{
    return check_from(f, "127.0.0.1", body);
}

/* A request check_start refuses: its status and the start of its error. */
static void
refused(struct fx *f, const char *body, const char *why)
{
    struct rl_check_input in = request(f, "127.0.0.1", body);
    struct outcome o = {0};
    char *error = NULL;
    int status = 0;

    ck_assert_int_eq(check_start(&f->env, f->cfg, &in, on_done, &o, &status, &error),
                     RL_ERR);
    ck_assert_int_eq(status, 400);
    ck_assert_int_eq(o.calls, 0);
    ck_assert_msg(error != NULL && strncmp(error, why, strlen(why)) == 0,
                  "error \"%s\", want \"%s...\"", error ? error : "(null)", why);
    free(error);
}

static const char *
policy_name(const struct rl_decision *d)
{
    return d->policy != NULL ? d->policy->name : "(none)";
}

START_TEST(policy_by_path_and_method)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 0);
    d = check(&f, "{\"key\":\"a\",\"path\":\"/login\",\"method\":\"POST\"}");
    ck_assert_str_eq(policy_name(&d), "login");
    ck_assert_int_eq(d.remaining, 1);
    d = check(&f, "{\"key\":\"a\",\"path\":\"/api/items?page=2\"}");
    ck_assert_str_eq(policy_name(&d), "api");
    ck_assert_int_eq(d.remaining, 2);
    /* the path as the application reads it */
    d = check(&f, "{\"key\":\"a\",\"path\":\"//x/../api/items\"}");
    ck_assert_str_eq(policy_name(&d), "api");
    ck_assert_int_eq(d.remaining, 1);
    /* no policy: allowed, and nothing counted anywhere */
    size_t before = backend_memory_entries();
    d = check(&f, "{\"key\":\"a\",\"path\":\"/login\",\"method\":\"GET\"}");
    ck_assert_ptr_null(d.policy);
    ck_assert(d.allowed);
    d = check(&f, "{\"key\":\"a\",\"path\":\"/free\"}");
    ck_assert_ptr_null(d.policy);
    ck_assert_uint_eq(backend_memory_entries(), before);
    ck_assert_uint_eq(f.m.checks[RL_METRICS_NO_POLICY][RL_OUT_ALLOWED], 2);
    fx_close(&f);
}
END_TEST

START_TEST(policy_by_name)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 0);
    /* the name wins over a path of another policy */
    d = check(&f, "{\"key\":\"a\",\"policy\":\"login\",\"path\":\"/api/x\"}");
    ck_assert_str_eq(policy_name(&d), "login");
    refused(&f, "{\"key\":\"a\",\"policy\":\"nope\"}", "policy: no policy has this name");
    fx_close(&f);
}
END_TEST

START_TEST(bad_requests_are_refused)
{
    struct fx f;

    fx_open(&f, 0);
    refused(&f, "{\"key\":\"a\",", "body: malformed JSON");
    refused(&f, "{\"key\":\"a\",\"cost\":-1}", "cost: must be an integer");
    refused(&f, "{\"key\":\"a\",\"path\":\"api\"}", "path: must start with '/'");
    refused(&f, "{\"key\":\"a\",\"path\":\"/%2e%2e/../x\"}", "path: cannot be normalised");
    fx_close(&f);
}
END_TEST

START_TEST(an_override_has_its_own_limits)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 0);
    d = check(&f, "{\"key\":\"vip\",\"path\":\"/api/x\"}");
    ck_assert_int_eq(d.limit, 100);
    ck_assert_int_eq(d.remaining, 99);
    d = check(&f, "{\"key\":\"other\",\"path\":\"/api/x\"}");
    ck_assert_int_eq(d.limit, 3);
    ck_assert_int_eq(d.remaining, 2);
    fx_close(&f);
}
END_TEST

/* X-Original-URI routes the check only when a trusted proxy sent it: a
 * client's own header cannot move it to another policy (or to none). */
START_TEST(original_request_headers_only_from_trusted_peers)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 0);
    f.hdr_name = "X-Original-URI";
    f.hdr_value = "/api/items";
    d = check_from(&f, "127.0.0.1", "{\"key\":\"a\"}");
    ck_assert_str_eq(policy_name(&d), "api");
    d = check_from(&f, "192.0.2.7", "{\"key\":\"a\"}");
    ck_assert_ptr_null(d.policy);           /* "/": no policy */
    d = check_from(&f, "192.0.2.7", "{\"key\":\"a\",\"path\":\"/api/items\"}");
    ck_assert_str_eq(policy_name(&d), "api");
    fx_close(&f);
}
END_TEST

#define LOGIN "{\"key\":\"a\",\"path\":\"/login\",\"method\":\"POST\"}"

START_TEST(a_repeated_denial_is_answered_by_the_deny_cache)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 0);
    ck_assert(check(&f, LOGIN).allowed);
    ck_assert(check(&f, LOGIN).allowed);
    d = check(&f, LOGIN);
    ck_assert(!d.allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 0);
    d = check(&f, LOGIN);
    ck_assert(!d.allowed);
    ck_assert_str_eq(policy_name(&d), "login");
    ck_assert_int_eq(f.m.local_cache_hits, 1);
    /* another cost is another check: the backend's */
    d = check(&f, "{\"key\":\"a\",\"path\":\"/login\",\"method\":\"POST\",\"cost\":2}");
    ck_assert(!d.allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 1);
    /* a reconnect may have lost the counts: the backend is asked again */
    f.mem->epoch++;
    ck_assert(!check(&f, LOGIN).allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 1);
    ck_assert(!check(&f, LOGIN).allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 2);
    /* past the retry time the cache lets go (the backend still denies: its
     * window runs on the real clock) */
    tu_now_us += d.retry_after_ms * TU_MS;
    ck_assert(!check(&f, LOGIN).allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 2);
    /* with deny_cache off, never */
    f.cfg->deny_cache = 0;
    ck_assert(!check(&f, LOGIN).allowed);
    ck_assert(!check(&f, LOGIN).allowed);
    ck_assert_int_eq(f.m.local_cache_hits, 2);
    fx_close(&f);
}
END_TEST

#define HOT "{\"key\":\"h\",\"path\":\"/hot/x\"}"

/* What the shared counts hold for a caller's body key under a policy. */
static int64_t
backend_remaining(struct fx *f, const char *policy, const char *body_key)
{
    const struct rl_policy *p = config_policy(f->cfg, policy);
    char id[RL_IDENTITY_MAX], key[RL_REDIS_KEY_MAX];
    int n = snprintf(id, sizeof(id), "k:%s", body_key);
    size_t klen;

    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(identity_key(f->cfg->redis.key_prefix, policy, id, (size_t)n,
                                  p->limit_ids, key, sizeof(key), &klen), RL_OK);
    return tu_check(f->mem, p, key, 0, 0).limits[0].remaining;
}

START_TEST(a_hybrid_policy_is_decided_in_the_worker_once_known)
{
    struct fx f;
    struct rl_decision d;

    fx_open(&f, 1);
    d = check(&f, HOT);                     /* unknown: the backend's answer */
    ck_assert_str_eq(policy_name(&d), "hot");
    ck_assert_int_eq(d.remaining, 4);
    ck_assert_uint_eq(f.m.hybrid_local, 0);
    for (int i = 0; i < 4; i++) {
        d = check(&f, HOT);
        ck_assert(d.allowed);
        ck_assert_int_eq(d.remaining, 3 - i);
        ck_assert(!d.degraded);
    }
    ck_assert(!check(&f, HOT).allowed);
    ck_assert_uint_eq(f.m.hybrid_local, 5);
    /* the counts are the worker's until a sync carries them */
    ck_assert_int_eq(backend_remaining(&f, "hot", "h"), 4);
    ck_assert_uint_eq(f.m.hybrid_pending, 4);
    fx_close(&f);
}
END_TEST

START_TEST(without_a_hybrid_table_hybrid_policies_are_exact)
{
    struct fx f;

    fx_open(&f, 0);
    for (int i = 0; i < 5; i++)
        ck_assert(check(&f, HOT).allowed);
    ck_assert(!check(&f, HOT).allowed);
    ck_assert_uint_eq(f.m.hybrid_local, 0);
    fx_close(&f);
}
END_TEST

/* Redis unreachable: what the memory backend never is.  Answered at once,
 * as a backend with no connection does. */
static void
down_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb,
           void *arg)
{
    struct rl_check_res res = {.status = RL_BACKEND_DOWN, .error = "test: down"};

    cb(&res, arg);
    (void)be;
    (void)req;
}

static const struct rl_backend_ops down_ops = {.name = "down", .check = down_check};

/* With the backend down, failure_mode decides; "local" asks the in-process
 * backend, which counts on its own. */
START_TEST(a_failed_backend_gets_the_failure_mode)
{
    struct fx f;
    struct rl_backend down = {.ops = &down_ops};
    struct rl_decision d;

    fx_open(&f, 0);
    f.env.backend = &down;
    f.env.local = f.mem;
    d = check(&f, LOGIN);                   /* open, the default */
    ck_assert_int_eq(d.status, 200);
    ck_assert(d.allowed && d.degraded);
    f.cfg->failure_mode = RL_FAIL_CLOSED;
    d = check(&f, LOGIN);
    ck_assert_int_eq(d.status, 503);
    ck_assert(d.degraded);
    ck_assert_str_eq(policy_name(&d), "login");
    f.cfg->failure_mode = RL_FAIL_LOCAL;
    for (int i = 0; i < 2; i++) {
        d = check(&f, LOGIN);
        ck_assert(d.allowed && d.degraded);
        ck_assert_int_eq(d.remaining, 1 - i);
    }
    d = check(&f, LOGIN);
    ck_assert(!d.allowed && d.degraded);
    ck_assert_int_eq(d.status, 429);
    ck_assert_uint_eq(f.m.backend_status[RL_BACKEND_DOWN], 5);
    fx_close(&f);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("check");
    TCase *route = tcase_create("routing"), *local = tcase_create("local");

    tcase_add_test(route, policy_by_path_and_method);
    tcase_add_test(route, policy_by_name);
    tcase_add_test(route, bad_requests_are_refused);
    tcase_add_test(route, an_override_has_its_own_limits);
    tcase_add_test(route, original_request_headers_only_from_trusted_peers);
    tcase_add_test(local, a_repeated_denial_is_answered_by_the_deny_cache);
    tcase_add_test(local, a_hybrid_policy_is_decided_in_the_worker_once_known);
    tcase_add_test(local, without_a_hybrid_table_hybrid_policies_are_exact);
    tcase_add_test(local, a_failed_backend_gets_the_failure_mode);
    suite_add_tcase(s, route);
    suite_add_tcase(s, local);
    return rl_unit_run(s, CK_FORK_GETENV);
}
