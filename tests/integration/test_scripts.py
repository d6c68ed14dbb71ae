#!/usr/bin/env python3
"""The check script inside a coalesced batch: each check succeeds or fails on
its own, as separate calls would.

A poisoned batch: one check's key holds a value of the wrong type (a hash
where fixed_window keeps a string: WRONGTYPE).  The daemon is stopped
(SIGSTOP) while every client sends its check on an already open keep-alive
connection, then continued, so that it reads them all in one event-loop pass
and sends them as one script call (asserted: exactly one EVALSHA for the
batch, else the test proves nothing).  Then the bad check alone fails (503 in
failure_mode closed, a degraded allow in open) and every other check of the
batch is answered 200 and counted exactly once in Redis.

Admin operations in the script itself, driven directly with explicit times
(EVAL of the embedded source): a block denies and consumes nothing (a forced
check still lands), give back, reset of one limit or all (and the block), a
bad limit index failing that check alone; and a block key set in Redis is
seen by the daemon (429, Retry-After at least the block) and its removal
too.

Runs under every RL_TOPOLOGY: on Cluster a script call holds the checks of one
hash slot, so the batch's identities are chosen to share one.
"""

import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, script_calls as evalsha_calls  # noqa: E402

N = 8           # checks in the batch, the bad one among them
BAD = 3         # its place in the batch: checks before and after it
LIMIT = 1000
WINDOW_MS = 60000
SRC = H.lua_check_source().decode()


def _crc16_table():
    t = []
    for b in range(256):
        crc = b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        t.append(crc & 0xFFFF)
    return t


CRC16 = _crc16_table()


def crc16(data):
    """CRC16/XMODEM, Redis Cluster's key hash."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ CRC16[(crc >> 8) ^ b]
    return crc


def same_slot(prefix, n):
    """n identities whose keys share one Cluster hash slot (the hash tag is
    "rl:p:k:<identity>"), the first one prefix-0."""
    want, out, i = None, [], 0
    while len(out) < n:
        ident = "%s-%d" % (prefix, i)
        slot = crc16(("rl:p:k:" + ident).encode()) % 16384
        if want is None:
            want = slot
        if slot == want:
            out.append(ident)
        i += 1
    return out


def config(mode):
    # the deny cache off: nothing answered without Redis
    return {"identity": ["body"], "failure_mode": mode, "deny_cache": False,
            "redis": {"timeout": "10s"},
            "policies": [{"name": "p", "limits": [
                {"algorithm": "fixed_window", "limit": LIMIT, "window": "60s"}]}]}


def rkey(ident):
    return "{rl:p:k:%s}:fw:%d" % (ident, WINDOW_MS)


def count(r, ident):
    v = H.state_numbers(r.cli, rkey(ident))       # count, start
    return v[0] if v else 0


def post(ident):
    body = json.dumps({"key": ident, "policy": "p"}).encode()
    return (b"POST /check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def one_batch(r, d, idents):
    """Every check of idents in one script call: [(status, answer)]."""
    conns = [H.RawConn(d.port) for _ in idents]
    try:
        # open and accepted first: a warm-up request on each connection
        for c in conns:
            c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            st, _, _ = c.read_response()
            eq(st, 200, "healthz on a fresh connection")
        r.cli("CONFIG", "RESETSTAT")
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            for c, ident in zip(conns, idents):
                c.send(post(ident))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        out = []
        for c in conns:
            st, _, body = c.read_response()
            out.append((st, json.loads(body) if body else None))
    finally:
        for c in conns:
            c.close()
    return out


def t_poisoned(r, mode, tries=5):
    with H.Daemon(config(mode), redis=r, workers=1) as d:
        for attempt in range(tries):
            idents = same_slot("%s%d" % (mode, attempt), N)
            bad = idents[BAD]
            r.cli("HSET", rkey(bad), "not", "a counter")
            res = one_batch(r, d, idents)
            calls = evalsha_calls(r)
            if calls != 1:
                # the daemon read them in more than one pass: try again
                print("# attempt %d: %d checks in %d script calls, again" % (attempt, N, calls), flush=True)
                continue
            for i, (st, ans) in enumerate(res):
                if i == BAD:
                    if mode == "closed":
                        eq(st, 503, "the bad check (WRONGTYPE), failure_mode closed: %r" % (ans,))
                    else:
                        check(st == 200 and ans.get("allowed") is True and ans.get("degraded"),
                              "the bad check (WRONGTYPE), failure_mode open: %r %r", st, ans)
                    continue
                check(st == 200 and ans.get("allowed") is True and not ans.get("degraded"),
                      "check %d of the batch (the bad one is %d): %r %r", i, BAD, st, ans)
                eq(ans.get("remaining"), LIMIT - 1, "remaining of check %d" % i)
                eq(count(r, idents[i]), 1, "Redis count of check %d's key" % i)
            eq(r.cli("TYPE", rkey(bad)), "hash", "the bad key, untouched")
            return
        check(False, "the %d checks never went in one script call in %d attempts" % (N, tries))


# ---- admin operations, the script driven directly ---------------------------

T = 1700000000000000            # the script's clock, us
FW, TB, BLOCK = "{s:adm}:fw:60000", "{s:adm}:tb:60000", "{s:adm}:block"
SPEC = "fw 10 60000 0 tb 10 60000 10"


def script(r, keys, now, *args):
    """One EVAL of the check script: its reply as a list (ints, or error text)."""
    # redis-cli prints an error element, then an empty line
    out = [x for x in r.cli("EVAL", SRC, len(keys), *keys, now, *args).split("\n") if x]
    return [int(x) if re.match(r"^-?\d+$", x) else x for x in out]


def one(r, now, cost, *extra):
    """The policy SPEC for {s:adm}, one check: [allowed, rem, reset, retry] x 2.
    ARGV: now, n, then spec, cost+flags, block key, admin arguments."""
    return script(r, [FW, TB], now, 1, SPEC, cost, BLOCK, *extra)


def t_script_admin(r):
    r.cli("DEL", FW, TB, BLOCK)
    a = one(r, T, 3)
    eq(a[0], 1, "a check of 3: %r" % a)
    eq((a[1], a[4]), (7, 7), "remaining after 3")
    a = one(r, T, "0b", 60000)
    eq(a[0], -60000, "a block of 60 s answers -blocked_ms: %r" % a)
    eq((a[1], a[4]), (7, 7), "the block consumes nothing")
    a = one(r, T + 1000000, 1)
    eq(a[0], -59000, "a check 1 s into the block: %r" % a)
    eq((a[1], a[4]), (7, 7), "a blocked check consumes nothing")
    eq(H.state_numbers(r.cli, FW)[0], 3, "the fixed window's count while blocked")
    a = one(r, T + 1000000, "2f")
    eq((a[0], a[1], a[4]), (-59000, 5, 5), "a forced check lands while blocked: %r" % a)
    # give 4 back, reset the token bucket, lift the block: in that order
    a = one(r, T + 2000000, "-4rb", 1, 0)
    eq((a[0], a[1], a[4]), (1, 9, 10), "give back 4, reset limit 1, lift: %r" % a)
    eq(r.cli("EXISTS", BLOCK), "0", "the block key after the lift")
    eq(r.cli("EXISTS", TB), "0", "the reset limit's key")
    eq(H.state_numbers(r.cli, FW)[0], 1, "the fixed window after giving 4 of 5 back")
    # a limit the policy lacks: that check fails, and wrote nothing
    a = script(r, [FW, TB, "{s:adm}:2:fw:60000", "{s:adm}:2:tb:60000"],
               T + 2000000, 2, SPEC, "-1rb", BLOCK, 2, 5000, SPEC, 1, "{s:adm}:2:block")
    check(isinstance(a[0], str) and "limit index" in a[0], "a bad index: %r", a)
    eq(a[7], 1, "the next check of the batch is decided: %r" % a)
    eq(r.cli("EXISTS", BLOCK), "0", "the failed check set no block")
    eq(H.state_numbers(r.cli, FW)[0], 1, "the failed check gave nothing back")
    # block, then reset everything: no key is left
    eq(one(r, T + 3000000, "0b", 60000)[0], -60000, "blocked again")
    a = one(r, T + 3000000, "0r", -1)
    eq((a[0], a[1], a[4]), (1, 10, 10), "reset of everything: %r" % a)
    eq(r.cli("EXISTS", FW, TB, BLOCK), "0", "keys left after the reset of everything")


def t_daemon_sees_block(r):
    ident = "blocked-" + H.TOPOLOGY
    blk = "{rl:p:k:%s}:block" % ident
    with H.Daemon(config("closed"), redis=r, workers=1) as d:
        st, _, ans = H.request(d.port, "POST", "/check", {"key": ident, "policy": "p"})
        eq(st, 200, "the first check")
        sec, usec = r.cli("TIME").split("\n")
        # the block's end on Redis's clock, as the script writes it
        r.cli("SET", blk, int(sec) * 1000000 + int(usec) + 600 * 1000000, "PX", 600000)
        for _ in range(3):
            st, h, ans = H.request(d.port, "POST", "/check", {"key": ident, "policy": "p"})
            eq(st, 429, "a check of a blocked key: %r" % (ans,))
            check(int(h.get("retry-after", "0")) >= 590, "Retry-After %r under a 600 s block",
                  h.get("retry-after"))
            eq(ans.get("remaining"), LIMIT - 1, "nothing consumed while blocked")
        eq(count(r, ident), 1, "Redis count while blocked")
        r.cli("DEL", blk)
        st, _, ans = H.request(d.port, "POST", "/check", {"key": ident, "policy": "p"})
        eq(st, 200, "the block gone: %r" % (ans,))
        eq(ans.get("remaining"), LIMIT - 2, "remaining after the block")


def main():
    t = H.Tests(timeout=180)
    with H.Redis() as r:
        t.run("a WRONGTYPE key fails alone in its batch (failure_mode closed)",
              t_poisoned, r, "closed")
        t.run("a WRONGTYPE key fails alone in its batch (failure_mode open)",
              t_poisoned, r, "open")
        t.run("block, give back and reset in the script, every number", t_script_admin, r)
        t.run("a block key in Redis: the daemon denies (Retry-After), then not", t_daemon_sees_block, r)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
