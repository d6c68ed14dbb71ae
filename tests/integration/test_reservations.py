#!/usr/bin/env python3
"""Reserve and settle (docs/API.md "Reserve and settle") through the real
daemon: a check with "reserve": true takes its cost as an estimate and
answers a reservation; POST /settle applies the real cost exactly once.

Two daemons on one Redis (of RL_TOPOLOGY: a Cluster in phase 6 too) and one
with `-b memory`.  For every algorithm and both backends: a settle for less
gives back, for more charges past the limit, twice settles nothing; a
concurrency limit keeps its slot; forged, foreign and larger-estimate ids
settle nothing and change nothing; a reservation past its reservation_ttl
stays charged (waited for on Redis's clock and the record, or the daemon's
clock for memory); 10^15 exact; an override's limits; bad bodies 400 naming
the field with nothing counted; 50 concurrent reserve -> settle pairs across
two daemons never admit more estimates than the budget and end at the sum
of the settled costs exactly; the metric by result.
"""

import contextlib
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

HOUR = 3600 * 1000
WEEK = 7 * 24 * HOUR
ALGOS = ["fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"]
BUCKETS = ("token_bucket", "gcra")
BIG = 10 ** 15


def lim(algo, limit, window):
    c = {"algorithm": algo, "limit": limit, "window": window}
    if algo in BUCKETS:
        c["burst"] = limit
    return c


def config(admin_port, hybrid):
    # a week's window: a bucket refills less than a unit in a run, so every
    # number is exact (a slow valgrind run too)
    pols = [{"name": "r_" + a, "limits": [lim(a, 1000, WEEK)]} for a in ALGOS]
    pols += [
        {"name": "budget", "limits": [lim("fixed_window", 1000, WEEK)]},
        {"name": "big", "limits": [lim("fixed_window", BIG, 24 * HOUR)]},
        {"name": "short", "reservation_ttl": "1s", "limits": [lim("fixed_window", 1000, WEEK)]},
        {"name": "cc", "limits": [{"algorithm": "concurrency", "limit": 2, "lease": "1m"},
                                  lim("fixed_window", 1000, WEEK)]},
        {"name": "ov", "limits": [lim("fixed_window", 1000, WEEK)],
         "overrides": [{"identities": ["key:vip"], "limits": [lim("fixed_window", 5000, WEEK)]}]},
        {"name": "own", "request_limits": True, "limits": [lim("fixed_window", 1000, WEEK)]},
    ]
    if hybrid:
        pols.append({"name": "hy", "mode": "hybrid", "limits": [lim("fixed_window", 1000, WEEK)]})
    return {"identity": ["body"], "failure_mode": "closed", "redis": {"timeout": "5s"},
            "admin_listen": "127.0.0.1:%d" % admin_port, "policies": pols}


class Node:
    def __init__(self, name, redis=None, backend=None):
        self.name = name
        self.aport = H.free_port()
        self.d = H.Daemon(config(self.aport, backend is None), redis=redis, backend=backend)
        self.port = self.d.port

    def check(self, policy, key, cost=1, **kw):
        return H.request(self.port, "POST", "/check", dict(policy=policy, key=key, cost=cost, **kw))

    def reserve(self, policy, key, cost):
        return self.check(policy, key, cost, reserve=True)

    def settle(self, rid, cost):
        return H.request(self.port, "POST", "/settle", {"reservation": rid, "cost": cost})

    def state(self, policy, key):
        st, h, b = self.check(policy, key, 0)
        check(st in (200, 429), "%s: a check of cost 0: %r %r", self.name, st, b)
        return b


_seq = [0]


def fresh(what):
    _seq[0] += 1
    return "%s-%d-%d" % (what, os.getpid(), _seq[0])


def between(v, lo, hi, what):
    check(lo <= v <= hi, "%s: %r not in %r..%r", what, v, lo, hi)


def reserved(resp, what):
    """An allowed reserving check: its reservation, also in the header."""
    st, h, b = resp
    H.expect_json(st, h, b, 200, what)
    rid = b.get("reservation")
    check(isinstance(rid, str) and 0 < len(rid) <= 4400, "%s: reservation %r", what, rid)
    check(all(c.isalnum() or c in ".-_" for c in rid), "%s: alphabet of %r", what, rid)
    eq(h.get("x-ratelimit-reservation"), rid, what + ": X-RateLimit-Reservation")
    return b


def settled(resp, charged, what):
    st, h, b = resp
    H.expect_json(st, h, b, 200, what)
    eq(b.get("settled"), True, what + ": settled")
    eq(b.get("charged"), charged, what + ": charged")
    check("overdraft" in b and "limits" in b, "%s: a charge's fields: %r", what, b)
    eq(h.get("x-ratelimit-remaining"), str(b["remaining"]), what + ": X-RateLimit-Remaining")
    return b


def not_settled(resp, what):
    st, h, b = resp
    H.expect_json(st, h, b, 200, what)
    eq(b, {"settled": False}, what)
    check("x-ratelimit-remaining" not in h, "%s: quota headers on a settle of nothing", what)


def with_key(rid, key):
    """The id with another key base: "<nonce>.<estimate>.<hash>.<key>"."""
    import base64
    parts = rid.split(".")
    parts[3] = base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")
    return ".".join(parts)


def key_of(rid):
    import base64
    k = rid.split(".")[3]
    return base64.urlsafe_b64decode(k + "=" * (-len(k) % 4)).decode()


# ------------------------------------------------------------------- cases

def t_every_algorithm_settles_once(nodes):
    """300 reserved then settled at 100: 200 back; twice: nothing; 300
    reserved then settled at 1,500: 1,200 charged, 600 past 1,000."""
    for n in nodes:
        for a in ALGOS:
            what = "%s %s" % (n.name, a)
            pol, key = "r_" + a, fresh("every")
            b = reserved(n.reserve(pol, key, 300), what + " reserve")
            eq(b["remaining"], 700, what + ": remaining after the estimate")
            s = settled(n.settle(b["reservation"], 100), -200, what + " settle for less")
            between(s["remaining"], 900, 901, what + ": remaining after giving back")
            eq(s["overdraft"], 0, what + ": overdraft")
            not_settled(n.settle(b["reservation"], 100), what + " settled twice")
            not_settled(n.settle(b["reservation"], 0), what + " settled a third time, at 0")
            between(n.state(pol, key)["remaining"], 900, 901, what + ": unchanged by those")
            b = reserved(n.reserve(pol, key, 300), what + " reserve again")
            s = settled(n.settle(b["reservation"], 1500), 1200, what + " settle for more")
            between(s["overdraft"], 599, 600, what + ": charged past the limit")
            eq(s["allowed"], False, what + ": a check of cost 0 after it")
            st, h, c = n.check(pol, key, 1)
            H.expect_json(st, h, c, 429, what + ": denied in overdraft")


def t_settle_of_zero_gives_it_all_back(nodes):
    for n in nodes:
        key = fresh("zero")
        b = reserved(n.reserve("budget", key, 999), n.name + " reserve")
        s = settled(n.settle(b["reservation"], 0), -999, n.name + " settle at 0")
        eq(s["remaining"], 1000, n.name + ": the whole estimate back")


def t_concurrency_keeps_its_slot(nodes):
    """A reserving check takes its slot (lease and reservation answered); a
    settle charges or gives back the rate limit only."""
    for n in nodes:
        key = fresh("cc")
        b = reserved(n.reserve("cc", key, 300), n.name + " reserve under cc")
        check(b.get("lease"), "%s: no lease with the reservation: %r", n.name, b)
        s = settled(n.settle(b["reservation"], 50), -250, n.name + " settle")
        eq(s["limits"][0]["remaining"], 1, n.name + ": the slot still held")
        eq(s["limits"][1]["remaining"], 950, n.name + ": the rate limit settled")
        st, h, r = H.request(n.port, "POST", "/release", {"lease": b["lease"]})
        eq(r, {"released": True}, n.name + " release")
        eq(n.state("cc", key)["limits"][0]["remaining"], 2, n.name + ": slot back")


def t_forged_foreign_and_larger_settle_nothing(nodes):
    for n in nodes:
        alice, bob = fresh("alice"), fresh("bob")
        a = reserved(n.reserve("budget", alice, 400), n.name + " alice")
        b = reserved(n.reserve("budget", bob, 100), n.name + " bob")
        rid = a["reservation"]
        parts = rid.split(".")
        forged = [
            # another nonce
            ".".join(["%032x" % random.getrandbits(128)] + parts[1:]),
            # a larger estimate: a larger refund
            ".".join([parts[0], "900"] + parts[2:]),
            # another limits hash
            ".".join(parts[:2] + ["%012x" % (int(parts[2], 16) ^ 1)] + parts[3:]),
            # alice's nonce on bob's key: a refund to bob
            with_key(rid, key_of(b["reservation"])),
            # bob's own id with alice's key
            with_key(b["reservation"], key_of(rid)),
        ]
        for i, f in enumerate(forged):
            not_settled(n.settle(f, 0), "%s forged id %d" % (n.name, i))
        eq(n.state("budget", alice)["remaining"], 600, n.name + ": alice unchanged")
        eq(n.state("budget", bob)["remaining"], 900, n.name + ": bob unchanged")
        # whoever holds it may settle: bob's daemon, the real id
        settled(n.settle(rid, 400), 0, n.name + " alice's real id")
        settled(n.settle(b["reservation"], 100), 0, n.name + " bob's real id")


def t_override_and_another_daemon(nodes, other):
    """An override's limits are found again from the id; a settle on another
    daemon sharing the backend applies it."""
    n = nodes[0]
    b = reserved(n.reserve("ov", "vip", 3000), "vip reserve")
    eq(b["limit"], 5000, "the override decides")
    s = settled(other.settle(b["reservation"], 1000), -2000, "vip settled on the other daemon")
    eq(s["limit"], 5000, "settled under the override")
    eq(s["remaining"], 4000, "vip after the settle")
    not_settled(n.settle(b["reservation"], 1000), "vip settled again on the first daemon")
    st, h, c = n.check("ov", "vip", 0)
    eq(c["remaining"], 4000, "vip unchanged by the second settle")


def t_expired_stays_charged(nodes, redis):
    """reservation_ttl 1s: a settle after it finds the reservation expired,
    and its estimate stays counted."""
    for n in nodes:
        key = fresh("exp")
        before = H.metric(n.port, "ratelimitd_reservations_total", {"result": "expired"})
        t0 = time.time()
        b = reserved(n.reserve("short", key, 300), n.name + " reserve")
        rid = b["reservation"]
        if n.name == "memory":
            # the daemon's clock: its deadline is 1 s after it answered
            H.wait_for(lambda: time.time() > t0 + 1.2, "the reservation's ttl to pass", 10)
        else:
            # the record "<nonce>.<estimate>.<limits hash>" of the key's
            # reservations "<key>:rsv", scored with its deadline
            rkey = "%s:rsv" % key_of(rid)
            deadline = int(redis.cli("ZSCORE", rkey, ".".join(rid.split(".")[:3])).split()[0])

            def past():
                s, us = redis.cli("TIME").split()
                return int(s) * 1000000 + int(us) > deadline
            H.wait_for(past, "Redis's clock past the reservation's deadline", 10)
        not_settled(n.settle(rid, 0), n.name + " settle after reservation_ttl")
        eq(n.state("short", key)["remaining"], 700, n.name + ": the estimate stays counted")
        eq(H.metric(n.port, "ratelimitd_reservations_total", {"result": "expired"}) - before, 1,
           n.name + " expired counted")


def t_ten_to_the_fifteen_exact(nodes):
    for n in nodes:
        key = fresh("big")
        b = reserved(n.reserve("big", key, BIG), n.name + " reserve 10^15")
        eq(b["remaining"], 0, n.name + ": all of it")
        s = settled(n.settle(b["reservation"], 1), -(BIG - 1), n.name + " settle at 1")
        eq(s["remaining"], BIG - 1, n.name + ": exact")
        b = reserved(n.reserve("big", key, BIG - 1), n.name + " reserve the rest")
        s = settled(n.settle(b["reservation"], BIG), 1, n.name + " settle at 10^15")
        eq(s["overdraft"], 1, n.name + ": one unit past 10^15 + 1")
        eq(s["remaining"], 0, n.name + ": nothing left")


def t_bad_bodies_count_nothing(nodes):
    for n in nodes:
        key = fresh("bad")
        cases = [
            ("/check", {"policy": "budget", "key": key, "cost": 5, "reserve": "yes"}, "reserve"),
            ("/check", {"policy": "budget", "key": key, "cost": 5, "reserve": 1}, "reserve"),
            ("/charge", {"policy": "budget", "key": key, "cost": 5, "reserve": True}, "reserve"),
            ("/check", {"policy": "own", "key": key, "cost": 5, "reserve": True,
                        "limits": [{"algorithm": "fixed_window", "limit": 10, "window": "1m"}]},
             "reserve"),
            ("/settle", None, "body"),
            ("/settle", [1], "body"),
            ("/settle", {"cost": 1}, "reservation"),
            ("/settle", {"reservation": 7, "cost": 1}, "reservation"),
            ("/settle", {"reservation": "abc", "cost": 1}, "reservation"),
            ("/settle", {"reservation": "x" * 5000, "cost": 1}, "reservation"),
        ]
        if n.name != "memory":
            cases.append(("/check", {"policy": "hy", "key": key, "cost": 5, "reserve": True},
                          "reserve"))
        b = reserved(n.reserve("budget", key, 100), n.name + " a real reservation")
        rid = b["reservation"]
        cases += [
            ("/settle", {"reservation": rid}, "cost"),
            ("/settle", {"reservation": rid, "cost": -1}, "cost"),
            ("/settle", {"reservation": rid, "cost": 1.5}, "cost"),
            ("/settle", {"reservation": rid, "cost": "5"}, "cost"),
            ("/settle", {"reservation": rid, "cost": BIG + 1}, "cost"),
            ("/settle", {"reservation": rid, "cost": 5, "policy": "budget"}, "policy"),
            ("/settle", {"reservation": rid, "cost": 5, "extra": None}, "extra"),
            ("/settle", {"reservation": rid, "cost": 5, "": 3}, "body"),   # fuzz_settle's find
            ("/check", {"policy": "budget", "key": key, "cost": -1, "reserve": True}, "cost"),
            ("/check", {"policy": "budget", "key": key, "cost": BIG + 1, "reserve": True}, "cost"),
        ]
        for path, body, field in cases:
            st, h, r = H.request(n.port, "POST", path, body)
            err = H.expect_error(st, h, r, 400, field, "%s %s %r" % (n.name, path, body))
            check(err.startswith(field + ":"), "%s %s %r: %r does not start with its field",
                  n.name, path, body, err)
        eq(n.state("budget", key)["remaining"], 900, n.name + ": nothing counted, nothing settled")
        settled(n.settle(rid, 100), 0, n.name + " the real reservation, still there")
        # a reserving check of cost 0, or a denied one, takes none
        st, h, r = n.reserve("budget", key, 0)
        check("reservation" not in r, "%s: a reservation for cost 0: %r", n.name, r)
        st, h, r = n.reserve("budget", key, 5000)
        eq(st, 429, n.name + " a reserving check that does not fit")
        check("reservation" not in r and "x-ratelimit-reservation" not in h,
              "%s: a denied check took a reservation: %r", n.name, r)


def t_fifty_pairs_on_two_daemons(a, b):
    """50 concurrent reserve -> settle pairs of 100 against 1,000, reserved
    on one daemon and settled on the other: at most 10 estimates held at
    once, and the final count is the sum of the settled costs exactly."""
    key = fresh("fifty")
    lock = threading.Lock()
    held, most, settled_sum, errors = [0], [0], [0], []
    admitted = [0]

    def pair(i):
        r, s = (a, b) if i % 2 else (b, a)
        real = random.randint(0, 100)
        try:
            st, h, body = r.reserve("budget", key, 100)
            if st == 429:
                return
            if st != 200 or "reservation" not in body:
                errors.append("reserve %d: %r %r" % (i, st, body))
                return
            with lock:
                held[0] += 1
                admitted[0] += 1
                most[0] = max(most[0], held[0])
                check(body["remaining"] >= 0, "remaining %r", body["remaining"])
            # no longer counted as held once its settle is sent: the held
            # interval seen here lies within the one the backend holds
            with lock:
                held[0] -= 1
            st, h, body2 = s.settle(body["reservation"], real)
            with lock:
                if st == 200 and body2.get("settled"):
                    settled_sum[0] += real
                else:
                    errors.append("settle %d: %r %r" % (i, st, body2))
        except Exception as e:  # noqa: BLE001
            errors.append("pair %d: %s" % (i, e))

    threads = [threading.Thread(target=pair, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120 * H.SLOW)
    check(not errors, "errors: %r", errors[:5])
    check(admitted[0] >= 10, "only %d of 50 reservations admitted", admitted[0])
    # a held estimate is counted until its settle answers: never above 10
    check(most[0] <= 10, "%d estimates of 100 held at once under 1,000", most[0])
    used = 1000 - a.state("budget", key)["remaining"]
    eq(used, settled_sum[0], "the count after every settle: the settled costs, exactly")
    # the first 50 at once, before any settle: exactly 10 admitted
    key2 = fresh("fifty-at-once")
    results = []

    def reserve_only(i):
        results.append((a if i % 2 else b).reserve("budget", key2, 100))

    threads = [threading.Thread(target=reserve_only, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120 * H.SLOW)
    ok = [r[2]["reservation"] for r in results if r[0] == 200]
    eq(len(ok), 10, "reservations of 100 admitted under 1,000 at once")
    eq(sum(1 for r in results if r[0] == 429), 40, "the others denied")
    costs = [random.randint(0, 100) for _ in ok]
    for i, (rid, c) in enumerate(zip(ok, costs)):
        settled((b if i % 2 else a).settle(rid, c), c - 100, "settle %d" % i)
    eq(1000 - b.state("budget", key2)["remaining"], sum(costs), "the sum of the settled costs")


def t_metric_by_result(nodes):
    for n in nodes:
        m = {r: H.metric(n.port, "ratelimitd_reservations_total", {"result": r})
             for r in ("taken", "settled", "unknown")}
        b = reserved(n.reserve("budget", fresh("m"), 10), n.name + " reserve")
        settled(n.settle(b["reservation"], 10), 0, n.name + " settle")
        not_settled(n.settle(b["reservation"], 10), n.name + " twice")
        for r in ("taken", "settled", "unknown"):
            eq(H.metric(n.port, "ratelimitd_reservations_total", {"result": r}) - m[r], 1,
               "%s ratelimitd_reservations_total{result=%s}" % (n.name, r))


def t_inspect_shows_the_overdraft(nodes):
    for n in nodes:
        key = fresh("insp")
        b = reserved(n.reserve("budget", key, 100), n.name + " reserve")
        settled(n.settle(b["reservation"], 1250), 1150, n.name + " settle past the limit")
        st, h, r = H.request(n.aport, "POST", "/admin/inspect", {"policy": "budget", "key": key})
        H.expect_json(st, h, r, 200, n.name + " inspect")
        eq(r["limits"][0].get("overdraft"), 250, n.name + ": inspect's overdraft")


def inspect(n, policy, key):
    st, h, r = H.request(n.aport, "POST", "/admin/inspect", {"policy": policy, "key": key})
    H.expect_json(st, h, r, 200, n.name + " inspect")
    return r


def listed(r):
    """An inspect's reservations, as (estimate, expires_in_ms) pairs."""
    rs = r.get("reservations")
    check(isinstance(rs, list), "reservations: %r", r)
    for e in rs:
        eq(sorted(e), ["estimate", "expires_in_ms"], "a listed reservation's fields")
    return [(e["estimate"], e["expires_in_ms"]) for e in rs]


def t_inspect_lists_open_reservations(nodes):
    """A caller's open reservations are listed with their estimates, the
    soonest to end first, never their ids; a settled one goes; another
    caller's are not listed."""
    for n in nodes:
        key, other = fresh("list"), fresh("list-other")
        r = inspect(n, "budget", key)
        eq((r.get("reservations_open"), listed(r)), (0, []), n.name + ": none yet")
        rids = [reserved(n.reserve("budget", key, c), n.name + " reserve %d" % c)["reservation"]
                for c in (100, 200, 300)]
        reserved(n.reserve("budget", other, 50), n.name + " another caller's reserve")
        r = inspect(n, "budget", key)
        eq(r.get("reservations_open"), 3, n.name + ": three open")
        ls = listed(r)
        eq([e for e, _ in ls], [100, 200, 300], n.name + ": their estimates, in the order taken")
        for _, t in ls:
            between(t, 1, HOUR // 6, n.name + ": expires_in_ms within reservation_ttl (10m)")
        text = H.request(n.aport, "POST", "/admin/inspect", {"policy": "budget", "key": key})[2]
        for rid in rids:
            check(rid.split(".")[0] not in repr(text), "%s: inspect shows a nonce: %r", n.name, text)
        settled(n.settle(rids[1], 150), -50, n.name + " settle the second")
        r = inspect(n, "budget", key)
        eq((r.get("reservations_open"), [e for e, _ in listed(r)]), (2, [100, 300]),
           n.name + ": the settled one is gone")
        r = inspect(n, "budget", other)
        eq((r.get("reservations_open"), [e for e, _ in listed(r)]), (1, [50]),
           n.name + ": the other caller's own only")
        for rid in (rids[0], rids[2]):
            settled(n.settle(rid, 0), -int(rid.split(".")[1]), n.name + " settle the rest")
        r = inspect(n, "budget", key)
        eq((r.get("reservations_open"), listed(r)), (0, []), n.name + ": none left")
        eq(r["limits"][0]["remaining"], 1000 - 150, n.name + ": only the settled cost counted")
        # a policy of two limits (the script's path for several)
        key = fresh("list-cc")
        reserved(n.reserve("cc", key, 70), n.name + " reserve under two limits")
        r = inspect(n, "cc", key)
        eq((r.get("reservations_open"), [e for e, _ in listed(r)]), (1, [70]),
           n.name + ": listed under two limits")


def t_inspect_forgets_expired(nodes):
    """reservation_ttl 1s: an open reservation is listed, then, past its
    deadline, not (waited for on the daemon's answers)."""
    for n in nodes:
        key = fresh("list-exp")
        reserved(n.reserve("short", key, 40), n.name + " reserve")
        r = inspect(n, "short", key)
        eq((r.get("reservations_open"), [e for e, _ in listed(r)]), (1, [40]),
           n.name + ": open at first")
        between(listed(r)[0][1], 1, 1000, n.name + ": expires_in_ms within 1s")
        H.wait_for(lambda: inspect(n, "short", key).get("reservations_open") == 0,
                   n.name + ": the expired reservation to leave inspect's list", 15)
        r = inspect(n, "short", key)
        eq(listed(r), [], n.name + ": nothing listed")
        eq(r["limits"][0]["remaining"], 960, n.name + ": its estimate stays counted")


def t_inspect_list_is_bounded(nodes):
    """1,000 open reservations of one caller: all counted, 100 listed."""
    for n in nodes:
        key = fresh("list-many")
        req = H.http_bytes("POST", "/check",
                           {"policy": "budget", "key": key, "cost": 1, "reserve": True})
        sts = H.pipelined(n.port, [req] * 1000)
        eq(sts, [200] * 1000, n.name + ": 1,000 reservations taken")
        r = inspect(n, "budget", key)
        eq(r.get("reservations_open"), 1000, n.name + ": all counted")
        eq(len(listed(r)), 100, n.name + ": 100 listed")
        eq(set(e for e, _ in listed(r)), {1}, n.name + ": their estimates")
        eq(r["limits"][0]["remaining"], 0, n.name + ": the budget taken")


CASES = [
    ("every algorithm: settled once, for less and for more", t_every_algorithm_settles_once),
    ("a settle of 0 gives the whole estimate back", t_settle_of_zero_gives_it_all_back),
    ("a concurrency limit keeps its slot", t_concurrency_keeps_its_slot),
    ("forged, foreign and larger ids settle nothing", t_forged_foreign_and_larger_settle_nothing),
    ("10^15 exact", t_ten_to_the_fifteen_exact),
    ("bad bodies: 400 naming the field, nothing counted", t_bad_bodies_count_nothing),
    ("ratelimitd_reservations_total by result", t_metric_by_result),
    ("the admin API's inspect shows the overdraft", t_inspect_shows_the_overdraft),
    ("inspect lists a caller's open reservations", t_inspect_lists_open_reservations),
    ("inspect forgets an expired reservation", t_inspect_forgets_expired),
    ("inspect's list is bounded: 1,000 open, 100 listed", t_inspect_list_is_bounded),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r:
        nodes = [Node("redis", redis=r), Node("memory", backend="memory")]
        other = Node("other", redis=r)
        try:
            yield nodes, other, r
        finally:
            for n in nodes + [other]:
                n.d.kill()


if __name__ == "__main__":
    cases = [(name, (lambda fn: lambda nodes, other, r: fn(nodes))(fn)) for name, fn in CASES]
    cases += [
        ("an override's reservation, settled on another daemon",
         lambda nodes, other, r: t_override_and_another_daemon(nodes, other)),
        ("past reservation_ttl: not settled, the estimate stays counted",
         lambda nodes, other, r: t_expired_stays_charged(nodes, r)),
        ("50 concurrent reserve -> settle pairs on two daemons",
         lambda nodes, other, r: t_fifty_pairs_on_two_daemons(nodes[0], other)),
    ]
    H.suite(cases, fixture, timeout=600)
