/*
 * period.h — calendar periods in a time zone: the day, week, month or year
 * (and the clock's hour or minute) that holds a moment, as the zone's clock
 * reads it, daylight-saving days of 23 and 25 hours and months of 28 to 31
 * days included.  docs/API.md ("Calendar periods") is the contract.
 *
 * Zones come from the system's tz database (TZif files, RFC 8536, under
 * $TZDIR or /usr/share/zoneinfo), read by this module itself rather than
 * through glibc: TZ/tzset/localtime_r are process-global state, not safe
 * to switch from worker threads.  A zone is read once into a table of UTC
 * offsets by instant (the file's transitions, then its POSIX TZ rule spelled
 * out to the year 2200) and kept for the life of the process, so a limit,
 * a cache or a script spec may hold a pointer to it; everything after the
 * load reads immutable data and is thread-safe.
 *
 * Boundaries.  A period starts at the first instant the zone's clock reads
 * (or jumps past) its first moment: local midnight of its first day for a
 * day, week, month or year; so a 25-hour day starts at its one midnight and
 * a day whose midnight the clock skips starts when the clock jumps.  The
 * clock's hour and minute start at every instant the clock reads (or jumps
 * past) a whole hour or minute, so the hour New York repeats when it falls
 * back is two hours of an hour each, and Lord Howe's 30-minute shift makes
 * one hour of 30 minutes and one of 90.  Times are Unix seconds; every
 * boundary is a whole second.
 */
#ifndef RL_PERIOD_H
#define RL_PERIOD_H

#include <stdbool.h>
#include <stdint.h>

#include "rl.h"

enum rl_period_kind {
    RL_PERIOD_NONE = 0, /* a limit of `window`, not of a period */
    RL_PERIOD_MINUTE,
    RL_PERIOD_HOUR,
    RL_PERIOD_DAY,
    RL_PERIOD_WEEK,
    RL_PERIOD_MONTH,
    RL_PERIOD_YEAR,
    RL_PERIOD_KIND_COUNT
};

/* A zone as loaded; opaque but for its name. */
struct rl_tz;

/* What a limit says of its period. */
struct rl_period {
    int kind;               /* enum rl_period_kind */
    int week_start;         /* 0: monday (the default); else 1 + day, sunday = 0 */
    const struct rl_tz *tz; /* NULL: UTC */
};

/* How long a zone name may be (in keys and answers: bounded). */
#define RL_TZ_NAME_MAX 64
/* Boundaries period_bounds() gives: b[2] <= t < b[3], two before, two after. */
#define RL_PERIOD_BOUNDS 6

/*
 * The zone named `name` (an IANA name like "Europe/Berlin", or "UTC", which
 * is built in).  `configured` (a configuration names it): read from the tz
 * database every time, and a zone whose rules changed (tzdata was upgraded)
 * replaces the old one for later lookups (the old one stays valid for
 * whoever holds it); at most TZ_LOADED_MAX such zones.  Else (a request
 * names it): a configured zone of that name, else the zone of the file the
 * name leads to (aliases and "posix/" paths are one zone, named by that
 * file: "posix/Asia/Tokyo" is "Asia/Tokyo"), read once, in a table of its
 * own, so that no request can fill the configurations' table.  Zones are
 * never freed.  NULL when it cannot be: *cause says why (caller frees).
 * Thread-safe.
 */
const struct rl_tz *period_tz(const char *name, int configured, char **cause);

/* How many zones are loaded (GET /metrics). */
struct period_tz_stats {
    size_t configured, requested;
    uint64_t refused; /* requests refused: the requests' table was full */
};
void period_tz_stats(struct period_tz_stats *s);

/* Whether tz is still the zone its name gives (not replaced by a reread of
 * a changed file): whoever keeps zones past a reload asks. */
bool period_tz_current(const struct rl_tz *tz);

/* "Europe/Berlin"; "UTC" for NULL. */
const char *period_tz_name(const struct rl_tz *tz);

/* The zone's UTC offset at t, in seconds east. */
int32_t period_tz_offset(const struct rl_tz *tz, int64_t t);

/* "day", ...; NULL for RL_PERIOD_NONE or a bad value. */
const char *period_kind_name(int kind);
/* RL_PERIOD_* of a name, RL_PERIOD_NONE when it is none. */
int period_kind_of(const char *name);
/* "monday", ... of a week_start as stored (0 is monday). */
const char *period_week_start_name(int week_start);
/* A week_start as stored (1..7) of a day's name, 0 when it is none. */
int period_week_start_of(const char *name);

/* The start of the period that holds t and the start of the next. */
int64_t period_start(const struct rl_period *p, int64_t t);
int64_t period_next(const struct rl_period *p, int64_t t);

/*
 * The consecutive boundaries around t: b[2] <= t < b[3] is the period that
 * holds t, b[1] and b[0] start the two before it, b[4] and b[5] end the two
 * after it.  Memoized per thread: while t stays in one period (and with
 * the same zone, kind and week start) the answer is a copy.
 */
void period_bounds(const struct rl_period *p, int64_t t, int64_t b[RL_PERIOD_BOUNDS]);

/* Seconds of the period that holds t. */
int64_t period_length(const struct rl_period *p, int64_t t);

#endif
