#!/usr/bin/env python3
"""POST /check against a real Redis: the seed article's case (limit 3 -> allowed
x3 then 429) with every header and body field asserted, cost, policy selection
and policies of several limits decided together (docs/API.md, ALGORITHMS.md)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402


def fw(limit, window):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


CONFIG = {
    "identity": ["body", "peer"],
    "redis": {"timeout": "2s"},  # semantics under test, not latency (make -j check loads the host)
    "policies": [
        {"name": "login", "match": {"path_prefix": "/login", "methods": ["POST"]}, "limits": [fw(2, "60s")]},
        {"name": "api", "match": {"path_prefix": "/api"}, "limits": [fw(5, "60s")]},
        {"name": "pair", "match": {"path_prefix": "/pair"}, "limits": [fw(2, "60s"), fw(10, "1h")]},
        {"name": "duo", "match": {"path_prefix": "/duo"}, "limits": [fw(10, "60s"), fw(3, "1h")]},
        # the seed article's interceptor: 3 per 60 s; the default request (GET /) lands here
        {"name": "seed", "match": {"path_prefix": "/", "methods": ["GET"]}, "limits": [fw(3, "60s")]},
    ],
}


def verify(resp, policy, allowed, limits, binding=None, algorithm="fixed_window"):
    """Assert an answer of POST /check completely.

    limits: [(limit, window_s, remaining)] in policy order; binding: the index of the
    binding limit (default: the only one).  Returns the body.
    """
    status, h, b = resp
    want_status = 200 if allowed else 429
    H.expect_json(status, h, b, want_status, "answer")
    if binding is None:
        check(len(limits) == 1, "test bug: binding index needed")
        binding = 0
    check(b.get("degraded") is not True, "a degraded answer with Redis up: %r", b)
    eq(b.get("allowed"), allowed, "body.allowed")
    eq(b.get("policy"), policy, "body.policy")
    bl, bw, br = limits[binding]
    eq(b.get("limit"), bl, "body.limit (binding limit)")
    eq(b.get("remaining"), br, "body.remaining (binding limit)")
    for f in ("limit", "remaining", "reset_ms", "retry_after_ms"):
        check(H.is_int(b.get(f)), "body.%s is not an integer: %r", f, b.get(f))
    reset, retry = b["reset_ms"], b["retry_after_ms"]
    check(0 <= reset <= bw * 1000, "body.reset_ms %d outside 0..%d", reset, bw * 1000)
    if br < bl:  # something counted: the window is open and ends within it
        check(reset >= 1, "body.reset_ms is %d while %d of %d are used", reset, bl - br, bl)
    if allowed:
        eq(retry, 0, "body.retry_after_ms when allowed")
    else:
        check(1 <= retry <= bw * 1000, "body.retry_after_ms %d outside 1..%d on a denial", retry, bw * 1000)
    ls = b.get("limits")
    check(isinstance(ls, list) and len(ls) == len(limits), "body.limits %r: expected %d entries", ls, len(limits))
    for i, (lim, win, rem) in enumerate(limits):
        e = ls[i]
        check(isinstance(e, dict), "body.limits[%d] is not an object", i)
        eq(e.get("algorithm"), algorithm, "limits[%d].algorithm" % i)
        eq(e.get("limit"), lim, "limits[%d].limit" % i)
        eq(e.get("window_ms"), win * 1000, "limits[%d].window_ms" % i)
        eq(e.get("remaining"), rem, "limits[%d].remaining" % i)
        check(H.is_int(e.get("reset_ms")) and 0 <= e["reset_ms"] <= win * 1000,
              "limits[%d].reset_ms %r outside 0..%d", i, e.get("reset_ms"), win * 1000)
    eq(ls[binding].get("reset_ms"), reset, "body.reset_ms vs limits[%d].reset_ms (binding)" % binding)

    # headers: exactly once each, numbers of the binding limit
    for name in ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"):
        eq(h.count(name), 1, "number of %s headers" % name)
    eq(h["x-ratelimit-limit"], str(bl), "X-RateLimit-Limit")
    eq(h["x-ratelimit-remaining"], str(br), "X-RateLimit-Remaining")
    reset_s = H.ceil_s(reset)
    eq(h["x-ratelimit-reset"], str(reset_s), "X-RateLimit-Reset (ceil of reset_ms %d / 1000)" % reset)
    if br < bl:
        check(1 <= reset_s <= bw, "X-RateLimit-Reset %d outside 1..%d", reset_s, bw)
    # RateLimit-Policy: every limit, in order, named by the policy when it has
    # one, "<policy>/<i>" each when it has several; RateLimit: the binding one
    names = ['"%s"' % policy] if len(limits) == 1 else ['"%s/%d"' % (policy, i) for i in range(len(limits))]
    eq(h["ratelimit-policy"], ", ".join('%s;q=%d;w=%d' % (n, lim, win) for n, (lim, win, _) in zip(names, limits)),
       "RateLimit-Policy")
    t_s = reset_s if allowed else max(1, H.ceil_s(retry))
    eq(h["ratelimit"], '%s;r=%d;t=%d' % (names[binding], br, t_s), "RateLimit")
    if allowed:
        check("retry-after" not in h, "Retry-After %r on a 200", h.get("retry-after"))
    else:
        eq(h.count("retry-after"), 1, "number of Retry-After headers on 429")
        ra = h["retry-after"]
        check(ra.isdigit(), "Retry-After %r is not a number of seconds", ra)
        eq(int(ra), max(1, H.ceil_s(retry)), "Retry-After (ceil of retry_after_ms %d / 1000, never 0)" % retry)
        check(1 <= int(ra) <= bw, "Retry-After %s outside 1..%d", ra, bw)
    return b


# ---------------------------------------------------------------- cases

def t_seed_three_then_429(d, r):
    resets = []
    for i, rem in enumerate((2, 1, 0)):
        b = verify(post(d, {"key": "alice"}), "seed", True, [(3, 60, rem)])
        resets.append(b["reset_ms"])
    b = verify(post(d, {"key": "alice"}), "seed", False, [(3, 60, 0)])
    resets.append(b["reset_ms"])
    # the window opened at the first request and is not pushed back by later ones
    check(all(resets[i] >= resets[i + 1] for i in range(len(resets) - 1)),
          "reset_ms grew within one window: %r", resets)
    check(b["retry_after_ms"] <= resets[0], "retry_after_ms %d beyond the window's end %d",
          b["retry_after_ms"], resets[0])


def t_seed_denial_consumes_nothing(d, r):
    # alice is exhausted; more denials change nothing and do not extend the window
    b1 = verify(post(d, {"key": "alice"}), "seed", False, [(3, 60, 0)])
    b2 = verify(post(d, {"key": "alice"}), "seed", False, [(3, 60, 0)])
    check(b2["reset_ms"] <= b1["reset_ms"], "a denial pushed the window's end: %d then %d",
          b1["reset_ms"], b2["reset_ms"])


def t_other_key_independent(d, r):
    verify(post(d, {"key": "bob"}), "seed", True, [(3, 60, 2)])
    verify(post(d, {"key": "bob"}), "seed", True, [(3, 60, 1)])
    verify(post(d, {"key": "alice"}), "seed", False, [(3, 60, 0)])


def t_cost0_fresh(d, r):
    for _ in range(3):
        b = verify(post(d, {"key": "zero-fresh", "cost": 0}), "seed", True, [(3, 60, 3)])
    verify(post(d, {"key": "zero-fresh"}), "seed", True, [(3, 60, 2)])
    verify(post(d, {"key": "zero-fresh", "cost": 0}), "seed", True, [(3, 60, 2)])
    verify(post(d, {"key": "zero-fresh", "cost": 0}), "seed", True, [(3, 60, 2)])
    verify(post(d, {"key": "zero-fresh"}), "seed", True, [(3, 60, 1)])


def t_cost0_exhausted(d, r):
    # ALGORITHMS.md fixed_window allows when count + cost <= limit: 3 + 0 <= 3
    for _ in range(3):
        post(d, {"key": "zero-full"})
    verify(post(d, {"key": "zero-full"}), "seed", False, [(3, 60, 0)])
    verify(post(d, {"key": "zero-full", "cost": 0}), "seed", True, [(3, 60, 0)])


def t_cost2(d, r):
    verify(post(d, {"key": "carol", "cost": 2}), "seed", True, [(3, 60, 1)])
    verify(post(d, {"key": "carol", "cost": 2}), "seed", False, [(3, 60, 1)])
    verify(post(d, {"key": "carol", "cost": 1}), "seed", True, [(3, 60, 0)])
    verify(post(d, {"key": "carol", "cost": 1}), "seed", False, [(3, 60, 0)])


def t_cost_over_limit(d, r):
    st, h, b = post(d, {"key": "greedy", "cost": 4})
    H.expect_json(st, h, b, 429, "cost 4 > limit 3")
    eq(b.get("allowed"), False, "body.allowed")
    eq(b.get("remaining"), 3, "body.remaining (nothing consumed)")
    ls = b.get("limits") or [{}]
    if "retry_after_ms" in ls[0]:
        eq(ls[0]["retry_after_ms"], -1, "limits[0].retry_after_ms when cost can never fit (ALGORITHMS.md)")
    verify(post(d, {"key": "greedy"}), "seed", True, [(3, 60, 2)])


def t_policy_by_name(d, r):
    verify(post(d, {"key": "byname", "policy": "api", "path": "/login", "method": "POST"}),
           "api", True, [(5, 60, 4)])
    verify(post(d, {"key": "byname", "policy": "login"}), "login", True, [(2, 60, 1)])
    verify(post(d, {"key": "byname", "policy": "api"}), "api", True, [(5, 60, 3)])


def t_policy_by_body_path_method(d, r):
    verify(post(d, {"key": "bp1", "path": "/login", "method": "POST"}), "login", True, [(2, 60, 1)])
    verify(post(d, {"key": "bp1", "path": "/login/form", "method": "POST"}), "login", True, [(2, 60, 0)])
    # /login only for POST: a GET falls through to the next policies in order
    verify(post(d, {"key": "bp1", "path": "/login", "method": "GET"}), "seed", True, [(3, 60, 2)])
    verify(post(d, {"key": "bp1", "path": "/api/v1/items", "method": "DELETE"}), "api", True, [(5, 60, 4)])
    # first match in file order wins: /api GET matches api before the catch-all seed
    verify(post(d, {"key": "bp1", "path": "/api", "method": "GET"}), "api", True, [(5, 60, 3)])


def t_policy_by_headers(d, r):
    verify(post(d, {"key": "hp1"}, {"X-Original-URI": "/login", "X-Original-Method": "POST"}),
           "login", True, [(2, 60, 1)])
    verify(post(d, {"key": "hp1"}, {"X-Original-URI": "/login", "X-Original-Method": "POST",
                                    "X-Forwarded-Uri": "/api/x", "X-Forwarded-Method": "GET"}),
           "login", True, [(2, 60, 0)])
    verify(post(d, {"key": "hp1"}, {"X-Original-URI": "/api/x"}), "api", True, [(5, 60, 4)])
    # the method header alone: path "/" and DELETE match nothing
    st, h, b = post(d, {"key": "hp1"}, {"X-Original-Method": "DELETE"})
    H.expect_json(st, h, b, 200, "X-Original-Method DELETE, path /")
    eq(b.get("policy"), None, "policy for DELETE /")


def t_body_beats_headers(d, r):
    # body path /api (matches api for any method); headers say POST /login
    verify(post(d, {"key": "bh1", "path": "/api"}, {"X-Original-URI": "/login", "X-Original-Method": "POST"}),
           "api", True, [(5, 60, 4)])
    # body method GET beats header POST: /login GET falls to seed
    verify(post(d, {"key": "bh1", "method": "GET"}, {"X-Original-URI": "/login", "X-Original-Method": "POST"}),
           "seed", True, [(3, 60, 2)])


def t_no_policy(d, r):
    for _ in range(5):   # more than any limit: nothing is counted
        st, h, b = post(d, {"key": "nobody", "path": "/nowhere", "method": "DELETE"})
        H.expect_json(st, h, b, 200, "no matching policy")
        check("policy" in b, "body has no \"policy\" field: %r", b)
        eq(b["policy"], None, "body.policy")
        eq(b.get("allowed"), True, "body.allowed")
        check("retry-after" not in h, "Retry-After on an unlimited 200")


def t_no_body(d, r):
    # every field is optional: an empty POST is GET / for the peer's identity
    verify(H.request(d.port, "POST", "/check", b""), "seed", True, [(3, 60, 2)])
    verify(H.request(d.port, "POST", "/check"), "seed", True, [(3, 60, 1)])


def t_two_limits_first_denies(d, r):
    K = {"key": "twin", "path": "/pair"}
    verify(post(d, K), "pair", True, [(2, 60, 1), (10, 3600, 9)], binding=0)
    verify(post(d, K), "pair", True, [(2, 60, 0), (10, 3600, 8)], binding=0)
    for _ in range(3):   # denied by the first: the second stays at 8
        verify(post(d, K), "pair", False, [(2, 60, 0), (10, 3600, 8)], binding=0)
    verify(post(d, dict(K, cost=0)), "pair", True, [(2, 60, 0), (10, 3600, 8)], binding=0)


def t_two_limits_second_denies(d, r):
    K = {"key": "twin", "path": "/duo"}
    verify(post(d, dict(K, cost=2)), "duo", True, [(10, 60, 8), (3, 3600, 1)], binding=1)
    for _ in range(3):   # denied by the second (1 < 2): the first stays at 8
        verify(post(d, dict(K, cost=2)), "duo", False, [(10, 60, 8), (3, 3600, 1)], binding=1)
    verify(post(d, K), "duo", True, [(10, 60, 7), (3, 3600, 0)], binding=1)
    verify(post(d, K), "duo", False, [(10, 60, 7), (3, 3600, 0)], binding=1)


def t_keys_have_ttl(d, r):
    keys = [k for k in r.cli("--scan").splitlines() if k]
    check(keys, "no key in Redis after the checks above")
    for k in keys:
        pttl = r.cli("PTTL", k)
        check(pttl.lstrip("-").isdigit(), "PTTL %r: %r", k, pttl)
        check(0 < int(pttl) <= 3600 * 1000, "key %r has PTTL %s (must be 1..window)", k, pttl)


def t_body_none(d, r):
    """?body=none (auth subrequests): status and every quota header, no body."""
    import http.client
    import json
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    try:
        statuses = []
        for _ in range(3):
            c.request("POST", "/check?body=none", json.dumps({"key": "quiet", "policy": "login"}),
                      {"Content-Type": "application/json"})
            resp = c.getresponse()
            body = resp.read()
            statuses.append(resp.status)
            eq(resp.getheader("Content-Length"), "0", "Content-Length with ?body=none")
            eq(body, b"", "the body with ?body=none")
            for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Policy", "RateLimit"):
                check(resp.getheader(name), "%s missing with ?body=none", name)
            if resp.status == 429:
                check(resp.getheader("Retry-After"), "Retry-After missing on a 429 with ?body=none")
        eq(statuses, [200, 200, 429], "login allows 2 then denies, with ?body=none")
        # the same connection still carries a normal check with its body
        c.request("POST", "/check", json.dumps({"key": "quiet2", "policy": "login"}),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        b = json.loads(resp.read())
        eq(b.get("allowed"), True, "a normal check after ?body=none on the same connection")
    finally:
        c.close()


CASES = [
    ("seed: limit 3 -> 200, 200, 200, 429 with every header", t_seed_three_then_429),
    ("seed: further denials consume nothing and keep the window", t_seed_denial_consumes_nothing),
    ("another key is independent", t_other_key_independent),
    ("cost 0 asks without consuming", t_cost0_fresh),
    ("cost 0 on an exhausted key is allowed with remaining 0", t_cost0_exhausted),
    ("cost 2 consumes 2; a denied cost consumes nothing", t_cost2),
    ("cost above the limit is denied and consumes nothing", t_cost_over_limit),
    ("policy selected by name skips matching", t_policy_by_name),
    ("policy selected by path/method in the body, file order", t_policy_by_body_path_method),
    ("policy selected by X-Original-* headers (forwarded_request_headers original)",
     t_policy_by_headers),
    ("body path/method beat the headers", t_body_beats_headers),
    ("no matching policy -> 200 with policy null", t_no_policy),
    ("POST /check without a body", t_no_body),
    ("two limits: denied by the first consumes nothing from the second", t_two_limits_first_denies),
    ("two limits: denied by the second consumes nothing from the first", t_two_limits_second_denies),
    ("every Redis key has a TTL within its window", t_keys_have_ttl),
    ("?body=none: status and quota headers, no body, connection kept", t_body_none),
]


def fixture():
    return H.redis_and_daemon(CONFIG)


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
