#!/usr/bin/env python3
"""The Redis connection's failures, against real Redis (RL_TOPOLOGY picks
standalone, cluster or sentinel where a case applies to all three):

- error replies are logged once per distinct error, with counts, and every
  one is counted in /metrics (before: one warning per failed batch, 10,541
  lines in 3 s under OOM);
- a master demoted to a replica by a real REPLICAOF (or a URL naming a
  replica) is left: READONLY drops the connection, /readyz says 503 while
  the server is not a master, and checks are decided again once it is
  (before: READONLY on every check, forever, /readyz 200);
- checks that arrive while the first connection is being made wait for it
  (up to redis.timeout) instead of failing at once (before: in closed mode,
  hundreds of 503s in the first milliseconds of a fresh start)."""

import contextlib
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

WORKERS = 2


def policy(limit=1000000):
    return [{"name": "p", "limits": [{"algorithm": "fixed_window", "limit": limit,
                                      "window": "1h"}]}]


def metric(port, name, labels):
    """The value of one sample of GET /metrics (0 when absent)."""
    st, _, body = H.request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    text = body if isinstance(body, str) else body.decode() if isinstance(body, bytes) else str(body)
    m = re.search(r"^%s\{%s\} (\d+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return int(m.group(1)) if m else 0


def wait_for(cond, what, timeout=15.0):
    deadline = time.monotonic() + timeout * H.SLOW
    while True:
        got = cond()
        if got:
            return got
        check(time.monotonic() < deadline, "timed out (%ss) waiting for %s", timeout, what)
        time.sleep(0.05)


def post(d, key):
    return H.request(d.port, "POST", "/check", {"key": key, "policy": "p"})


class Load:
    """POST /check from `threads` keep-alive connections until stop(): the
    statuses seen, with the body's degraded flag."""

    def __init__(self, port, threads=4, prefix="load"):
        self.port, self.prefix = port, prefix
        self.answers, self.errors = [], []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.ts = [threading.Thread(target=self._run, args=(i,), daemon=True)
                   for i in range(threads)]
        for t in self.ts:
            t.start()

    def _run(self, i):
        n = 0
        try:
            with H.Client(self.port) as c:
                while not self.stop_ev.is_set():
                    st, _, b = c.request("POST", "/check",
                                         {"key": "%s-%d-%d" % (self.prefix, i, n % 50),
                                          "policy": "p"})
                    with self.lock:
                        self.answers.append((st, isinstance(b, dict) and b.get("degraded", False)))
                    n += 1
        except Exception as e:  # noqa: BLE001 - reported by stop()
            with self.lock:
                self.errors.append("%s: %s" % (type(e).__name__, e))

    def count(self):
        with self.lock:
            return len(self.answers)

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(timeout=30)
        check(not self.errors, "client errors: %r", self.errors[:3])
        return list(self.answers)


# ------------------------------------------------------------------ cases

def t_error_flood(_):
    """Under OOM every check fails alike: a few log lines, every check counted."""
    with H.Redis() as r:
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(),
               "redis": {"timeout": "2s"}}
        with H.Daemon(cfg, redis=r, workers=WORKERS) as d:
            eq(post(d, "before")[0], 200, "a check before OOM")
            before = metric(d.port, "ratelimitd_redis_errors_total", 'kind="oom"')
            r.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
            r.cli("CONFIG", "SET", "maxmemory", "1")
            try:
                load = Load(d.port, prefix="oom")
                t0 = time.monotonic()
                # at least 3 s and 300 failed checks: the defect's scale
                while time.monotonic() - t0 < 3.0 or load.count() < 300:
                    check(time.monotonic() - t0 < 30 * H.SLOW, "only %d checks in 30 s", load.count())
                    time.sleep(0.1)
                answers = load.stop()
            finally:
                r.cli("CONFIG", "SET", "maxmemory", "0")
            failed = sum(1 for st, _ in answers if st == 503)
            check(failed >= 300, "only %d of %d checks failed under OOM: %r", failed, len(answers),
                  sorted({a for a in answers}))
            wait_for(lambda: post(d, "after-%d" % time.monotonic_ns())[0] == 200,
                     "a check decided again after OOM")
            counted = metric(d.port, "ratelimitd_redis_errors_total", 'kind="oom"') - before
            check(counted >= failed, "ratelimitd_redis_errors_total{kind=\"oom\"} grew by %d, "
                  "%d checks failed", counted, failed)
            # one line when it starts and one with the count when it ends, per
            # worker (per node on a cluster): a handful, never one per check
            def oom_lines():
                return [ln for ln in d.log().splitlines() if "OOM" in ln]
            ended = wait_for(lambda: [ln for ln in oom_lines() if "errors ended" in ln],
                             "the line that ends the run of OOM errors")
            lines = oom_lines()
            print("# OOM: %d checks failed in %.1f s, %d log lines, metric %d"
                  % (failed, time.monotonic() - t0, len(lines), counted))
            nodes = 3 if r.topology == "cluster" else 1
            check(len(lines) <= 2 * WORKERS * nodes,
                  "%d log lines for %d OOM errors:\n%s", len(lines), failed, "\n".join(lines[:10]))
            # a worker's run ends with its next good reply: the one that
            # answered the check above has said how many it saw
            counts = [int(re.search(r"count=(\d+)", ln).group(1)) for ln in ended]
            check(max(counts) > 1, "the ending lines count no repeats: %r", ended)


CASES = [
    ("OOM for 3 s: a handful of log lines with counts, every error in /metrics", t_error_flood),
]


@contextlib.contextmanager
def fixture():
    yield None


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=240)
