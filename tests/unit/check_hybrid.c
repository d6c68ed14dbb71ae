/*
 * check_hybrid.c — the hybrid table (hybrid.c) on its own, with its clock in
 * the test's hand: local decisions and their numbers (the algorithms'
 * estimates), the sync bookkeeping (pending, in flight, forced syncs whose
 * seq only grows, a failed sync sent again as it was), eviction, the table's
 * cap and the retirement of a reloaded config's entries.
 *
 * The counts land in the real memory backend.  A probe backend in front of
 * it records what each sync asked for, and can fail a sync or hold it
 * unanswered (a sync in flight): the two things the memory backend never
 * does by itself.  Ticks are the table's own timer on a real event loop; the
 * test moves the table's clock past the sync interval and runs the loop
 * until the timer has fired, so nothing depends on how fast the machine is.
 */
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include <event2/event.h>

#include "hybrid.h"
#include "metrics.h"
#include "../testutil_core.h"

#define KEY "{t:a}"
#define RECORDED_MAX 16

/* ---- the probe backend ------------------------------------------------------ */

struct probe {
    struct rl_backend base;
    struct rl_backend *mem;
    int fail;                       /* answer DOWN, as a lost connection does */
    int hold;                       /* keep the next check unanswered */
    struct rl_check_req held;
    rl_check_cb held_cb;
    void *held_arg;
    size_t n;                       /* checks seen */
    struct rl_check_req seen[RECORDED_MAX];
};

static void
probe_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb,
            void *arg)
{
    struct probe *p = (struct probe *)be;
    struct rl_check_res down = {.status = RL_BACKEND_DOWN, .error = "probe: down"};

    ck_assert_uint_lt(p->n, RECORDED_MAX);
    p->seen[p->n++] = *req;
    if (p->fail) {
        cb(&down, arg);
    } else if (p->hold) {
        ck_assert_ptr_null(p->held_cb);     /* one sync per key at a time */
        p->held = *req;
        p->held_cb = cb;
        p->held_arg = arg;
    } else {
        p->mem->ops->check(p->mem, req, cb, arg);
    }
}

static const char *
probe_not_ready(struct rl_backend *be)
{
    (void)be;
    return NULL;
}

static const struct rl_backend_ops probe_ops = {
    .name = "probe",
    .check = probe_check,
    .not_ready = probe_not_ready,
};

/* The held check reaches the memory backend now. */
static void
probe_release(struct probe *p)
{
    rl_check_cb cb = p->held_cb;

    ck_assert_ptr_nonnull(cb);
    p->held_cb = NULL;
    p->hold = 0;
    p->mem->ops->check(p->mem, &p->held, cb, p->held_arg);
}

/* ---- the fixture -------------------------------------------------------------- */

struct fx {
    struct event_base *base;
    struct probe probe;
    struct rl_metrics m;
    struct rl_config *cfg;
    const struct rl_policy *pol;
    struct rl_hybrid *h;
};

static const char *const cfg_json =
    "{\"policies\":[{\"name\":\"h\",\"mode\":\"hybrid\",\"sync_interval\":\"10ms\","
    "\"limits\":[{\"algorithm\":\"fixed_window\",\"limit\":10,\"window\":\"1h\"}]}]}";

static void
fx_open(struct fx *f, const char *json, size_t max_entries)
{
    memset(f, 0, sizeof(*f));
    f->base = event_base_new();
    f->probe.base.ops = &probe_ops;
    f->probe.mem = tu_memory();
    f->cfg = tu_config(json);
    f->pol = &f->cfg->policies[0];
    f->h = hybrid_new(f->base, &f->probe.base, &f->m, max_entries);
    hybrid_set_clock(f->h, tu_clock);
    hybrid_use_config(f->h, f->cfg);
}

static void
fx_close(struct fx *f)
{
    hybrid_close(f->h);
    hybrid_free(f->h);
    f->probe.mem->ops->destroy(f->probe.mem);
    config_unref(f->cfg);
    event_base_free(f->base);
}

/* The exact path of an unknown key: the backend's answer seeds the table. */
static struct rl_check_res
seed(struct fx *f, struct rl_config *cfg, const struct rl_policy *pol, const char *key)
{
    struct rl_check_res r = tu_check(&f->probe.base, pol, key, 1, 0);

    hybrid_seed(f->h, cfg, pol, key, strlen(key), tu_now_us, &r);
    return r;
}

static bool
decide(struct fx *f, const char *key, int64_t cost, struct rl_check_res *res,
       int *degraded)
{
    return hybrid_decide(f->h, f->cfg, f->pol, key, strlen(key), cost, false, res, degraded);
}

/* One pass of the table's timer after `ms` on its clock. */
static void
tick_after(struct fx *f, int64_t ms)
{
    tu_now_us += ms * TU_MS;
    ck_assert_int_eq(event_base_loop(f->base, EVLOOP_ONCE), 0);
}

/* What the shared counts hold for the key now (a cost-0 check). */
static int64_t
backend_remaining(struct fx *f, const char *key)
{
    return tu_check(f->probe.mem, f->pol, key, 0, 0).limits[0].remaining;
}

#define PENDING(f) __atomic_load_n(&(f)->m.hybrid_pending, __ATOMIC_RELAXED)

/* ---- decisions ---------------------------------------------------------------- */

START_TEST(unknown_key_goes_to_the_backend_then_is_decided_locally)
{
    struct fx f;
    struct rl_check_res seeded, r;
    int degraded = -1;

    fx_open(&f, cfg_json, 100);
    ck_assert(!decide(&f, KEY, 1, &r, &degraded));
    seeded = seed(&f, f.cfg, f.pol, KEY);
    ck_assert_int_eq(seeded.limits[0].remaining, 9);
    for (int i = 0; i < 9; i++) {
        ck_assert(decide(&f, KEY, 1, &r, &degraded));
        ck_assert(r.allowed);
        ck_assert_int_eq(r.limits[0].remaining, 8 - i);
        ck_assert_int_eq(degraded, 0);
    }
    ck_assert_uint_eq(PENDING(&f), 9);
    /* the local view is spent: denied until the window's reset, and a
     * denial takes nothing */
    ck_assert(decide(&f, KEY, 1, &r, &degraded));
    ck_assert(!r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 0);
    ck_assert_int_eq(r.limits[0].retry_after_ms, seeded.limits[0].reset_ms);
    ck_assert_uint_eq(PENDING(&f), 9);
    ck_assert_uint_eq(f.m.hybrid_local, 10);
    /* nothing reached the backend but the seeding check */
    ck_assert_uint_eq(f.probe.n, 1);
    ck_assert_int_eq(backend_remaining(&f, KEY), 9);
    fx_close(&f);
}
END_TEST

/* A snapshot the test writes: Redis said `remaining`, reset in `reset_ms`. */
static void
seed_numbers(struct fx *f, const char *key, int64_t remaining, int64_t reset_ms)
{
    struct rl_check_res r = {.status = RL_BACKEND_OK, .allowed = 1, .nlimits = 1};

    r.limits[0].allowed = 1;
    r.limits[0].remaining = remaining;
    r.limits[0].reset_ms = reset_ms;
    hybrid_seed(f->h, f->cfg, f->pol, key, strlen(key), tu_now_us, &r);
}

#define EXPECT(r, al, rem, rst, rty)                                          \
    do {                                                                      \
        const struct rl_limit_result *r_ = &(r).limits[0];                    \
        ck_assert_msg((r).allowed == (al) && r_->remaining == (rem) &&        \
                      r_->reset_ms == (rst) && r_->retry_after_ms == (rty),   \
                      "got allowed=%d remaining=%lld reset_ms=%lld "          \
                      "retry_after_ms=%lld", (r).allowed,                     \
                      (long long)r_->remaining, (long long)r_->reset_ms,      \
                      (long long)r_->retry_after_ms);                         \
    } while (0)

/* A window is whole again at its reset, and not before. */
START_TEST(window_estimate_numbers)
{
    struct fx f;
    struct rl_check_res r;
    int deg;

    fx_open(&f, "{\"policies\":[{\"name\":\"w\",\"mode\":\"hybrid\","
                "\"limits\":[{\"algorithm\":\"sliding_window_counter\",\"limit\":5,"
                "\"window\":\"1s\"}]}]}", 100);
    seed_numbers(&f, KEY, 1, 400);
    ck_assert(decide(&f, KEY, 2, &r, &deg));
    EXPECT(r, 0, 1, 400, 400);
    tu_now_us += 100 * TU_MS;
    ck_assert(decide(&f, KEY, 2, &r, &deg));
    EXPECT(r, 0, 1, 300, 300);
    ck_assert(decide(&f, KEY, 6, &r, &deg));
    EXPECT(r, 0, 1, 300, -1);               /* above the limit: never */
    ck_assert(decide(&f, KEY, 1, &r, &deg));
    EXPECT(r, 1, 0, 300, 0);
    /* past the reset: the limit less what is pending, a new window */
    tu_now_us += 300 * TU_MS;
    ck_assert(decide(&f, KEY, 1, &r, &deg));
    EXPECT(r, 1, 3, 1000, 0);
    fx_close(&f);
}
END_TEST

/* A bucket refills at limit per window: waits are the missing units' time. */
START_TEST(refill_estimate_numbers)
{
    struct fx f;
    struct rl_check_res r;
    int deg;

    fx_open(&f, "{\"policies\":[{\"name\":\"b\",\"mode\":\"hybrid\","
                "\"limits\":[{\"algorithm\":\"token_bucket\",\"limit\":10,"
                "\"window\":\"1s\",\"burst\":20}]}]}", 100);
    seed_numbers(&f, KEY, 2, 800);
    ck_assert(decide(&f, KEY, 5, &r, &deg));
    EXPECT(r, 0, 2, 800, 300);              /* 3 tokens at 10/s */
    ck_assert(decide(&f, KEY, 21, &r, &deg));
    EXPECT(r, 0, 2, 800, -1);               /* above the burst */
    ck_assert(decide(&f, KEY, 2, &r, &deg));
    EXPECT(r, 1, 0, 2000, 0);               /* 20 tokens back in 2 s */
    /* past the snapshot's reset: full, less the 2 pending */
    tu_now_us += 800 * TU_MS;
    ck_assert(decide(&f, KEY, 1, &r, &deg));
    EXPECT(r, 1, 17, 300, 0);
    fx_close(&f);
}
END_TEST

/* ---- syncs -------------------------------------------------------------------- */

START_TEST(syncs_send_pending_forced_with_growing_seq)
{
    struct fx f;
    struct rl_check_res r;
    int deg;
    struct rl_check_req *s1, *s2;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, KEY);
    for (int i = 0; i < 3; i++)
        ck_assert(decide(&f, KEY, 1, &r, &deg) && r.allowed);
    /* not before the interval */
    tick_after(&f, 0);
    ck_assert_uint_eq(f.probe.n, 1);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 2);
    s1 = &f.probe.seen[1];
    ck_assert_int_eq(s1->cost, 3);
    ck_assert_uint_eq(s1->flags, RL_CHECK_FORCE | RL_CHECK_SETTLE | RL_CHECK_ONCE);
    ck_assert_uint_eq(f.m.hybrid_syncs, 1);
    ck_assert_uint_eq(PENDING(&f), 0);
    ck_assert_int_eq(backend_remaining(&f, KEY), 6);

    ck_assert(decide(&f, KEY, 2, &r, &deg) && r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 4);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 3);
    s2 = &f.probe.seen[2];
    ck_assert_int_eq(s2->cost, 2);
    ck_assert_uint_eq(s2->writer, s1->writer);
    ck_assert_uint_gt(s2->seq, s1->seq);
    ck_assert_int_eq(backend_remaining(&f, KEY), 4);

    /* a key touched with nothing pending: a cost-0 refresh, not a counted one */
    ck_assert(decide(&f, KEY, 0, &r, &deg) && r.allowed);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 4);
    ck_assert_int_eq(f.probe.seen[3].cost, 0);
    ck_assert_uint_eq(f.probe.seen[3].flags, RL_CHECK_FORCE | RL_CHECK_SETTLE);
    ck_assert_int_eq(backend_remaining(&f, KEY), 4);
    fx_close(&f);
}
END_TEST

START_TEST(failed_sync_is_sent_again_as_it_was)
{
    struct fx f;
    struct rl_check_res r;
    int deg;
    struct rl_check_req *failed, *again, *newer;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, KEY);
    for (int i = 0; i < 3; i++)
        ck_assert(decide(&f, KEY, 1, &r, &deg));
    f.probe.fail = 1;
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 2);
    failed = &f.probe.seen[1];
    ck_assert_int_eq(failed->cost, 3);
    ck_assert_uint_eq(f.m.hybrid_sync_failures, 1);
    ck_assert_uint_eq(PENDING(&f), 3);      /* never dropped */
    ck_assert_int_eq(backend_remaining(&f, KEY), 9);

    /* the view is an old one now; new units wait beside the failed ones */
    ck_assert(decide(&f, KEY, 1, &r, &deg) && r.allowed);
    ck_assert_int_eq(deg, 1);
    ck_assert_int_eq(r.limits[0].remaining, 5);     /* 9 - 3 in flight - 1 */
    ck_assert_uint_eq(PENDING(&f), 4);

    f.probe.fail = 0;
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 3);
    again = &f.probe.seen[2];
    ck_assert_int_eq(again->cost, 3);
    ck_assert_uint_eq(again->seq, failed->seq);
    ck_assert_uint_eq(again->writer, failed->writer);
    ck_assert_int_eq(backend_remaining(&f, KEY), 6);
    ck_assert_uint_eq(PENDING(&f), 1);
    ck_assert(decide(&f, KEY, 0, &r, &deg));
    ck_assert_int_eq(deg, 0);

    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 4);
    newer = &f.probe.seen[3];
    ck_assert_int_eq(newer->cost, 1);
    ck_assert_uint_gt(newer->seq, failed->seq);
    ck_assert_int_eq(backend_remaining(&f, KEY), 5);
    ck_assert_uint_eq(PENDING(&f), 0);
    fx_close(&f);
}
END_TEST

START_TEST(one_sync_in_flight_per_key)
{
    struct fx f;
    struct rl_check_res r;
    int deg;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, KEY);
    ck_assert(decide(&f, KEY, 2, &r, &deg));
    f.probe.hold = 1;
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 2);
    ck_assert_ptr_nonnull(f.probe.held_cb);
    /* in flight and pending both count against the local view */
    ck_assert(decide(&f, KEY, 3, &r, &deg) && r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 4);
    ck_assert_uint_eq(PENDING(&f), 5);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 2);        /* nothing sent beside it */
    /* overdue (past redis.timeout, 50 ms): the view may be stale */
    tu_now_us += 60 * TU_MS;
    ck_assert(decide(&f, KEY, 0, &r, &deg));
    ck_assert_int_eq(deg, 1);

    probe_release(&f.probe);
    ck_assert_uint_eq(PENDING(&f), 3);
    ck_assert_int_eq(backend_remaining(&f, KEY), 7);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 3);
    ck_assert_int_eq(f.probe.seen[2].cost, 3);
    ck_assert_uint_gt(f.probe.seen[2].seq, f.probe.seen[1].seq);
    ck_assert_int_eq(backend_remaining(&f, KEY), 4);
    ck_assert(hybrid_idle(f.h));
    fx_close(&f);
}
END_TEST

/* ---- the table ---------------------------------------------------------------- */

START_TEST(idle_entries_are_evicted_busy_ones_kept)
{
    struct fx f;
    struct rl_check_res r;
    int deg;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, "{t:idle}");
    seed(&f, f.cfg, f.pol, "{t:busy}");
    ck_assert_uint_eq(f.m.hybrid_entries, 2);
    ck_assert(decide(&f, "{t:busy}", 1, &r, &deg));
    f.probe.hold = 1;
    tick_after(&f, 25);                     /* two intervals and more */
    /* the idle key is gone; the busy one waits for its sync */
    ck_assert_uint_eq(f.m.hybrid_entries, 1);
    ck_assert(!decide(&f, "{t:idle}", 1, &r, &deg));
    probe_release(&f.probe);
    tick_after(&f, 25);
    ck_assert_uint_eq(f.m.hybrid_entries, 0);
    ck_assert(!decide(&f, "{t:busy}", 1, &r, &deg));
    ck_assert_int_eq(backend_remaining(&f, "{t:busy}"), 8);
    fx_close(&f);
}
END_TEST

START_TEST(a_full_table_leaves_new_keys_exact)
{
    struct fx f;
    struct rl_check_res r;
    int deg;

    fx_open(&f, cfg_json, 1);
    seed(&f, f.cfg, f.pol, "{t:a}");
    seed(&f, f.cfg, f.pol, "{t:b}");
    ck_assert(decide(&f, "{t:a}", 1, &r, &deg));
    ck_assert(!decide(&f, "{t:b}", 1, &r, &deg));
    ck_assert_uint_eq(f.m.hybrid_entries, 1);
    fx_close(&f);
}
END_TEST

START_TEST(a_reload_retires_the_old_entries_at_once)
{
    struct fx f;
    struct rl_check_res r;
    struct rl_config *next = tu_config(cfg_json);
    struct rl_config *old;
    int deg;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, KEY);
    ck_assert(decide(&f, KEY, 2, &r, &deg));
    /* the pending units go in the same pass, without waiting for a tick */
    hybrid_use_config(f.h, next);
    ck_assert_uint_eq(f.probe.n, 2);
    ck_assert_int_eq(f.probe.seen[1].cost, 2);
    ck_assert_int_eq(backend_remaining(&f, KEY), 7);
    ck_assert_uint_eq(PENDING(&f), 0);

    /* the new config's policy starts from the backend again, under its
     * own writer */
    old = f.cfg;
    f.cfg = next;
    f.pol = &next->policies[0];
    ck_assert(!decide(&f, KEY, 1, &r, &deg));
    seed(&f, next, f.pol, KEY);
    ck_assert(decide(&f, KEY, 1, &r, &deg) && r.allowed);
    ck_assert_int_eq(r.limits[0].remaining, 5);
    tick_after(&f, 10);
    ck_assert_uint_eq(f.probe.n, 4);
    ck_assert_uint_ne(f.probe.seen[3].writer, f.probe.seen[1].writer);
    ck_assert_int_eq(backend_remaining(&f, KEY), 5);
    /* the retired entry is freed once idle: only the new one is left */
    ck_assert_uint_eq(f.m.hybrid_entries, 1);
    /* an answer for the old config seeds nothing */
    {
        const struct rl_policy *old_pol = &old->policies[0];
        struct rl_check_res ans = tu_check(f.probe.mem, old_pol, "{t:old}", 0, 0);
        hybrid_seed(f.h, old, old_pol, "{t:old}", 7, tu_now_us, &ans);
        ck_assert_uint_eq(f.m.hybrid_entries, 1);
    }
    config_unref(old);
    fx_close(&f);
}
END_TEST

static void
on_idle(void *arg)
{
    ++*(int *)arg;
}

START_TEST(drain_sends_everything_then_says_idle)
{
    struct fx f;
    struct rl_check_res r;
    int deg, idle = 0;

    fx_open(&f, cfg_json, 100);
    seed(&f, f.cfg, f.pol, KEY);
    ck_assert(decide(&f, KEY, 4, &r, &deg));
    f.probe.hold = 1;
    hybrid_drain(f.h, on_idle, &idle);
    ck_assert_uint_eq(f.probe.n, 2);
    ck_assert(!hybrid_idle(f.h));
    ck_assert_int_eq(idle, 0);
    probe_release(&f.probe);
    ck_assert_int_eq(idle, 1);
    ck_assert(hybrid_idle(f.h));
    ck_assert_int_eq(backend_remaining(&f, KEY), 5);
    fx_close(&f);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("hybrid");
    TCase *dec = tcase_create("decisions"), *sync = tcase_create("syncs"),
          *table = tcase_create("table");

    tcase_add_test(dec, unknown_key_goes_to_the_backend_then_is_decided_locally);
    tcase_add_test(dec, window_estimate_numbers);
    tcase_add_test(dec, refill_estimate_numbers);
    tcase_add_test(sync, syncs_send_pending_forced_with_growing_seq);
    tcase_add_test(sync, failed_sync_is_sent_again_as_it_was);
    tcase_add_test(sync, one_sync_in_flight_per_key);
    tcase_add_test(sync, drain_sends_everything_then_says_idle);
    tcase_add_test(table, idle_entries_are_evicted_busy_ones_kept);
    tcase_add_test(table, a_full_table_leaves_new_keys_exact);
    tcase_add_test(table, a_reload_retires_the_old_entries_at_once);
    suite_add_tcase(s, dec);
    suite_add_tcase(s, sync);
    suite_add_tcase(s, table);
    return rl_unit_run(s, CK_FORK_GETENV);
}
