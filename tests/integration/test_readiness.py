#!/usr/bin/env python3
"""GET /readyz speaks for the whole daemon, not for the worker that happens to
accept the probe: with -w 4 and one worker unable to connect (Redis
maxclients lets three in), every probe says 503 and names that worker; when
it connects, every probe says 200.  (Before, a probe answered for its own
worker only, so a Kubernetes probe flapped.)

GET /serving says whether checks can be answered as configured, the
readiness a sidecar needs: with Redis gone it stays 200 (degraded, naming the
failure_mode and the reason) under failure_mode open and local, which answer
every check without Redis, and is 503 under closed, whose checks would all be
503s; it follows a reload of failure_mode, says 503 while draining, and is
what every worker says.  /readyz keeps its meaning (the backend's state)."""

import contextlib
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

WORKERS = 4
PROBES = 24


def clients(admin):
    info = admin("INFO", "clients")
    return int(info.split("connected_clients:")[1].split()[0])


def probes(port):
    """GET /readyz on PROBES fresh connections: [(status, body)]."""
    return [H.request(port, "GET", "/readyz")[0::2] for _ in range(PROBES)]


def t_one_worker_down(_):
    with H.Redis(topology="standalone") as r:
        # opened before maxclients is lowered, so that it can raise it again
        admin = H.Resp(r.port)
        try:
            admin("CONFIG", "SET", "maxclients", WORKERS)     # admin + 3 workers
            cfg = {"identity": ["body"], "redis": {"url": r.url, "timeout": "2s"}}
            with H.Daemon(cfg, workers=WORKERS, ready=False) as d:
                # the three that got in are ready; the fourth keeps retrying
                deadline = time.monotonic() + 10 * H.SLOW
                while clients(admin) < WORKERS:
                    check(time.monotonic() < deadline, "three workers did not connect")
                    time.sleep(0.05)
                # Redis counting a worker's connection is not the worker
                # having seen it connect and published that (every 100 ms,
                # src/worker.c): until then a probe may name a connected
                # worker.  Wait for a round of probes that all name one
                # worker (a daemon answering per worker never gets there:
                # the connected ones would say 200), then ask again: the
                # assertions hold on a fresh round, as the probes see it.
                deadline = time.monotonic() + 10 * H.SLOW
                while True:
                    got = probes(d.port)
                    if {st for st, _ in got} == {503} and len({b.get("worker") for _, b in got}) == 1:
                        break
                    check(time.monotonic() < deadline, "probes never all named one worker: %r",
                          sorted({(st, str(b)) for st, b in got}))
                    time.sleep(0.1)
                got = probes(d.port)
                eq(sorted({st for st, _ in got}), [503],
                   "statuses of %d probes with one of %d workers not connected" % (PROBES, WORKERS))
                named = {b.get("worker") for _, b in got}
                eq(len(named), 1, "the not-ready worker named by every probe: %r" % (named,))
                check(all(b.get("reason") for _, b in got), "a 503 without a reason: %r", got[0])
                admin("CONFIG", "SET", "maxclients", 10000)
                deadline = time.monotonic() + 10 * H.SLOW
                while True:
                    got = probes(d.port)
                    if all(st == 200 for st, _ in got):
                        break
                    check(time.monotonic() < deadline,
                          "not every probe 200 after the fourth worker could connect: %r",
                          sorted({(st, str(b)) for st, b in got}))
                    time.sleep(0.2)
                st, _, b = H.request(d.port, "POST", "/check", {"key": "k"})
                eq((st, b.get("degraded", False)), (200, False), "a check once ready")
        finally:
            admin.close()


def serving_config(mode):
    return {"identity": ["body"], "failure_mode": mode,
            "redis": {"timeout": "100ms", "connect_timeout": "200ms"},
            "policies": [{"name": "p", "limits": [{"algorithm": "fixed_window", "limit": 100,
                                                  "window": "1m"}]}]}


def wait_status(port, path, want, what, timeout=10):
    deadline = time.monotonic() + timeout * H.SLOW
    while True:
        st, h, b = H.request(port, "GET", path)
        if st == want:
            return h, b
        check(time.monotonic() < deadline, "%s: GET %s still %d (%r) after %ds", what, path, st, b, timeout)
        time.sleep(0.05)


def t_serving_redis_outage(_):
    # one daemon per failure_mode (two workers each), one Redis for all; Redis goes away
    with H.Redis(topology="standalone") as r:
        ds = {m: H.Daemon(serving_config(m), redis=r, workers=2) for m in ("local", "open", "closed")}
        try:
            for m, d in ds.items():
                st, h, b = H.request(d.port, "GET", "/serving")
                eq((st, b), (200, {"status": "serving"}), "%s, Redis up: GET /serving" % m)
                st, h, b = H.request(d.port, "GET", "/healthcheck")
                eq((st, b, H.media_type(h)), (200, "OK", "text/plain"),
                   "%s, Redis up: GET /healthcheck" % m)
            r.stop()
            for m, d in ds.items():
                wait_status(d.port, "/readyz", 503, "%s, Redis stopped" % m)
                got = [H.request(d.port, "GET", "/serving") for _ in range(8)]
                if m == "closed":
                    eq(sorted({st for st, _, _ in got}), [503], "closed, Redis stopped: GET /serving")
                    h, b = got[0][1], got[0][2]
                    eq(b.get("status"), "not serving", "closed: status")
                    check(b.get("reason") and isinstance(b.get("worker"), int), "closed: %r", b)
                    eq(h.get("retry-after"), "1", "closed: Retry-After on /serving's 503")
                    st, _, cb = H.request(d.port, "POST", "/check", {"key": "k", "policy": "p"})
                    eq(st, 503, "closed: a check while not serving (%r)" % (cb,))
                else:
                    eq(sorted({st for st, _, _ in got}), [200], "%s, Redis stopped: GET /serving" % m)
                    b = got[0][2]
                    eq((b.get("status"), b.get("degraded"), b.get("failure_mode")), ("serving", True, m),
                       "%s, Redis stopped: /serving's body %r" % (m, b))
                    check(b.get("reason") and isinstance(b.get("worker"), int), "%s: %r", m, b)
                    st, _, cb = H.request(d.port, "POST", "/check", {"key": "k", "policy": "p"})
                    eq((st, cb.get("degraded")), (200, True), "%s: a check while serving degraded" % m)
                st, h, b = H.request(d.port, "HEAD", "/serving")
                eq((st, b), (503 if m == "closed" else 200, ""), "%s: HEAD /serving" % m)
                # envoyproxy/ratelimit's route: the same predicate, its answers
                st, h, b = H.request(d.port, "GET", "/healthcheck")
                eq((st, b), (500, "") if m == "closed" else (200, "OK"),
                   "%s, Redis stopped: GET /healthcheck" % m)
            # closed reloaded to local: serving at once, Redis still gone
            d = ds["closed"]
            d.rewrite_config(serving_config("local"))
            d.reload()
            h, b = wait_status(d.port, "/serving", 200, "closed reloaded to local")
            eq(b.get("failure_mode"), "local", "after the reload: /serving's body %r" % (b,))
            r.restart()
            for m, d in ds.items():
                h, b = wait_status(d.port, "/serving", 200, "%s, Redis back" % m, timeout=20)
                deadline = time.monotonic() + 20 * H.SLOW
                while b != {"status": "serving"}:
                    check(time.monotonic() < deadline, "%s: /serving still %r with Redis back" % (m, b))
                    time.sleep(0.1)
                    b = H.request(d.port, "GET", "/serving")[2]
        finally:
            for d in ds.values():
                d.kill()


def t_serving_draining_and_methods(_):
    cfg = dict(serving_config("local"), shutdown_grace="5s")
    with H.Daemon(cfg, backend="memory") as d:
        eq(H.request(d.port, "GET", "/serving")[0::2], (200, {"status": "serving"}), "memory backend")
        st, h, b = H.request(d.port, "POST", "/serving")
        eq((st, h.get("allow")), (405, "GET, HEAD"), "POST /serving")
        eq(H.request(d.port, "HEAD", "/healthcheck")[0::2], (200, ""), "HEAD /healthcheck")
        st, h, b = H.request(d.port, "POST", "/healthcheck")
        eq((st, h.get("allow")), (405, "GET, HEAD"), "POST /healthcheck")
        hc = H.RawConn(d.port)
        hreq = b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"
        hc.send(hreq[:5])
        # a probe read after SIGTERM: not serving, whatever the failure_mode
        c = H.RawConn(d.port)
        req = b"GET /serving HTTP/1.1\r\nHost: x\r\n\r\n"
        c.send(req[:5])
        time.sleep(0.1)
        d.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10 * H.SLOW
        while H.port_open(d.port):
            check(time.monotonic() < deadline, "still accepting 10 s after SIGTERM")
            time.sleep(0.02)
        c.send(req[5:])
        st, h, raw = c.read_response()
        eq((st, h.get("retry-after")), (503, "1"), "GET /serving while draining")
        check(b'"shutting down"' in raw and b'"not serving"' in raw, "the drain's /serving body %r", raw)
        c.close()
        hc.send(hreq[5:])
        st, h, raw = hc.read_response()
        eq((st, raw), (500, b""), "GET /healthcheck while draining")
        hc.close()
        eq(d.wait(15), 0, "exit code after the drain")


CASES = [
    ("-w 4, one worker not connected: every probe 503 naming it; connected: every probe 200",
     t_one_worker_down),
    ("GET /serving with Redis gone: 200 degraded under local and open, 503 under closed "
     "(/healthcheck 200 OK or 500); follows a reload; /readyz 503 for all", t_serving_redis_outage),
    ("GET /serving and /healthcheck: 200 with the memory backend, 405 for POST, 503 (500) while draining",
     t_serving_draining_and_methods),
]


@contextlib.contextmanager
def fixture():
    yield None


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
