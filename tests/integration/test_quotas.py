#!/usr/bin/env python3
"""Plans (issue 22) through the real daemon and a real Redis: calendar periods
in a time zone and limits a check brings along.

Periods: a daily, weekly and monthly quota answer the period's length, the
exact time to its end (against Redis TIME read around the check and the
zone's calendar as Python's zoneinfo reads the same tz database), the
headers, and each key's TTL; a daily quota resets at the zone's midnight:
the zone is a test-only one compiled with zic into a TZDIR of the test's own,
whose fixed UTC offset puts its midnight some 20 s after the test starts (the
daemon reads zones from $TZDIR; Redis TIME stays the one clock), waited for
with a generous bound, never slept to.  Request limits: accepted, capped,
refused with the field named and nothing counted; the count kept across a
plan change and shared with the policy's own limit of the same algorithm and
window.  Concurrency: two daemons sharing one Redis, 40 threads, a daily
quota (config and caller's): exactly the limit admitted.
"""

import collections
import datetime
import os
import subprocess
import sys
import time
import zoneinfo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402
from test_concurrency import tally  # noqa: E402

THREADS = 40
LIMIT = 100


def conf(extra_policies=()):
    pols = [
        {"name": "daily", "limits": [
            {"algorithm": "fixed_window", "limit": 5, "period": "day", "timezone": "Europe/Berlin"}]},
        {"name": "weekly", "limits": [
            {"algorithm": "sliding_window_counter", "limit": 5, "period": "week",
             "week_start": "sunday", "timezone": "America/New_York"}]},
        {"name": "monthly", "limits": [
            {"algorithm": "fixed_window", "limit": 10000, "period": "month",
             "timezone": "America/New_York"},
            {"algorithm": "sliding_window_counter", "limit": 500, "period": "day",
             "timezone": "America/New_York"}]},
        {"name": "plans", "request_limits": True, "request_limits_max": 100000, "limits": [
            {"algorithm": "fixed_window", "limit": 100, "window": "1m"}]},
        {"name": "fixed", "limits": [{"algorithm": "fixed_window", "limit": 100, "window": "1m"}]},
        {"name": "race_fw", "limits": [
            {"algorithm": "fixed_window", "limit": LIMIT, "period": "day", "timezone": "Europe/Berlin"}]},
        {"name": "race_swc", "limits": [
            {"algorithm": "sliding_window_counter", "limit": LIMIT, "period": "day",
             "timezone": "Australia/Lord_Howe"}]},
    ]
    pols += list(extra_policies)
    return {"identity": ["body"], "failure_mode": "closed", "redis": {"timeout": "5s"},
            "policies": pols}


def redis_us(r):
    s, us = r.cli("TIME").split()
    return int(s) * 1000000 + int(us)


def period_start(kind, tz, t, week_start=0):
    """The start (Unix s) of the period of `kind` holding Unix time t in tz,
    as Python's zoneinfo reads the calendar: the local midnight of its first
    day (these zones' midnights exist)."""
    z = zoneinfo.ZoneInfo(tz)
    d = datetime.datetime.fromtimestamp(t, z).date()
    if kind == "week":
        d -= datetime.timedelta(days=(d.weekday() - week_start) % 7)
    elif kind == "month":
        d = d.replace(day=1)
    elif kind == "year":
        d = d.replace(month=1, day=1)
    return int(datetime.datetime(d.year, d.month, d.day, tzinfo=z).timestamp())


def period_next(kind, tz, t, week_start=0):
    z = zoneinfo.ZoneInfo(tz)
    s = datetime.datetime.fromtimestamp(period_start(kind, tz, t, week_start), z).date()
    if kind == "day":
        n = s + datetime.timedelta(days=1)
    elif kind == "week":
        n = s + datetime.timedelta(days=7)
    elif kind == "month":
        n = (s.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
    else:
        n = s.replace(year=s.year + 1)
    return int(datetime.datetime(n.year, n.month, n.day, tzinfo=z).timestamp())


def key_of(r, key, suffix):
    """The one Redis key of identity `key` that ends with suffix."""
    keys = [k for k in r.cli("KEYS", "*%s*" % key).split() if k.endswith(suffix)]
    eq(len(keys), 1, "Redis keys of %s ending %s" % (key, suffix))
    return keys[0]


def timed_check(r, port, body):
    """POST /check between two readings of Redis TIME: (status, headers,
    answer, before_us, after_us)."""
    t0 = redis_us(r)
    st, h, ans = H.request(port, "POST", "/check", body)
    t1 = redis_us(r)
    return st, h, ans, t0, t1


def ms_to(end_s, t_us):
    return -(-(end_s * 1000000 - t_us) // 1000)


def within(v, lo, hi, what):
    check(lo <= v <= hi, "%s: %r not in [%r, %r]", what, v, lo, hi)


# ---- periods ------------------------------------------------------------------

def case_daily_numbers(r, d):
    key = "day-%d" % time.time_ns()
    body = {"key": key, "policy": "daily"}
    for i in range(5):
        st, h, ans, t0, t1 = timed_check(r, d.port, body)
        eq(st, 200, "check %d of a daily quota of 5" % (i + 1))
    lim = ans["limits"][0]
    start = period_start("day", "Europe/Berlin", t0 // 1000000)
    end = period_next("day", "Europe/Berlin", t0 // 1000000)
    eq(lim["period"], "day", "the answer's period")
    eq(lim["timezone"], "Europe/Berlin", "the answer's timezone")
    eq(lim["window_ms"], (end - start) * 1000, "window_ms: the Berlin day's length")
    eq(ans["remaining"], 0, "remaining after 5")
    within(ans["reset_ms"], ms_to(end, t1), ms_to(end, t0), "reset_ms: to Berlin's next midnight")
    # the key lives until the period ends
    pttl = int(r.cli("PTTL", key_of(r, key, ":fw:day@Europe/Berlin")))
    within(pttl, ms_to(end, redis_us(r)) - 1000, ms_to(end, t0), "the key's PTTL")
    st, h, ans, t0, t1 = timed_check(r, d.port, body)
    eq(st, 429, "the 6th check")
    within(ans["retry_after_ms"], ms_to(end, t1), ms_to(end, t0), "retry_after_ms")
    ra = int(h["retry-after"])
    within(ra, ms_to(end, t1) // 1000, -(-ms_to(end, t0) // 1000), "Retry-After")
    pol = h["ratelimit-policy"]
    check(";q=5;" in pol + ";" and (";w=%d" % (end - start)) in pol, "RateLimit-Policy %r", pol)
    check(h["ratelimit"].endswith(";t=%d" % ra), "RateLimit t is Retry-After: %r", h["ratelimit"])


def case_weekly_and_monthly(r, d):
    key = "wm-%d" % time.time_ns()
    st, h, ans, t0, t1 = timed_check(r, d.port, {"key": key, "policy": "weekly"})
    eq(st, 200, "a weekly check")
    lim = ans["limits"][0]
    eq((lim["period"], lim["week_start"], lim["timezone"]), ("week", "sunday", "America/New_York"),
       "the week's fields")
    ws = 6  # sunday, as Python's weekday() counts
    end = period_next("week", "America/New_York", t0 // 1000000, ws)
    start = period_start("week", "America/New_York", t0 // 1000000, ws)
    eq(lim["window_ms"], (end - start) * 1000, "the week's length")
    # a sliding counter's key lives through the next period too
    nxt = period_next("week", "America/New_York", end, ws)
    pttl = int(r.cli("PTTL", key_of(r, key, ":swc:week-sunday@America/New_York")))
    within(pttl, ms_to(nxt, redis_us(r)) - 1000, ms_to(nxt, t0), "the weekly counter's PTTL")

    st, h, ans, t0, t1 = timed_check(r, d.port, {"key": key, "policy": "monthly"})
    eq(st, 200, "a monthly check")
    m, dd = ans["limits"]
    end = period_next("month", "America/New_York", t0 // 1000000)
    start = period_start("month", "America/New_York", t0 // 1000000)
    eq(m["window_ms"], (end - start) * 1000, "the month's length")
    within(m["reset_ms"], ms_to(end, t1), ms_to(end, t0), "the month's reset_ms")
    eq(m["remaining"], 9999, "the month's remaining")
    eq(dd["remaining"], 499, "the day's remaining")
    eq(h["x-ratelimit-remaining"], "499", "X-RateLimit-Remaining (the binding day)")


def zic_zone(tmp, midnight_in):
    """A TZDIR holding Test/Midnight, a zone of a fixed offset whose next
    local midnight is `midnight_in` seconds away: (dir, that midnight)."""
    now = int(time.time())
    target = now + midnight_in
    off = (-target) % 86400
    if off > 43200:
        off -= 86400
    sign = "-" if off < 0 else ""
    a = abs(off)
    src = os.path.join(tmp, "test.zi")
    with open(src, "w") as f:
        f.write("Zone Test/Midnight %s%d:%02d:%02d - TST\n" % (sign, a // 3600, a // 60 % 60, a % 60))
    out = os.path.join(tmp, "zoneinfo")
    subprocess.run(["zic", "-d", out, src], check=True, capture_output=True)
    return out, target


def case_midnight_reset(r):
    tmp = H.tmpdir()
    tzdir, midnight = zic_zone(tmp, 20)
    cfg = {"identity": ["body"], "failure_mode": "closed", "policies": [
        {"name": "local", "limits": [
            {"algorithm": "fixed_window", "limit": 3, "period": "day", "timezone": "Test/Midnight"}]}]}
    with H.Daemon(cfg, redis=r, env={"TZDIR": tzdir}) as d:
        body = {"key": "mid-%d" % time.time_ns(), "policy": "local"}
        for i in range(3):
            st, h, ans, t0, t1 = timed_check(r, d.port, body)
            eq(st, 200, "check %d of 3 before midnight" % (i + 1))
        check(t1 < midnight * 1000000 - 2000000, "the test ran into midnight already (load?)")
        st, h, ans, t0, t1 = timed_check(r, d.port, body)
        eq(st, 429, "the 4th check before midnight")
        within(ans["reset_ms"], ms_to(midnight, t1), ms_to(midnight, t0), "reset_ms to the zone's midnight")
        eq(ans["limits"][0]["window_ms"], 86400000, "a day of a fixed-offset zone")
        deadline = time.monotonic() + 90
        while True:
            st, h, ans, t0, t1 = timed_check(r, d.port, body)
            if st == 200:
                break
            eq(st, 429, "a check waiting for midnight")
            # the script's time is between t0 and t1: denied when t0 was past
            # midnight already is a denial after it
            check(t0 < midnight * 1000000, "still denied after the zone's midnight (Redis TIME %d)", t0)
            check(time.monotonic() < deadline, "no admission within 90 s of the zone's midnight")
            time.sleep(0.2)
        check(t1 >= midnight * 1000000, "admitted before the zone's midnight (Redis TIME %d)", t1)
        eq(ans["remaining"], 2, "remaining: a new day's first check")
        within(ans["reset_ms"], ms_to(midnight + 86400, t1), ms_to(midnight + 86400, t0),
               "reset_ms: the next midnight")


def case_memory_backend():
    """-b memory: the C twins decide by the same calendar (the daemon's clock)."""
    with H.Daemon(conf(), backend="memory") as d:
        key = "mem-%d" % time.time_ns()
        body = {"key": key, "policy": "daily"}
        for i in range(5):
            t0 = time.time_ns() // 1000
            st, h, ans = post(d, body)
            t1 = time.time_ns() // 1000
            eq(st, 200, "check %d of a daily quota of 5 (memory)" % (i + 1))
        end = period_next("day", "Europe/Berlin", t0 // 1000000)
        start = period_start("day", "Europe/Berlin", t0 // 1000000)
        eq(ans["limits"][0]["window_ms"], (end - start) * 1000, "window_ms (memory)")
        within(ans["reset_ms"], ms_to(end, t1), ms_to(end, t0), "reset_ms (memory)")
        eq(post(d, body)[0], 429, "the 6th check (memory)")
        mine = [{"algorithm": "sliding_window_counter", "limit": 2, "period": "month",
                 "timezone": "Australia/Lord_Howe"}]
        for want in (200, 200, 429):
            st, h, ans = post(d, {"key": key, "policy": "plans", "limits": mine})
            eq(st, want, "a caller's monthly quota of 2 (memory)")
        t0 = time.time_ns() // 1000
        end = period_next("month", "Australia/Lord_Howe", t0 // 1000000)
        nxt = period_next("month", "Australia/Lord_Howe", end)
        # both counts sit in this month: the estimate is 0 when the next month ends
        within(ans["reset_ms"], ms_to(nxt, t0) - 60000, ms_to(nxt, t0) + 1000, "a monthly counter's reset")


def zic_dst_zones(tmp):
    """A TZDIR with two test-only zones whose clocks change today: at noon
    local standard time now, Test/Short sprang forward an hour ago (a day of
    23 hours), Test/Long fell back an hour ago (25 hours).  -> (dir, offset)."""
    now = int(time.time())
    off = (12 * 3600 - now % 86400) % 86400
    if off > 43200:
        off -= 86400
    change = time.gmtime(now - 3600)
    when = "%d only - %s %d %02d:%02d:%02du" % (
        change.tm_year, time.strftime("%b", change), change.tm_mday, change.tm_hour,
        change.tm_min, change.tm_sec)
    sign, a = ("-" if off < 0 else ""), abs(off)
    zoff = "%s%d:%02d:%02d" % (sign, a // 3600, a // 60 % 60, a % 60)
    src = os.path.join(tmp, "dst.zi")
    with open(src, "w") as f:
        f.write("Rule S %s 1:00 D\n" % when)
        # and back a year on (else zic's footer says DST all year and the
        # change today is no transition at all)
        f.write("Rule S %d only - Jan 1 00:00u 0 S\n" % (change.tm_year + 2))
        f.write("Rule L 2000 only - Jan 1 00:00u 1:00 D\n")
        f.write("Rule L %s 0 S\n" % when)
        f.write("Zone Test/Short %s S TEST%%s\n" % zoff)
        f.write("Zone Test/Long %s L TEST%%s\n" % zoff)
    out = os.path.join(tmp, "zoneinfo")
    subprocess.run(["zic", "-b", "fat", "-d", out, src], check=True, capture_output=True)
    return out


def mktime_day(path, t):
    """glibc's word on the local day holding t in the zone file at path:
    (its start, the next midnight) by mktime under TZ."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = ":" + path
    time.tzset()
    try:
        lt = time.localtime(t)
        start = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1)))
        end = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday + 1, 0, 0, 0, 0, 0, -1)))
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()
    return start, end


def case_dst_days(r):
    tzdir = zic_dst_zones(H.tmpdir())
    cfg = {"identity": ["body"], "failure_mode": "closed", "policies": [
        {"name": z, "limits": [{"algorithm": a, "limit": 10, "period": "day", "timezone": "Test/" + z}]}
        for z, a in (("Short", "fixed_window"), ("Long", "sliding_window_counter"))]}
    with H.Daemon(cfg, redis=r, env={"TZDIR": tzdir}) as d:
        for zone, hours in (("Short", 23), ("Long", 25)):
            st, h, ans, t0, t1 = timed_check(r, d.port, {"key": "dst-%d" % time.time_ns(), "policy": zone})
            eq(st, 200, "a check on Test/%s's day" % zone)
            start, end = mktime_day(os.path.join(tzdir, "Test", zone), t0 // 1000000)
            eq(end - start, hours * 3600, "mktime's length of Test/%s's day" % zone)
            eq(ans["limits"][0]["window_ms"], (end - start) * 1000, "window_ms of Test/%s's day" % zone)
            if zone == "Short":
                within(ans["reset_ms"], ms_to(end, t1), ms_to(end, t0), "reset_ms to mktime's midnight")
            else:
                # a counter's count weighs through the next day: its reset ends that day
                nstart, nend = mktime_day(os.path.join(tzdir, "Test", zone), end)
                within(ans["reset_ms"], ms_to(nend, t1), ms_to(nend, t0), "reset_ms to the next day's end")
            w = ";w=%d" % (end - start)
            check(w in h["ratelimit-policy"], "RateLimit-Policy %r without %s", h["ratelimit-policy"], w)
            print("# DST through the daemon: Test/%s (changed an hour ago): window_ms %d, reset_ms %d; "
                  "mktime: day %d s, midnight in %d ms" % (zone, ans["limits"][0]["window_ms"],
                                                           ans["limits"][0]["reset_ms"], end - start,
                                                           ms_to(end, t0)))


def case_config_errors(r):
    bad = {"policies": [
        {"name": "a", "limits": [{"algorithm": "token_bucket", "limit": 10, "period": "day"}]},
        {"name": "b", "limits": [{"algorithm": "fixed_window", "limit": 10, "period": "day",
                                  "timezone": "Mars/Olympus_Mons"}]},
        {"name": "c", "request_limits_max": 5,
         "limits": [{"algorithm": "fixed_window", "limit": 10, "window": "1m"}]}]}
    path = H.write_config(bad)
    rc, out, err = H.run_cli(["-t", "-c", path])
    text = out + err
    check(rc != 0, "-t accepted a bad config: %s", text)
    for want in ("policies[0].limits[0].period: only fixed_window and sliding_window_counter",
                 "policies[1].limits[0].timezone: unknown time zone \"Mars/Olympus_Mons\"",
                 "policies[2].request_limits_max: caps the limits callers send"):
        check(want in text, "-t does not say %r: %s", want, text)


# ---- request limits ------------------------------------------------------------

def post(d, body):
    return H.request(d.port, "POST", "/check", body)


def case_request_limits(r, d):
    key = "rl-%d" % time.time_ns()
    mine = [{"algorithm": "fixed_window", "limit": 3, "window": "1m"},
            {"algorithm": "sliding_window_counter", "limit": 1000, "period": "day",
             "timezone": "America/New_York"}]
    for i in range(3):
        st, h, ans = post(d, {"key": key, "policy": "plans", "limits": mine})
        eq(st, 200, "check %d under the caller's limit of 3" % (i + 1))
        eq([x["limit"] for x in ans["limits"]], [3, 1000], "the limits answered")
    eq(ans["limits"][1]["period"], "day", "the caller's period")
    st, h, ans = post(d, {"key": key, "policy": "plans", "limits": mine})
    eq(st, 429, "the 4th check under the caller's limit of 3")
    eq(h["x-ratelimit-limit"], "3", "X-RateLimit-Limit")
    # the plan grows: the same key keeps its count of 3 (a denial counts nothing)
    bigger = [dict(mine[0], limit=10), mine[1]]
    st, h, ans = post(d, {"key": key, "policy": "plans", "limits": bigger})
    eq(st, 200, "a check after the plan grew")
    eq(ans["limits"][0]["remaining"], 6, "remaining of 10 after 4 counted")
    eq(ans["limits"][1]["remaining"], 1000 - 4, "the daily count, kept")
    # the same bytes written with an escape: read by jansson, same limits
    st, h, ans = H.request(d.port, "POST", "/check",
                           ('{"key":"%s","policy":"plans","limits":[{"algorithm":"fixed_\\u0077indow",'
                            '"limit":10,"window":"1m"}]}' % key).encode(),
                           headers={"Content-Type": "application/json"})
    eq(st, 200, "limits with an escape")
    eq(ans["remaining"], 5, "remaining of 10 after 5 counted")


def case_shares_the_policy_limit(r, d):
    key = "share-%d" % time.time_ns()
    for _ in range(2):
        st, h, ans = post(d, {"key": key, "policy": "plans"})
        eq(st, 200, "a check under the policy's own limit")
    eq(ans["remaining"], 98, "remaining of the policy's 100")
    st, h, ans = post(d, {"key": key, "policy": "plans",
                          "limits": [{"algorithm": "fixed_window", "limit": 1000, "window": "60s"}]})
    eq(st, 200, "the caller's 1000 per minute")
    eq(ans["remaining"], 997, "the policy's count carried over (same algorithm and window)")


def case_request_limits_refused(r, d):
    key = "bad-%d" % time.time_ns()
    ok = {"algorithm": "fixed_window", "limit": 3, "window": "1m"}
    cases = [
        ({"policy": "fixed", "limits": [ok]}, "limits", "takes no limits from the caller"),
        ({"policy": "plans", "limits": [ok, dict(ok, window="soon")]}, "limits[1].window", ""),
        ({"policy": "plans", "limits": [ok, ok]}, "limits[1]", "same algorithm and window"),
        ({"policy": "plans", "limits": [dict(ok, limit=100001)]}, "limits[0].limit",
         "request_limits_max"),
        ({"policy": "plans", "limits": [dict(ok, window="1m", period="day")]}, "limits[0].period", ""),
        ({"policy": "plans", "limits": [{"algorithm": "gcra", "limit": 3, "period": "day"}]},
         "limits[0].period", "only fixed_window and sliding_window_counter"),
        ({"policy": "plans", "limits": [{"algorithm": "fixed_window", "limit": 3, "period": "day",
                                         "timezone": "Nowhere/Atlantis"}]},
         "limits[0].timezone", "unknown time zone"),
        ({"policy": "plans", "limits": [{"algorithm": "fixed_window", "limit": 3, "period": "day",
                                         "timezone": "../../../etc/passwd"}]},
         "limits[0].timezone", ""),
        ({"policy": "plans", "limits": [dict(ok, window="%ds" % (i + 1)) for i in range(9)]},
         "limits", "1..8"),
        ({"policy": "plans", "limits": []}, "limits", "1..8"),
        ({"policy": "plans", "limits": {"algorithm": "fixed_window"}}, "limits", ""),
        ({"policy": "plans", "limits": [[[[[[1]]]]]]}, "limits", ""),
        ({"policy": "plans", "limits": [dict(ok, burst=5)]}, "limits[0].burst", ""),
        ({"policy": "plans", "limits": [dict(ok, identity=["peer"])]}, "limits[0].identity",
         "count by the policy's identity"),
    ]
    for body, field, words in cases:
        body = dict(body, key=key)
        st, h, ans = post(d, body)
        H.expect_error(st, h, ans, 400, field=field, what="limits %r" % (body["limits"],))
        check(words in ans.get("error", ""), "error %r does not say %r", ans.get("error"), words)
    # nothing was counted by any of them
    st, h, ans = post(d, {"key": key, "policy": "plans", "limits": [ok]})
    eq((st, ans["remaining"]), (200, 2), "the first counted check after the refusals")


# ---- Envoy's descriptor limit (the RLS listener's rule) -------------------------

RULES = """\
domain: plans
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 100
"""


def rls_ask(d, tenant, limit=None):
    desc = {"entries": [{"key": "tenant", "value": tenant}]}
    if limit is not None:
        desc["limit"] = {"requestsPerUnit": limit, "unit": "DAY"}
    return H.request(d.port, "POST", "/json", {"domain": "plans", "descriptors": [desc]})


def rls_refused(d, tenant, limit, field, words, remaining):
    """A descriptor's limit refused (400 naming field, saying words), and
    nothing counted: the next hit without it leaves `remaining`."""
    st, h, ans = rls_ask(d, tenant, limit)
    H.expect_error(st, h, ans, 400, field=field, what="a descriptor's limit of %d" % limit)
    check(words in ans["error"], "error %r does not say %r", ans["error"], words)
    st, h, ans = rls_ask(d, tenant)
    eq(ans["statuses"][0]["limitRemaining"], remaining, "the rule's count after a refusal")


def case_rls_descriptor_limits(r):
    tmp = H.tmpdir()
    rules = os.path.join(tmp, "plans.yaml")
    with open(rules, "w") as f:
        f.write(RULES)
    tenant = "t-%d" % time.time_ns()
    cfg = {"failure_mode": "closed", "rls": {"config": rules, "request_limits_max": 1000}}
    with H.Daemon(cfg, redis=r) as d:
        # no policy: a check bringing limits is refused, not allowed as unlimited
        st, h, ans = H.request(d.port, "POST", "/check", {"key": tenant, "limits": [
            {"algorithm": "fixed_window", "limit": 3, "window": "1m"}]})
        H.expect_error(st, h, ans, 400, field="limits", what="limits with no policy")
        check("no policy decides this check" in ans["error"], "error %r", ans["error"])
        for i in range(3):
            st, h, ans = rls_ask(d, tenant, 5)
            eq((st, ans["statuses"][0]["code"]), (200, "OK"), "descriptor hit %d under its limit of 5" % i)
        eq(ans["statuses"][0]["limitRemaining"], 2, "remaining of the descriptor's 5")
        # the plan grows: the same key, the count kept
        st, h, ans = rls_ask(d, tenant, 50)
        eq(ans["statuses"][0]["limitRemaining"], 46, "remaining of 50 after 4 hits")
        # the file's rule of the same unit counts in the same key
        st, h, ans = rls_ask(d, tenant)
        eq(ans["statuses"][0]["limitRemaining"], 95, "the rule's 100 after 5 hits")
        rls_refused(d, tenant, 1001, "descriptors[0].limit.requests_per_unit", "at most 1000", 94)
    cfg["rls"] = {"config": rules, "request_limits": False}
    with H.Daemon(cfg, redis=r) as d:
        rls_refused(d, tenant, 5, "descriptors[0].limit", "(rls.request_limits is false)", 93)
    bad = {"rls": {"config": rules, "request_limits": False, "request_limits_max": 5}}
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(bad)])
    check(rc != 0 and "rls.request_limits_max: caps the limits descriptors bring" in out + err,
          "-t on request_limits_max without request_limits: %s", out + err)


# ---- concurrency ---------------------------------------------------------------

def case_race(ports, body):
    n = 4 * LIMIT
    allowed, denied = tally(H.blast(ports, [body] * n, THREADS))
    eq(len(allowed), LIMIT, "allowed checks of a daily quota of %d" % LIMIT)
    eq(len(denied), n - LIMIT, "denied checks")
    eq(sorted(a["remaining"] for _, a, _ in allowed), list(range(LIMIT)),
       "remaining values of the allowed checks (each saw its own count)")
    served = collections.Counter(p for _, _, p in allowed + denied)
    eq(sorted(served), sorted(ports), "daemons that answered")


def main():
    t = H.Tests(timeout=300)
    try:
        with H.Redis() as r, H.Daemon(conf(), redis=r) as d1, \
                H.Daemon(conf(), redis=r, workers=4) as d2:
            t.run("a daily quota in Europe/Berlin: window_ms, reset_ms, headers, TTL",
                  case_daily_numbers, r, d1)
            t.run("a weekly (sunday) and a monthly quota in America/New_York",
                  case_weekly_and_monthly, r, d1)
            t.run("a day of 23 and of 25 hours through the daemon (test-only zones changing today, "
                  "compiled by zic), as glibc's mktime says", case_dst_days, r)
            t.run("-t: a period of token_bucket, an unknown zone, request_limits_max alone",
                  case_config_errors, r)
            t.run("request limits: counted, limited, the count kept when the plan grows",
                  case_request_limits, r, d1)
            t.run("request limits share the policy's key of the same algorithm and window",
                  case_shares_the_policy_limit, r, d2)
            t.run("request limits refused (400 naming the field), nothing counted",
                  case_request_limits_refused, r, d2)
            ports = [d1.port, d2.port]
            t.run("2 daemons, 40 threads: a daily fixed_window quota admits exactly %d" % LIMIT,
                  case_race, ports, {"key": "race-fw-%d" % time.time_ns(), "policy": "race_fw"})
            t.run("2 daemons, 40 threads: a daily sliding_window_counter quota (Lord Howe) admits "
                  "exactly %d" % LIMIT,
                  case_race, ports, {"key": "race-swc-%d" % time.time_ns(), "policy": "race_swc"})
            t.run("2 daemons, 40 threads: a caller's daily quota admits exactly %d" % LIMIT,
                  case_race, ports, {"key": "race-req-%d" % time.time_ns(), "policy": "plans",
                                     "limits": [{"algorithm": "fixed_window", "limit": LIMIT,
                                                 "period": "day", "timezone": "Asia/Kolkata"}]})
            t.run("a daily quota resets at the zone's midnight (test zone via zic, TZDIR)",
                  case_midnight_reset, r)
            t.run("RLS: a descriptor's limit counted in the rule's key, capped, refused when "
                  "rls.request_limits is false", case_rls_descriptor_limits, r)
            t.run("-b memory: a daily quota and a caller's monthly counter", case_memory_backend)
            t.run("both daemons alive", lambda: check(d1.alive() and d2.alive(), "a daemon died"))
    except Exception as e:  # noqa: BLE001
        t.fail("fixture", "%s: %s" % (type(e).__name__, e))
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
