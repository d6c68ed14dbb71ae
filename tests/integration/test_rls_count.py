#!/usr/bin/env python3
"""How the rules of Envoy's rate limit service count (issue 29, item 3):
through the real daemon and a real Redis, gRPC (grpcio) and POST /json.

A rule written as envoyproxy/ratelimit writes it (`unit`) counts every hit,
over its limit too, as envoyproxy/ratelimit's INCRBY does; a rule with an
`algorithm` counts only what it allows unless `count_over_limit: true`.  The
answers are compared with a model of envoyproxy/ratelimit's counting, written
from its sources' facts (src/redis/fixed_cache_impl.go: INCRBY of the hits,
then src/limiter/base_limiter.go: OVER_LIMIT when the count after the hits is
past requests_per_unit, limit_remaining 0; else OK with the limit less the
count; its within/near/over stats): the issue's token sequence, its
integration scripts token-quota.sh and multiservice-tokenquota.sh (the
descriptors Envoy sends, request and stream end), and
test/redis/fixed_cache_impl_test.go's cases (an ask of 0 after an over-limit
hit, hits past the near and the over thresholds).  Then every algorithm
under the option, budgets of 10^15 exact, the metrics of charged units,
gRPC clients on two daemons sharing one Redis, and deploy/envoy's token
budget recipe.
"""

import collections
import contextlib
import json
import math
import os
import struct
import sys
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
from harness import check, eq  # noqa: E402
from test_rls_rules import (EXAMPLE, away_from_the_minute, desc, metric, metrics,  # noqa: E402
                            post, rls_conf, write_rules)
from test_rls_grpc import yaml_docs  # noqa: E402

BIG = 10 ** 15
WIRE_MAX = 4294967295

RULES = """\
domain: tokens
descriptors:
  # the issue's rule: 1,000 tokens a minute
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
  # ratelimitd's counting on a unit rule
  - key: denied_free
    count_over_limit: false
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: hot
    rate_limit: {unit: year, requests_per_unit: 50}
  - key: hot_tb
    count_over_limit: true
    rate_limit: {algorithm: token_bucket, window: 24h, requests_per_unit: 10}
"""

ALGOS = ("fixed_window", "sliding_window_counter", "sliding_window_log", "token_bucket", "gcra")


def algo_rules():
    out = ["domain: algos", "descriptors:"]
    for a in ALGOS:
        for charged in (False, True):
            out.append("  - key: %s%s" % (a, "_charged" if charged else ""))
            if charged:
                out.append("    count_over_limit: true")
            out.append("    rate_limit: {algorithm: %s, window: 1h, requests_per_unit: 1000}" % a)
    return "\n".join(out) + "\n"


# test/redis/fixed_cache_impl_test.go's keys (units that outlast a case)
FIXED_CACHE = """\
domain: fc
descriptors:
  - key: key2
    value: value2
    descriptors:
      - key: subkey2
        value: subvalue2
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key3
    value: value3
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: subkey3
        value: subvalue3
        rate_limit: {unit: day, requests_per_unit: 10}
""" + "".join("  - key: key%d\n    value: value%d\n    rate_limit: {unit: day, requests_per_unit: %d}\n"
              % (k, k, lim) for k, lim in ((5, 20), (6, 8), (7, 20), (8, 20), (9, 20), (10, 10)))

NUMBERS = """\
domain: big
descriptors:
  - key: budget
    rate_limit: {unit: year, requests_per_unit: %d}
  - key: bucket
    count_over_limit: true
    rate_limit: {algorithm: token_bucket, window: 30d, requests_per_unit: %d}
""" % (BIG, BIG)


# ------------------------------------------------------------------ the model

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class EnvoyRatelimit:
    """envoyproxy/ratelimit's fixed-window counting, from its sources:
    INCRBY of the hits (fixed_cache_impl.go, DoLimit), then the status of the
    count after them (base_limiter.go, GetResponseDescriptorStatus), and its
    stats (checkOverLimitThreshold, checkNearLimitThreshold)."""

    def __init__(self, near_ratio=0.8):
        self.counts = collections.Counter()
        self.ratio = near_ratio
        self.stats = collections.defaultdict(collections.Counter)

    def hit(self, key, limit, hits, stat=None):
        stat = stat or key
        before = self.counts[key]
        after = before + hits
        self.counts[key] = after
        near = math.floor(f32(f32(limit) * f32(self.ratio)))
        st = self.stats[stat]
        st["hits"] += hits
        if after > limit:
            if before >= limit:
                st["over_limit"] += hits
            else:
                st["over_limit"] += after - limit
                st["near_limit"] += limit - max(near, before)
            return "OVER_LIMIT", 0
        if after > near:
            st["near_limit"] += hits if before >= near else after - near
        st["within_limit"] += hits
        return "OK", limit - after


def overall(codes, quota):
    """ratelimit.go's overall code: OVER_LIMIT when a plain descriptor is, or
    every quota one is."""
    plain = [c for c, q in zip(codes, quota) if not q]
    quotas = [c for c, q in zip(codes, quota) if q]
    if "OVER_LIMIT" in plain or (quotas and all(c == "OVER_LIMIT" for c in quotas)):
        return "OVER_LIMIT"
    return "OK"


# ------------------------------------------------------------------ transports

class Asker:
    """ShouldRateLimit through one transport: "json" (POST /json) or "grpc";
    answers as /json writes them (protojson), so both compare alike."""

    def __init__(self, how, daemon, rls_port):
        self.how, self.d, self.c = how, daemon, None
        if how == "grpc":
            self.c = G.Client(rls_port)

    def ask(self, domain, descs):
        """descs: [(entries, hits_addend or None)]: (overall, [status])."""
        if self.how == "json":
            body = {"domain": domain, "descriptors": [
                dict(desc(*e), **({"hitsAddend": str(h)} if h is not None else {}))
                for e, h in descs]}
            st, h, ans = post(self.d.port, body)
            check(st in (200, 429), "/json %d: %r", st, ans)
            eq(st, 429 if ans["overallCode"] == "OVER_LIMIT" else 200, "status and overallCode")
            return ans["overallCode"], ans["statuses"]
        from test_rls_rules import grpc_as_json
        ans = grpc_as_json(self.c.check(domain, [
            {"entries": e, "hits_addend": h} for e, h in descs]))
        return ans["overallCode"], ans["statuses"]

    def close(self):
        if self.c is not None:
            self.c.close()


def code_left(s):
    return s["code"], s.get("limitRemaining", 0)


@contextlib.contextmanager
def fixture():
    rules = write_rules({"tokens.yaml": RULES, "example.yaml": EXAMPLE, "algos.yaml": algo_rules(),
                         "fc.yaml": FIXED_CACHE, "big.yaml": NUMBERS})
    with H.Redis() as r:
        ds = []
        try:
            for extra in ({}, {"response_headers": True}):
                cfg = rls_conf(rules, **extra)
                port = H.free_port()
                cfg["rls"]["listen"] = "127.0.0.1:%d" % port
                d = H.Daemon(cfg, redis=r, workers=2)
                d.rls_port = port
                d.rules = rules
                ds.append(d)
            yield ds, r
        finally:
            for d in ds:
                d.stop()


def both(ds):
    """A /json asker on the first daemon and a gRPC one on the second: they
    share the counts."""
    return [Asker("json", ds[0], ds[0].rls_port), Asker("grpc", ds[1], ds[1].rls_port)]


# ------------------------------------------------------------------ cases

ISSUE_SEQUENCE = [0, 900, 0, 500, 0, 0, 100, 0]


def t_issue_sequence(ds, r):
    """The issue's sequence on a rule of 1,000 tokens a minute: asks of 0 on
    the request, the response's tokens at stream end; after 900, a 500 is
    OVER_LIMIT and counted, and every following ask is OVER_LIMIT, as
    envoyproxy/ratelimit answers."""
    away_from_the_minute(r, margin=20)
    table = []
    for a in both(ds):
        model = EnvoyRatelimit()
        tenant = "t-%s-%s" % (a.how, uuid.uuid4().hex[:6])
        for i, hits in enumerate(ISSUE_SEQUENCE):
            want = model.hit(tenant, 1000, hits)
            code, sts = a.ask("tokens", [([("tenant", tenant)], hits)])
            got = code_left(sts[0])
            eq(got, want, "%s step %d (hits %d)" % (a.how, i + 1, hits))
            eq(code, want[0], "%s step %d overall" % (a.how, i + 1))
            eq(sts[0]["currentLimit"], {"requestsPerUnit": 1000, "unit": "MINUTE"}, "limit")
            table.append((a.how, i + 1, hits, want, got))
        a.close()
    sys.stdout.write("".join("# %-4s step %d hits %4d: envoyproxy/ratelimit %s %d, ratelimitd "
                             "%s %d\n" % (how, i, h, w[0], w[1], g[0], g[1])
                             for how, i, h, w, g in table))


def t_token_quota_scripts(ds, r):
    """integration-test/scripts/token-quota.sh and multiservice-tokenquota.sh:
    the descriptors Envoy sends for their routes (ask of 0 on the request,
    1 at stream end on the service that served), against the example file's
    quota_mode rules: the requests those scripts expect to pass pass, and
    the one they expect refused is refused."""
    rules = ds[0].rules

    @contextlib.contextmanager
    def fresh(how):
        # an empty Redis, and a daemon of its own: a deny cache outlives
        # FLUSHALL
        r.cli("FLUSHALL")
        cfg = rls_conf(rules)
        port = H.free_port()
        cfg["rls"]["listen"] = "127.0.0.1:%d" % port
        with H.Daemon(cfg, redis=r, workers=1) as d:
            a = Asker(how, d, port)
            try:
                yield a
            finally:
                a.close()

    away_from_the_minute(r, margin=30)
    limits = {"service_1": 1, "service_2": 2}
    for how in ("json", "grpc"):
        with fresh(how) as a:
            model = EnvoyRatelimit()
            # token-quota.sh: /tokenquota asks (service: service_2) with 0 and
            # adds 1 when the stream is done
            passed = []
            for n in range(1, 5):
                code, sts = a.ask("rl", [([("service", "service_2")], 0)])
                eq(code_left(sts[0]), model.hit("service_2", 2, 0),
                   "%s token-quota %d ask" % (a.how, n))
                passed.append(code == "OK")
                if code == "OK":
                    code, sts = a.ask("rl", [([("service", "service_2")], 1)])
                    eq(code_left(sts[0]), model.hit("service_2", 2, 1),
                       "%s token-quota %d stream end" % (a.how, n))
            eq(passed, [True, True, True, False], "%s token-quota.sh: only the 4th refused" % a.how)
        # multiservice-tokenquota.sh: service_1 and service_2 asked with 0;
        # the first that passed serves (its metadata names it) and adds 1
        with fresh(how) as a:
            model = EnvoyRatelimit()
            served = []
            for n in range(1, 7):
                code, sts = a.ask("rl", [([("service", "service_1")], 0),
                                         ([("service", "service_2")], 0)])
                want = [model.hit(s, limits[s], 0) for s in ("service_1", "service_2")]
                eq([code_left(s) for s in sts], want, "%s multiservice %d asks" % (a.how, n))
                eq(code, overall([w[0] for w in want], [True, True]), "overall (quota_mode)")
                if code != "OK":
                    served.append(None)
                    continue
                svc = "service_1" if want[0][0] == "OK" else "service_2"
                served.append(svc)
                code, sts = a.ask("rl", [([("service", svc)], 1)])
                eq(code_left(sts[0]), model.hit(svc, limits[svc], 1),
                   "%s multiservice %d end" % (a.how, n))
            eq(served, ["service_1", "service_1", "service_2", "service_2", "service_2", None],
               "%s multiservice-tokenquota.sh: 2 from service 1, 3 from service 2, the 6th refused"
               % a.how)


def t_fixed_cache_cases(ds, r):
    """test/redis/fixed_cache_impl_test.go: an ask of 0 after an over-limit
    hit is OVER_LIMIT (key3), a hit past a full limit (key2/subkey2), and
    TestNearLimit's hits past the near and over thresholds (key5..key10);
    every answer and the rules' within/near/over counts as the model's."""
    r.cli("FLUSHALL")
    a = Asker("json", ds[0], ds[0].rls_port)
    model = EnvoyRatelimit()
    limit = {"key2_value2.subkey2_subvalue2": 10, "key3_value3": 10,
             "key3_value3.subkey3_subvalue3": 10, "key5_value5": 20, "key6_value6": 8,
             "key7_value7": 20, "key8_value8": 20, "key9_value9": 20, "key10_value10": 10}
    ents = {"key2_value2.subkey2_subvalue2": [("key2", "value2"), ("subkey2", "subvalue2")],
            "key3_value3": [("key3", "value3")],
            "key3_value3.subkey3_subvalue3": [("key3", "value3"), ("subkey3", "subvalue3")]}
    for k in range(5, 11):
        ents["key%d_value%d" % (k, k)] = [("key%d" % k, "value%d" % k)]
    before = metrics(ds[0].port)

    def ask(pairs):
        code, sts = a.ask("fc", [(ents[n], h) for n, h in pairs])
        want = [model.hit(n, limit[n], h) if n in limit else ("OK", 0) for n, h in pairs]
        eq([code_left(s) for s in sts], want, "answers of %r" % (pairs,))
        return sts

    # the counts the test's mock Redis starts from, counted for real
    for name, count in (("key2_value2.subkey2_subvalue2", 10), ("key3_value3", 11),
                        ("key3_value3.subkey3_subvalue3", 12), ("key5_value5", 2),
                        ("key6_value6", 5), ("key7_value7", 16), ("key8_value8", 19),
                        ("key9_value9", 15), ("key10_value10", 27)):
        ask([(name, count)])
    sts = ask([("key3_value3", 0), ("key3_value3.subkey3_subvalue3", 1)])
    eq([s["code"] for s in sts], ["OVER_LIMIT", "OVER_LIMIT"], "an ask of 0 after an overrun")
    for name, hits in (("key5_value5", 3), ("key6_value6", 2), ("key7_value7", 3),
                       ("key8_value8", 3), ("key9_value9", 7), ("key10_value10", 3)):
        ask([(name, hits)])
    after = metrics(ds[0].port)
    for name in limit:
        for stat in ("hits", "within_limit", "near_limit", "over_limit"):
            m = "ratelimitd_rls_%s_total" % stat
            got = (metric(after, m, domain="fc", rule=name) or 0) - \
                (metric(before, m, domain="fc", rule=name) or 0)
            eq(got, model.stats[name][stat], "%s of %s" % (stat, name))
        got = metric(after, "ratelimitd_rls_charged_units_total", domain="fc", rule=name)
        eq(got, model.stats[name]["hits"], "charged units of %s" % name)
    a.close()


def t_algorithms_under_the_option(ds, r):
    """Every algorithm: by default a denied hit counts nothing (an ask after
    the overrun is OK, what was left still left); with count_over_limit:
    true the overrun counts and the ask after it is OVER_LIMIT; a unit rule
    with count_over_limit: false keeps ratelimitd's counting.  /json and
    gRPC alike."""
    for a in both(ds):
        for algo in ALGOS:
            for charged in (False, True):
                key = algo + ("_charged" if charged else "")
                v = "%s-%s" % (a.how, uuid.uuid4().hex[:6])
                seq = [a.ask("algos", [([(key, v)], h)]) for h in (0, 900, 500, 0)]
                codes = [c for c, _ in seq]
                left = [s[0].get("limitRemaining", 0) for _, s in seq]
                what = "%s %s" % (a.how, key)
                eq(codes[:3], ["OK", "OK", "OVER_LIMIT"], what + ": ask, 900, 500")
                # a bucket refills a little meanwhile
                check(100 <= left[1] <= 102, "%s: %d left after 900", what, left[1])
                if charged:
                    eq(codes[3], "OVER_LIMIT", what + ": the ask after the overrun")
                    eq(left[3], 0, what + ": nothing left")
                else:
                    eq(codes[3], "OK", what + ": the ask after a denied hit")
                    check(100 <= left[3] <= 103, "%s: %d left, the 500 counted nothing", what,
                          left[3])
        v = "%s-%s" % (a.how, uuid.uuid4().hex[:6])
        seq = [a.ask("tokens", [([("denied_free", v)], h)]) for h in (0, 900, 500, 0)]
        eq([code_left(s[0]) for _, s in seq], [("OK", 1000), ("OK", 100), ("OVER_LIMIT", 0),
                                                ("OK", 100)],
           "%s: count_over_limit: false on a unit rule" % a.how)
        a.close()


def t_budgets_of_1e15(ds, r):
    """requests_per_unit and hits_addend up to 10^15, exact end to end:
    gRPC and /json (hitsAddend and requestsPerUnit as strings and as
    numbers), the uint32 fields held at 4294967295 and the headers exact;
    past 10^15 refused naming the field, in a request and in a rule file."""
    d = ds[1]    # rls.response_headers
    with G.Client(d.rls_port) as c:
        for how in ("json", "grpc"):
            v = "%s-%s" % (how, uuid.uuid4().hex[:6])

            def ask(hits, limit=None, key="budget"):
                if how == "json":
                    dd = desc((key, v), hitsAddend=str(hits) if hits % 2 else hits)
                    if limit is not None:
                        dd["limit"] = {"requestsPerUnit": str(limit), "unit": "YEAR"}
                    st, h, ans = post(d.port, {"domain": "big", "descriptors": [dd]})
                    check(st in (200, 429), "/json %d %r", st, ans)
                else:
                    from test_rls_rules import grpc_as_json
                    ans = grpc_as_json(c.check("big", [{"entries": [(key, v)], "hits_addend": hits,
                                                        "limit": (limit, 6) if limit else None}]))
                hs = {x["key"]: x["value"] for x in ans.get("responseHeadersToAdd", [])}
                return ans["statuses"][0], hs

            s, hs = ask(0)
            eq((s["code"], s["limitRemaining"], s["currentLimit"]["requestsPerUnit"]),
               ("OK", WIRE_MAX, WIRE_MAX), how + ": Envoy's uint32 fields held at their largest")
            eq((hs.get("X-RateLimit-Limit"), hs.get("X-RateLimit-Remaining")),
               (str(BIG), str(BIG)), how + ": the headers exact")
            s, hs = ask(BIG - 3)
            eq((s["code"], s["limitRemaining"], hs.get("X-RateLimit-Remaining")), ("OK", 3, "3"),
               how + ": 10^15 - 3 of 10^15")
            s, hs = ask(2)
            eq((s["code"], s["limitRemaining"]), ("OK", 1), how + ": one left")
            s, hs = ask(2)
            eq(s["code"], "OVER_LIMIT", how + ": one past 10^15")
            s, hs = ask(0)
            eq(s["code"], "OVER_LIMIT", how + ": and counted")
            # a descriptor's own limit of 10^15, its key the rule's
            v = "%s-own-%s" % (how, uuid.uuid4().hex[:6])
            s, hs = ask(BIG - 1, limit=BIG)
            eq((s["code"], s["limitRemaining"], hs.get("X-RateLimit-Limit")), ("OK", 1, str(BIG)),
               how + ": a limit of 10^15 from the descriptor")
            # a token bucket of 10^15 a month, charged
            v = "%s-tb-%s" % (how, uuid.uuid4().hex[:6])
            s, hs = ask(BIG - 5, key="bucket")
            check(s["code"] == "OK" and 5 <= s["limitRemaining"] <= 5 + 10 ** 9,
                  "%s: a bucket of 10^15: %r", how, s)
            s, hs = ask(BIG, key="bucket")
            eq(s["code"], "OVER_LIMIT", how + ": a bucket's overrun of 10^15")
    # refused past 10^15, naming the field
    for body, field in (
            ({"domain": "big", "descriptors": [desc(("budget", "x"), hitsAddend=str(BIG + 1))]},
             "descriptors[0].hitsAddend"),
            ({"domain": "big", "descriptors": [desc(("budget", "x"), hitsAddend=BIG + 1)]},
             "descriptors[0].hitsAddend"),
            ({"domain": "big", "descriptors": [desc(("budget", "x"), limit={
                "requestsPerUnit": BIG + 1, "unit": "YEAR"})]},
             "descriptors[0].limit.requestsPerUnit")):
        st, h, b = post(d.port, body)
        H.expect_error(st, h, b, 400, field, "body %r" % body)
    with G.Client(d.rls_port) as c:
        for dd, field in (({"entries": [("budget", "x")], "hits_addend": BIG + 1},
                           "descriptors[0].hits_addend: at most 1000000000000000"),
                          ({"entries": [("budget", "x")], "limit": (BIG + 1, 6)},
                           "descriptors[0].limit.requests_per_unit: at most 1000000000000000")):
            st, details = G.status_of(c.check, "big", [dd])
            eq(st, "INVALID_ARGUMENT", "gRPC %r" % dd)
            check(field in details, "%r does not say %r", details, field)
    bad = write_rules({"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: "
                                 "{unit: day, requests_per_unit: %d}\n" % (BIG + 1)})
    with open(os.path.join(bad, "c.json"), "w") as f:
        json.dump({"rls": {"config": bad}}, f)
    rc, out, err = H.run_cli(["-t", "-c", os.path.join(bad, "c.json")])
    eq(rc, 1, "-t of a rule of 10^15 + 1")
    check("b.yaml:4: descriptors[0].rate_limit.requests_per_unit" in out + err, "-t: %r", out + err)


def t_metrics(ds, r):
    """Units charged per rule (ratelimitd_rls_charged_units_total) and per
    policy (ratelimitd_charged_units_total{policy="rls"}); a rule that
    counts only what it allows charges nothing."""
    d = ds[0]
    before = metrics(d.port)
    v = uuid.uuid4().hex[:6]
    for h in (0, 700, 400, 0):
        post(d.port, {"domain": "tokens", "descriptors": [desc(("tenant", v), hitsAddend=h)]})
        post(d.port, {"domain": "tokens", "descriptors": [desc(("denied_free", v), hitsAddend=h)]})
    after = metrics(d.port)

    def delta(name, **labels):
        return (metric(after, name, **labels) or 0) - (metric(before, name, **labels) or 0)
    eq(delta("ratelimitd_rls_charged_units_total", domain="tokens", rule="tenant"), 1100,
       "charged units of the unit rule: the 400 over the limit too")
    eq(delta("ratelimitd_rls_charged_units_total", domain="tokens", rule="denied_free"), 0,
       "count_over_limit: false charges nothing")
    eq(delta("ratelimitd_charged_units_total", policy="rls"), 1100, "per policy")
    check(metric(after, "ratelimitd_rls_charged_units_total", domain="", rule="(other)") is not None,
          "the family's gathering series")


def t_two_daemons_never_admit_more(ds, r):
    """16 gRPC clients on two daemons sharing one Redis: a rule that counts
    every hit admits exactly its limit (a unit rule of 50; a token bucket
    of 10 charged), never more, and its count holds every hit."""
    threads, each = 16, 10
    for key, limit in (("hot", 50), ("hot_tb", 10)):
        v = uuid.uuid4().hex[:8]
        results = collections.Counter()
        lock = threading.Lock()
        clients = [G.Client(ds[i % 2].rls_port) for i in range(threads)]

        def worker(i):
            for _ in range(each):
                ans = clients[i].check("tokens", [[(key, v)]])
                with lock:
                    results[ans.statuses[0].code] += 1

        try:
            H.together(threads, worker)
        finally:
            for c in clients:
                c.close()
        eq(results[1], limit, "%s: OK answers of a limit of %d (%r)" % (key, limit, dict(results)))
        eq(results[2], threads * each - limit, "%s: OVER_LIMIT answers" % key)
        # every hit counted: the ask after them sees them all
        with G.Client(ds[0].rls_port) as c:
            ans = c.check("tokens", [{"entries": [(key, v)], "hits_addend": 0}])
            eq(ans.statuses[0].code, 2, "%s: an ask after them is over" % key)
        keys = r.cli("KEYS", "*%%1E%s%%1F%s}*" % (key, v)).split()
        eq(len(keys), 1, "one key for %s: %r" % (key, keys))
        if key == "hot":
            # hits the deny cache answers are not sent (they change no
            # answer: the window is over until it ends), as envoyproxy/
            # ratelimit's local cache skips their INCRBY
            raw = r.cli("EVAL", "return tostring(struct.unpack('<dd', redis.call('GET', KEYS[1])))",
                        "1", keys[0])
            check(limit < int(float(raw)) <= threads * each, "the count %s: over %d, at most %d",
                  raw, limit, threads * each)


def t_token_budget_recipe(ds, r):
    """deploy/envoy/token-budget.yaml with its rules and ratelimitd config:
    the filter asks with 0 on the request and charges the answer's tokens
    at stream end; the daemon run with that config and rules (its ports
    free) blocks a tenant at the request after the one that passed its
    minute's budget, as the recipe says, through a real gRPC client."""
    src = H.RL_SRCDIR
    envoy = yaml_docs(os.path.join(src, "deploy/envoy/token-budget.yaml"))[0]
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    route = hcm["route_config"]["virtual_hosts"][0]["routes"][0]
    rlf = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ratelimit"][0]
    domain = rlf["typed_config"]["domain"]
    per = route["typed_per_filter_config"]["envoy.filters.http.ratelimit"]["rate_limits"]
    on_request = [p for p in per if not p.get("apply_on_stream_done")]
    on_done = [p for p in per if p.get("apply_on_stream_done")]
    eq(len(on_request), 1, "one descriptor on the request")
    eq(on_request[0]["hits_addend"], {"number": 0}, "the request only asks")
    eq(len(on_done), 1, "one at stream end")
    fmt = on_done[0]["hits_addend"]["format"]
    lua = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.lua"][0]
    code = lua["typed_config"]["default_source_code"]["inline_string"]
    ns, key = fmt[len("%DYNAMIC_METADATA("):-2].split(":")
    check('set("%s", "%s"' % (ns, key) in code, "the Lua filter sets %s:%s: %s", ns, key, code)
    eq(on_request[0]["actions"], on_done[0]["actions"], "the same descriptor both times")
    hdr = on_request[0]["actions"][0]["request_headers"]
    rls_cluster = rlf["typed_config"]["rate_limit_service"]["grpc_service"]["envoy_grpc"][
        "cluster_name"]
    cluster = [c for c in envoy["static_resources"]["clusters"] if c["name"] == rls_cluster][0]
    port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
        "socket_address"]["port_value"]
    with open(os.path.join(src, "deploy/envoy/ratelimitd-tokens.json")) as f:
        rcfg = json.load(f)
    eq(rcfg["rls"]["listen"], "127.0.0.1:%d" % port, "rls.listen against Envoy's cluster")
    rules_path = os.path.join(src, "deploy/envoy/token-budget-rules.yaml")
    rules = yaml_docs(rules_path)[0]
    eq(rules["domain"], domain, "the rules' domain against the filter's")
    per_minute = [lim["requests_per_unit"] for lim in rules["descriptors"][0]["rate_limits"]
                  if lim["unit"] == "minute"][0]
    # -t of the recipe's config with its rules (their path made absolute)
    tcfg = dict(rcfg, rls=dict(rcfg["rls"], config=rules_path))
    tpath = os.path.join(H.tmpdir(), "tokens-%s.json" % uuid.uuid4().hex[:6])
    with open(tpath, "w") as f:
        json.dump(tcfg, f)
    rc, out, err = H.run_cli(["-t", "-c", tpath])
    eq(rc, 0, "-t of the recipe: %s" % (out + err))

    rcfg["listen"] = "127.0.0.1:%d" % H.free_port()
    rls_port = H.free_port()
    rcfg["rls"]["listen"] = "127.0.0.1:%d" % rls_port
    rcfg["rls"]["config"] = rules_path
    rcfg["redis"].pop("url", None)
    rcfg["redis"]["timeout"] = "2s"
    away_from_the_minute(r, margin=20)
    with H.Daemon(rcfg, redis=r, listen=False, port=int(rcfg["listen"].split(":")[1]),
                  workers=1) as d, G.Client(rls_port) as c:
        tenant = "tenant-%s" % uuid.uuid4().hex[:6]
        headers = {hdr["header_name"]: tenant}
        descriptor = [(hdr["descriptor_key"], headers[hdr["header_name"]])]
        model = EnvoyRatelimit()
        answered, tokens = [], 30000
        for n in range(1, 7):
            ans = c.check(domain, [{"entries": descriptor,
                                    "hits_addend": on_request[0]["hits_addend"]["number"]}])
            want = model.hit(tenant, per_minute, 0)
            eq((ans.statuses[0].code, ans.statuses[0].limit_remaining),
               ({"OK": 1, "OVER_LIMIT": 2}[want[0]], want[1]), "request %d asked" % n)
            answered.append(ans.overall_code == 1)
            if ans.overall_code != 1:
                continue
            # the stream is done: its tokens, as the Lua filter read them
            ans = c.check(domain, [{"entries": descriptor, "hits_addend": tokens}])
            want = model.hit(tenant, per_minute, tokens)
            eq((ans.statuses[0].code, ans.statuses[0].limit_remaining),
               ({"OK": 1, "OVER_LIMIT": 2}[want[0]], want[1]), "request %d charged" % n)
        # 30,000 tokens a request against 100,000 a minute: the 4th passes
        # the budget (120,000), the 5th is refused
        eq(answered, [True, True, True, True, False, False], "requests answered")
        check(any(h.key == "X-RateLimit-Limit" for h in ans.response_headers_to_add),
              "quota headers: %r", ans.response_headers_to_add)
        del d


def main():
    t = H.Tests(timeout=600)
    cases = [
        ("the issue's token sequence answers as envoyproxy/ratelimit", t_issue_sequence),
        ("token-quota.sh and multiservice-tokenquota.sh as Envoy sends them",
         t_token_quota_scripts),
        ("fixed_cache_impl_test: an ask after an overrun, near and over counts",
         t_fixed_cache_cases),
        ("every algorithm, with and without count_over_limit, gRPC and /json",
         t_algorithms_under_the_option),
        ("budgets of 10^15 exact; past it refused naming the field", t_budgets_of_1e15),
        ("charged units per rule and per policy", t_metrics),
        ("16 gRPC clients on two daemons never admit more than the limit",
         t_two_daemons_never_admit_more),
        ("deploy/envoy/token-budget.yaml: its RLS sequence through gRPC", t_token_budget_recipe),
    ]
    try:
        with fixture() as fx:
            t.run_cases(cases, *fx)
    except Exception as e:
        t.fail_rest(cases, "fixture failed: %s: %s" % (type(e).__name__, e))
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
