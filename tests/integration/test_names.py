#!/usr/bin/env python3
"""Redis addresses given as host names (redis_conn.c): hiredis would resolve
them with a blocking getaddrinfo, so the daemon resolves them with evdns on
its event loop, under redis.connect_timeout.  Here: a standalone URL, the
sentinels and the cluster seeds named `localhost` (resolved from /etc/hosts)
are decided in Redis end to end; a name that does not resolve leaves the
daemon up, not ready, answering by failure_mode at once and logging the
outage once."""

import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

POLICY = {"name": "named", "limits": [{"algorithm": "fixed_window", "limit": 3, "window": "60s"}]}


def config(redis):
    return {"identity": ["body"], "failure_mode": "closed",
            "redis": dict({"timeout": "2s"}, **redis), "policies": [POLICY]}


def limit_of_three(d, r, who):
    """3 allowed, then 429; the count is the one Redis holds."""
    for i in range(3):
        st, _, b = H.request(d.port, "POST", "/check", {"key": who})
        eq((st, b.get("allowed"), b.get("degraded", False)), (200, True, False), "check %d" % i)
    st, _, b = H.request(d.port, "POST", "/check", {"key": who})
    eq((st, b.get("allowed")), (429, False), "the fourth check")
    v = H.state_numbers(r.cli, "{rl:named:k:%s}:fw:60000" % who)     # count, start
    eq(v[0] if v else None, 3, "the count in Redis")


def t_url_by_name(_):
    with H.Redis(topology="standalone") as r:
        with H.Daemon(config({"url": "redis://localhost:%d" % r.port}), ready=True) as d:
            limit_of_three(d, r, "url-by-name")


def t_sentinels_by_name(_):
    with H.Redis(topology="sentinel") as r:
        nodes = ["localhost:%d" % s.port for s in r.sentinels]
        cfg = config({"sentinel": {"master": r.MASTER, "nodes": nodes}})
        with H.Daemon(cfg, ready=True) as d:
            H.ready_everywhere(d.port)
            limit_of_three(d, r, "sentinel-by-name")


def t_cluster_seed_by_name(_):
    with H.Redis(topology="cluster") as r:
        cfg = config({"cluster": ["localhost:%d" % r.master_ports()[0]]})
        with H.Daemon(cfg, ready=True) as d:
            H.ready_everywhere(d.port)
            limit_of_three(d, r, "cluster-seed-by-name")


def t_unresolvable(_):
    cfg = config({"url": "redis://no-such-host.invalid:6379", "connect_timeout": "500ms"})
    with H.Daemon(cfg, ready=False) as d:
        deadline = time.monotonic() + 5 * H.SLOW
        while True:
            st, _, b = H.request(d.port, "GET", "/readyz")
            if st == 503 and "resolve" in str(b.get("reason", "")):
                break
            check(time.monotonic() < deadline, "/readyz does not say the name did not resolve: "
                  "%r %r", st, b)
            time.sleep(0.05)
        t0 = time.monotonic()
        st, _, b = H.request(d.port, "POST", "/check", {"key": "nobody"})
        took = time.monotonic() - t0
        eq(st, 503, "a check while the name does not resolve (failure_mode closed): %r" % (b,))
        check(took < 1.0 * H.SLOW, "the check waited %.3fs instead of failing at once", took)
        time.sleep(1.5)     # several reconnect attempts (backoff from 50 ms)
        st, _, _ = H.request(d.port, "GET", "/healthz")
        eq(st, 200, "GET /healthz after the failed attempts")
        eq(d.log().count("redis unavailable"), 1,
           "\"redis unavailable\" logged once for the outage, not once per attempt")
        eq(d.stop(), 0, "exit status")


CASES = [
    ("redis.url with a host name: resolved on the loop, decided in Redis", t_url_by_name),
    ("sentinels named by host name", t_sentinels_by_name),
    ("a cluster seed named by host name", t_cluster_seed_by_name),
    ("a name that does not resolve: not ready, answered at once, logged once, clean stop",
     t_unresolvable),
]


@contextlib.contextmanager
def fixture():
    yield None


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=180)
