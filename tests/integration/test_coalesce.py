#!/usr/bin/env python3
"""Coalescing: the checks a worker reads in one event-loop pass go to Redis as
one script call (redis.coalesce, default 64), decided in order inside it.

What must hold: fewer script calls than checks under concurrency, limits still
exact (the remaining values of one key's allowed checks are all different,
as with one call per check), and `redis.coalesce: 1` means one call per check.
Runs under every RL_TOPOLOGY (on Cluster a call holds the checks of one hash
slot, so the hot key is what coalesces there).
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, note  # noqa: E402

THREADS = 32
LIMIT = 200
PER_THREAD = 20


def config(coalesce=None):
    # the deny cache off: a denial it answers would also spare a script call
    c = {"identity": ["body"], "failure_mode": "closed", "redis": {"timeout": "5s"},
         "deny_cache": False,
         "policies": [{"name": "p", "limits": [
             {"algorithm": "sliding_window_log", "limit": LIMIT, "window": "1h"}]}]}
    if coalesce is not None:
        c["redis"]["coalesce"] = coalesce
    return c


def script_calls(r):
    """FCALL + EVALSHA + EVAL calls Redis ran since the last CONFIG RESETSTAT."""
    return H.commandstat_calls(r, "fcall", "evalsha", "eval")


def blast(port, body_fn):
    """THREADS keep-alive clients at once, client i sending body_fn(i, n) for
    n < PER_THREAD; [(body, status, answer, port)]."""
    bodies = [body_fn(i, n) for n in range(PER_THREAD) for i in range(THREADS)]
    return H.blast([port], bodies, THREADS)


def allowed_remaining(results):
    rems, other = [], []
    for _, st, ans, _ in results:
        if st == 200 and ans.get("allowed") is True and "degraded" not in ans:
            rems.append(ans["remaining"])
        elif not (st == 429 and ans.get("allowed") is False):
            other.append((st, ans))
    check(not other, "%d answers neither 200 allowed nor 429 denied, first %r", len(other), other[:1])
    return sorted(rems)


def t_hot_key(r, d, key):
    """One key from every client: exact, and the checks share calls."""
    r.cli("CONFIG", "RESETSTAT")
    res = blast(d.port, lambda i, n: {"key": key, "policy": "p"})
    calls = script_calls(r)
    rems = allowed_remaining(res)
    eq(rems, list(range(LIMIT)), "remaining values of the %d allowed checks" % LIMIT)
    note("%d checks of one key in %d script calls (%.1f checks per call)",
           len(res), calls, len(res) / max(calls, 1))
    check(0 < calls < len(res), "%d script calls for %d concurrent checks: nothing coalesced",
          calls, len(res))


def t_many_keys(r, d, prefix):
    """Distinct keys (a few checks each): every key exact, never more calls than checks."""
    nkeys = THREADS * 2
    r.cli("CONFIG", "RESETSTAT")
    res = blast(d.port, lambda i, n: {"key": "%s-%d" % (prefix, (i * PER_THREAD + n) % nkeys),
                                      "policy": "p"})
    calls = script_calls(r)
    per = {}
    for body, st, ans, _ in res:
        check(st == 200 and ans.get("allowed") is True, "key %s: %r %r", body["key"], st, ans)
        per.setdefault(body["key"], []).append(ans["remaining"])
    want = THREADS * PER_THREAD // nkeys
    for k, rems in per.items():
        eq(sorted(rems), list(range(LIMIT - want, LIMIT)), "remaining values of %s" % k)
    note("%d checks over %d keys in %d script calls", len(res), nkeys, calls)
    check(0 < calls <= len(res), "%d script calls for %d checks", calls, len(res))


def t_off(r, key):
    """redis.coalesce 1: exactly one script call per check."""
    with H.Daemon(config(coalesce=1), redis=r) as d:
        r.cli("CONFIG", "RESETSTAT")
        res = blast(d.port, lambda i, n: {"key": key, "policy": "p"})
        calls = script_calls(r)
        eq(allowed_remaining(res), list(range(LIMIT)), "remaining values (coalescing off)")
        eq(calls, len(res), "script calls with redis.coalesce 1")


def t_max_pending():
    """redis.max_pending counts checks, not script calls: with Redis stopped,
    40 concurrent checks and a cap of 16, at most 16 wait for their deadline
    (in however few coalesced calls) and the rest fail fast.  A check that took
    half the timeout or more waited; the timeout is long (and scaled by
    harness.SLOW) so that 40 fresh connections on a loaded host, or under
    valgrind, cannot make a fast failure look like a wait."""
    tmo = 3.0 * H.SLOW
    cfg = config()
    cfg["redis"].update({"timeout": "%dms" % (tmo * 1000), "max_pending": 16})
    with H.Redis(topology="standalone") as r, H.Daemon(cfg, redis=r) as d:
        results, lock = [], threading.Lock()

        def one(i):
            t0 = time.monotonic()
            st, _, ans = H.request(d.port, "POST", "/check", {"key": "mp-%d" % i, "policy": "p"})
            with lock:
                results.append((time.monotonic() - t0, st))

        r.pause()
        try:
            ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(40)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=tmo + H.HTTP_TIMEOUT)
        finally:
            r.resume()
        eq(len(results), 40, "answers")
        check(all(st == 503 for _, st in results), "statuses %r", sorted({st for _, st in results}))
        waited = [dt for dt, _ in results if dt >= tmo / 2]
        note("%d of 40 checks waited for the stopped Redis (max_pending 16)", len(waited))
        check(len(waited) <= 16, "%d checks waited (max_pending 16)", len(waited))
        check(len(results) - len(waited) >= 24, "only %d failed fast", len(results) - len(waited))


def t_config():
    path = H.write_config(config(coalesce=0))
    rc, out, err = H.run_cli(["-t", "-c", path])
    check(rc != 0 and "redis.coalesce" in out + err, "-t accepted redis.coalesce 0: %r", out + err)


def main():
    t = H.Tests(timeout=180)
    t.run("-t refuses redis.coalesce 0", t_config)
    with H.Redis() as r:
        with H.Daemon(config(), redis=r) as d:
            t.run("one hot key, %d clients: exact, fewer script calls than checks" % THREADS,
                  t_hot_key, r, d, "hot")
            t.run("%d keys at once: each exact" % (THREADS * 2), t_many_keys, r, d, "many")
        t.run("redis.coalesce 1: one script call per check, exact", t_off, r, "hot-off")
    t.run("redis.max_pending counts checks in coalesced calls", t_max_pending)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
