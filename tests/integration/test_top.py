#!/usr/bin/env python3
"""Who is being limited (docs/API.md, "Admin API": GET /admin/top, GET
/admin/status, ratelimitd_top_caller_share): the heaviest callers of a
policy by denied checks and by units, merged over the workers, with the
sketch's error stated; its query read strictly; the admin token asked as for
every admin route; the page served without it.  Against the real daemon (two
workers) and a real Redis."""

import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402

TOKEN = "top-secret-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}
HOUR = "1h"
SKEW = {"name": "skew", "limits": [{"algorithm": "fixed_window", "limit": 1, "window": HOUR}]}
SPEND = {"name": "spend", "limits": [{"algorithm": "fixed_window", "limit": 1000000,
                                      "window": HOUR}]}
HOT = {"name": "hot", "limits": [{"algorithm": "fixed_window", "limit": 2, "window": HOUR}]}
QUIET = {"name": "quiet", "limits": [{"algorithm": "fixed_window", "limit": 5, "window": HOUR}]}
POLICIES = [SKEW, SPEND, HOT, QUIET]
XSS = "<img src=x onerror=alert(1)>"


def top(d, query, headers=AUTH):
    return H.request(d.aport, "GET", "/admin/top?" + query, headers=headers)


def top_ok(d, query):
    st, h, b = top(d, query)
    H.expect_json(st, h, b, 200, "GET /admin/top?" + query)
    return b


def check_bytes(policy, key, cost=None):
    body = {"policy": policy, "key": key}
    if cost is not None:
        body["cost"] = cost
    return H.http_bytes("POST", "/check", json.dumps(body).encode(),
                        {"Content-Type": "application/json"})


def load(port, reqs, conns=4):
    """Send reqs (shuffled already) over `conns` keep-alive connections at
    once, pipelined: their statuses, in any order."""
    out, errors = [], []
    lock = threading.Lock()

    def run(part):
        try:
            got = H.pipelined(port, part)
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append("%s: %s" % (type(e).__name__, e))
            return
        with lock:
            out.extend(got)

    ts = [threading.Thread(target=run, args=(reqs[i::conns],), daemon=True) for i in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300 * H.SLOW)
    check(not any(t.is_alive() for t in ts), "the load did not finish")
    check(not errors, "load errors: %s", errors[:3])
    eq(len(out), len(reqs), "answers")
    return out


# ------------------------------------------------------------------ cases

def t_skewed_load(d):
    # 10,000 callers: each allowed once (limit 1 an hour); 1,000 of them
    # denied once more; the heavy one denied 1,500 times: 60% of 2,500
    rnd = random.Random(33)
    reqs = [check_bytes("skew", "c%d" % i) for i in range(9999)]
    reqs += [check_bytes("skew", "c%d" % i) for i in rnd.sample(range(9999), 1000)]
    reqs += [check_bytes("skew", "heavy") for _ in range(1501)]
    rnd.shuffle(reqs)
    st = load(d.port, reqs)
    eq((st.count(200), st.count(429)), (10000, 2500), "allowed and denied")
    b = top_ok(d, "policy=skew&by=denied&n=5")
    eq((b["policy"], b["by"], b["total"]), ("skew", "denied", 2500), "policy, by, total")
    check(60 <= b["interval_s"] <= 120, "interval_s %r: the last minute and this one",
          b["interval_s"])
    eq(b["top_k"], 32, "top_k's default")
    first = b["callers"][0]
    eq(first["identity"], "k:heavy", "the heavy caller first")
    # the stated bound: denied is the most it can be, denied - error_bound
    # the least; share is denied / total
    check(first["denied"] - first["error_bound"] <= 1500 <= first["denied"],
          "1500 denials within [%d - %d, %d]", first["denied"], first["error_bound"],
          first["denied"])
    check(first["error_bound"] <= 2 * 2500 // 32, "error_bound %d over total / k per worker",
          first["error_bound"])
    check(abs(first["share"] - first["denied"] / 2500) < 1e-6, "share %r", first["share"])
    check(first["share"] - first["error_bound"] / 2500 - 1e-9 <= 0.6 <= first["share"] + 1e-9,
          "share %r, error %d: 0.6 within it", first["share"], first["error_bound"])
    # its one allowed unit among 10,000 callers' is below what the units
    # sketch holds: 0 there (the other figure is only known while held)
    check(first["units"] in (0, 1), "units %r", first["units"])
    check(len(b["callers"]) <= 5, "n=5: %d callers", len(b["callers"]))
    for c in b["callers"]:
        eq(sorted(c), ["denied", "error_bound", "identity", "share", "units"], "a caller's fields")
    # the alert without per-caller labels: the same share
    share = H.metric(d.port, "ratelimitd_top_caller_share", {"policy": "skew"})
    check(abs(share - first["share"]) < 0.01, "ratelimitd_top_caller_share %r vs %r", share,
          first["share"])
    eq(H.metric(d.port, "ratelimitd_top_caller_share", {"policy": "quiet"}), 0,
       "no denial: share 0")


def t_units(d):
    reqs = [check_bytes("spend", "big", 50) for _ in range(20)]
    reqs += [check_bytes("spend", "small%d" % i, 1) for i in range(200)]
    eq(load(d.port, reqs, conns=2).count(200), 220, "all allowed")
    b = top_ok(d, "policy=spend&by=units&n=3&interval=15m")
    eq((b["by"], b["total"]), ("units", 1200), "by units: every unit allowed")
    check(900 <= b["interval_s"] <= 960, "interval_s %r for 15m", b["interval_s"])
    eq(b["callers"][0]["identity"], "k:big", "the biggest spender first")
    check(b["callers"][0]["units"] - b["callers"][0]["error_bound"] <= 1000
          <= b["callers"][0]["units"], "its 1000 units within the bound: %r", b["callers"][0])
    eq(b["callers"][0]["denied"], 0, "it was never denied")
    d2 = top_ok(d, "policy=spend")
    eq((d2["by"], d2["total"], d2["callers"]), ("denied", 0, []), "by denied: nobody")


def t_deny_cache_counted(d):
    hits = H.metric(d.port, "ratelimitd_local_cache_hits_total")
    reqs = [check_bytes("hot", "hothead") for _ in range(52)]
    st = H.pipelined(d.port, reqs)
    eq((st.count(200), st.count(429)), (2, 50), "2 allowed, 50 denied")
    check(H.metric(d.port, "ratelimitd_local_cache_hits_total") > hits,
          "the deny cache answered some")
    b = top_ok(d, "policy=hot")
    eq(b["callers"][0]["identity"], "k:hothead", "the caller")
    eq((b["callers"][0]["denied"], b["callers"][0]["error_bound"], b["total"]), (50, 0, 50),
       "every denial counted, the deny cache's too, exactly")


def t_identity_as_sent(d):
    for _ in range(3):
        post(d.port, {"policy": "hot", "key": XSS})
    b = top_ok(d, "policy=hot&n=10")
    ids = [c["identity"] for c in b["callers"]]
    check("k:" + XSS in ids, "the caller's key as it sent it: %r", ids)
    # and the admin API takes it back as is: the block reaches that caller
    st, h, got = H.request(d.aport, "POST", "/admin/inspect",
                           {"policy": "hot", "identity": "k:" + XSS}, AUTH)
    H.expect_json(st, h, got, 200, "inspect of the identity /admin/top gave")
    eq(got["limits"][0]["remaining"], 0, "the same caller: its count spent")


def t_auth(d):
    for path in ("/admin/top?policy=skew", "/admin/status"):
        st, h, b = H.request(d.aport, "GET", path)
        H.expect_error(st, h, b, 401, "authorization", path + " without a token")
        check(h.get("www-authenticate", "").startswith("Bearer"), "WWW-Authenticate %r",
              h.get("www-authenticate"))
        st, h, b = H.request(d.aport, "GET", path, headers={"Authorization": "Bearer nope"})
        H.expect_error(st, h, b, 401, "authorization", path + " with a wrong token")
        st, h, b = H.request(d.aport, "GET", path, headers=AUTH)
        H.expect_json(st, h, b, 200, path + " with the token")
    st, h, b = H.request(d.aport, "GET", "/admin/ui")
    eq(st, 200, "the page without a token")
    check(h.get("content-type", "").startswith("text/html"), "content-type %r",
          h.get("content-type"))
    csp = h.get("content-security-policy", "")
    for part in ("default-src 'none'", "script-src 'sha256-", "connect-src 'self'",
                 "frame-ancestors 'none'"):
        check(part in csp, "CSP %r has %r", csp, part)
    check("unsafe-inline" not in csp, "no unsafe-inline: %r", csp)
    st, h, b = H.request(d.aport, "POST", "/admin/top?policy=skew", {}, AUTH)
    H.expect_error(st, h, b, 405, what="POST /admin/top")
    eq(h.get("allow"), "GET, HEAD", "Allow")
    st, h, b = H.request(d.port, "GET", "/admin/top?policy=skew", headers=AUTH)
    eq(st, 404, "/admin/top on the check listener")


def t_status(d):
    st, h, b = H.request(d.aport, "GET", "/admin/status", headers=AUTH)
    H.expect_json(st, h, b, 200, "status")
    for k in ("version", "uptime_s", "config_file", "config_hash", "backend", "reloads",
              "workers", "top_k", "policies"):
        check(k in b, "status has %s: %r", k, sorted(b))
    eq(b["workers"], 2, "workers")
    eq((b["backend"]["kind"], b["backend"]["ready"]), ("redis", True), "backend")
    eq([p["name"] for p in b["policies"]], [p["name"] for p in POLICIES], "policies in order")
    skew = b["policies"][0]
    eq(skew["limits"], [{"algorithm": "fixed_window", "limit": 1, "window_ms": 3600000}],
       "a policy's limits")
    check(skew["denied"] >= 2500 and skew["allowed"] >= 10000, "its counts: %r", skew)
    eq(b["config_file"], d.d.config_path, "config_file")


def t_bad_queries(d):
    for q, field in (("", "policy"), ("policy=nope", "policy"), ("policy=skew&by=x", "by"),
                     ("policy=skew&n=0", "n"), ("policy=skew&n=65", "n"),
                     ("policy=skew&n=1x", "n"), ("policy=skew&interval=5m", "interval"),
                     ("policy=skew&policy=skew", "policy"), ("policy=skew&x=1", "query"),
                     ("policy=sk%2", "policy"), ("policy=sk%00ew", "policy")):
        st, h, b = top(d, q)
        H.expect_error(st, h, b, 400, field, repr(q))
    b = top_ok(d, "policy=s%6Bew&by=denied&n=1")
    eq(len(b["callers"]), 1, "an escaped name, n=1")


def t_top_k_zero(d):
    aport = H.free_port()
    cfg = {"identity": ["body"], "admin_listen": "127.0.0.1:%d" % aport, "top_k": 0,
           "policies": [QUIET]}
    with H.Daemon(cfg, redis=d.r) as d0:
        eq(post(d0.port, {"policy": "quiet", "key": "a"})[0], 200, "a check")
        st, h, b = H.request(aport, "GET", "/admin/top?policy=quiet")
        H.expect_error(st, h, b, 404, "top_k", "top_k 0")
        eq(H.metric(d0.port, "ratelimitd_top_caller_share", {"policy": "quiet"}), 0,
           "the share without tables")


CASES = [
    ("one caller 60% of the denials among 10,000: first, its share within the stated bound; "
     "the metric says it", t_skewed_load),
    ("by units: the biggest spender; over 15 minutes", t_units),
    ("the deny cache's denials counted exactly", t_deny_cache_counted),
    ("an identity shown as its caller sent it, and taken back by the admin API",
     t_identity_as_sent),
    ("the admin token asked by /admin/top and /admin/status, not by the page; its CSP",
     t_auth),
    ("GET /admin/status: version, backend, policies with their limits and counts", t_status),
    ("a bad query: 400 naming the parameter", t_bad_queries),
    ("top_k 0: nothing counted, /admin/top 404", t_top_k_zero),
]


def fixture():
    return H.admin_fixture(POLICIES, TOKEN, redis={"timeout": "2s"})


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=300)
