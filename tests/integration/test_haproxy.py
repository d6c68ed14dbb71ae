#!/usr/bin/env python3
"""deploy/haproxy/ (haproxy.cfg + ratelimitd.lua), the HAProxy recipe, for real.

Starts Debian's haproxy (2.6, foreground, on a free loopback port) with the
recipe's haproxy.cfg (only its three addresses and the Lua file's path
rewritten), a real redis-server, the real ratelimitd and a tiny upstream app
(Python http.server), then checks what the recipe's header promises:

  - allowed requests reach the app with the quota headers;
  - the (limit+1)th gets 429 from haproxy with Retry-After and the quota
    headers, and the app never sees it;
  - the identity is the API key header, else the client address as haproxy
    sees it (a client's own X-Forwarded-For changes nothing); the original
    path (without its query) and method reach ratelimitd (a POST-only policy
    on a path prefix limits exactly those requests);
  - ratelimitd down, hung or answering 503: fail open; the `closed` variant
    answers 503 with Retry-After: 1;
  - a check ratelimitd refuses as the client's doing (another 4xx: a path it
    cannot normalise) is denied with 400, never let through to the app;
  - with the recipe's own timeout (200 ms), ratelimitd killed, SIGSTOPped or
    slow after some checks: every request reaches the app within 250 ms, as
    haproxy's own log says (%Ta, the request's active time), and the check is
    never retried (2.6's httpclient made a down ratelimitd cost 3 s);
  - each check is one connection, closed after its answer: none is left open
    on ratelimitd (its connections_open gauge).

A missing haproxy is a failure, never a skip (Debian package haproxy).
"""

import contextlib
import http.client
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402
from daemon_faults import FAULTS, FaultyDaemon, expect_bounded  # noqa: E402

RECIPE = os.path.join(H.RL_SRCDIR, "deploy", "haproxy")
LIMIT = 3
CONFIG = {
    "identity": ["header:X-Api-Key", "forwarded", "peer"],
    "redis": {"timeout": "2s"},
    "policies": [
        {"name": "login", "match": {"path_prefix": "/login", "methods": ["POST"]},
         "limits": [{"algorithm": "fixed_window", "limit": 1, "window": "60s"}]},
        {"name": "api", "limits": [{"algorithm": "fixed_window", "limit": LIMIT, "window": "60s"}]},
    ],
}


class App:
    """The upstream application: answers 200 'app' and counts what it saw."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                seen.append((self.command, self.path))
                body = b"hello from the app\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *a):
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass        # haproxy closing an idle connection is no error

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Blackhole:
    """Accepts connections and never answers: a hung ratelimitd."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


RECIPE_TIMEOUT_MS = 200      # the recipe's own, in its `http-request lua.ratelimitd` line
TIMING = re.compile(r"rl-timing (\S+) (\d+) (-?\d+)")


class HAProxy:
    # a generous default: on a loaded host a check slower than the timeout would
    # fail open, which is not under test; timeout_ms=None: the recipe's own
    def __init__(self, rl_port, app_port, mode="open", timeout_ms=int(2000 * H.SLOW)):
        exe = shutil.which("haproxy")
        if exe is None and os.access("/usr/sbin/haproxy", os.X_OK):
            exe = "/usr/sbin/haproxy"       # PATH without sbin
        if exe is None:
            raise H.Fail("haproxy not found: it is required (Debian package haproxy)")
        with open(os.path.join(RECIPE, "haproxy.cfg")) as f:
            cfg = f.read()
        self.port = H.free_port()
        subs = [
            (r"lua-load /etc/haproxy/ratelimitd.lua", "lua-load %s" % os.path.join(RECIPE, "ratelimitd.lua")),
            (r"bind 127\.0\.0\.1:8000", "bind 127.0.0.1:%d" % self.port),
            (r"lua\.ratelimitd http://127\.0\.0\.1:8080 open %d" % RECIPE_TIMEOUT_MS,
             "lua.ratelimitd http://127.0.0.1:%d %s %d" % (rl_port, mode, timeout_ms or RECIPE_TIMEOUT_MS)),
            (r"server app1 127\.0\.0\.1:3000", "server app1 127.0.0.1:%d" % app_port),
            # haproxy's own timing of each request: its log at info, a line of
            # our own format per request (%Ta: from the request to the end of
            # the answer, in ms)
            (r"log stderr format short local0 warning", "log stderr format short local0 info"),
            (r"(bind 127\.0\.0\.1:\d+)", "\\1\n    log-format \"rl-timing %HU %ST %Ta\""),
        ]
        for pat, rep in subs:
            cfg, n = re.subn(pat, rep, cfg)
            eq(n, 1, "occurrences of %r in haproxy.cfg" % pat)
        d = H.tmpdir()
        self.cfg = os.path.join(d, "haproxy-%s.cfg" % uuid.uuid4().hex[:6])
        with open(self.cfg, "w") as f:
            f.write(cfg)
        r = subprocess.run([exe, "-c", "-f", self.cfg], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "haproxy -c on the recipe: %s", r.stdout + r.stderr)
        self.logpath = self.cfg + ".log"
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen([exe, "-db", "-f", self.cfg], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20 * H.SLOW
        while not H.port_open(self.port):
            check(self.proc.poll() is None, "haproxy exited: %s", self.output())
            check(time.monotonic() < deadline, "haproxy did not listen: %s", self.output())
            time.sleep(0.05)

    def output(self):
        self.log.flush()
        with open(self.logpath) as f:
            return f.read()

    def active_ms(self, uri):
        """haproxy's own %Ta of the request for `uri`."""
        deadline = time.monotonic() + 5 * H.SLOW       # logged when the request ends
        while True:
            for u, st, ta in TIMING.findall(self.output()):
                if u == uri:
                    return int(ta)
            check(time.monotonic() < deadline, "no haproxy log line for %s:\n%s", uri, self.output()[-1500:])
            time.sleep(0.02)

    def request(self, method="GET", path="/api/orders", headers=None, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * H.SLOW)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, H.Headers(r.getheaders()), r.read()
        finally:
            c.close()

    def close(self):
        H.stop_process(self.proc, timeout=10)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def key():
    return "k-" + uuid.uuid4().hex[:10]


def t_allow_then_429(fx):
    k = key()
    seen0 = len(fx.app.seen)
    for i in range(LIMIT):
        st, hd, body = fx.hap.request(headers={"X-Api-Key": k})
        eq((st, body), (200, b"hello from the app\n"), "request %d" % (i + 1))
        eq(hd.get("x-ratelimit-limit"), str(LIMIT), "X-RateLimit-Limit on request %d" % (i + 1))
        eq(hd.get("x-ratelimit-remaining"), str(LIMIT - 1 - i),
           "X-RateLimit-Remaining on request %d" % (i + 1))
        check(hd.get("ratelimit-policy", "").startswith('"api"'), "RateLimit-Policy %r",
              hd.get("ratelimit-policy"))
        check("retry-after" not in hd, "Retry-After on an allowed answer")
    st, hd, body = fx.hap.request(headers={"X-Api-Key": k})
    eq(st, 429, "request %d" % (LIMIT + 1))
    ra = hd.get("retry-after", "")
    check(ra.isdigit() and 1 <= int(ra) <= 60, "Retry-After %r", ra)
    eq(hd.get("x-ratelimit-remaining"), "0", "X-RateLimit-Remaining on the 429")
    check(b"too many requests" in body, "the 429's body %r", body)
    eq(len(fx.app.seen) - seen0, LIMIT, "requests the app saw")
    eq(hd.count("retry-after"), 1, "Retry-After headers on the 429")


def t_identity(fx):
    # no key: the client's address as haproxy sees it; a forged X-Forwarded-For changes nothing
    fx.redis.cli("FLUSHALL")
    sts = [fx.hap.request(path="/api/x", headers={"X-Forwarded-For": "203.0.113.%d" % i})[0]
           for i in range(LIMIT + 1)]
    eq(sts, [200] * LIMIT + [429], "anonymous requests with forged, changing X-Forwarded-For")
    keys = fx.redis.cli("KEYS", "*").split()
    check(any("ip:127.0.0.1" in k for k in keys) and not any("203.0.113" in k for k in keys),
          "Redis keys %r: the identity is not haproxy's view of the client", keys)
    # a key is its own caller
    eq(fx.hap.request(headers={"X-Api-Key": key()})[0], 200, "a keyed request after the address is limited")
    fx.redis.cli("FLUSHALL")


def t_path_and_method(fx):
    k = key()
    # GET /login is not the login policy (POST only): the api policy's limit applies
    st, hd, _ = fx.hap.request("GET", "/login?next=/x", headers={"X-Api-Key": k})
    eq((st, hd.get("ratelimit-policy", "").split(";")[0]), (200, '"api"'), "GET /login")
    st, hd, _ = fx.hap.request("POST", "/login/form?user=a", headers={"X-Api-Key": k}, body=b"user=a")
    eq((st, hd.get("ratelimit-policy", "").split(";")[0]), (200, '"login"'), "the first POST /login/form")
    st, hd, _ = fx.hap.request("POST", "/login/form", headers={"X-Api-Key": k}, body=b"user=a")
    eq(st, 429, "the second POST /login/form (limit 1)")


def t_fail_open_and_closed(fx):
    dead = H.free_port()
    with HAProxy(dead, fx.app.port) as hap:
        st, hd, body = hap.request()
        eq((st, body), (200, b"hello from the app\n"), "ratelimitd down, open")
        check("x-ratelimit-limit" not in hd, "quota headers without an answer")
    with HAProxy(dead, fx.app.port, mode="closed") as hap:
        st, hd, _ = hap.request()
        eq((st, hd.get("retry-after")), (503, "1"), "ratelimitd down, closed")
    hole = Blackhole()
    try:
        with HAProxy(hole.port, fx.app.port, timeout_ms=300) as hap:
            st, _, _ = hap.request(path="/api/hung")
            eq(st, 200, "ratelimitd hung, open")
            # one try, bounded as a whole: the timeout and no retry
            ta = hap.active_ms("/api/hung")
            check(300 <= ta < 300 + 250 * H.SLOW, "a hung ratelimitd took %d ms (timeout 300 ms, one try)", ta)
            eq(len(hole.held), 1, "connections haproxy made to a hung ratelimitd for one request")
    finally:
        hole.close()
    with H.Daemon(dict(CONFIG, failure_mode="closed"), args=["-r", "redis://127.0.0.1:%d/0" % H.free_port()],
                  ready=False) as d503:
        with HAProxy(d503.port, fx.app.port, timeout_ms=2000) as hap:
            eq(hap.request()[0], 200, "ratelimitd answering 503, open")
        with HAProxy(d503.port, fx.app.port, mode="closed", timeout_ms=2000) as hap:
            eq(hap.request()[0], 503, "ratelimitd answering 503, closed")


def t_client_fault_denied(fx):
    """Issue 24, 7: a 4xx from ratelimitd is the client's doing (here a path
    it cannot normalise), never the failure mode: with the limit spent, the
    recipe used to let each of these through to the app in open mode."""
    k = key()
    for _ in range(LIMIT):
        eq(fx.hap.request(headers={"X-Api-Key": k})[0], 200, "spending the limit")
    eq(fx.hap.request(headers={"X-Api-Key": k})[0], 429, "the limit spent")
    seen0 = len(fx.app.seen)
    for path in ("/api%2Fitems", "/api/items%zz", "/api/../../items", "/api/it%00ems"):
        st, hd, body = fx.hap.request(path=path, headers={"X-Api-Key": k})
        eq((st, body), (400, b'{"error":"bad request"}'), "GET %s" % path)
    eq(len(fx.app.seen) - seen0, 0, "requests with an unnormalisable path the app saw")
    # the closed variant too: still the client's 400, not a 503
    with HAProxy(fx.daemon.port, fx.app.port, mode="closed") as hap:
        eq(hap.request(path="/api%2Fitems", headers={"X-Api-Key": k})[0], 400, "closed, /api%2Fitems")


def daemon_metric(port, name):
    st, _, text = H.request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    m = re.search(r"^%s (\d+)$" % name, text, re.M)
    check(m, "no %s in /metrics", name)
    return int(m.group(1))


def t_connection_per_check(fx):
    # a Lua socket lives with its transaction: one connection per check, which
    # ratelimitd closes after its answer, so none piles up
    before = daemon_metric(fx.daemon.port, "ratelimitd_connections_accepted_total")
    c = http.client.HTTPConnection("127.0.0.1", fx.hap.port, timeout=10 * H.SLOW)
    try:
        for i in range(20):
            c.request("GET", "/api/conn", headers={"X-Api-Key": key()})
            r = c.getresponse()
            r.read()
            eq(r.status, 200, "check %d through haproxy" % (i + 1))
    finally:
        c.close()
    accepted = daemon_metric(fx.daemon.port, "ratelimitd_connections_accepted_total") - before - 1
    eq(accepted, 20, "connections to ratelimitd for 20 checks (and this scrape)")
    deadline = time.monotonic() + 5 * H.SLOW
    while daemon_metric(fx.daemon.port, "ratelimitd_connections_open") > 1:    # the scrape's own
        check(time.monotonic() < deadline, "connections from haproxy left open on ratelimitd")
        time.sleep(0.05)


def t_faults_bounded(fx):
    # the recipe as it ships: its own 200 ms, failing open
    for kind in FAULTS:
        with FaultyDaemon(CONFIG) as fd, HAProxy(fd.port, fx.app.port, timeout_ms=None) as hap:
            for i in range(3):
                eq(hap.request(path="/api/warm-%s-%d" % (kind, i), headers={"X-Api-Key": key()})[0], 200,
                   "a request before the fault")
            fd.inflict(kind)
            n = [0]

            def measure():
                times = []
                for _ in range(3):
                    n[0] += 1
                    uri = "/api/%s-%d" % (kind, n[0])
                    before = len(fx.app.seen)
                    st, _, body = hap.request(path=uri, headers={"X-Api-Key": key()})
                    eq((st, len(fx.app.seen) - before), (200, 1), "ratelimitd %s: fail open (%r)" % (kind, body))
                    times.append(hap.active_ms(uri))
                return times
            expect_bounded("HAProxy recipe, ratelimitd %s (%%Ta)" % kind, measure)


class Fx:
    pass


@contextlib.contextmanager
def fixture():
    app = App()
    try:
        with H.Redis(topology="standalone") as r, H.Daemon(CONFIG, redis=r) as d, \
                HAProxy(d.port, app.port) as hap:
            fx = Fx()
            fx.redis, fx.daemon, fx.app, fx.hap = r, d, app, hap
            yield fx
    finally:
        app.close()


CASES = [
    ("limit requests reach the app with quota headers, then 429 + Retry-After from haproxy",
     t_allow_then_429),
    ("identity: the API key, else haproxy's view of the client (a forged X-Forwarded-For is ignored)",
     t_identity),
    ("the original path (no query) and method reach ratelimitd", t_path_and_method),
    ("a 4xx from ratelimitd (a path it cannot normalise) denies with 400, never fails open",
     t_client_fault_denied),
    ("ratelimitd down / hung / 503: fail open; the closed variant answers 503 + Retry-After: 1",
     t_fail_open_and_closed),
    ("each check is one connection, closed after its answer: none left open on ratelimitd",
     t_connection_per_check),
    ("the recipe's own 200 ms: ratelimitd killed / stopped / slow, every request reaches the app within 250 ms "
     "(haproxy's %Ta)", t_faults_bounded),
]


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=360)
