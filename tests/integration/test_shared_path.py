#!/usr/bin/env python3
"""What the check path keeps from one check to the next, through the real daemon
and a real Redis: each policy's key suffixes made once (the script call's specs),
a batch's reply read into slots and a kept block (redis_reply.c), the backend's
ops and batches used again (backend_redis.c).  Checks of several policies
coalesced into calls name exactly their keys; a batch of checks of eight limits
each, whose reply outgrows the kept block and arrives in several reads, answers
every number right; checks under way while Redis restarts end once each, and
the ops and batches they leave count the next checks exactly.
"""

import http.client
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, note  # noqa: E402

THREADS = 16


def fw(limit, window):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


EIGHT = [fw(10000 + i, "%dh" % (i + 1)) for i in range(8)]

CONFIG = {
    "identity": ["body"],
    "failure_mode": "closed",
    "deny_cache": False,
    "redis": {"timeout": "5s"},
    "policies": [
        {"name": "a", "limits": [fw(1000, "1m")]},
        {"name": "b", "limits": [fw(1000, "1m"),
                                 {"algorithm": "sliding_window_counter", "limit": 1000,
                                  "window": "1h"}]},
        {"name": "c", "limits": [{"algorithm": "fixed_window", "limit": 1000, "period": "week",
                                  "week_start": "wednesday",
                                  "timezone": "America/Argentina/Buenos_Aires"}]},
        # the same limits as a check of "d" brings them with d's cap: only
        # the cap's key differs
        {"name": "e", "limits": [{"algorithm": "sliding_window_counter", "limit": 50,
                                  "window": "1m"}, fw(100, "1m")]},
        {"name": "d", "request_limits": True, "limits": [fw(1000, "1m")],
         "request_limits_cap": [fw(100, "1m")]},
        {"name": "eight", "limits": EIGHT},
    ],
}

SUFFIXES = {
    "a": [":fw:60000"],
    "b": [":fw:60000", ":swc:3600000"],
    "c": [":fw:week-wednesday@America/Argentina/Buenos_Aires"],
    "e": [":swc:60000", ":fw:60000"],
    "d": [":swc:60000", ":cap-fw:60000"],
}


def body_of(pol, key):
    b = {"key": key, "policy": pol}
    if pol == "d":
        b["limits"] = [{"algorithm": "sliding_window_counter", "limit": 50, "window": "1m"}]
    return b


def redis_keys(r, pattern):
    return set(x for x in r.cli("--scan", "--pattern", pattern).split() if x)


def t_policies_in_one_batch(d, r):
    """Every policy's checks, interleaved, in coalesced calls: each check's keys
    are exactly its policy's, whatever came before it in the call."""
    pols = sorted(SUFFIXES)
    bodies = [body_of(pols[i % len(pols)], "mix-%d" % i) for i in range(THREADS * 10)]
    res = H.blast([d.port], bodies, THREADS)
    want = set()
    for body, st, ans, _ in res:
        check(st == 200 and ans.get("allowed") is True, "%r: %r %r", body, st, ans)
        want |= set("{rl:%s:k:%s}%s" % (body["policy"], body["key"], s)
                    for s in SUFFIXES[body["policy"]])
    got = redis_keys(r, "{rl:*:k:mix-*")
    eq(sorted(got - want), [], "keys in Redis no check should have named")
    eq(sorted(want - got), [], "keys the checks should have named, missing in Redis")


def raw_checks(port, bodies):
    """Every body as POST /check on a connection of its own, all sent before
    any answer is read: the daemon reads them in as few passes as it can, and
    coalesces them.  [(status, answer)]."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=H.HTTP_TIMEOUT)
             for _ in bodies]
    try:
        for c in conns:
            c.connect()
        for c, b in zip(conns, bodies):
            c.request("POST", "/check", body=json.dumps(b),
                      headers={"Content-Type": "application/json"})
        out = []
        for c in conns:
            resp = c.getresponse()
            out.append((resp.status, json.loads(resp.read())))
        return out
    finally:
        for c in conns:
            c.close()


def t_big_batch(d, r):
    """Checks of eight limits from many connections at once, one key: their
    replies outgrow the kept block and come in several reads; every limit's
    remaining values are exactly the counts, none twice."""
    n = 150
    r.cli("CONFIG", "RESETSTAT")
    res = raw_checks(d.port, [{"key": "big", "policy": "eight"}] * n)
    calls = H.commandstat_calls(r, "fcall", "evalsha", "eval")
    bad = [(st, ans) for st, ans in res if st != 200 or ans.get("allowed") is not True]
    check(not bad, "%d of %d checks not allowed, first %r", len(bad), n, bad[:1])
    # the body's "limits" lists each limit's numbers, in the policy's order
    for i, lim in enumerate(EIGHT):
        rems = sorted(ans["limits"][i]["remaining"] for _, ans in res)
        eq(rems, list(range(lim["limit"] - n, lim["limit"])), "remaining values of limit %d" % i)
    note("%d checks of 8 limits in %d script calls", n, calls)
    check(0 < calls < n, "%d script calls for %d checks sent at once: nothing coalesced", calls, n)


def t_restart_mid_batch(d, r):
    """Redis restarted while checks are under way: each is answered once
    (allowed, or refused closed); then a fresh key counts exactly, from the
    ops and batches those checks left."""
    stop = threading.Event()
    out, errors = [], []

    def client(i):
        try:
            with H.Client(d.port) as c:
                n = 0
                while not stop.is_set():
                    st, _, ans = c.request("POST", "/check", {"key": "rs-%d-%d" % (i, n),
                                                              "policy": "b"})
                    out.append((st, ans))
                    n += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("client %d: %s: %s" % (i, type(e).__name__, e))

    ts = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    try:
        H.wait_for(lambda: len(out) >= 50, "50 checks before the restart")
        r.restart()
        seen = len(out)
        H.wait_for(lambda: sum(1 for st, _ in out[seen:] if st == 200) >= 50,
                   "50 checks allowed after the restart", timeout=60)
    finally:
        stop.set()
        for t in ts:
            t.join(H.HTTP_TIMEOUT * 2)
    check(not errors, "clients failed: %s", errors[:3])
    odd = [(st, ans) for st, ans in out
           if not ((st == 200 and ans.get("allowed") is True) or st == 503)]
    check(not odd, "%d answers neither allowed nor 503, first %r", len(odd), odd[:1])
    rems = []
    for _ in range(20):
        st, _, ans = H.post(d, {"key": "after-restart", "policy": "b"})
        check(st == 200, "a check after the restart: %r %r", st, ans)
        rems.append([lim["remaining"] for lim in ans["limits"]])
    eq(rems, [[999 - i, 999 - i] for i in range(20)], "remaining of a fresh key's checks")


CASES = [
    ("checks of six policies in coalesced calls name exactly their keys",
     t_policies_in_one_batch),
    ("a batch of eight-limit checks past the kept reply block: every number exact",
     t_big_batch),
    ("Redis restarted mid-batch: each check answered once, then exact counts",
     t_restart_mid_batch),
]


def fixture():
    return H.redis_and_daemon(CONFIG, workers=1)


if __name__ == "__main__":
    H.suite(CASES, fixture)
