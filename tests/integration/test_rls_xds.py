#!/usr/bin/env python3
"""Rules over xDS (rls.xds): the daemon as Envoy Gateway's rate limit
Deployment, its rules from a real aggregated discovery server (Python grpcio,
harness_xds.py) serving what Envoy Gateway serves — one RateLimitConfig per
listener, descriptors of a route, `rule-I-match-0` and
`masked_remote_address` — checked through the real gRPC listener against a
real Redis: serving before any rules (every domain unknown, OK), the first
rules ACKed, an update, a bad resource NACKed naming the resource and the
field (the rules in force kept, checks unaffected), a domain removed, the
server going away and back (rules kept, reconnected asking for the version
in force), rls.xds.wait_for_rules (not serving until rules), a response over
rls.xds.max_message, mTLS (a wrong CA refused and logged), and 10,000
descriptors pushed while clients check (every answer from one whole config).
"""

import contextlib
import os
import sys
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
import harness_xds as X  # noqa: E402
from harness import check, eq, wait_for  # noqa: E402

NODE = "envoy-ratelimit"
L1, L2 = "default/eg/http", "default/eg/https"


def daemon(redis, ads, tls=None, ready=None, **xds):
    rls_port, debug_port = H.free_port(), H.free_port()
    x = {"server": "127.0.0.1:%d" % ads.port, "node_id": NODE}
    if tls:
        x["tls"] = tls
    x.update(xds)
    d = H.Daemon({"failure_mode": "open", "redis": {"timeout": "2s"},
                  "rls": {"listen": "127.0.0.1:%d" % rls_port, "xds": x},
                  "debug_listen": "127.0.0.1:%d" % debug_port},
                 redis=redis, workers=2, ready=ready)
    d.rls_port, d.debug_port = rls_port, debug_port
    wait_for(lambda: H.port_open(rls_port), "rls.listen open")
    return d


def m(d, name, labels=None, default=None):
    return H.metric(d, name, labels, default)


version_of = X.version_of


def rlconfig(d):
    st, _, text = H.request(d.debug_port, "GET", "/rlconfig")
    eq(st, 200, "GET /rlconfig")
    return str(text)


def code(pb, r, i=None):
    v = r.overall_code if i is None else r.statuses[i].code
    return pb.rls.RateLimitResponse.Code.Name(v)


def limit_of(r, i=0):
    s = r.statuses[i]
    return s.current_limit.requests_per_unit if s.HasField("current_limit") else None


def client_addr():
    return "10.%d.%d.%d/32" % tuple(uuid.uuid4().bytes[:3])


# ------------------------------------------------------------------ cases

def t_before_rules(x):
    d = x.fresh
    eq(m(d, "ratelimitd_rls_xds_rules_loaded"), 0, "rules_loaded before any")
    wait_for(lambda: m(d, "ratelimitd_rls_xds_connected") == 1, "the stream open")
    with G.Client(d.rls_port) as c:
        r = c.check(L1, X.gateway_request(0, client_addr()))
        eq(code(x.pb, r), "OK", "a domain no rules have yet")
        eq(limit_of(r), None, "no current_limit")
        eq(c.health(""), "SERVING", "health before rules (the default serves at once)")
    eq(H.request(d.port, "GET", "/serving")[0], 200, "GET /serving before rules")
    req = x.ads.wait_request(lambda r: True, "the first")
    eq(req.node.id, NODE, "Node.id")
    eq(req.type_url, X.TYPE_URL, "type_url")
    eq(req.response_nonce, "", "the first request's nonce")


def t_initial(x):
    d, ads = x.d, x.ads
    since = len(ads.requests)
    ads.publish([X.gateway_config(L1, [3, 50]), X.gateway_config(L2, [7])], "v1")
    wait_for(lambda: version_of(d) == "v1", "version v1 in force")
    ack = ads.wait_request(lambda r: r.response_nonce == ads.last_nonce("v1"), "ACKing v1",
                           since)
    eq(ack.version_info, "v1", "the ACK's version_info")
    check(not ack.HasField("error_detail"), "an ACK without error_detail: %r", ack.error_detail)
    eq(m(d, "ratelimitd_rls_xds_rules_loaded"), 1, "rules_loaded")
    eq(m(d, "ratelimitd_rls_xds_updates_total", {"result": "accepted"}), 1, "accepted")
    who = client_addr()
    with G.Client(d.rls_port) as c:
        codes = [code(x.pb, c.check(L1, X.gateway_request(0, who))) for _ in range(4)]
        eq(codes, ["OK", "OK", "OK", "OVER_LIMIT"], "rule 0 of %s (3 an hour)" % L1)
        r = c.check(L2, X.gateway_request(0, who))
        eq(limit_of(r), 7, "%s's rule" % L2)
        eq(limit_of(c.check(L1, X.gateway_request(1, who))), 50, "rule 1")
    text = rlconfig(d)
    check("requests_per_unit=50" in text and "requests_per_unit=3," in text,
          "GET /rlconfig shows v1's rules:\n%s", text)


def t_update(x):
    d, ads = x.d, x.ads
    ads.publish([X.gateway_config(L1, [2, 60]), X.gateway_config(L2, [7])], "v2")
    wait_for(lambda: version_of(d) == "v2", "version v2 in force")
    ads.wait_request(lambda r: r.response_nonce == ads.last_nonce("v2") and
                     r.version_info == "v2", "ACKing v2")
    with G.Client(d.rls_port) as c:
        r = c.check(L1, X.gateway_request(1, client_addr()))
        eq(limit_of(r), 60, "rule 1 after the update")
        who = client_addr()
        codes = [code(x.pb, c.check(L1, X.gateway_request(0, who))) for _ in range(3)]
        eq(codes, ["OK", "OK", "OVER_LIMIT"], "rule 0 updated to 2 an hour")
    # the same resource names, other limits: /rlconfig's kept text is v2's
    text = rlconfig(d)
    check("requests_per_unit=60" in text and "requests_per_unit=50" not in text,
          "GET /rlconfig shows v2's rules, not v1's:\n%s", text)


def t_bad_resource(x):
    d, ads = x.d, x.ads
    rejected = m(d, "ratelimitd_rls_xds_updates_total", {"result": "rejected"})
    bad = X.config("broken-listener", "default/eg/broken", [
        {"key": "ok", "limit": (5, "MINUTE")},
        {"key": "route", "value": "r", "descriptors": [{"key": "", "limit": (1, "SECOND")}]}])
    stop = threading.Event()
    answers, errors = [], []

    def checker():
        with G.Client(d.rls_port) as c:
            while not stop.is_set():
                try:
                    answers.append(limit_of(c.check(L1, X.gateway_request(1, client_addr()))))
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    errors.append(repr(e))
    t = threading.Thread(target=checker)
    t.start()
    try:
        ads.publish([X.gateway_config(L1, [2, 99]), bad], "v3")
        nack = ads.wait_request(lambda r: r.response_nonce == ads.last_nonce("v3"), "NACKing v3")
    finally:
        stop.set()
        t.join(60)
    msg = nack.error_detail.message
    eq(nack.version_info, "v2", "the NACK's version_info: the version in force")
    eq(nack.error_detail.code, 3, "error_detail.code INVALID_ARGUMENT")
    check("resource 'broken-listener'" in msg, "error_detail names the resource: %r", msg)
    check("descriptors[1].descriptors[0]" in msg and "empty key" in msg,
          "error_detail names the field by its path: %r", msg)
    eq(version_of(d), "v2", "the version in force after a NACK")
    eq(m(d, "ratelimitd_rls_xds_updates_total", {"result": "rejected"}), rejected + 1,
       "rejected")
    eq(errors, [], "checks during the NACK")
    check(len(answers) > 0 and set(answers) == {60}, "every check answered from v2: %r",
          sorted(set(answers)))
    check("rules over xDS rejected" in d.log(), "the refusal is logged")


def t_domain_removed(x):
    d, ads = x.d, x.ads
    ads.publish([X.gateway_config(L1, [2, 60])], "v4")
    wait_for(lambda: version_of(d) == "v4", "version v4 in force")
    with G.Client(d.rls_port) as c:
        r = c.check(L2, X.gateway_request(0, client_addr()))
        eq(code(x.pb, r), "OK", "the removed domain")
        eq(limit_of(r), None, "the removed domain has no rule")
        eq(limit_of(c.check(L1, X.gateway_request(1, client_addr()))), 60, "the kept one")


def t_server_away(x):
    d, ads = x.d, x.ads
    streams = ads.streams
    ads.stop()
    wait_for(lambda: m(d, "ratelimitd_rls_xds_connected") == 0, "the stream lost")
    who = client_addr()
    with G.Client(d.rls_port) as c:
        codes = [code(x.pb, c.check(L1, X.gateway_request(0, who))) for _ in range(3)]
        eq(codes, ["OK", "OK", "OVER_LIMIT"], "the rules in force while the server is away")
    since = len(ads.requests)
    ads.start()
    first = ads.wait_request(lambda r: r.response_nonce == "", "a new stream's first", since)
    eq(first.version_info, "v4", "a reconnection asks with the version in force")
    wait_for(lambda: m(d, "ratelimitd_rls_xds_connected") == 1, "reconnected")
    check(ads.streams > streams, "a new stream")
    ads.wait_request(lambda r: r.response_nonce == ads.last_nonce("v4") and
                     r.version_info == "v4", "ACKing v4 again", since)
    eq(version_of(d), "v4", "version after the reconnection")
    check("xDS stream lost" in d.log(), "the loss is logged")


def t_max_message(x):
    d, ads = x.d, x.ads
    since = len(ads.requests)
    rejected = m(d, "ratelimitd_rls_xds_updates_total", {"result": "rejected"})
    big = X.config("big", "big", [{"key": "k", "value": "v%06d" % i, "limit": (1, "SECOND")}
                                  for i in range(4000)])
    check(big.ByteSize() > 64 * 1024, "the resource is over 64k: %d", big.ByteSize())
    ads.publish([X.gateway_config(L1, [2, 60]), big], "v5")
    wait_for(lambda: "over rls.xds.max_message" in d.log(), "the bound logged")
    eq(version_of(d), "v4", "the version in force")
    check(m(d, "ratelimitd_rls_xds_updates_total", {"result": "rejected"}) > rejected,
          "counted as rejected")
    # back within the bound: the reconnection gets it
    ads.publish([X.gateway_config(L1, [2, 61])], "v6")
    wait_for(lambda: version_of(d) == "v6", "v6 after the oversized one")
    ads.wait_request(lambda r: r.version_info == "v6", "ACKing v6", since)


def t_wait_for_rules(x):
    with X.AdsServer() as ads, daemon(x.redis, ads, ready=False, wait_for_rules=True) as d:
        wait_for(lambda: m(d, "ratelimitd_rls_xds_connected") == 1, "the stream open")
        eq(H.request(d.port, "GET", "/serving")[0], 503, "GET /serving waiting for rules")
        eq(H.readyz(d), 503, "GET /readyz waiting for rules")
        with G.Client(d.rls_port) as c:
            eq(c.health(""), "NOT_SERVING", "gRPC health waiting for rules")
            ads.publish([X.gateway_config(L1, [3])], "w1")
            wait_for(lambda: c.health("") == "SERVING", "SERVING once rules arrive")
        eq(H.request(d.port, "GET", "/serving")[0], 200, "GET /serving with rules")


def t_mtls(x):
    pki = H.Pki()
    ca, other = pki.ca("xds-ca"), pki.ca("other-ca")
    srv = pki.leaf("xds-server", ca)
    cli = pki.leaf("ratelimit-client", ca)
    with X.AdsServer(tls=(srv[0], srv[1], ca[0])) as ads:
        ads.publish([X.gateway_config(L1, [4])], "t1")
        tls = {"ca_file": other[0], "cert_file": cli[0], "key_file": cli[1],
               "server_name": "localhost"}
        with daemon(x.redis, ads, tls=tls) as d:
            wait_for(lambda: "certificate verify failed" in d.log(),
                     "a server of another CA refused and logged")
            eq(m(d, "ratelimitd_rls_xds_connected"), 0, "not connected")
            eq(version_of(d), None, "no rules from a server not trusted")
            eq(ads.requests, [], "no request reached the server")
        tls["ca_file"] = ca[0]
        with daemon(x.redis, ads, tls=tls) as d:
            wait_for(lambda: version_of(d) == "t1", "rules over mTLS")
            eq(m(d, "ratelimitd_rls_xds_connected"), 1, "connected over mTLS")
            with G.Client(d.rls_port) as c:
                eq(limit_of(c.check(L1, X.gateway_request(0, client_addr()))), 4, "the rule")
        del tls["cert_file"], tls["key_file"]
        with daemon(x.redis, ads, tls=tls) as d:
            wait_for(lambda: "xDS stream lost" in d.log() and
                     m(d, "ratelimitd_rls_xds_updates_total", {"result": "accepted"}) == 0,
                     "without a client certificate: refused by the server")
            eq(version_of(d), None, "no rules without a client certificate")


big_config = X.many


def t_ten_thousand(x):
    with X.AdsServer() as ads, daemon(x.redis, ads, max_message="8m") as d:
        ads.publish([big_config(10000, 100)], "a")
        wait_for(lambda: version_of(d) == "a", "10,000 descriptors in force", timeout=120)
        stop = threading.Event()
        seen, errors, lock = [], [], threading.Lock()

        def checker(k):
            with G.Client(d.rls_port) as c:
                while not stop.is_set():
                    i = (k * 7919) % 10000
                    k += 1
                    try:
                        r = c.check("big", [[("k", "v%d" % i)], [("k", "v%d" % (9999 - i))]])
                        with lock:
                            seen.append((limit_of(r, 0), limit_of(r, 1)))
                    except Exception as e:  # noqa: BLE001
                        with lock:
                            errors.append(repr(e))
        ts = [threading.Thread(target=checker, args=(j * 1000,)) for j in range(4)]
        for t in ts:
            t.start()
        try:
            for v, lim in (("b", 200), ("c", 300), ("d", 400)):
                wait_for(lambda: len(seen) > 20, "checks answered")
                ads.publish([big_config(10000, lim)], v)
                wait_for(lambda: version_of(d) == v, "version %s in force" % v, timeout=120)
        finally:
            stop.set()
            for t in ts:
                t.join(120)
        eq(errors, [], "checks failed during the updates")
        pairs = set(seen)
        bad = [p for p in pairs if p[0] != p[1] or p[0] not in (100, 200, 300, 400)]
        eq(bad, [], "an answer from half a config (its two descriptors' limits differ)")
        check(len(pairs) >= 2, "checks answered under several versions: %r", pairs)
        H.note("%d checks across 4 versions of 10,000 descriptors", len(seen))


def t_swap_memory(x):
    with X.AdsServer() as ads, daemon(x.redis, ads, max_message="8m") as d:
        f = X.swap_figures(d, ads, 10000, updates=2)
        H.note("10,000 descriptors: %d rules, %d bytes kept (%.0f a rule), steady RSS %d kB, "
               "update peaks %s kB over the RSS without rules: %.2fx; apply CPU %s us"
               % (f["rls_rules"], f["rules_bytes"], f["per_rule"], f["steady_kb"],
                  f["peaks_kb"], f["ratio"], f["apply_cpu_us"]))
        eq(f["rls_rules"], 10000, "rules in the set")
        if not H.RSS_MEANINGFUL:
            H.note("peak RSS not asserted under valgrind or ASan (their memory, not ours)")
            return
        check(f["ratio"] <= 2.0, "an update's peak %d kB over 2x the rules' steady %d kB "
              "(%.2fx)", f["peak_kb"], f["steady_kb"], f["ratio"])


def t_config_errors(x):
    rules = os.path.join(H.tmpdir(), "xds-rules.yaml")
    with open(rules, "w") as f:
        f.write("domain: d\n")
    for rls, want in (
            ({"config": rules, "xds": {"server": "127.0.0.1:1", "node_id": NODE}},
             "rls.xds: give rls.config or rls.xds, not both"),
            ({"xds": {"server": "127.0.0.1:1"}}, "rls.xds.node_id: required"),
            ({"xds": {"server": "nohostport", "node_id": NODE}}, "rls.xds.server: must be HOST:PORT"),
            ({"xds": {"node_id": NODE}}, "rls.xds.server: required"),
            ({"xds": {"server": "h:1", "node_id": NODE, "tls": {"cert_file": rules}}},
             "rls.xds.tls: give cert_file and key_file together")):
        rls["listen"] = "127.0.0.1:%d" % H.free_port()
        rc, _, err = H.run_cli(["-t", "-c", H.write_config({"rls": rls})])
        eq(rc, 1, "-t with %r" % (rls,))
        check(want in err, "the problem %r in: %r", want, err)
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(
        {"rls": {"listen": "127.0.0.1:%d" % H.free_port(),
                 "xds": {"server": "[::1]:18001", "node_id": NODE}}})])
    eq(rc, 0, "rls.listen with rls.xds alone (%s)" % err)


CASES = [
    ("configuration: rls.config and rls.xds exclusive, node_id required, HOST:PORT, TLS pairs",
     t_config_errors),
    ("before any rules: serving, every domain unknown (OK), the first request names the node",
     t_before_rules),
    ("the first rules (Envoy Gateway's shape): ACKed with version and nonce, decided", t_initial),
    ("an update: ACKed, the new limits decided", t_update),
    ("a bad resource: NACKed naming the resource and the field, the rules in force kept, "
     "checks unaffected", t_bad_resource),
    ("a domain removed: unknown from then on, the other kept", t_domain_removed),
    ("the server going away and back: rules kept, reconnected asking with the version in force",
     t_server_away),
    ("a response over rls.xds.max_message: the stream ended, counted, the rules kept",
     t_max_message),
    ("rls.xds.wait_for_rules: /serving, /readyz and gRPC health wait for the first rules",
     t_wait_for_rules),
    ("mTLS: a server of another CA refused and logged; the right CA: rules; no client "
     "certificate: refused", t_mtls),
    ("10,000 descriptors pushed 3 times while 4 clients check: none lost, none answered from "
     "half a config", t_ten_thousand),
    ("an update of 10,000 descriptors: its peak memory at most 2x the rules' steady size "
     "(the rules in force, the new ones, one descriptor being read)", t_swap_memory),
]


class Fixture:
    pass


@contextlib.contextmanager
def fixture():
    x = Fixture()
    x.pb = G.protos()
    with H.Redis() as redis:
        x.redis = redis
        with X.AdsServer() as ads:
            x.ads = ads
            with daemon(redis, ads, max_message="64k") as d:
                x.d = x.fresh = d
                yield x


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=900)
