#!/usr/bin/env python3
"""The in-process backend (`-b memory`) with no Redis at all, and the
in-process limiter standing in for a dead Redis (`failure_mode: local`),
next to `open` and `closed` (docs/API.md, docs/operations.md, docs/ALGORITHMS-CHOOSING.md).

- `-b memory` with `-r` at a closed port (and, separately, at a listener that
  records connections): ready, enforcing, never touching Redis;
- `-w 4`: four workers share one store: 400 concurrent checks from 40
  keep-alive connections on one key of limit 100 -> exactly 100 allowed, for
  every algorithm (long windows, so nothing refills meanwhile);
- 20k distinct keys: RSS grows by less than 64 MiB, every key is remembered,
  the daemon stays healthy;
- the redis backend with Redis stopped: `local` decides with the limit
  enforced and marks every answer degraded; `open` allows (degraded: the
  policy's limits as configured in the body and RateLimit-Policy, nothing a
  count would say); `closed` answers 503 {"error": "backend unavailable", the
  policy, its limits} with RateLimit-Policy and Retry-After: 1.
"""

import contextlib
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post, rss_kib  # noqa: E402

ALGOS = ["fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"]
SHORT = {"fixed_window": "fw", "sliding_window_log": "swl", "sliding_window_counter": "swc",
         "token_bucket": "tb", "gcra": "gcra"}
HOUR = 3600 * 1000
DAY = 24 * HOUR

THREADS = 40
PER_THREAD = 10
CLIMIT = 100
DISTINCT = 20000
WARMUP = 2000
RSS_BOUND_KIB = 64 * 1024 * (1 if H.RSS_MEANINGFUL else 64)


def lim(algo, limit, window):
    c = {"algorithm": algo, "limit": limit, "window": window}
    if algo in ("token_bucket", "gcra"):
        c["burst"] = limit
    return c


def policies():
    pols = []
    for a in ALGOS:
        pols.append({"name": "p3_" + SHORT[a], "limits": [lim(a, 3, HOUR)]})
        # fixed_window 1 h is plenty for a few seconds; the others a day
        pols.append({"name": "c_" + SHORT[a], "limits": [lim(a, CLIMIT, HOUR if a == "fixed_window" else DAY)]})
    # every algorithm at once: each distinct key holds five states
    pols.append({"name": "wide", "limits": [lim(a, 5, HOUR) for a in ALGOS]})
    return pols


def config(failure_mode="closed", timeout="2s"):
    return {"identity": ["body"], "failure_mode": failure_mode,
            "redis": {"timeout": timeout, "connect_timeout": "300ms"},
            "policies": policies()}


QUOTA_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy",
                 "ratelimit", "retry-after")


def limit3(d, policy, key, degraded):
    """limit 3: 200 (2), 200 (1), 200 (0), 429, 429 with quota headers."""
    for i, rem in enumerate((2, 1, 0, 0, 0)):
        allowed = i < 3
        st, h, b = post(d, {"key": key, "policy": policy})
        what = "%s check %d" % (policy, i + 1)
        H.expect_json(st, h, b, 200 if allowed else 429, what)
        eq(b.get("allowed"), allowed, what + ": allowed")
        eq(b.get("policy"), policy, what + ": policy")
        eq(b.get("remaining"), rem, what + ": remaining")
        eq(b.get("limit"), 3, what + ": limit")
        if degraded:
            eq(b.get("degraded"), True, what + ": degraded")
        else:
            check(b.get("degraded") is not True, "%s: degraded %r without any failure", what, b.get("degraded"))
        eq(h.get("x-ratelimit-limit"), "3", what + ": X-RateLimit-Limit")
        eq(h.get("x-ratelimit-remaining"), str(rem), what + ": X-RateLimit-Remaining")
        if allowed:
            eq(b.get("retry_after_ms"), 0, what + ": retry_after_ms")
            check("retry-after" not in h, "%s: Retry-After on a 200", what)
        else:
            ra, rs = b.get("retry_after_ms"), b.get("reset_ms")
            # a sliding window counter frees at most two windows on (ALGORITHMS-CHOOSING.md)
            top = 2 * HOUR if policy == "p3_swc" else HOUR
            check(H.is_int(rs) and 1 <= rs <= top, "%s: reset_ms %r outside 1..%d", what, rs, top)
            check(H.is_int(ra) and 1 <= ra <= rs, "%s: retry_after_ms %r outside 1..reset_ms %r", what, ra, rs)
            eq(h.get("retry-after"), str(max(1, H.ceil_s(ra))), what + ": Retry-After")


# ------------------------------------------------------ memory, no Redis

def t_ready(ctx):
    d = ctx["d"]
    check(not H.port_open(ctx["closed_port"]), "the -r port %d is open (test premise)", ctx["closed_port"])
    st, h, b = H.request(d.port, "GET", "/healthz")
    H.expect_json(st, h, b, 200, "/healthz")
    st, h, b = H.request(d.port, "GET", "/readyz")
    H.expect_json(st, h, b, 200, "/readyz with -b memory and -r at a closed port")


def t_enforced(ctx):
    for a in ALGOS:
        limit3(ctx["d"], "p3_" + SHORT[a], "enforced", degraded=False)
    # a second caller has its own count
    st, h, b = post(ctx["d"], {"key": "enforced-2", "policy": "p3_fw"})
    H.expect_json(st, h, b, 200, "another key")
    eq(b.get("remaining"), 2, "another key: remaining")


def t_threads(ctx):
    pid = ctx["d"].proc.pid
    n = len(os.listdir("/proc/%d/task" % pid))
    check(n >= 4, "-w 4 but the process has %d threads", n)


def hammer(port, body, threads, per_thread):
    """`threads` keep-alive clients, `per_thread` checks each, all started
    together: ([(status, body)], [errors])."""
    results, errors = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker(i):
        mine = []
        try:
            with H.Client(port) as c:
                barrier.wait(timeout=H.HTTP_TIMEOUT)
                for _ in range(per_thread):
                    st, _, b = c.request("POST", "/check", body)
                    mine.append((st, b))
                check(c.same_connection(), "client %d: the connection did not stay open", i)
        except Exception as e:   # noqa: BLE001 - reported below
            with lock:
                errors.append("thread %d: %s: %s" % (i, type(e).__name__, e))
        with lock:
            results.extend(mine)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60 * H.SLOW)
    check(not any(t.is_alive() for t in ts), "some client threads hang")
    return results, errors


def t_concurrent(algo):
    def run(ctx):
        d = ctx["d"]
        policy = "c_" + SHORT[algo]
        res, errors = hammer(d.port, {"key": "hot-" + SHORT[algo], "policy": policy}, THREADS, PER_THREAD)
        check(not errors, "%d client errors: %s", len(errors), "; ".join(errors[:5]))
        eq(len(res), THREADS * PER_THREAD, "answers")
        other = [(st, b) for st, b in res if st not in (200, 429)]
        check(not other, "answers other than 200/429: %r", other[:3])
        allowed = [b for st, b in res if st == 200]
        eq(len(allowed), CLIMIT, "allowed checks of %d on one key of limit %d" % (len(res), CLIMIT))
        rems = sorted(b.get("remaining") for b in allowed)
        eq(rems, list(range(CLIMIT)), "the remaining of the allowed checks (each unit handed out once)")
        bad = [b for st, b in res if st == 429 and (b.get("remaining") != 0 or b.get("allowed") is not False)]
        check(not bad, "denials with remaining != 0: %r", bad[:3])
        # and the key is used up for a later check too
        st, h, b = post(d, {"key": "hot-" + SHORT[algo], "policy": policy})
        H.expect_json(st, h, b, 429, "a check after the storm")
    return run


def t_distinct_keys(ctx):
    d = ctx["d"]
    pid = d.proc.pid

    def run_keys(prefix, n, threads=8):
        errors, bad = [], []
        lock = threading.Lock()

        def worker(t):
            try:
                with H.Client(d.port) as c:
                    for i in range(t, n, threads):
                        st, _, b = c.request("POST", "/check", {"key": "%s-%d" % (prefix, i), "policy": "wide"})
                        rems = [e.get("remaining") for e in b.get("limits", [])] if isinstance(b, dict) else None
                        if st != 200 or rems != [4] * 5:
                            with lock:
                                bad.append((i, st, b))
            except Exception as e:   # noqa: BLE001
                with lock:
                    errors.append("thread %d: %s: %s" % (t, type(e).__name__, e))

        ts = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120 * H.SLOW)
        check(not any(t.is_alive() for t in ts), "client threads hang")
        check(not errors, "%d client errors: %s", len(errors), "; ".join(errors[:3]))
        check(not bad, "%d checks of fresh keys not 200 with remaining 4 on all five limits, e.g. %r",
              len(bad), bad[:2])

    run_keys("warm", WARMUP)
    before = rss_kib(pid)
    t0 = time.monotonic()
    run_keys("k", DISTINCT)
    after = rss_kib(pid)
    took = time.monotonic() - t0
    grow = after - before
    check(grow < RSS_BOUND_KIB, "VmRSS grew by %d KiB (%d -> %d) over %d distinct keys, bound %d KiB",
          grow, before, after, DISTINCT, RSS_BOUND_KIB)
    check(d.alive(), "the daemon died")
    # the keys are really kept (the bound is not met by forgetting them)
    for i in range(0, DISTINCT, DISTINCT // 20):
        st, h, b = post(d, {"key": "k-%d" % i, "policy": "wide"})
        H.expect_json(st, h, b, 200, "second check of key k-%d" % i)
        eq([e.get("remaining") for e in b.get("limits", [])], [3] * 5, "k-%d: remaining of the 5 limits" % i)
    for path in ("/healthz", "/readyz"):
        st, h, b = H.request(d.port, "GET", path)
        H.expect_json(st, h, b, 200, path + " after %d distinct keys" % DISTINCT)
    limit3(d, "p3_swl", "after-distinct", degraded=False)
    sys.stdout.write("# %d distinct keys in %.1f s, VmRSS %d -> %d KiB (+%d)\n"
                     % (DISTINCT, took, before, after, grow))


MEM_CASES = [
    ("-b memory, -r at a closed port: /healthz and /readyz 200", t_ready),
    ("-b memory: limit 3 per hour -> 200, 200, 200, 429, 429 for every algorithm", t_enforced),
    ("-w 4: the process runs at least 4 threads", t_threads),
] + [("-w 4: 400 concurrent checks from 40 keep-alive connections, one key of limit 100 -> "
      "exactly 100 allowed, each unit once [%s]" % a, t_concurrent(a)) for a in ALGOS] + [
    ("%d distinct keys: VmRSS grows < %d MiB, every key kept, still healthy"
     % (DISTINCT, RSS_BOUND_KIB // 1024), t_distinct_keys),
]


# --------------------------------------- memory, -r at a recording listener

def t_listener_untouched(ctx):
    d, lst = ctx["d"], ctx["listener"]
    st, h, b = H.request(d.port, "GET", "/readyz")
    H.expect_json(st, h, b, 200, "/readyz")
    limit3(d, "p3_tb", "sentinel", degraded=False)
    time.sleep(0.5)   # give a would-be (re)connect the time to show
    eq(lst.count(), 0, "connections to the -r address of a -b memory daemon")


SENTINEL_CASES = [
    ("-b memory never connects to -r (a listener counting connections)", t_listener_untouched),
]


class Listener:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.n = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.n += 1
            c.close()

    def count(self):
        return self.n

    def close(self):
        self.stop = True
        self.t.join(timeout=2)
        self.sock.close()


# ------------------------------------------------- redis backend, Redis down

def t_before_stop(ctx):
    for mode, d in ctx["daemons"].items():
        # one key per daemon: the three share Redis, hence counts
        st, h, b = post(d, {"key": "before-" + mode, "policy": "p3_fw"})
        H.expect_json(st, h, b, 200, "failure_mode %s with Redis up" % mode)
        check(b.get("degraded") is not True, "failure_mode %s: degraded with Redis up: %r", mode, b)
        eq(b.get("remaining"), 2, "failure_mode %s: remaining" % mode)
    n = ctx["redis"].cli("DBSIZE")
    check(n.isdigit() and int(n) >= 1, "DBSIZE %r: the checks did not reach Redis", n)


def t_stop_redis(ctx):
    ctx["redis"].stop()
    check(not ctx["redis"].ping(), "Redis still answers after stop()")
    deadline = time.monotonic() + 10 * H.SLOW
    pending = dict(ctx["daemons"])
    while pending and time.monotonic() < deadline:
        for mode, d in list(pending.items()):
            st, h, b = H.request(d.port, "GET", "/readyz")
            if st == 503:
                del pending[mode]
        time.sleep(0.05)
    check(not pending, "/readyz still not 503 %d s after Redis stopped: %s", 10 * H.SLOW, sorted(pending))


def t_local(ctx):
    d = ctx["daemons"]["local"]
    for a in ALGOS:
        limit3(d, "p3_" + SHORT[a], "local-" + SHORT[a], degraded=True)


# What the configuration says of p3_fw and wide, all a failed check can say.
P3_FW = [{"algorithm": "fixed_window", "limit": 3, "window_ms": 3600000}]
WIDE = [dict({"algorithm": a, "limit": 5, "window_ms": 3600000},
             **({"burst": 5} if a in ("token_bucket", "gcra") else {})) for a in ALGOS]
WIDE_POLICY = ", ".join('"wide/%d";q=5;w=3600' % i for i in range(len(ALGOS)))


def expect_known_only(h, b, policy, limits, rl_policy, what, status):
    """The policy's configuration, in the body and RateLimit-Policy; none of
    the numbers only a count gives (remaining, resets, the binding limit)."""
    eq(b.get("policy"), policy, what + ": policy")
    eq(b.get("limits"), limits, what + ": limits, as configured")
    for k in ("limit", "remaining", "reset_ms", "retry_after_ms"):
        check(k not in b, "%s: %s %r in an answer nobody counted", what, k, b.get(k))
    eq(h.get("ratelimit-policy"), rl_policy, what + ": RateLimit-Policy")
    counted = [n for n in QUOTA_HEADERS if n in h and n not in ("ratelimit-policy", "retry-after")]
    check(not counted, "%s: quota headers %r on an answer nobody counted", what, counted)
    eq(h.get("retry-after"), "1" if status == 503 else None, what + ": Retry-After")


def t_open(ctx):
    d = ctx["daemons"]["open"]
    for i in range(6):   # twice the limit: never denied
        st, h, b = post(d, {"key": "open-1", "policy": "p3_fw"})
        H.expect_json(st, h, b, 200, "open, check %d" % (i + 1))
        eq(b.get("allowed"), True, "open, check %d: allowed" % (i + 1))
        eq(b.get("degraded"), True, "open, check %d: degraded" % (i + 1))
        expect_known_only(h, b, "p3_fw", P3_FW, '"p3_fw";q=3;w=3600', "open, check %d" % (i + 1), 200)
    st, h, b = post(d, {"key": "open-1", "policy": "wide"})
    H.expect_json(st, h, b, 200, "open, a policy of five limits")
    expect_known_only(h, b, "wide", WIDE, WIDE_POLICY, "open, five limits", 200)


def t_closed(ctx):
    d = ctx["daemons"]["closed"]
    for i in range(3):
        st, h, b = post(d, {"key": "closed-1", "policy": "p3_fw"})
        H.expect_json(st, h, b, 503, "closed, check %d" % (i + 1))
        eq(b.get("error"), "backend unavailable", "closed, check %d: error" % (i + 1))
        check("allowed" not in b, "closed, check %d: allowed in a 503: %r", i + 1, b)
        expect_known_only(h, b, "p3_fw", P3_FW, '"p3_fw";q=3;w=3600', "closed, check %d" % (i + 1), 503)
    st, h, b = post(d, {"key": "closed-1", "policy": "wide"})
    H.expect_json(st, h, b, 503, "closed, a policy of five limits")
    expect_known_only(h, b, "wide", WIDE, WIDE_POLICY, "closed, five limits", 503)
    # status and headers only (an auth subrequest): the same headers
    st, h, raw = H.request(d.port, "POST", "/check?body=none", {"key": "closed-1", "policy": "p3_fw"})
    eq((st, h.get("ratelimit-policy"), h.get("retry-after"), raw), (503, '"p3_fw";q=3;w=3600', "1", ""),
       "closed, ?body=none")


DOWN_CASES = [
    ("local/open/closed with Redis up: decided by Redis, not degraded", t_before_stop),
    ("Redis stopped: /readyz 503 on all three", t_stop_redis),
    ("failure_mode local, Redis down: limit 3 -> 3 allowed then 429, all degraded, every algorithm", t_local),
    ("failure_mode open, Redis down: 200 degraded beyond the limit; the limits as configured, "
     "RateLimit-Policy, no counted numbers", t_open),
    ("failure_mode closed, Redis down: 503 backend unavailable with the policy, its limits, "
     "RateLimit-Policy and Retry-After: 1", t_closed),
]


# ------------------------------------------------------------------ main

def group(t, cases, setup):
    """Run `cases` with the context `setup` yields; a broken setup fails them all."""
    try:
        with setup() as ctx:
            for name, fn in cases:
                t.run(name, fn, ctx)
    except Exception as e:   # noqa: BLE001
        t.fail_rest(cases, "fixture failed: %s: %s" % (type(e).__name__, e))


@contextlib.contextmanager
def mem_setup():
    port = H.free_port()
    check(not H.port_open(port), "port %d is not closed", port)
    with H.Daemon(config(), backend="memory", workers=4, args=["-r", "redis://127.0.0.1:%d/0" % port]) as d:
        yield {"d": d, "closed_port": port}


@contextlib.contextmanager
def sentinel_setup():
    lst = Listener()
    try:
        with H.Daemon(config(), backend="memory", args=["-r", "redis://127.0.0.1:%d/0" % lst.port]) as d:
            yield {"d": d, "listener": lst}
    finally:
        lst.close()


@contextlib.contextmanager
def down_setup():
    with H.Redis() as r, contextlib.ExitStack() as stack:
        ds = {}
        for mode in ("local", "open", "closed"):
            # 2 s: "decided by Redis, not degraded" with Redis up must not hinge
            # on a loaded host (or valgrind) answering within 300 ms; once Redis
            # is stopped the connection is refused, so no check waits for it
            ds[mode] = stack.enter_context(H.Daemon(config(failure_mode=mode, timeout="2s"), redis=r))
        yield {"redis": r, "daemons": ds}


def main():
    t = H.Tests(timeout=170)
    group(t, MEM_CASES, mem_setup)
    group(t, SENTINEL_CASES, sentinel_setup)
    group(t, DOWN_CASES, down_setup)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
