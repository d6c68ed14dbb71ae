#!/usr/bin/env python3
"""Which policy decides a check (docs/API.md "Policies are matched in file order"):
exact path, path_prefix, path_glob ('*' any run of bytes, '?' one byte), methods,
first match in file order, explicit "policy" by name, where path and method come
from (body > the one family of X-Original-* or X-Forwarded-* that
forwarded_request_headers names, from trusted proxies only > "/" GET), paths
normalised before matching, query strings, no match, shadow mode with its
metrics, typed overrides, and every shipped conf/*.json passing -t.
"""

import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402


def fw(limit, window="1h"):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


BIG = fw(100000)

CONFIG = {
    "identity": ["body", "peer"],
    # semantics under test, not latency: the default 50 ms would answer a
    # check degraded (allowed) whenever a loaded host delays Redis that long
    "redis": {"timeout": "2s"},
    "policies": [
        {"name": "root", "match": {"path": "/", "methods": ["GET"]}, "limits": [BIG]},
        {"name": "exact", "match": {"path": "/exact"}, "limits": [BIG]},
        {"name": "prefix", "match": {"path_prefix": "/pre"}, "limits": [BIG]},
        {"name": "glob", "match": {"path_glob": "/g/*/x?z"}, "limits": [BIG]},
        {"name": "glob-star", "match": {"path_glob": "*.png"}, "limits": [BIG]},
        {"name": "m-write", "match": {"path_prefix": "/m", "methods": ["PUT", "DELETE"]}, "limits": [BIG]},
        {"name": "m-any", "match": {"path_prefix": "/m"}, "limits": [BIG]},
        # first in file order wins, even when a later one is more specific
        {"name": "o-first", "match": {"path_prefix": "/order"}, "limits": [BIG]},
        {"name": "o-second", "match": {"path": "/order/a"}, "limits": [BIG]},
        {"name": "e-exact", "match": {"path": "/e2/a"}, "limits": [BIG]},
        {"name": "e-prefix", "match": {"path_prefix": "/e2"}, "limits": [BIG]},
        {"name": "only-trace", "match": {"methods": ["TRACE"]}, "limits": [BIG]},
        {"name": "shadowpol", "match": {"path": "/shadow"}, "shadow": True, "limits": [fw(2)]},
        {"name": "tiered", "match": {"path": "/tiered"}, "limits": [fw(2)],
         "overrides": [{"identities": ["key:gold", "ip:203.0.113.9"], "limits": [fw(4)]}]},
        {"name": "iptier", "match": {"path": "/iptier"}, "limits": [fw(2)],
         "identity": ["body", "forwarded", "peer"],
         "overrides": [{"identities": ["ip:203.0.113.0/24"], "limits": [fw(4)]}]},
        # written un-normalised: matched as its normal form
        {"name": "weird", "match": {"path_prefix": "/w%65ird//./x/../y"}, "limits": [BIG]},
    ],
}

QUOTA_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                 "ratelimit-policy", "ratelimit", "retry-after")


def which(d, body, headers=None, what=""):
    """The policy that decided the check (asserting a 200 or 429 JSON answer)."""
    body = dict(body or {})
    body.setdefault("key", "k")
    st, h, b = post(d, body, headers)
    check(st in (200, 429), "%s: status %r (body %r)", what, st, b)
    H.expect_json(st, h, b, st, what)
    check("policy" in b, "%s: body has no \"policy\": %r", what, b)
    return b["policy"]


def table(d, rows, headers_of=None):
    """rows: [(body, want)]; every mismatch is reported, not only the first."""
    bad = []
    for body, want in rows:
        hdrs = body.pop("_headers", None) if isinstance(body, dict) else None
        what = "%r %r" % (body, hdrs) if hdrs else repr(body)
        try:
            got = which(d, body, hdrs, what)
        except H.Fail as e:
            bad.append(str(e))
            continue
        if got != want:
            bad.append("%s: policy %r, expected %r" % (what, got, want))
    check(not bad, "%d of %d rows wrong:\n%s", len(bad), len(rows), "\n".join(bad))


# ------------------------------------------------------------ matching

def t_exact_path(d, r):
    table(d, [
        ({"path": "/exact"}, "exact"),
        ({"path": "/exact", "method": "DELETE"}, "exact"),   # no methods: any method
        ({"path": "/exact/"}, None),
        ({"path": "/exactly"}, None),
        ({"path": "/exac"}, None),
        ({"path": "/x/exact"}, None),
        ({"path": "/"}, "root"),
        ({"path": "/", "method": "POST"}, None),
    ])


def t_path_prefix(d, r):
    table(d, [
        ({"path": "/pre"}, "prefix"),
        ({"path": "/prefix"}, "prefix"),
        ({"path": "/pre/a/b"}, "prefix"),
        ({"path": "/pr"}, None),
        ({"path": "/xpre"}, None),
        ({"path": "/PRE"}, None),
    ])


def t_path_glob(d, r):
    table(d, [
        ({"path": "/g/a/xyz"}, "glob"),
        ({"path": "/g/abc/x1z"}, "glob"),
        ({"path": "/g/a/b/c/xyz"}, "glob"),       # '*' is any run of bytes, '/' too
        ({"path": "/g/-/xyz"}, "glob"),
        ({"path": "/g//xyz"}, None),              # is /g/xyz: slashes are merged
        ({"path": "/g/a/xz"}, None),              # '?' is exactly one byte
        ({"path": "/g/a/xyyz"}, None),
        ({"path": "/g/a/xyz/"}, None),            # anchored at the end
        ({"path": "/h/g/a/xyz"}, None),           # anchored at the start
        ({"path": "/img/a.png"}, "glob-star"),
        ({"path": "/a.png.txt"}, None),
        ({"path": "/g/a/x/z.png"}, "glob-star"),
    ])


def t_methods(d, r):
    table(d, [
        ({"path": "/m", "method": "PUT"}, "m-write"),
        ({"path": "/m/x", "method": "DELETE"}, "m-write"),
        ({"path": "/m", "method": "GET"}, "m-any"),     # not in methods: the next policy in order
        ({"path": "/m", "method": "POST"}, "m-any"),
        ({"path": "/m"}, "m-any"),                      # default method GET
        ({"path": "/nothing", "method": "TRACE"}, "only-trace"),   # match with only methods: any path
        ({"path": "/nothing", "method": "GET"}, None),
    ])


def t_file_order(d, r):
    table(d, [
        ({"path": "/order/a"}, "o-first"),     # o-second is exact but comes later
        ({"path": "/order"}, "o-first"),
        ({"path": "/e2/a"}, "e-exact"),
        ({"path": "/e2/b"}, "e-prefix"),
        ({"path": "/e2"}, "e-prefix"),
    ])


def t_catch_all(d, r):
    # a policy without match matches everything; one after it is never reached
    cfg = {"identity": ["body", "peer"], "policies": [
        {"name": "exact", "match": {"path": "/a"}, "limits": [BIG]},
        {"name": "all", "limits": [BIG]},
        {"name": "never", "match": {"path": "/b"}, "limits": [BIG]},
    ]}
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"path": "/a"}, "exact"),
            ({"path": "/b"}, "all"),
            ({"path": "/zzz", "method": "DELETE"}, "all"),
            ({}, "all"),
        ])


def t_path_fold(d, r):
    # issue 24: what routers fold, folded before matching (patterns too);
    # without path_fold, exact bytes
    pols = [{"name": "login", "match": {"path": "/Login"}, "limits": [BIG]},
            {"name": "api", "match": {"path_prefix": "/API/"}, "limits": [BIG]},
            {"name": "all", "limits": [BIG]}]
    cfg = {"identity": ["body", "peer"], "path_fold": ["case", "params", "trailing_slash"],
           "policies": pols}
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"path": "/login"}, "login"),
            ({"path": "/LOGIN/"}, "login"),
            ({"path": "/login;jsessionid=9"}, "login"),
            ({"path": "/Login;x/"}, "login"),
            ({"path": "/login/x"}, "all"),
            ({"path": "/loginx"}, "all"),
            ({"path": "/api"}, "api"),
            ({"path": "/Api;v=2/items"}, "api"),
            ({"path": "/apix"}, "all"),
        ])
    with H.Daemon(dict(cfg, path_fold=[]), redis=r) as d3:
        table(d3, [
            ({"path": "/Login"}, "login"),
            ({"path": "/login"}, "all"),
            ({"path": "/Login/"}, "all"),
            ({"path": "/Login;x"}, "all"),
            ({"path": "/API"}, "all"),
        ])
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(dict(cfg, path_fold=["case", "accents"]))])
    eq(rc, 1, "-t exit code with an unknown fold")
    check("path_fold[1]" in err, "-t does not name path_fold[1]: %r", err)


def t_policy_by_name(d, r):
    table(d, [
        ({"policy": "exact", "path": "/pre"}, "exact"),
        ({"policy": "m-write", "path": "/m", "method": "GET"}, "m-write"),
        ({"policy": "o-second", "path": "/order/a"}, "o-second"),
        ({"policy": "only-trace"}, "only-trace"),
        ({"policy": "glob", "_headers": {"X-Original-URI": "/exact"}}, "glob"),
    ])
    st, h, b = post(d, {"key": "k", "policy": "nope", "path": "/exact"})
    H.expect_error(st, h, b, 400, field="policy", what="unknown policy name")
    st, h, b = post(d, {"key": "k", "policy": "EXACT"})
    H.expect_error(st, h, b, 400, field="policy", what="policy names are case-sensitive")


# ------------------------------------------------------------ path/method sources

def t_path_sources(d, r):
    table(d, [
        # body beats X-Original-URI; X-Forwarded-Uri is not the family this
        # daemon is told its proxies write (forwarded_request_headers: original)
        ({"path": "/exact", "_headers": {"X-Original-URI": "/pre", "X-Forwarded-Uri": "/g/a/xyz"}}, "exact"),
        ({"path": "/exact", "_headers": {"X-Forwarded-Uri": "/pre"}}, "exact"),
        ({"_headers": {"X-Original-URI": "/pre", "X-Forwarded-Uri": "/exact"}}, "prefix"),
        ({"_headers": {"X-Forwarded-Uri": "/exact"}}, "root"),
        ({"_headers": {"X-Original-URI": "/exact"}}, "exact"),
        # nothing: "/" and GET
        ({}, "root"),
    ])


def t_method_sources(d, r):
    table(d, [
        ({"path": "/m", "method": "PUT",
          "_headers": {"X-Original-Method": "GET", "X-Forwarded-Method": "GET"}}, "m-write"),
        ({"path": "/m", "method": "GET",
          "_headers": {"X-Original-Method": "PUT", "X-Forwarded-Method": "DELETE"}}, "m-any"),
        ({"path": "/m", "_headers": {"X-Original-Method": "DELETE", "X-Forwarded-Method": "GET"}}, "m-write"),
        ({"path": "/m", "_headers": {"X-Original-Method": "GET", "X-Forwarded-Method": "PUT"}}, "m-any"),
        ({"path": "/m", "_headers": {"X-Forwarded-Method": "PUT"}}, "m-any"),
        ({"_headers": {"X-Original-Method": "POST"}}, None),     # POST / matches nothing
        ({"_headers": {"X-Original-Method": "TRACE"}}, "only-trace"),
        ({"_headers": {"X-Forwarded-Method": "TRACE"}}, "root"),
        # headers for both at once
        ({"_headers": {"X-Original-URI": "/m/1", "X-Original-Method": "PUT",
                       "X-Forwarded-Uri": "/exact", "X-Forwarded-Method": "GET"}}, "m-write"),
    ])


def t_forwarded_family(d, r):
    # forwarded_request_headers "forwarded" (Caddy, Traefik): X-Forwarded-*
    # only, whatever X-Original-* a client smuggles through
    cfg = dict(CONFIG, forwarded_request_headers="forwarded")
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"_headers": {"X-Forwarded-Uri": "/exact"}}, "exact"),
            ({"_headers": {"X-Original-URI": "/pre", "X-Forwarded-Uri": "/exact"}}, "exact"),
            ({"_headers": {"X-Original-URI": "/exact"}}, "root"),
            ({"path": "/pre", "_headers": {"X-Forwarded-Uri": "/exact"}}, "prefix"),
            ({"path": "/m", "_headers": {"X-Forwarded-Method": "PUT", "X-Original-Method": "GET"}}, "m-write"),
            ({"path": "/m", "_headers": {"X-Original-Method": "PUT"}}, "m-any"),
            ({"_headers": {"X-Forwarded-Uri": "//./exact?x"}}, "exact"),
        ])


def t_untrusted_peer_headers(d, r):
    # a caller that is not a trusted proxy is no proxy: its X-Original-* and
    # X-Forwarded-* are its own claims, and are not believed
    for fam in ("original", "forwarded"):
        cfg = dict(CONFIG, forwarded_request_headers=fam, trusted_proxies=["192.0.2.0/24"])
        with H.Daemon(cfg, redis=r) as d2:
            table(d2, [
                ({"_headers": {"X-Original-URI": "/exact", "X-Forwarded-Uri": "/exact"}}, "root"),
                ({"_headers": {"X-Original-Method": "TRACE", "X-Forwarded-Method": "TRACE"}}, "root"),
                # its own body, though, is what it says it checks
                ({"path": "/exact"}, "exact"),
            ])


def t_paths_normalised(d, r):
    # RFC 3986 6.2.2 plus merged slashes, from every source: the path forms
    # an application behind nginx or Caddy receives as /exact
    forms = ["//exact", "/./exact", "/%65xact", "/%65%78%61%63%74", "/pre/../exact",
             "/x/y/../../exact", "///exact?q=/pre", "/%2e/exact", "/a/%2E%2E/exact"]
    rows = []
    for f in forms:
        rows.append(({"path": f}, "exact"))
        rows.append(({"_headers": {"X-Original-URI": f}}, "exact"))
    rows += [
        ({"path": "/exact/."}, None),           # "/exact/" is another path
        ({"path": "/pre//x"}, "prefix"),
        ({"path": "/%70re"}, "prefix"),
        ({"path": "/%50re"}, None),             # %50 is 'P': case matters
        ({"path": "/g/a/../b/xyz"}, "glob"),
        ({"path": "/m/./1", "method": "PUT"}, "m-write"),
        # the policy's own pattern is normalised at load: /weird/y
        ({"path": "/weird/y/z"}, "weird"),
        ({"path": "/w%65ird//y"}, "weird"),
    ]
    table(d, rows)
    # /check/<path> (forward_auth) goes through the same normaliser
    cfg = dict(CONFIG, forward_auth=True)
    with H.Daemon(cfg, redis=r) as d2:
        for f in ("//exact", "/./exact", "/%65xact", "/pre/../exact"):
            st, h, b = H.request(d2.port, "GET", "/check" + f, None, {"X-Api-Key": "k"})
            H.expect_json(st, h, b, 200, "GET /check%s" % f)
            eq(b.get("policy"), "exact", "policy of GET /check%s" % f)


def t_paths_long(d, r):
    # a path is normalised on the stack up to 255 bytes, in a buffer of its
    # own past that: both sides of the edge, and far past it
    rows = []
    for n in (254, 255, 256, 257, 4000):
        rows.append(({"path": "/" * (n - 5) + "exact"}, "exact"))
        rows.append(({"_headers": {"X-Original-URI": "/" * (n - 5) + "exact"}}, "exact"))
    for j in (49, 50, 51, 600):                   # 5j + 6 bytes
        rows.append(({"path": "/x" * j + "/.." * j + "/exact"}, "exact"))
    rows += [
        ({"path": "/pre/" + "x" * 3000}, "prefix"),
        ({"path": "/exact?" + "q" * 300}, "exact"),  # the query cut off first
        ({"path": "/" + "e" * 300}, None),
        ({"path": "/exact" + "/" * 300}, None),     # "/exact/" is another path
    ]
    table(d, rows)
    # unnormalizable_path "raw": a long path copied as it came
    cfg = dict(CONFIG, unnormalizable_path="raw")
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"path": "/pre%2F" + "x" * 300}, "prefix"),
            ({"path": "/exact%2F" + "x" * 300}, None),
        ])
    # and one that cannot be normalised is refused, however long
    st, h, b = post(d, {"key": "k", "path": "/../" + "x" * 300})
    H.expect_error(st, h, b, 400, field="path", what="a long path above the root")


def t_paths_unnormalisable(d, r):
    # paths whose meaning depends on the application are refused, not guessed
    for f, why in (("/exact%2Fx", "%2F"), ("/exact%2fx", "%2F"), ("/../exact", "above the root"),
                   ("/a/../../exact", "above the root"), ("/exact%00", "%00"),
                   ("/ex%zzact", "hex")):
        for body, hdrs in (({"key": "k", "path": f}, None),
                           ({"key": "k"}, {"X-Original-URI": f})):
            st, h, b = post(d, body, hdrs)
            H.expect_error(st, h, b, 400, field="path", what="path %r (%r %r)" % (f, body, hdrs))
            check(why in b["error"], "error for %r does not say %r: %r", f, why, b["error"])
    # unnormalizable_path "raw": matched as it came, never normalised
    cfg = dict(CONFIG, unnormalizable_path="raw")
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"path": "/exact%2Fx"}, None),
            ({"path": "/pre%2Fx"}, "prefix"),
            ({"path": "/../exact"}, None),
            ({"path": "//exact"}, "exact"),     # normalisable ones still are
        ])


def t_merge_slashes_off(d, r):
    cfg = dict(CONFIG, merge_slashes=False)
    with H.Daemon(cfg, redis=r) as d2:
        table(d2, [
            ({"path": "//exact"}, None),
            ({"path": "/./exact"}, "exact"),
            ({"path": "/g//xyz"}, "glob"),
        ])


def t_query_not_in_path_headers(d, r):
    table(d, [
        ({"_headers": {"X-Original-URI": "/exact?x=1"}}, "exact"),
        ({"_headers": {"X-Original-URI": "/exact?"}}, "exact"),
        ({"_headers": {"X-Original-URI": "/exact?a=b&c=/exact"}}, "exact"),
        ({"_headers": {"X-Original-URI": "/g/a/xyz?q=1"}}, "glob"),
        ({"_headers": {"X-Original-URI": "/?x=/exact"}}, "root"),
        ({"_headers": {"X-Original-URI": "/exactly?x"}}, None),
        ({"_headers": {"X-Original-URI": "/exact?x=%2F&y=/../.."}}, "exact"),
    ])


def t_query_not_in_path_body(d, r):
    # docs/checks.md: "path, method: the original request ... The query string is not part of the path."
    table(d, [
        ({"path": "/exact?x=1"}, "exact"),
        ({"path": "/g/a/xyz?q=1"}, "glob"),
        ({"path": "/?x=/exact"}, "root"),
    ])


def t_no_match(d, r):
    for body, hdrs in (({"key": "nm", "path": "/nowhere"}, None),
                       ({"key": "nm", "path": "/", "method": "POST"}, None),
                       ({"key": "nm"}, {"X-Original-URI": "/nowhere", "X-Original-Method": "PUT"})):
        for i in range(3):
            st, h, b = post(d, body, hdrs)
            H.expect_json(st, h, b, 200, "no policy matches %r %r" % (body, hdrs))
            check("policy" in b and b["policy"] is None, "body.policy: expected null, got %r", b)
            eq(b.get("allowed"), True, "body.allowed")
            present = [n for n in QUOTA_HEADERS if n in h]
            check(not present, "quota headers on an unlimited answer: %r", {n: h[n] for n in present})


# ------------------------------------------------------------ shadow

def metrics(d):
    st, h, text = H.request(d.port, "GET", "/metrics")
    eq(st, 200, "GET /metrics status")
    check(isinstance(text, str), "GET /metrics is not text: %r", text)
    return text


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')


def samples(text, name):
    """[(labels dict, value)] of a metric."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.append((labels, float(m.group(3))))
    return out


def checks_total(text, result, policy=None):
    """Sum of ratelimitd_checks_total for `result` (and `policy`, when the metric has that label)."""
    s = [(l, v) for l, v in samples(text, "ratelimitd_checks_total") if l.get("result") == result]
    check(s, "no ratelimitd_checks_total{result=%r} in /metrics:\n%s", result, text[:1500])
    if policy is not None and any("policy" in l for l, _ in s):
        s = [(l, v) for l, v in s if l.get("policy") == policy]
    return sum(v for _, v in s)


def t_shadow(d, r):
    before = metrics(d)
    want = [(False, 1), (False, 0), (True, 0), (True, 0)]
    for i, (would, rem) in enumerate(want, 1):
        st, h, b = post(d, {"key": "sh1", "path": "/shadow"})
        H.expect_json(st, h, b, 200, "shadow check #%d" % i)
        eq(b.get("policy"), "shadowpol", "#%d body.policy" % i)
        eq(b.get("allowed"), True, "#%d body.allowed" % i)
        eq(b.get("shadow"), True, "#%d body.shadow" % i)
        eq(b.get("would_deny"), would, "#%d body.would_deny" % i)
        eq(b.get("remaining"), rem, "#%d body.remaining (decided and counted as usual)" % i)
        eq(b.get("limit"), 2, "#%d body.limit" % i)
    after = metrics(d)
    for result, delta in (("shadow_denied", 2), ("denied", 0)):
        got = checks_total(after, result, "shadowpol") - checks_total(before, result, "shadowpol")
        eq(got, delta, "increase of ratelimitd_checks_total{result=%r}" % result)
    # a non-shadow denial still counts as denied, not shadow_denied
    before = after
    st, h, b = post(d, {"key": "den", "policy": "exact", "cost": 100001})
    H.expect_json(st, h, b, 429, "cost above the limit of a normal policy")
    after = metrics(d)
    eq(checks_total(after, "denied") - checks_total(before, "denied"), 1, "increase of denied")
    eq(checks_total(after, "shadow_denied") - checks_total(before, "shadow_denied"), 0,
       "increase of shadow_denied on a real denial")


def t_overrides(d, r):
    # listed identities get the override's limits, everyone else the policy's
    def run(key, n, headers=None, path="/tiered", policy="tiered"):
        out = []
        for _ in range(n):
            body = {"path": path}
            if key is not None:
                body["key"] = key
            st, h, b = post(d, body, headers)
            H.expect_json(st, h, b, st, "%s check for %r %r" % (policy, key, headers))
            eq(b.get("policy"), policy, "body.policy for %r" % key)
            out.append((st, b.get("limit"), b.get("remaining")))
        return out
    eq(run("gold", 5), [(200, 4, 3), (200, 4, 2), (200, 4, 1), (200, 4, 0), (429, 4, 0)],
       "gold (override limit 4)")
    eq(run("silver", 3), [(200, 2, 1), (200, 2, 0), (429, 2, 0)], "silver (policy limit 2)")
    # the identity must match whole: a prefix or a longer string is not listed
    eq(run("gold2", 3), [(200, 2, 1), (200, 2, 0), (429, 2, 0)], "gold2 is not gold")
    # a key that spells the listed address is a key, not that address
    eq(run("203.0.113.9", 3), [(200, 2, 1), (200, 2, 0), (429, 2, 0)],
       "body key 203.0.113.9 (the override is for ip:203.0.113.9)")
    # the address itself, vouched for by a trusted proxy: the override
    xff = {"X-Forwarded-For": "203.0.113.77"}
    eq(run(None, 5, xff, "/iptier", "iptier"),
       [(200, 4, 3), (200, 4, 2), (200, 4, 1), (200, 4, 0), (429, 4, 0)],
       "address 203.0.113.77 inside ip:203.0.113.0/24")
    eq(run("203.0.113.78", 3, None, "/iptier", "iptier"), [(200, 2, 1), (200, 2, 0), (429, 2, 0)],
       "body key 203.0.113.78 claiming the CIDR override")
    eq(run(None, 3, {"X-Forwarded-For": "198.51.100.1"}, "/iptier", "iptier"),
       [(200, 2, 1), (200, 2, 0), (429, 2, 0)], "address outside the CIDR")


def t_untyped_override_refused(d, r):
    cfg = dict(CONFIG, policies=[{"name": "t", "limits": [BIG],
                                  "overrides": [{"identities": ["10.0.0.7"], "limits": [fw(4)]}]}])
    path = H.write_config(cfg)
    rc, out, err = H.run_cli(["-t", "-c", path])
    check(rc != 0, "an untyped override identity passed -t: %r", out + err)
    check('"10.0.0.7" has no type: write "key:10.0.0.7"' in out + err and '"ip:10.0.0.7"' in out + err,
          "the message does not say how to write it: %r", (out + err).strip())


def t_metrics_by_policy(d, r):
    # docs/API.md: "/metrics: ... checks by policy and result"
    text = metrics(d)
    s = samples(text, "ratelimitd_checks_total")
    check(s, "no ratelimitd_checks_total in /metrics")
    pols = {l.get("policy") for l, _ in s}
    check("shadowpol" in pols and "exact" in pols,
          "ratelimitd_checks_total has no policy label for the policies checked above "
          "(docs/API.md: checks by policy and result); label sets seen: %r", sorted({tuple(sorted(l)) for l, _ in s}))


# ------------------------------------------------------------ shipped configs

CONF_FILES = sorted(glob.glob(os.path.join(H.RL_SRCDIR, "conf", "*.json")))


def t_conf_files_exist(d, r):
    check(len(CONF_FILES) >= 1, "no conf/*.json under %s", H.RL_SRCDIR)


def conf_case(path):
    def t(d, r):
        rc, out, err = H.run_cli(["-t", "-c", path])
        eq(rc, 0, "exit code of ratelimitd -t -c %s (output %r)" % (os.path.basename(path), (out + err).strip()))
        check("configuration OK" in out + err, "no \"configuration OK\" in %r", (out + err).strip())
    return t


CASES = [
    ("exact path", t_exact_path),
    ("path_prefix", t_path_prefix),
    ("path_glob with '*' and '?'", t_path_glob),
    ("methods; a method outside them falls through to the next policy", t_methods),
    ("first match in file order wins", t_file_order),
    ("a policy without match matches everything", t_catch_all),
    ("path_fold: case, params and a trailing slash folded (patterns too); off: exact bytes",
     t_path_fold),
    ("explicit policy by name skips matching; unknown name is 400", t_policy_by_name),
    ("path: body > X-Original-URI > \"/\"; X-Forwarded-Uri not read by default", t_path_sources),
    ("method: body > X-Original-Method > GET; X-Forwarded-Method not read by default",
     t_method_sources),
    ("forwarded_request_headers forwarded: X-Forwarded-* only", t_forwarded_family),
    ("an untrusted peer's X-Original-*/X-Forwarded-* are not believed", t_untrusted_peer_headers),
    ("paths normalised (RFC 3986 6.2.2, merged slashes) from body, header, /check/<path>",
     t_paths_normalised),
    ("long paths normalised past 255 bytes, raw ones copied", t_paths_long),
    ("unnormalisable paths: 400 naming path, or matched raw on request", t_paths_unnormalisable),
    ("merge_slashes false keeps empty segments", t_merge_slashes_off),
    ("query string is not part of the path (headers)", t_query_not_in_path_headers),
    ("query string is not part of the path (body path)", t_query_not_in_path_body),
    ("no match: 200, policy null, no quota headers", t_no_match),
    ("shadow: 200 with would_deny false, false, true, true; metrics shadow_denied +2", t_shadow),
    ("overrides: listed typed identities get their own limits; keys cannot claim addresses",
     t_overrides),
    ("an untyped override identity is a config error saying how to write it",
     t_untyped_override_refused),
    ("metrics: checks counted by policy (docs/API.md)", t_metrics_by_policy),
    ("conf/*.json exist", t_conf_files_exist),
] + [("conf/%s passes -t" % os.path.basename(p), conf_case(p)) for p in CONF_FILES]


def fixture():
    return H.redis_and_daemon(CONFIG)


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
