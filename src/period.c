/* period.c — see period.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "period.h"
#include "util.h"

#define DAY 86400
/* A zone file is a few KiB; anything much bigger is not one. */
#define TZ_FILE_MAX (256 * 1024)
/* Zones configurations name, loaded in one process at most (the database has
 * ~600 names; a reread of a changed file adds one).  Requests never count
 * here: what a caller names cannot refuse a reload. */
#define TZ_LOADED_MAX 1024
/* Zones named only by requests, at most: one per file of the tz database
 * (each request's name resolved to the file it leads to, so aliases and
 * "posix/" paths are one zone).  tzdata holds under 1,000 files, so with it
 * this never bites; it bounds the memory should $TZDIR hold more. */
#define TZ_REQUESTED_MAX 2048
/* Offsets beyond a day and two hours are refused, so that the clock of any
 * instant more than TZ_REACH seconds earlier reads an earlier time. */
#define TZ_OFFSET_MAX (26 * 3600)
#define TZ_REACH (2 * TZ_OFFSET_MAX)
/* The POSIX rule of a zone's footer is spelled out up to this year; later
 * instants keep the offset it gives last. */
#define TZ_RULE_LAST_YEAR 2200

struct rl_tz {
    char name[RL_TZ_NAME_MAX + 1];
    uint64_t hash; /* of the file's bytes: a reread of the same file changes nothing */
    int32_t off0;  /* the offset before at[0] (or always, when n is 0) */
    size_t n;
    int64_t *at;    /* instants at which the offset changes, ascending */
    int32_t *off;   /* the offset from at[i] on */
    int borrowed;   /* at and off are another zone's of the same rules (tz_share) */
    int superseded; /* atomic: a reread found other rules for this name */
    struct rl_tz *next;
};

static struct rl_tz tz_utc = {.name = "UTC"};
static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rl_tz *tz_loaded; /* configured zones, newest first */
static size_t tz_nloaded;
static struct rl_tz *tz_requested; /* zones only requests named, by canonical name */
static size_t tz_nrequested;
static uint64_t tz_refused; /* atomic: requests refused past TZ_REQUESTED_MAX */

/* ---- civil dates (proleptic Gregorian), days since 1970-01-01 ------------ */

static int64_t
floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;

    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int64_t
days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = floor_div(y, 400);
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = floor_div(z, 146097);
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int
is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* ---- POSIX TZ rules (a TZif file's footer) ------------------------------- */

/* One date of a rule: Jn (1..365, no Feb 29), n (0..365), Mm.w.d. */
struct tz_date {
    char form; /* 'J', 'n', 'M' */
    int n, m, w, d;
    int32_t time; /* seconds after local midnight, -167h..167h */
};

struct tz_rule {
    int32_t std, dst; /* offsets, seconds east */
    int has_dst;
    struct tz_date start, end;
};

static const char *
rule_name(const char *s)
{
    const char *p = s;

    if (*p == '<') {
        while (*p != '\0' && *p != '>')
            p++;
        return *p == '>' && p - s >= 4 ? p + 1 : NULL;
    }
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
        p++;
    return p - s >= 3 ? p : NULL;
}

static int
rule_num(const char **s, int lo, int hi, int *out)
{
    int v = 0, digits = 0;

    while (**s >= '0' && **s <= '9' && digits < 4) {
        v = v * 10 + (**s - '0');
        (*s)++;
        digits++;
    }
    if (digits == 0 || v < lo || v > hi)
        return RL_ERR;
    *out = v;
    return RL_OK;
}

/* [+-]hh[:mm[:ss]] in seconds; hours up to max_h. */
static int
rule_hms(const char **s, int max_h, int32_t *out)
{
    int sign = 1, h, mi = 0, se = 0;

    if (**s == '+' || **s == '-')
        sign = *(*s)++ == '-' ? -1 : 1;
    if (rule_num(s, 0, max_h, &h) != RL_OK)
        return RL_ERR;
    if (**s == ':') {
        (*s)++;
        if (rule_num(s, 0, 59, &mi) != RL_OK)
            return RL_ERR;
        if (**s == ':') {
            (*s)++;
            if (rule_num(s, 0, 59, &se) != RL_OK)
                return RL_ERR;
        }
    }
    *out = sign * (h * 3600 + mi * 60 + se);
    return RL_OK;
}

static int
rule_date(const char **s, struct tz_date *d)
{
    d->time = 2 * 3600;
    if (**s == 'J') {
        (*s)++;
        d->form = 'J';
        if (rule_num(s, 1, 365, &d->n) != RL_OK)
            return RL_ERR;
    } else if (**s == 'M') {
        (*s)++;
        d->form = 'M';
        if (rule_num(s, 1, 12, &d->m) != RL_OK || *(*s)++ != '.' ||
            rule_num(s, 1, 5, &d->w) != RL_OK || *(*s)++ != '.' ||
            rule_num(s, 0, 6, &d->d) != RL_OK)
            return RL_ERR;
    } else {
        d->form = 'n';
        if (rule_num(s, 0, 365, &d->n) != RL_OK)
            return RL_ERR;
    }
    if (**s == '/') {
        (*s)++;
        return rule_hms(s, 167, &d->time);
    }
    return RL_OK;
}

/* "CET-1CEST,M3.5.0,M10.5.0/3" (RFC 8536 3.3; POSIX offsets are west). */
static int
rule_parse(const char *s, struct tz_rule *r)
{
    int32_t v;

    memset(r, 0, sizeof(*r));
    if ((s = rule_name(s)) == NULL || rule_hms(&s, 24, &v) != RL_OK)
        return RL_ERR;
    r->std = -v;
    if (*s == '\0')
        return RL_OK;
    if ((s = rule_name(s)) == NULL)
        return RL_ERR;
    r->has_dst = 1;
    r->dst = r->std + 3600;
    if (*s != ',' && *s != '\0') {
        if (rule_hms(&s, 24, &v) != RL_OK)
            return RL_ERR;
        r->dst = -v;
    }
    if (*s == '\0') { /* no rule: the US one, as POSIX systems default */
        r->start = (struct tz_date){'M', 0, 3, 2, 0, 2 * 3600};
        r->end = (struct tz_date){'M', 0, 11, 1, 0, 2 * 3600};
        return RL_OK;
    }
    if (*s++ != ',' || rule_date(&s, &r->start) != RL_OK || *s++ != ',' ||
        rule_date(&s, &r->end) != RL_OK || *s != '\0')
        return RL_ERR;
    return RL_OK;
}

/* The local midnight (days since the epoch) of date d in year y. */
static int64_t
rule_day(const struct tz_date *d, int64_t y)
{
    int64_t jan1 = days_from_civil(y, 1, 1), first, day;
    int dow, last;

    switch (d->form) {
    case 'J': return jan1 + d->n - 1 + (is_leap(y) && d->n >= 60);
    case 'n': return jan1 + d->n;
    default: break;
    }
    first = days_from_civil(y, d->m, 1);
    dow = (int)((first + 4) % 7 + 7) % 7; /* 1970-01-01 was a Thursday */
    day = first + (d->d - dow + 7) % 7 + 7 * (d->w - 1);
    last = d->m == 12 ? 31 : (int)(days_from_civil(y, d->m + 1, 1) - first);
    while (day >= first + last)
        day -= 7;
    return day;
}

/* ---- reading a TZif file -------------------------------------------------- */

struct tz_build {
    int64_t *at;
    int32_t *off;
    size_t n, cap;
};

static void
build_add(struct tz_build *b, int64_t at, int32_t off)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->at = xrealloc(b->at, b->cap * sizeof(*b->at));
        b->off = xrealloc(b->off, b->cap * sizeof(*b->off));
    }
    b->at[b->n] = at;
    b->off[b->n++] = off;
}

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
};

static size_t
tzif_block_len(const struct tzif_counts *c, size_t tsize)
{
    return (size_t)c->time * tsize + c->time + (size_t)c->type * 6 + c->chars +
           (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

static int
tzif_header(const unsigned char *p, size_t len, struct tzif_counts *c, char *version)
{
    if (len < 44 || memcmp(p, "TZif", 4) != 0)
        return RL_ERR;
    *version = (char)p[4];
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    /* RFC 8536 3.1; bounded so that the sizes below cannot overflow */
    if (c->type == 0 || c->type > 256 || c->chars == 0 || c->time > 100000 ||
        c->leap > 100000 || (c->isstd != 0 && c->isstd != c->type) ||
        (c->isut != 0 && c->isut != c->type))
        return RL_ERR;
    return RL_OK;
}

/* The transitions of a data block into b: RL_ERR when it is not one. */
static int
tzif_block(const unsigned char *p, const struct tzif_counts *c, size_t tsize,
           struct tz_build *b, int32_t *off0)
{
    const unsigned char *idx = p + (size_t)c->time * tsize, *types = idx + c->time;
    int32_t utoff[256];

    for (uint32_t i = 0; i < c->type; i++) {
        utoff[i] = (int32_t)be32(types + 6 * i);
        if (utoff[i] < -TZ_OFFSET_MAX || utoff[i] > TZ_OFFSET_MAX)
            return RL_ERR;
    }
    *off0 = utoff[0];
    for (uint32_t i = 0; i < c->time; i++) {
        int64_t at = tsize == 8 ? be64(p + 8 * i) : (int32_t)be32(p + 4 * i);
        if (idx[i] >= c->type || (b->n > 0 && at <= b->at[b->n - 1]))
            return RL_ERR;
        build_add(b, at, utoff[idx[i]]);
    }
    return RL_OK;
}

/* The footer's rule spelled out: its transitions after `after`. */
static void
tzif_rule(const struct tz_rule *r, int64_t after, struct tz_build *b)
{
    int64_t y0 = 1970;

    if (after > 0) {
        int64_t y;
        int m, d;
        civil_from_days(after / DAY, &y, &m, &d);
        y0 = y;
    }
    if (!r->has_dst) {
        build_add(b, after + 1, r->std);
        return;
    }
    for (int64_t y = y0 - 1; y <= TZ_RULE_LAST_YEAR; y++) {
        /* a rule's times are local: the start's in standard time, the
         * end's in daylight time */
        int64_t s = rule_day(&r->start, y) * DAY + r->start.time - r->std;
        int64_t e = rule_day(&r->end, y) * DAY + r->end.time - r->dst;
        int64_t first = s < e ? s : e, second = s < e ? e : s;
        int32_t o1 = s < e ? r->dst : r->std, o2 = s < e ? r->std : r->dst;

        if (first > after)
            build_add(b, first, o1);
        if (second > after && second > first)
            build_add(b, second, o2);
    }
}

/* A table without changes that change nothing. */
static void
tz_compact(struct rl_tz *z)
{
    size_t w = 0;
    int32_t prev = z->off0;

    for (size_t i = 0; i < z->n; i++) {
        if (w > 0 && z->at[i] <= z->at[w - 1])
            continue; /* the rule's first year may repeat the file's last */
        if (z->off[i] == prev)
            continue;
        z->at[w] = z->at[i];
        z->off[w++] = prev = z->off[i];
    }
    z->n = w;
}

static struct rl_tz *
tzif_parse(const char *name, const unsigned char *p, size_t len, char **cause)
{
    struct tzif_counts c;
    struct tz_build b = {0};
    struct tz_rule rule;
    struct rl_tz *z;
    char version;
    size_t tsize = 4, at, blen;
    int32_t off0;

    if (tzif_header(p, len, &c, &version) != RL_OK)
        goto bad;
    at = 44;
    blen = tzif_block_len(&c, 4);
    if (version >= '2') {
        /* the version 1 block is skipped for the 64-bit one */
        if (len - at < blen + 44)
            goto bad;
        at += blen;
        if (tzif_header(p + at, len - at, &c, &version) != RL_OK)
            goto bad;
        at += 44;
        tsize = 8;
        blen = tzif_block_len(&c, 8);
    }
    if (len - at < blen)
        goto bad;
    if (c.leap > 0) {
        *cause = xasprintf("time zone \"%s\": it counts leap seconds (a \"right/\" zone): "
                           "use the zone of the same name without \"right/\"",
                           name);
        return NULL;
    }
    if (tzif_block(p + at, &c, tsize, &b, &off0) != RL_OK)
        goto bad;
    at += blen;
    if (version >= '2') {
        const unsigned char *nl;
        char footer[128];

        if (at >= len || p[at] != '\n' ||
            (nl = memchr(p + at + 1, '\n', len - at - 1)) == NULL ||
            (size_t)(nl - (p + at + 1)) >= sizeof(footer))
            goto bad;
        memcpy(footer, p + at + 1, (size_t)(nl - (p + at + 1)));
        footer[nl - (p + at + 1)] = '\0';
        if (footer[0] != '\0') {
            if (rule_parse(footer, &rule) != RL_OK || rule.std < -TZ_OFFSET_MAX ||
                rule.std > TZ_OFFSET_MAX || rule.dst < -TZ_OFFSET_MAX ||
                rule.dst > TZ_OFFSET_MAX)
                goto bad;
            tzif_rule(&rule, b.n > 0 ? b.at[b.n - 1] : INT64_MIN / 4, &b);
        }
    }
    z = xcalloc(1, sizeof(*z));
    snprintf(z->name, sizeof(z->name), "%s", name);
    z->hash = fnv1a(FNV1A_INIT, (const char *)p, len);
    z->off0 = off0;
    z->at = b.at;
    z->off = b.off;
    z->n = b.n;
    tz_compact(z);
    return z;
bad:
    free(b.at);
    free(b.off);
    *cause = xasprintf("time zone \"%s\": not a valid zone file (TZif) in the tz database",
                       name);
    return NULL;
}

/* ---- the loaded zones ------------------------------------------------------- */

/* IANA names: components of A-Z a-z 0-9 _ + -, separated by '/'. */
static int
valid_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > RL_TZ_NAME_MAX || name[0] == '/' || name[n - 1] == '/' ||
        name[0] == '-' || strstr(name, "//") != NULL || strstr(name, "/-") != NULL)
        return 0;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789_+-/") == n;
}

/* The newest zone of that name, configured ones first (tz_lock held). */
static struct rl_tz *
tz_find(const char *name)
{
    for (struct rl_tz *z = tz_loaded; z != NULL; z = z->next)
        if (strcmp(z->name, name) == 0)
            return z;
    return NULL;
}

static struct rl_tz *
tz_find_any(const char *name)
{
    struct rl_tz *z = tz_find(name);

    if (z != NULL)
        return z;
    for (z = tz_requested; z != NULL; z = z->next)
        if (strcmp(z->name, name) == 0)
            return z;
    return NULL;
}

static const char *
tz_dir(void)
{
    const char *dir = getenv("TZDIR");

    return dir != NULL && dir[0] != '\0' ? dir : "/usr/share/zoneinfo";
}

static char *
unknown_zone(const char *name, const char *file)
{
    return xasprintf("unknown time zone \"%s\": the tz database has no %s (an IANA "
                     "name like \"Europe/Berlin\"; is tzdata installed?)",
                     name, file);
}

static void
tz_free(struct rl_tz *z)
{
    if (!z->borrowed) {
        free(z->at);
        free(z->off);
    }
    free(z);
}

static bool
same_rules(const struct rl_tz *a, const struct rl_tz *b)
{
    return a->off0 == b->off0 && a->n == b->n &&
           (a->n == 0 || (memcmp(a->at, b->at, a->n * sizeof(*a->at)) == 0 &&
                          memcmp(a->off, b->off, a->n * sizeof(*a->off)) == 0));
}

/*
 * z, about to be kept (tz_lock held), takes the offsets of a zone kept
 * already with the same rules: hard links and copies of one zone ("posix/"
 * is a tree of hard links in Debian's tzdata) cost a name each, not a
 * table each.  Zones are never freed, so the one lent outlives the
 * borrower.
 */
static void
tz_share(struct rl_tz *z)
{
    struct rl_tz *lists[] = {tz_loaded, tz_requested};

    for (size_t k = 0; k < RL_ARRAY_LEN(lists); k++)
        for (const struct rl_tz *o = lists[k]; o != NULL; o = o->next)
            if (o != z && same_rules(o, z)) {
                free(z->at);
                free(z->off);
                z->at = o->at;
                z->off = o->off;
                z->borrowed = 1;
                return;
            }
}

/* z kept at the head of *list (tz_lock held), unless *n is max already. */
static bool
tz_keep(struct rl_tz **list, size_t *n, size_t max, struct rl_tz *z)
{
    if (*n >= max)
        return false;
    tz_share(z);
    z->next = *list;
    *list = z;
    (*n)++;
    return true;
}

static struct rl_tz *
tz_read(const char *name, char **cause)
{
    char *file, *text = NULL, *why = NULL;
    struct rl_tz *z;
    struct stat st;
    size_t len;

    file = xasprintf("%s/%s", tz_dir(), name);
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
        *cause = unknown_zone(name, file);
        free(file);
        return NULL;
    }
    if (read_file_bounded(file, TZ_FILE_MAX, &text, &len, &why) != RL_OK) {
        *cause = xasprintf("time zone \"%s\": %s", name, why);
        free(why);
        free(file);
        return NULL;
    }
    free(file);
    z = tzif_parse(name, (const unsigned char *)text, len, cause);
    free(text);
    return z;
}

/*
 * The name of the file `name` leads to in the tz database, into canon
 * (RL_TZ_NAME_MAX + 1 bytes): "posix/Asia/Tokyo", "posix/posix/Asia/Tokyo"
 * and "Japan" (links) are "Asia/Tokyo" on Debian's tzdata.  A name leading
 * out of the database is unknown.
 */
static int
tz_canonical(const char *name, char canon[RL_TZ_NAME_MAX + 1], char **cause)
{
    char *file = xasprintf("%s/%s", tz_dir(), name);
    char *real = realpath(file, NULL), *dir = realpath(tz_dir(), NULL);
    size_t dl = dir != NULL ? strlen(dir) : 0;
    int rc = RL_ERR;

    if (real == NULL || dir == NULL)
        *cause = unknown_zone(name, file);
    else if (strncmp(real, dir, dl) != 0 || real[dl] != '/' || !valid_name(real + dl + 1))
        *cause = xasprintf("unknown time zone \"%s\": %s leads out of the tz database (%s)",
                           name, file, dir);
    else
        rc = snprintf(canon, RL_TZ_NAME_MAX + 1, "%s", real + dl + 1) > 0 ? RL_OK : RL_ERR;
    free(file);
    free(real);
    free(dir);
    return rc;
}

/*
 * A zone a request names: a configured one of that name, else the zone
 * of the file it leads to, loaded once into the requests' own table
 * (never freed: a check may hold it as long as it likes).
 */
static const struct rl_tz *
tz_request(const char *name, char **cause)
{
    char canon[RL_TZ_NAME_MAX + 1];
    struct rl_tz *z, *had;

    pthread_mutex_lock(&tz_lock);
    had = tz_find_any(name);
    pthread_mutex_unlock(&tz_lock);
    if (had != NULL)
        return had;
    if (tz_canonical(name, canon, cause) != RL_OK)
        return NULL;
    if (strcmp(canon, name) != 0) {
        pthread_mutex_lock(&tz_lock);
        had = tz_find_any(canon);
        pthread_mutex_unlock(&tz_lock);
        if (had != NULL)
            return had;
    }
    if ((z = tz_read(canon, cause)) == NULL)
        return NULL;
    pthread_mutex_lock(&tz_lock);
    if ((had = tz_find_any(canon)) != NULL) {
        pthread_mutex_unlock(&tz_lock);
        tz_free(z);
        return had;
    }
    if (!tz_keep(&tz_requested, &tz_nrequested, TZ_REQUESTED_MAX, z)) {
        pthread_mutex_unlock(&tz_lock);
        tz_free(z);
        __atomic_add_fetch(&tz_refused, 1, __ATOMIC_RELAXED);
        *cause = xasprintf("time zone \"%s\": %d zones named by requests are loaded already, "
                           "more than the tz database has files ($TZDIR: %s)",
                           name, TZ_REQUESTED_MAX, tz_dir());
        return NULL;
    }
    pthread_mutex_unlock(&tz_lock);
    return z;
}

const struct rl_tz *
period_tz(const char *name, int configured, char **cause)
{
    struct rl_tz *z, *had;

    if (strcmp(name, "UTC") == 0)
        return &tz_utc;
    if (!valid_name(name)) {
        *cause = xasprintf("unknown time zone: must be an IANA name like \"Europe/Berlin\" "
                           "or \"UTC\" (at most %d of A-Z a-z 0-9 _ + - /)",
                           RL_TZ_NAME_MAX);
        return NULL;
    }
    if (!configured)
        return tz_request(name, cause);
    /* a configuration reads its zones again (a reload sees an upgraded
     * tzdata); outside the lock: a new or changed zone is rare */
    if ((z = tz_read(name, cause)) == NULL)
        return NULL;
    pthread_mutex_lock(&tz_lock);
    had = tz_find(name);
    if (had != NULL && had->hash == z->hash) {
        pthread_mutex_unlock(&tz_lock);
        tz_free(z);
        return had;
    }
    if (!tz_keep(&tz_loaded, &tz_nloaded, TZ_LOADED_MAX, z)) {
        pthread_mutex_unlock(&tz_lock);
        tz_free(z);
        *cause = xasprintf("time zone \"%s\": %d zones are loaded already, the most one "
                           "process keeps; restart to read the tz database afresh",
                           name, TZ_LOADED_MAX);
        return NULL;
    }
    if (had != NULL)
        __atomic_store_n(&had->superseded, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tz_lock);
    return z;
}

void
period_tz_stats(struct period_tz_stats *s)
{
    pthread_mutex_lock(&tz_lock);
    s->configured = tz_nloaded;
    s->requested = tz_nrequested;
    pthread_mutex_unlock(&tz_lock);
    s->refused = __atomic_load_n(&tz_refused, __ATOMIC_RELAXED);
}

bool
period_tz_current(const struct rl_tz *tz)
{
    return tz == NULL || !__atomic_load_n(&tz->superseded, __ATOMIC_ACQUIRE);
}

const char *
period_tz_name(const struct rl_tz *tz)
{
    return tz != NULL ? tz->name : tz_utc.name;
}

/* The segment of constant offset that holds t: -1 before at[0]. */
static ptrdiff_t
tz_segment(const struct rl_tz *z, int64_t t)
{
    size_t lo = 0, hi = z->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

static int32_t
seg_off(const struct rl_tz *z, ptrdiff_t i)
{
    return i < 0 ? z->off0 : z->off[i];
}

/* Where segment i begins and ends (INT64_MIN / INT64_MAX: open). */
static int64_t
seg_begin(const struct rl_tz *z, ptrdiff_t i)
{
    return i < 0 ? INT64_MIN : z->at[i];
}

static int64_t
seg_end(const struct rl_tz *z, ptrdiff_t i)
{
    return i + 1 < (ptrdiff_t)z->n ? z->at[i + 1] : INT64_MAX;
}

int32_t
period_tz_offset(const struct rl_tz *tz, int64_t t)
{
    const struct rl_tz *z = tz != NULL ? tz : &tz_utc;

    return seg_off(z, tz_segment(z, t));
}

/* ---- the grid of local times ------------------------------------------------- */

static const char *const kind_names[RL_PERIOD_KIND_COUNT] = {
    [RL_PERIOD_MINUTE] = "minute", [RL_PERIOD_HOUR] = "hour",   [RL_PERIOD_DAY] = "day",
    [RL_PERIOD_WEEK] = "week",     [RL_PERIOD_MONTH] = "month", [RL_PERIOD_YEAR] = "year",
};
static const char *const day_names[7] = {"sunday",   "monday", "tuesday", "wednesday",
                                         "thursday", "friday", "saturday"};

const char *
period_kind_name(int kind)
{
    return kind > RL_PERIOD_NONE && kind < RL_PERIOD_KIND_COUNT ? kind_names[kind] : NULL;
}

int
period_kind_of(const char *name)
{
    for (int k = RL_PERIOD_NONE + 1; k < RL_PERIOD_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0)
            return k;
    return RL_PERIOD_NONE;
}

/* The day a week starts on, sunday = 0. */
static int
week_dow(int week_start)
{
    return week_start > 0 ? week_start - 1 : 1;
}

const char *
period_week_start_name(int week_start)
{
    return day_names[week_dow(week_start)];
}

int
period_week_start_of(const char *name)
{
    for (int d = 0; d < 7; d++)
        if (strcmp(name, day_names[d]) == 0)
            return d + 1;
    return 0;
}

/* The local time (seconds) a period of p starts at that holds local time l. */
static int64_t
grid_floor(const struct rl_period *p, int64_t l)
{
    int64_t days = floor_div(l, DAY), y;
    int m, d;

    switch (p->kind) {
    case RL_PERIOD_MINUTE: return floor_div(l, 60) * 60;
    case RL_PERIOD_HOUR: return floor_div(l, 3600) * 3600;
    case RL_PERIOD_DAY: return days * DAY;
    case RL_PERIOD_WEEK: {
        int dow = (int)(((days + 4) % 7 + 7) % 7);
        return (days - (dow - week_dow(p->week_start) + 7) % 7) * DAY;
    }
    default: break;
    }
    civil_from_days(days, &y, &m, &d);
    return days_from_civil(y, p->kind == RL_PERIOD_MONTH ? m : 1, 1) * DAY;
}

/* The local time the period after the one starting at local time g starts. */
static int64_t
grid_next(const struct rl_period *p, int64_t g)
{
    int64_t y;
    int m, d;

    switch (p->kind) {
    case RL_PERIOD_MINUTE: return g + 60;
    case RL_PERIOD_HOUR: return g + 3600;
    case RL_PERIOD_DAY: return g + DAY;
    case RL_PERIOD_WEEK: return g + 7 * DAY;
    default: break;
    }
    civil_from_days(floor_div(g, DAY), &y, &m, &d);
    if (p->kind == RL_PERIOD_YEAR)
        return days_from_civil(y + 1, 1, 1) * DAY;
    return (m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * DAY;
}

static const struct rl_tz *
zone_of(const struct rl_period *p)
{
    return p->tz != NULL ? p->tz : &tz_utc;
}

/* ---- days, weeks, months, years: the first time the clock reaches them ---- */

/* The first instant the clock reads local time g or later. */
static int64_t
reach(const struct rl_tz *z, int64_t g)
{
    for (ptrdiff_t i = tz_segment(z, g - TZ_REACH);; i++) {
        int64_t a = seg_begin(z, i), t = g - seg_off(z, i);

        if (t < a)
            t = a;
        if (t < seg_end(z, i))
            return t;
    }
}

/* The latest local time the clock has read by t (it steps back at times). */
static int64_t
clock_high(const struct rl_tz *z, int64_t t)
{
    ptrdiff_t i = tz_segment(z, t);
    int64_t high = t + seg_off(z, i);

    for (ptrdiff_t j = i - 1; j >= -1 && seg_end(z, j) > t - TZ_REACH; j--) {
        int64_t last = seg_end(z, j) - 1 + seg_off(z, j);
        if (last > high)
            high = last;
    }
    return high;
}

/* ---- hours and minutes: every time the clock reads or jumps past one ---- */

/* A period boundary at the transition that begins segment i (i >= 0): the
 * clock jumps forward past a whole hour or minute there. */
static int
jumps_past(const struct rl_tz *z, ptrdiff_t i, int64_t g)
{
    int64_t before = z->at[i] + seg_off(z, i - 1), after = z->at[i] + seg_off(z, i);

    return after > before && floor_div(after - 1, g) * g >= before;
}

static int64_t
clock_last(const struct rl_tz *z, int64_t t, int64_t g)
{
    ptrdiff_t i = tz_segment(z, t);

    for (int64_t upto = t;; i--) {
        int32_t o = seg_off(z, i);
        int64_t c = floor_div(upto + o, g) * g - o;

        if (c >= seg_begin(z, i))
            return c;
        if (jumps_past(z, i, g))
            return z->at[i];
        upto = z->at[i] - 1;
    }
}

static int64_t
clock_next(const struct rl_tz *z, int64_t t, int64_t g)
{
    ptrdiff_t i = tz_segment(z, t);

    for (int64_t from = t + 1;; i++) {
        int32_t o = seg_off(z, i);
        int64_t c = -floor_div(-(from + o), g) * g - o;

        if (c < seg_end(z, i))
            return c;
        if (jumps_past(z, i + 1, g))
            return z->at[i + 1];
        from = z->at[i + 1];
    }
}

/* ---- periods ------------------------------------------------------------------ */

static int
by_clock(const struct rl_period *p)
{
    return p->kind == RL_PERIOD_MINUTE || p->kind == RL_PERIOD_HOUR;
}

int64_t
period_start(const struct rl_period *p, int64_t t)
{
    const struct rl_tz *z = zone_of(p);

    if (by_clock(p))
        return clock_last(z, t, p->kind == RL_PERIOD_HOUR ? 3600 : 60);
    return reach(z, grid_floor(p, clock_high(z, t)));
}

int64_t
period_next(const struct rl_period *p, int64_t t)
{
    const struct rl_tz *z = zone_of(p);

    if (by_clock(p))
        return clock_next(z, t, p->kind == RL_PERIOD_HOUR ? 3600 : 60);
    return reach(z, grid_next(p, grid_floor(p, clock_high(z, t))));
}

/* The last answer of period_bounds, per thread and per kind of period. */
struct bounds_memo {
    const struct rl_tz *tz;
    int week_start;
    int64_t b[RL_PERIOD_BOUNDS];
};
static __thread struct bounds_memo memo[RL_PERIOD_KIND_COUNT];

void
period_bounds(const struct rl_period *p, int64_t t, int64_t b[RL_PERIOD_BOUNDS])
{
    struct bounds_memo *m = &memo[p->kind];

    if (m->tz == zone_of(p) && m->week_start == p->week_start && m->b[2] <= t && t < m->b[3]) {
        memcpy(b, m->b, sizeof(m->b));
        return;
    }
    b[2] = period_start(p, t);
    b[3] = period_next(p, t);
    b[4] = period_next(p, b[3]);
    b[5] = period_next(p, b[4]);
    b[1] = period_start(p, b[2] - 1);
    b[0] = period_start(p, b[1] - 1);
    m->tz = zone_of(p);
    m->week_start = p->week_start;
    memcpy(m->b, b, sizeof(m->b));
}

int64_t
period_length(const struct rl_period *p, int64_t t)
{
    int64_t b[RL_PERIOD_BOUNDS];

    period_bounds(p, t, b);
    return b[3] - b[2];
}
