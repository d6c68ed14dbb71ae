#!/usr/bin/env python3
"""Heavy callers per RLS domain and rule (docs/API.md, "GET /admin/top":
?domain=D&rule=R): a skewed load over gRPC shows the heavy descriptor value
first with its share within the stated bound; POST /json's checks counted
by units; the query read strictly (400 naming the parameter); sketches for
at most 32 rules per worker, the others' checks counted as refused.  Against
the real daemon and a real Redis, gRPC through grpcio."""

import os
import random
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
from harness import check, eq  # noqa: E402

TOKEN = "top-rls-secret-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}
RULES = """\
domain: top
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
"""
ADDR_RULE = "remote_address"  # as ratelimitd_rls_*{rule=} name them
USER_RULE = "user"


def write_rules(text):
    d = os.path.join(H.tmpdir(), "rules-%s" % uuid.uuid4().hex[:8])
    os.makedirs(d)
    with open(os.path.join(d, "rules.yaml"), "w") as f:
        f.write(text)
    return d


def rls_admin_daemon(redis, rules, workers):
    port = H.free_port()
    a = H.AdminDaemon(redis, [], TOKEN, workers=workers, redis={"timeout": "5s"},
                      rls={"listen": "127.0.0.1:%d" % port, "config": rules})
    a.rls_port = port
    check(H.port_open(port), "rls.listen %d not open", port)
    return a


def top(a, query):
    return H.request(a.aport, "GET", "/admin/top?" + query, headers=AUTH)


def top_ok(a, query):
    st, h, b = top(a, query)
    H.expect_json(st, h, b, 200, "GET /admin/top?" + query)
    return b


def codes(c, pb, calls):
    """calls: [(key, value, hits)] as gRPC calls, 100 in flight: their
    overall codes."""
    out = []
    for i in range(0, len(calls), 100):
        fs = [c.check_future("top", [[(k, v)]], hits_addend=h) for k, v, h in calls[i:i + 100]]
        out += [pb.rls.RateLimitResponse.Code.Name(f.result(timeout=60 * H.SLOW).overall_code)
                for f in fs]
    return out


def q(s):
    return s.replace("%", "%25")


# ------------------------------------------------------------------ cases

def t_skewed_grpc(x):
    # 2,000 addresses allowed once each (1 an hour); 300 of them denied once
    # more; the heavy one denied 450 times: 60% of 750 denials
    rnd = random.Random(33)
    calls = [("remote_address", "10.0.%d.%d" % (i // 250, i % 250), 0) for i in range(2000)]
    calls += [calls[i] for i in rnd.sample(range(2000), 300)]
    calls += [("remote_address", "10.9.9.9", 0)] * 451
    rnd.shuffle(calls)
    with G.Client(x.a.rls_port) as c:
        got = codes(c, x.pb, calls)
    eq((got.count("OK"), got.count("OVER_LIMIT")), (2001, 750), "OK and OVER_LIMIT")
    eq(H.metric(x.a.port, "ratelimitd_rls_over_limit_total", {"domain": "top", "rule": ADDR_RULE}),
       750, "the rule as the metrics name it")
    b = top_ok(x.a, "domain=top&rule=%s&by=denied&n=5" % ADDR_RULE)
    eq((b["domain"], b["rule"], b["by"], b["total"]), ("top", ADDR_RULE, "denied", 750),
       "domain, rule, by, total")
    check("policy" not in b, "no policy in an RLS rule's answer: %r", b)
    first = b["callers"][0]
    # as the RLS key shows it: the domain, then the entry's key and value
    eq(first["identity"], "d:top%1Eremote_address%1F10.9.9.9", "the heavy address first")
    check(first["denied"] - first["error_bound"] <= 450 <= first["denied"],
          "450 denials within [%d - %d, %d]", first["denied"], first["error_bound"],
          first["denied"])
    check(first["error_bound"] <= 2 * 750 // 32, "error_bound %d over total / k per worker",
          first["error_bound"])
    check(first["share"] - first["error_bound"] / 750 - 1e-9 <= 0.6 <= first["share"] + 1e-9,
          "share %r, error %d: 0.6 within it", first["share"], first["error_bound"])
    check(len(b["callers"]) <= 5, "n=5: %d callers", len(b["callers"]))
    # the other rule of the domain saw none of it
    other = top_ok(x.a, "domain=top&rule=%s" % USER_RULE)
    eq((other["total"], other["callers"]), (0, []), "the other rule: nobody")


def t_json_units(x):
    from test_rls_rules import post
    for i in range(20):
        st, _, ans = post(x.a.port, {"domain": "top", "descriptors": [
            {"entries": [{"key": "user", "value": "big"}], "hitsAddend": "50"}]})
        eq(st, 200, "POST /json %d: %r" % (i, ans))
    for i in range(100):
        st, _, ans = post(x.a.port, {"domain": "top", "descriptors": [
            {"entries": [{"key": "user", "value": "u%d" % i}]}]})
        eq(st, 200, "POST /json small %d: %r" % (i, ans))
    b = top_ok(x.a, "domain=top&rule=%s&by=units&n=3&interval=15m" % USER_RULE)
    eq((b["by"], b["total"]), ("units", 1100), "by units: every hit allowed")
    first = b["callers"][0]
    eq(first["identity"], "d:top%1Euser%1Fbig", "the biggest spender first")
    check(first["units"] - first["error_bound"] <= 1000 <= first["units"],
          "its 1000 units within the bound: %r", first)
    eq(first["denied"], 0, "never denied")


def t_bad_queries(x):
    for query, param in (("domain=top", "rule"), ("rule=%s" % ADDR_RULE, "domain"),
                         ("policy=x&domain=top&rule=r", "domain"),
                         ("domain=top&rule=%s&by=most" % ADDR_RULE, "by"),
                         ("domain=top&rule=%s&n=0" % ADDR_RULE, "n"),
                         ("domain=top&rule=" + "r" * 300, "rule"),
                         ("domain=top&domain=top&rule=r", "domain"),
                         ("domain=top&rule=r&who=me", "query")):
        st, h, b = top(x.a, query)
        H.expect_error(st, h, b, 400, param, query)
    # a rule no check has reached: no callers, nothing registered by asking
    b = top_ok(x.a, "domain=top&rule=" + q("no.such%rule"))
    eq((b["total"], b["callers"], b["rule"]), (0, [], "no.such%rule"), "an unknown rule")
    st, _, metrics = H.request(x.a.port, "GET", "/metrics")
    check("no.such" not in metrics, "asking registered no rule name")
    st, h, b = H.request(x.a.aport, "GET", "/admin/top?domain=top&rule=" + ADDR_RULE)
    eq(st, 401, "the admin token asked")


def t_rules_bounded(x):
    # 40 rules on one worker: the first 32 to see a check get sketches, the
    # other 8 are refused and counted
    rules = "domain: many\ndescriptors:\n" + "".join(
        "  - key: k%d\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n" % i
        for i in range(40))
    a = rls_admin_daemon(x.redis, write_rules(rules), workers=1)
    try:
        with G.Client(a.rls_port) as c:
            for i in range(40):
                r = c.check("many", [[("k%d" % i, "v")]])
                eq(x.pb.rls.RateLimitResponse.Code.Name(r.overall_code), "OK", "k%d" % i)
        eq(H.metric(a.port, "ratelimitd_top_rls_refused_total"), 8, "8 rules refused")
        held = sum(top_ok(a, "domain=many&rule=k%d&by=units" % i)["total"]
                   for i in range(40))
        eq(held, 32, "32 rules with sketches, one unit each")
        eq(top_ok(a, "domain=many&rule=k0&by=units")["callers"][0]["identity"],
           "d:many%1Ek0%1Fv", "a held rule's caller")
    finally:
        a.close()


CASES = [
    ("gRPC: one address 60% of a rule's denials among 2,000: first, its share within the "
     "stated bound; the domain's other rule untouched", t_skewed_grpc),
    ("POST /json: by units, the biggest spender; over 15 minutes", t_json_units),
    ("a bad query: 400 naming the parameter; an unknown rule empty and not registered; "
     "the token asked", t_bad_queries),
    ("sketches for 32 rules per worker, the others' checks counted as refused",
     t_rules_bounded),
]


class Fixture:
    pass


def fixture():
    import contextlib

    @contextlib.contextmanager
    def fx():
        x = Fixture()
        x.pb = G.protos()
        with H.Redis() as redis:
            x.redis = redis
            x.a = rls_admin_daemon(redis, write_rules(RULES), workers=2)
            try:
                yield x
            finally:
                x.a.close()
    return fx()


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=600)
