#!/usr/bin/env python3
"""GET /readyz speaks for the whole daemon, not for the worker that happens to
accept the probe: with -w 4 and one worker unable to connect (Redis
maxclients lets three in), every probe says 503 and names that worker; when
it connects, every probe says 200.  (Before, a probe answered for its own
worker only, so a Kubernetes probe flapped.)"""

import contextlib
import os
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
                time.sleep(0.3)             # past one publishing interval
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


CASES = [
    ("-w 4, one worker not connected: every probe 503 naming it; connected: every probe 200",
     t_one_worker_down),
]


@contextlib.contextmanager
def fixture():
    yield None


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
