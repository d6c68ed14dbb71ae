#!/usr/bin/env python3
"""Concurrency limits with leases (issue 23, docs/leases.md, "Concurrency limits"):
an allowed check takes a slot and answers its lease (body and
X-RateLimit-Lease), POST /release gives it back, a slot never released comes
back when its lease ends; never more than `limit` slots held by many clients
on two daemons sharing one Redis; release twice, a forged lease, a lease
pointed at another caller's key; combined atomically with a rate limit;
admin inspect/reset; config refusals.  Against the real daemon and a real
Redis (RL_TOPOLOGY cluster and sentinel too) and the memory backend."""

import base64
import contextlib
import os
import secrets
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post, wait_for  # noqa: E402

# export: 10 slots held up to an hour (released by hand or by reset)
EXPORT = {"name": "export", "limits": [{"algorithm": "concurrency", "limit": 10, "lease": "1h"}]}
# short: 2 slots whose leases end after 1 s (x SLOW)
SHORT_MS = 1000 * H.SLOW
SHORT = {"name": "short", "limits": [
    {"algorithm": "concurrency", "limit": 2, "lease": "%dms" % SHORT_MS}]}
# combo: 2 slots and 3 checks an hour, decided together
COMBO = {"name": "combo", "limits": [
    {"algorithm": "concurrency", "limit": 2, "lease": "1h"},
    {"algorithm": "fixed_window", "limit": 3, "window": "1h"}]}
# rate: no concurrency limit: its keys are not a lease's
RATE = {"name": "rate", "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "1h"}]}
POLICIES = [EXPORT, SHORT, COMBO, RATE]


def config(admin_port):
    return {"identity": ["body"], "redis": {"timeout": "%ds" % (2 * H.SLOW)},
            "admin_listen": "127.0.0.1:%d" % admin_port, "policies": POLICIES}


class Site:
    """Two daemons sharing one Redis (or one memory-backend daemon), each
    with an admin listener."""

    def __init__(self, redis=None, backend=None, n=2):
        self.r = redis
        self.daemons, self.admin = [], []
        for _ in range(n):
            aport = H.free_port()
            self.daemons.append(H.Daemon(config(aport), redis=redis, backend=backend, workers=2))
            self.admin.append(aport)
        self.port = self.daemons[0].port

    def close(self):
        for d in self.daemons:
            d.kill()


def take(port, key, policy="export"):
    return post(port, {"policy": policy, "key": key})


def release(port, lease):
    return H.request(port, "POST", "/release", {"lease": lease})


def inspect(site, key, policy="export", which=0):
    st, _, b = H.request(site.admin[which], "POST", "/admin/inspect", {"policy": policy, "key": key})
    eq(st, 200, "inspect %s %s" % (policy, key))
    return b


def held(site, key, policy="export", which=0):
    return inspect(site, key, policy, which)["limits"][0]["held"]


def fresh(prefix):
    return "%s-%s" % (prefix, secrets.token_hex(6))


def lease_parts(lease):
    ident, ms, key = lease.split(".", 2)
    return ident, ms, base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode()


def make_lease(ident, ms, key):
    return "%s.%s.%s" % (ident, ms, base64.urlsafe_b64encode(key.encode()).decode().rstrip("="))


# ------------------------------------------------------------------ cases

def t_answer_and_header(site):
    key = fresh("hdr")
    st, h, b = take(site.port, key)
    H.expect_json(st, h, b, 200, "a check taking a slot")
    check(isinstance(b.get("lease"), str) and len(b["lease"]) > 40, "no lease in %r", b)
    eq(h.get("x-ratelimit-lease"), b["lease"], "X-RateLimit-Lease")
    eq(b["remaining"], 9, "remaining: the free slots")
    lim = b["limits"][0]
    eq((lim["algorithm"], lim["limit"], lim["lease_ms"]), ("concurrency", 10, 3600000), "the limit")
    check("window_ms" not in lim, "a concurrency limit has no window: %r", lim)
    ident, ms, k = lease_parts(b["lease"])
    eq(ms, "3600000", "the lease's ms")
    eq(k, "{rl:export:k:%s}" % key, "the key the lease names")
    check(len(ident) == 32 and all(c in "0123456789abcdef" for c in ident), "id %r", ident)
    # cost 0 asks: no slot, no lease
    st, h, b = post(site.port, {"policy": "export", "key": key, "cost": 0})
    eq((st, b["remaining"], "lease" in b, h.get("x-ratelimit-lease")), (200, 9, False, None),
       "a check of cost 0")
    # a check of any cost takes one slot
    st, h, b = post(site.port, {"policy": "export", "key": key, "cost": 5})
    eq((st, b["remaining"]), (200, 8), "a check of cost 5 takes one slot")
    eq(held(site, key), 2, "held")


def t_exact_under_concurrency(site):
    """30 callers on two daemons, 10 slots: exactly 10 granted at once, and
    while they take and give back slots over and over, never more than 10
    held (the test counts a holder from its grant to just before its
    release: never more than the daemon's own count)."""
    key = fresh("flood")
    ports = [d.port for d in site.daemons]
    # all at once, long leases: exactly 10 of 30 granted, remaining 0..9 each once
    res = H.blast(ports, [{"policy": "export", "key": key}] * 30, threads=30)
    granted = [ans for _, st, ans, _ in res if st == 200]
    eq(len(granted), 10, "checks granted of 30 at once")
    eq(sorted(a["remaining"] for a in granted), list(range(10)), "remaining of the granted")
    eq(sum(1 for _, st, _, _ in res if st == 429), 20, "denied")
    eq(held(site, key), 10, "held, from daemon 0")
    eq(held(site, key, which=1), 10, "held, from daemon 1")
    for a in granted:
        eq(release(ports[0], a["lease"])[2], {"released": True}, "release")
    eq(held(site, key), 0, "held after every release")

    lock = threading.Lock()
    state = {"holding": 0, "most": 0, "granted": 0, "denied": 0, "errors": []}
    barrier = threading.Barrier(30, timeout=H.HTTP_TIMEOUT)

    def caller(i):
        try:
            with H.Client(ports[i % 2]) as c:
                barrier.wait()
                for _ in range(15):
                    st, _, b = c.request("POST", "/check", {"policy": "export", "key": key})
                    if st == 429:
                        with lock:
                            state["denied"] += 1
                        continue
                    if st != 200:
                        raise AssertionError("status %d: %r" % (st, b))
                    with lock:
                        state["holding"] += 1
                        state["granted"] += 1
                        state["most"] = max(state["most"], state["holding"])
                    # held over a round trip (the daemon's free slots): the
                    # holders overlap without a sleep
                    st, _, q = c.request("POST", "/check", {"policy": "export", "key": key,
                                                            "cost": 0})
                    if st != 200 or not 0 <= q["remaining"] <= 9:
                        raise AssertionError("a holder asked: %d %r" % (st, q))
                    with lock:
                        state["holding"] -= 1
                    st, _, r = c.request("POST", "/release", {"lease": b["lease"]})
                    if (st, r) != (200, {"released": True}):
                        raise AssertionError("release: %d %r" % (st, r))
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                state["errors"].append("%s: %s" % (type(e).__name__, e))
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    ts = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(30)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120 * H.SLOW)
    check(not any(t.is_alive() for t in ts), "callers still running")
    check(not state["errors"], "%d errors, first: %s", len(state["errors"]),
          state["errors"][:1])
    check(state["most"] <= 10, "%d held at once by the test's count", state["most"])
    check(state["granted"] >= 15, "only %d granted", state["granted"])
    # denials come only with every slot held: the limit was reached
    check(state["denied"] > 0, "never denied: the 10 slots were never all held")
    eq(held(site, key), 0, "held at the end")
    H.note("%d granted, %d denied, at most %d held at once", state["granted"], state["denied"],
           state["most"])


def t_expiry_of_a_crashed_holder(site):
    key = fresh("crash")
    leases = [take(site.port, key, "short")[2]["lease"] for _ in range(2)]
    st, h, b = take(site.port, key, "short")
    eq(st, 429, "both slots held")
    check(1 <= b["retry_after_ms"] <= SHORT_MS, "retry_after_ms %r: at most the lease",
          b["retry_after_ms"])
    check(h.get("retry-after") is not None, "no Retry-After on the denial")
    # nobody releases: the slots come back when the leases end
    got = wait_for(lambda: take(site.port, key, "short")[0] == 200,
                   "a slot back after the leases ended", timeout=10 + SHORT_MS / 1000 * 5)
    check(got, "never allowed again")
    # an ended lease is not held: its release says so
    eq(release(site.port, leases[0])[2], {"released": False}, "release of an ended lease")


def t_release_twice(site):
    key = fresh("twice")
    lease = take(site.port, key)[2]["lease"]
    st, h, b = release(site.port, lease)
    H.expect_json(st, h, b, 200, "first release")
    eq(b, {"released": True}, "first release")
    eq(release(site.daemons[1].port, lease)[2], {"released": False}, "the same lease again, "
       "on the other daemon")
    eq(held(site, key), 0, "held")
    # the freed slot is counted once: 10 more fit, not 11
    for i in range(10):
        eq(take(site.port, key)[0], 200, "check %d after the double release" % (i + 1))
    eq(take(site.port, key)[0], 429, "the eleventh")


def t_forged_leases(site):
    key = fresh("forged")
    real = take(site.port, key)[2]["lease"]
    ident, ms, k = lease_parts(real)
    before = sorted(site.r.cli("KEYS", "*").split()) if site.r is not None else None
    forged = [
        make_lease(secrets.token_hex(16), ms, k),           # a guessed id
        make_lease(ident, "60000", k),                       # another lease length
        make_lease(ident, ms, "{rl:nosuch:k:%s}" % key),     # no such policy
        make_lease(ident, ms, "{rl:rate:k:%s}" % key),       # a policy without leases
        make_lease(ident, ms, "{other}"),                    # not a key of ours
    ]
    for f in forged:
        st, h, b = release(site.port, f)
        eq((st, b), (200, {"released": False}), "release of a forged lease %r" % f)
    eq(held(site, key), 1, "the real lease's slot still held")
    if before is not None:
        eq(sorted(site.r.cli("KEYS", "*").split()), before, "Redis keys after forged releases")
    bad = [
        (None, "body"), ("", "body"), ("[]", "body"), ({"lease": 5}, "lease"), ({}, "lease"),
        ({"lease": "nothex"}, "lease"), ({"lease": real.upper()}, "lease"),
        ({"lease": ident + ".0." + real.split(".", 2)[2]}, "lease"),
        ({"lease": ident + "." + ms + ".%%%"}, "lease"), ({"lease": "0" * 32 + "." + ms + ".e30"},
                                                          "lease"),
        ({"lease": real + "\u0000"}, "lease"), ({"lease": "a" * 3000}, "lease"),
    ]
    for body, field in bad:
        st, h, b = H.request(site.port, "POST", "/release", body)
        H.expect_error(st, h, b, 400, field, "release %r" % (body if len(str(body)) < 80 else
                                                             str(body)[:80]))
    eq(H.request(site.port, "GET", "/release")[0], 405, "GET /release")
    eq(held(site, key), 1, "held after the bad requests")
    eq(release(site.port, real)[2], {"released": True}, "the real lease still releases")


def t_lease_of_another_caller(site):
    alice, bob = fresh("alice"), fresh("bob")
    la = take(site.port, alice)[2]["lease"]
    lb = take(site.port, bob)[2]["lease"]
    ident_a, ms, _ = lease_parts(la)
    # alice's id pointed at bob's key: bob's slot is not alice's to free
    st, _, b = release(site.port, make_lease(ident_a, ms, "{rl:export:k:%s}" % bob))
    eq((st, b), (200, {"released": False}), "alice's id against bob's key")
    eq((held(site, alice), held(site, bob)), (1, 1), "both still held")
    eq(release(site.port, lb)[2], {"released": True}, "bob's own lease")
    eq((held(site, alice), held(site, bob)), (1, 0), "held after bob's release")
    eq(release(site.port, la)[2], {"released": True}, "alice's own lease")


def t_combined_with_a_rate(site):
    key = fresh("combo")
    # three checks an hour: each takes and gives back a slot
    for i in range(3):
        st, _, b = take(site.port, key, "combo")
        eq(st, 200, "check %d" % (i + 1))
        eq(release(site.port, b["lease"])[2], {"released": True}, "release %d" % (i + 1))
    # the rate denies the fourth: it takes no slot
    st, h, b = take(site.port, key, "combo")
    eq(st, 429, "the fourth check, over the rate")
    check("lease" not in b and h.get("x-ratelimit-lease") is None, "a denial has no lease: %r", b)
    lims = inspect(site, key, "combo")["limits"]
    eq((lims[0]["held"], lims[1]["remaining"]), (0, 0), "slots held, rate left")
    # a caller whose slots are all held: the denial consumes no rate
    key = fresh("combo")
    leases = [take(site.port, key, "combo")[2]["lease"] for _ in range(2)]
    st, _, b = take(site.port, key, "combo")
    eq(st, 429, "a third check with both slots held")
    eq([lim["remaining"] for lim in b["limits"]], [0, 1], "remaining of the denial")
    lims = inspect(site, key, "combo")["limits"]
    eq((lims[0]["held"], lims[1]["remaining"]), (2, 1), "the denial consumed no rate")
    eq(release(site.port, leases[0])[2], {"released": True}, "release")
    eq(take(site.port, key, "combo")[0], 200, "the rate's last check, a slot free")


def t_admin_inspect_and_reset(site):
    key = fresh("admin")
    leases = [take(site.port, key)[2]["lease"] for _ in range(4)]
    b = inspect(site, key)
    lim = b["limits"][0]
    eq((lim["algorithm"], lim["held"], lim["remaining"], lim["lease_ms"]),
       ("concurrency", 4, 6, 3600000), "inspect")
    st, _, b = H.request(site.admin[1], "POST", "/admin/reset", {"policy": "export", "key": key})
    eq((st, b["limits"][0]["held"]), (200, 0), "reset on the other daemon")
    eq(held(site, key), 0, "held after the reset")
    # the leases of before the reset hold nothing
    eq(release(site.port, leases[0])[2], {"released": False}, "release after the reset")
    # a penalty takes a slot no lease names; a reward gives one back
    st, _, b = H.request(site.admin[0], "POST", "/admin/penalty", {"policy": "export", "key": key})
    eq((st, b["limits"][0]["held"]), (200, 1), "a penalty")
    st, _, b = H.request(site.admin[0], "POST", "/admin/reward", {"policy": "export", "key": key})
    eq((st, b["limits"][0]["held"]), (200, 0), "a reward")


def t_metrics_and_headers(site):
    key = fresh("hdrs")
    st, h, b = take(site.port, key, "short")
    eq(h.get("ratelimit-policy"), '"short";q=2', "RateLimit-Policy: no w for slots")
    before = H.metric(site.port, "ratelimitd_backend_requests_total", {"status": "ok"})
    eq(release(site.port, b["lease"])[2], {"released": True}, "release")
    after = H.metric(site.port, "ratelimitd_backend_requests_total", {"status": "ok"})
    check(after > before, "a release is a backend request: %r -> %r", before, after)


def t_config_refused(site):
    cases = [
        ({"name": "h", "mode": "hybrid", "limits": [{"algorithm": "concurrency", "limit": 2}]},
         "policies[0].limits[0].algorithm: a hybrid policy cannot hold leases"),
        ({"name": "h", "mode": "hybrid",
          "limits": [{"algorithm": "fixed_window", "limit": 2, "window": "1s"}],
          "overrides": [{"identities": ["key:x"],
                         "limits": [{"algorithm": "concurrency", "limit": 2}]}]},
         "policies[0].overrides[0].limits[0].algorithm: a hybrid policy cannot hold leases"),
        ({"name": "w", "limits": [{"algorithm": "concurrency", "limit": 2, "window": "1s"}]},
         "policies[0].limits[0].window: a concurrency limit has no window"),
        ({"name": "l", "limits": [{"algorithm": "fixed_window", "limit": 2, "window": "1s",
                                   "lease": "1s"}]},
         "policies[0].limits[0].lease: only a concurrency limit holds leases"),
        ({"name": "n", "limits": [{"algorithm": "fixed_window", "limit": 2}]},
         "policies[0].limits[0]: give \"window\""),
        ({"name": "t", "limits": [{"algorithm": "concurrency", "limit": 2},
                                  {"algorithm": "concurrency", "limit": 3, "lease": "1s"}]},
         "policies[0].limits[1]: a second concurrency limit"),
        ({"name": "b", "limits": [{"algorithm": "concurrency", "limit": 200000}]},
         "policies[0].limits[0].limit: a concurrency limit holds at most 100000 slots"),
        ({"name": "d", "limits": [{"algorithm": "concurrency", "limit": 2, "lease": "2d"}]},
         "policies[0].limits[0].lease"),
    ]
    for pol, want in cases:
        path = H.write_config({"identity": ["body"], "policies": [pol]})
        rc, out, err = H.run_cli(["-t", "-c", path])
        check(rc != 0 and want in err, "%r: -t exit %d, expected %r:\n%s", pol, rc, want,
              err.strip())
    path = H.write_config({"identity": ["body"], "policies": [
        {"name": "ok", "limits": [{"algorithm": "concurrency", "limit": 2}]}]})
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 0, "a concurrency limit with the default lease: -t (%s)" % err.strip())


def t_memory_backend(site):
    """The same through the memory backend: its own daemon."""
    mem = Site(backend="memory", n=1)
    try:
        key = fresh("mem")
        leases = [take(mem.port, key, "short")[2]["lease"] for _ in range(2)]
        eq(take(mem.port, key, "short")[0], 429, "both slots held")
        eq(release(mem.port, leases[0])[2], {"released": True}, "release")
        eq(release(mem.port, leases[0])[2], {"released": False}, "release again")
        ident, ms, k = lease_parts(leases[1])
        eq(release(mem.port, make_lease(secrets.token_hex(16), ms, k))[2], {"released": False},
           "a forged lease")
        eq(held(mem, key, "short"), 1, "held")
        eq(take(mem.port, key, "short")[0], 200, "the released slot again")
        wait_for(lambda: take(mem.port, key, "short")[0] == 200, "a slot back by its lease's end",
                 timeout=10 + SHORT_MS / 1000 * 5)
    finally:
        mem.close()


CASES = [
    ("an allowed check answers its lease in the body and X-RateLimit-Lease; cost 0 takes none",
     t_answer_and_header),
    ("30 callers on two daemons, one Redis, 10 slots: never more than 10 held",
     t_exact_under_concurrency),
    ("a slot never released comes back when its lease ends", t_expiry_of_a_crashed_holder),
    ("release twice: released once, the slot counted once", t_release_twice),
    ("forged leases release nothing and touch no key; bad bodies are 400 naming the field",
     t_forged_leases),
    ("a lease pointed at another caller's key releases nothing", t_lease_of_another_caller),
    ("with a rate limit: a denial by either takes nothing from the other",
     t_combined_with_a_rate),
    ("admin inspect shows the slots held, reset frees them, penalty and reward",
     t_admin_inspect_and_reset),
    ("quota headers and metrics of leases", t_metrics_and_headers),
    ("configurations refused: hybrid, window, lease elsewhere, two, too many slots",
     t_config_refused),
    ("the memory backend holds, releases and expires leases alike", t_memory_backend),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r:
        site = Site(redis=r)
        try:
            yield site
        finally:
            site.close()


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=600)
