#!/usr/bin/env python3
"""What a caller bringing its own limits (issue 31, items 4 and 5) cannot do
to other callers or past the policy's caps, through the real daemon and a
real Redis.

Zones: a TZDIR of the test's own (the tz database's America/New_York,
Asia/Tokyo, Europe/Berlin, America/Chicago, Europe/Paris; 2,100 hard links of
New York under Load/; a `posix` link to the directory itself, a link out of
it).  One caller names 1,100 zones: another tenant's Asia/Tokyo plan still
works, a reload adding a policy in a new zone is accepted, the requests'
table holds one zone per file (aliases and `posix/` paths add none), and
past 2,048 files a new zone is refused (400 naming the field, a metric) while
configured zones and loaded ones go on.

Caps: a policy with request_limits_max 5 and a request_limits_cap of 5 an
hour; a caller rotates the window length, the algorithm, the period, the
zone, the order of its limits (each check a fresh shape, a fresh key): no
more than 5 admitted in all, and no more keys than the admitted checks' limits
plus the cap's; the capped checks counted by a metric; the memory backend
holds the cap too.
"""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

SYSTEM_TZ = "/usr/share/zoneinfo"
REAL = ("America/New_York", "Asia/Tokyo", "Europe/Berlin", "America/Chicago", "Europe/Paris")
LINKS = 2100          # files under Load/, past the requests' table (2,048)
FIRST = 1100          # zones one caller names first (the table of configured zones holds 1,024)
REQUESTED_MAX = 2048  # docs/API.md, "Calendar periods"
CAP = 5
SHAPES = 200          # checks of each rotation


def tzdir():
    """The test's TZDIR; a missing tz database is a failure, not a skip."""
    d = H.tmpdir("rl-tz-")
    for z in REAL:
        src = os.path.join(SYSTEM_TZ, z)
        check(os.path.isfile(src), "no %s: is tzdata installed?", src)
        os.makedirs(os.path.join(d, os.path.dirname(z)), exist_ok=True)
        shutil.copyfile(src, os.path.join(d, z))
    os.makedirs(os.path.join(d, "Load"))
    for i in range(LINKS):
        os.link(os.path.join(d, "America/New_York"), os.path.join(d, "Load/Z%04d" % i))
    os.symlink(".", os.path.join(d, "posix"))
    os.makedirs(os.path.join(d, "Out"))
    os.symlink(os.path.join(SYSTEM_TZ, "Asia/Tokyo"), os.path.join(d, "Out/Tokyo"))
    return d


def plan(zone, kind="day"):
    return [{"algorithm": "fixed_window", "limit": 1000, "period": kind, "timezone": zone}]


def policies(extra=()):
    return [{"name": "plans", "request_limits": True, "request_limits_max": 100000,
             "limits": [{"algorithm": "fixed_window", "limit": 100, "window": "1m"}]},
            {"name": "berlin", "limits": plan("Europe/Berlin")},
            {"name": "capped", "request_limits": True, "request_limits_max": CAP,
             "request_limits_cap": [{"algorithm": "fixed_window", "limit": CAP, "window": "1h"}],
             "limits": [{"algorithm": "fixed_window", "limit": CAP, "window": "1m"}]}] + list(extra)


def conf(extra=()):
    return {"identity": ["body"], "failure_mode": "closed", "redis": {"timeout": "5s"},
            "policies": policies(extra)}


def zones_loaded(d, table):
    return H.metric(d, "ratelimitd_time_zones_loaded", {"table": table})


def name_zones(c, key, names):
    """One check per zone name; {status: count} and the first refusal."""
    seen, first_bad = {}, None
    for z in names:
        st, h, ans = c.request("POST", "/check", {"key": key, "policy": "plans", "limits": plan(z)})
        seen[st] = seen.get(st, 0) + 1
        if st != 200 and first_bad is None:
            first_bad = (st, h, ans)
    return seen, first_bad


def reload_ok(d, cfg):
    before = H.metric(d, "ratelimitd_config_reloads_total", {"result": "ok"})
    failed = H.metric(d, "ratelimitd_config_reloads_total", {"result": "failed"})
    d.rewrite_config(cfg)
    d.reload()
    H.wait_for(lambda: H.metric(d, "ratelimitd_config_reloads_total", {"result": "ok"}) > before
               or H.metric(d, "ratelimitd_config_reloads_total", {"result": "failed"}) > failed,
               "the reload to end")
    eq(H.metric(d, "ratelimitd_config_reloads_total", {"result": "failed"}), failed,
       "failed reloads (log: %s)" % d.log()[-600:])


# ---- zones --------------------------------------------------------------------

def case_zones_one_caller(r, d):
    key = "zones-%d" % time.time_ns()
    rss0 = H.rss_kib(d)
    with H.Client(d.port) as c:
        seen, bad = name_zones(c, key, ["Load/Z%04d" % i for i in range(FIRST)])
        eq(seen, {200: FIRST}, "checks naming %d zones (first refusal: %r)" % (FIRST, bad))
        # another tenant's plan in a zone nobody named yet
        st, _, ans = c.request("POST", "/check", {"key": "tenant-tokyo", "policy": "plans",
                                                  "limits": plan("Asia/Tokyo")})
        eq(st, 200, "another tenant's Asia/Tokyo plan after %d zones (%r)" % (FIRST, ans))
        eq(ans["limits"][0]["timezone"], "Asia/Tokyo", "the answer's zone")
    eq(zones_loaded(d, "requested"), FIRST + 1, "zones named only by requests")
    eq(zones_loaded(d, "configured"), 1, "configured zones (Europe/Berlin)")
    # a reload adding a policy in a new zone: the configurations' table is theirs
    reload_ok(d, conf([{"name": "chicago", "limits": plan("America/Chicago")}]))
    st, _, ans = H.post(d, {"key": key, "policy": "chicago"})
    eq(st, 200, "a check of the policy the reload added (%r)" % (ans,))
    eq(ans["limits"][0]["timezone"], "America/Chicago", "its zone")
    eq(zones_loaded(d, "configured"), 2, "configured zones after the reload")
    H.note("RSS %d KiB -> %d KiB after %d zones named by requests", rss0, H.rss_kib(d), FIRST + 1)


def case_zones_aliases(r, d):
    key = "alias-%d" % time.time_ns()
    n0 = zones_loaded(d, "requested")
    with H.Client(d.port) as c:
        for name in ("posix/Load/Z0007", "posix/posix/Load/Z0007", "posix/posix/posix/Asia/Tokyo",
                     "Load/Z0007"):
            st, _, ans = c.request("POST", "/check", {"key": key, "policy": "plans",
                                                      "limits": plan(name)})
            eq(st, 200, "a check naming %s (%r)" % (name, ans))
            want = "Asia/Tokyo" if name.endswith("Tokyo") else "Load/Z0007"
            eq(ans["limits"][0]["timezone"], want, "the zone %s leads to" % name)
        # a configured zone is served under the name the configuration gives it
        st, _, ans = c.request("POST", "/check", {"key": key, "policy": "plans",
                                                  "limits": plan("posix/Europe/Berlin")})
        eq((st, ans["limits"][0]["timezone"]), (200, "Europe/Berlin"), "posix/Europe/Berlin")
        st, h, ans = c.request("POST", "/check", {"key": key, "policy": "plans",
                                                  "limits": plan("Out/Tokyo")})
        H.expect_error(st, h, ans, 400, "limits[0].timezone", "a link out of $TZDIR")
        check("leads out of the tz database" in ans["error"], "the refusal: %r", ans)
    eq(zones_loaded(d, "requested"), n0, "zones after naming aliases of loaded ones")
    # the key is the zone's: one count whatever the alias
    keys = [k for k in r.cli("KEYS", "*%s*" % key).split() if "day@" in k]
    check(sorted(k.rsplit("@", 1)[1] for k in keys) == ["Asia/Tokyo", "Europe/Berlin", "Load/Z0007"],
          "the keys' zones: %r", keys)


def case_zones_bound(r, d):
    key = "bound-%d" % time.time_ns()
    n0 = zones_loaded(d, "requested")
    refused0 = H.metric(d, "ratelimitd_time_zones_refused_total")
    with H.Client(d.port) as c:
        seen, bad = name_zones(c, key, ["Load/Z%04d" % i for i in range(LINKS)])
    eq(zones_loaded(d, "requested"), REQUESTED_MAX, "zones named only by requests, at the bound")
    # the names loaded before answer as before; each new one until the bound
    check(seen.get(400, 0) >= LINKS - REQUESTED_MAX and
          seen.get(200, 0) + seen.get(400, 0) == LINKS, "answers %r (%d loaded before)", seen, n0)
    st, h, ans = bad
    H.expect_error(st, h, ans, 400, "limits[0].timezone", "a zone past the bound")
    check("2048 zones named by requests are loaded already" in ans["error"], "the refusal: %r", ans)
    eq(H.metric(d, "ratelimitd_time_zones_refused_total") - refused0, seen[400],
       "ratelimitd_time_zones_refused_total")
    # loaded zones and configured ones go on; a reload still adds a zone
    st, _, ans = H.post(d, {"key": "tenant-tokyo", "policy": "plans", "limits": plan("Asia/Tokyo")})
    eq(st, 200, "the Asia/Tokyo plan at the bound (%r)" % (ans,))
    reload_ok(d, conf([{"name": "chicago", "limits": plan("America/Chicago")},
                       {"name": "paris", "limits": plan("Europe/Paris")}]))
    st, _, ans = H.post(d, {"key": key, "policy": "paris"})
    eq((st, ans["limits"][0]["timezone"]), (200, "Europe/Paris"), "the policy the reload added")
    check(d.alive(), "the daemon died")


# ---- caps ---------------------------------------------------------------------

ALGOS = [("fixed_window", {}), ("sliding_window_counter", {}), ("sliding_window_log", {}),
         ("token_bucket", {"burst": CAP}), ("gcra", {"burst": CAP})]
KINDS = ["minute", "hour", "day", "week", "month", "year"]
# zones loaded already (configured, or named by the cases before): the
# requests' table may be full by now
ZONES = ["Europe/Berlin", "Asia/Tokyo", "posix/Asia/Tokyo", "America/Chicago", "Europe/Paris"]


def rot_window(i):
    return [{"algorithm": "fixed_window", "limit": CAP, "window": "%dms" % (1000 + i)}]


def rot_algorithm(i):
    a, extra = ALGOS[i % len(ALGOS)]
    return [dict({"algorithm": a, "limit": CAP, "window": "%dms" % (2000 + i)}, **extra)]


def rot_period(i):
    return [{"algorithm": ("fixed_window", "sliding_window_counter")[i % 2], "limit": CAP,
             "period": KINDS[i % len(KINDS)], "timezone": "Load/Z%04d" % i}]


def rot_zone(i):
    return [{"algorithm": "fixed_window", "limit": CAP, "period": "day",
             "timezone": ZONES[i % len(ZONES)] if i < len(ZONES) else "Load/Z%04d" % (300 + i)}]


def rot_order(i):
    a = {"algorithm": "token_bucket", "limit": CAP, "window": "%dms" % (3000 + i)}
    b = {"algorithm": "fixed_window", "limit": CAP, "window": "%dms" % (5000 + i)}
    return [a, b] if i % 2 else [b, a]


def rotate(r, d, shape, nlimits):
    key = "cap-%s-%d" % (shape.__name__, time.time_ns())
    capped0 = H.metric(d, "ratelimitd_request_limits_capped_total")
    admitted = denied = 0
    with H.Client(d.port) as c:
        for i in range(SHAPES):
            st, _, ans = c.request("POST", "/check", {"key": key, "policy": "capped",
                                                      "limits": shape(i)})
            check(st in (200, 429), "check %d of %s: %d %r", i, shape.__name__, st, ans)
            admitted += st == 200
            denied += st == 429
            if st == 429:
                eq(ans["limits"][-1]["limit"], CAP, "the binding cap, last in the answer")
    keys = r.cli("KEYS", "*%s*" % key).split()
    H.note("%s: %d of %d admitted, %d keys", shape.__name__, admitted, SHAPES, len(keys))
    eq(admitted, CAP, "checks admitted under a cap of %d an hour" % CAP)
    check(len(keys) <= admitted * nlimits + 1, "%d keys for %d admitted checks of %d limits: %r",
          len(keys), admitted, nlimits, keys)
    check(any(":cap-fw:3600000" in k for k in keys), "no cap key among %r", keys)
    eq(H.metric(d, "ratelimitd_request_limits_capped_total") - capped0, denied,
       "ratelimitd_request_limits_capped_total")


def case_caps_refused(r, d):
    lim = {"algorithm": "fixed_window", "limit": 1, "window": "1s"}
    st, h, ans = H.post(d, {"key": "k", "policy": "capped",
                            "limits": [dict(lim, window="%ds" % (i + 1)) for i in range(8)]})
    H.expect_error(st, h, ans, 400, "limits", "8 limits and a cap")
    check("1..7" in ans["error"], "the refusal: %r", ans)
    bad = conf()
    bad["policies"].append({"name": "x", "limits": [lim], "request_limits_cap": [lim]})
    bad["policies"].append({"name": "y", "request_limits": True, "limits": [lim],
                            "request_limits_cap": [dict(lim, algorithm="concurrency", window=None)]})
    del bad["policies"][-1]["request_limits_cap"][0]["window"]
    bad["policies"].append({"name": "z", "request_limits": True, "limits": [lim],
                            "request_limits_cap": [lim, lim]})
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(bad)])
    check(rc != 0, "-t accepted bad caps: %s", out + err)
    for want in ("policies[3].request_limits_cap: caps what callers' own limits admit",
                 "policies[4].request_limits_cap[0].algorithm: a cap counts what is admitted",
                 "policies[5].request_limits_cap[1]: same algorithm and window"):
        check(want in out + err, "-t does not say %r: %s", want, out + err)


def case_caps_missing_warned(r, d):
    """request_limits without a cap: -t says it, naming the policy; with a cap it says nothing."""
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(conf())])
    eq(rc, 0, "-t of the test's config: %s" % (out + err))
    check("policies[0]: request_limits without request_limits_cap" in out + err,
          "-t does not warn about policies[0] (no cap): %s", out + err)
    check("policies[2]: request_limits without" not in out + err,
          "-t warns about policies[2], which has a cap: %s", out + err)


def case_caps_memory_backend(r, d):
    with H.Daemon({"identity": ["body"], "policies": policies()}, backend="memory") as m:
        st = [H.post(m, {"key": "m", "policy": "capped", "limits": rot_window(i)})[0]
              for i in range(50)]
        eq((st.count(200), st.count(429)), (CAP, 50 - CAP), "-b memory: admitted, denied")
        eq(H.metric(m, "ratelimitd_request_limits_capped_total"), 50 - CAP, "capped checks")


def main():
    cases = [
        ("one caller names 1,100 zones: another tenant's Asia/Tokyo plan works, a reload adds "
         "a zone", case_zones_one_caller),
        ("aliases, posix/ paths: one zone each, named by its file; a link out is unknown",
         case_zones_aliases),
        ("past 2,048 files named by requests: refused (400, metric); loaded and configured "
         "zones go on", case_zones_bound),
        ("rotating the window: at most the cap admitted, keys bounded",
         lambda r, d: rotate(r, d, rot_window, 1)),
        ("rotating the algorithm", lambda r, d: rotate(r, d, rot_algorithm, 1)),
        ("rotating the period (and its zone)", lambda r, d: rotate(r, d, rot_period, 1)),
        ("rotating the zone", lambda r, d: rotate(r, d, rot_zone, 1)),
        ("rotating the order of two limits (and their windows)",
         lambda r, d: rotate(r, d, rot_order, 2)),
        ("caps: a list too long with them; -t refuses bad caps", case_caps_refused),
        ("request_limits without a cap: -t warns, naming the policy", case_caps_missing_warned),
        ("-b memory: rotating the window admits at most the cap", case_caps_memory_backend),
    ]

    def fixture():
        tz = tzdir()

        class Both:
            def __enter__(self):
                self.r = H.Redis().__enter__()
                try:
                    self.d = H.Daemon(conf(), redis=self.r, env={"TZDIR": tz}, workers=2)
                except Exception:
                    self.r.__exit__(None, None, None)
                    raise
                return self.r, self.d

            def __exit__(self, *exc):
                self.d.stop()
                self.r.__exit__(*exc)

        return Both()

    H.suite(cases, fixture, timeout=600)


if __name__ == "__main__":
    main()
