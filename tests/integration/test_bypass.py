#!/usr/bin/env python3
"""Limits that cannot be walked around, and quota answers clients read right.

Through a real nginx running deploy/nginx/ratelimitd.conf and a real Caddy
running deploy/caddy/Caddyfile (each file itself, only its addresses
rewritten), each in front of a tiny upstream app and its own real ratelimitd
(one Redis), a caller tries what an attacker would:

  - path forms the app reads as /api/items (//api/items, /./api/items,
    /%61pi/items, /x/../api/items, ...): every one counts against the api
    policy, one key cycling through them gets the limit and no more;
  - paths that cannot be normalised (%2F, .. above the root) never reach the app;
  - original-request headers a client sends itself (X-Original-URI /free,
    X-Forwarded-Uri /free, methods, X-Forwarded-For, Forwarded): no other
    policy and no other identity;
  - an API key that spells the address of an IP override: not that address.

Then the quota answers, straight from ratelimitd, for every algorithm: limit
is what can be spent at once (the burst), remaining never above it, w exact
or absent for sub-second windows, a denial never says retry in 0, and
X-RateLimit-Reset as a Unix time on request, and pk (the caller's partition,
keyed-hashed, never the identity) when partition_key is set.

And the Caddy recipe under faults: with its own timeouts, ratelimitd killed,
SIGSTOPped or slow after kept-alive checks, every request reaches the app (it
fails open) within 250 ms, as Caddy's own JSON access log says (duration);
an error of the app itself is not taken for ratelimitd's.  (The other cases
stretch the recipe's timeouts, so that a loaded host's slow check is no
fail-open they test.)

A missing nginx or caddy is a failure, never a skip (Debian packages nginx,
caddy).  CADDY overrides the binary.
"""

import atexit
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402
import test_nginx as N  # noqa: E402  (its App and Nginx, not its cases)
from daemon_faults import FAULTS, FaultyDaemon, expect_bounded  # noqa: E402

CADDY = os.environ.get("CADDY") or shutil.which("caddy") or "/usr/bin/caddy"
CADDYFILE = os.path.join(H.RL_SRCDIR, "deploy", "caddy", "Caddyfile")
LIMIT = 5
OVERRIDE_IP = "203.0.113.7"


def fw(limit, window="1h"):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


POLICIES = [
    {"name": "free", "match": {"path": "/free"}, "limits": [fw(100000)]},
    {"name": "api", "match": {"path_prefix": "/api/"}, "limits": [fw(LIMIT)],
     # an allow-list entry for an address: no API key may claim it
     "overrides": [{"identities": ["ip:" + OVERRIDE_IP], "limits": [fw(100000)]}]},
    {"name": "burst", "match": {"path_prefix": "/burst/"},
     "limits": [{"algorithm": "token_bucket", "limit": 5, "window": "1h", "burst": 10}]},
    {"name": "default", "limits": [fw(100000)]},
]
COMMON = {
    "identity": ["header:X-Api-Key", "forwarded", "peer"],
    "trusted_proxies": ["127.0.0.0/8"],
    "failure_mode": "closed",
    # semantics under test, not latency: a loaded host's delay must not make
    # a check a 503 (both proxies' read timeouts are longer)
    "redis": {"timeout": "600ms"},
    "policies": POLICIES,
}
# nginx's recipe: POST /check, X-Original-* set by nginx (the default family)
NGINX_RL = dict(COMMON, redis=dict(COMMON["redis"], key_prefix="ng:"))
# Caddy's recipe: forward_auth GET /check, X-Forwarded-Uri/-Method set by Caddy
CADDY_RL = dict(COMMON, redis=dict(COMMON["redis"], key_prefix="cd:"), forward_auth=True,
                forwarded_request_headers="forwarded")

# What an app (and its router) reads as /api/items.
FORMS = ["/api/items", "//api/items", "/./api/items", "/%61pi/items", "/api//items",
         "/api/./items", "/x/../api/items", "/%2e/api/items", "/%61%70%69/items?x=1",
         "/api/%69tems"]
# What cannot be read one way only: refused, never let through.
UNNORMALISABLE = ["/api%2Fitems", "/%2e%2e/api/items", "/api/items%00"]
SPOOFS = {"X-Original-URI": "/free", "X-Original-Method": "OPTIONS",
          "X-Forwarded-Uri": "/free", "X-Forwarded-Method": "OPTIONS",
          "X-Forwarded-Host": "free.example", "X-Forwarded-Proto": "https",
          "X-Forwarded-For": "198.51.100.23", "Forwarded": "for=198.51.100.24",
          "X-Real-IP": "198.51.100.25"}


# ------------------------------------------------------------------- Caddy

# The recipe's timeouts towards ratelimitd, stretched for the cases that test
# semantics (a loaded host's slow check must not fail open there).
CADDY_TIMEOUTS = ("dial_timeout 100ms", "response_header_timeout 200ms")


def render_caddyfile(text, rl_port, app_port, port, verbatim=False, log=None):
    subs = [("forward_auth 127.0.0.1:8080 {", "forward_auth 127.0.0.1:%d {" % rl_port),
            (":8000 {", ":%d {" % port)]
    if not verbatim:
        subs += [(t, t.split()[0] + " %ds" % int(2 * H.SLOW)) for t in CADDY_TIMEOUTS]
    if log:     # Caddy's own JSON access log: each request's duration
        subs.append(("\tbind 127.0.0.1\n", "\tbind 127.0.0.1\n\tlog {\n\t\toutput file %s\n\t\tformat json\n\t}\n" % log))
    for old, new in subs:
        if text.count(old) != 1:
            raise H.HarnessError("the Caddy recipe no longer has exactly one %r: update "
                                 "test_bypass.py's render_caddyfile" % old)
        text = text.replace(old, new)
    if text.count("reverse_proxy 127.0.0.1:3000") != 3:
        raise H.HarnessError("the Caddy recipe no longer proxies to 127.0.0.1:3000 three times")
    return text.replace("reverse_proxy 127.0.0.1:3000", "reverse_proxy 127.0.0.1:%d" % app_port)


class Caddy:
    """caddy run with the recipe, its data and config dirs in a temp dir;
    drop: lines of the recipe left out."""

    def __init__(self, rl_port, app_port, drop=(), verbatim=False):
        if not (os.path.isfile(CADDY) and os.access(CADDY, os.X_OK)):
            raise H.HarnessError("caddy not found (%r): it is required, install the "
                                 "Debian package caddy" % CADDY)
        self.dir = tempfile.mkdtemp(prefix="rl-caddy-")
        atexit.register(shutil.rmtree, self.dir, True)
        self.conf = os.path.join(self.dir, "Caddyfile")
        self.logf = os.path.join(self.dir, "caddy.log")
        self.accesslog = os.path.join(self.dir, "access.json")
        self.env = dict(os.environ, HOME=self.dir, XDG_DATA_HOME=self.dir,
                        XDG_CONFIG_HOME=self.dir)
        self.proc = None
        with open(CADDYFILE) as f:
            recipe = f.read()
        for line in drop:
            if recipe.count(line) != 1:
                raise H.HarnessError("the Caddy recipe no longer has %r once" % line)
            recipe = recipe.replace(line, "")
        for _ in range(5):          # the free port may be taken meanwhile
            self.port = H.free_port()
            with open(self.conf, "w") as f:
                f.write(render_caddyfile(recipe, rl_port, app_port, self.port, verbatim, self.accesslog))
            if self._start():
                return
        raise H.HarnessError("caddy did not start; log:\n%s" % self.log())

    def argv(self, verb):
        return [CADDY, verb, "--config", self.conf, "--adapter", "caddyfile"]

    def validate(self):
        return subprocess.run(self.argv("validate"), capture_output=True, env=self.env,
                              timeout=H.START_TIMEOUT * 2)

    def _start(self):
        with open(self.logf, "ab") as log:
            self.proc = H._track(subprocess.Popen(self.argv("run"), stdin=subprocess.DEVNULL,
                                                  stdout=log, stderr=log, env=self.env))
        return H.wait_listening(self.proc, self.port, H.START_TIMEOUT * 2)

    def log(self):
        try:
            with open(self.logf, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        H.stop_process(self.proc)

    def access(self, uri):
        """Caddy's access log entry of the request for `uri`: (status, duration in ms)."""
        deadline = time.monotonic() + 5 * H.SLOW       # written when the request ends
        while True:
            try:
                with open(self.accesslog) as f:
                    for line in f:
                        e = json.loads(line)
                        if e.get("request", {}).get("uri") == uri:
                            return e["status"], e["duration"] * 1000
            except (OSError, ValueError):
                pass
            check(time.monotonic() < deadline, "no access log entry for %s", uri)
            time.sleep(0.02)


# ------------------------------------------------------------------ helpers

class Fixture:
    pass


def proxies(fx):
    return (("nginx", fx.nginx.port), ("caddy", fx.caddy.port))


def send(port, path, key=None, headers=None, method="GET"):
    h = dict(headers or {})
    if key is not None:
        h["X-Api-Key"] = key
    return H.request(port, method, path, headers=h)


def policy_of(hdrs):
    """The policy a quota answer names ("api" of '"api";q=5;w=3600')."""
    v = hdrs.get("ratelimit-policy", "")
    return v[1:v.index('"', 1)] if v.startswith('"') and '"' in v[1:] else None


def run(fx, port, paths, key, headers=None):
    """Send each path once; [(status, policy named, reached the app)].  The
    policy is the answer's, or on Caddy's 2xx (whose quota headers go to the
    app, not the client) the one the app was told."""
    out = []
    for p in paths:
        before = fx.app.count()
        st, hdrs, _ = send(port, p, key, headers)
        reached = fx.app.count() > before
        pol = policy_of(hdrs)
        if pol is None and reached:
            pol = policy_of(H.Headers(list(fx.app.last()[2].items())))
        out.append((st, pol, reached))
    return out


def expect_limit(got, n, what):
    """The first LIMIT reach the app under api, every later one is a 429 under api."""
    want = [(200, "api", True)] * LIMIT + [(429, "api", False)] * (n - LIMIT)
    check(got == want, "%s: %d of %d reached the app (limit %d); got %r",
          what, sum(1 for g in got if g[2]), n, LIMIT, got)


# ------------------------------------------------------------- the bypasses

def t_recipes_valid(fx):
    r = fx.nginx.test_config()
    check(r.returncode == 0, "nginx -t: %s", r.stderr.decode(errors="replace").strip())
    r = fx.caddy.validate()
    check(r.returncode == 0, "caddy validate: %s", (r.stdout + r.stderr).decode(errors="replace"))


def t_path_forms_each(fx):
    # each form on its own key: the api policy's limit, and only it
    bad = []
    for name, port in proxies(fx):
        for i, form in enumerate(FORMS):
            got = run(fx, port, [form] * (LIMIT + 2), "pf-%s-%d" % (name, i))
            try:
                expect_limit(got, LIMIT + 2, "%s %s" % (name, form))
            except H.Fail as e:
                bad.append(str(e))
    check(not bad, "%d of %d path forms walked around the api policy:\n%s",
          len(bad), 2 * len(FORMS), "\n".join(bad))


def t_path_forms_cycled(fx):
    # the attack: one key, a new spelling each time, 8 against 5
    paths = [FORMS[i % len(FORMS)] for i in range(LIMIT + 3)]
    for name, port in proxies(fx):
        expect_limit(run(fx, port, paths, "cycle-" + name), len(paths), "%s cycling %r" % (name, paths))


def t_unnormalisable(fx):
    for name, port in proxies(fx):
        for i, form in enumerate(UNNORMALISABLE):
            for k in range(LIMIT + 1):
                before = fx.app.count()
                st, hdrs, body = send(port, form, "un-%s-%d" % (name, i))
                check(fx.app.count() == before and st >= 400,
                      "%s %s: status %d, reached the app: %s (body %r)", name, form, st,
                      fx.app.count() > before, body)


def t_spoofed_request_headers(fx):
    # what the client claims about its own request counts for nothing
    n = LIMIT + 2
    for name, port in proxies(fx):
        expect_limit(run(fx, port, ["/api/items"] * n, "spoof-" + name, SPOOFS), n,
                     "%s with %r" % (name, SPOOFS))
        # one spoof at a time, each on its own key
        for h, v in SPOOFS.items():
            expect_limit(run(fx, port, ["/api/items"] * n, "spoof-%s-%s" % (name, h), {h: v}), n,
                         "%s with %s: %s" % (name, h, v))


def t_spoofed_without_recipe_strips(fx):
    # the recipe's header_up lines are belt and braces: a plain forward_auth
    # (the client's X-Original-* copied into the check) is safe as well,
    # because ratelimitd reads only the X-Forwarded-* family Caddy sets
    drop = ("header_up -X-Original-URI", "header_up -X-Original-Method", "header_up -Forwarded")
    naive = Caddy(fx.caddy_daemon.port, fx.app.port, drop=drop)
    try:
        n = LIMIT + 2
        expect_limit(run(fx, naive.port, ["/api/items"] * n, "naive", SPOOFS), n,
                     "a plain forward_auth with %r" % SPOOFS)
        # and X-Original-URI did reach ratelimitd: Caddy copies it
        st, hdrs, _ = send(naive.port, "/free", "naive-free", {"X-Original-URI": "/api/items"})
        eq((st, policy_of(H.Headers(list(fx.app.last()[2].items())))), (200, "free"),
           "a plain forward_auth: /free with X-Original-URI /api/items")
    finally:
        naive.stop()


def t_spoofed_identity(fx):
    # anonymous callers are their address; a forged one is not believed
    n = LIMIT + 2
    for name, port in proxies(fx):
        got = []
        for i in range(n):
            forged = {"X-Forwarded-For": "198.51.100.%d" % i, "Forwarded": "for=198.51.100.%d" % i}
            got += run(fx, port, ["/api/anon"], None, forged)
        expect_limit(got, n, "%s anonymous with a new forged address each time" % name)


def t_override_not_claimed(fx):
    # ip:203.0.113.7 is an address's allowance; a key spelling it is a key
    n = LIMIT + 3
    for name, port in proxies(fx):
        expect_limit(run(fx, port, ["/api/items"] * n, OVERRIDE_IP), n,
                     "%s with X-Api-Key %s (the override is for ip:%s)" % (name, OVERRIDE_IP, OVERRIDE_IP))


def t_denials_reach_the_client(fx):
    # and what the 429 says: Retry-After >= 1, the api policy's quota
    for name, port in proxies(fx):
        for _ in range(LIMIT):
            send(port, "/api/items", "deny-" + name)
        st, hdrs, body = send(port, "/api/items", "deny-" + name)
        eq(st, 429, "%s: status past the limit" % name)
        ra = hdrs.get("retry-after", "")
        check(ra.isdigit() and 1 <= int(ra) <= 3600, "%s: Retry-After %r", name, ra)
        eq(hdrs.get("ratelimit-policy"), '"api";q=%d;w=3600' % LIMIT, "%s: RateLimit-Policy" % name)
        eq(hdrs.get("x-ratelimit-remaining"), "0", "%s: X-RateLimit-Remaining" % name)


def t_burst_through_proxy(fx):
    # token bucket 5/h, burst 10: ten can be spent now, and that is what is said
    for name, port in proxies(fx):
        st, hdrs, _ = send(port, "/burst/x", "b-" + name)
        if name == "caddy":
            # Caddy hands the quota headers of a 2xx to the app, not the client
            hdrs = H.Headers(list(fx.app.last()[2].items()))
        eq(hdrs.get("ratelimit-policy"), '"burst";q=10;w=7200', "%s: RateLimit-Policy" % name)
        eq(hdrs.get("ratelimit"), '"burst";r=9;t=720', "%s: RateLimit" % name)
        eq(st, 200, "%s: status" % name)
        eq(hdrs.get("x-ratelimit-limit"), "10", "%s: X-RateLimit-Limit" % name)
        eq(hdrs.get("x-ratelimit-remaining"), "9", "%s: X-RateLimit-Remaining" % name)


# ------------------------------------------------------- the quota answers

def lim(algo, limit, window, burst=None):
    c = {"algorithm": algo, "limit": limit, "window": window}
    if burst is not None:
        c["burst"] = burst
    return c


# (limit, what can be spent at once, RateLimit-Policy's parameters after q)
QUOTA_CASES = {
    "fw_sub": (lim("fixed_window", 3, "500ms"), 3, ""),
    "swl_frac": (lim("sliding_window_log", 3, "1500ms"), 3, ""),
    "swc_2s": (lim("sliding_window_counter", 3, "2s"), 3, ";w=2"),
    "tb_burst": (lim("token_bucket", 5, "1s", 10), 10, ";w=2"),
    "tb_sub": (lim("token_bucket", 4, "500ms"), 4, ""),
    "gcra_burst": (lim("gcra", 2, "500ms", 4), 4, ";w=1"),
    "gcra_hour": (lim("gcra", 6, "1h", 3), 3, ";w=1800"),
}


def quota_config(**extra):
    pols = [{"name": n, "limits": [c]} for n, (c, _, _) in QUOTA_CASES.items()]
    return dict({"identity": ["body"], "redis": {"timeout": "2s"}, "failure_mode": "closed",
                 "policies": pols}, **extra)


def quota_check(d, name, key, cost):
    st, h, b = H.request(d.port, "POST", "/check", {"policy": name, "key": key, "cost": cost})
    H.expect_json(st, h, b, st, "%s cost %d" % (name, cost))
    check(st in (200, 429), "%s cost %d: status %d %r", name, cost, st, b)
    # never more left than advertised, in the body or the headers
    check(b["remaining"] <= b["limit"], "%s: remaining %d above limit %d", name, b["remaining"], b["limit"])
    check(int(h["x-ratelimit-remaining"]) <= int(h["x-ratelimit-limit"]),
          "%s: X-RateLimit-Remaining %s above X-RateLimit-Limit %s", name,
          h["x-ratelimit-remaining"], h["x-ratelimit-limit"])
    if st == 429:
        check(b["retry_after_ms"] >= 1, "%s: retry_after_ms %d on a 429", name, b["retry_after_ms"])
        ra = h.get("retry-after", "")
        check(ra.isdigit() and int(ra) >= 1, "%s: Retry-After %r on a 429", name, ra)
        eq(int(ra), -(-b["retry_after_ms"] // 1000), "%s: Retry-After vs retry_after_ms" % name)
    return st, h, b


def t_quota_every_algorithm(fx):
    with H.Daemon(quota_config(), redis=fx.redis) as d:
        for name, (conf, cap, params) in QUOTA_CASES.items():
            st, h, b = quota_check(d, name, "q1", 1)
            eq(st, 200, "%s: the first check" % name)
            eq((h["x-ratelimit-limit"], h["x-ratelimit-remaining"]), (str(cap), str(cap - 1)),
               "%s: X-RateLimit-Limit/Remaining after one" % name)
            eq(h["ratelimit-policy"], '"%s";q=%d%s' % (name, cap, params), "%s: RateLimit-Policy" % name)
            check(h["ratelimit"].startswith('"%s";r=%d;t=' % (name, cap - 1)), "%s: RateLimit %r",
                  name, h["ratelimit"])
            eq(b["limit"], cap, "%s: body limit" % name)
            # spent whole, then once more at once: an ordinary wait, never 0.
            # A sub-second limit may refill between the two on a loaded host:
            # try again on a new key until the second one is seen denied.
            for attempt in range(50):
                quota_check(d, name, "q2-%d" % attempt, cap)
                st, h, b = quota_check(d, name, "q2-%d" % attempt, cap)
                if st == 429:
                    break
            eq(st, 429, "%s: cost %d right after the whole capacity, 50 tries" % (name, cap))
            check("never_fits" not in b, "%s: never_fits on a cost that fits later: %r", name, b)


def t_quota_never_fits(fx):
    with H.Daemon(quota_config(), redis=fx.redis) as d:
        for name, (conf, cap, params) in QUOTA_CASES.items():
            # more than can ever be spent: said so, with the longest wait that
            # means anything (the limit full again), not 0
            st, h, b = quota_check(d, name, "nf", cap + 1)
            eq(st, 429, "%s: cost %d > capacity %d" % (name, cap + 1, cap))
            eq(b.get("never_fits"), True, "%s: never_fits" % name)
            eq(b["limits"][0]["retry_after_ms"], -1, "%s: limits[0].retry_after_ms" % name)
            check(b["retry_after_ms"] >= 1, "%s: retry_after_ms %r", name, b["retry_after_ms"])


def t_quota_reset_epoch(fx):
    with H.Daemon(quota_config(x_ratelimit_reset="epoch"), redis=fx.redis) as d:
        t0 = int(time.time())
        st, h, b = quota_check(d, "gcra_hour", "ep", 1)
        t1 = int(time.time()) + 1
        reset_s = -(-b["reset_ms"] // 1000)
        v = int(h["x-ratelimit-reset"])
        check(t0 + reset_s - 1 <= v <= t1 + reset_s,
              "X-RateLimit-Reset %d is not the Unix time of the reset (now %d..%d + %d s)",
              v, t0, t1, reset_s)
        # the draft's t stays seconds from now
        check(h["ratelimit"].endswith(";t=%d" % reset_s), "RateLimit %r", h["ratelimit"])


def pk_of(hdrs):
    v = hdrs.get("ratelimit", "")
    return v[v.index(";pk=") + 4:] if ";pk=" in v else None


def t_quota_partition_key(fx):
    secret = "a-secret-of-some-length"
    with H.Daemon(quota_config(partition_key=secret), redis=fx.redis) as d1, \
            H.Daemon(quota_config(partition_key=secret), redis=fx.redis) as d2, \
            H.Daemon(quota_config(partition_key=secret + "2"), redis=fx.redis) as d3, \
            H.Daemon(quota_config(), redis=fx.redis) as d0:
        ident = "alice@example.com"
        a1 = quota_check(d1, "gcra_hour", ident, 0)[1]
        pk = pk_of(a1)
        check(pk is not None and pk.startswith(":") and pk.endswith(":") and len(pk) == 14,
              "RateLimit %r: no pk Byte Sequence of 8 bytes", a1.get("ratelimit"))
        check(a1["ratelimit-policy"].endswith(";pk=" + pk), "RateLimit-Policy %r without pk %s",
              a1["ratelimit-policy"], pk)
        raw = base64.b64decode(pk[1:-1])
        check(ident.encode() not in raw and b"alice" not in raw, "pk %s holds the identity", pk)
        # one caller, one partition, on every instance sharing the secret
        eq(pk_of(quota_check(d2, "gcra_hour", ident, 0)[1]), pk, "pk of the same caller on another instance")
        eq(pk_of(quota_check(d1, "gcra_hour", ident, 1)[1]), pk, "pk of the same caller again")
        check(pk_of(quota_check(d1, "gcra_hour", "bob", 0)[1]) != pk, "bob has alice's pk")
        check(pk_of(quota_check(d3, "gcra_hour", ident, 0)[1]) != pk, "another secret gives the same pk")
        eq(pk_of(quota_check(d0, "gcra_hour", ident, 0)[1]), None, "pk without partition_key")


def t_caddy_faults_bounded(fx):
    # the recipe as it ships: its own timeouts towards ratelimitd, failing open
    for kind in FAULTS:
        with FaultyDaemon(CADDY_RL) as fd:
            cd = Caddy(fd.port, fx.app.port, verbatim=True)
            try:
                for i in range(3):      # kept-alive connections to ratelimitd, as in service
                    st, _, _ = send(cd.port, "/api/warm-%s-%d" % (kind, i), key="warm-" + kind)
                    eq(st, 200, "a request before the fault")
                fd.inflict(kind)
                n = [0]

                def measure():
                    times = []
                    for _ in range(3):
                        n[0] += 1
                        uri = "/api/%s-%d" % (kind, n[0])
                        before = fx.app.count()
                        st, _, body = H.request(cd.port, "POST", uri, body=b"the client's body",
                                                headers={"X-Api-Key": "k-" + kind,
                                                         "Content-Type": "text/plain"})
                        eq((st, fx.app.count() - before), (200, 1), "ratelimitd %s: fail open (%r)" % (kind, body))
                        eq(fx.app.last()[3], b"the client's body", "the body the app got (ratelimitd %s)" % kind)
                        logged, ms = cd.access(uri)
                        eq(logged, 200, "the status Caddy logged")
                        times.append(ms)
                    return times
                expect_bounded("Caddy recipe, ratelimitd %s (access log duration)" % kind, measure)
            finally:
                cd.stop()


class SlammingApp:
    """An app that accepts and closes at once (Caddy answers 502), counting
    the connections it was asked on."""

    def __init__(self):
        import socket
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0

        def run():
            while True:
                try:
                    c, _ = self.sock.accept()
                except OSError:
                    return
                self.accepted += 1
                c.close()
        threading.Thread(target=run, daemon=True).start()

    def close(self):
        self.sock.close()


def t_caddy_app_errors_are_the_apps(fx):
    # ratelimitd answers, the app fails: Caddy's 502 is the app's, and the
    # recipe's fail-open does not ask the app a second time
    app = SlammingApp()
    cd = Caddy(fx.caddy_daemon.port, app.port, verbatim=True)
    try:
        st, _, _ = send(cd.port, "/api/app-down", key="app-down")
        eq(st, 502, "the app failing behind a working ratelimitd")
        eq(app.accepted, 1, "connections to the failing app for one request (2: the fail-open asked it again)")
    finally:
        cd.stop()
        app.close()


def accepted(port):
    """Connections a daemon has accepted, from its own /metrics."""
    st, _, text = H.request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    m = re.search(r"^ratelimitd_connections_accepted_total (\d+)$", text, re.M)
    check(m, "no ratelimitd_connections_accepted_total in /metrics")
    return int(m.group(1))


def t_caddy_keepalive(fx):
    """The Caddy recipe asks for ?body=none, so Caddy keeps its connection to
    ratelimitd: 30 checks cost at most 2 new connections (30 without it)."""
    before = accepted(fx.caddy_daemon.port)
    for i in range(30):
        st, _, _ = send(fx.caddy.port, "/other/keepalive-%d" % i, key="kim-%d" % i)
        check(st in (200, 404), "request %d through Caddy: status %r", i + 1, st)
    new = accepted(fx.caddy_daemon.port) - before - 1   # this /metrics read's own
    check(new <= 2, "30 checks through Caddy opened %d connections to ratelimitd (at most 2)", new)


CASES = [
    ("nginx -t and caddy validate accept the recipes", t_recipes_valid),
    ("Caddy keeps its connections to ratelimitd (?body=none)", t_caddy_keepalive),
    ("every path form of /api/items counts against api (nginx, Caddy)", t_path_forms_each),
    ("one key cycling through path forms gets the limit, no more", t_path_forms_cycled),
    ("unnormalisable paths (%2F, .. above root, %00) never reach the app", t_unnormalisable),
    ("a client's X-Original-*/X-Forwarded-*/Forwarded pick no other policy", t_spoofed_request_headers),
    ("Caddy without the recipe's header_up lines: a client's X-Original-URI still picks nothing",
     t_spoofed_without_recipe_strips),
    ("a client's forged X-Forwarded-For/Forwarded is not its identity", t_spoofed_identity),
    ("an API key spelling an override's address does not get its limits", t_override_not_claimed),
    ("the 429 reaches the client with Retry-After and api's quota", t_denials_reach_the_client),
    ("a burst is advertised as what can be spent, through both proxies", t_burst_through_proxy),
    ("every algorithm: X-RateLimit-Limit and q the capacity, remaining below it, w exact or absent",
     t_quota_every_algorithm),
    ("a cost that can never fit: never_fits, retry_after_ms > 0, Retry-After >= 1",
     t_quota_never_fits),
    ("x_ratelimit_reset epoch: X-RateLimit-Reset is the Unix time of the reset",
     t_quota_reset_epoch),
    ("partition_key: pk is the caller's partition, hashed with the secret, the same on every instance",
     t_quota_partition_key),
    ("the Caddy recipe's own timeouts: ratelimitd killed / stopped / slow, every request reaches the app "
     "(its body too) within 250 ms (Caddy's access log)", t_caddy_faults_bounded),
    ("the Caddy recipe: the app's own 502 is not taken for ratelimitd's", t_caddy_app_errors_are_the_apps),
]


class _Fixture:
    def __enter__(self):
        self.app = self.redis = self.nd = self.cd = self.nginx = self.caddy = None
        try:
            self.app = N.App()
            self.redis = H.Redis()
            self.nd = H.Daemon(NGINX_RL, redis=self.redis)
            self.cd = H.Daemon(CADDY_RL, redis=self.redis)
            self.nginx = N.Nginx(self.nd.port, self.app.port)
            self.caddy = Caddy(self.cd.port, self.app.port)
        except BaseException:
            self.__exit__()
            raise
        fx = Fixture()
        fx.app, fx.redis, fx.nginx, fx.caddy = self.app, self.redis, self.nginx, self.caddy
        fx.nginx_daemon, fx.caddy_daemon = self.nd, self.cd
        return fx

    def __exit__(self, *exc):
        for f in (lambda: self.caddy.stop(), lambda: self.nginx.stop(), lambda: self.cd.kill(),
                  lambda: self.nd.kill(), lambda: self.redis.kill(), lambda: self.app.close()):
            try:
                f()
            except Exception:
                pass
        return False


if __name__ == "__main__":
    H.suite(CASES, _Fixture, timeout=360)
