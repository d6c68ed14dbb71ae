#!/usr/bin/env python3
"""The admin API (docs/operations.md, "Admin API"): its own listener (admin_listen), never
the check listener's routes; inspect, reset, block/unblock, reward, penalty on
one caller of one policy, as the check resolves it; bearer token auth; every
action logged and counted; what this daemon's workers and other daemons see
after an action (deny cache, hybrid bound).  Against the real daemon and a
real Redis (RL_TOPOLOGY cluster and sentinel too) and the memory backend."""

import contextlib
import http.client
import json
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post, wait_for  # noqa: E402

HOUR = "1h"
# fw: two limits, so that reset of one is told from reset of all; nothing
# refills within a run (a token every 6 minutes)
FW = {"name": "fw", "limits": [
    {"algorithm": "fixed_window", "limit": 5, "window": HOUR},
    {"algorithm": "token_bucket", "limit": 10, "window": HOUR, "burst": 10}]}
# ipol: identified by the connection's address, as an "ip" identity
IPOL = {"name": "ipol", "identity": ["peer"], "limits": [
    {"algorithm": "fixed_window", "limit": 3, "window": HOUR}]}
# short: a token every 1.5 s (x SLOW), two at most
SHORT = {"name": "short", "limits": [
    {"algorithm": "token_bucket", "limit": 2, "window": "%dms" % (3000 * H.SLOW), "burst": 2}]}
BIG = {"name": "big", "limits": [{"algorithm": "fixed_window", "limit": 100, "window": HOUR}]}
HYBRID_SYNC_MS = 200
HY = {"name": "hy", "mode": "hybrid", "sync_interval": "%dms" % HYBRID_SYNC_MS,
      "limits": [{"algorithm": "fixed_window", "limit": 1000, "window": HOUR}]}
# login: 5 per address, 3 per address + user (issue 24: limits of their own identity)
LOGIN = {"name": "login", "identity": ["forwarded", "peer"], "limits": [
    {"algorithm": "fixed_window", "limit": 5, "window": HOUR},
    {"algorithm": "sliding_window_counter", "limit": 3, "window": HOUR,
     "identity": ["forwarded+body", "peer+body"]}]}
POLICIES = [FW, IPOL, BIG, HY, SHORT, LOGIN]


def config(admin_port=None, **kw):
    cfg = {"identity": ["body"], "redis": {"timeout": "2s"}, "policies": POLICIES}
    if admin_port is not None:
        cfg["admin_listen"] = "127.0.0.1:%d" % admin_port
    cfg.update(kw)
    return cfg


class Admin:
    """A daemon with admin_listen on a loopback port of its own."""

    def __init__(self, redis=None, backend=None, workers=None, **kw):
        self.aport = H.free_port()
        self.d = H.Daemon(config(self.aport, **kw), redis=redis, backend=backend, workers=workers)
        self.port = self.d.port

    def __call__(self, action, body, headers=None):
        return H.request(self.aport, "POST", "/admin/" + action, body, headers)

    def ok(self, action, body, what=None):
        st, h, b = self(action, body)
        H.expect_json(st, h, b, 200, what or action)
        return b

    def close(self):
        self.d.kill()


def remaining(b):
    return [lim["remaining"] for lim in b["limits"]]


def metric(port, action, result):
    return H.metric(port, "ratelimitd_admin_actions_total", {"action": action, "result": result})


# ------------------------------------------------------------------ routes

def t_listeners_apart(a, b, r):
    st, h, body = H.request(a.port, "POST", "/admin/inspect", {"policy": "fw", "key": "x"})
    H.expect_error(st, h, body, 404, what="an admin route on the check port")
    st, h, body = H.request(a.aport, "POST", "/check", {"policy": "fw", "key": "x"})
    H.expect_error(st, h, body, 404, what="POST /check on the admin port")
    st, h, body = H.request(a.aport, "GET", "/metrics")
    H.expect_error(st, h, body, 404, what="GET /metrics on the admin port")
    st, h, body = H.request(a.aport, "GET", "/admin/inspect")
    H.expect_error(st, h, body, 405, what="GET of an admin route")
    eq(h.get("allow"), "POST", "Allow of a 405")


# ------------------------------------------------------------------ actions

def t_inspect_consumes_nothing(a, b, r):
    for _ in range(2):
        eq(post(a.port, {"policy": "fw", "key": "insp"})[0], 200, "check")
    for i in range(3):
        got = a.ok("inspect", {"policy": "fw", "key": "insp"})
        eq(remaining(got), [3, 8], "remaining by inspect #%d" % (i + 1))
        eq(got["blocked_ms"], 0, "blocked_ms of a key never blocked")
        eq((got["action"], got["policy"], got["identity"]), ("inspect", "fw", "k:insp"),
           "what the answer names")
        eq([lim["algorithm"] for lim in got["limits"]], ["fixed_window", "token_bucket"],
           "every limit of the policy")
    st, h, body = post(a.port, {"policy": "fw", "key": "insp"})
    eq(remaining(body), [2, 7], "remaining of the next check (inspect took nothing)")


def t_penalty_and_reward_exact(a, b, r):
    k = {"policy": "fw", "key": "pr"}
    eq(remaining(a.ok("penalty", dict(k, cost=2))), [3, 8], "after a penalty of 2")
    eq(remaining(post(a.port, k)[2]), [2, 7], "the check after it")
    eq(remaining(a.ok("reward", dict(k, cost=1))), [3, 8], "after a reward of 1")
    eq(remaining(a.ok("reward", k)), [4, 9], "a reward without cost gives back 1")
    # fixed window: the count floors at 0; token bucket: tokens cap at burst
    eq(remaining(a.ok("reward", dict(k, cost=50))), [5, 10], "a reward larger than the count")
    # a penalty lands even where it does not fit
    eq(remaining(a.ok("penalty", dict(k, cost=7))), [0, 3], "a penalty beyond the limit")
    st, h, body = post(a.port, k)
    eq(st, 429, "a check after the penalty exhausted the window")


def t_reset_one_and_all(a, b, r):
    k = {"policy": "fw", "key": "rst"}
    a.ok("penalty", dict(k, cost=3))
    eq(remaining(a.ok("reset", dict(k, limit=0))), [5, 7], "reset of limit 0 only")
    eq(remaining(a.ok("reset", dict(k, limit=1))), [5, 10], "then of limit 1")
    a.ok("penalty", dict(k, cost=4))
    eq(remaining(a.ok("reset", k)), [5, 10], "reset of every limit")
    eq(remaining(post(b.port, k)[2]), [4, 9], "the other daemon's next check counts from 0")


def t_ip_identity(a, b, r):
    # the policy identifies by peer address: a check from 127.0.0.1 is ip:127.0.0.1
    for _ in range(3):
        eq(post(a.port, {"policy": "ipol"})[0], 200, "check by address")
    eq(post(a.port, {"policy": "ipol"})[0], 429, "4th check")
    got = a.ok("inspect", {"policy": "ipol", "ip": "::ffff:127.0.0.1"})
    eq((got["identity"], remaining(got)), ("ip:127.0.0.1", [0]),
       "an IPv4-mapped address is the IPv4 caller, as the check types it")
    a.ok("reset", {"policy": "ipol", "ip": "127.0.0.1"})
    eq(post(a.port, {"policy": "ipol"})[0], 200, "a check after the reset of that address")


def t_block_everywhere(a, b, r):
    k = {"policy": "fw", "key": "blk"}
    got = a.ok("block", dict(k, duration="30s"))
    # the bounds leave 10 s for a loaded machine (valgrind) between the block and the checks
    check(20000 < got["blocked_ms"] <= 30000, "blocked_ms after a 30s block: %r", got["blocked_ms"])
    eq(remaining(got), [5, 10], "a block consumes nothing")
    for who, d in (("this daemon", a), ("another daemon", b)):
        st, h, body = post(d.port, k)
        eq(st, 429, "a check of the blocked key on %s" % who)
        eq(body.get("blocked"), True, "\"blocked\" in the 429 on %s" % who)
        check(20000 <= body["retry_after_ms"] <= 30000, "retry_after_ms on %s: %r", who, body)
        check(20 <= int(h.get("retry-after", "0")) <= 30, "Retry-After on %s: %r", who,
              h.get("retry-after"))
    got = a.ok("inspect", k)
    check(got["blocked_ms"] > 0, "inspect shows the block: %r", got)
    eq(remaining(got), [5, 10], "denied checks of a blocked key consumed nothing")
    eq(a.ok("unblock", k)["blocked_ms"], 0, "blocked_ms after unblock")
    # this daemon forgets the denial it cached, on every worker
    st, h, body = post(a.port, k)
    eq(st, 200, "a check on this daemon right after unblock")
    eq(remaining(body), [4, 9], "and it counts")


def t_cross_origin(a, b, r):
    """A page of another origin (a form or fetch from any site the operator
    visits) cannot drive the admin API, token or not: 403 before anything."""
    k = {"policy": "fw", "key": "csrf"}
    host = "127.0.0.1:%d" % a.aport
    for hdrs, what in (({"Origin": "http://evil.example"}, "Origin of another site"),
                       ({"Origin": "http://127.0.0.1:1"}, "Origin of another port"),
                       ({"Origin": "null"}, "Origin null (a sandboxed page)"),
                       ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"),
                       ({"Origin": "http://" + host, "Sec-Fetch-Site": "same-site"},
                        "Sec-Fetch-Site: same-site")):
        st, h, body = a("block", dict(k, duration="30s"), dict(hdrs, **{"Content-Type": "text/plain"}))
        eq((st, body.get("error")), (403, "origin: a request from a page of another origin"), what)
    eq(a.ok("inspect", k)["blocked_ms"], 0, "nothing blocked by the refused requests")
    st, h, body = a("inspect", k, {"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
    eq(st, 200, "the listener's own origin (the status page's calls)")


def t_block_ip_identity(a, b, r):
    a.ok("reset", {"policy": "ipol", "ip": "127.0.0.1"})
    a.ok("block", {"policy": "ipol", "ip": "127.0.0.1", "duration": 20000})
    st, h, body = post(b.port, {"policy": "ipol"})
    eq(st, 429, "a check from the blocked address on the other daemon")
    check(int(h.get("retry-after", "0")) >= 10, "Retry-After %r", h.get("retry-after"))
    a.ok("reset", {"policy": "ipol", "ip": "127.0.0.1"})
    eq(post(a.port, {"policy": "ipol"})[0], 200, "reset of all lifts the block")


def t_limit_identities(a, b, r):
    """A block names the policy's caller: every check of that address is
    denied, whoever the user; the admin API's "identity" reaches a limit's
    own caller; an IPv6 "ip" is its /64, as the checks type it."""
    ip = {"X-Forwarded-For": "198.51.100.77"}

    def check_as(user, headers=ip):
        return H.request(b.port, "POST", "/check", {"policy": "login", "key": user}, headers)
    eq(check_as("alice")[0], 200, "alice's first")
    eq(check_as("alice")[0], 200, "alice's second")
    got = a.ok("inspect", {"policy": "login", "identity": "+ip:198.51.100.77+k:alice"})
    eq(got.get("key"), "{rl:login}:+ip%3A198.51.100.77+k%3Aalice", "the key of alice's own limit")
    eq(remaining(got)[1], 1, "alice's per-user remaining, as the admin API sees it")
    a.ok("reset", {"policy": "login", "identity": "+ip:198.51.100.77+k:alice", "limit": 1})
    st, _, bd = check_as("alice")
    eq((st, remaining(bd)), (200, [2, 2]), "after the reset of alice's own limit")
    a.ok("block", {"policy": "login", "ip": "198.51.100.77", "duration": 20000})
    for user in ("alice", "bob"):
        st, _, bd = check_as(user)
        eq((st, bd.get("blocked")), (429, True), "%s from the blocked address" % user)
    eq(check_as("alice", {"X-Forwarded-For": "198.51.100.78"})[0], 200, "alice from another address")
    a.ok("unblock", {"policy": "login", "ip": "198.51.100.77"})
    # an IPv6 caller is its /64: the admin API types it the same way
    v6 = {"X-Forwarded-For": "2001:db8:5:6::1"}
    eq(check_as("carol", v6)[0], 200, "carol over IPv6")
    got = a.ok("inspect", {"policy": "login", "ip": "2001:db8:5:6:ffff::9"})
    eq(got.get("identity"), "ip:2001:db8:5:6::/64", "an address typed as its network")
    eq(remaining(got)[0], 4, "the /64's per-address remaining")


def t_other_daemon_deny_cache_bound(a, b, r):
    # another daemon (deny_cache on) answers a denial it cached: a blocked
    # caller's for DENY_CACHE_BLOCKED_MS (1 s) at most, so an unblock reaches
    # it within that, not at the end of a 10-minute block; one with
    # deny_cache off sees the unblock at once
    k = {"policy": "fw", "key": "bound"}
    with H.Daemon(config(deny_cache=False), redis=r) as c:
        a.ok("block", dict(k, duration="10m"))
        t0 = time.monotonic()
        eq(post(b.port, k)[0], 429, "the other daemon, blocked")
        eq(post(c.port, k)[0], 429, "a daemon without deny cache, blocked")
        a.ok("unblock", k)
        eq(post(c.port, k)[0], 200, "the daemon without deny cache right after unblock")
        # counted from before its denial was cached: the cache can only end early
        left = 1.0 + 2.0 * H.SLOW - (time.monotonic() - t0)
        wait_for(lambda: post(b.port, k)[0] == 200, "the other daemon allows after unblock",
                 max(left, 0.1))


def t_other_daemon_limit_denial_bound(a, b, r):
    # a denial by the limits, cached by another daemon before a reset there,
    # ends by its own retry_after_ms, and then the reset shows
    k = {"policy": "short", "key": "lim"}
    a.ok("penalty", dict(k, cost=2))
    t0 = time.monotonic()
    st, h, body = post(b.port, k)
    eq(st, 429, "the other daemon, the bucket empty")
    a.ok("reset", k)
    left = body["retry_after_ms"] / 1000.0 + 1.0 * H.SLOW - (time.monotonic() - t0)
    got = wait_for(lambda: (lambda x: x if x[0] == 200 else None)(post(b.port, k)),
                   "the other daemon allows after the reset", max(left, 0.1))
    # a full bucket less this check; without the reset one refilled token, spent
    eq(got[2]["remaining"], 1, "remaining of the first allowed check on the other daemon")


def t_workers_forget(a, b, r):
    # one daemon, 4 workers: every worker cached the denial; after a reset
    # none of them may answer it again
    with contextlib.closing(Admin(redis=r, workers=4)) as w:
        k = {"policy": "big", "key": "wk"}
        w.ok("penalty", dict(k, cost=100))
        for _ in range(40):         # fresh connections: spread over the workers
            eq(post(w.port, k)[0], 429, "a check of the exhausted key")
        w.ok("reset", k)
        got = [post(w.port, k)[0] for _ in range(40)]
        eq(got, [200] * 40, "checks on every worker right after the reset")


def t_hybrid_bound(a, b, r):
    # another daemon decides hybrid "hy" locally; it sees a block at its next
    # sync of the key: within sync_interval plus the sync's round trip
    k = {"policy": "hy", "key": "hyb"}
    eq(post(b.port, k)[0], 200, "first check (seeds the other daemon's view)")
    eq(post(b.port, k)[0], 200, "a check decided locally")
    a.ok("block", dict(k, duration="30s"))
    t0 = time.monotonic()
    wait_for(lambda: post(b.port, k)[0] == 429, "the other daemon denies the blocked key",
             (HYBRID_SYNC_MS * 3 / 1000.0 + 1.0) * H.SLOW)
    took = time.monotonic() - t0
    st, h, body = post(b.port, k)
    eq(st, 429, "still denied")
    check(int(h.get("retry-after", "0")) >= 20, "Retry-After of the hybrid denial %r",
          h.get("retry-after"))
    # this daemon (the one that blocked): at once
    eq(post(a.port, k)[0], 429, "this daemon right after the block")
    a.ok("reset", k)
    eq(post(a.port, k)[0], 200, "this daemon right after the reset")
    print("# hybrid: other daemon saw the block after %.0f ms (sync_interval %d ms)"
          % (took * 1000, HYBRID_SYNC_MS))


# ------------------------------------------------------------------ errors

def t_bad_input(a, b, r):
    cases = [
        ("inspect", "{", "body"),
        ("inspect", [1], "body"),
        ("inspect", {"key": "x"}, "policy"),
        ("inspect", {"policy": "nope", "key": "x"}, "policy"),
        ("inspect", {"policy": 5, "key": "x"}, "policy"),
        ("inspect", {"policy": "fw"}, "key"),
        ("inspect", {"policy": "fw", "key": "x", "ip": "127.0.0.1"}, "key"),
        ("inspect", {"policy": "fw", "key": ""}, "key"),
        ("inspect", {"policy": "fw", "key": "x" * 513}, "key"),
        ("inspect", {"policy": "fw", "ip": "300.1.1.1"}, "ip"),
        ("reset", {"policy": "fw", "key": "x", "limit": 2}, "limit"),
        ("reset", {"policy": "fw", "key": "x", "limit": "0"}, "limit"),
        ("block", {"policy": "fw", "key": "x"}, "duration"),
        ("block", {"policy": "fw", "key": "x", "duration": "soon"}, "duration"),
        ("block", {"policy": "fw", "key": "x", "duration": 0}, "duration"),
        # the upper bounds: a block longer than 366 days, a cost past the check API's
        ("block", {"policy": "fw", "key": "x", "duration": 366 * 86400000 + 1}, "duration"),
        ("block", {"policy": "fw", "key": "x", "duration": "8785h"}, "duration"),
        ("reward", {"policy": "fw", "key": "x", "cost": 10**15 + 1}, "cost"),
        ("reward", {"policy": "fw", "key": "x", "cost": 0}, "cost"),
        ("penalty", {"policy": "fw", "key": "x", "cost": -3}, "cost"),
        ("penalty", {"policy": "fw", "key": "x", "cost": 1.5}, "cost"),
    ]
    before = metric(a.port, "inspect", "invalid")
    for action, body, field in cases:
        st, h, got = a(action, body)
        H.expect_error(st, h, got, 400, field, "%s %r" % (action, body))
    st, h, got = H.request(a.aport, "POST", "/admin/inspect")
    H.expect_error(st, h, got, 400, "body", "no body")
    eq(metric(a.port, "inspect", "invalid") - before, 11, "inspects counted as invalid")
    eq(remaining(a.ok("inspect", {"policy": "fw", "key": "x"})), [5, 10], "nothing changed")


def t_logged_and_counted(a, b, r):
    before = metric(a.port, "penalty", "ok")
    a.ok("penalty", {"policy": "fw", "key": "audit-me"})
    eq(metric(a.port, "penalty", "ok") - before, 1, "penalties counted")
    line = wait_for(lambda: [ln for ln in a.d.log().splitlines()
                             if "msg=admin" in ln and "audit-me" in ln], "the log line", 5.0)
    ln = line[-1]
    for want in ("level=info", "action=penalty", "peer=127.0.0.1", "policy=fw",
                 "key={rl:fw:k:audit-me}", "result=ok"):
        check(want in ln, "%r not in the log line %r", want, ln)


def t_backend_down(a, b, r):
    # nothing listens there: every action is a 503 naming the backend, counted as an error
    aport = H.free_port()
    dead = "redis://127.0.0.1:%d/0" % H.free_port()
    with H.Daemon(config(aport, redis={"timeout": "200ms", "connect_timeout": "200ms"}),
                  args=["-r", dead]) as d:
        for action, body in (("inspect", {}), ("block", {"duration": "1m"}), ("reset", {})):
            st, h, got = H.request(aport, "POST", "/admin/" + action,
                                   dict(body, policy="fw", key="down"))
            H.expect_error(st, h, got, 503, "backend", action)
            eq(h.get("retry-after"), "1", action + ": Retry-After on the admin API's 503")
        eq(metric(d.port, "block", "error"), 1, "a failed block counted as an error")


# ------------------------------------------------------------------ auth

def t_token(a, b, r):
    tok = os.path.join(H.tmpdir(), "admin-token")
    with open(tok, "w") as f:
        f.write("first-secret-0123456789\n")
    aport = H.free_port()
    cfg = config(aport, admin_token_file=tok)
    body = {"policy": "fw", "key": "tok"}
    with H.Daemon(cfg, redis=r) as d:
        def call(headers):
            return H.request(aport, "POST", "/admin/inspect", body, headers)
        st, h, got = call(None)
        H.expect_error(st, h, got, 401, "authorization", "no Authorization")
        check(h.get("www-authenticate", "").startswith("Bearer"), "WWW-Authenticate %r",
              h.get("www-authenticate"))
        for bad in ("Bearer first-secret-012345678", "Bearer first-secret-01234567890",
                    "Basic first-secret-0123456789", "Bearer ", "Bearer FIRST-secret-0123456789"):
            st, h, got = call({"Authorization": bad})
            H.expect_error(st, h, got, 401, "authorization", repr(bad))
        st, h, got = call({"Authorization": "Bearer first-secret-0123456789"})
        H.expect_json(st, h, got, 200, "the right token")
        eq(metric(d.port, "inspect", "unauthorized"), 6, "refusals counted")
        # SIGHUP reads the file again: the old token stops working
        with open(tok, "w") as f:
            f.write("second-secret-0123456789\n")
        d.reload()
        wait_for(lambda: call({"Authorization": "Bearer second-secret-0123456789"})[0] == 200,
                 "the new token after SIGHUP", 10.0 * H.SLOW)
        eq(call({"Authorization": "Bearer first-secret-0123456789"})[0], 401, "the old token")
    eq(a("inspect", body, {"Authorization": "Bearer whatever"})[0], 200,
       "without admin_token_file no token is asked for")


def unix_request(path, method, target, body=None):
    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(H.HTTP_TIMEOUT)
            self.sock.connect(path)
    c = Conn("localhost", timeout=H.HTTP_TIMEOUT)
    try:
        c.request(method, target, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        c.close()


def t_unix_socket_and_memory(a, b, r):
    sock = os.path.join(H.tmpdir(), "admin-%d.sock" % os.getpid())
    cfg = config(admin_listen="unix:" + sock)
    cfg.pop("redis")
    with H.Daemon(cfg, backend="memory", workers=2) as d:
        k = {"policy": "fw", "key": "mem"}
        st, got = unix_request(sock, "POST", "/admin/penalty", dict(k, cost=2))
        eq((st, remaining(got)), (200, [3, 8]), "penalty over the unix socket")
        st, got = unix_request(sock, "POST", "/admin/reward", k)
        eq((st, remaining(got)), (200, [4, 9]), "reward")
        st, got = unix_request(sock, "POST", "/admin/reset", dict(k, limit=1))
        eq((st, remaining(got)), (200, [4, 10]), "reset of one limit")
        st, got = unix_request(sock, "POST", "/admin/block", dict(k, duration="1m"))
        eq(st, 200, "block")
        st, h, body = post(d.port, k)
        eq(st, 429, "a check of the blocked key (memory backend)")
        check(int(h.get("retry-after", "0")) >= 50, "Retry-After %r", h.get("retry-after"))
        st, got = unix_request(sock, "POST", "/admin/unblock", k)
        eq(st, 200, "unblock")
        eq(remaining(post(d.port, k)[2]), [3, 9], "a check after unblock counts")
        st, got = unix_request(sock, "POST", "/admin/reset", k)
        eq((st, remaining(got)), (200, [5, 10]), "reset of all")
        ln = [x for x in d.log().splitlines() if "msg=admin" in x and "action=reset" in x]
        check(ln and "peer=unix" in ln[-1], "the peer of a unix socket request: %r", ln)
    # with a partition_key the audit line names the caller by its pk, never by the key
    cfg["partition_key"] = "an-audit-secret-of-32-bytes-0123"
    with H.Daemon(cfg, backend="memory", workers=1) as d:
        st, got = unix_request(sock, "POST", "/admin/reset", {"policy": "fw", "key": "sk-live-42"})
        eq(st, 200, "reset with a partition_key")
        ln = [x for x in d.log().splitlines() if "msg=admin" in x]
        check(ln and re.search(r" key=pk:[0-9a-f]{16} ", ln[-1]), "the pk in the audit line: %r", ln)
        check("sk-live-42" not in d.log(), "the key itself never reaches the log")


def t_config_refused(a, b, r):
    cases = [
        ({"admin_listen": "0.0.0.0:9999"}, "admin_allow_remote"),
        ({"admin_listen": "10.1.2.3:9999", "admin_allow_remote": True}, "admin_token_file"),
        ({"admin_listen": "127.0.0.1:9999", "listen": "127.0.0.1:9999"}, "check listener"),
        ({"admin_listen": "nowhere"}, "admin_listen"),
        ({"admin_listen": "127.0.0.1:9999", "admin_token_file": "/nonexistent/tok"}, "admin_token_file"),
    ]
    for extra, want in cases:
        path = H.write_config(dict(config(), **extra))
        rc, out, err = H.run_cli(["-t", "-c", path])
        check(rc != 0 and want in err, "%r: -t exit %d, expected an error naming %r:\n%s",
              extra, rc, want, err.strip())
    tok = os.path.join(H.tmpdir(), "remote-token")
    with open(tok, "w") as f:
        f.write("remote-secret-0123456789\n")
    path = H.write_config(dict(config(), admin_listen="0.0.0.0:9999", admin_allow_remote=True,
                               admin_token_file=tok))
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 0, "a remote admin_listen, allowed and with a token: -t (%s)" % err.strip())


# ------------------------------------------------------------------ example

def t_login_protection_example(a, b, r):
    with open(os.path.join(H.RL_SRCDIR, "conf", "login-protection.json")) as f:
        cfg = json.load(f)
    aport = H.free_port()
    cfg["admin_listen"] = "127.0.0.1:%d" % aport
    cfg.pop("listen", None)
    cfg.get("redis", {}).pop("url", None)
    # its failure_mode is closed: a loaded machine (valgrind) must not turn 50ms into a 503
    cfg.setdefault("redis", {})["timeout"] = "%ds" % (2 * H.SLOW)
    with H.Daemon(cfg, redis=r) as d:
        attempt = {"path": "/login", "method": "POST", "key": "alice|203.0.113.7"}
        limit = cfg["policies"][0]["limits"][0]["limit"]
        for i in range(limit):
            eq(post(d.port, attempt)[0], 200, "failed attempt #%d" % (i + 1))
        st, h, body = post(d.port, attempt)
        eq(st, 429, "one attempt too many")
        eq(body["policy"], "login-failures", "the policy")
        eq(post(d.port, dict(attempt, key="alice|198.51.100.1"))[0], 200,
           "the same user from another address")
        # the application logs alice in (by another route) and resets her count
        st, h, got = H.request(aport, "POST", "/admin/reset",
                               {"policy": "login-failures", "key": "alice|203.0.113.7"})
        eq(st, 200, "reset on success")
        eq(post(d.port, attempt)[0], 200, "an attempt after the reset")


CASES = [
    ("admin routes 404 on the check port, check routes 404 on the admin port", t_listeners_apart),
    ("inspect shows every limit and consumes nothing", t_inspect_consumes_nothing),
    ("penalty and reward: exact numbers, floored and capped", t_penalty_and_reward_exact),
    ("reset one limit, then all; another daemon sees it", t_reset_one_and_all),
    ("an ip identity is typed as the check types it", t_ip_identity),
    ("block denies on this and another daemon with Retry-After; unblock", t_block_everywhere),
    ("a request from a page of another origin: 403, nothing done", t_cross_origin),
    ("block of an address; reset of all lifts it", t_block_ip_identity),
    ("limits of their own identity: a block names the policy's caller, \"identity\" reaches a "
     "limit's, an IPv6 ip is its /64", t_limit_identities),
    ("another daemon's cached denial of a block ends within 1 s of an unblock; "
     "without deny cache at once", t_other_daemon_deny_cache_bound),
    ("another daemon's cached denial by the limits ends by its retry_after after a reset",
     t_other_daemon_limit_denial_bound),
    ("every worker forgets its cached denial after a reset", t_workers_forget),
    ("hybrid: another daemon sees a block within its sync bound", t_hybrid_bound),
    ("bad input: 400 naming the field, counted, nothing changed", t_bad_input),
    ("every action logged (peer, action, policy, key, result) and counted", t_logged_and_counted),
    ("the backend unreachable: 503 naming it, with Retry-After: 1, counted as an error", t_backend_down),
    ("bearer token: 401 without it, reread on SIGHUP", t_token),
    ("unix socket admin_listen on the memory backend", t_unix_socket_and_memory),
    ("unsafe admin configurations are refused", t_config_refused),
    ("conf/login-protection.json: failed attempts per user+IP, reset on success",
     t_login_protection_example),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r:
        a = Admin(redis=r, workers=2)
        try:
            with H.Daemon(config(), redis=r) as b:
                yield a, b, r
        finally:
            a.close()


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=300)
