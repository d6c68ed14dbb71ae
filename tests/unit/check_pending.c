/*
 * check_pending.c — the queue of charges kept for the backend (pending.c)
 * on its own: what each send asks for (once, settle, the writer's seqs),
 * the caller's answer (the backend's, or "kept" at once or at its
 * deadline), resends in the order charges came, the bound, giving up after
 * error replies, and what exit counts as lost.
 *
 * The counts land in the real memory backend.  A probe backend in front of
 * it records what each send asked for, and can answer DOWN (a lost
 * connection), answer an error reply, say it is not ready, or hold a send
 * unanswered (in flight): what the memory backend never does by itself.
 * Retries and deadlines are the queue's own timers on a real event loop,
 * run until they fire; test_pending.py does the same against a real Redis.
 */
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include <event2/event.h>

#include "metrics.h"
#include "pending.h"
#include "../testutil_core.h"

#define KEY "{t:a}"
#define RECORDED_MAX 512

struct probe {
    struct rl_backend base;
    struct rl_backend *mem;
    int fail;      /* answer DOWN */
    int error;     /* answer an error reply */
    int hold;      /* keep sends unanswered */
    int not_ready; /* say so */
    size_t nheld;
    struct rl_check_req held[RECORDED_MAX];
    rl_check_cb held_cb[RECORDED_MAX];
    void *held_arg[RECORDED_MAX];
    size_t n; /* sends seen */
    struct rl_check_req seen[RECORDED_MAX];
};

/* The memory backend knows no once key: what it is given is a charge. */
static void
to_memory(struct probe *p, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct rl_check_req r = *req;

    r.flags &= ~(RL_CHECK_ONCE | RL_CHECK_SETTLE);
    p->mem->ops->check(p->mem, &r, cb, arg);
}

static void
probe_check(struct rl_backend *be, const struct rl_check_req *req, rl_check_cb cb, void *arg)
{
    struct probe *p = (struct probe *)be;
    struct rl_check_res down = {.status = RL_BACKEND_DOWN, .error = "probe: down"};
    struct rl_check_res err = {.status = RL_BACKEND_ERROR, .error = "WRONGTYPE: a key of the check holds a value of the wrong type"};

    ck_assert_uint_lt(p->n, RECORDED_MAX);
    p->seen[p->n++] = *req;
    if (p->fail || p->not_ready) {
        cb(&down, arg);
    } else if (p->error) {
        cb(&err, arg);
    } else if (p->hold) {
        p->held[p->nheld] = *req;
        p->held_cb[p->nheld] = cb;
        p->held_arg[p->nheld++] = arg;
    } else {
        to_memory(p, req, cb, arg);
    }
}

static const char *
probe_not_ready(struct rl_backend *be)
{
    return ((struct probe *)be)->not_ready ? "probe: not ready" : NULL;
}

static const struct rl_backend_ops probe_ops = {
    .name = "probe",
    .check = probe_check,
    .not_ready = probe_not_ready,
};

/* Every held send answered: applied (ok) or lost with its connection. */
static void
probe_answer_held(struct probe *p, int ok)
{
    size_t n = p->nheld;
    struct rl_check_res down = {.status = RL_BACKEND_DOWN, .error = "probe: lost"};

    p->nheld = 0;
    p->hold = 0;
    for (size_t i = 0; i < n; i++) {
        if (ok)
            to_memory(p, &p->held[i], p->held_cb[i], p->held_arg[i]);
        else
            p->held_cb[i](&down, p->held_arg[i]);
    }
}

struct fx {
    struct event_base *base;
    struct probe probe;
    struct rl_metrics m;
    struct rl_config *cfg;
    const struct rl_policy *pol;
    struct rl_pending *q;
};

static const char *const cfg_json =
    "{\"max_pending_charges\":4,\"redis\":{\"timeout\":\"20ms\"},"
    "\"policies\":[{\"name\":\"c\",\"limits\":[{\"algorithm\":\"fixed_window\","
    "\"limit\":1000000000000,\"window\":\"1h\"}]}]}";

static void
fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    f->base = event_base_new();
    f->probe.base.ops = &probe_ops;
    f->probe.mem = tu_memory();
    f->cfg = tu_config(cfg_json);
    f->pol = &f->cfg->policies[0];
    f->q = pending_new(f->base, &f->probe.base, &f->m);
}

static void
fx_close(struct fx *f)
{
    pending_close(f->q);
    pending_free(f->q);
    f->probe.mem->ops->destroy(f->probe.mem);
    config_unref(f->cfg);
    event_base_free(f->base);
}

/* A caller's answers: how many, and whether the last was "kept". */
struct caller {
    int calls, kept;
    enum rl_backend_status status;
};

static void
on_answer(const struct rl_check_res *res, void *arg)
{
    struct caller *c = arg;

    c->calls++;
    c->kept = res == NULL;
    if (res != NULL)
        c->status = res->status;
}

static int
submit(struct fx *f, const char *key, int64_t cost, struct caller *c)
{
    struct rl_check_req req = {.policy = f->pol,
                               .key = key,
                               .key_len = strlen(key),
                               .cost = cost,
                               .flags = RL_CHECK_CHARGE,
                               .timeout_ms = 20};

    return pending_submit(f->q, f->cfg, &req, f->pol->metrics_id, on_answer, c);
}

/* Run the loop until cond holds (the queue's timers fire as they come). */
#define RUN_UNTIL(f, cond)                                                                     \
    do {                                                                                       \
        for (int i_ = 0; !(cond); i_++) {                                                      \
            ck_assert_int_lt(i_, 1000);                                                        \
            ck_assert_int_eq(event_base_loop((f)->base, EVLOOP_ONCE), 0);                      \
        }                                                                                      \
    } while (0)

/* What the shared counts hold for the key (a cost-0 check). */
static int64_t
counted(struct fx *f, const char *key)
{
    return 1000000000000LL - tu_check(f->probe.mem, f->pol, key, 0, 0).limits[0].remaining;
}

START_TEST(a_charge_the_backend_takes_is_answered_by_it)
{
    struct fx f;
    struct caller c = {0};

    fx_open(&f);
    ck_assert_int_eq(submit(&f, KEY, 5, &c), RL_OK);
    ck_assert_int_eq(c.calls, 1);
    ck_assert(!c.kept);
    ck_assert_int_eq(c.status, RL_BACKEND_OK);
    /* sent once-only under this queue's writer, and settled by its reply */
    ck_assert_uint_eq(f.probe.n, 1);
    ck_assert_uint_eq(f.probe.seen[0].flags,
                      RL_CHECK_CHARGE | RL_CHECK_ONCE | RL_CHECK_SETTLE);
    ck_assert_uint_ne(f.probe.seen[0].writer, 0);
    ck_assert_uint_eq(f.probe.seen[0].seq, 1);
    ck_assert(pending_idle(f.q));
    ck_assert_int_eq(counted(&f, KEY), 5);
    ck_assert_uint_eq(f.m.charged[f.pol->metrics_id], 5);
    ck_assert_uint_eq(f.m.charges_deferred, 0);
    fx_close(&f);
}
END_TEST

START_TEST(kept_charges_go_again_in_order_under_their_seqs)
{
    struct fx f;
    struct caller c[3] = {{0}};

    fx_open(&f);
    f.probe.fail = 1;
    ck_assert_int_eq(submit(&f, KEY, 1, &c[0]), RL_OK);
    /* lost with its connection: kept, answered at once */
    ck_assert_int_eq(c[0].calls, 1);
    ck_assert(c[0].kept);
    ck_assert_uint_eq(f.probe.n, 1);
    /* behind a kept one: kept at once, not sent */
    ck_assert_int_eq(submit(&f, KEY, 2, &c[1]), RL_OK);
    ck_assert_int_eq(submit(&f, "{t:b}", 4, &c[2]), RL_OK);
    ck_assert_uint_eq(f.probe.n, 1);
    ck_assert(c[1].kept && c[2].kept);
    ck_assert_uint_eq(pending_count(f.q), 3);
    ck_assert_int_eq(pending_units(f.q), 7);
    ck_assert_uint_eq(f.m.charges_pending, 3);
    ck_assert_uint_eq(f.m.charges_pending_units, 7);
    f.probe.fail = 0;
    RUN_UNTIL(&f, pending_idle(f.q));
    /* the resends, in order; the first under the seq it was first sent with */
    ck_assert_uint_eq(f.probe.n, 4);
    ck_assert_uint_eq(f.probe.seen[1].seq, 1);
    ck_assert_int_eq(f.probe.seen[1].cost, 1);
    ck_assert_uint_eq(f.probe.seen[2].seq, 2);
    ck_assert_int_eq(f.probe.seen[2].cost, 2);
    ck_assert_uint_eq(f.probe.seen[3].seq, 3);
    ck_assert_int_eq(f.probe.seen[3].cost, 4);
    ck_assert_uint_eq(f.probe.seen[1].writer, f.probe.seen[0].writer);
    ck_assert_int_eq(counted(&f, KEY), 3);
    ck_assert_int_eq(counted(&f, "{t:b}"), 4);
    /* every caller answered once */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(c[i].calls, 1);
    ck_assert_uint_eq(f.m.charges_pending, 0);
    ck_assert_uint_eq(f.m.charges_pending_units, 0);
    ck_assert_uint_eq(f.m.charges_deferred, 3);
    ck_assert_uint_eq(f.m.charged[f.pol->metrics_id], 7);
    fx_close(&f);
}
END_TEST

START_TEST(a_kept_settle_is_copied_and_sent_without_a_once_key)
{
    struct fx f;
    struct caller c = {0};
    char claim[] = "40.0123456789ab";
    struct rl_check_req req = {.key = KEY,
                               .key_len = strlen(KEY),
                               .cost = 25,
                               .flags = RL_CHECK_RSV_SETTLE,
                               .timeout_ms = 20,
                               .rsv = {1, 2},
                               .rsv_claim = claim,
                               .rsv_claim_len = strlen(claim),
                               .rsv_estimate = 40};

    fx_open(&f);
    req.policy = f.pol;
    f.probe.fail = 1;
    ck_assert_int_eq(pending_submit(f.q, f.cfg, &req, f.pol->metrics_id, on_answer, &c), RL_OK);
    ck_assert(c.kept);
    /* the caller's claim may go at once: the queue holds its own copy */
    memset(claim, 'x', strlen(claim));
    ck_assert_ptr_ne(f.probe.seen[0].rsv_claim, claim);
    ck_assert_mem_eq(f.probe.seen[0].rsv_claim, "40.0123456789ab", 15);
    f.probe.fail = 0;
    RUN_UNTIL(&f, pending_idle(f.q));
    ck_assert_uint_eq(f.probe.n, 2);
    for (size_t i = 0; i < 2; i++) {
        /* idempotent by its record: no once key, no seq */
        ck_assert_uint_eq(f.probe.seen[i].flags, RL_CHECK_RSV_SETTLE | RL_CHECK_SETTLE);
        ck_assert_uint_eq(f.probe.seen[i].seq, 0);
        ck_assert_int_eq(f.probe.seen[i].rsv_estimate, 40);
        ck_assert_uint_eq(f.probe.seen[i].rsv.lo, 2);
        ck_assert_uint_eq(f.probe.seen[i].rsv_claim_len, 15);
    }
    /* no record in the memory backend: applied, found nothing */
    ck_assert_uint_eq(f.m.reservations[RL_RSV_M_UNKNOWN], 1);
    ck_assert_uint_eq(f.m.reservations[RL_RSV_M_SETTLED], 0);
    ck_assert_uint_eq(f.m.charged[f.pol->metrics_id], 0);
    ck_assert_uint_eq(f.m.charges_deferred, 1);
    ck_assert_uint_eq(f.m.charges_pending, 0);
    ck_assert_int_eq(c.calls, 1);
    fx_close(&f);
}
END_TEST

START_TEST(a_backend_not_ready_keeps_charges_until_it_is)
{
    struct fx f;
    struct caller c = {0};

    fx_open(&f);
    f.probe.not_ready = 1;
    ck_assert_int_eq(submit(&f, KEY, 9, &c), RL_OK);
    ck_assert(c.kept);
    ck_assert_uint_eq(f.probe.n, 1); /* answered DOWN at once */
    /* a retry tick finds it still not ready */
    ck_assert_int_eq(event_base_loop(f.base, EVLOOP_ONCE), 0);
    ck_assert_uint_eq(f.probe.n, 2);
    ck_assert_uint_eq(pending_count(f.q), 1);
    f.probe.not_ready = 0;
    RUN_UNTIL(&f, pending_idle(f.q));
    ck_assert_uint_eq(f.probe.n, 3);
    ck_assert_int_eq(counted(&f, KEY), 9);
    fx_close(&f);
}
END_TEST

START_TEST(an_answer_past_the_deadline_is_kept_then_applied_by_its_reply)
{
    struct fx f;
    struct caller c = {0};

    fx_open(&f);
    f.probe.hold = 1;
    ck_assert_int_eq(submit(&f, KEY, 3, &c), RL_OK);
    ck_assert_int_eq(c.calls, 0);
    /* redis.timeout (20 ms) passes: the caller hears "kept" */
    RUN_UNTIL(&f, c.calls == 1);
    ck_assert(c.kept);
    ck_assert_uint_eq(pending_count(f.q), 1);
    /* the late reply applies it: nothing sent again */
    probe_answer_held(&f.probe, 1);
    ck_assert(pending_idle(f.q));
    ck_assert_uint_eq(f.probe.n, 1);
    ck_assert_int_eq(c.calls, 1);
    ck_assert_int_eq(counted(&f, KEY), 3);
    ck_assert_uint_eq(f.m.charged[f.pol->metrics_id], 3);
    fx_close(&f);
}
END_TEST

START_TEST(past_the_bound_a_charge_is_refused_and_nothing_kept)
{
    struct fx f;
    struct caller c[5] = {{0}};

    fx_open(&f);
    f.probe.fail = 1;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(submit(&f, KEY, 1, &c[i]), RL_OK);
    ck_assert_int_eq(submit(&f, KEY, 100, &c[4]), RL_ERR);
    ck_assert_int_eq(c[4].calls, 0);
    ck_assert_uint_eq(f.m.charges_refused, 1);
    ck_assert_uint_eq(pending_count(f.q), 4);
    ck_assert_int_eq(pending_units(f.q), 4);
    f.probe.fail = 0;
    RUN_UNTIL(&f, pending_idle(f.q));
    ck_assert_int_eq(counted(&f, KEY), 4);
    /* room again */
    ck_assert_int_eq(submit(&f, KEY, 1, &c[4]), RL_OK);
    fx_close(&f);
}
END_TEST

START_TEST(in_flight_resends_are_windowed)
{
    struct fx f;
    struct caller *c = calloc(300, sizeof(*c));
    struct rl_config *big = tu_config("{\"max_pending_charges\":300,\"redis\":{\"timeout\":"
                                      "\"20ms\"},\"policies\":[{\"name\":\"c\",\"limits\":[{"
                                      "\"algorithm\":\"fixed_window\",\"limit\":1000000000000,"
                                      "\"window\":\"1h\"}]}]}");

    fx_open(&f);
    config_unref(f.cfg);
    f.cfg = big;
    f.pol = &big->policies[0];
    f.probe.fail = 1;
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(submit(&f, KEY, 1, &c[i]), RL_OK);
    ck_assert_uint_eq(f.probe.n, 1);
    /* the backend back but slow: at most a window in flight */
    f.probe.fail = 0;
    f.probe.hold = 1;
    RUN_UNTIL(&f, f.probe.nheld > 0);
    ck_assert_uint_eq(f.probe.nheld, 64);
    /* lost together (one connection): all kept, sent again in order */
    probe_answer_held(&f.probe, 0);
    ck_assert_uint_eq(pending_count(f.q), 300);
    RUN_UNTIL(&f, pending_idle(f.q));
    ck_assert_int_eq(counted(&f, KEY), 300);
    for (size_t i = 1, want = 1; i < f.probe.n; i++) {
        if (i == 65)
            want = 1; /* the lost window again, from its first */
        ck_assert_uint_eq(f.probe.seen[i].seq, want);
        want++;
    }
    fx_close(&f);
    free(c);
}
END_TEST

START_TEST(error_replies_every_time_give_a_charge_up)
{
    struct fx f;
    struct caller c = {0}, d = {0};

    fx_open(&f);
    f.probe.error = 1;
    ck_assert_int_eq(submit(&f, KEY, 6, &c), RL_OK);
    ck_assert(c.kept);
    RUN_UNTIL(&f, pending_idle(f.q));
    ck_assert_uint_eq(f.probe.n, PENDING_ERRORS_MAX);
    ck_assert_uint_eq(f.m.charges_lost, 1);
    ck_assert_uint_eq(f.m.charges_pending, 0);
    ck_assert_int_eq(c.calls, 1);
    /* the queue goes on */
    f.probe.error = 0;
    ck_assert_int_eq(submit(&f, KEY, 2, &d), RL_OK);
    ck_assert(!d.kept);
    ck_assert_int_eq(counted(&f, KEY), 2);
    fx_close(&f);
}
END_TEST

START_TEST(what_is_kept_at_exit_is_lost)
{
    struct fx f;
    struct caller c[2] = {{0}};
    struct rl_metrics *m;

    fx_open(&f);
    f.probe.fail = 1;
    ck_assert_int_eq(submit(&f, KEY, 10, &c[0]), RL_OK);
    ck_assert_int_eq(submit(&f, KEY, 20, &c[1]), RL_OK);
    m = &f.m;
    pending_close(f.q);
    pending_free(f.q);
    f.q = NULL;
    ck_assert_uint_eq(m->charges_lost, 2);
    ck_assert_uint_eq(m->charges_pending, 0);
    fx_close(&f);
}
END_TEST

static Suite *
pending_suite(void)
{
    Suite *s = suite_create("pending");
    TCase *tc = tcase_create("queue");

    /* giving up takes PENDING_ERRORS_MAX retries, PENDING_RETRY_MS apart */
    tcase_set_timeout(tc, 30);

    tcase_add_test(tc, a_charge_the_backend_takes_is_answered_by_it);
    tcase_add_test(tc, kept_charges_go_again_in_order_under_their_seqs);
    tcase_add_test(tc, a_kept_settle_is_copied_and_sent_without_a_once_key);
    tcase_add_test(tc, a_backend_not_ready_keeps_charges_until_it_is);
    tcase_add_test(tc, an_answer_past_the_deadline_is_kept_then_applied_by_its_reply);
    tcase_add_test(tc, past_the_bound_a_charge_is_refused_and_nothing_kept);
    tcase_add_test(tc, in_flight_resends_are_windowed);
    tcase_add_test(tc, error_replies_every_time_give_a_charge_up);
    tcase_add_test(tc, what_is_kept_at_exit_is_lost);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(pending_suite(), CK_FORK_GETENV);
}
