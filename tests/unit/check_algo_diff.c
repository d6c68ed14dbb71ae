/*
 * check_algo_diff.c — the Lua algorithms in a real Redis against their C
 * twins: the same (time, cost) events through EVALSHA of the embedded check
 * script (explicit time in ARGV[1]) and through peek/commit in C, with every
 * decision and every number compared at every step.  Also: every key the
 * script touched keeps a TTL, exactly as long as its state matters after a
 * commit, and a TTL removed behind the script's back is put back.
 *
 * Forced checks (a hybrid sync: cost consumed even when it does not fit) are
 * driven the same way, mixed in at random.
 *
 * Redis expires keys on its own clock while these tests drive the script's
 * clock, so each step runs as MULTI, EVALSHA, then PTTL and PEXPIRE (or
 * PERSIST, to test the repair) of every key, EXEC: plain commands in a
 * transaction see no key expire, the PTTL shows what the script left, and
 * pushing every expiry far out leaves only the script to decide what a key
 * holds.
 */
#include "unit.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "algo.h"
#include "config.h"
#include "lease.h"
#include "lua_scripts.h"
#include "period.h"
#include "script.h"
#include "util.h"
#include "../testutil_redis.h"

#define MS 1000LL
#define T0 1700000000000000LL   /* a Unix time in microseconds */
#define DAY_MS 86400000LL

static struct test_redis srv;
static redisContext *rc;

static void
setup(void)
{
    redisReply *r;

    rc = test_redis_connect(&srv);
    ck_assert_msg(rc != NULL, "cannot connect to the test redis-server");
    r = redisCommand(rc, "FLUSHALL");
    ck_assert_ptr_nonnull(r);
    freeReplyObject(r);
    r = redisCommand(rc, "SCRIPT LOAD %b", rl_lua_check, rl_lua_check_len);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "SCRIPT LOAD: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "not a string");
    ck_assert_str_eq(r->str, rl_lua_check_sha);
    freeReplyObject(r);
}

static void
teardown(void)
{
    if (rc != NULL)
        redisFree(rc);
    rc = NULL;
}

/* ---- one policy, in Redis and in C side by side ---------------------------- */

struct dlimit {
    struct rl_limit lim;
    char key[128];
    struct rl_algo_state st;
};

struct dpolicy {
    struct dlimit l[RL_LIMITS_MAX];
    size_t n;
    char block_key[128];
    int64_t block_until;    /* the twin's block: us, the script's clock */
    int64_t reset_index, block_ms;  /* of the next DP_RESET, DP_BLOCK */
    struct rl_lease lease;  /* of the next DP_LEASE, DP_RELEASE */
    int64_t max_delay_ms;   /* of every DP_DELAY */
    int persisted;      /* the previous step took every TTL away */
    long long last;     /* what the previous step answered first */
    long long pttl[RL_LIMITS_MAX];  /* as the probe saw them after a step */
    int64_t skew;       /* the daemon's clock minus the script's (periods) */
    int how;            /* the step's DP_* */
    /* reservations (DP_RESERVE, DP_SETTLE): the claim the next step brings
     * (a DP_RESERVE takes it) and the record it names in the key's
     * reservations (rsv_base, a sorted set), the ttl; the
     * twin's record: whether it is held, its claim and its deadline (the
     * script's clock; the test keeps Redis from forgetting it, as it does
     * blocks) */
    char rsv_base[160], rsv_key[256], claim[64], rsv_claim[64];
    int64_t rsv_ttl_ms, rsv_deadline;
    int rsv_live;
};

static void
dp_add(struct dpolicy *p, const char *id, enum rl_algo algo, int64_t limit,
       int64_t window_ms, int64_t burst)
{
    struct dlimit *d = &p->l[p->n++];
    const struct rl_algo_def *def = algo_def(algo);

    ck_assert_uint_le(p->n, RL_LIMITS_MAX);
    d->lim.algo = algo;
    d->lim.limit = limit;
    d->lim.window_ms = window_ms;
    d->lim.burst = def->uses_burst && burst > 0 ? burst : limit;
    snprintf(d->key, sizeof(d->key), "{diff:%s}:%s:%lld", id, def->tag,
             (long long)window_ms);
    snprintf(p->block_key, sizeof(p->block_key), "{diff:%s}:block", id);
}

/* A limit of a calendar period in zone tz (NULL: UTC). */
static void
dp_add_period(struct dpolicy *p, const char *id, enum rl_algo algo, int64_t limit, int kind,
              const char *tz, int week_start)
{
    struct dlimit *d = &p->l[p->n++];
    char *cause = NULL, suffix[128];
    struct strbuf sb;

    ck_assert_uint_le(p->n, RL_LIMITS_MAX);
    d->lim.algo = algo;
    d->lim.limit = limit;
    d->lim.burst = limit;
    d->lim.period.kind = kind;
    d->lim.period.week_start = week_start;
    if (tz != NULL) {
        d->lim.period.tz = period_tz(tz, 0, &cause);
        ck_assert_msg(d->lim.period.tz != NULL, "%s: %s", tz, cause);
    }
    sb_init(&sb, suffix, sizeof(suffix));
    algo_key_suffix(&d->lim, &sb);
    snprintf(d->key, sizeof(d->key), "{diff:%s}%s", id, suffix);
    snprintf(p->block_key, sizeof(p->block_key), "{diff:%s}:block", id);
}

/* The last limit added, aligned to the epoch (fixed_window's align: epoch). */
static void
dp_align_last(struct dpolicy *p)
{
    ck_assert_ptr_nonnull(algo_def(p->l[p->n - 1].lim.algo)->aligned_tag);
    p->l[p->n - 1].lim.align = RL_ALIGN_EPOCH;
}

static void
dp_free(struct dpolicy *p)
{
    for (size_t i = 0; i < p->n; i++)
        algo_state_release(&p->l[i].st);
}

static int64_t
ceil_ms(int64_t us)
{
    return algo_us_to_ms_ceil(us);
}

static int64_t
mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static redisReply *
get_reply(void)
{
    void *r = NULL;

    ck_assert_msg(redisGetReply(rc, &r) == REDIS_OK && r != NULL,
                  "redis: %s", rc->errstr);
    return r;
}

/* How dp_step runs a check. */
#define DP_PERSIST 0x1  /* then take every key's TTL away behind its back */
#define DP_FORCE 0x2    /* a forced check: consume cost even if it does not fit */
#define DP_RESET 0x4    /* reset limit p->reset_index (< 0: all and the block) */
#define DP_BLOCK 0x8    /* block for p->block_ms (0: lift) */
#define DP_LEASE 0x10   /* the concurrency limit holds the slot under p->lease */
#define DP_RELEASE 0x20 /* give lease p->lease back */
#define DP_DELAY 0x40   /* reserved when it fits within p->max_delay_ms */
#define DP_CHARGE 0x80  /* a charge: counted past the limit, answered as a cost 0 check */
#define DP_RESERVE 0x100 /* allowed: also writes the reservation's record (p->claim) */
#define DP_SETTLE 0x200  /* settle the reservation p->claim names at the real cost */

/* The script call of one step: EVALSHA with explicit time, a batch of one. */
struct dp_call {
    const char *argv[16 + RL_LIMITS_MAX];
    size_t lens[16 + RL_LIMITS_MAX];
    int argc;
    char nums[8][24];
    int nn;
    char spec[RL_LIMITS_MAX * 128];
    char hex[RL_LEASE_HEX + 1];
};

static void
dc_arg(struct dp_call *c, const char *s)
{
    c->argv[c->argc] = s;
    c->lens[c->argc++] = strlen(s);
}

/* A number, then flags (may be "") */
static void
dc_num(struct dp_call *c, int64_t v, const char *flags)
{
    snprintf(c->nums[c->nn], sizeof(c->nums[c->nn]), "%lld%s", (long long)v, flags);
    dc_arg(c, c->nums[c->nn++]);
}

static void
dp_build(const struct dpolicy *p, int64_t now, int64_t cost, int how,
         struct dp_call *c)
{
    char flags[16];
    int rsv = (how & (DP_RESERVE | DP_SETTLE)) != 0;

    snprintf(flags, sizeof(flags), "%s%s%s%s%s%s%s%s%s", how & DP_FORCE ? "f" : "",
             how & DP_RESET ? "r" : "", how & DP_BLOCK ? "b" : "",
             how & DP_LEASE ? "l" : "", how & DP_RELEASE ? "x" : "",
             how & DP_DELAY ? "d" : "", how & DP_CHARGE ? "c" : "",
             how & DP_RESERVE ? "v" : "", how & DP_SETTLE ? "s" : "");
    dc_arg(c, "EVALSHA");
    dc_arg(c, rl_lua_check_sha);
    dc_num(c, (int64_t)p->n + rsv, "");
    for (size_t i = 0; i < p->n; i++)
        dc_arg(c, p->l[i].key);
    if (rsv)
        dc_arg(c, p->rsv_base);
    dc_num(c, now, "");
    dc_num(c, 1, "");    /* checks in this batch */
    /* the policy's spec, "<tag> <limit> <window_ms> <burst>" per limit,
     * then the cost and its flags, the block key, the admin arguments */
    for (size_t i = 0; i < p->n; i++) {
        const struct rl_limit *l = &p->l[i].lim;
        size_t at = strlen(c->spec);
        char w[128];

        /* a period's boundaries as the daemon computes them, by its clock */
        if (algo_has_period(l)) {
            int64_t b[RL_PERIOD_BOUNDS];

            algo_period_bounds(l, now + p->skew, b);
            snprintf(w, sizeof(w), "%lld,%lld,%lld,%lld,%lld,%lld", (long long)b[0] / 1000000,
                     (long long)b[1] / 1000000, (long long)b[2] / 1000000,
                     (long long)b[3] / 1000000, (long long)b[4] / 1000000,
                     (long long)b[5] / 1000000);
        } else {
            snprintf(w, sizeof(w), "%lld", (long long)l->window_ms);
        }
        snprintf(c->spec + at, sizeof(c->spec) - at, "%s%s %lld %s %lld", i ? " " : "",
                 algo_script_tag(l), (long long)l->limit, w, (long long)l->burst);
    }
    dc_arg(c, c->spec);
    dc_num(c, cost, flags);
    dc_arg(c, p->block_key);
    if (how & (DP_LEASE | DP_RELEASE)) {
        lease_hex(&p->lease, c->hex);
        c->hex[RL_LEASE_HEX] = '\0';
        dc_arg(c, c->hex);
    }
    if (how & DP_DELAY)
        dc_num(c, p->max_delay_ms, "");
    if (how & DP_RESERVE)
        dc_num(c, 2 * p->rsv_ttl_ms, "");
    if (how & DP_SETTLE)
        dc_num(c, strtoll(p->claim, NULL, 10), "");
    if (rsv)
        dc_arg(c, p->rsv_key);
    if (how & DP_RESET)
        dc_num(c, p->reset_index, "");
    if (how & DP_BLOCK)
        dc_num(c, p->block_ms, "");
}

/*
 * The step in Redis: MULTI, the script, then PTTL and PEXPIRE (or PERSIST)
 * of every limit key and a far PEXPIRE of the block key, EXEC.  Returns
 * EXEC's reply; *slack, the ms the PTTLs may be short by.
 */
static redisReply *
dp_redis(struct dpolicy *p, int64_t now, int64_t cost, int how,
         const char *where, int64_t *slack)
{
    struct dp_call c = { .argc = 0 };
    int64_t sent;
    redisReply *r;

    dp_build(p, now, cost, how, &c);
    sent = mono_us();
    ck_assert_int_eq(redisAppendCommand(rc, "MULTI"), REDIS_OK);
    ck_assert_int_eq(redisAppendCommandArgv(rc, c.argc, c.argv, c.lens), REDIS_OK);
    for (size_t i = 0; i < p->n; i++) {
        ck_assert_int_eq(redisAppendCommand(rc, "PTTL %s", p->l[i].key), REDIS_OK);
        ck_assert_int_eq((how & DP_PERSIST) ? redisAppendCommand(rc, "PERSIST %s", p->l[i].key)
                                 : redisAppendCommand(rc, "PEXPIRE %s 1000000000",
                                                      p->l[i].key), REDIS_OK);
    }
    /* the block ends on the script's clock, which these tests drive; so does
     * a reservation's deadline (the twin never forgets a record) */
    ck_assert_int_eq(redisAppendCommand(rc, "PEXPIRE %s 1000000000", p->block_key),
                     REDIS_OK);
    ck_assert_int_eq(redisAppendCommand(rc, "PEXPIRE %s 1000000000",
                                        p->rsv_base[0] ? p->rsv_base : "{diff}:none"),
                     REDIS_OK);
    ck_assert_int_eq(redisAppendCommand(rc, "EXEC"), REDIS_OK);
    for (size_t k = 0; k < 4 + 2 * p->n; k++) {
        r = get_reply();
        ck_assert_msg(r->type == REDIS_REPLY_STATUS, "%s: queueing: %s", where,
                      r->type == REDIS_REPLY_ERROR ? r->str : "?");
        freeReplyObject(r);
    }
    r = get_reply();
    /*
     * The script's PEXPIRE and the PTTL each read Redis's clock, so the PTTL
     * seen is short by the time between them (within this round trip) and
     * by up to 1 ms of rounding; never longer.
     */
    *slack = 1 + ceil_ms(mono_us() - sent);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 3 + 2 * p->n,
                  "%s: EXEC failed", where);
    ck_assert_msg(r->element[0]->type == REDIS_REPLY_ARRAY, "%s: script: %s", where,
                  r->element[0]->type == REDIS_REPLY_ERROR ? r->element[0]->str
                                                           : "not an array");
    ck_assert_uint_eq(r->element[0]->elements, 1 + 3 * p->n);
    return r;
}

/* The admin part of a step in C, as backend_memory.c does it. */
static void
dp_twin_admin(struct dpolicy *p, int64_t now, int64_t cost, int how)
{
    for (size_t i = 0; (how & DP_RESET) && i < p->n; i++)
        if (p->reset_index < 0 || p->reset_index == (int64_t)i)
            algo_state_release(&p->l[i].st);
    if ((how & DP_RESET) && p->reset_index < 0)
        p->block_until = 0;
    if (how & DP_BLOCK)
        p->block_until = p->block_ms > 0 ? now + p->block_ms * MS : 0;
    for (size_t i = 0; cost < 0 && i < p->n; i++)
        algo_def(p->l[i].lim.algo)->give(&p->l[i].lim, &p->l[i].st, now, -cost);
}

/*
 * The C twin of a step: what the script's reply must say first (1, 0 or
 * -blocked_ms), the numbers into cr; *committed, whether it consumed.
 */
static long long
dp_twin(struct dpolicy *p, int64_t now, int64_t cost, int how,
        struct rl_limit_result *cr, int *committed)
{
    int admin = (how & (DP_RESET | DP_BLOCK | DP_RELEASE)) || cost < 0;
    int force = (how & DP_FORCE) && !admin, allowed = 1;
    int64_t blocked;

    if (how & DP_RELEASE) {
        long long released = 0;

        /* as backend_memory.c: the first concurrency limit holds leases;
         * a release answers that and zeros */
        for (size_t i = 0; i < p->n; i++) {
            const struct rl_algo_def *d = algo_def(p->l[i].lim.algo);

            if (d->release != NULL) {
                released = d->release(&p->l[i].lim, &p->l[i].st, now, &p->lease);
                break;
            }
        }
        memset(cr, 0, p->n * sizeof(*cr));
        *committed = 0;
        return released;
    } else if (admin) {
        dp_twin_admin(p, now, cost, how);
    }
    if (admin)
        cost = 0;
    blocked = p->block_until > now ? ceil_ms(p->block_until - now) : 0;
    if (how & DP_SETTLE) {
        /* as backend_memory.c's op_settle: the record held with this claim
         * and in time goes, the difference is charged or given back */
        int held = p->rsv_live && strcmp(p->rsv_claim, p->claim) == 0;

        *committed = 0;
        if (!held || p->rsv_deadline <= now) {
            if (held)
                p->rsv_live = 0;
            memset(cr, 0, p->n * sizeof(*cr));
            return held ? 4 : 3;
        }
        p->rsv_live = 0;
        cost -= strtoll(p->claim, NULL, 10);
        for (size_t i = 0; cost < 0 && i < p->n; i++)
            if (p->l[i].lim.algo != RL_ALGO_CONCURRENCY)
                algo_def(p->l[i].lim.algo)->give(&p->l[i].lim, &p->l[i].st, now, -cost);
        if (cost < 0)
            cost = 0;
        how |= DP_CHARGE;
    }
    if (how & DP_CHARGE) {
        /* as backend_memory.c's op_charge: every limit but concurrency
         * takes it, then a check of cost 0 answers */
        for (size_t i = 0; i < p->n; i++) {
            struct dlimit *d = &p->l[i];
            const struct rl_algo_def *def = algo_def(d->lim.algo);

            if (cost > 0 && def->charge != NULL)
                def->charge(&d->lim, &d->st, now, cost, &cr[i]);
            def->peek(&d->lim, &d->st, now, 0, &cr[i]);
            allowed &= cr[i].allowed;
        }
        *committed = cost > 0;
        return blocked > 0 ? -blocked : allowed;
    }
    for (size_t i = 0; i < p->n; i++) {
        const struct dlimit *d = &p->l[i];
        algo_def(d->lim.algo)->peek(&d->lim, &d->st, now, cost, &cr[i]);
        allowed &= cr[i].allowed;
    }
    allowed &= blocked == 0;
    /* as backend_memory.c: every limit fits within max_delay, none never */
    int reserve = !allowed && blocked == 0 && cost > 0 && (how & DP_DELAY);
    for (size_t i = 0; reserve && i < p->n; i++)
        reserve = cr[i].retry_after_ms >= 0 && cr[i].retry_after_ms <= p->max_delay_ms &&
                  (p->l[i].lim.algo != RL_ALGO_CONCURRENCY || cr[i].retry_after_ms == 0);
    *committed = (allowed || force || reserve) && cost > 0;
    for (size_t i = 0; *committed && i < p->n; i++) {
        const struct rl_algo_def *d = algo_def(p->l[i].lim.algo);

        if (d->hold != NULL && (how & DP_LEASE))
            d->hold(&p->l[i].lim, &p->l[i].st, now, &p->lease, &cr[i]);
        else if (reserve && d->reserve != NULL)
            d->reserve(&p->l[i].lim, &p->l[i].st, now, cost, &cr[i]);
        else
            d->commit(&p->l[i].lim, &p->l[i].st, now, cost, &cr[i]);
    }
    if (reserve)
        return 2;
    if ((how & DP_RESERVE) && *committed && allowed) {
        p->rsv_live = 1;
        p->rsv_deadline = now + p->rsv_ttl_ms * MS;
        snprintf(p->rsv_claim, sizeof(p->rsv_claim), "%s", p->claim);
    }
    return blocked > 0 ? -blocked : allowed;
}

/* Limit i's numbers and its key's TTL after a step. */
static void
dp_compare(struct dpolicy *p, size_t i, const redisReply *r, int64_t now,
           const struct rl_limit_result *cr, int committed, int64_t slack,
           const char *where)
{
    const redisReply *ev = r->element[0];
    struct dlimit *d = &p->l[i];
    /* below 0: an overdraft (the daemon splits it, script.c) */
    long long lr = ev->element[1 + 3 * i]->integer;
    long long ls = ev->element[2 + 3 * i]->integer;
    long long lt = ev->element[3 + 3 * i]->integer;
    long long want = (long long)(cr->remaining - cr->overdraft);
    int64_t ttl = algo_def(d->lim.algo)->ttl_us(&d->lim, &d->st, now);
    int64_t E = ttl > 0 ? ceil_ms(ttl) : 1;
    long long pt = r->element[1 + 2 * i]->integer;

    ck_assert_msg(lr == want && ls == cr->reset_ms &&
                  lt == cr->retry_after_ms,
                  "%s limit %zu (%s %lld/%lldms burst %lld): "
                  "lua remaining %lld reset_ms %lld retry_after_ms %lld, "
                  "c %lld %lld %lld", where, i, algo_def(d->lim.algo)->name,
                  (long long)d->lim.limit, (long long)d->lim.window_ms,
                  (long long)d->lim.burst, lr, ls, lt, want,
                  (long long)cr->reset_ms, (long long)cr->retry_after_ms);
    ck_assert_msg(cr->remaining == 0 || cr->overdraft == 0, "%s limit %zu: remaining %lld "
                  "with an overdraft of %lld", where, i, (long long)cr->remaining,
                  (long long)cr->overdraft);
    p->pttl[i] = pt;
    if (pt == -2 && ttl > 0) {
        /*
         * Redis's own clock ran past a TTL of E ms between the script
         * and the PTTL, which it may: then Redis holds nothing, and so
         * must the twin.  A TTL shorter than the state needs is caught
         * whenever E exceeds that real time.
         */
        ck_assert_msg(E <= slack, "%s limit %zu (%s): key lost while its "
                      "state matters for %lld us", where, i,
                      algo_def(d->lim.algo)->name, (long long)ttl);
        algo_state_release(&d->st);
        return;
    }
    ck_assert_msg(pt != -1, "%s limit %zu (%s): key %s has no TTL",
                  where, i, algo_def(d->lim.algo)->name, d->key);
    /* a charge leaves a concurrency limit as a check of cost 0 does */
    if ((committed && !(p->how & (DP_CHARGE | DP_SETTLE) && algo_def(d->lim.algo)->charge == NULL)) ||
        (p->persisted && ttl > 0))
        ck_assert_msg(pt >= E - slack && pt <= E,
                      "%s now %lld limit %zu (%s): PTTL %lld ms, state "
                      "matters for %lld us", where, (long long)now, i,
                      algo_def(d->lim.algo)->name, pt, (long long)ttl);
}

/*
 * One check at `now` of `cost` (an admin one with DP_RESET, DP_BLOCK or a
 * negative cost), through the script (a batch of one) and through C;
 * compares everything and checks every key's TTL.  Returns whether it was
 * allowed.
 */
static int
dp_step(struct dpolicy *p, int64_t now, int64_t cost, int how,
        const char *where)
{
    struct rl_limit_result cr[RL_LIMITS_MAX];
    int64_t slack;
    int committed;
    redisReply *r = dp_redis(p, now, cost, how, where, &slack);
    long long want = dp_twin(p, now, cost, how, cr, &committed);
    char at[256];

    snprintf(at, sizeof(at), "%s now %lld cost %lld%s%s%s%s", where, (long long)now,
             (long long)cost, how & DP_FORCE ? " forced" : "",
             how & DP_RESET ? " reset" : "", how & DP_BLOCK ? " block" : "",
             how & DP_CHARGE ? " charge" : "");
    p->how = how;
    ck_assert_msg(r->element[0]->element[0]->integer == want,
                  "%s: allowed lua %lld c %lld", at,
                  r->element[0]->element[0]->integer, want);
    for (size_t i = 0; i < p->n; i++)
        dp_compare(p, i, r, now, &cr[i], committed, slack, at);
    freeReplyObject(r);
    p->persisted = how & DP_PERSIST;
    p->last = want;
    return want == 1;
}

/* ---- random events --------------------------------------------------------- */

static uint64_t
rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t
rnd_upto(uint64_t *s, int64_t n)     /* 0..n */
{
    return n <= 0 ? 0 : (int64_t)(rnd(s) % (uint64_t)(n + 1));
}

/* Time moves mostly forward at about the policy's pace, sometimes jumps,
 * sometimes stands still, and now and then steps back (Redis TIME can). */
static int64_t
next_time(uint64_t *s, int64_t now, const struct dpolicy *p)
{
    const struct rl_limit *l = &p->l[rnd(s) % p->n].lim;
    int64_t W = algo_window_ms(l, now) * MS, gap = W / l->limit;
    /* keep every time far below 2^53 even with year-long windows */
    int64_t jump = W <= DAY_MS * MS ? 3 * W : W / 8;

    switch (rnd(s) % 20) {
    case 0: case 1: return now;
    case 2: return now + 1;
    case 3: case 4: return now + rnd_upto(s, W);
    case 5: return now + rnd_upto(s, jump);
    case 6: return now - rnd_upto(s, W < 2 * MS * 1000 ? W : 2 * MS * 1000);
    default: return now + rnd_upto(s, 2 * gap);
    }
}

/* Mostly 1, sometimes 0, sometimes big, sometimes more than fits. */
static int64_t
next_cost(uint64_t *s, const struct dpolicy *p)
{
    const struct rl_limit *l = &p->l[rnd(s) % p->n].lim;
    int64_t cap = algo_def(l->algo)->uses_burst ? l->burst : l->limit;

    switch (rnd(s) % 20) {
    case 0: case 1: return 0;
    case 2: return cap + 1 + rnd_upto(s, 2);
    case 3: case 4: return 1 + rnd_upto(s, cap - 1);
    case 5: case 6: return 1 + rnd_upto(s, cap / 3);
    default: return 1;
    }
}

/* A charge's cost: the limit's capacity over again, a budget's whole
 * size, or past what may be owed (held at algo_owed_max / ALGO_UNITS_MAX). */
static int64_t
next_charge(uint64_t *s, const struct dpolicy *p)
{
    const struct rl_limit *l = &p->l[rnd(s) % p->n].lim;
    int64_t cap = algo_def(l->algo)->uses_burst ? l->burst : l->limit;

    switch (rnd(s) % 10) {
    case 0: return 0;
    case 1: return RL_COST_MAX;
    case 2: case 3: return cap + 1 + rnd_upto(s, (RL_COST_MAX - cap - 1 < 3 * cap ? RL_COST_MAX - cap - 1 : 3 * cap));
    case 4: return 1 + rnd_upto(s, RL_COST_MAX - 1);
    default: return 1 + rnd_upto(s, cap);
    }
}

/* Now and then an admin operation instead: give back (alone or with a
 * reset), reset one limit or all, block for a while or lift the block. */
static void
next_admin(uint64_t *s, struct dpolicy *p, int64_t *cost, int *how)
{
    int64_t w = algo_window_ms(&p->l[rnd(s) % p->n].lim, T0);

    switch (rnd(s) % 40) {
    case 0: case 1: case 2:
        *cost = -1 - next_cost(s, p);
        break;
    case 3:
        *cost = -1 - next_cost(s, p);
        /* fall through */
    case 4:
        *how |= DP_RESET;
        p->reset_index = rnd_upto(s, (int64_t)p->n) - 1;
        break;
    case 5:
        *how |= DP_BLOCK;
        p->block_ms = 1 + rnd_upto(s, w / 2);
        break;
    case 6:
        *how |= DP_BLOCK;
        p->block_ms = 0;
        break;
    default:
        return;
    }
    if (*cost > 0)
        *cost = 0;
}

static void
drive(struct dpolicy *p, uint64_t seed, int steps, const char *what)
{
    int64_t now = T0 + (int64_t)(seed % 1000003) * 997;
    char where[200];

    for (int n = 0; n < steps; n++) {
        int64_t cost;
        int how = 0;

        now = next_time(&seed, now, p);
        cost = next_cost(&seed, p);
        if (rnd(&seed) % 25 == 0)
            how |= DP_PERSIST;
        if (rnd(&seed) % 8 == 0)
            how |= DP_FORCE;
        next_admin(&seed, p, &cost, &how);
        /* a charge, never with an admin operation (the script refuses) */
        if (rnd(&seed) % 9 == 0 && !(how & (DP_RESET | DP_BLOCK)) && cost >= 0) {
            how = (how & DP_PERSIST) | DP_CHARGE;
            cost = next_charge(&seed, p);
        }
        snprintf(where, sizeof(where), "%s step %d", what, n);
        dp_step(p, now, cost, how, where);
    }
}

/* ---- the tests ------------------------------------------------------------ */

START_TEST(script_is_the_embedded_one_and_reads_redis_time)
{
    redisReply *r;

    /* setup() loaded it and compared the SHA1; the daemon's own path: no
     * explicit time, Redis TIME */
    r = redisCommand(rc, "EVALSHA %s 2 {t:x}:gcra:1000 {t:x}:swl:1000 %s 1 %s 1 {t:x}:block",
                     rl_lua_check_sha, "", "gcra 5 1000 5 swl 5 1000 5");
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 7, "%s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    ck_assert_int_eq(r->element[0]->integer, 1);
    ck_assert_int_eq(r->element[1]->integer, 4);    /* gcra remaining */
    ck_assert_int_eq(r->element[4]->integer, 4);    /* swl remaining */
    freeReplyObject(r);
}
END_TEST

static const struct {
    int64_t limit, window_ms, burst;
} shapes[] = {
    {5, 1000, 5}, {3, 1000, 7}, {100, 60000, 100}, {7, 10, 2}, {10, 250, 10},
    {1000, 1000, 1000}, {1000000000, DAY_MS, 1000000000},
    {1000000000, DAY_MS, 300000000}, {2, 366 * DAY_MS, 3},
    /* intmath's paths: products past 2^53 split for divisors up to 2^31
     * (exactly 2^31 included), 5-bit digits past it */
    {1000000000, 60000, 1000000000}, {999999937, 366 * DAY_MS, 999999937},
    {2147483648LL, 3600000, 1234567891}, {2147483649LL, 7 * DAY_MS, 2147483649LL},
    {123456789, 366 * DAY_MS, 1000000000},
    /* budgets (issue 29): 10^15 a minute (divisors past 2^47: intmath's
     * bit-wise path) and 2e9 micro-dollars a month */
    {1000000000000000LL, 60000, 1000000000000000LL},
    {2000000000, 31 * DAY_MS, 2000000000}, {1000000000000000LL, 1000, 999999999999999LL},
};

/* _i: an algorithm, or RL_ALGO_COUNT for fixed_window aligned to the epoch */
static enum rl_algo
algo_of(int i, enum rl_align *align)
{
    *align = i == RL_ALGO_COUNT ? RL_ALIGN_EPOCH : RL_ALIGN_FIRST;
    return i == RL_ALGO_COUNT ? RL_ALGO_FIXED_WINDOW : (enum rl_algo)i;
}

static const char *
algo_label(int i)
{
    return i == RL_ALGO_COUNT ? "fixed_window aligned" : algo_def((enum rl_algo)i)->name;
}

START_TEST(each_algorithm_matches_its_twin)
{
    enum rl_align align;
    enum rl_algo algo = algo_of(_i, &align);

    for (size_t k = 0; k < RL_ARRAY_LEN(shapes); k++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct dpolicy p = {0};
            char id[64], what[96];

            snprintf(id, sizeof(id), "one:%d:%zu:%" PRIu64, _i, k, seed);
            snprintf(what, sizeof(what), "%s shape %zu seed %" PRIu64,
                     algo_label(_i), k, seed);
            dp_add(&p, id, algo, shapes[k].limit, shapes[k].window_ms,
                   shapes[k].burst);
            if (align == RL_ALIGN_EPOCH)
                dp_align_last(&p);
            drive(&p, seed * 7919 + k * 31 + (uint64_t)_i, 160, what);
            dp_free(&p);
        }
    }
}
END_TEST

/* Random times rarely land on a boundary: visit them on purpose. */
START_TEST(each_algorithm_matches_on_its_boundaries)
{
    enum rl_align align;
    enum rl_algo algo = algo_of(_i, &align);

    for (size_t k = 0; k < RL_ARRAY_LEN(shapes); k++) {
        struct dpolicy p = {0};
        int64_t W = shapes[k].window_ms * MS, gap, t;
        int64_t cap;
        char id[64], what[96];

        snprintf(id, sizeof(id), "edge:%d:%zu", _i, k);
        snprintf(what, sizeof(what), "%s shape %zu", algo_label(_i), k);
        dp_add(&p, id, algo, shapes[k].limit, shapes[k].window_ms,
               shapes[k].burst);
        if (align == RL_ALIGN_EPOCH)
            dp_align_last(&p);
        cap = algo_def(algo)->uses_burst ? p.l[0].lim.burst : p.l[0].lim.limit;
        gap = W / p.l[0].lim.limit;
        /* epoch-aligned, so window edges of the counter are hit too */
        t = (T0 / W + 1) * W;
        dp_step(&p, t, cap > 3 ? cap - 3 : 1, 0, what);
        dp_step(&p, t + 1, 2, 0, what);
        for (int64_t j = 1; j <= 12; j++) {
            for (int64_t d = -1; d <= 1; d++) {
                dp_step(&p, t + j * gap + d, 1, 0, what);
                dp_step(&p, t + j * gap + d, 2, 0, what);
            }
        }
        for (int64_t j = 1; j <= 3; j++)
            for (int64_t d = -1; d <= 1; d++)
                dp_step(&p, t + j * W + d, j == 2 ? cap : 1, 0, what);
        /* forced past the limit (and, for the log, past `limit` entries),
         * then the way back, around the same boundaries */
        t += 4 * W;
        dp_step(&p, t, cap, DP_FORCE, what);
        dp_step(&p, t + 1, cap + 2, DP_FORCE, what);
        for (int64_t j = 0; j < 3; j++)
            dp_step(&p, t + 2, 1, DP_FORCE, what);
        for (int64_t j = 1; j <= 12; j++)
            for (int64_t d = -1; d <= 1; d++)
                dp_step(&p, t + j * gap + d, 1, 0, what);
        for (int64_t j = 1; j <= 4; j++)
            for (int64_t d = -1; d <= 1; d++)
                dp_step(&p, t + j * W + d, 1, 0, what);
        dp_free(&p);
    }
}
END_TEST

/* The twin's answer to a check of cost 0 at now (Lua's is compared by
 * dp_step: the same). */
static struct rl_limit_result
twin_peek(const struct dpolicy *p, size_t i, int64_t now)
{
    struct rl_limit_result r;

    algo_def(p->l[i].lim.algo)->peek(&p->l[i].lim, &p->l[i].st, now, 0, &r);
    return r;
}

/*
 * Charges past the limit, every algorithm: the overdraft each keeps and
 * how it is paid back, number for number in both, then charges past what
 * may be owed (held at ALGO_UNITS_MAX / algo_owed_max).
 */
START_TEST(charges_match_and_pay_back)
{
    static const struct {
        int64_t limit, window_ms, burst;
    } cs[] = {
        {5, 1000, 5}, {1000, 60000, 1000}, {1000000000000000LL, 60000, 1000000000000000LL},
        {2000000000, 31 * DAY_MS, 2000000000}, {1, 366 * DAY_MS, 1}, {3, 1000, 7},
    };
    enum rl_align align;
    enum rl_algo algo = algo_of(_i, &align);

    for (size_t k = 0; k < RL_ARRAY_LEN(cs); k++) {
        struct dpolicy p = {0};
        int64_t W = cs[k].window_ms * MS, t = (T0 / W + 1) * W, cap;
        char id[64], what[96];

        snprintf(id, sizeof(id), "charge:%d:%zu", _i, k);
        snprintf(what, sizeof(what), "%s charges shape %zu", algo_label(_i), k);
        dp_add(&p, id, algo, cs[k].limit, cs[k].window_ms, cs[k].burst);
        if (align == RL_ALIGN_EPOCH)
            dp_align_last(&p);
        cap = algo_def(algo)->uses_burst ? p.l[0].lim.burst : p.l[0].lim.limit;
        int64_t c = cap < RL_COST_MAX / 4 ? 3 * cap + 7 : RL_COST_MAX;
        dp_step(&p, t, c, DP_CHARGE, what);
        if (algo != RL_ALGO_CONCURRENCY) {
            struct rl_limit_result r = twin_peek(&p, 0, t);
            int64_t over = c - cap;

            /* a bucket is owed c tokens, of which c - burst past empty */
            ck_assert_msg(r.overdraft == over && r.remaining == 0 && r.allowed == (over == 0),
                          "%s: overdraft %lld, want %lld", what, (long long)r.overdraft,
                          (long long)over);
            if (algo == RL_ALGO_FIXED_WINDOW && over > 0)
                ck_assert_int_eq(r.retry_after_ms, cs[k].window_ms);
            if ((algo == RL_ALGO_TOKEN_BUCKET || algo == RL_ALGO_GCRA) && over > 0) {
                /* D - burst tokens at limit per window, exactly */
                int64_t rem, q = algo_muldiv(over, W, p.l[0].lim.limit, &rem);
                ck_assert_int_eq(r.retry_after_ms, ceil_ms(q + (rem > 0)));
            }
        }
        /* the way back: asks and checks over two windows */
        for (int64_t j = 1; j <= 16; j++) {
            dp_step(&p, t + j * W / 8 - 1, 0, 0, what);
            dp_step(&p, t + j * W / 8, 1, 0, what);
        }
        /* a charge into a caller already over (the log: joins its newest
         * entry), then past what may be owed */
        dp_step(&p, t + 2 * W, c, DP_CHARGE, what);
        dp_step(&p, t + 2 * W + 1, c, DP_CHARGE, what);
        for (int j = 0; j < 4; j++)
            dp_step(&p, t + 2 * W + 2, RL_COST_MAX, DP_CHARGE, what);
        if (algo != RL_ALGO_CONCURRENCY) {
            struct rl_limit_result r = twin_peek(&p, 0, t + 2 * W + 2);
            ck_assert_msg(r.overdraft > 0 && r.overdraft <= ALGO_UNITS_MAX, "%s: %lld", what,
                          (long long)r.overdraft);
        }
        for (int64_t j = 1; j <= 8; j++)
            dp_step(&p, t + 2 * W + 2 + j * W / 2, 0, 0, what);
        /* a charge of 0 counts nothing, during a block too */
        p.block_ms = 5;
        dp_step(&p, t + 9 * W, 0, DP_BLOCK, what);
        dp_step(&p, t + 9 * W + 1, c, DP_CHARGE, what);
        dp_step(&p, t + 9 * W + 2, 0, DP_CHARGE, what);
        dp_free(&p);
    }
}
END_TEST

/* The claim of an estimate (reservation.h's shape; the hash is the test's). */
static void
dp_claim(struct dpolicy *p, int64_t estimate, unsigned h)
{
    snprintf(p->claim, sizeof(p->claim), "%lld.0000%08x", (long long)estimate, h);
    snprintf(p->rsv_key, sizeof(p->rsv_key), "0123456789abcdef0123456789abcdef.%s", p->claim);
}

/*
 * Reserve and settle (flags 'v' and 's'; backend_memory.c's op_record and
 * op_settle): every algorithm, alone and next to a concurrency limit, a
 * budget of 10^15 too.  A settle for less gives back, for more charges past
 * the limit, of 0 gives the whole estimate back; a second settle, a forged
 * claim (another estimate) and one past the deadline settle nothing; then
 * random reservations, settles and checks, every number compared.
 */
START_TEST(reserve_and_settle_match)
{
    static const struct {
        int64_t limit, window_ms, burst;
    } cs[] = {{10, 1000, 10}, {1000, 60000, 1000}, {RL_COST_MAX, 60000, RL_COST_MAX}};
    enum rl_align align;
    enum rl_algo algo = algo_of(_i, &align);

    for (size_t k = 0; k < 2 * RL_ARRAY_LEN(cs); k++) {
        struct dpolicy p = {0};
        size_t c = k % RL_ARRAY_LEN(cs);
        int64_t W = cs[c].window_ms * MS, t = (T0 / W + 1) * W, cap, est, big;
        uint64_t seed = 0x5e77 + k * 131 + (uint64_t)_i;
        char id[64], what[96];

        snprintf(id, sizeof(id), "rsv:%d:%zu", _i, k);
        snprintf(what, sizeof(what), "%s reserve/settle shape %zu", algo_label(_i), k);
        dp_add(&p, id, algo, cs[c].limit, cs[c].window_ms, cs[c].burst);
        if (align == RL_ALIGN_EPOCH)
            dp_align_last(&p);
        /* next to a concurrency limit: it holds the slot, settles pass it */
        if (k >= RL_ARRAY_LEN(cs) && algo != RL_ALGO_CONCURRENCY)
            dp_add(&p, id, RL_ALGO_CONCURRENCY, 3, 5000, 0);
        snprintf(p.rsv_base, sizeof(p.rsv_base), "{diff:%s}:rsv",
                 id);
        p.rsv_ttl_ms = 2000;
        cap = algo_def(algo)->uses_burst ? p.l[0].lim.burst : p.l[0].lim.limit;
        est = cap / 2 > 0 ? cap / 2 : 1;
        big = cap < RL_COST_MAX / 4 ? 3 * cap + 7 : RL_COST_MAX;

        /* less: given back; twice: nothing */
        dp_claim(&p, est, 1);
        dp_step(&p, t, est, DP_RESERVE, what);
        ck_assert_int_eq(p.last, 1);
        dp_step(&p, t + 1, est / 3, DP_SETTLE, what);
        ck_assert_int_eq(p.last, 1);
        dp_step(&p, t + 2, est / 3, DP_SETTLE, what);
        ck_assert_int_eq(p.last, 3);
        /* a forged claim (a larger estimate) finds nothing, the real one
         * settles for more: charged past the limit */
        dp_claim(&p, est, 2);
        dp_step(&p, t + 3, est, DP_RESERVE, what);
        dp_claim(&p, est + 1, 2);
        dp_step(&p, t + 4, 0, DP_SETTLE, what);
        ck_assert_int_eq(p.last, 3);
        dp_claim(&p, est, 2);
        dp_step(&p, t + 5, big, DP_SETTLE, what);
        ck_assert_int_ne(p.last, 3);
        /* windows later: settled for 0, the whole estimate back */
        t += 10 * W;
        dp_claim(&p, est, 3);
        dp_step(&p, t, est, DP_RESERVE, what);
        dp_step(&p, t + 1, 0, DP_SETTLE, what);
        /* past the deadline: expired (4), then gone (3), its estimate kept */
        dp_claim(&p, est, 4);
        dp_step(&p, t + 2, est, DP_RESERVE, what);
        ck_assert_int_eq(p.last, 1);
        dp_step(&p, t + 2 + p.rsv_ttl_ms * MS, 0, DP_SETTLE, what);
        ck_assert_int_eq(p.last, 4);
        dp_step(&p, t + 3 + p.rsv_ttl_ms * MS, 0, DP_SETTLE, what);
        ck_assert_int_eq(p.last, 3);
        /* random reservations, settles, forged settles and checks */
        for (int n = 0; n < 150; n++) {
            int64_t now = next_time(&seed, t, &p);
            char where[160];

            t = now > t ? now : t;
            snprintf(where, sizeof(where), "%s step %d", what, n);
            switch (rnd(&seed) % 5) {
            case 0:
                dp_claim(&p, next_cost(&seed, &p) + 1, (unsigned)n);
                dp_step(&p, now, strtoll(p.claim, NULL, 10), DP_RESERVE, where);
                break;
            case 1:
                dp_step(&p, now, next_charge(&seed, &p), DP_SETTLE, where);
                break;
            case 2:
                dp_step(&p, now, rnd_upto(&seed, est), DP_SETTLE, where);
                break;
            case 3: {
                char keep[64];

                memcpy(keep, p.claim, sizeof(keep));
                dp_claim(&p, strtoll(keep, NULL, 10) + 1, (unsigned)n);
                dp_step(&p, now, 0, DP_SETTLE, where);
                ck_assert_int_eq(p.last, 3);
                dp_claim(&p, strtoll(keep, NULL, 10), (unsigned)strtoul(strchr(keep, '.') + 1,
                                                                        NULL, 16));
                break;
            }
            default:
                dp_step(&p, now, next_cost(&seed, &p), 0, where);
                break;
            }
        }
        dp_free(&p);
    }
}
END_TEST

START_TEST(mixed_policies_match_and_stay_atomic)
{
    for (uint64_t seed = 1; seed <= 12; seed++) {
        struct dpolicy p = {0};
        uint64_t s = seed * 104729;
        size_t n = 2 + rnd(&s) % 4;
        char id[32], what[64];

        snprintf(id, sizeof(id), "mix:%" PRIu64, seed);
        snprintf(what, sizeof(what), "mixed seed %" PRIu64, seed);
        while (p.n < n) {
            enum rl_align align;
            enum rl_algo a = algo_of((int)(rnd(&s) % (RL_ALGO_COUNT + 1)), &align);
            size_t k = rnd(&s) % RL_ARRAY_LEN(shapes);
            int dup = 0;

            /* config.c refuses two limits with one algorithm and window
             * (aligned or not: they would share one key) */
            for (size_t i = 0; i < p.n; i++)
                dup |= p.l[i].lim.algo == a &&
                       p.l[i].lim.window_ms == shapes[k].window_ms;
            if (dup)
                continue;
            dp_add(&p, id, a, shapes[k].limit, shapes[k].window_ms, shapes[k].burst);
            if (align == RL_ALIGN_EPOCH)
                dp_align_last(&p);
        }
        drive(&p, s, 250, what);
        dp_free(&p);
    }
}
END_TEST

/*
 * An aligned window opens on the multiple of its length since the epoch,
 * whenever the first check comes: the numbers themselves, not only C and
 * Lua agreeing.  Units as envoyproxy/ratelimit divides time: a week starts
 * on a Thursday (the epoch's weekday), a month is 30 days and a year 365,
 * all counted from 1970-01-01T00:00:00Z.
 */
START_TEST(aligned_window_opens_on_the_epoch_multiple)
{
    static const struct {
        int64_t window_ms;
        int64_t now_s;     /* the first check */
        int64_t reset_ms;  /* what it must answer */
    } cases[] = {
        {1000, 1700000000, 1000},
        {60000, 1699999997, 43000},              /* 17 s into a minute */
        {3600000, 1700000000, 2800000},          /* 1700000000 % 3600 = 800 */
        {86400000, 1700000000, 6400000},         /* % 86400 = 80000 */
        {7 * 86400000LL, 1700000000, 92800000},  /* % 604800 = 512000, from a Thursday */
        {30 * 86400000LL, 1700000000, 352000000},      /* % 2592000 = 2240000 */
        {365 * 86400000LL, 1700000000, 2944000000LL},  /* % 31536000 = 28592000 */
    };

    for (size_t k = 0; k < RL_ARRAY_LEN(cases); k++) {
        struct dpolicy p = {0};
        char id[32], what[64];
        int64_t now = cases[k].now_s * 1000000 + 250000; /* and a quarter second */
        int64_t W = cases[k].window_ms * MS;
        int64_t start = now - now % W;
        redisReply *r;

        snprintf(id, sizeof(id), "align:%zu", k);
        snprintf(what, sizeof(what), "aligned %lld ms", (long long)cases[k].window_ms);
        dp_add(&p, id, RL_ALGO_FIXED_WINDOW, 3, cases[k].window_ms, 0);
        dp_align_last(&p);
        r = dp_redis(&p, now, 1, 0, what, &(int64_t){0});
        ck_assert_int_eq(r->element[0]->element[0]->integer, 1);
        ck_assert_int_eq(r->element[0]->element[1]->integer, 2);
        ck_assert_msg(r->element[0]->element[2]->integer == cases[k].reset_ms - 250,
                      "%s: reset_ms %lld, want %lld", what,
                      r->element[0]->element[2]->integer, (long long)cases[k].reset_ms - 250);
        freeReplyObject(r);
        /* the twin follows the same steps from here on */
        {
            struct rl_limit_result cr;
            algo_def(RL_ALGO_FIXED_WINDOW)->commit(&p.l[0].lim, &p.l[0].st, now, 1, &cr);
            ck_assert_int_eq(cr.reset_ms, cases[k].reset_ms - 250);
        }
        /* the last microsecond of the window still counts in it; the next
         * one is a new window, whole again */
        dp_step(&p, start + W - 1, 2, 0, what);
        ck_assert_int_eq(dp_step(&p, start + W - 1, 1, 0, what), 0);
        ck_assert_int_eq(dp_step(&p, start + W, 3, 0, what), 1);
        ck_assert_int_eq(dp_step(&p, start + W + 1, 1, 0, what), 0);
        dp_free(&p);
    }
}
END_TEST

START_TEST(log_entries_in_one_microsecond_are_all_kept)
{
    struct dpolicy p = {0};
    redisReply *r;
    int allowed = 0;

    dp_add(&p, "same-us", RL_ALGO_SLIDING_WINDOW_LOG, 150, 1000, 0);
    for (int k = 0; k < 200; k++)
        allowed += dp_step(&p, T0, 1, 0, "same microsecond");
    ck_assert_int_eq(allowed, 150);
    r = redisCommand(rc, "ZCARD %s", p.l[0].key);
    ck_assert_int_eq(r->integer, 150);
    freeReplyObject(r);
    /* and each counts its cost units */
    ck_assert(!dp_step(&p, T0 + 1000 * MS - 1, 1, 0, "edge"));
    ck_assert(dp_step(&p, T0 + 1000 * MS, 150, 0, "all gone"));
    ck_assert(!dp_step(&p, T0 + 1000 * MS, 1, 0, "full again"));
    r = redisCommand(rc, "ZCARD %s", p.l[0].key);
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    dp_free(&p);
}
END_TEST

/* A sliding log member, "cum:cost": cum and cost as big-endian doubles
 * (scripts/lua/sliding_window_log.lua), printed as the text layout of 0.1
 * was, so that expectations read alike. */
static const char *
log_member(const redisReply *e)
{
    static char out[64];
    double v[2];

    ck_assert_msg(e->type == REDIS_REPLY_STRING && e->len == 16, "a packed member");
    for (size_t i = 0; i < 2; i++) {
        uint64_t u = 0;

        for (size_t b = 0; b < 8; b++)
            u = u << 8 | (unsigned char)e->str[i * 8 + b];
        memcpy(&v[i], &u, sizeof(v[i]));
    }
    snprintf(out, sizeof(out), "%016.0f:%.0f", v[0], v[1]);
    return out;
}

START_TEST(log_forced_keeps_the_newest_limit_members)
{
    struct dpolicy p = {0};
    redisReply *r;

    dp_add(&p, "forced-log", RL_ALGO_SLIDING_WINDOW_LOG, 5, 1000, 0);
    for (int k = 0; k < 20; k++)
        dp_step(&p, T0 + k * MS, 1 + k % 3, DP_FORCE, "forced");
    r = redisCommand(rc, "ZRANGE %s 0 -1", p.l[0].key);
    ck_assert_uint_eq(r->elements, 5);
    ck_assert_uint_eq(p.l[0].st.ring_len, 5);
    /* the newest five: checks 15..19 of costs 1, 2, 3, 1, 2 */
    ck_assert_str_eq(log_member(r->element[0]), "0000000000000031:1");
    ck_assert_str_eq(log_member(r->element[4]), "0000000000000039:2");
    freeReplyObject(r);
    ck_assert(!dp_step(&p, T0 + 1014 * MS, 1, 0, "all 9 still count"));
    ck_assert(dp_step(&p, T0 + 1018 * MS, 1, 0, "only the last (2 units) is left"));
    dp_free(&p);
}
END_TEST

START_TEST(log_rebases_before_its_running_total_loses_precision)
{
    struct dpolicy p = {0};
    redisReply *r;
    /* 2^52 = 4503599627370496: the running total is 3 short of it; the
     * members in the text layout of 0.1, which the script reads and
     * rewrites packed */
    const char *expect[] = { "0000000000000002:2", "0000000000000005:3",
                             "0000000000000009:4" };

    dp_add(&p, "rebase", RL_ALGO_SLIDING_WINDOW_LOG, 10, 1000, 0);
    r = redisCommand(rc, "ZADD %s %lld 4503599627370490:2 %lld 4503599627370493:3",
                     p.l[0].key, (long long)T0, (long long)(T0 + MS));
    ck_assert_int_eq(r->integer, 2);
    freeReplyObject(r);
    r = redisCommand(rc, "PEXPIRE %s 100000", p.l[0].key);
    freeReplyObject(r);
    algo_def(p.l[0].lim.algo)->commit(&p.l[0].lim, &p.l[0].st, T0, 2,
                                      &(struct rl_limit_result){0});
    algo_def(p.l[0].lim.algo)->commit(&p.l[0].lim, &p.l[0].st, T0 + MS, 3,
                                      &(struct rl_limit_result){0});

    ck_assert(dp_step(&p, T0 + 2 * MS, 4, 0, "rebase"));
    r = redisCommand(rc, "ZRANGE %s 0 -1", p.l[0].key);
    ck_assert_uint_eq(r->elements, 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_str_eq(log_member(r->element[i]), expect[i]);
    freeReplyObject(r);
    ck_assert(!dp_step(&p, T0 + 3 * MS, 2, 0, "after rebase"));
    ck_assert(dp_step(&p, T0 + 1000 * MS, 2, 0, "first left"));
    drive(&p, 99, 200, "after rebase");
    dp_free(&p);
}
END_TEST

/* The script's bound on the expired members one check drops
 * (scripts/lua/sliding_window_log.lua, SWL_DROP_MAX). */
#define SWL_DROP_MAX 1000

static long long
zcard(const char *key)
{
    redisReply *r = redisCommand(rc, "ZCARD %s", key);
    long long n;

    ck_assert_ptr_nonnull(r);
    n = r->integer;
    freeReplyObject(r);
    return n;
}

/*
 * `n` entries of cost 1 logged `gap_us` apart from `t`, in Redis (one ZADD
 * of members in the text layout, which the script reads) and in the twin.
 */
static void
log_fill(struct dpolicy *p, int64_t t, int n, int64_t gap_us)
{
    struct dlimit *d = &p->l[0];
    size_t argc = 2 + 2 * (size_t)n;
    const char **argv = calloc(argc, sizeof(*argv));
    char (*nums)[2][32] = calloc((size_t)n, sizeof(*nums));
    long long before = zcard(d->key);
    redisReply *r;

    argv[0] = "ZADD";
    argv[1] = d->key;
    for (int i = 0; i < n; i++) {
        snprintf(nums[i][0], sizeof(nums[i][0]), "%lld", (long long)(t + i * gap_us));
        snprintf(nums[i][1], sizeof(nums[i][1]), "%lld:1", before + i + 1);
        argv[2 + 2 * i] = nums[i][0];
        argv[3 + 2 * i] = nums[i][1];
        algo_def(d->lim.algo)->commit(&d->lim, &d->st, t + i * gap_us, 1,
                                      &(struct rl_limit_result){0});
    }
    r = redisCommandArgv(rc, (int)argc, argv, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->integer, n);
    freeReplyObject(r);
    r = redisCommand(rc, "PEXPIRE %s 1000000000", d->key);
    freeReplyObject(r);
    free(nums);
    free(argv);
}

/*
 * Issue 24: a check drops at most SWL_DROP_MAX of the members that have
 * left the window (the rest with later checks), and the numbers stay the
 * C twin's (which drops them all) whatever is left behind: a whole log
 * expired at once, half of it, and random steps over a key with a backlog.
 */
START_TEST(log_drops_a_bounded_number_of_expired_entries)
{
    struct dpolicy p = {0};
    const int n = 3 * SWL_DROP_MAX;
    int64_t now = T0 + 2000 * MS;

    dp_add(&p, "backlog", RL_ALGO_SLIDING_WINDOW_LOG, n, 1000, 0);
    log_fill(&p, T0, n, 300); /* 0.9 s of entries */
    ck_assert_int_eq(zcard(p.l[0].key), n);
    /* all expired: each check logs one and drops SWL_DROP_MAX */
    for (int k = 1; k <= 3; k++) {
        ck_assert(dp_step(&p, now, 1, 0, "whole log expired"));
        ck_assert_int_eq(zcard(p.l[0].key), n - k * SWL_DROP_MAX + k);
    }
    /* the last of the backlog: the key holds only live entries again */
    ck_assert(dp_step(&p, now, 1, 0, "backlog's end"));
    ck_assert_int_eq(zcard(p.l[0].key), 4);
    /* half of a full log expired; a denial's retry is read past the backlog */
    dp_free(&p);
    memset(&p, 0, sizeof(p));
    dp_add(&p, "half", RL_ALGO_SLIDING_WINDOW_LOG, n, 1000, 0);
    log_fill(&p, T0, n, 300);
    ck_assert(!dp_step(&p, T0 + 1450 * MS, n, 0, "half left, all asked"));
    ck_assert(dp_step(&p, T0 + 1450 * MS, n / 3, 0, "half left"));
    ck_assert_int_eq(zcard(p.l[0].key), n - SWL_DROP_MAX + 1);
    drive(&p, 24, 300, "after half expired");
    /* forced over the limit with a backlog: the live ones stay `limit` */
    dp_free(&p);
    memset(&p, 0, sizeof(p));
    dp_add(&p, "forced-backlog", RL_ALGO_SLIDING_WINDOW_LOG, SWL_DROP_MAX, 1000, 0);
    log_fill(&p, T0, 2 * SWL_DROP_MAX, 100);
    for (int k = 0; k < 20; k++)
        dp_step(&p, T0 + 1100 * MS + k * MS, 1 + k % 3, DP_FORCE, "forced over a backlog");
    drive(&p, 2424, 300, "after forced over a backlog");
    dp_free(&p);
}
END_TEST

START_TEST(a_removed_ttl_is_put_back)
{
    for (int a = 0; a < RL_ALGO_COUNT; a++) {
        struct dpolicy p = {0};
        char id[32];
        int64_t W = 60000 * MS;

        snprintf(id, sizeof(id), "persist:%d", a);
        /* concurrency: one slot, so that the held one denies below */
        dp_add(&p, id, (enum rl_algo)a, a == RL_ALGO_CONCURRENCY ? 1 : 10, 60000, 10);
        ck_assert(dp_step(&p, T0, 3, 0, "commit"));
        ck_assert(dp_step(&p, T0 + MS, 0, DP_PERSIST, "persist"));
        /* while the state matters: the exact TTL again (dp_step checks) */
        ck_assert(dp_step(&p, T0 + 2 * MS, 0, 0, "repaired"));
        ck_assert_int_gt(p.pttl[0], 0);
        ck_assert_int_le(p.pttl[0], 2 * 60000);     /* swc: up to 2 windows */
        /* a denied check repairs too */
        ck_assert(dp_step(&p, T0 + 3 * MS, 0, DP_PERSIST, "persist"));
        ck_assert(!dp_step(&p, T0 + 4 * MS, 11, 0, "denied"));
        ck_assert_int_gt(p.pttl[0], 0);
        /* long after: the state is worthless, the key must still go */
        ck_assert(dp_step(&p, T0 + 10 * W, 0, DP_PERSIST, "persist"));
        dp_step(&p, T0 + 10 * W + 1, 0, 0, "worthless");
        ck_assert_msg(p.pttl[0] == -2 || (p.pttl[0] >= 0 && p.pttl[0] <= 1),
                      "%s: PTTL %lld", algo_def((enum rl_algo)a)->name,
                      p.pttl[0]);
        dp_free(&p);
    }
}
END_TEST

/*
 * Leases through the script and through C side by side: checks that take a
 * lease (with a rate limit beside, so that a denial by either takes nothing
 * from the other), releases of held, released, ended and never-given leases,
 * time that jumps past leases' ends and steps back, resets and rewards: the
 * decision, every number and `released` compared at every step.
 */
START_TEST(leases_releases_and_expiries_match)
{
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct dpolicy p = {0};
        struct rl_lease held[64];
        size_t nheld = 0;
        int64_t now = T0 + (int64_t)seed * 7919, lease_ms = 200 + 300 * (int64_t)(seed % 3);
        char id[32], where[160];

        snprintf(id, sizeof(id), "lease:%llu", (unsigned long long)seed);
        dp_add(&p, id, RL_ALGO_CONCURRENCY, 1 + (int64_t)(seed % 4), lease_ms, 0);
        if (seed % 2 == 0)
            dp_add(&p, id, RL_ALGO_FIXED_WINDOW, 5, 1000, 0);
        for (int n = 0; n < 400; n++) {
            int how = 0;
            int64_t cost = 1;
            uint64_t r = rnd(&seed) % 20;

            if (r < 2)
                now += rnd_upto(&seed, 2 * lease_ms * MS);
            else if (r < 3)
                now -= rnd_upto(&seed, 50 * MS);
            else
                now += rnd_upto(&seed, lease_ms * MS / 8);
            r = rnd(&seed) % 20;
            if (r < 8 && nheld > 0) {
                /* a lease given before: held, released already, or ended */
                how = DP_RELEASE;
                p.lease = held[rnd(&seed) % nheld];
                cost = 0;
            } else if (r < 9) {
                how = DP_RELEASE; /* never given */
                lease_draw(&p.lease);
                cost = 0;
            } else if (r < 10) {
                cost = 0; /* asks only */
            } else if (r < 11) {
                cost = -1; /* a reward: the newest slot back */
            } else if (r < 12) {
                how = DP_RESET;
                p.reset_index = -1;
                cost = 0;
            } else {
                how = DP_LEASE;
                lease_draw(&p.lease);
                cost = 1 + (int64_t)(rnd(&seed) % 3);
            }
            snprintf(where, sizeof(where), "%s step %d", id, n);
            if (dp_step(&p, now, cost, how, where) && (how & DP_LEASE))
                held[nheld++ % RL_ARRAY_LEN(held)] = p.lease;
            if (nheld > RL_ARRAY_LEN(held))
                nheld = RL_ARRAY_LEN(held);
        }
        dp_free(&p);
    }
}
END_TEST

/*
 * Reservations (max_delay): token_bucket and gcra, alone and together, a
 * burst of checks of which those that fit within max_delay are reserved
 * (2) and the rest denied, mixed with time that passes, blocks, rewards
 * and resets: the decision and every number compared at every step.
 */
START_TEST(reservations_match)
{
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct dpolicy p = {0};
        int64_t now = T0 + (int64_t)seed * 104729, reserved = 0;
        char id[32], where[160];

        snprintf(id, sizeof(id), "delay:%llu", (unsigned long long)seed);
        dp_add(&p, id, seed % 2 ? RL_ALGO_TOKEN_BUCKET : RL_ALGO_GCRA, 10, 1000,
               (int64_t)(seed % 4) + 1);
        if (seed % 3 == 0)
            dp_add(&p, id, seed % 2 ? RL_ALGO_GCRA : RL_ALGO_TOKEN_BUCKET, 3, 500, 3);
        /* slots beside the bucket: a reservation holds one, never waits
         * for one */
        if (seed % 4 == 1)
            dp_add(&p, id, RL_ALGO_CONCURRENCY, 2, 300, 0);
        /* past the time the bucket takes to refill: a debt of more than
         * one burst, carried exactly */
        p.max_delay_ms = 100 + (int64_t)(rnd(&seed) % 2000);
        for (int n = 0; n < 300; n++) {
            int how = DP_DELAY;
            int64_t cost = 1 + (int64_t)(rnd(&seed) % 2);
            uint64_t r = rnd(&seed) % 20;

            if (r < 3)
                now += rnd_upto(&seed, 300 * MS);
            else if (r < 4)
                now -= rnd_upto(&seed, 5 * MS);
            else if (r < 12)
                now += rnd_upto(&seed, 10 * MS);
            r = rnd(&seed) % 40;
            if (r == 0) {
                how = DP_BLOCK;
                p.block_ms = 1 + (int64_t)(rnd(&seed) % 200);
                cost = 0;
            } else if (r == 1) {
                cost = -1;
                how = 0;
            } else if (r == 2) {
                how = DP_RESET;
                p.reset_index = -1;
                cost = 0;
            }
            snprintf(where, sizeof(where), "%s step %d", id, n);
            dp_step(&p, now, cost, how, where);
            reserved += p.last == 2;
        }
        ck_assert_msg(reserved > 0, "%s: no check was reserved", id);
        dp_free(&p);
    }
}
END_TEST

/* A slot given back twice is given back once; an ended lease is not held. */
START_TEST(release_twice_and_after_the_end)
{
    struct dpolicy p = {0};
    struct rl_lease a, b;

    dp_add(&p, "twice", RL_ALGO_CONCURRENCY, 2, 1000, 0);
    lease_draw(&a);
    lease_draw(&b);
    p.lease = a;
    ck_assert(dp_step(&p, T0, 1, DP_LEASE, "take a"));
    p.lease = b;
    ck_assert(dp_step(&p, T0 + 10 * MS, 1, DP_LEASE, "take b"));
    ck_assert(!dp_step(&p, T0 + 20 * MS, 1, 0, "full"));
    p.lease = a;
    ck_assert(dp_step(&p, T0 + 30 * MS, 0, DP_RELEASE, "release a"));
    ck_assert(!dp_step(&p, T0 + 40 * MS, 0, DP_RELEASE, "release a again"));
    /* b ends at T0 + 1010 ms: then it is not held, its release says so */
    p.lease = b;
    ck_assert(!dp_step(&p, T0 + 1010 * MS, 0, DP_RELEASE, "release b after its end"));
    ck_assert_int_eq(zcard(p.l[0].key), 0);
    dp_free(&p);
}
END_TEST

/* Calls of one command since CONFIG RESETSTAT, from INFO commandstats. */
static long long
cmd_calls(const char *info, const char *cmd)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", cmd);
    p = strstr(info, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : 0;
}

/* Number i of an O(1) algorithm's state (little-endian doubles, see
 * scripts/lua/prelude.lua); -1 when the key is missing or too short. */
static double
state_number(redisContext *c, const char *key, size_t i)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    double d = -1;

    ck_assert(r != NULL);
    if (r->type == REDIS_REPLY_STRING && r->len >= (i + 1) * 8) {
        uint64_t u = 0;

        for (size_t b = 0; b < 8; b++)
            u |= (uint64_t)(unsigned char)r->str[i * 8 + b] << (8 * b);
        memcpy(&d, &u, sizeof(d));
    }
    freeReplyObject(r);
    return d;
}

/*
 * The O(1) algorithms keep one string per key, value and TTL written by one
 * SET ... PX: an allowed check is two GETs (its state, its block) and a SET,
 * nothing else; a check that commits nothing is the two GETs and the PTTL of
 * the repair check.
 */
START_TEST(o1_state_is_one_string_set_with_its_ttl)
{
    static const enum rl_algo o1[] = {
        RL_ALGO_FIXED_WINDOW, RL_ALGO_SLIDING_WINDOW_COUNTER,
        RL_ALGO_TOKEN_BUCKET, RL_ALGO_GCRA,
    };

    for (size_t a = 0; a < RL_ARRAY_LEN(o1); a++) {
        const char *tag = algo_def(o1[a])->tag;
        static const long long cost[] = {1, 1, 0, 11};
        char key[64], spec[64];
        redisReply *r;

        snprintf(key, sizeof(key), "{calls:%s}:%s:60000", tag, tag);
        snprintf(spec, sizeof(spec), "%s 10 60000 10", tag);
        r = redisCommand(rc, "CONFIG RESETSTAT");
        freeReplyObject(r);
        for (int k = 0; k < 4; k++) {
            r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s %lld {calls:%s}:block",
                             rl_lua_check_sha, key, (long long)(T0 + k * MS),
                             spec, cost[k], tag);
            ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY &&
                          r->element[0]->integer == (k < 3),
                          "%s check %d", tag, k);
            freeReplyObject(r);
        }
        r = redisCommand(rc, "TYPE %s", key);
        ck_assert_str_eq(r->str, "string");
        freeReplyObject(r);
        r = redisCommand(rc, "INFO commandstats");
        ck_assert_msg(cmd_calls(r->str, "mget") == 0 && cmd_calls(r->str, "get") == 8 &&
                      cmd_calls(r->str, "set") == 2 && cmd_calls(r->str, "pttl") == 2 &&
                      cmd_calls(r->str, "pexpire") == 0,
                      "%s: mget %lld get %lld set %lld pttl %lld pexpire %lld, want 0 8 2 2 0",
                      tag, cmd_calls(r->str, "mget"), cmd_calls(r->str, "get"),
                      cmd_calls(r->str, "set"), cmd_calls(r->str, "pttl"),
                      cmd_calls(r->str, "pexpire"));
        freeReplyObject(r);
    }
}
END_TEST

/* ---- the daemon's side: script_call_build and the reply, per check ------- */

struct answer {
    struct rl_check_res res;
    char error[128];
    int calls;
};

static void
on_answer(const struct rl_check_res *res, void *arg)
{
    struct answer *a = arg;

    a->res = *res;
    snprintf(a->error, sizeof(a->error), "%s", res->error ? res->error : "");
    a->calls++;
}

/* One call of reqs[0..n) as the daemon builds it, answered check by check. */
static void
daemon_call(struct rl_script_call *c, const struct rl_check_req *const *reqs, size_t n,
            struct answer *ans)
{
    size_t len = 0, at = 0;
    const char *why = NULL;
    redisReply *r;

    ck_assert_int_eq(script_call_build(c, reqs, n, 0), RL_OK);
    ck_assert_int_eq(redisAppendFormattedCommand(rc, c->buf, c->len), REDIS_OK);
    r = get_reply();
    for (size_t i = 0; i < n; i++)
        len += script_reply_len(reqs[i]->policy->nlimits, 0);
    ck_assert_msg((why = script_reply_problem(r, len)) == NULL, "%s (%s)", why,
                  r->type == REDIS_REPLY_ERROR ? r->str : "");
    for (size_t i = 0; i < n; i++) {
        struct rl_script_wait w = {.req = reqs[i], .cb = on_answer, .arg = &ans[i],
                                   .nlimits = reqs[i]->policy->nlimits};

        memset(&ans[i], 0, sizeof(ans[i]));
        script_answer_reply(&w, r, at);
        ck_assert_int_eq(ans[i].calls, 1);
        at += script_reply_len(reqs[i]->policy->nlimits, 0);
    }
    freeReplyObject(r);
}

/*
 * A batch as the daemon sends it (prebuilt policy arguments, flags, a once
 * check's seq), one key of the wrong type among its checks: that check alone
 * is answered RL_BACKEND_ERROR, the others are decided and counted exactly
 * once, before and after it; a policy changed in place is sent as it is now.
 */
/*
 * A value in the text layout of 0.1 is read (state carries over an upgrade)
 * and rewritten packed; a value that is no state (16 bytes of NaN, a
 * fraction) counts as none, never as a number.
 */
START_TEST(o1_reads_the_text_layout_and_ignores_garbage)
{
    static const struct {
        const char *tag, *head, *tail;  /* the value: head, a number, tail */
        long long rem;                  /* after one check of cost 1 */
    } t[] = {
        {"fw", "3:", "", 6},            /* count 3 since T0 */
        {"swc", "", ":2:0", 7},         /* window index, count 2 */
        {"tb", "2:0:", "", 7},          /* 2 tokens missing as of T0 */
        {"gcra", "", " 0", 7},          /* TAT = T0 + 2 T */
    };
    static const unsigned char nan16[16] = {
        0, 0, 0, 0, 0, 0, 0xf8, 0x7f, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f,
    };
    const long long W = 60000 * MS, T = W / 10;

    for (size_t a = 0; a < RL_ARRAY_LEN(t); a++) {
        long long arg = T0;
        char key[64], spec[64], val[64];
        redisReply *r;

        if (strcmp(t[a].tag, "swc") == 0)
            arg = T0 / W;
        else if (strcmp(t[a].tag, "gcra") == 0)
            arg = T0 + 2 * T;
        snprintf(key, sizeof(key), "{text:%s}:%s:60000", t[a].tag, t[a].tag);
        snprintf(spec, sizeof(spec), "%s 10 60000 10", t[a].tag);
        snprintf(val, sizeof(val), "%s%lld%s", t[a].head, arg, t[a].tail);
        freeReplyObject(redisCommand(rc, "SET %s %s PX 600000", key, val));
        r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 {text:%s}:block", rl_lua_check_sha,
                         key, (long long)T0, spec, t[a].tag);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                          r->element[0]->integer == 1 && r->element[1]->integer == t[a].rem,
                      "%s from \"%s\": remaining %lld, want %lld", t[a].tag, val,
                      r != NULL && r->elements == 4 ? r->element[1]->integer : -1, t[a].rem);
        freeReplyObject(r);
        r = redisCommand(rc, "STRLEN %s", key);
        ck_assert_msg(r->integer == 16 || r->integer == 24, "%s: rewritten packed", t[a].tag);
        freeReplyObject(r);

        /* garbage of the packed length: no state, a full limit */
        freeReplyObject(redisCommand(rc, "SET %s %b PX 600000", key, nan16, sizeof(nan16)));
        r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 {text:%s}:block", rl_lua_check_sha,
                         key, (long long)T0, spec, t[a].tag);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                          r->element[0]->integer == 1 && r->element[1]->integer == 9,
                      "%s from NaN: remaining %lld, want 9", t[a].tag,
                      r != NULL && r->elements == 4 ? r->element[1]->integer : -1);
        freeReplyObject(r);
    }
}
END_TEST

/*
 * A sliding-log member that is neither packed numbers nor 0.1's text (16
 * bytes of NaN, written by hand) fails its check alone, with an error,
 * rather than deciding with NaN counts.
 */
START_TEST(log_member_of_garbage_fails_its_check)
{
    static const unsigned char nan16[16] = {
        0x7f, 0xf8, 0, 0, 0, 0, 0, 0, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0,
    };
    const char *key = "{garbage:swl}:swl:60000";
    redisReply *r;

    freeReplyObject(redisCommand(rc, "DEL %s", key));
    freeReplyObject(redisCommand(rc, "ZADD %s %lld %b", key, (long long)T0, nan16,
                                 sizeof(nan16)));
    r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 {garbage:swl}:block", rl_lua_check_sha, key,
                     (long long)(T0 + MS), "swl 10 60000 0");
    ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                      r->element[0]->type == REDIS_REPLY_ERROR,
                  "a NaN member: type %d", r != NULL && r->elements > 0 ? r->element[0]->type : -1);
    freeReplyObject(r);
    r = redisCommand(rc, "ZCARD %s", key);
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
}
END_TEST

START_TEST(daemon_batch_fails_one_check_alone)
{
    struct rl_limit l1[] = {{RL_ALGO_FIXED_WINDOW, 10, 60000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    /* windows of a minute: the calls below read Redis's clock, and a
     * window of 1 s gave a unit back between them on a slow (sanitized,
     * loaded) host */
    struct rl_limit l2[] = {{RL_ALGO_GCRA, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}, {RL_ALGO_SLIDING_WINDOW_LOG, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    char n1[] = "p1", n2[] = "p2";
    struct rl_policy p1 = {.name = n1, .limits = l1, .nlimits = 1};
    struct rl_policy p2 = {.name = n2, .limits = l2, .nlimits = 2};
    struct rl_check_req a = {.policy = &p1, .key = "{c:a}", .key_len = 5, .cost = 1};
    struct rl_check_req b = {.policy = &p2, .key = "{c:b}", .key_len = 5, .cost = 2,
                             .flags = RL_CHECK_FORCE | RL_CHECK_ONCE, .writer = 0xab, .seq = 7};
    struct rl_check_req bad = {.policy = &p1, .key = "{c:bad}", .key_len = 7, .cost = 1};
    const struct rl_check_req *reqs[] = {&a, &b, &bad, &a};
    struct rl_script_call c = {0};
    struct answer ans[4];
    redisReply *r;

    r = redisCommand(rc, "HSET {c:bad}:fw:60000 not a-counter");
    freeReplyObject(r);
    daemon_call(&c, reqs, 4, ans);
    ck_assert_int_eq(ans[0].res.status, RL_BACKEND_OK);
    ck_assert(ans[0].res.allowed);
    ck_assert_int_eq(ans[0].res.limits[0].remaining, 9);
    ck_assert_int_eq(ans[1].res.status, RL_BACKEND_OK);
    ck_assert(ans[1].res.allowed);
    ck_assert_int_eq(ans[1].res.nlimits, 2);
    ck_assert_int_eq(ans[1].res.limits[0].remaining, 3);
    ck_assert_int_eq(ans[1].res.limits[1].remaining, 3);
    ck_assert_int_eq(ans[2].res.status, RL_BACKEND_ERROR);
    ck_assert_msg(strncmp(ans[2].error, "WRONGTYPE", 9) == 0, "error: %s", ans[2].error);
    ck_assert_int_eq(ans[3].res.status, RL_BACKEND_OK);
    ck_assert_int_eq(ans[3].res.limits[0].remaining, 8);

    ck_assert_msg(state_number(rc, "{c:a}:fw:60000", 0) == 2, "{c:a} counted twice");
    r = redisCommand(rc, "GET {c:b}:once:00000000000000ab");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && strcmp(r->str, "7") == 0, "once key");
    freeReplyObject(r);
    r = redisCommand(rc, "TYPE {c:bad}:fw:60000");
    ck_assert_str_eq(r->str, "hash");
    freeReplyObject(r);

    /* the same seq again: only read; the policy's limit raised in place
     * (same address): its prebuilt argument must follow */
    l1[0].limit = 20;
    daemon_call(&c, reqs, 2, ans);
    ck_assert_int_eq(ans[0].res.limits[0].remaining, 17);
    ck_assert_int_eq(ans[1].res.limits[0].remaining, 3);
    ck_assert_int_eq(ans[1].res.limits[1].remaining, 3);
    ck_assert_ptr_nonnull(memmem(c.buf, c.len, "fw 20 60000 10", 14));
    /* alone in its call (the script's path for one check of one limit) */
    daemon_call(&c, &reqs[2], 1, ans);
    ck_assert_int_eq(ans[0].res.status, RL_BACKEND_ERROR);
    ck_assert_msg(strncmp(ans[0].error, "WRONGTYPE", 9) == 0, "error: %s", ans[0].error);
    script_call_free(&c);
}
END_TEST


/*
 * A plain check (one limit, cost >= 0, no flag) runs without the driver's
 * pcall: its key's WRONGTYPE is its own answer, for every algorithm's plain
 * path (fixed_window's own, run_plain for the others), in a batch and
 * alone, and the checks around it are decided and counted.
 */
START_TEST(plain_checks_fail_alone_for_every_algorithm)
{
    static const char *const tags[] = {"fw", "tb", "gcra", "swc", "fwa"};
    const char *good = "{pl:good}:fw:60000";
    redisReply *r;

    freeReplyObject(redisCommand(rc, "DEL %s", good));
    for (size_t a = 0; a < RL_ARRAY_LEN(tags); a++) {
        char key[64], spec[64], block[64];

        snprintf(key, sizeof(key), "{pl:%s}:%s:60000", tags[a], tags[a]);
        snprintf(spec, sizeof(spec), "%s 10 60000 10", tags[a]);
        snprintf(block, sizeof(block), "{pl:%s}:block", tags[a]);
        freeReplyObject(redisCommand(rc, "DEL %s", key));
        freeReplyObject(redisCommand(rc, "HSET %s not a-counter", key));
        /* good, bad, good (the same key: counted twice) */
        r = redisCommand(rc, "EVALSHA %s 3 %s %s %s %lld 3 %s 1 {pl:good}:block %s 1 %s %s 1 "
                             "{pl:good}:block",
                         rl_lua_check_sha, good, key, good, (long long)T0, "fw 100 60000 0", spec,
                         block, "fw 100 60000 0");
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 12, "%s: shape",
                      tags[a]);
        ck_assert_int_eq(r->element[0]->integer, 1);
        ck_assert_int_eq(r->element[1]->integer, 99 - 2 * (long long)a);
        ck_assert_msg(r->element[4]->type == REDIS_REPLY_ERROR &&
                          strncmp(r->element[4]->str, "WRONGTYPE", 9) == 0,
                      "%s in a batch: type %d", tags[a], r->element[4]->type);
        for (int i = 5; i < 8; i++)
            ck_assert_int_eq(r->element[i]->integer, 0);
        ck_assert_int_eq(r->element[8]->integer, 1);
        ck_assert_int_eq(r->element[9]->integer, 98 - 2 * (long long)a);
        freeReplyObject(r);
        /* alone in its call (the script's path for one check) */
        r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 %s", rl_lua_check_sha, key,
                         (long long)T0, spec, block);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
                          r->element[0]->type == REDIS_REPLY_ERROR &&
                          strncmp(r->element[0]->str, "WRONGTYPE", 9) == 0,
                      "%s alone", tags[a]);
        freeReplyObject(r);
        r = redisCommand(rc, "TYPE %s", key);
        ck_assert_str_eq(r->str, "hash");
        freeReplyObject(r);
    }
}
END_TEST

/*
 * A batch's plain checks of one spec and cost are decided in one Lua call
 * per run of them (run_plain, fixed_window's plain): every check of a run
 * answers as it does alone in its call, and leaves the same state.  Alone,
 * a plain check takes another function, of one check (plain1, plain1_p,
 * fixed_window's one), for every tag here: the two decisions are held
 * together by this case.  The runs hold the cases a run must not blur: a
 * key of another type (WRONGTYPE, its own answer), a blocked caller, a
 * block key of another type (no block), the same key twice (the second
 * sees the first), a key found without a TTL (put back) on a path that
 * writes nothing, a cost over the limit, a cost of 0; a period's run, its
 * clock's error per check.
 */
#define PR_KEYS 7
struct pr_check {
    int key;          /* 0..PR_KEYS-1 */
    const char *cost; /* "1", "20" (over the limit), "0" */
};

static void
pr_key(char *buf, size_t size, const char *ns, const char *tag, int key, const char *suffix)
{
    snprintf(buf, size, "{pr:%s:%s:%d}%s", ns, tag, key, suffix);
}

/* Keys of namespace ns for tag: 1 another type, 2 blocked, 3 a block key
 * of another type, 5 and 6 a state found without a TTL (one check of cost
 * 1 written, then PERSIST), 0 and 4 none. */
static void
pr_prepare(const char *ns, const char *tag, const char *spec)
{
    /* a period's clock error writes nothing: its keys' state as fw's */
    if (strncmp(spec, "fwp 10 1,", 9) == 0)
        spec = "fw 10 60000 10";
    char key[96], block[96];
    redisReply *r;

    for (int i = 0; i < PR_KEYS; i++) {
        pr_key(key, sizeof(key), ns, tag, i, ":k");
        pr_key(block, sizeof(block), ns, tag, i, ":block");
        freeReplyObject(redisCommand(rc, "DEL %s %s", key, block));
    }
    pr_key(key, sizeof(key), ns, tag, 1, ":k");
    freeReplyObject(redisCommand(rc, "HSET %s not a-counter", key));
    pr_key(block, sizeof(block), ns, tag, 2, ":block");
    freeReplyObject(redisCommand(rc, "SET %s %lld PX 60000", block, (long long)(T0 + 5000 * MS)));
    pr_key(block, sizeof(block), ns, tag, 3, ":block");
    freeReplyObject(redisCommand(rc, "HSET %s not a-block", block));
    for (int i = 5; i <= 6; i++) {
        pr_key(key, sizeof(key), ns, tag, i, ":k");
        pr_key(block, sizeof(block), ns, tag, i, ":block");
        r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 %s", rl_lua_check_sha, key,
                         (long long)(T0 - 1000 * MS), spec, block);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1,
                      "%s: the state of key %d", tag, i);
        freeReplyObject(r);
        r = redisCommand(rc, "PERSIST %s", key);
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
    }
}

/* The checks in one call (batch) or each alone, in namespace ns -> the
 * answers' elements, appended to *out (4 per check) */
static void
pr_run(const char *ns, const char *tag, const char *spec, const struct pr_check *ck, size_t n,
       bool batch, redisReply **out)
{
    char keys[32][96], blocks[32][96], nbuf[24], tbuf[24];
    const char *argv[4 + 32 * 4];
    size_t argc = 0;

    ck_assert_uint_le(n, 32);
    for (size_t i = 0; i < n; i++) {
        pr_key(keys[i], sizeof(keys[i]), ns, tag, ck[i].key, ":k");
        pr_key(blocks[i], sizeof(blocks[i]), ns, tag, ck[i].key, ":block");
    }
    snprintf(tbuf, sizeof(tbuf), "%lld", (long long)T0);
    for (size_t first = 0; first < n; first += batch ? n : 1) {
        size_t m = batch ? n : 1;
        redisReply *r;

        argc = 0;
        argv[argc++] = "EVALSHA";
        argv[argc++] = rl_lua_check_sha;
        snprintf(nbuf, sizeof(nbuf), "%zu", m);
        argv[argc++] = nbuf;
        for (size_t i = first; i < first + m; i++)
            argv[argc++] = keys[i];
        argv[argc++] = tbuf;
        argv[argc++] = nbuf;
        for (size_t i = first; i < first + m; i++) {
            argv[argc++] = spec;
            argv[argc++] = ck[i].cost;
            argv[argc++] = blocks[i];
        }
        r = redisCommandArgv(rc, (int)argc, argv, NULL);
        ck_assert_msg(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 4 * m,
                      "%s %s: the answer's shape", tag, batch ? "batch" : "alone");
        for (size_t i = 0; i < r->elements; i++) {
            out[4 * first + i] = r->element[i];
            r->element[i] = NULL;
        }
        r->elements = 0;
        freeReplyObject(r);
    }
}

START_TEST(plain_runs_answer_as_each_check_alone)
{
    static const struct pr_check ck[] = {
        /* over the limit: nothing counted; 5 has its TTL put back */
        {0, "20"}, {1, "20"}, {2, "20"}, {3, "20"}, {5, "20"},
        /* a cost of 0: 6 put back too */
        {6, "0"}, {1, "0"}, {2, "0"}, {4, "0"},
        /* counted: 0 twice, the second after the first */
        {0, "1"}, {1, "1"}, {2, "1"}, {3, "1"}, {0, "1"}, {4, "1"}, {1, "1"},
    };
    static const char *const tags[] = {"fw", "fwa", "tb", "gcra", "swc", "fwp", "swcp", "fwp-far"};
    const int64_t s3 = T0 / 1000000 / 60 * 60; /* the minute that holds T0 */
    char spec[128];
    const char *tag = tags[_i];
    redisReply *batch[4 * RL_ARRAY_LEN(ck)], *alone[4 * RL_ARRAY_LEN(ck)];

    if (strcmp(tag, "fwp-far") == 0)
        snprintf(spec, sizeof(spec), "fwp 10 1,2,3,4,5,6 0");
    else if (strcmp(tag, "fwp") == 0 || strcmp(tag, "swcp") == 0)
        snprintf(spec, sizeof(spec), "%s 10 %lld,%lld,%lld,%lld,%lld,%lld 0", tag,
                 (long long)s3 - 120, (long long)s3 - 60, (long long)s3, (long long)s3 + 60,
                 (long long)s3 + 120, (long long)s3 + 180);
    else
        snprintf(spec, sizeof(spec), "%s 10 60000 10", tag);
    pr_prepare("run", tag, spec);
    pr_prepare("one", tag, spec);
    pr_run("run", tag, spec, ck, RL_ARRAY_LEN(ck), true, batch);
    pr_run("one", tag, spec, ck, RL_ARRAY_LEN(ck), false, alone);
    for (size_t i = 0; i < 4 * RL_ARRAY_LEN(ck); i++) {
        redisReply *a = batch[i], *b = alone[i];

        ck_assert_msg(a->type == b->type, "%s: check %zu, element %zu: type %d in a run, %d alone",
                      tag, i / 4, i % 4, a->type, b->type);
        if (a->type == REDIS_REPLY_INTEGER)
            ck_assert_msg(a->integer == b->integer, "%s: check %zu, element %zu: %lld in a run, "
                          "%lld alone", tag, i / 4, i % 4, a->integer, b->integer);
        else
            ck_assert_msg(strcmp(a->str, b->str) == 0, "%s: check %zu: '%s' in a run, '%s' alone",
                          tag, i / 4, a->str, b->str);
    }
    /* the cases were met: an error for key 1's checks, a block for key
     * 2's, none for key 3's, the second check of key 0 after the first */
    if (strcmp(tag, "fwp-far") == 0) {
        /* the key is read before the clock is checked */
        for (size_t i = 0; i < RL_ARRAY_LEN(ck); i++)
            ck_assert_msg(batch[4 * i]->type == REDIS_REPLY_ERROR &&
                              strncmp(batch[4 * i]->str, ck[i].key == 1 ? "WRONGTYPE" : "CLOCK: ",
                                      7) == 0,
                          "fwp-far: check %zu", i);
    } else {
        for (size_t i = 0; i < RL_ARRAY_LEN(ck); i++) {
            redisReply *a = batch[4 * i];

            if (ck[i].key == 1)
                ck_assert_msg(a->type == REDIS_REPLY_ERROR && strncmp(a->str, "WRONGTYPE", 9) == 0,
                              "%s: check %zu: key of another type", tag, i);
            else
                ck_assert_msg(a->type == REDIS_REPLY_INTEGER, "%s: check %zu", tag, i);
            if (ck[i].key == 2)
                ck_assert_msg(a->integer == -5000, "%s: check %zu: blocked %lld", tag, i, a->integer);
            if (ck[i].key == 3 || ck[i].key == 4)
                ck_assert_msg(a->integer == (strcmp(ck[i].cost, "20") == 0 ? 0 : 1),
                              "%s: check %zu: %lld", tag, i, a->integer);
        }
        /* {0, "1"} twice: 10 - 1, then 10 - 2 */
        ck_assert_int_eq(batch[4 * 9 + 1]->integer, 9);
        ck_assert_int_eq(batch[4 * 13 + 1]->integer, 8);
    }
    for (size_t i = 0; i < 4 * RL_ARRAY_LEN(ck); i++) {
        freeReplyObject(batch[i]);
        freeReplyObject(alone[i]);
    }
    /* the same state: values and TTLs (a TTL put back, or none) */
    for (int k = 0; k < PR_KEYS; k++) {
        char kr[96], ko[96];
        redisReply *vr, *vo, *tr, *to;

        pr_key(kr, sizeof(kr), "run", tag, k, ":k");
        pr_key(ko, sizeof(ko), "one", tag, k, ":k");
        vr = redisCommand(rc, "DUMP %s", kr);
        vo = redisCommand(rc, "DUMP %s", ko);
        tr = redisCommand(rc, "PTTL %s", kr);
        to = redisCommand(rc, "PTTL %s", ko);
        ck_assert_msg(vr->type == vo->type && vr->len == vo->len &&
                          (vr->type != REDIS_REPLY_STRING || memcmp(vr->str, vo->str, vr->len) == 0),
                      "%s: key %d's value", tag, k);
        ck_assert_msg((tr->integer > 0) == (to->integer > 0) && tr->integer >= -2 &&
                          (tr->integer < 0) == (to->integer < 0) &&
                          (tr->integer < 0 ? tr->integer == to->integer
                                           : llabs(tr->integer - to->integer) < 30000),
                      "%s: key %d's TTL: %lld in a run, %lld alone", tag, k, tr->integer,
                      to->integer);
        if ((k == 5 || k == 6) && strcmp(tag, "fwp-far") != 0)
            ck_assert_msg(tr->integer > 0, "%s: key %d's TTL put back: %lld", tag, k, tr->integer);
        freeReplyObject(vr);
        freeReplyObject(vo);
        freeReplyObject(tr);
        freeReplyObject(to);
    }
}
END_TEST

/*
 * A once charge (POST /charge's call) sent again counts nothing: the same
 * seq, or an older one after a newer was applied, only reads, and the
 * writer's record stays at the newest seq, with a TTL; a newer seq counts.
 * A record that is no number fails the charge and is left as it was.
 * For a limit the script reads first (fw) and one whose peek reads its own
 * key (swl), alone in its call and in a batch.
 */
START_TEST(once_charges_count_once_and_keep_the_newest_seq)
{
    static const struct {
        enum rl_algo algo;
        const char *key, *value_key, *once_key;
    } t[] = {
        {RL_ALGO_FIXED_WINDOW, "{oc:fw}", "{oc:fw}:fw:60000", "{oc:fw}:once:00000000000000cd"},
        {RL_ALGO_SLIDING_WINDOW_LOG, "{oc:swl}", "{oc:swl}:swl:60000",
         "{oc:swl}:once:00000000000000cd"},
    };
    static const struct {
        unsigned long long seq;
        long long remaining; /* after it */
        const char *record;  /* the writer's record after it */
    } steps[] = {{5, 7, "5"}, {5, 7, "5"}, {4, 7, "5"}, {6, 4, "6"}, {6, 4, "6"}};

    for (size_t a = 0; a < RL_ARRAY_LEN(t); a++) {
        for (int batch = 0; batch < 2; batch++) {
            struct rl_limit l[] = {{t[a].algo, 10, 60000, 10, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
            char name[] = "oc";
            struct rl_policy p = {.name = name, .limits = l, .nlimits = 1};
            struct rl_check_req ch = {.policy = &p, .key = t[a].key, .key_len = strlen(t[a].key),
                                      .cost = 3, .flags = RL_CHECK_CHARGE | RL_CHECK_ONCE,
                                      .writer = 0xcd};
            struct rl_check_req other = {.policy = &p, .key = "{oc:other}", .key_len = 10, .cost = 0};
            const struct rl_check_req *reqs[] = {&ch, &other};
            struct rl_script_call c = {0};
            struct answer ans[2];
            redisReply *r;

            freeReplyObject(redisCommand(rc, "DEL %s %s", t[a].value_key, t[a].once_key));
            for (size_t i = 0; i < RL_ARRAY_LEN(steps); i++) {
                ch.seq = steps[i].seq;
                daemon_call(&c, reqs, batch ? 2 : 1, ans);
                ck_assert_msg(ans[0].res.status == RL_BACKEND_OK && ans[0].res.nlimits == 1 &&
                                  ans[0].res.limits[0].remaining == steps[i].remaining,
                              "%s %s, seq %llu: status %d remaining %lld, want %lld", t[a].key,
                              batch ? "in a batch" : "alone", steps[i].seq, ans[0].res.status,
                              (long long)ans[0].res.limits[0].remaining, steps[i].remaining);
                r = redisCommand(rc, "GET %s", t[a].once_key);
                ck_assert_msg(r->type == REDIS_REPLY_STRING && strcmp(r->str, steps[i].record) == 0,
                              "%s seq %llu: record %s, want %s", t[a].key, steps[i].seq,
                              r->type == REDIS_REPLY_STRING ? r->str : "(none)", steps[i].record);
                freeReplyObject(r);
                r = redisCommand(rc, "PTTL %s", t[a].once_key);
                ck_assert_msg(r->integer > 0, "%s seq %llu: record's TTL %lld", t[a].key,
                              steps[i].seq, r->integer);
                freeReplyObject(r);
            }
            /* a record that is no number (written by hand) fails the charge
             * alone and stays as it was; nothing was counted: the record
             * put back at 6, seq 6 only reads the count the steps left */
            freeReplyObject(redisCommand(rc, "SET %s abc PX 60000", t[a].once_key));
            ch.seq = 7;
            daemon_call(&c, reqs, batch ? 2 : 1, ans);
            ck_assert_msg(ans[0].res.status == RL_BACKEND_ERROR, "%s %s, a record \"abc\": status %d",
                          t[a].key, batch ? "in a batch" : "alone", ans[0].res.status);
            r = redisCommand(rc, "GET %s", t[a].once_key);
            ck_assert_msg(r->type == REDIS_REPLY_STRING && strcmp(r->str, "abc") == 0,
                          "%s: record %s, want abc", t[a].key,
                          r->type == REDIS_REPLY_STRING ? r->str : "(none)");
            freeReplyObject(r);
            freeReplyObject(redisCommand(rc, "SET %s 6 PX 60000", t[a].once_key));
            ch.seq = 6;
            daemon_call(&c, reqs, batch ? 2 : 1, ans);
            ck_assert_msg(ans[0].res.status == RL_BACKEND_OK && ans[0].res.limits[0].remaining == 4,
                          "%s after a record of garbage: status %d remaining %lld, want 4", t[a].key,
                          ans[0].res.status, (long long)ans[0].res.limits[0].remaining);
            script_call_free(&c);
        }
    }
}
END_TEST


/*
 * Admin operations as the daemon sends them, in a batch with checks: a
 * block denies the checks after it (consuming nothing) and not another
 * key's; give back with a reset of one limit and the block lifted answers
 * the state after it; a reset of everything leaves no key; a limit the
 * policy lacks fails that operation alone.
 */
START_TEST(daemon_admin_ops_answer_like_a_check_after_them)
{
    struct rl_limit l[] = {{RL_ALGO_TOKEN_BUCKET, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
                           {RL_ALGO_SLIDING_WINDOW_LOG, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    char name[] = "pa";
    struct rl_policy p = {.name = name, .limits = l, .nlimits = 2};
    struct rl_check_req use = {.policy = &p, .key = "{d:a}", .key_len = 5, .cost = 3};
    struct rl_check_req other = {.policy = &p, .key = "{d:b}", .key_len = 5, .cost = 1};
    struct rl_check_req block = {.policy = &p, .key = "{d:a}", .key_len = 5,
                                 .flags = RL_CHECK_BLOCK, .block_ms = 60000};
    struct rl_check_req adm = {.policy = &p, .key = "{d:a}", .key_len = 5, .cost = -2,
                               .flags = RL_CHECK_RESET | RL_CHECK_BLOCK,
                               .limit_index = 1, .block_ms = 0};
    struct rl_check_req all = {.policy = &p, .key = "{d:a}", .key_len = 5,
                               .flags = RL_CHECK_RESET, .limit_index = -1};
    struct rl_check_req bad = {.policy = &p, .key = "{d:a}", .key_len = 5,
                               .flags = RL_CHECK_RESET, .limit_index = 2};
    const struct rl_check_req *r1[] = {&use, &block, &use, &other};
    const struct rl_check_req *r2[] = {&adm, &use, &block, &bad, &all, &use};
    struct rl_script_call c = {0};
    struct answer ans[6];
    redisReply *r;

    daemon_call(&c, r1, 4, ans);
    ck_assert(ans[0].res.allowed && ans[0].res.blocked_ms == 0);
    ck_assert_int_eq(ans[0].res.limits[0].remaining, 2);
    for (int k = 1; k <= 2; k++) {
        ck_assert_int_eq(ans[k].res.status, RL_BACKEND_OK);
        ck_assert(!ans[k].res.allowed);
        ck_assert_int_gt(ans[k].res.blocked_ms, 50000);
        ck_assert_int_le(ans[k].res.blocked_ms, 60000);
        for (size_t i = 0; i < 2; i++) {
            ck_assert(!ans[k].res.limits[i].allowed);
            ck_assert_int_eq(ans[k].res.limits[i].remaining, 2);
            ck_assert_int_ge(ans[k].res.limits[i].retry_after_ms, ans[k].res.blocked_ms);
        }
    }
    ck_assert(ans[3].res.allowed && ans[3].res.blocked_ms == 0);

    daemon_call(&c, r2, 6, ans);
    /* 2 tokens back, the log reset, the block lifted */
    ck_assert(ans[0].res.allowed && ans[0].res.blocked_ms == 0);
    ck_assert_int_eq(ans[0].res.limits[0].remaining, 4);
    ck_assert_int_eq(ans[0].res.limits[1].remaining, 5);
    ck_assert(ans[1].res.allowed);
    ck_assert_int_eq(ans[1].res.limits[0].remaining, 1);
    ck_assert_int_eq(ans[1].res.limits[1].remaining, 2);
    ck_assert(!ans[2].res.allowed && ans[2].res.blocked_ms > 0);
    ck_assert_int_eq(ans[3].res.status, RL_BACKEND_ERROR);
    ck_assert(ans[4].res.allowed && ans[4].res.blocked_ms == 0);
    ck_assert_int_eq(ans[4].res.limits[0].remaining, 5);
    ck_assert_int_eq(ans[4].res.limits[1].remaining, 5);
    ck_assert(ans[5].res.allowed);
    r = redisCommand(rc, "EXISTS {d:a}:block");
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
    /* the tokens missing: d of (d, f, t) */
    ck_assert_msg(state_number(rc, "{d:a}:tb:60000", 0) == 3, "after the reset, one check of 3");
    script_call_free(&c);
}
END_TEST

/*
 * A log first: its peek reads its sorted set itself, so the script reads
 * only the block key for it (no MGET).  The block must deny all the same, in
 * the one-limit path and as the first of two limits, and not another key.
 */
START_TEST(a_block_denies_a_policy_whose_first_limit_is_a_log)
{
    struct rl_limit l1[] = {{RL_ALGO_SLIDING_WINDOW_LOG, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    struct rl_limit l2[] = {{RL_ALGO_SLIDING_WINDOW_LOG, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0},
                            {RL_ALGO_FIXED_WINDOW, 5, 60000, 5, RL_ALIGN_FIRST, {0, 0, NULL}, NULL, 0, 0}};
    char n1[] = "pl1", n2[] = "pl2";
    struct rl_policy p1 = {.name = n1, .limits = l1, .nlimits = 1};
    struct rl_policy p2 = {.name = n2, .limits = l2, .nlimits = 2};
    struct rl_check_req use1 = {.policy = &p1, .key = "{d:l}", .key_len = 5, .cost = 1};
    struct rl_check_req use2 = {.policy = &p2, .key = "{d:l}", .key_len = 5, .cost = 1};
    struct rl_check_req other = {.policy = &p1, .key = "{d:m}", .key_len = 5, .cost = 1};
    struct rl_check_req block = {.policy = &p1, .key = "{d:l}", .key_len = 5,
                                 .flags = RL_CHECK_BLOCK, .block_ms = 60000};
    const struct rl_check_req *r1[] = {&use1, &use2, &block, &use1, &use2, &other};
    struct rl_script_call c = {0};
    struct answer ans[6];

    daemon_call(&c, r1, 6, ans);
    for (int k = 0; k < 6; k++)
        ck_assert_int_eq(ans[k].res.status, RL_BACKEND_OK);
    ck_assert(ans[0].res.allowed && ans[1].res.allowed && ans[5].res.allowed);
    ck_assert_int_eq(ans[0].res.limits[0].remaining, 4);
    ck_assert_int_eq(ans[1].res.limits[0].remaining, 3);
    for (int k = 2; k <= 4; k++) {
        ck_assert(!ans[k].res.allowed);
        ck_assert_int_gt(ans[k].res.blocked_ms, 50000);
        ck_assert_int_le(ans[k].res.blocked_ms, 60000);
        /* denied: nothing consumed */
        ck_assert_int_eq(ans[k].res.limits[0].remaining, 3);
    }
    ck_assert_int_eq(ans[4].res.limits[1].remaining, 4);
    script_call_free(&c);
}
END_TEST

/* ---- calendar periods --------------------------------------------------------- */

/* Periods of every kind, in zones with DST north and south, a 30-minute
 * shift and none; a week from a sunday. */
static const struct {
    int kind;
    const char *tz;
    int week_start;
} periods[] = {
    {RL_PERIOD_DAY, "Europe/Berlin", 0},         {RL_PERIOD_DAY, "America/New_York", 0},
    {RL_PERIOD_DAY, "Australia/Lord_Howe", 0},   {RL_PERIOD_DAY, "Asia/Kolkata", 0},
    {RL_PERIOD_WEEK, "America/New_York", 1},     {RL_PERIOD_WEEK, NULL, 0},
    {RL_PERIOD_MONTH, "Europe/Berlin", 0},       {RL_PERIOD_YEAR, NULL, 0},
    {RL_PERIOD_HOUR, "Australia/Lord_Howe", 0},  {RL_PERIOD_MINUTE, "Asia/Kolkata", 0},
};

/* The edges the periods are visited around: every DST change of 2026-2027
 * in the zones above, month ends of 28, 29, 30 and 31 days, years. */
static const int64_t edges_s[] = {
    1774746000, /* 2026-03-29T01:00Z Berlin springs forward */
    1792890000, /* 2026-10-25T01:00Z Berlin falls back */
    1772953200, /* 2026-03-08T07:00Z New York springs forward */
    1793512800, /* 2026-11-01T06:00Z New York falls back */
    1775314800, /* 2026-04-04T15:00Z Lord Howe falls back 30 minutes */
    1791043200, /* 2026-10-03T15:30Z Lord Howe springs forward 30 */
    1803452400, /* 2027-02-28T23:00Z: the end of a February of 28 days (Berlin) */
    1835391600, /* 2028-02-29T23:00Z: of 29 */
    1782860400, /* 2026-06-30T23:00Z: of June, 30 days */
    1798758000, /* 2026-12-31T23:00Z: of the year (Berlin) */
    1798761600, /* 2027-01-01T00:00Z: of the year (UTC) */
};

static const char *
period_label(size_t k)
{
    static char out[96];

    snprintf(out, sizeof(out), "%s@%s%s", period_kind_name(periods[k].kind),
             periods[k].tz ? periods[k].tz : "UTC", periods[k].week_start ? " (sunday)" : "");
    return out;
}

START_TEST(period_algorithms_match_their_twins)
{
    static const enum rl_algo algos[] = {RL_ALGO_FIXED_WINDOW, RL_ALGO_SLIDING_WINDOW_COUNTER};
    static const int64_t limits[] = {3, 100, 1000000000};
    size_t k = (size_t)_i;

    for (size_t a = 0; a < RL_ARRAY_LEN(algos); a++) {
        for (size_t j = 0; j < RL_ARRAY_LEN(limits); j++) {
            struct dpolicy p = {0};
            char id[64], what[160];
            uint64_t seed = k * 131 + a * 17 + j;
            int64_t now;
            int steps = 0;

            snprintf(id, sizeof(id), "per:%zu:%zu:%zu", k, a, j);
            snprintf(what, sizeof(what), "%s %s limit %lld", algo_def(algos[a])->name,
                     period_label(k), (long long)limits[j]);
            dp_add_period(&p, id, algos[a], limits[j], periods[k].kind, periods[k].tz,
                          periods[k].week_start);
            /* from before an edge, at the policy's pace, past it */
            now = (edges_s[seed % RL_ARRAY_LEN(edges_s)] - 2 * 3600) * 1000000 + 123;
            for (int n = 0; n < 200; n++, steps++) {
                char where[200];
                int64_t cost = next_cost(&seed, &p);
                int how = 0;

                now = next_time(&seed, now, &p);
                if (rnd(&seed) % 25 == 0)
                    how |= DP_PERSIST;
                if (rnd(&seed) % 8 == 0)
                    how |= DP_FORCE;
                next_admin(&seed, &p, &cost, &how);
                snprintf(where, sizeof(where), "%s step %d", what, n);
                dp_step(&p, now, cost, how, where);
            }
            ck_assert_int_eq(steps, 200);
            dp_free(&p);
        }
    }
}
END_TEST

/*
 * At every boundary near each edge: the last microsecond of a period and
 * the first of the next, full and empty, and back again (a clock that
 * steps back), both algorithms side by side in one policy; with the
 * daemon's clock on time, a second behind Redis's
 * (its boundaries one period old once Redis's clock has passed one) and a
 * second ahead (one period new before).
 */
START_TEST(periods_match_on_their_boundaries)
{
    size_t k = (size_t)_i;
    static const int64_t skews[] = {0, -1000000, 1000000};

    for (size_t e = 0; e < RL_ARRAY_LEN(edges_s); e++) {
        for (size_t sk = 0; sk < RL_ARRAY_LEN(skews); sk++) {
            struct dpolicy p = {0};
            char id[64], what[160];
            int64_t b[RL_PERIOD_BOUNDS];

            snprintf(id, sizeof(id), "pedge:%zu:%zu:%zu", k, e, sk);
            snprintf(what, sizeof(what), "%s edge %zu skew %lld", period_label(k), e,
                     (long long)skews[sk]);
            dp_add_period(&p, id, RL_ALGO_FIXED_WINDOW, 5, periods[k].kind, periods[k].tz,
                          periods[k].week_start);
            dp_add_period(&p, id, RL_ALGO_SLIDING_WINDOW_COUNTER, 7, periods[k].kind,
                          periods[k].tz, periods[k].week_start);
            p.skew = skews[sk];
            algo_period_bounds(&p.l[0].lim, edges_s[e] * 1000000, b);
            /* the period that holds the edge, and its two ends */
            for (int i = 2; i <= 3; i++) {
                int64_t t = b[i];
                dp_step(&p, t - 3000000, 2, 0, what);
                dp_step(&p, t - 1, 3, 0, what);
                dp_step(&p, t - 1, 1, 0, what);
                dp_step(&p, t, 1, 0, what);
                dp_step(&p, t, 4, 0, what);
                dp_step(&p, t + 1, 2, 0, what);
                dp_step(&p, t + 1, 0, 0, what);
                dp_step(&p, t + 1, 3, DP_FORCE, what);
                /* a clock that steps back across the boundary: the later
                 * period's counts stay */
                dp_step(&p, t - 2, 1, 0, what);
                dp_step(&p, t - 2, 0, 0, what);
                dp_step(&p, t + (b[i + 1] - b[i]) / 2, 1, 0, what);
            }
            dp_free(&p);
        }
    }
}
END_TEST

/* The numbers themselves on Berlin's 23-hour day: a daily quota opened at
 * 00:00:01 resets at the next midnight, 23 hours less a second later; the
 * sliding counter's previous day fades over the whole of the 23. */
START_TEST(period_numbers_on_a_short_day)
{
    struct dpolicy p = {0};
    int64_t midnight = 1774738800LL * 1000000; /* 2026-03-29T00:00+01:00 */
    redisReply *r;

    dp_add_period(&p, "short", RL_ALGO_FIXED_WINDOW, 3, RL_PERIOD_DAY, "Europe/Berlin", 0);
    dp_add_period(&p, "short", RL_ALGO_SLIDING_WINDOW_COUNTER, 4, RL_PERIOD_DAY,
                  "Europe/Berlin", 0);
    /* 4 the day before, so that the counter carries them into the short day */
    ck_assert(dp_step(&p, midnight - 3600 * 1000000LL, 3, 0, "the day before"));
    r = dp_redis(&p, midnight + 1000000, 0, 0, "at 00:00:01", &(int64_t){0});
    /* fixed: a new day, 3 left, nothing to reset; counter: 3 of the last
     * day weigh 3 x (23 h - 1 s) / 24 h = 2.87... -> 3, 1 left */
    ck_assert_int_eq(r->element[0]->element[1]->integer, 3);
    ck_assert_int_eq(r->element[0]->element[2]->integer, 0);
    ck_assert_int_eq(r->element[0]->element[4]->integer, 1);
    ck_assert_int_eq(r->element[0]->element[5]->integer, (23 * 3600 - 1) * 1000LL);
    freeReplyObject(r);
    dp_twin(&p, midnight + 1000000, 0, 0, (struct rl_limit_result[RL_LIMITS_MAX]){0},
            &(int){0});
    ck_assert(dp_step(&p, midnight + 1000000, 1, 0, "first of the short day"));
    r = dp_redis(&p, midnight + 2000000, 0, 0, "at 00:00:02", &(int64_t){0});
    ck_assert_int_eq(r->element[0]->element[2]->integer, (23 * 3600 - 2) * 1000LL);
    /* the counter is whole again at the end of the next day (24 h) */
    ck_assert_int_eq(r->element[0]->element[5]->integer, (47 * 3600 - 2) * 1000LL);
    freeReplyObject(r);
    dp_free(&p);
}
END_TEST

/* Redis's clock more than a period from the daemon's: the check fails (an
 * error for failure_mode), nothing is written. */
START_TEST(a_clock_a_period_away_fails_the_check)
{
    struct dpolicy p = {0};
    redisReply *r;

    dp_add_period(&p, "far", RL_ALGO_FIXED_WINDOW, 5, RL_PERIOD_MINUTE, NULL, 0);
    p.skew = 125 * 1000000LL; /* two minutes and more */
    r = redisCommand(rc, "EVALSHA %s 1 %s %lld 1 %s 1 %s", rl_lua_check_sha, p.l[0].key,
                     (long long)T0, "fwp 5 1,2,3,4,5,6 0", p.block_key);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->element[0]->type == REDIS_REPLY_ERROR &&
                      strncmp(r->element[0]->str, "CLOCK: ", 7) == 0,
                  "far in the future of the boundaries: %s",
                  r->type == REDIS_REPLY_ARRAY ? r->element[0]->str : "?");
    freeReplyObject(r);
    for (int sign = -1; sign <= 1; sign += 2) {
        struct dp_call c = {.argc = 0};

        p.skew = sign * 125 * 1000000LL;
        dp_build(&p, T0, 1, 0, &c);
        r = redisCommandArgv(rc, c.argc, c.argv, c.lens);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->element[0]->type == REDIS_REPLY_ERROR &&
                          strncmp(r->element[0]->str, "CLOCK: ", 7) == 0,
                      "skew %d: not a CLOCK error", sign);
        freeReplyObject(r);
    }
    r = redisCommand(rc, "EXISTS %s", p.l[0].key);
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);
    /* a minute is within reach */
    p.skew = 59 * 1000000LL;
    ck_assert(dp_step(&p, T0, 1, 0, "59 s apart"));
    dp_free(&p);
}
END_TEST

/*
 * The daemon's own call for period limits, through script_call_build: the
 * spec carries the boundaries around the daemon's clock (now), is rebuilt
 * when its period ends, and a policy of the same limits in another zone is
 * never sent the other's.
 */
START_TEST(daemon_sends_a_periods_boundaries)
{
    char *cause = NULL;
    struct rl_limit l1[] = {{RL_ALGO_FIXED_WINDOW, 10, 0, 10, RL_ALIGN_FIRST,
                             {RL_PERIOD_MINUTE, 0, NULL}, NULL, 0, 0}};
    struct rl_limit l2[] = {{RL_ALGO_FIXED_WINDOW, 10, 0, 10, RL_ALIGN_FIRST,
                             {RL_PERIOD_DAY, 0, period_tz("Pacific/Kiritimati", 0, &cause)}, NULL, 0, 0}};
    char n1[] = "pm", n2[] = "pd";
    struct rl_policy p1 = {.name = n1, .limits = l1, .nlimits = 1};
    struct rl_policy p2 = {.name = n2, .limits = l2, .nlimits = 1};
    struct rl_check_req a = {.policy = &p1, .key = "{e:a}", .key_len = 5, .cost = 1};
    struct rl_check_req b = {.policy = &p2, .key = "{e:a}", .key_len = 5, .cost = 1};
    const struct rl_check_req *reqs[] = {&a, &b};
    struct rl_script_call c = {0};
    struct answer ans[2];
    int64_t bd[RL_PERIOD_BOUNDS], now, t0, t1;
    char want[160];
    redisReply *r;

    ck_assert_ptr_nonnull(l2[0].period.tz);
    t0 = now_unix_us();
    daemon_call(&c, reqs, 2, ans);
    now = now_unix_us();
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(ans[k].res.status, RL_BACKEND_OK);
        ck_assert(ans[k].res.allowed);
        ck_assert_int_eq(ans[k].res.limits[0].remaining, 9);
    }
    /* the minute's reset: by Redis's clock, within the minute */
    ck_assert_int_gt(ans[0].res.limits[0].reset_ms, 0);
    ck_assert_int_le(ans[0].res.limits[0].reset_ms, 60000);
    algo_period_bounds(&l2[0], now, bd);
    ck_assert_int_le(ans[1].res.limits[0].reset_ms, (bd[3] - now) / 1000 + 2000);
    ck_assert_int_ge(ans[1].res.limits[0].reset_ms, (bd[3] - now) / 1000 - 2000);
    snprintf(want, sizeof(want), "fwp 10 %lld,%lld,%lld,", (long long)bd[0] / 1000000,
             (long long)bd[1] / 1000000, (long long)bd[2] / 1000000);
    ck_assert_msg(memmem(c.buf, c.len, want, strlen(want)) != NULL, "no \"%s\" in the call",
                  want);
    r = redisCommand(rc, "EXISTS {e:a}:fw:minute@UTC {e:a}:fw:day@Pacific/Kiritimati");
    ck_assert_int_eq(r->integer, 2);
    freeReplyObject(r);
    /* a spec whose period ended is built again: make the cached one stale */
    for (size_t i = 0; i < RL_SCRIPT_SPECS; i++)
        if (c.specs[i] != NULL && c.specs[i]->periods) {
            c.specs[i]->until_us = now - 1;
            memcpy(c.specs[i]->bytes + c.specs[i]->len - 40, "garbage", 7);
        }
    daemon_call(&c, reqs, 2, ans);
    t1 = now_unix_us();
    for (int k = 0; k < 2; k++) {
        /* A period that ended between the two calls (the minute, on a slow
         * host) opened a new window: 9 is then right too. */
        bool crossed = k == 0 ? t0 / 60000000 != t1 / 60000000 : t0 < bd[2] || t1 >= bd[3];
        int64_t rem = ans[k].res.limits[0].remaining;

        ck_assert_msg(ans[k].res.status == RL_BACKEND_OK && (rem == 8 || (crossed && rem == 9)),
                      "after the rebuild: status %d remaining %lld (period %s between the calls)",
                      ans[k].res.status, (long long)rem, crossed ? "ended" : "not ended");
    }
    script_call_free(&c);
}
END_TEST

static Suite *
diff_suite(void)
{
    Suite *s = suite_create("algo_diff");
    TCase *tc = tcase_create("lua_vs_c");

    tcase_set_timeout(tc, 900);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, script_is_the_embedded_one_and_reads_redis_time);
    /* RL_ALGO_COUNT: fixed_window aligned to the epoch */
    tcase_add_loop_test(tc, each_algorithm_matches_its_twin, 0, RL_ALGO_COUNT + 1);
    tcase_add_loop_test(tc, each_algorithm_matches_on_its_boundaries, 0,
                        RL_ALGO_COUNT + 1);
    tcase_add_test(tc, mixed_policies_match_and_stay_atomic);
    tcase_add_loop_test(tc, charges_match_and_pay_back, 0, RL_ALGO_COUNT + 1);
    tcase_add_loop_test(tc, reserve_and_settle_match, 0, RL_ALGO_COUNT + 1);
    tcase_add_test(tc, aligned_window_opens_on_the_epoch_multiple);
    tcase_add_test(tc, log_entries_in_one_microsecond_are_all_kept);
    tcase_add_test(tc, log_forced_keeps_the_newest_limit_members);
    tcase_add_test(tc, log_rebases_before_its_running_total_loses_precision);
    tcase_add_test(tc, log_drops_a_bounded_number_of_expired_entries);
    tcase_add_test(tc, a_removed_ttl_is_put_back);
    tcase_add_test(tc, leases_releases_and_expiries_match);
    tcase_add_test(tc, release_twice_and_after_the_end);
    tcase_add_test(tc, reservations_match);
    tcase_add_test(tc, o1_state_is_one_string_set_with_its_ttl);
    tcase_add_test(tc, o1_reads_the_text_layout_and_ignores_garbage);
    tcase_add_test(tc, log_member_of_garbage_fails_its_check);
    tcase_add_test(tc, daemon_batch_fails_one_check_alone);
    tcase_add_test(tc, plain_checks_fail_alone_for_every_algorithm);
    tcase_add_loop_test(tc, plain_runs_answer_as_each_check_alone, 0, 8);
    tcase_add_test(tc, once_charges_count_once_and_keep_the_newest_seq);
    tcase_add_test(tc, daemon_admin_ops_answer_like_a_check_after_them);
    tcase_add_test(tc, a_block_denies_a_policy_whose_first_limit_is_a_log);
    tcase_add_loop_test(tc, period_algorithms_match_their_twins, 0, RL_ARRAY_LEN(periods));
    tcase_add_loop_test(tc, periods_match_on_their_boundaries, 0, RL_ARRAY_LEN(periods));
    tcase_add_test(tc, period_numbers_on_a_short_day);
    tcase_add_test(tc, a_clock_a_period_away_fails_the_check);
    tcase_add_test(tc, daemon_sends_a_periods_boundaries);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    int status;

    if (test_redis_start(&srv) != 0) {
        fprintf(stderr, "check_algo_diff: needs a redis-server\n");
        return EXIT_FAILURE;
    }
    status = rl_unit_run(diff_suite(), CK_FORK_GETENV);
    test_redis_stop(&srv);
    return status;
}
