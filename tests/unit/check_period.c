/*
 * check_period.c — calendar periods (src/period.c) against glibc: the zones
 * period.c reads itself from the tz database, compared with what glibc's
 * localtime_r and mktime say under TZ for the same zone, for many zones,
 * every DST change of 2026-2027 in Europe/Berlin, America/New_York,
 * Australia/Lord_Howe (a 30-minute shift) and a zone without DST, month
 * ends, leap years and every week start.
 *
 * glibc is the referee, read independently: its transitions are found by
 * stepping its offsets hour by hour and bisecting each change.  A period's
 * start is checked against its definition (period.h) with glibc's clock
 * alone: the clock reads the period's first moment at the start or later,
 * read an earlier time the second before, and never read it before (the
 * clock only ever steps back at a transition, so the latest it read before
 * the start is at the start's second or at a transition's); and against
 * mktime wherever that first moment exists exactly once.
 *
 * The DST table of issue 22 is printed by dst_table_2026_2027 (zone, change,
 * the day's length and reset as the daemon answers them, mktime's).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "period.h"
#include "unit.h"

#define DAY 86400
/* Check's ck_assert_* writes to a pipe on every pass: millions here.  These
 * say nothing until they fail. */
#define MUST(cond, ...)                                                              \
    do {                                                                             \
        if (!(cond))                                                                 \
            ck_abort_msg(__VA_ARGS__);                                               \
    } while (0)
#define MUST_EQ(a, b)                                                                \
    MUST((a) == (b), "%s == %s: %" PRId64 " vs %" PRId64, #a, #b, (int64_t)(a), (int64_t)(b))
#define Y2024 1704067200LL /* 2024-01-01T00:00:00Z */
#define Y2026 1767225600LL
#define Y2028 1830297600LL
#define Y2029 1861920000LL

/* Zones of every shape: DST north and south, 30- and 45-minute offsets,
 * negative DST (Dublin, Casablanca), changes at midnight (Havana, Santiago,
 * Asuncion, Beirut, Cairo), a 30-minute shift (Lord Howe), big offsets
 * (Kiritimati), a skipped day in its past (Apia), and none at all. */
static const char *const zones[] = {
    "Europe/Berlin",        "America/New_York",    "Australia/Lord_Howe", "Asia/Kolkata",
    "UTC",                  "Europe/London",       "Europe/Dublin",       "Africa/Casablanca",
    "America/Havana",       "America/Santiago",    "America/Asuncion",    "Asia/Beirut",
    "Africa/Cairo",         "Asia/Kathmandu",      "Pacific/Chatham",     "Pacific/Kiritimati",
    "Pacific/Apia",         "Australia/Adelaide",  "America/St_Johns",    "Asia/Tehran",
    "America/Sao_Paulo",    "Antarctica/Troll",    "America/Nuuk",        "Pacific/Norfolk",
    "Atlantic/Azores",      "America/Los_Angeles", "Asia/Tokyo",          "Etc/GMT+5",
    "Asia/Gaza",            "Europe/Moscow",       "America/Scoresbysund", "Pacific/Auckland",
    "Australia/Eucla",      "America/Godthab",     "Asia/Jerusalem",      "America/Mexico_City",
};

static void
use_tz(const char *name)
{
    setenv("TZ", name, 1);
    tzset();
}

static int32_t
glibc_off(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;

    MUST(localtime_r(&tt, &tm) != NULL, "localtime_r");
    return (int32_t)tm.tm_gmtoff;
}

/* glibc's local clock at t, as seconds (local time read as if UTC). */
static int64_t
glibc_local(int64_t t)
{
    return t + glibc_off(t);
}

/* glibc's transitions in [from, to): stepped by the hour, bisected; the
 * last answer is kept (the week tests ask eight times). */
static size_t
glibc_transitions(int64_t from, int64_t to, int64_t *out, size_t max)
{
    static char name[128];
    static int64_t memo_from, memo_to, memo[512];
    static size_t memo_n;
    const char *tz = getenv("TZ");
    size_t n = 0;

    if (strcmp(name, tz) == 0 && memo_from == from && memo_to == to && memo_n <= max) {
        memcpy(out, memo, memo_n * sizeof(*out));
        return memo_n;
    }
    for (int64_t t = from; t < to && n < max; t += 3600) {
        int64_t lo = t, hi = t + 3600;
        if (glibc_off(lo) == glibc_off(hi))
            continue;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if (glibc_off(mid) == glibc_off(lo))
                lo = mid;
            else
                hi = mid;
        }
        out[n++] = hi;
    }
    if (n <= RL_ARRAY_LEN(memo)) {
        snprintf(name, sizeof(name), "%s", tz);
        memo_from = from;
        memo_to = to;
        memo_n = n;
        memcpy(memo, out, n * sizeof(*out));
    }
    return n;
}

static const struct rl_tz *
zone(const char *name)
{
    char *cause = NULL;
    const struct rl_tz *z = period_tz(name, 0, &cause);

    MUST(z != NULL, "%s: %s", name, cause ? cause : "?");
    return z;
}

/* ---- offsets ------------------------------------------------------------------- */

START_TEST(offsets_match_glibc_at_every_transition_and_between)
{
    const char *name = zones[_i];
    const struct rl_tz *z = zone(name);
    int64_t tr[512];
    size_t n;
    uint64_t s = 88172645463325252ULL;

    use_tz(name);
    n = glibc_transitions(Y2024, Y2029, tr, 512);
    for (size_t i = 0; i < n; i++)
        for (int64_t d = -2; d <= 1; d++)
            MUST(period_tz_offset(z, tr[i] + d) == glibc_off(tr[i] + d),
                          "%s at %" PRId64 ": ours %d, glibc %d", name, tr[i] + d,
                          period_tz_offset(z, tr[i] + d), glibc_off(tr[i] + d));
    for (int k = 0; k < 20000; k++) {
        int64_t t;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        /* 1990..2100: the file's own transitions and its rule's */
        t = 631152000LL + (int64_t)(s % 3471292800ULL);
        MUST(period_tz_offset(z, t) == glibc_off(t), "%s at %" PRId64 ": %d vs %d",
                      name, t, period_tz_offset(z, t), glibc_off(t));
    }
}
END_TEST

/* ---- periods by their definition ---------------------------------------------- */

/* The first moment of the period of kind p that holds local time l: the
 * grid, computed with glibc's timegm/gmtime_r (independent of period.c). */
static int64_t
grid_of(const struct rl_period *p, int64_t l)
{
    time_t tt = (time_t)l;
    struct tm tm;

    MUST(gmtime_r(&tt, &tm) != NULL, "gmtime_r");
    tm.tm_sec = 0;
    if (p->kind == RL_PERIOD_MINUTE)
        return (int64_t)timegm(&tm);
    tm.tm_min = 0;
    if (p->kind == RL_PERIOD_HOUR)
        return (int64_t)timegm(&tm);
    tm.tm_hour = 0;
    if (p->kind == RL_PERIOD_WEEK) {
        int ws = p->week_start ? p->week_start - 1 : 1;
        tm.tm_mday -= (tm.tm_wday - ws + 7) % 7;
    } else if (p->kind == RL_PERIOD_MONTH) {
        tm.tm_mday = 1;
    } else if (p->kind == RL_PERIOD_YEAR) {
        tm.tm_mday = 1;
        tm.tm_mon = 0;
    }
    return (int64_t)timegm(&tm);
}

/*
 * s is where the clock first reaches local time g (days and longer): it
 * reads g or later at s, and before s it read only earlier times: at s - 1
 * and at the second before each transition of the 52 hours before s (the
 * clock rises between transitions, so those are its highs).
 */
static void
assert_first_reach(const char *name, int64_t s, int64_t g, const int64_t *tr, size_t ntr,
                   const char *what)
{
    MUST(glibc_local(s) >= g, "%s %s: at %" PRId64 " the clock reads %" PRId64
                  ", before %" PRId64, name, what, s, glibc_local(s), g);
    MUST(glibc_local(s - 1) < g, "%s %s: at %" PRId64 " - 1 the clock read %" PRId64
                  ", not before %" PRId64, name, what, s, glibc_local(s - 1), g);
    for (size_t i = 0; i < ntr; i++)
        if (tr[i] < s && tr[i] > s - 2 * 26 * 3600)
            MUST(glibc_local(tr[i] - 1) < g, "%s %s: the clock read %" PRId64
                          " before %" PRId64, name, what, glibc_local(tr[i] - 1), s);
}

/* mktime of local time g when the clock reads it exactly once (mktime
 * with tm_isdst 0, 1 and -1 finds every instant that reads it), else -1. */
static int64_t
mktime_once(int64_t g)
{
    time_t tt = (time_t)g;
    struct tm tm;
    int64_t found = -1;

    gmtime_r(&tt, &tm);
    for (int dst = -1; dst <= 1; dst++) {
        struct tm x = tm;
        int64_t u;

        x.tm_isdst = dst;
        u = (int64_t)mktime(&x);
        if (glibc_local(u) != g)
            continue;
        if (found >= 0 && found != u)
            return -1; /* read twice */
        found = u;
    }
    return found;
}

static void
periods_of_kind(const char *name, int kind, int week_start)
{
    const struct rl_tz *z = zone(name);
    struct rl_period p = {kind, week_start, z};
    int64_t tr[512];
    size_t ntr;
    int64_t t = Y2026 - 8 * DAY, end = Y2028 + 8 * DAY, prev = -1;
    int mk = 0;

    use_tz(name);
    ntr = glibc_transitions(Y2026 - 20 * DAY, Y2028 + 20 * DAY, tr, 512);
    while (t < end) {
        int64_t b[RL_PERIOD_BOUNDS], s = period_start(&p, t), e = period_next(&p, t);
        int64_t g = grid_of(&p, glibc_local(s)), m;

        MUST(s <= t && t < e, "%s: %" PRId64 " not in [%" PRId64 ", %" PRId64 ")",
                      name, t, s, e);
        period_bounds(&p, t, b);
        MUST_EQ(b[2], s);
        MUST_EQ(b[3], e);
        for (int i = 0; i + 1 < RL_PERIOD_BOUNDS; i++)
            MUST(b[i] < b[i + 1], "%s: bounds not rising at %d", name, i);
        MUST_EQ(period_start(&p, b[1]), b[1]);
        MUST_EQ(period_next(&p, b[1]), b[2]);
        MUST_EQ(period_next(&p, b[4]), b[5]);
        if (prev >= 0)
            MUST(s == prev, "%s: periods not consecutive at %" PRId64, name, s);
        assert_first_reach(name, s, g, tr, ntr, period_kind_name(kind));
        /* the next one starts at the next grid point the clock reaches */
        assert_first_reach(name, e, grid_of(&p, glibc_local(e)), tr, ntr, "next");
        MUST(grid_of(&p, glibc_local(e)) > g, "%s: no new %s at %" PRId64, name,
                      period_kind_name(kind), e);
        if ((m = mktime_once(g)) >= 0) {
            MUST(m == s, "%s %s: mktime %" PRId64 ", ours %" PRId64, name,
                          period_kind_name(kind), m, s);
            mk++;
        }
        /* inside it too, not only at its start */
        MUST_EQ(period_start(&p, s + (e - s) / 2), s);
        MUST_EQ(period_next(&p, s + (e - s) / 2), e);
        prev = t = e;
    }
    MUST(mk > 0, "%s: mktime never compared", name);
}

START_TEST(days_match_glibc)
{
    periods_of_kind(zones[_i], RL_PERIOD_DAY, 0);
}
END_TEST

START_TEST(months_and_years_match_glibc)
{
    periods_of_kind(zones[_i], RL_PERIOD_MONTH, 0);
    periods_of_kind(zones[_i], RL_PERIOD_YEAR, 0);
}
END_TEST

START_TEST(weeks_match_glibc_for_every_week_start)
{
    for (int ws = 0; ws <= 7; ws++)
        periods_of_kind(zones[_i], RL_PERIOD_WEEK, ws);
}
END_TEST

/*
 * Hours and minutes: a new one starts at each instant the clock reads a
 * whole hour (minute) or jumps forward past one.  Checked around every
 * transition of 2024..2028 and at samples between: no boundary strictly
 * inside a period (every minute of it, transitions are whole minutes), one
 * at its start.
 */
static int
clock_boundary(int64_t u, int64_t g)
{
    int64_t l = glibc_local(u), before = glibc_local(u - 1) + 1;

    return l % g == 0 || (l > before && (l - 1) / g * g >= before);
}

static void
clock_periods(const char *name, int kind)
{
    const struct rl_tz *z = zone(name);
    struct rl_period p = {kind, 0, z};
    int64_t g = kind == RL_PERIOD_HOUR ? 3600 : 60, tr[512], at[600];
    size_t ntr, nat = 0;

    use_tz(name);
    ntr = glibc_transitions(Y2024, Y2029, tr, 512);
    for (size_t i = 0; i < ntr && nat + 3 < RL_ARRAY_LEN(at); i++) {
        at[nat++] = tr[i] - 1;
        at[nat++] = tr[i];
        at[nat++] = tr[i] + 1800;
    }
    for (int64_t t = Y2026; t < Y2028 && nat < RL_ARRAY_LEN(at); t += 7 * DAY + 1234)
        at[nat++] = t;
    for (size_t i = 0; i < nat; i++) {
        int64_t s = period_start(&p, at[i]), e = period_next(&p, at[i]);

        MUST(s <= at[i] && at[i] < e, "%s", name);
        MUST(clock_boundary(s, g), "%s %s: %" PRId64 " starts no %s", name,
                      period_kind_name(kind), s, period_kind_name(kind));
        MUST(clock_boundary(e, g), "%s: %" PRId64 " ends nothing", name, e);
        for (int64_t u = s + 1; u < e; u++) {
            /* transitions and readings are at whole minutes */
            if ((u - s) % 60 != 0 && u % 60 != 0)
                continue;
            MUST(!clock_boundary(u, g), "%s %s: a boundary at %" PRId64
                          " inside [%" PRId64 ", %" PRId64 ")",
                          name, period_kind_name(kind), u, s, e);
        }
    }
}

START_TEST(hours_and_minutes_follow_the_clock)
{
    clock_periods(zones[_i], RL_PERIOD_HOUR);
    clock_periods(zones[_i], RL_PERIOD_MINUTE);
}
END_TEST

/* ---- zones glibc and period.c both read from a tz database of our own -------- */

static char tzdir[64];

static void
put32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* A TZif version 2 file: n transitions at[i] to offset off[i], type 0 being
 * off0, then footer (a POSIX TZ string, may be ""). */
static void
write_tzif(const char *name, int32_t off0, const int64_t *at, const int32_t *off, size_t n,
           const char *footer)
{
    char path[128];
    FILE *f;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", tzdir, name);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    /* a version 1 block of one type, then the 64-bit block */
    fwrite("TZif2", 1, 5, f);
    for (int i = 0; i < 15; i++)
        fputc(0, f);
    put32(f, 0), put32(f, 0), put32(f, 0), put32(f, 0), put32(f, 1), put32(f, 4);
    put32(f, (uint32_t)off0), fputc(0, f), fputc(0, f);
    fwrite("ZZZ", 1, 4, f);
    fwrite("TZif2", 1, 5, f);
    for (int i = 0; i < 15; i++)
        fputc(0, f);
    put32(f, 0), put32(f, 0), put32(f, 0), put32(f, (uint32_t)n), put32(f, (uint32_t)n + 1);
    put32(f, 4);
    for (size_t i = 0; i < n; i++)
        put32(f, (uint32_t)((uint64_t)at[i] >> 32)), put32(f, (uint32_t)at[i]);
    for (size_t i = 0; i < n; i++)
        fputc((int)i + 1, f);
    put32(f, (uint32_t)off0), fputc(0, f), fputc(0, f);
    for (size_t i = 0; i < n; i++)
        put32(f, (uint32_t)off[i]), fputc(off[i] > off0, f), fputc(0, f);
    fwrite("ZZZ", 1, 4, f);
    fprintf(f, "\n%s\n", footer);
    rc = fclose(f);
    MUST_EQ(rc, 0);
}

static void
own_tzdir(void)
{
    snprintf(tzdir, sizeof(tzdir), "/tmp/check_period.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tzdir));
    setenv("TZDIR", tzdir, 1);
}

static void
own_tzdir_remove(void)
{
    static const char *const files[] = {"Back", "Skip", "Rule"};
    char path[128];

    for (size_t i = 0; i < RL_ARRAY_LEN(files); i++) {
        snprintf(path, sizeof(path), "%s/%s", tzdir, files[i]);
        unlink(path);
    }
    rmdir(tzdir);
    unsetenv("TZDIR");
}

/*
 * What no zone of 2024..2028 does: a clock that falls back across midnight
 * (00:30 +1 to 23:30 +0: day 10 goes on through the repeated half hour and
 * lasts 25 hours), one that skips a whole day (as Apia did in 2011: -10 to
 * +14), and a footer rule of day numbers, odd times and a negative DST
 * that falls back across midnight every year (00:15 +2 to 23:45 +1:30).
 */
START_TEST(own_zones_match_glibc)
{
    int64_t back_at[] = {Y2026 + 160 * DAY - 1800}; /* 2026-06-09T23:30Z */
    int32_t back_off[] = {0};
    int64_t skip_at[] = {Y2026 + 100 * DAY + 10 * 3600}; /* 2026-04-11T10:00Z */
    int32_t skip_off[] = {14 * 3600};
    static const char *const names[] = {"Back", "Skip", "Rule"};

    write_tzif("Back", 3600, back_at, back_off, 1, "");
    write_tzif("Skip", -10 * 3600, skip_at, skip_off, 1, "");
    /* glibc reads a footer only after a transition (RFC 8536 says always) */
    int64_t rule_at[] = {1577836800LL}; /* 2020-01-01 */
    int32_t rule_off[] = {7200};

    write_tzif("Rule", 3600, rule_at, rule_off, 1, "<+02>-2<+0130>-1:30,60/0:15,J300/26:30");
    for (size_t i = 0; i < RL_ARRAY_LEN(names); i++) {
        periods_of_kind(names[i], RL_PERIOD_DAY, 0);
        periods_of_kind(names[i], RL_PERIOD_WEEK, 1);
        periods_of_kind(names[i], RL_PERIOD_MONTH, 0);
        clock_periods(names[i], RL_PERIOD_HOUR);
    }
    {
        struct rl_period back = {RL_PERIOD_DAY, 0, zone("Back")};
        struct rl_period skip = {RL_PERIOD_DAY, 0, zone("Skip")};
        int64_t t = back_at[0] + 600; /* 23:40 the second time: day 10 still */

        MUST_EQ(period_start(&back, t), back_at[0] - 1800);
        MUST_EQ(period_length(&back, t), 25 * 3600);
        /* the day the clock jumps from 00:00 of the 11th (-10) to 00:00 of
         * the 12th (+14) does not exist: the 10th ends at the jump */
        MUST_EQ(period_next(&skip, skip_at[0] - 1), skip_at[0]);
        MUST_EQ(period_length(&skip, skip_at[0]), DAY);
    }
}
END_TEST

/* ---- exact numbers --------------------------------------------------------------- */

static int64_t
utc(int y, int mo, int d, int h, int mi)
{
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi};

    return (int64_t)timegm(&tm);
}

START_TEST(known_lengths)
{
    struct rl_period berlin = {RL_PERIOD_DAY, 0, zone("Europe/Berlin")};
    struct rl_period ny = {RL_PERIOD_DAY, 0, zone("America/New_York")};
    struct rl_period lh = {RL_PERIOD_DAY, 0, zone("Australia/Lord_Howe")};
    struct rl_period lh_hour = {RL_PERIOD_HOUR, 0, zone("Australia/Lord_Howe")};
    struct rl_period month = {RL_PERIOD_MONTH, 0, NULL};
    struct rl_period year = {RL_PERIOD_YEAR, 0, NULL};
    struct rl_period sunday = {RL_PERIOD_WEEK, 1, NULL};

    /* 2026-03-29, Berlin springs forward: 23 hours; 2026-10-25: 25 */
    ck_assert_int_eq(period_length(&berlin, utc(2026, 3, 29, 12, 0)), 23 * 3600);
    ck_assert_int_eq(period_start(&berlin, utc(2026, 3, 29, 12, 0)), utc(2026, 3, 28, 23, 0));
    ck_assert_int_eq(period_length(&berlin, utc(2026, 10, 25, 12, 0)), 25 * 3600);
    ck_assert_int_eq(period_length(&berlin, utc(2026, 10, 26, 12, 0)), 24 * 3600);
    /* 2026-03-08 and 2026-11-01 in New York */
    ck_assert_int_eq(period_length(&ny, utc(2026, 3, 8, 17, 0)), 23 * 3600);
    ck_assert_int_eq(period_length(&ny, utc(2026, 11, 1, 17, 0)), 25 * 3600);
    /* Lord Howe: 2026-04-05 falls back 30 minutes, 2026-10-04 springs 30 */
    ck_assert_int_eq(period_length(&lh, utc(2026, 4, 5, 3, 0)), 24 * 3600 + 1800);
    ck_assert_int_eq(period_length(&lh, utc(2026, 10, 4, 3, 0)), 24 * 3600 - 1800);
    /* its clock's hour 01:00 on 2026-04-05 lasts 90 minutes (02:00 +11 is
     * 01:30 +10:30), and 02:00 on 2026-10-04 only 30 */
    ck_assert_int_eq(period_length(&lh_hour, utc(2026, 4, 4, 14, 10)), 5400);
    ck_assert_int_eq(period_length(&lh_hour, utc(2026, 10, 3, 15, 40)), 1800);
    /* months of 28..31 days; 2028 is a leap year, 2100 is not */
    ck_assert_int_eq(period_length(&month, utc(2027, 2, 10, 0, 0)), 28 * DAY);
    ck_assert_int_eq(period_length(&month, utc(2028, 2, 10, 0, 0)), 29 * DAY);
    ck_assert_int_eq(period_length(&month, utc(2100, 2, 10, 0, 0)), 28 * DAY);
    ck_assert_int_eq(period_length(&month, utc(2026, 4, 30, 23, 59)), 30 * DAY);
    ck_assert_int_eq(period_length(&month, utc(2026, 12, 31, 23, 59)), 31 * DAY);
    ck_assert_int_eq(period_next(&month, utc(2026, 12, 31, 23, 59)), utc(2027, 1, 1, 0, 0));
    ck_assert_int_eq(period_length(&year, utc(2028, 6, 1, 0, 0)), 366 * DAY);
    ck_assert_int_eq(period_length(&year, utc(2027, 6, 1, 0, 0)), 365 * DAY);
    /* 2026-01-01 is a Thursday: its sunday week started 2025-12-28 */
    ck_assert_int_eq(period_start(&sunday, utc(2026, 1, 1, 8, 0)), utc(2025, 12, 28, 0, 0));
}
END_TEST

START_TEST(names_and_errors)
{
    char *cause = NULL;

    ck_assert_str_eq(period_tz_name(NULL), "UTC");
    ck_assert_str_eq(period_tz_name(zone("Europe/Berlin")), "Europe/Berlin");
    ck_assert_ptr_eq(zone("Europe/Berlin"), zone("Europe/Berlin"));
    ck_assert_ptr_eq(period_tz("Europe/Berlin", 1, &cause), zone("Europe/Berlin"));
    ck_assert_int_eq(period_kind_of("month"), RL_PERIOD_MONTH);
    ck_assert_int_eq(period_kind_of("fortnight"), RL_PERIOD_NONE);
    ck_assert_int_eq(period_week_start_of("sunday"), 1);
    ck_assert_str_eq(period_week_start_name(0), "monday");
    ck_assert_str_eq(period_week_start_name(period_week_start_of("friday")), "friday");
    static const char *const bad[] = {"Europe/Berln", "../etc/passwd", "/etc/localtime",
                                      "Europe/../Europe/Berlin", "", "Europe", "zone.tab",
                                      "right/Europe/Berlin", "leapseconds", "-x", "a//b"};
    for (size_t i = 0; i < RL_ARRAY_LEN(bad); i++) {
        cause = NULL;
        ck_assert_msg(period_tz(bad[i], 0, &cause) == NULL, "\"%s\" accepted", bad[i]);
        ck_assert_ptr_nonnull(cause);
        free(cause);
    }
}
END_TEST

/* ---- zones requests name: a table of their own (issue 31) ---------------------- */

/* As period.c bounds it (docs/API.md, "Calendar periods"). */
#define REQUESTED_MAX 2048

static void
tzdir_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tzdir, name);
}

static void
tz_link(const char *from, const char *to)
{
    char a[128], b[128];

    tzdir_path(a, sizeof(a), from);
    tzdir_path(b, sizeof(b), to);
    MUST(link(a, b) == 0, "link %s %s", a, b);
}

/*
 * A request's names lead to files: links and "posix/" paths are one zone,
 * named by its file; hard links are zones of their own that share one
 * table of offsets; a link out of $TZDIR is unknown; the requests' table
 * holds REQUESTED_MAX zones and then refuses, while configured zones (a
 * table of their own) still load, and serve requests by their names.
 */
START_TEST(requested_zones_own_table)
{
    int64_t at[] = {Y2026 + 100 * DAY};
    int32_t off[] = {3600};
    struct period_tz_stats st;
    char path[128], *cause = NULL;
    const struct rl_tz *base, *link_z, *conf;

    write_tzif("Base", 0, at, off, 1, "");
    write_tzif("Conf", 7200, NULL, NULL, 0, "");
    tzdir_path(path, sizeof(path), "posix");
    MUST(symlink(".", path) == 0, "symlink %s", path);
    tzdir_path(path, sizeof(path), "Out");
    MUST(symlink("/usr/share/zoneinfo/Asia/Tokyo", path) == 0, "symlink %s", path);
    tz_link("Base", "Link");

    base = zone("posix/posix/Base");
    ck_assert_str_eq(period_tz_name(base), "Base");
    ck_assert_ptr_eq(zone("Base"), base);
    ck_assert_ptr_eq(zone("posix/Base"), base);
    link_z = zone("Link");
    ck_assert_ptr_ne(link_z, base);
    ck_assert_str_eq(period_tz_name(link_z), "Link");
    for (int64_t t = Y2026 + 99 * DAY; t < Y2026 + 102 * DAY; t += 3600)
        MUST_EQ(period_tz_offset(link_z, t), period_tz_offset(base, t));
    MUST_EQ(period_tz_offset(base, Y2026 + 101 * DAY), 3600);
    ck_assert_ptr_null(period_tz("Out", 0, &cause));
    ck_assert_ptr_nonnull(strstr(cause, "leads out of the tz database"));
    free(cause);
    cause = NULL;
    period_tz_stats(&st);
    MUST_EQ(st.requested, 2);
    MUST_EQ(st.configured, 0);

    /* fill the requests' table with hard links of Base */
    for (int i = 0; i <= REQUESTED_MAX; i++) {
        char name[32];

        snprintf(name, sizeof(name), "L%04d", i);
        tz_link("Base", name);
    }
    for (int i = 0; i < REQUESTED_MAX - 2; i++) {
        char name[32];

        snprintf(name, sizeof(name), "L%04d", i);
        MUST(period_tz(name, 0, &cause) != NULL, "%s: %s", name, cause ? cause : "?");
    }
    ck_assert_ptr_null(period_tz("L2046", 0, &cause));
    ck_assert_ptr_nonnull(strstr(cause, "2048 zones named by requests are loaded already"));
    free(cause);
    cause = NULL;
    ck_assert_ptr_eq(zone("L0000"), zone("posix/L0000")); /* loaded ones still answer */
    /* a configuration loads its zones, and requests get those by name */
    conf = period_tz("Conf", 1, &cause);
    ck_assert_ptr_nonnull(conf);
    ck_assert_ptr_eq(zone("Conf"), conf);
    MUST_EQ(period_tz_offset(zone("Conf"), Y2026), 7200);
    period_tz_stats(&st);
    MUST_EQ(st.requested, REQUESTED_MAX);
    MUST_EQ(st.configured, 1);
    MUST_EQ(st.refused, 1);

    for (int i = 0; i <= REQUESTED_MAX; i++) {
        snprintf(path, sizeof(path), "%s/L%04d", tzdir, i);
        unlink(path);
    }
    static const char *const files[] = {"Base", "Conf", "Link", "posix", "Out"};
    for (size_t i = 0; i < RL_ARRAY_LEN(files); i++) {
        tzdir_path(path, sizeof(path), files[i]);
        unlink(path);
    }
}
END_TEST

/* ---- the table for issue 22's report ------------------------------------------ */

START_TEST(dst_table_2026_2027)
{
    static const char *const table_zones[] = {"Europe/Berlin", "America/New_York",
                                              "Australia/Lord_Howe", "Asia/Kolkata"};

    printf("zone | change (local) | day | period length | reset at 00:00:01 | mktime's\n");
    for (size_t k = 0; k < RL_ARRAY_LEN(table_zones); k++) {
        const char *name = table_zones[k];
        struct rl_period p = {RL_PERIOD_DAY, 0, zone(name)};
        int64_t tr[64];
        size_t n;

        use_tz(name);
        n = glibc_transitions(Y2026, Y2028, tr, 64);
        if (n == 0) {
            /* no change: the days around the others' are all 24 hours */
            for (int64_t t = Y2026; t < Y2028; t += DAY)
                ck_assert_int_eq(period_length(&p, t), DAY);
            printf("%s | none (UTC+%d:%02d all year) | every day | 86400 s (24 h) | 86399 s | "
                   "86400 s\n",
                   name, glibc_off(Y2026) / 3600, glibc_off(Y2026) % 3600 / 60);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t s = period_start(&p, tr[i]), e = period_next(&p, tr[i]);
            time_t a = (time_t)(tr[i] - 1), b = (time_t)tr[i], sd = (time_t)s;
            struct tm ta, tb, td = {0}, tn = {0};
            char when[64], day[16];
            int64_t mk;

            localtime_r(&a, &ta);
            localtime_r(&b, &tb);
            localtime_r(&sd, &td);
            strftime(day, sizeof(day), "%Y-%m-%d", &td);
            /* the time the clock would have read: the second before, plus one */
            {
                time_t r = (time_t)(glibc_local(tr[i] - 1) + 1);
                struct tm tr_;
                gmtime_r(&r, &tr_);
                snprintf(when, sizeof(when), "%02d:%02d %+.1fh -> %02d:%02d %+.1fh",
                         tr_.tm_hour, tr_.tm_min, ta.tm_gmtoff / 3600.0, tb.tm_hour, tb.tm_min,
                         tb.tm_gmtoff / 3600.0);
            }
            /* mktime's day: local midnight to the next local midnight */
            tn = td;
            tn.tm_mday++;
            tn.tm_hour = tn.tm_min = tn.tm_sec = 0;
            tn.tm_isdst = -1;
            td.tm_hour = td.tm_min = td.tm_sec = 0;
            td.tm_isdst = -1;
            mk = (int64_t)mktime(&tn) - (int64_t)mktime(&td);
            ck_assert_int_eq(mk, e - s);
            ck_assert_int_ne(e - s, DAY);
            printf("%s | %s | %s | %" PRId64 " s (%.1f h) | %" PRId64 " s | %" PRId64 " s\n",
                   name, when, day, e - s, (e - s) / 3600.0, e - s - 1, mk);
        }
    }
}
END_TEST

static Suite *
period_suite(void)
{
    Suite *s = suite_create("period");
    int nz = (int)RL_ARRAY_LEN(zones);
    TCase *tc = tcase_create("glibc");

    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, offsets_match_glibc_at_every_transition_and_between, 0, nz);
    tcase_add_loop_test(tc, days_match_glibc, 0, nz);
    tcase_add_loop_test(tc, months_and_years_match_glibc, 0, nz);
    tcase_add_loop_test(tc, weeks_match_glibc_for_every_week_start, 0, nz);
    tcase_add_loop_test(tc, hours_and_minutes_follow_the_clock, 0, nz);
    suite_add_tcase(s, tc);
    tc = tcase_create("numbers");
    tcase_add_test(tc, known_lengths);
    tcase_add_test(tc, names_and_errors);
    tcase_add_test(tc, dst_table_2026_2027);
    suite_add_tcase(s, tc);
    tc = tcase_create("own_zones");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, own_tzdir, own_tzdir_remove);
    tcase_add_test(tc, own_zones_match_glibc);
    tcase_add_test(tc, requested_zones_own_table);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(period_suite(), CK_FORK_GETENV);
}
