#!/usr/bin/env python3
"""envoyproxy/ratelimit's rules and semantics through the real daemon and a
real Redis, driven by POST /json (its HTTP form of ShouldRateLimit): a rule
file shaped as its examples answering what its own integration scripts
expect; every semantic of issue 21 items 3-5 (matching, hits_addend, a
descriptor's own limit, unlimited, replaces, shadow and quota modes, windows
aligned to the clock, algorithm/window/burst/rate_limits, several
descriptors); exact counts under concurrency with two daemons sharing one
Redis (RL_TOPOLOGY: also Cluster and Sentinel); the metrics per domain and
rule; SIGHUP and -t with good and bad rule files; then failure_mode, the
deny cache, hybrid and the memory backend for RLS as for /check.
"""

import collections
import contextlib
import json
import os
import re
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

# The shape of envoyproxy/ratelimit's examples/ratelimit/config/example.yaml:
# the file its integration scripts (replaces.sh, trigger-ratelimit.sh, ...)
# run against, as a user would copy it.
EXAMPLE = """\
---
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
      - key: baz
        rate_limit:
          unit: second
          requests_per_unit: 1
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: unspec
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qux
    rate_limit:
      unlimited: true
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
"""

MONGO = """\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"""

# Ours: every semantic, and what envoyproxy/ratelimit lacks.  Counting
# rules use year or day windows so that no window ends during a case.
OURS = """\
domain: it
descriptors:
  - key: client
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: client
    value: vip
    rate_limit: {unit: year, requests_per_unit: 8, name: vip}
  - key: client
    value: whitelisted
  - key: path
    value: /api/*
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: path
    value: /s/*
    share_threshold: true
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 3}
  - key: hot
    rate_limit: {unit: year, requests_per_unit: 50}
  - key: pair
    rate_limits:
      - {unit: year, requests_per_unit: 30}
      - {algorithm: sliding_window_log, window: 24h, requests_per_unit: 20, name: daily}
  - key: bucket
    rate_limit: {algorithm: token_bucket, window: 24h, requests_per_unit: 10, burst: 4}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: hybrid
    mode: hybrid
    sync_interval: 20ms
    rate_limit: {unit: year, requests_per_unit: 1000}
  - key: near
    rate_limit: {unit: year, requests_per_unit: 10}
"""


def write_rules(files):
    """A directory holding files {name: text}; its path."""
    d = os.path.join(H.tmpdir(), "rules-%s" % uuid.uuid4().hex[:8])
    os.makedirs(d)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


def rls_conf(rules, failure="closed", **rls):
    r = {"config": rules}
    r.update(rls)
    # counts are under test: a generous backend timeout, and a failure is a
    # visible 503 (closed), never a silent admission
    return {"failure_mode": failure, "redis": {"timeout": "5s"}, "rls": r}


def post(port, body):
    return H.request(port, "POST", "/json", body)


def desc(*kv, **extra):
    d = {"entries": [{"key": k, "value": v} for k, v in kv]}
    d.update(extra)
    return d


def ask(port, domain, *descs, want=None, **extra):
    """POST /json; (status, body).  want: the HTTP status expected."""
    body = {"domain": domain, "descriptors": list(descs)}
    body.update(extra)
    st, h, ans = post(port, body)
    check(isinstance(ans, dict), "not a JSON object: %r", ans)
    check(H.media_type(h) == "application/json", "Content-Type %r", h.get("content-type"))
    if want is not None:
        eq(st, want, "status of %r (answer %r)" % (body, ans))
    return st, ans


def metrics(port):
    st, h, text = H.request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    return text


def metric(text, name, **labels):
    """The value of name{labels} (labels exactly, in any order); None when absent."""
    for m in re.finditer(r"^%s\{([^}]*)\} (\d+)$" % re.escape(name), text, re.M):
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        if got == labels:
            return int(m.group(2))
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m and not labels else None


def script_calls(r):
    # the daemon's script calls: FCALL (Redis 7), EVALSHA (no FUNCTION)
    return sum(int(c) for c in re.findall(r"^cmdstat_(?:evalsha|fcall):calls=(\d+)",
                                          r.cli("INFO", "commandstats"), re.M))


def redis_now(r):
    out = r.cli("TIME").split()
    return int(out[0]) + int(out[1]) / 1e6


def away_from_the_minute(r, margin=15):
    """Wait, by Redis's clock, until `margin` seconds or more are left in the
    minute: a sequence of minute windows then runs in one window."""
    deadline = time.monotonic() + 70
    while 60 - redis_now(r) % 60 < margin:
        check(time.monotonic() < deadline, "Redis's clock did not move on")
        time.sleep(0.2)


# ---------------------------------------------------------------- the example file

def t_example_replaces(ds, r):
    """replaces.sh, descriptor by descriptor as Envoy's routes build them."""
    p = ds[0].port
    away_from_the_minute(r)
    two = lambda foo, bar: desc(("foo", foo), ("bar", bar))  # noqa: E731
    sd = lambda dst: desc(("source_cluster", "proxy"), ("destination_cluster", dst))  # noqa: E731
    steps = [
        ([two("bkthomps", "banned")], 429),
        ([two("bkthomps", "banned"), sd("mock")], 429),
        ([two("bkthomps", "banned"), sd("override")], 200),
        ([two("bkthomps", "banned"), sd("override")], 200),
        ([two("bkthomps", "banned"), sd("override")], 429),
        ([two("my_foo", "bkthomps"), sd("bkthomps")], 200),
        ([two("my_foo", "bkthomps"), sd("bkthomps")], 200),
        ([two("my_foo", "bkthomps"), sd("bkthomps")], 429),
        ([two("my_foo", "bkthomps"), sd("not_bkthomps")], 200),
        ([two("my_foo", "bkthomps"), sd("not_bkthomps")], 429),
        ([two("my_foo", "bkthomps"), sd("bkthomps")], 429),
        ([two("my_foo", "bkthomps"), sd("fake"), desc(("category", "account"))], 200),
        ([two("my_foo", "bkthomps"), sd("fake"), desc(("category", "account"))], 200),
        ([two("my_foo", "bkthomps"), sd("fake"), desc(("category", "account"))], 200),
    ]
    for i, (descs, want) in enumerate(steps):
        # alternate the two daemons: they share the counts
        st, ans = ask(ds[i % 2].port, "rl", *descs)
        eq(st, want, "replaces.sh step %d (%r)" % (i + 1, ans))
    # a replaced rule answers OK with no current limit
    st, ans = ask(p, "rl", two("my_foo", "bkthomps"), sd("fake"), desc(("category", "account")))
    eq(ans["statuses"][0], {"code": "OK"}, "foo/bar replaced by category's rule")
    eq(ans["statuses"][1], {"code": "OK"}, "source/destination fake replaced")
    eq(ans["statuses"][2]["currentLimit"], {"requestsPerUnit": 4, "unit": "MINUTE"}, "category")


def t_example_trigger_and_shadow(ds, r):
    """trigger-ratelimit.sh, trigger-shadow-mode-key.sh, value-included-...sh."""
    away_from_the_minute(r)
    for i in range(3):
        ask(ds[i % 2].port, "rl", desc(("foo", "pelle"), ("baz", "not-so-shady")), want=200)
    st, ans = ask(ds[0].port, "rl", desc(("foo", "pelle"), ("baz", "not-so-shady")), want=429)
    s = ans["statuses"][0]
    eq(s["code"], "OVER_LIMIT", "fourth")
    eq(s["currentLimit"], {"requestsPerUnit": 3, "unit": "MINUTE"}, "its limit")
    check("limitRemaining" not in s, "over the limit: no limitRemaining (0): %r", s)
    # shadow_mode: over the limit, answered OK, counted as shadow
    for i in range(5):
        st, ans = ask(ds[i % 2].port, "rl", desc(("foo", "pelle"), ("baz", "shady")), want=200)
    eq(ans["overallCode"], "OK", "shadow rule over its limit")
    check("limitRemaining" not in ans["statuses"][0], "shadow: 0 left: %r", ans)
    eq(ans["statuses"][0]["currentLimit"]["requestsPerUnit"], 3, "shadow's limit")
    # detailed_metric: the value names the counter
    for i in range(2):
        ask(ds[0].port, "rl", desc(("unspec", "unspecified_value")), want=200)
    ask(ds[0].port, "rl", desc(("unspec", "unspecified_value")), want=429)
    text = metrics(ds[0].port)
    eq(metric(text, "ratelimitd_rls_over_limit_total", domain="rl",
              rule="unspec_unspecified_value"), 1, "over_limit of unspec_unspecified_value")
    eq(sum(metric(metrics(d.port), "ratelimitd_rls_shadow_mode_total", domain="rl",
                  rule="foo.baz_shady") or 0 for d in ds[:2]), 2,
       "shadow_mode of foo.baz_shady (the 4th and 5th hits, on both daemons)")


def t_example_quota(ds, r):
    """quota.sh: with quota_mode, over only when every quota is."""
    away_from_the_minute(r)
    both = (desc(("service", "service_1")), desc(("service", "service_2")))
    st, ans = ask(ds[0].port, "rl", *both, want=200)
    st, ans = ask(ds[1].port, "rl", *both, want=200)
    eq([s["code"] for s in ans["statuses"]], ["OVER_LIMIT", "OK"], "second: service_1 over")
    st, ans = ask(ds[0].port, "rl", *both, want=429)
    eq(ans["overallCode"], "OVER_LIMIT", "third: every quota over")


def t_example_unlimited_and_unknown(ds, r):
    p = ds[0].port
    st, ans = ask(p, "rl", desc(("qux", "x")), desc(("foo", "f"), ("bay", "b")), want=200)
    eq(ans["statuses"], [{"code": "OK", "limitRemaining": 4294967295}] * 2, "unlimited")
    st, ans = ask(p, "nowhere", desc(("foo", "x")), want=200)
    eq(ans, {"overallCode": "OK", "statuses": [{"code": "OK"}]}, "unknown domain")
    st, ans = ask(p, "mongo_cps", desc(("database", "users")), want=200)
    eq(ans["statuses"][0]["currentLimit"], {"requestsPerUnit": 500, "unit": "SECOND"},
       "the second file of the directory")
    check(ans["statuses"][0]["durationUntilReset"] == "1s", "a second's window: %r", ans)


# ---------------------------------------------------------------- semantics

def t_order_codes_and_errors(ds, r):
    p = ds[0].port
    st, ans = ask(p, "it", desc(("client", "c1")), desc(("nothing", "x")),
                  desc(("client", "whitelisted")), desc(("tenant", "t"), ("user", "u")),
                  desc(("tenant", "t")), want=200)
    sts = ans["statuses"]
    eq(len(sts), 5, "one status per descriptor")
    eq(sts[0]["currentLimit"], {"requestsPerUnit": 5, "unit": "YEAR"}, "client")
    eq(sts[0]["limitRemaining"], 4, "client remaining")
    eq(sts[1], {"code": "OK"}, "no rule")
    eq(sts[2], {"code": "OK"}, "an exact value without a limit")
    eq(sts[3]["limitRemaining"], 2, "nested at full depth")
    eq(sts[4], {"code": "OK"}, "tenant alone: its rule is one level down")
    for body, field in [({"domain": "", "descriptors": [desc(("a", "b"))]}, "domain"),
                        ({"domain": "it", "descriptors": []}, "descriptors"),
                        ({"domain": "it"}, "descriptors"),
                        ({"domain": "it", "descriptors": [{"entries": [{"key": 5}]}]},
                         "descriptors[0].entries[0].key"),
                        ({"domain": "it", "descripters": []}, "descripters"),
                        ({"domain": "it", "descriptors": [desc(("a", "b"), limit={
                            "requestsPerUnit": 1})]}, "descriptors[0].limit.unit")]:
        st, h, b = post(p, body)
        H.expect_error(st, h, b, 400, field, "body %r" % body)
    st, h, b = H.request(p, "POST", "/json", b"{not json")
    H.expect_error(st, h, b, 400, "body")
    # bounds: descriptors and entries per request
    st, h, b = post(p, {"domain": "it", "descriptors": [desc(("client", "b"))] * 257})
    H.expect_error(st, h, b, 400, "descriptors: at most 256")
    st, h, b = post(p, {"domain": "it", "descriptors": [desc(*[("k", "v")] * 65)]})
    H.expect_error(st, h, b, 400, "descriptors[0].entries: at most 64")
    st, ans = ask(p, "it", *[desc(("client", "many%d" % i)) for i in range(256)], want=200)
    eq(len(ans["statuses"]), 256, "256 descriptors answered")
    st, h, b = H.request(p, "POST", "/json", b'{"domain": "it", "descriptors": ' + b"[" * 5000)
    H.expect_error(st, h, b, 400, "body")
    st, h, b = H.request(p, "GET", "/json")
    eq(st, 405, "GET /json")
    eq(h.get("allow"), "POST", "Allow")


def t_hits_addend(ds, r):
    p = ds[0].port
    st, ans = ask(p, "it", desc(("client", "h1")), desc(("client", "h2")), hitsAddend=2)
    eq([s["limitRemaining"] for s in ans["statuses"]], [3, 3], "request hitsAddend 2")
    st, ans = ask(p, "it", desc(("client", "h1"), hitsAddend=3), desc(("client", "h2")),
                  hitsAddend=0)
    eq([s.get("limitRemaining", 0) for s in ans["statuses"]], [0, 2], "descriptor's wins; 0 is 1")
    # 0 only asks
    st, ans = ask(p, "it", desc(("client", "h2"), hitsAddend="0"), want=200)
    eq(ans["statuses"][0]["limitRemaining"], 2, "hitsAddend 0 asks")
    # more than is left: over, and counted (a unit rule counts every hit, as
    # envoyproxy/ratelimit's INCRBY): an ask after it is over too
    ask(p, "it", desc(("client", "h2"), hitsAddend=3), want=429)
    st, ans = ask(p, "it", desc(("client", "h2"), hits_addend=0), want=429)
    check("limitRemaining" not in ans["statuses"][0], "over, nothing left: %r", ans)


def t_own_limit(ds, r):
    p = ds[0].port
    ask(p, "it", desc(("client", "own")), want=200)  # the file's: 5 a year
    st, ans = ask(p, "it", desc(("client", "own"), limit={"requestsPerUnit": 3, "unit": "YEAR"}),
                  want=200)
    eq(ans["statuses"][0]["currentLimit"], {"requestsPerUnit": 3, "unit": "YEAR"}, "its own")
    eq(ans["statuses"][0]["limitRemaining"], 1, "one count: the file's rule's, same unit")
    st, ans = ask(p, "it", desc(("client", "own"), limit={"requests_per_unit": 3, "unit": "HOUR"}),
                  want=200)
    eq(ans["statuses"][0]["limitRemaining"], 2, "another unit, another count")


def t_per_value_and_wildcards(ds, r):
    p = ds[0].port
    for v, left in [("a", 4), ("a", 3), ("b", 4)]:
        st, ans = ask(p, "it", desc(("client", v + "-pv")), want=200)
        eq(ans["statuses"][0]["limitRemaining"], left, "client %s" % v)
    eq(ask(p, "it", desc(("client", "vip")))[1]["statuses"][0]["currentLimit"],
       {"requestsPerUnit": 8, "unit": "YEAR", "name": "vip"}, "exact before key")
    for v in ("/api/x", "/api/y"):
        eq(ask(p, "it", desc(("path", v)))[1]["statuses"][0]["limitRemaining"], 1, v)
    eq(ask(p, "it", desc(("path", "/s/x")))[1]["statuses"][0]["limitRemaining"], 1, "/s/x")
    st, ans = ask(p, "it", desc(("path", "/s/y")), want=200)
    check("limitRemaining" not in ans["statuses"][0], "/s/ shares one count: %r", ans)
    ask(p, "it", desc(("path", "/s/z")), want=429)


def t_keys_and_windows(ds, r):
    """The key as documented; a unit's window ends on the clock's, by Redis
    TIME, in whole seconds; the key's TTL is that end."""
    p = ds[0].port
    t0 = redis_now(r)
    st, ans = ask(p, "it", desc(("minute", "w")), want=200)
    t1 = redis_now(r)
    left = int(ans["statuses"][0]["durationUntilReset"].rstrip("s"))
    lo, hi = 60 - int(t1) % 60, 60 - int(t0) % 60
    if int(t0) // 60 == int(t1) // 60:
        check(lo <= left <= hi, "durationUntilReset %ds, the minute ends in %d..%d s", left, lo, hi)
    keys = r.cli("KEYS", "*rls*minute*").split()
    eq(keys, ["{rl:rls:d:it%1Eminute%1Fw}:fw:60000"], "the key")
    pttl = int(r.cli("PTTL", keys[0]))
    check(0 < pttl <= 60000 and abs(pttl / 1000.0 - (60 - redis_now(r) % 60)) < 2,
          "PTTL %d ms: the window's end", pttl)
    # a long identity is hashed, never refused
    st, ans = ask(p, "it", desc(("client", "x" * 2000)), want=200)
    eq(ans["statuses"][0]["limitRemaining"], 4, "a 2000-byte value")
    check(any(re.match(r"^\{rl:rls:h:[0-9a-f]{64}\}:fw:31536000000$", k)
              for k in r.cli("KEYS", "*rls:h:*").split()), "the hashed key")


def t_beyond(ds, r):
    """rate_limits (atomic), algorithm, window, burst."""
    p = ds[0].port
    st, ans = ask(p, "it", desc(("bucket", "b")), hitsAddend=4, want=200)
    eq(ans["statuses"][0]["currentLimit"], {"requestsPerUnit": 10, "unit": "DAY"}, "bucket limit")
    ask(p, "it", desc(("bucket", "b")), want=429)
    st, ans = ask(p, "it", desc(("pair", "p")), hitsAddend=20, want=200)
    eq(ans["statuses"][0]["currentLimit"], {"requestsPerUnit": 20, "unit": "DAY", "name": "daily"},
       "the binding limit of two")
    st, ans = ask(p, "it", desc(("pair", "p")), want=429)
    # the yearly limit counted 20, not 21
    st, ans = ask(p, "it", desc(("pair", "p"), limit={"requestsPerUnit": 30, "unit": "YEAR"},
                                hitsAddend=0), want=200)
    eq(ans["statuses"][0]["limitRemaining"], 10, "the other limit untouched by the denial")


def t_exact_counts_two_daemons(ds, r):
    """Threads on both daemons at once: exactly the limit is OK, per descriptor,
    with a second descriptor counted on its own."""
    n, threads = 120, 16
    results = collections.Counter()
    errors = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker(i):
        try:
            with H.Client(ds[i % 2].port) as c:
                barrier.wait()
                for _ in range(n // threads):
                    st, h, ans = c.request("POST", "/json", {
                        "domain": "it",
                        "descriptors": [desc(("hot", "race")), desc(("pair", "race"))]})
                    codes = tuple(s["code"] for s in ans["statuses"])
                    with lock:
                        results[(st,) + codes] += 1
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append("%s: %s" % (type(e).__name__, e))

    calls_before = script_calls(r)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    check(not errors, "%d errors, first: %s", len(errors), errors[:1])
    hot_ok = sum(v for k, v in results.items() if k[1] == "OK")
    pair_ok = sum(v for k, v in results.items() if k[2] == "OK")
    eq(hot_ok, 50, "OK answers of a 50 a year rule, %r" % dict(results))
    eq(pair_ok, 20, "OK answers of rate_limits 30 a year and 20 a day")
    eq(sum(v for k, v in results.items() if k[0] == 200),
       sum(v for k, v in results.items() if k[1:] == ("OK", "OK")), "200 exactly when both OK")
    eq(sum(results.values()), n // threads * threads, "answers")
    # coalescing, as for /check: a request's two descriptors start in one
    # event-loop pass and share one script call (not on Cluster, where their
    # keys live on different nodes)
    calls = script_calls(r) - calls_before
    if H.TOPOLOGY != "cluster":
        check(calls <= sum(results.values()), "%d script calls for %d requests of 2 descriptors",
              calls, sum(results.values()))


def t_metrics(ds, r):
    p = ds[1].port
    for i in range(12):
        ask(p, "it", desc(("near", "m")))
    text = metrics(p)
    got = {s: metric(text, "ratelimitd_rls_%s_total" % s, domain="it", rule="near")
           for s in ("hits", "within_limit", "near_limit", "over_limit", "shadow_mode")}
    eq(got, {"hits": 12, "within_limit": 10, "near_limit": 2, "over_limit": 2, "shadow_mode": 0},
       "counts of a 10 rule after 12 hits (near_limit_ratio 0.8)")
    check(metric(text, "ratelimitd_rls_requests_total", result="over_limit") >= 2, "over answers")
    # labels are the rules': a request's values never name a counter (but
    # under detailed_metric)
    values = ("c1", "h1", "h2", "a-pv", "race", "hd", "/api/x", "near_m", "own", "w")
    for rule in re.findall(r'^ratelimitd_rls_\w+\{domain="[^"]*",rule="([^"]*)"', text, re.M):
        check(not any(v == rule or rule.endswith("_" + v) for v in values),
              "a request's value in the label rule=%r", rule)
    check(metric(text, "ratelimitd_checks_total", policy="rls", result="allowed") is not None,
          "the rules' checks counted under policy rls")


def t_response_headers(ds, r):
    p = ds[2].port   # the daemon with rls.response_headers
    st, ans = ask(p, "it", desc(("client", "hd")), desc(("path", "/api/hd")), want=200)
    hs = {h["key"]: h["value"] for h in ans["responseHeadersToAdd"]}
    eq(hs.get("X-RateLimit-Limit"), "2", "the descriptor nearest its limit: path's")
    eq(hs.get("X-RateLimit-Remaining"), "1", "its remaining")
    check(re.match(r'^"rls";r=1;t=\d+$', hs.get("RateLimit", "")), "RateLimit %r", hs)
    ask(p, "it", desc(("path", "/api/hd")), want=200)
    st, ans = ask(p, "it", desc(("client", "hd")), desc(("path", "/api/hd")), want=429)
    hs = {h["key"]: h["value"] for h in ans["responseHeadersToAdd"]}
    eq(hs.get("X-RateLimit-Remaining"), "0", "the one over its limit")
    check(int(hs.get("Retry-After", "0")) > 0, "Retry-After on OVER_LIMIT: %r", hs)


def t_reload_and_dash_t(ds, r):
    d = ds[1]
    rules = d.rules_dir
    # a bad rule file: -t names file, line, path; SIGHUP keeps the rules
    bad = os.path.join(rules, "zz-bad.yaml")
    with open(bad, "w") as f:
        f.write("domain: it2\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n")
    rc, out, err = H.run_cli(["-t", "-c", d.config_path])
    eq(rc, 1, "-t exit code")
    check("zz-bad.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit" in out + err,
          "-t output: %r", out + err)
    d.reload()
    deadline = time.monotonic() + 10 * H.SLOW
    while "reload rejected" not in d.log():
        check(time.monotonic() < deadline, "no rejected reload in the log")
        time.sleep(0.05)
    check("zz-bad.yaml:4" in d.log(), "the log names the file and line")
    ask(d.port, "it", desc(("client", "reload")), want=200)
    # a good one: the new domain answers after SIGHUP
    with open(bad, "w") as f:
        f.write("domain: it2\ndescriptors:\n  - {key: a, rate_limit: {unit: year, "
                "requests_per_unit: 1}}\n")
    d.reload()
    deadline = time.monotonic() + 10 * H.SLOW
    while True:
        st, ans = ask(d.port, "it2", desc(("a", "reload-%d" % int(time.monotonic() * 1e6))))
        if "currentLimit" in ans["statuses"][0]:
            break
        check(time.monotonic() < deadline, "it2 not served after SIGHUP")
        time.sleep(0.05)
    os.unlink(bad)


def fixture_cases():
    return [
        ("example: replaces.sh answers as envoyproxy/ratelimit", t_example_replaces),
        ("example: trigger, shadow_mode, detailed_metric", t_example_trigger_and_shadow),
        ("example: quota_mode", t_example_quota),
        ("example: unlimited, unknown domain, a second file", t_example_unlimited_and_unknown),
        ("statuses in order, codes, bad requests named", t_order_codes_and_errors),
        ("hitsAddend of the request and the descriptor", t_hits_addend),
        ("a descriptor's own limit wins, counting with the rule", t_own_limit),
        ("per value, exact first, wildcards, share_threshold", t_per_value_and_wildcards),
        ("keys, windows aligned to Redis's clock, long values hashed", t_keys_and_windows),
        ("rate_limits atomic, algorithm, window, burst", t_beyond),
        ("exact counts: 16 threads on two daemons sharing Redis", t_exact_counts_two_daemons),
        ("metrics per domain and rule as envoyproxy/ratelimit counts", t_metrics),
        ("rls.response_headers: /check's quota headers", t_response_headers),
        ("-t and SIGHUP with a bad and a good rule file", t_reload_and_dash_t),
    ]


@contextlib.contextmanager
def shared_redis():
    rules = write_rules({"example.yaml": EXAMPLE, "mongo.yml": MONGO, "ours.yaml": OURS,
                         "README.md": "not read"})
    with H.Redis() as r:
        ds = []
        try:
            for extra in ({}, {}, {"response_headers": True}):
                d = H.Daemon(rls_conf(rules, **extra), redis=r, workers=2)
                d.rules_dir = rules
                ds.append(d)
            yield ds, r
        finally:
            for d in ds:
                d.stop()


# ---------------------------------------------------------------- failure and load

ONE = "domain: f\ndescriptors:\n  - {key: k, rate_limit: {unit: year, requests_per_unit: 2}}\n"


def t_failure_modes():
    rules = write_rules({"f.yaml": ONE})
    with H.Redis(topology="standalone") as r:
        ds = {m: H.Daemon(rls_conf(rules, failure=m), redis=r) for m in ("open", "closed", "local")}
        try:
            r.kill()
            for m, d in ds.items():
                deadline = time.monotonic() + 10 * H.SLOW
                while H.request(d.port, "GET", "/readyz")[0] != 503:
                    check(time.monotonic() < deadline, "%s: /readyz not 503 without Redis", m)
                    time.sleep(0.05)
            st, ans = ask(ds["open"].port, "f", desc(("k", "x")), want=200)
            eq(ans["statuses"][0], {"code": "OK", "currentLimit": {"requestsPerUnit": 2,
                                                                    "unit": "YEAR"}}, "open")
            st, h, b = post(ds["closed"].port, {"domain": "f", "descriptors": [desc(("k", "x"))]})
            H.expect_error(st, h, b, 503, "backend unavailable", "closed")
            # nothing to ask: answered, closed or not
            ask(ds["closed"].port, "f", desc(("other", "x")), want=200)
            codes = [ask(ds["local"].port, "f", desc(("k", "x")))[1]["statuses"][0]["code"]
                     for _ in range(3)]
            eq(codes, ["OK", "OK", "OVER_LIMIT"], "local: counted in the process")
            text = metrics(ds["closed"].port)
            eq(metric(text, "ratelimitd_rls_requests_total", result="unavailable"), 1,
               "unavailable counted")
        finally:
            for d in ds.values():
                d.stop()


def t_answered_within_redis_timeout():
    rules = write_rules({"f.yaml": ONE})
    with H.Redis(topology="standalone") as r:
        cfg = rls_conf(rules, failure="open")
        cfg["redis"]["timeout"] = "100ms"
        with H.Daemon(cfg, redis=r) as d:
            ask(d.port, "f", desc(("k", "t")), want=200)
            r.pause()
            try:
                t0 = time.monotonic()
                st, ans = ask(d.port, "f", desc(("k", "t")), desc(("k", "u")), want=200)
                took = time.monotonic() - t0
            finally:
                r.resume()
            check(took < 0.1 + 1.0 * H.SLOW, "answered in %.3fs with Redis stopped", took)
            check(all("durationUntilReset" not in s for s in ans["statuses"]),
                  "open: allowed unasked: %r", ans)
            d.stop()


def t_deny_cache_and_hybrid_and_memory():
    rules = write_rules({"f.yaml": ONE + "  - key: h\n    mode: hybrid\n    sync_interval: 20ms\n"
                         "    rate_limit: {unit: year, requests_per_unit: 100}\n"})
    with H.Redis(topology="standalone") as r:
        with H.Daemon(rls_conf(rules), redis=r, workers=1) as d:
            for want in (200, 200, 429, 429, 429, 429):
                ask(d.port, "f", desc(("k", "deny")), want=want)
            m = re.search(r"^ratelimitd_local_cache_hits_total (\d+)$", metrics(d.port), re.M)
            check(m and int(m.group(1)) >= 2, "denials answered by the deny cache: %r", m)
            for i in range(30):
                ask(d.port, "f", desc(("h", "hy")), want=200)
            m = re.search(r"^ratelimitd_hybrid_local_decisions_total (\d+)$", metrics(d.port), re.M)
            check(m and int(m.group(1)) >= 20, "hybrid decided in the worker: %r", m)
            d.stop()
    with H.Daemon(rls_conf(rules), backend="memory") as d:
        codes = [ask(d.port, "f", desc(("k", "mem")))[1]["statuses"][0]["code"] for _ in range(3)]
        eq(codes, ["OK", "OK", "OVER_LIMIT"], "memory backend")
        d.stop()


GRPC_UNITS = {"UNKNOWN": 0, "SECOND": 1, "MINUTE": 2, "HOUR": 3, "DAY": 4, "MONTH": 5, "YEAR": 6,
              "WEEK": 7}


def grpc_as_json(resp):
    """A RateLimitResponse from grpcio as /json writes one (protojson's names,
    zero values left out)."""
    out = {"overallCode": ["UNKNOWN", "OK", "OVER_LIMIT"][resp.overall_code]}
    sts = []
    for s in resp.statuses:
        d = {"code": ["UNKNOWN", "OK", "OVER_LIMIT"][s.code]}
        if s.HasField("current_limit"):
            cl = {}
            if s.current_limit.requests_per_unit:
                cl["requestsPerUnit"] = s.current_limit.requests_per_unit
            if s.current_limit.unit:
                cl["unit"] = [k for k, v in GRPC_UNITS.items() if v == s.current_limit.unit][0]
            if s.current_limit.name:
                cl["name"] = s.current_limit.name
            d["currentLimit"] = cl
        if s.limit_remaining:
            d["limitRemaining"] = s.limit_remaining
        if s.HasField("duration_until_reset"):
            ms = s.duration_until_reset.seconds * 1000 + s.duration_until_reset.nanos // 1000000
            d["durationUntilReset"] = "%ds" % (ms // 1000) if ms % 1000 == 0 else \
                "%d.%03ds" % (ms // 1000, ms % 1000)
        sts.append(d)
    if sts:
        out["statuses"] = sts
    if resp.response_headers_to_add:
        out["responseHeadersToAdd"] = [{"key": h.key, "value": h.value}
                                       for h in resp.response_headers_to_add]
    return out


def t_the_same_through_grpc():
    """Every semantic answered the same through the gRPC listener as through
    POST /json: one sequence run both ways from an empty Redis."""
    import harness_grpc as G
    rules = write_rules({"example.yaml": EXAMPLE, "ours.yaml": OURS})
    seq = [
        ("rl", [[("foo", "bkthomps"), ("bar", "banned")], [("source_cluster", "proxy"),
                                                           ("destination_cluster", "override")]], 0),
        ("rl", [[("foo", "pelle"), ("baz", "shady")]] * 2, 0),
        ("rl", [[("qux", "x")], [("service", "service_1")], [("service", "service_2")]], 0),
        ("rl", [[("unspec", "v")]], 3),
        ("it", [[("client", "g")], {"entries": [("client", "g")], "hits_addend": 0},
                {"entries": [("client", "own")], "limit": (2, GRPC_UNITS["YEAR"])},
                [("path", "/s/a")], [("path", "/s/b")], [("path", "/s/c")]], 1),
        ("it", [[("pair", "gp")], [("bucket", "gb")], [("tenant", "t"), ("user", "u")],
                [("nothing", "x")], [("client", "whitelisted")]], 2),
        ("nowhere", [[("a", "b")]], 0),
    ]

    def as_json_body(domain, descs, hits):
        out = []
        for d in descs:
            d = d if isinstance(d, dict) else {"entries": d}
            j = {"entries": [{"key": k, "value": v} for k, v in d["entries"]]}
            if d.get("hits_addend") is not None:
                j["hitsAddend"] = d["hits_addend"]
            if d.get("limit") is not None:
                j["limit"] = {"requestsPerUnit": d["limit"][0], "unit": d["limit"][1]}
            out.append(j)
        return {"domain": domain, "descriptors": out, "hitsAddend": hits}

    with H.Redis() as r:
        runs = []
        # a daemon per run: each its own deny cache, which outlives FLUSHALL
        for how in ("json", "grpc"):
            rls_port = H.free_port()
            cfg = rls_conf(rules, response_headers=True)
            cfg["rls"]["listen"] = "127.0.0.1:%d" % rls_port
            with H.Daemon(cfg, redis=r) as d:
                r.cli("FLUSHALL")
                away_from_the_minute(r)
                got = []
                with G.Client(rls_port) as c:
                    for domain, descs, hits in seq * 3:
                        if how == "json":
                            st, h, ans = post(d.port, as_json_body(domain, descs, hits))
                            check(st in (200, 429), "/json %d: %r", st, ans)
                        else:
                            ans = grpc_as_json(c.check(domain, descs, hits_addend=hits))
                        got.append(ans)
                runs.append(got)
                d.stop()
        for i, (a, b) in enumerate(zip(*runs)):
            # the clock moved between the runs: the time left may differ
            strip = lambda x: re.sub(r'("durationUntilReset": "|t=)\d+(\.\d+)?', r"\1N",  # noqa: E731
                                     json.dumps(x, sort_keys=True))
            strip2 = lambda x: re.sub(r'("X-RateLimit-Reset", "value": "|Retry-After", '  # noqa: E731
                                      r'"value": ")\d+', r"\1N", strip(x))
            eq(strip2(b), strip2(a), "request %d (%r) through gRPC and /json" % (i, seq[i % len(seq)]))
        eq(len(runs[1]), 3 * len(seq), "answers through gRPC")


def main():
    t = H.Tests(timeout=600)
    cases = fixture_cases()
    try:
        with shared_redis() as fx:
            t.run_cases(cases, *fx)
    except Exception as e:
        t.fail_rest(cases, "fixture failed: %s: %s" % (type(e).__name__, e))
    t.run("failure_mode open, closed, local", t_failure_modes)
    t.run("answered within redis.timeout with Redis stopped", t_answered_within_redis_timeout)
    t.run("deny cache, hybrid and the memory backend", t_deny_cache_and_hybrid_and_memory)
    t.run("every semantic the same through gRPC as through /json", t_the_same_through_grpc)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
