#!/usr/bin/env python3
"""examples/: the client libraries' uses, run against the real daemon and a real Redis.

Each example — the Python WSGI and ASGI middleware of clients/python (the
package ratelimitd, which examples/python's Flask and Starlette apps use),
the Node middleware of clients/node (examples/node/server.mjs and
express.mjs run by node) and the shell helper (examples/shell/ratelimit.sh,
run by /bin/sh) — must:

  - let `limit` requests through, then answer 429 with the daemon's
    Retry-After and quota headers;
  - forward the client's address, so two anonymous clients are two callers
    (and the Redis key names the forwarded address);
  - keep its connection: checks in a row go over one TCP connection (counted
    by a relay between the example and the daemon), and a kept-alive
    connection the daemon closed is replaced without a failed check;
  - fail open by default when the daemon is down (refused), hung (timeout,
    bounded in time) or answers 503; fail closed (503, or the shell's exit 3)
    when told to; never read a 400 as "limited", nor let it through: a 4xx
    (a path the daemon cannot normalise) denies with 400;
  - with their own default timeout, against a real daemon killed, SIGSTOPped
    or slow after kept-alive checks: each request is decided within 250 ms,
    as the client itself reports it (the Python Decision's elapsed_ms, the
    Node and shell warnings' "after N ms", curl's time_total);
  - check the request's whole path when mounted on a prefix: Express's
    app.use('/api', ...) (examples/node/express.mjs, Debian's node-express)
    and WSGI's SCRIPT_NAME, ASGI's root_path.

examples/python/flask_app.py and starlette_app.py run in their frameworks
(Debian's python3-flask, python3-starlette).  The clients' own suites are
tests/integration/test_clients.py's.  A missing node, Express, Flask or
Starlette is a failure, never a skip (Debian packages nodejs, node-express,
python3-flask, python3-starlette).
"""

import asyncio
import contextlib
import http.client
import importlib.util
import json
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

EX = os.path.join(H.RL_SRCDIR, "examples")
LIMIT = 3
TOKENS = 1000           # the OpenAI proxies' budget per tenant
CONFIG = {
    "identity": ["body", "header:X-Api-Key", "forwarded", "peer"],
    "redis": {"timeout": "2s"},
    "policies": [{"name": "ex", "limits": [{"algorithm": "fixed_window", "limit": LIMIT,
                                            "window": "60s"}]},
                 {"name": "tokens", "limits": [{"algorithm": "fixed_window", "limit": TOKENS,
                                                "window": "60s"}]}],
}
TIMEOUT_S = 0.3          # the examples' timeout towards a hung daemon, in the tests
OK_TIMEOUT = 2.0 * H.SLOW  # towards a working one: a loaded host must not make it fail open
SLOW = H.SLOW


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EX, "python", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sys.path.insert(0, os.path.join(H.RL_SRCDIR, "clients", "python"))
import ratelimitd  # noqa: E402
from ratelimitd.asgi import RateLimitMiddleware as RateLimitASGI  # noqa: E402
from ratelimitd.wsgi import RateLimitMiddleware as RateLimitWSGI  # noqa: E402


class RL:
    """The names the Python cases use."""
    RateLimitClient = ratelimitd.Client
    AsyncClient = ratelimitd.AsyncClient
    RateLimitWSGI = RateLimitWSGI
    RateLimitASGI = RateLimitASGI


def fresh(prefix="k"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def fresh_ip():
    b = uuid.uuid4().bytes
    return "198.51.%d.%d" % (b[0], b[1] or 1)


# ------------------------------------------------------------- loopback helpers

class Relay:
    """A TCP relay to `target` port that counts the connections it accepted.

    drop_all() closes every relayed connection, as the daemon does with idle
    keep-alive connections."""

    def __init__(self, target):
        self.target = target
        self.accepted = 0
        self.conns = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.accepted += 1
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def drop_all(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self):
        self.closed = True
        self.sock.close()
        self.drop_all()


Blackhole = H.Blackhole


def dead_port():
    """A loopback port nothing listens on (connection refused)."""
    return H.free_port()


def keys_naming(r, text):
    return [k for k in r.cli("KEYS", "*").split() if text in k]


# --------------------------------------------------------------------- Python

def wsgi_call(app, path="/orders", method="GET", remote="203.0.113.7", headers=None):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": remote}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs, exc_info=None):
        got["status"], got["headers"] = status, hdrs

    body = b"".join(app(environ, start_response))
    return int(got["status"].split()[0]), H.Headers(got["headers"]), body


def hello_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello from the app\n"]


def expect_denied(st, hd, body, what):
    eq(st, 429, what)
    ra = hd.get("retry-after", "")
    check(ra.isdigit() and 1 <= int(ra) <= 60, "%s: Retry-After %r, want 1..60 (the daemon's)", what, ra)
    eq(hd.get("x-ratelimit-remaining"), "0", what + ": X-RateLimit-Remaining")
    check(hd.get("ratelimit-policy", "").startswith('"ex"'), "%s: RateLimit-Policy %r", what,
          hd.get("ratelimit-policy"))


def t_py_wsgi(fx):
    relay = Relay(fx.daemon.port)
    try:
        client = RL.RateLimitClient("http://127.0.0.1:%d" % relay.port, timeout=OK_TIMEOUT)
        app = RL.RateLimitWSGI(hello_wsgi, client)
        ip, other = fresh_ip(), fresh_ip()
        for i in range(LIMIT):
            st, _, body = wsgi_call(app, remote=ip)
            eq((st, body), (200, b"hello from the app\n"), "request %d of an anonymous client" % (i + 1))
        st, hd, body = wsgi_call(app, remote=ip)
        expect_denied(st, hd, body, "request %d of that client" % (LIMIT + 1))
        check(b"too many requests" in body, "the 429's body %r", body)
        # the address was forwarded: another client is another caller, and Redis names it
        eq(wsgi_call(app, remote=other)[0], 200, "another client's first request")
        check(keys_naming(fx.redis, ip), "no Redis key names the forwarded address %s", ip)
        eq(relay.accepted, 1, "TCP connections for %d checks in a row" % (LIMIT + 2))
        # the daemon (here: the relay) closes a kept-alive connection: the next
        # check goes through on a fresh one, not through the failure policy
        relay.drop_all()
        time.sleep(0.05)
        d = client.check(key=fresh(), path="/x")
        check(d.allowed and not d.degraded, "a check after the connection was closed: %r", d)
        eq(relay.accepted, 2, "TCP connections after the daemon closed the first")
        # keys are callers too (an API key, a user id)
        key = fresh()
        app = RL.RateLimitWSGI(hello_wsgi, client, key=lambda env: env.get("HTTP_X_API_KEY"))
        sts = [wsgi_call(app, remote=fresh_ip(), headers={"X-Api-Key": key})[0] for _ in range(LIMIT + 1)]
        eq(sts, [200] * LIMIT + [429], "one API key from several addresses")
    finally:
        relay.close()


async def hello_asgi(scope, receive, send):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello from the app\n"})


async def asgi_call(app, scope):
    """One HTTP request through an ASGI app: (status, Headers, body)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg):
        sent.append(msg)
    await app(dict({"type": "http", "method": "GET", "headers": []}, **scope), receive, send)
    start = sent[0]
    hd = H.Headers([(k.decode(), v.decode()) for k, v in start.get("headers", [])])
    return start["status"], hd, b"".join(m.get("body", b"") for m in sent[1:])


def t_py_asgi(fx):
    relay = Relay(fx.daemon.port)
    try:
        client = RL.AsyncClient("http://127.0.0.1:%d" % relay.port, timeout=OK_TIMEOUT, max_connections=2)
        app = RL.RateLimitASGI(hello_asgi, client)
        ip = fresh_ip()

        async def one(client_ip):
            return await asgi_call(app, {"method": "POST", "path": "/orders", "client": (client_ip, 50000)})

        async def run():
            res = [await one(ip) for _ in range(LIMIT + 1)]
            # concurrent checks of other clients, all on the loop at once
            res2 = await asyncio.gather(*(one(fresh_ip()) for _ in range(6)))
            return res, res2

        res, res2 = asyncio.run(run())
        eq([r[0] for r in res], [200] * LIMIT + [429], "statuses through the ASGI middleware")
        eq(res[0][2], b"hello from the app\n", "the app's body")
        expect_denied(*res[-1], what="the ASGI 429")
        eq([r[0] for r in res2], [200] * 6, "six concurrent clients")
        check(relay.accepted <= 2, "%d connections for %d checks from a pool of 2 connections",
              relay.accepted, LIMIT + 7)
    finally:
        relay.close()


def t_py_failure_policy(fx):
    # refused
    for fail_open in (True, False):
        client = RL.RateLimitClient("http://127.0.0.1:%d" % dead_port(), timeout=TIMEOUT_S,
                                    fail_open=fail_open)
        app = RL.RateLimitWSGI(hello_wsgi, client)
        st, hd, body = wsgi_call(app, remote=fresh_ip())
        eq(st, 200 if fail_open else 503, "daemon down, fail_open=%s" % fail_open)
        if not fail_open:
            eq(hd.get("retry-after"), "1", "Retry-After of the fail-closed 503")
    # hung: answered by the policy within the timeout, not after it
    hole = Blackhole()
    try:
        client = RL.RateLimitClient("http://127.0.0.1:%d" % hole.port, timeout=TIMEOUT_S)
        t0 = time.monotonic()
        d = client.check(key="k")
        took = time.monotonic() - t0
        check(d.allowed and d.degraded, "a hung daemon, fail open: %r", d)
        check(took < TIMEOUT_S + 1.0 * SLOW, "a hung daemon took %.2fs to fail open (timeout %.1fs)",
              took, TIMEOUT_S)
    finally:
        hole.close()
    # the daemon itself says 503 (failure_mode closed, its Redis unreachable)
    with H.Daemon(dict(CONFIG, failure_mode="closed"), args=["-r", "redis://127.0.0.1:%d/0" % dead_port()],
                  ready=False) as d503:
        st, _, _ = H.request(d503.port, "POST", "/check", {"key": "k", "policy": "ex"})
        eq(st, 503, "the daemon's own answer with its Redis unreachable")
        for fail_open, want in ((True, 200), (False, 503)):
            client = RL.RateLimitClient("http://127.0.0.1:%d" % d503.port, fail_open=fail_open, timeout=2)
            eq(wsgi_call(RL.RateLimitWSGI(hello_wsgi, client))[0], want,
               "the daemon answering 503, fail_open=%s" % fail_open)
    # a 400 (unknown policy) is a bug, not "limited" nor the failure policy:
    # denied, whatever fail_open says (issue 24: a 4xx is never the daemon's
    # failure)
    client = RL.RateLimitClient("http://127.0.0.1:%d" % fx.daemon.port, policy="no-such-policy",
                                timeout=OK_TIMEOUT)
    d = client.check(key="k")
    check(not d.allowed and d.status == 400 and "400" in (d.reason or ""), "a 400 through the client: %r", d)
    # a path the daemon cannot normalise, from the client: 400, the app never runs
    client = RL.RateLimitClient("http://127.0.0.1:%d" % fx.daemon.port, timeout=OK_TIMEOUT)
    ran = []

    def app(environ, start_response):
        ran.append(environ["PATH_INFO"])
        return hello_wsgi(environ, start_response)
    for path in ("/api/it\x00ems", "/api/../../items"):
        st, hd, body = wsgi_call(RL.RateLimitWSGI(app, client), path=path, remote=fresh_ip())
        eq((st, body), (400, b'{"error": "bad request"}'), "WSGI, PATH_INFO %r" % path)
    eq(ran, [], "requests with an unnormalisable path the app saw")


# ----------------------------------------------------------------------- Node

# Debian's node-* packages install here; node does not look there by itself
NODE_PATH = "/usr/share/nodejs"


class NodeApp:
    def __init__(self, daemon_port, script="server.mjs", **env):
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise H.Fail("node not found: it is required (Debian package nodejs)")
        e = dict(os.environ, RATELIMITD_URL="http://127.0.0.1:%d" % daemon_port, PORT="0")
        e["NODE_PATH"] = NODE_PATH + (":" + e["NODE_PATH"] if e.get("NODE_PATH") else "")
        e.update({k: str(v) for k, v in env.items()})
        self.logpath = os.path.join(H.tmpdir(), "node-%s.log" % uuid.uuid4().hex[:6])
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen([node, os.path.join(EX, "node", script)], env=e,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = ""
        deadline = time.monotonic() + 20 * SLOW
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening ") or not line:
                break
        m = re.match(r"listening (\d+)", line)
        if not m:
            self.close()
            raise H.Fail("node %s did not start (%r): %s" % (script, line, open(self.logpath).read()))
        self.port = int(m.group(1))

    def get(self, headers=None, conn=None, path="/orders?x=1"):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * SLOW)
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        body = r.read()
        hd = H.Headers(r.getheaders())
        if conn is None:
            c.close()
        return r.status, hd, body

    def stderr(self):
        return open(self.logpath).read()

    def close(self):
        H.stop_process(self.proc, timeout=10)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def t_node(fx):
    relay = Relay(fx.daemon.port)
    try:
        with NodeApp(relay.port, CLIENT_HEADER="x-client", TIMEOUT_MS=int(OK_TIMEOUT * 1000)) as app:
            ip = fresh_ip()
            res = [app.get({"X-Client": ip}) for _ in range(LIMIT + 1)]
            eq([r[0] for r in res], [200] * LIMIT + [429], "statuses through the Node middleware")
            eq(res[0][2], b"hello from the app\n", "the app's body")
            expect_denied(*res[-1], what="the Node 429")
            eq(app.get({"X-Client": fresh_ip()})[0], 200, "another client's first request")
            check(keys_naming(fx.redis, ip), "no Redis key names the forwarded address %s", ip)
            key = fresh()
            sts = [app.get({"X-Api-Key": key, "X-Client": fresh_ip()})[0] for _ in range(LIMIT + 1)]
            eq(sts, [200] * LIMIT + [429], "one API key from several addresses")
            eq(relay.accepted, 1, "TCP connections for %d checks in a row (keep-alive Agent)"
               % (2 * LIMIT + 3))
            relay.drop_all()
            time.sleep(0.05)
            eq(app.get({"X-Client": fresh_ip()})[0], 200, "a check after the daemon closed the connection")
            check("unavailable" not in app.stderr(), "the closed connection went to the failure policy: %s",
                  app.stderr())
            eq(relay.accepted, 2, "TCP connections after the daemon closed the first")
    finally:
        relay.close()


def t_node_failure_policy(fx):
    for fail_open, want in (("1", 200), ("0", 503)):
        with NodeApp(dead_port(), FAIL_OPEN=fail_open) as app:
            st, hd, body = app.get()
            eq(st, want, "daemon down, FAIL_OPEN=%s (%s)" % (fail_open, app.stderr()))
            if want == 503:
                eq(hd.get("retry-after"), "1", "Retry-After of the fail-closed 503")
            check("unavailable" in app.stderr(), "no warning logged: %r", app.stderr())
    hole = Blackhole()
    try:
        with NodeApp(hole.port, TIMEOUT_MS=int(TIMEOUT_S * 1000)) as app:
            t0 = time.monotonic()
            st, _, _ = app.get()
            took = time.monotonic() - t0
            eq(st, 200, "a hung daemon, fail open")
            check(took < TIMEOUT_S + 1.0 * SLOW, "a hung daemon took %.2fs (timeout %.1fs)", took, TIMEOUT_S)
    finally:
        hole.close()
    with H.Daemon(dict(CONFIG, failure_mode="closed"), args=["-r", "redis://127.0.0.1:%d/0" % dead_port()],
                  ready=False) as d503:
        with NodeApp(d503.port, TIMEOUT_MS=2000) as app:
            eq(app.get()[0], 200, "the daemon answering 503, fail open")
            check("503" in app.stderr(), "the 503 is not logged: %r", app.stderr())
    # a path the daemon cannot normalise (the middleware passes req.url as
    # the client sent it): 400, never the failure policy (issue 24)
    with NodeApp(fx.daemon.port, TIMEOUT_MS=int(OK_TIMEOUT * 1000)) as app:
        for path in ("/api%2Fitems", "/api/items%zz", "/api/it%00ems"):
            c = http.client.HTTPConnection("127.0.0.1", app.port, timeout=10 * SLOW)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            c.close()
            eq((r.status, body), (400, b'{"error":"bad request"}'), "Node, GET %s" % path)


# ---------------------------------------------------------------------- shell

def sh(args, port, **env):
    e = dict(os.environ, RATELIMITD_URL="http://127.0.0.1:%d" % port, RATELIMIT_TIMEOUT=str(OK_TIMEOUT))
    e.update({k: str(v) for k, v in env.items()})
    r = subprocess.run(["sh", os.path.join(EX, "shell", "ratelimit.sh")] + list(args), env=e,
                       capture_output=True, text=True, timeout=30 * SLOW)
    return r.returncode, r.stdout, r.stderr


def t_shell(fx):
    port = fx.daemon.port
    key = fresh()
    codes = [sh([key], port)[0] for _ in range(LIMIT)]
    eq(codes, [0] * LIMIT, "exit codes of the allowed checks")
    rc, out, err = sh([key], port)
    eq(rc, 1, "exit code of the limited check (%s)" % err)
    m = re.search(r"retry after (\d+)s", out)
    check(m and 1 <= int(m.group(1)) <= 60, "no Retry-After in %r", out)
    # a 400 (a key over 512 bytes) is not "limited"
    rc, out, err = sh(["x" * 600], port)
    eq(rc, 2, "exit code of an oversized key (400)")
    check("bad request" in err, "stderr of a 400: %r", err)
    # an anonymous caller ("-") is named by the forwarded address
    ip = fresh_ip()
    codes = [sh(["-"], port, RATELIMIT_CLIENT_IP=ip)[0] for _ in range(LIMIT + 1)]
    eq(codes, [0] * LIMIT + [1], "exit codes of an anonymous caller with RATELIMIT_CLIENT_IP")
    check(keys_naming(fx.redis, ip), "no Redis key names the forwarded address %s", ip)
    eq(sh(["-"], port, RATELIMIT_CLIENT_IP=fresh_ip())[0], 0, "another anonymous caller")
    # several keys: one connection, one line each, the worst status
    relay = Relay(port)
    try:
        a, b = fresh(), fresh()
        rc, out, err = sh([a, a, a, a, b], relay.port)
        eq(rc, 1, "exit code of five checks, one limited (%s)" % err)
        lines = [l.split() for l in out.splitlines()]
        eq([(l[0], l[1]) for l in lines], [(a, "200")] * 3 + [(a, "429"), (b, "200")], "per-key lines")
        check(lines[3][2].isdigit(), "no Retry-After on the limited line: %r", lines[3])
        eq(relay.accepted, 1, "TCP connections for five checks in one call")
    finally:
        relay.close()


def t_shell_failure_policy(fx):
    port = dead_port()
    rc, out, err = sh(["k"], port)
    eq(rc, 0, "daemon down: fail open (%s)" % err)
    check("failing open" in err, "no warning when failing open: %r", err)
    rc, out, err = sh(["k"], port, RATELIMIT_FAIL="closed")
    eq(rc, 3, "daemon down, RATELIMIT_FAIL=closed")
    hole = Blackhole()
    try:
        t0 = time.monotonic()
        rc, _, err = sh(["k"], hole.port, RATELIMIT_TIMEOUT=TIMEOUT_S)
        took = time.monotonic() - t0
        eq(rc, 0, "a hung daemon: fail open (%s)" % err)
        check(took < TIMEOUT_S + 2.0 * SLOW, "a hung daemon took %.2fs", took)
    finally:
        hole.close()
    with H.Daemon(dict(CONFIG, failure_mode="closed"), args=["-r", "redis://127.0.0.1:%d/0" % dead_port()],
                  ready=False) as d503:
        rc, _, err = sh(["k"], d503.port, RATELIMIT_TIMEOUT=2)
        eq(rc, 0, "the daemon answering 503: fail open (%s)" % err)
        check("503" in err, "the 503 is not named: %r", err)
        eq(sh(["k"], d503.port, RATELIMIT_TIMEOUT=2, RATELIMIT_FAIL="closed")[0], 3,
           "the daemon answering 503, RATELIMIT_FAIL=closed")


# ------------------------------------------------- faults, with the defaults

AFTER_MS = re.compile(r"after (\d+) ms")


def t_py_faults(fx):
    # the client's own default timeout; its Decision says how long each check took
    for kind in FAULTS:
        with FaultyDaemon(CONFIG) as fd:
            client = RL.RateLimitClient("http://127.0.0.1:%d" % fd.port)
            for i in range(3):      # a kept-alive connection, as in service
                client.timeout = OK_TIMEOUT
                d = client.check(key=fresh(), path="/x")
                check(not d.degraded, "a check before the fault: %r", d)
            client.timeout = RL.RateLimitClient().timeout
            fd.inflict(kind)

            def measure():
                ds = [client.check(key=fresh(), path="/x") for _ in range(3)]
                check(all(d.allowed and d.degraded for d in ds), "daemon %s, fail open: %r", kind, ds)
                return [d.elapsed_ms for d in ds]
            expect_bounded("python, daemon %s" % kind, measure)


def t_node_faults(fx):
    for kind in FAULTS:
        with FaultyDaemon(CONFIG) as fd:
            # server.mjs's default timeout (200 ms) once the warm-up is done
            with NodeApp(fd.port) as app:
                for i in range(3):
                    eq(app.get({"X-Api-Key": fresh()})[0], 200, "a request before the fault")
                fd.inflict(kind)

                def one():
                    before = len(AFTER_MS.findall(app.stderr()))
                    d0 = degraded_answers_before(fd, kind)
                    t0 = time.monotonic()
                    eq(app.get({"X-Api-Key": fresh()})[0], 200, "daemon %s: fail open" % kind)
                    wall = (time.monotonic() - t0) * 1000
                    t1 = time.monotonic()
                    deadline = t1 + 10 * SLOW   # the warning's line may lag the answer
                    while True:
                        times = [int(t) for t in AFTER_MS.findall(app.stderr())[before:]]
                        if times:
                            eq(len(times), 1, "the warning of the failed check (%s)"
                               % app.stderr()[-500:])
                            return times[0]
                        # The daemon's own prompt fail-open answer: counted
                        # degraded, and no warning, at once when it came
                        # before the app's 200 ms timeout could, else once a
                        # lagging warning would have been written (a loaded
                        # host can take 150 ms to bring the prompt answer).
                        if d0 is not None and (wall < 150 or time.monotonic() > t1 + 3 * SLOW) \
                                and degraded_answers(fd, kind) == d0 + 1:
                            return wall
                        check(time.monotonic() < deadline, "daemon %s: no warning of the failed "
                              "check (%s)", kind, app.stderr()[-500:])
                        time.sleep(0.02)
                expect_bounded("node, daemon %s" % kind, lambda: [one() for _ in range(3)])


def degraded_answers(fd, kind):
    """Checks the daemon answered by its failure_mode: with Redis paused
    ("slow") its heartbeat may have marked Redis stalled before a check
    came, and the daemon's own fail-open 200 then arrives before the
    recipe's timeout, with no warning to read a time from (the test's
    clock of that call stands in: sh and curl's start included).  Under
    the other faults the daemon cannot answer at all: None."""
    if kind != "slow":
        return None
    _, _, text = H.request(fd.port, "GET", "/metrics")
    return sum(int(v) for v in re.findall(
        r'^ratelimitd_checks_total\{[^}]*result="degraded"[^}]*\} (\d+)$', str(text), re.M))


def degraded_answers_before(fd, kind):
    """degraded_answers() once no check waits for the backend
    (ratelimitd_inflight_checks 0).  A check the recipe gave up on at its
    timeout is answered by the daemon later, degraded too: read before it
    was, its count would land in the next call's window, and that call's
    own prompt answer would look like two (a check is counted before it is
    answered, src/check.c, and leaves the gauge after, src/api.c: at 0,
    every earlier answer is in the count)."""
    if kind == "slow":
        H.wait_for(lambda: H.metric(fd.port, "ratelimitd_inflight_checks") == 0,
                   "the checks given up on earlier answered by the daemon")
    return degraded_answers(fd, kind)


def t_shell_faults(fx):
    for kind in FAULTS:
        with FaultyDaemon(CONFIG) as fd:
            eq(sh([fresh()], fd.port)[0], 0, "a check before the fault")
            fd.inflict(kind)

            def one():
                # the script's own default timeout: RATELIMIT_TIMEOUT unset
                e = dict(os.environ, RATELIMITD_URL="http://127.0.0.1:%d" % fd.port)
                e.pop("RATELIMIT_TIMEOUT", None)
                d0 = degraded_answers_before(fd, kind)
                t0 = time.monotonic()
                r = subprocess.run(["sh", os.path.join(EX, "shell", "ratelimit.sh"), fresh()], env=e,
                                   capture_output=True, text=True, timeout=30 * SLOW)
                wall = (time.monotonic() - t0) * 1000
                eq(r.returncode, 0, "daemon %s: fail open (%s)" % (kind, r.stderr))
                m = AFTER_MS.search(r.stderr)
                if m is None and d0 is not None and degraded_answers(fd, kind) == d0 + 1:
                    return wall             # the daemon's own prompt fail-open answer
                check(m, "daemon %s: the warning does not say how long curl took: %r", kind, r.stderr)
                return int(m.group(1))
            expect_bounded("shell, daemon %s" % kind, lambda: [one() for _ in range(3)])


# ------------------------------------------------------------ mount prefixes

PREFIX_CONFIG = {
    "identity": ["body", "header:X-Api-Key", "forwarded", "peer"],
    "redis": {"timeout": "2s"},
    "policies": [{"name": "five", "match": {"path_prefix": "/api/"},
                  "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "60s"}]}],
}


def t_node_express_prefix(fx):
    with H.Daemon(PREFIX_CONFIG, redis=fx.redis) as d, \
            NodeApp(d.port, script="express.mjs", TIMEOUT_MS=int(OK_TIMEOUT * 1000)) as app:
        key = fresh()
        sts = [app.get({"X-Api-Key": key}, path="/api/orders")[0] for _ in range(7)]
        eq(sts, [200] * 5 + [429] * 2, "app.use('/api', rateLimit(...)), limit 5 on /api/")
        st, hd, _ = app.get({"X-Api-Key": key}, path="/api/orders")
        eq(hd.get("ratelimit-policy", "").split(";")[0], '"five"', "the policy that limited it")
        eq(app.get({"X-Api-Key": key}, path="/health")[0], 200, "a path outside the mount")


def t_py_mount_prefix(fx):
    with H.Daemon(PREFIX_CONFIG, redis=fx.redis) as d:
        client = RL.RateLimitClient("http://127.0.0.1:%d" % d.port, timeout=OK_TIMEOUT)
        app = RL.RateLimitWSGI(hello_wsgi, client, key=lambda env: env.get("HTTP_X_API_KEY"))
        key = fresh()
        sts = []
        for _ in range(7):
            environ = {"REQUEST_METHOD": "GET", "SCRIPT_NAME": "/api", "PATH_INFO": "/orders",
                       "REMOTE_ADDR": "203.0.113.7", "HTTP_X_API_KEY": key}
            got = {}
            b"".join(app(environ, lambda st, h, e=None: got.update(st=st)))
            sts.append(int(got["st"].split()[0]))
        eq(sts, [200] * 5 + [429] * 2, "WSGI mounted at /api (SCRIPT_NAME), limit 5 on /api/")

        key2 = fresh()
        aclient = RL.AsyncClient("http://127.0.0.1:%d" % d.port, timeout=OK_TIMEOUT)
        asgi = RL.RateLimitASGI(hello_asgi, aclient, key=lambda sc: key2)
        scope = {"root_path": "/api", "path": "/orders", "client": ("203.0.113.8", 1)}
        sts = [asyncio.run(asgi_call(asgi, scope))[0] for _ in range(7)]
        eq(sts, [200] * 5 + [429] * 2, "ASGI mounted at /api (root_path, path without it)")


def t_py_framework_examples(fx):
    # Debian's Flask and Starlette live in the system Python's path, which a
    # pyenv or venv python3 does not search
    if "/usr/lib/python3/dist-packages" not in sys.path:
        sys.path.append("/usr/lib/python3/dist-packages")
    url = "http://127.0.0.1:%d" % fx.daemon.port
    app = load_example("flask_app").create_app(url, timeout=OK_TIMEOUT)
    key = fresh()
    with app.test_client() as tc:
        rs = [tc.get("/orders", headers={"X-Api-Key": key}) for _ in range(LIMIT + 1)]
    eq([r.status_code for r in rs], [200] * LIMIT + [429], "statuses through examples/python/flask_app.py")
    eq(rs[0].data, b"hello from the app\n", "the Flask app's body")
    expect_denied(rs[-1].status_code, H.Headers(list(rs[-1].headers.items())), rs[-1].data,
                  "the Flask example's 429")
    from starlette.testclient import TestClient
    app = load_example("starlette_app").create_app(url, timeout=OK_TIMEOUT)
    key = fresh()
    with TestClient(app) as tc:
        rs = [tc.get("/orders", headers={"X-Api-Key": key}) for _ in range(LIMIT + 1)]
    eq([r.status_code for r in rs], [200] * LIMIT + [429], "statuses through examples/python/starlette_app.py")
    expect_denied(rs[-1].status_code, H.Headers(list(rs[-1].headers.items())), rs[-1].content,
                  "the Starlette example's 429")


# -------------------------------------------------- OpenAI-compatible proxies

class Upstream:
    """A local OpenAI-compatible upstream: POST /v1/chat/completions answers
    JSON with `usage`, or (stream: true) SSE chunks, one per word of REPLY,
    then a last chunk of `usage` (when stream_options.include_usage) and
    `data: [DONE]`.  `gate`, when set, holds the stream before its last
    content chunk; `seen` keeps the requests' bodies."""

    REPLY = "budgets are counted after the work is done".split()

    def __init__(self):
        import http.server
        up = self
        self.seen = []
        self.gate = None

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                up.seen.append(req)
                prompt = sum(len(m["content"]) for m in req["messages"]) // 4
                usage = {"prompt_tokens": prompt, "completion_tokens": len(up.REPLY) * 3,
                         "total_tokens": prompt + len(up.REPLY) * 3}
                if not req.get("stream"):
                    data = json.dumps({"object": "chat.completion", "usage": usage, "choices": [
                        {"message": {"role": "assistant", "content": " ".join(up.REPLY)}}]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for i, w in enumerate(up.REPLY):
                        if i == len(up.REPLY) - 1 and up.gate is not None:
                            up.gate.wait(30)
                        chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": w}}]}
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        self.wfile.flush()
                    if (req.get("stream_options") or {}).get("include_usage"):
                        last = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
                        self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                except OSError:
                    pass
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class ProxyProcess:
    """examples/python/openai_proxy.py or examples/node/openai_proxy.mjs, run."""

    def __init__(self, argv, daemon_port, upstream_port):
        env = dict(os.environ, RATELIMITD_URL="http://127.0.0.1:%d" % daemon_port, PORT="0",
                   UPSTREAM_URL="http://127.0.0.1:%d" % upstream_port, RATELIMIT_POLICY="tokens",
                   RATELIMIT_TIMEOUT=str(OK_TIMEOUT), TIMEOUT_MS=str(int(OK_TIMEOUT * 1000)))
        self.logpath = os.path.join(H.tmpdir(), "proxy-%s.log" % uuid.uuid4().hex[:6])
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening (\d+)", line)
        if not m:
            self.close()
            raise H.Fail("%s did not start (%r): %s" % (argv, line, open(self.logpath).read()))
        self.port = int(m.group(1))

    def post(self, body, tenant, read=True):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * SLOW)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json", "Authorization": "Bearer " + tenant})
        sock = c.sock
        r = c.getresponse()
        if not read:
            return c, r, sock
        data = r.read()
        c.close()
        return r.status, H.Headers(r.getheaders()), data

    def close(self):
        H.stop_process(self.proc, timeout=10)
        self.log.close()


def tenant_remaining(fx, tenant):
    import hashlib
    key = "key-" + hashlib.sha256(tenant.encode()).hexdigest()[:32]
    st, _, body = H.request(fx.daemon.port, "POST", "/check", {"key": key, "policy": "tokens", "cost": 0})
    return body.get("remaining")


def proxy_cases(fx, argv, what):
    up = Upstream()
    proxy = ProxyProcess(argv, fx.daemon.port, up.port)
    try:
        prompt = "x" * 400                      # 100 tokens, estimated
        msg = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 200}
        real = 100 + len(Upstream.REPLY) * 3     # what the upstream's usage says
        # a whole answer: settled at its usage.total_tokens
        t = fresh("tenant")
        st, _, body = proxy.post(msg, t)
        eq(st, 200, "%s: a completion" % what)
        eq(json.loads(body)["usage"]["total_tokens"], real, "%s: the upstream's usage" % what)
        H.wait_for(lambda: tenant_remaining(fx, t) == TOKENS - real,
                   "%s: the tenant charged %d (remaining %s)" % (what, real, tenant_remaining(fx, t)))
        # a stream: relayed chunk by chunk, settled at the last chunk's usage
        st, hd, body = proxy.post(dict(msg, stream=True), t)
        eq(st, 200, "%s: a streamed completion" % what)
        events = [l for l in body.decode().split("\n") if l.startswith("data: ")]
        eq(len(events), len(Upstream.REPLY) + 2, "%s: the SSE events relayed (%r)" % (what, events))
        check(up.seen[-1].get("stream_options", {}).get("include_usage") is True,
              "%s: the proxy did not ask for the usage chunk: %r", what, up.seen[-1])
        H.wait_for(lambda: tenant_remaining(fx, t) == TOKENS - 2 * real,
                   "%s: the streamed completion charged (remaining %s)" % (what, tenant_remaining(fx, t)))
        # past the budget: the estimate (300) does not fit what is left
        st, hd, body = proxy.post(dict(msg, max_tokens=TOKENS), t)
        eq(st, 429, "%s: a request past the tenant's budget" % what)
        ra = hd.get("retry-after", "")
        check(ra.isdigit() and 1 <= int(ra) <= 60, "%s: Retry-After %r", what, ra)
        eq(len(up.seen), 2, "%s: upstream calls (the denied one never reached it)" % what)
        # a client gone mid-stream: settled (never left at the estimate) at
        # what the proxy knew was generated: the prompt and the chunks relayed
        # (the Node proxy, which sees the close at once and stops the
        # upstream), at most the upstream's usage (the sync Python proxy sees
        # it at its next write, when the upstream has finished)
        t2 = fresh("tenant")
        up.gate = threading.Event()
        c, r, sock = proxy.post(dict(msg, stream=True), t2, read=False)
        got = b""
        while got.count(b"data: ") < len(Upstream.REPLY) - 1:
            got += r.read1(65536)
        eq(tenant_remaining(fx, t2), TOKENS - 300, "%s: the estimate held while streaming" % what)
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        r.close()
        c.close()
        relayed = 100 + len(Upstream.REPLY) - 1
        if "node" in what:
            H.wait_for(lambda: tenant_remaining(fx, t2) == TOKENS - relayed,
                       "%s: the aborted stream settled at prompt + chunks relayed (remaining %s, want %d)"
                       % (what, tenant_remaining(fx, t2), TOKENS - relayed))
        up.gate.set()
        H.wait_for(lambda: TOKENS - real <= tenant_remaining(fx, t2) <= TOKENS - relayed,
                   "%s: the aborted stream settled between prompt + chunks relayed and the usage "
                   "(remaining %s, want %d..%d)" % (what, tenant_remaining(fx, t2), TOKENS - real,
                                                   TOKENS - relayed))
    finally:
        if up.gate is not None:
            up.gate.set()
        proxy.close()
        up.close()


def t_py_openai_proxy(fx):
    proxy_cases(fx, [sys.executable, os.path.join(EX, "python", "openai_proxy.py")], "python proxy")


def t_node_openai_proxy(fx):
    node = shutil.which("node")
    if node is None:
        raise H.Fail("node not found: it is required (Debian package nodejs)")
    proxy_cases(fx, [node, os.path.join(EX, "node", "openai_proxy.mjs")], "node proxy")


class Fx:
    pass


@contextlib.contextmanager
def fixture():
    with H.Redis(topology="standalone") as r, H.Daemon(CONFIG, redis=r) as d:
        fx = Fx()
        fx.redis, fx.daemon = r, d
        yield fx


CASES = [
    ("python WSGI: limit then 429 + Retry-After, client address forwarded, one connection, reconnects",
     t_py_wsgi),
    ("python ASGI: limit then 429, concurrent clients, connections bounded by the pool", t_py_asgi),
    ("python: refused / hung / 503 fail open by default, 503 when closed; a 4xx (a path the daemon "
     "cannot normalise) denies with 400, never fails open", t_py_failure_policy),
    ("node: limit then 429 + Retry-After, address forwarded, one keep-alive connection, reconnects",
     t_node),
    ("node: refused / hung / 503 fail open by default, 503 when closed; a 4xx denies with 400",
     t_node_failure_policy),
    ("shell: exit 0 / 1 with Retry-After / 2 on a 400; many keys over one connection", t_shell),
    ("shell: refused / hung / 503 fail open by default, exit 3 when closed", t_shell_failure_policy),
    ("python, default timeout: daemon killed / stopped / slow after kept-alive checks, each check "
     "decided within 250 ms (Decision.elapsed_ms)", t_py_faults),
    ("node, default timeout: daemon killed / stopped / slow, each request within 250 ms (its warnings)",
     t_node_faults),
    ("shell, default timeout: daemon killed / stopped / slow, each check within 250 ms (curl's time_total)",
     t_shell_faults),
    ("node: Express app.use('/api', rateLimit(...)) checks the whole path: 5 of 7 for a limit of 5",
     t_node_express_prefix),
    ("python: WSGI under SCRIPT_NAME and ASGI under root_path check the whole path", t_py_mount_prefix),
    ("python: examples/python's Flask and Starlette apps: limit then 429 with the daemon's headers",
     t_py_framework_examples),
    ("python OpenAI proxy: reserves prompt + max_tokens, settles at usage (a stream's last SSE chunk), "
     "429 past the budget, an aborted stream settles at what was relayed", t_py_openai_proxy),
    ("node OpenAI proxy: reserves prompt + max_tokens, settles at usage (a stream's last SSE chunk), "
     "429 past the budget, an aborted stream settles at what was relayed", t_node_openai_proxy),
]


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=480)
