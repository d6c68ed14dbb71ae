#!/usr/bin/env python3
"""Heavy callers per RLS domain and rule (docs/API.md, "GET /admin/top":
?domain=D&rule=R): a skewed load over gRPC shows the heavy descriptor value
first with its share within the stated bound; POST /json's checks counted
by units; descriptors decided together (rls.all_or_nothing) counted each
under its rule; the rules in GET /admin/status with their limits and
counts; the query read strictly (400 naming the parameter); sketches for
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


def rls_admin_daemon(redis, rules, workers, **rls):
    port = H.free_port()
    rls.update({"listen": "127.0.0.1:%d" % port, "config": rules})
    a = H.AdminDaemon(redis, [], TOKEN, workers=workers, redis={"timeout": "5s"}, rls=rls)
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


def t_status(x):
    # after t_skewed_grpc and t_json_units: both rules, the most hit first
    st, h, b = H.request(x.a.aport, "GET", "/admin/status", headers=AUTH)
    H.expect_json(st, h, b, 200, "GET /admin/status")
    eq(b["rls_rules_total"], 2, "the rule names counted")
    eq([(r["domain"], r["rule"]) for r in b["rls_rules"]], [("top", ADDR_RULE), ("top", USER_RULE)],
       "the rules, the most hit first")
    addr, user = b["rls_rules"]
    eq(addr["limits"], [{"algorithm": "fixed_window", "limit": 1, "window_ms": 3600000,
                         "unit": "hour"}], "the rule file's limit")
    eq((addr["hits"], addr["within_limit"], addr["over_limit"], addr["shadow_mode"]),
       (2751, 2001, 750, 0), "its counts, as ratelimitd_rls_* count them")
    eq(addr["near_limit"], H.metric(x.a.port, "ratelimitd_rls_near_limit_total",
                                    {"domain": "top", "rule": ADDR_RULE}), "near_limit")
    eq((addr["shadow"], addr["callers_counted"]), (False, True), "shadow, callers counted")
    eq((user["hits"], user["within_limit"], user["over_limit"]), (1100, 1100, 0), "the user rule")
    eq(user["limits"][0]["limit"], 1000000, "its limit")
    st, h, b = H.request(x.a.aport, "GET", "/admin/status")
    eq(st, 401, "the admin token asked")


AON_RULES = """\
domain: aon
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
  - key: detail
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
"""


def t_all_or_nothing(x):
    # each request: a tenant and a user decided together.  The heavy
    # tenant: 3 allowed, then 7 denied by its own limit (its users' limits
    # allowed those, uncounted: neither denied nor units); two light
    # tenants allowed once each.
    a = rls_admin_daemon(x.redis, write_rules(AON_RULES), workers=2, all_or_nothing=True)
    try:
        calls = [("heavy", "u%d" % i) for i in range(10)] + [("light1", "v1"), ("light2", "v2")]
        with G.Client(a.rls_port) as c:
            got = [x.pb.rls.RateLimitResponse.Code.Name(
                c.check("aon", [[("tenant", t)], [("user", u)]]).overall_code) for t, u in calls]
        eq((got.count("OK"), got.count("OVER_LIMIT")), (5, 7), "OK and OVER_LIMIT")
        eq(got[:3], ["OK"] * 3, "the heavy tenant's first three allowed")
        # both descriptors went through the group: nothing counted on a denial
        eq(H.metric(a.port, "ratelimitd_rls_within_limit_total",
                    {"domain": "aon", "rule": "user"}), 5, "users counted only when allowed")
        b = top_ok(a, "domain=aon&rule=tenant&by=denied")
        eq(b["total"], 7, "the tenant rule's denials")
        eq([(c["identity"], c["denied"], c["error_bound"]) for c in b["callers"]],
           [("d:aon%1Etenant%1Fheavy", 7, 0)], "the heavy tenant, every denial")
        b = top_ok(a, "domain=aon&rule=tenant&by=units")
        eq(b["total"], 5, "the tenant rule's units: the allowed requests' hits")
        eq(sorted((c["identity"], c["units"]) for c in b["callers"]),
           [("d:aon%1Etenant%1Fheavy", 3), ("d:aon%1Etenant%1Flight1", 1),
            ("d:aon%1Etenant%1Flight2", 1)], "each tenant's units")
        b = top_ok(a, "domain=aon&rule=user&by=denied")
        eq((b["total"], b["callers"]), (0, []),
           "a user whose limit allowed a denied request: not denied")
        b = top_ok(a, "domain=aon&rule=user&by=units")
        eq(sorted(c["identity"] for c in b["callers"]),
           ["d:aon%1Euser%1Fu0", "d:aon%1Euser%1Fu1", "d:aon%1Euser%1Fu2", "d:aon%1Euser%1Fv1",
            "d:aon%1Euser%1Fv2"], "the users of the allowed requests, by units")
        eq(b["total"], 5, "one hit each")
        # a detailed_metric rule: the request's values in its name, no one
        # rule of the file has it (limits null); counted under that name
        with G.Client(a.rls_port) as c:
            for i in range(3):
                c.check("aon", [[("detail", "x")], [("user", "w%d" % i)]])
        b = top_ok(a, "domain=aon&rule=detail_x&by=units")
        eq([(c["identity"], c["units"]) for c in b["callers"]], [("d:aon%1Edetail%1Fx", 3)],
           "a detailed_metric rule's caller")
        st, h, s = H.request(a.aport, "GET", "/admin/status", headers=AUTH)
        H.expect_json(st, h, s, 200, "GET /admin/status")
        rules = {r["rule"]: r for r in s["rls_rules"]}
        eq(sorted(rules), ["detail_x", "tenant", "user"], "the rules")
        eq(rules["detail_x"]["limits"], None, "a name no one rule has: limits null")
        eq(rules["tenant"]["limits"][0]["limit"], 3, "the tenant rule's limit")
    finally:
        a.close()


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
    ("GET /admin/status: the rules, the most hit first, their limits and counts", t_status),
    ("rls.all_or_nothing: each descriptor counted under its rule, denied by its own limit, "
     "its hits when the request was allowed; a detailed_metric rule's name", t_all_or_nothing),
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
