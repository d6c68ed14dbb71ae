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
  - ratelimitd down, hung (answered within 4 x the recipe's timeout: haproxy's
    httpclient tries 4 times) or answering 503: fail open; the `closed`
    variant answers 503 with Retry-After: 1;
  - checks in a row share one kept-alive connection to ratelimitd (counted by
    a relay).

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


class HAProxy:
    # a generous default: on a loaded host a check slower than the timeout would
    # fail open (and be retried by haproxy's httpclient), which is not under test
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
            (r"lua\.ratelimitd http://127\.0\.0\.1:8080 open 200",
             "lua.ratelimitd http://127.0.0.1:%d %s %d" % (rl_port, mode, timeout_ms)),
            (r"server app1 127\.0\.0\.1:3000", "server app1 127.0.0.1:%d" % app_port),
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
            t0 = time.monotonic()
            st, _, _ = hap.request()
            took = time.monotonic() - t0
            eq(st, 200, "ratelimitd hung, open")
            # httpclient resends a timed-out check 3 times: 4 x the timeout, documented
            check(took < 4 * 0.3 + 1.5 * H.SLOW, "a hung ratelimitd took %.2fs (timeout 0.3s, 4 tries)", took)
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


def t_connection_reuse(fx):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_examples import Relay
    relay = Relay(fx.daemon.port)
    try:
        with HAProxy(relay.port, fx.app.port) as hap:
            c = http.client.HTTPConnection("127.0.0.1", hap.port, timeout=10 * H.SLOW)
            try:
                for i in range(20):
                    c.request("GET", "/api/reuse", headers={"X-Api-Key": key()})
                    r = c.getresponse()
                    r.read()
                    eq(r.status, 200, "check %d through haproxy" % (i + 1))
            finally:
                c.close()
        check(1 <= relay.accepted <= 2, "%d connections to ratelimitd for 20 checks", relay.accepted)
        print("# haproxy: %d connection(s) to ratelimitd for 20 checks" % relay.accepted)
    finally:
        relay.close()


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
    ("checks in a row share one kept-alive connection to ratelimitd", t_connection_reuse),
]


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=180)
