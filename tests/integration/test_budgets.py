#!/usr/bin/env python3
"""POST /charge (docs/API.md "POST /charge", docs/ALGORITHMS-CHOOSING.md
"Charges and overdraft") through the real daemon: a cost counted after the
work, past the limit, never denied.

Two daemons on one Redis (one with a hybrid policy, one deciding the same
keys exactly, to read what the syncs wrote) and one with `-b memory`, each
with its admin listener.  For every algorithm and both backends: the
charge's answer (charged, overdraft, each limit's overdraft), the denial
that follows and its payback time from the answers' numbers (hour-long
windows: the numbers, not the clock, say when; then short windows, waited
for with generous bounds, no fixed sleeps); budgets of 10^15 and of 2e9
micro-dollars a month in Europe/Berlin, exact in the body and the headers;
a concurrency limit not charged; a charge during an admin block; a hybrid
policy's charge synced whole; bad costs refused with nothing counted; the
charged-units metric.
"""

import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

HOUR = 3600 * 1000
ALGOS = ["fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"]
BUCKETS = ("token_bucket", "gcra")
BIG = 10 ** 15


def lim(algo, limit, window, burst=None):
    c = {"algorithm": algo, "limit": limit, "window": window}
    if algo in BUCKETS:
        c["burst"] = limit if burst is None else burst
    return c


def policies(hybrid):
    pols = []
    for a in ALGOS:
        pols.append({"name": "h_" + a, "limits": [lim(a, 1000, HOUR)]})
        # short: 10 a second (a bucket: burst 10), paid back within seconds
        pols.append({"name": "s_" + a, "limits": [lim(a, 10, 1000)]})
    pols += [
        {"name": "big_fw", "limits": [lim("fixed_window", BIG, 24 * HOUR)]},
        {"name": "big_tb", "limits": [lim("token_bucket", BIG, HOUR)]},
        {"name": "month", "limits": [{"algorithm": "fixed_window", "limit": 2 * 10 ** 9,
                                      "period": "month", "timezone": "Europe/Berlin"}]},
        {"name": "cc", "limits": [{"algorithm": "concurrency", "limit": 2, "lease": "1m"},
                                  lim("fixed_window", 1000, HOUR)]},
        {"name": "hy", "limits": [lim("fixed_window", 1000, HOUR)]},
    ]
    if hybrid:
        pols[-1].update(mode="hybrid", sync_interval="50ms")
    return pols


def config(admin_port, hybrid=False, deny_cache=True):
    return {"identity": ["body"], "failure_mode": "closed", "redis": {"timeout": "3s"},
            "deny_cache": deny_cache,
            "admin_listen": "127.0.0.1:%d" % admin_port, "policies": policies(hybrid)}


class Node:
    def __init__(self, name, redis=None, backend=None, hybrid=False, deny_cache=True):
        self.name = name
        self.aport = H.free_port()
        self.d = H.Daemon(config(self.aport, hybrid, deny_cache), redis=redis, backend=backend)
        self.port = self.d.port

    def charge(self, policy, key, cost, **kw):
        body = dict(policy=policy, key=key, cost=cost, **kw)
        return H.request(self.port, "POST", "/charge", body)

    def check(self, policy, key, cost=1):
        return H.request(self.port, "POST", "/check", {"policy": policy, "key": key, "cost": cost})

    def admin(self, action, body):
        st, h, b = H.request(self.aport, "POST", "/admin/" + action, body)
        H.expect_json(st, h, b, 200, "admin " + action)
        return b


_seq = [0]


def fresh(what):
    _seq[0] += 1
    return "%s-%d-%d" % (what, os.getpid(), _seq[0])


def charged(resp, cost, overdraft, remaining, what):
    """A charge's answer: 200, charged, overdraft (top level and the one
    limit's), remaining; allowed iff no overdraft.  Returns the body."""
    st, h, b = resp
    H.expect_json(st, h, b, 200, what)
    eq(b.get("charged"), cost, what + ": charged")
    eq(b.get("overdraft"), overdraft, what + ": overdraft")
    eq(b.get("remaining"), remaining, what + ": remaining")
    eq(b.get("allowed"), overdraft == 0, what + ": allowed (a check of cost 0 after it)")
    eq(b["limits"][-1].get("overdraft"), overdraft, what + ": limits[-1].overdraft")
    eq(h.get("x-ratelimit-remaining"), str(remaining), what + ": X-RateLimit-Remaining")
    check("retry-after" not in h, "%s: Retry-After on a charge's 200", what)
    return b


def denied(resp, overdraft, what):
    """A check of a caller in overdraft: 429, the overdraft, Retry-After."""
    st, h, b = resp
    H.expect_json(st, h, b, 429, what)
    eq(b.get("overdraft"), overdraft, what + ": overdraft")
    eq(b.get("remaining"), 0, what + ": remaining")
    eq(b["limits"][-1].get("overdraft"), overdraft, what + ": limits[-1].overdraft")
    check(b["retry_after_ms"] >= 1, "%s: retry_after_ms %r", what, b.get("retry_after_ms"))
    eq(h.get("retry-after"), str(H.ceil_s(b["retry_after_ms"])), what + ": Retry-After")
    return b


def between(v, lo, hi, what):
    check(lo <= v <= hi, "%s: %r not in %r..%r", what, v, lo, hi)


# ------------------------------------------------------------------- cases

def t_overdraft_and_payback_numbers(nodes):
    """1,500 charged into 1,000 an hour: 500 of overdraft, and the payback
    each algorithm's rule gives, read from the answers' numbers."""
    for n in nodes:
        for a in ALGOS:
            what = "%s %s" % (n.name, a)
            key = fresh("od")
            t0 = time.monotonic()
            b = charged(n.charge("h_" + a, key, 1500), 1500, 500, 0, what + " charge")
            d = denied(n.check("h_" + a, key, 0), 500, what + " then a check of cost 0")
            slack = int((time.monotonic() - t0) * 1000) + 2
            r = d["retry_after_ms"]
            if a == "fixed_window":
                # the window opened with the charge: over when it ends
                between(r, HOUR - slack, HOUR, what + " retry (the window's end)")
            elif a == "sliding_window_log":
                # one entry of 1,500: the log is under again when it leaves
                between(r, HOUR - slack, HOUR, what + " retry (the entry leaves)")
            elif a == "sliding_window_counter":
                # the next window weighs the 1,500 until 1,500 x part <= 1,000:
                # a third of the way into it, 2/3 of an hour before its end
                between(d["reset_ms"] - r, 2 * HOUR // 3 - 2, 2 * HOUR // 3 + 2,
                        what + " retry (a third into the next window)")
            else:
                # 500 tokens past empty at 1,000 an hour: 30 minutes, exactly
                between(r, HOUR // 2 - slack, HOUR // 2, what + " retry (debt / rate)")
            # a further charge while in overdraft is counted too
            charged(n.charge("h_" + a, key, 7), 7, 507, 0, what + " charge in overdraft")
            # a charge of 0 counts nothing and answers the state
            charged(n.charge("h_" + a, key, 0), 0, 507, 0, what + " charge of 0")


def t_payback_in_time(nodes):
    """Short windows (10 a second): a charge past the limit denies, and the
    caller passes again once the window, period or refill has paid it back,
    never before retry_after_ms said."""
    for n in nodes:
        for a in ALGOS:
            what = "%s %s" % (n.name, a)
            key = fresh("pb")
            t0 = time.monotonic()
            charged(n.charge("s_" + a, key, 25), 25, 15, 0, what + " charge 25 into 10/s")
            st, h, b = n.check("s_" + a, key, 1)
            if st == 429:
                r = b["retry_after_ms"]
                elapsed = (time.monotonic() - t0) * 1000
                if a in BUCKETS:
                    # 15 + 1 tokens at 10 a second
                    check(r <= 1600 and r + elapsed >= 1600 - 5,
                          "%s: retry_after_ms %d after %.0f ms: the debt of 16 takes 1600", what, r,
                          elapsed)
                # allowed again, at the earliest when it said
                H.wait_for(lambda: n.check("s_" + a, key, 1)[0] == 200, what + " paid back", 30)
                check((time.monotonic() - t0) * 1000 >= r - 5,
                      "%s: allowed before retry_after_ms %d", what, r)
            else:
                # a loaded machine: the window passed already; it must be
                # clear now, not denied by a lost overdraft
                eq(st, 200, what + " check after the charge")


def t_budgets_of_ten_to_the_fifteen(nodes):
    """10^15 budgets, exact to the unit in the body and the headers."""
    for n in nodes:
        key = fresh("big")
        charged(n.charge("big_fw", key, BIG - 1), BIG - 1, 0, 1, n.name + " 10^15 - 1")
        st, h, b = n.check("big_fw", key, 1)
        H.expect_json(st, h, b, 200, n.name + " the last unit")
        eq(b["remaining"], 0, n.name + " remaining after the last unit")
        charged(n.charge("big_fw", key, BIG), BIG, BIG, 0, n.name + " another 10^15")
        denied(n.check("big_fw", key, 0), BIG, n.name + " in overdraft by 10^15")
        key = fresh("bigtb")
        t0 = time.monotonic()
        st, h, b = n.check("big_tb", key, BIG)
        H.expect_json(st, h, b, 200, n.name + " a check of cost 10^15")
        eq(b["remaining"], 0, n.name + " remaining")
        st, h, b = n.charge("big_tb", key, 123456789012345)
        ms = int((time.monotonic() - t0) * 1000) + 2
        H.expect_json(st, h, b, 200, n.name + " a bucket's debt")
        # refill runs at 10^15 an hour (277,777,778 a ms) since the check
        od = b["overdraft"]
        between(od, 123456789012345 - 277777778 * ms, 123456789012345,
                n.name + " the debt past empty")
        eq(b["limits"][0]["overdraft"], od, n.name + " the limit's overdraft")
        # and takes exactly its time at that rate: od x 3.6e6 / 1e15 ms, up
        eq(b["retry_after_ms"], -(-od * HOUR // BIG), n.name + " the debt's time")
        key = fresh("month")
        b = charged(n.charge("month", key, 1999999999), 1999999999, 0, 1, n.name + " month budget")
        eq(b["limits"][0].get("period"), "month", n.name + " the period")
        b = charged(n.charge("month", key, 2), 2, 1, 0, n.name + " one micro-dollar past it")
        d = denied(n.check("month", key, 0), 1, n.name + " over the month's budget")
        eq(d["retry_after_ms"], d["reset_ms"], n.name + " paid back when the month ends")


def t_bad_costs_count_nothing(nodes):
    for n in nodes:
        key = fresh("bad")
        for cost in (-1, 1.5, BIG + 1, "7", 2 ** 63):
            st, h, b = n.charge("h_fixed_window", key, cost)
            if cost == 2 ** 63:
                H.expect_error(st, h, b, 400, what="%s cost %r" % (n.name, cost))
            else:
                H.expect_error(st, h, b, 400, "cost", "%s cost %r" % (n.name, cost))
        st, h, b = n.check("h_fixed_window", key, 0)
        H.expect_json(st, h, b, 200, n.name + " after the refused charges")
        eq(b["remaining"], 1000, n.name + " nothing counted by a refused charge")
        st, h, b = H.request(n.port, "GET", "/charge")
        H.expect_error(st, h, b, 405, what=n.name + " GET /charge")
        eq(h.get("allow"), "POST", n.name + " Allow")
        st, h, b = H.request(n.port, "POST", "/charge", {"policy": "nope", "key": "x", "cost": 1})
        H.expect_error(st, h, b, 400, "policy", n.name + " an unknown policy")


def t_no_slot_is_charged(nodes):
    for n in nodes:
        key = fresh("cc")
        st, h, b = n.charge("cc", key, 1200)
        H.expect_json(st, h, b, 200, n.name + " charge under a concurrency limit")
        eq([x["remaining"] for x in b["limits"]], [2, 0], n.name + " slots untouched, window over")
        eq([x["overdraft"] for x in b["limits"]], [0, 200], n.name + " each limit's overdraft")
        check("lease" not in b, "%s: a charge took a lease: %r", n.name, b)


def t_charge_during_a_block(nodes):
    for n in nodes:
        key = fresh("blk")
        n.admin("block", {"policy": "h_fixed_window", "key": key, "duration": "1h"})
        st, h, b = n.charge("h_fixed_window", key, 300)
        H.expect_json(st, h, b, 200, n.name + " a charge while blocked")
        eq(b.get("blocked"), True, n.name + " blocked")
        eq(b.get("charged"), 300, n.name + " charged while blocked")
        eq(b["limits"][0]["remaining"], 700, n.name + " the charge counted while blocked")
        st, h, b = n.check("h_fixed_window", key, 1)
        H.expect_json(st, h, b, 429, n.name + " a check while blocked")
        n.admin("unblock", {"policy": "h_fixed_window", "key": key})
        st, h, b = n.check("h_fixed_window", key, 0)
        H.expect_json(st, h, b, 200, n.name + " after the block")
        eq(b["remaining"], 700, n.name + " what the charge left")


def t_hybrid_charges_sync_whole(nodes, exact):
    """A hybrid policy charges its local view, and its sync puts every unit
    in Redis (a debt past the limit included), as an exact daemon sees."""
    n = nodes[0]
    key = fresh("hy")
    st, h, b = n.check("hy", key, 0)       # seeds the local view
    H.expect_json(st, h, b, 200, "hybrid seed")
    charged(n.charge("hy", key, 1500), 1500, 500, 0, "hybrid charge")
    denied(n.check("hy", key, 0), 500, "hybrid view after the charge")
    H.wait_for(lambda: exact.check("hy", key, 0)[2].get("overdraft") == 500,
               "the exact daemon to see the synced 1,500", 30)
    charged(n.charge("hy", key, 600), 600, 1100, 0, "hybrid charge in overdraft")
    H.wait_for(lambda: exact.check("hy", key, 0)[2].get("overdraft") == 1100,
               "the exact daemon to see 2,100", 30)


def t_metric_counts_charged_units(nodes):
    for n in nodes:
        before = H.metric(n.port, "ratelimitd_charged_units_total", {"policy": "big_tb"})
        n.charge("big_tb", fresh("m"), BIG)
        n.charge("big_tb", fresh("m"), 5)
        after = H.metric(n.port, "ratelimitd_charged_units_total", {"policy": "big_tb"})
        eq(after - before, BIG + 5, n.name + " ratelimitd_charged_units_total")


CASES = [
    ("every algorithm's overdraft and its payback time, from the numbers",
     t_overdraft_and_payback_numbers),
    ("short windows: denied until paid back, then allowed", t_payback_in_time),
    ("10^15 budgets and a month of micro-dollars in Europe/Berlin, exact", t_budgets_of_ten_to_the_fifteen),
    ("bad costs: 400 naming cost, nothing counted", t_bad_costs_count_nothing),
    ("a concurrency limit is not charged", t_no_slot_is_charged),
    ("a charge counts during an admin block", t_charge_during_a_block),
    ("ratelimitd_charged_units_total", t_metric_counts_charged_units),
]


def t_hybrid(nodes, exact):
    t_hybrid_charges_sync_whole(nodes, exact)


@contextlib.contextmanager
def fixture():
    with H.Redis() as r:
        nodes = [Node("redis", redis=r, hybrid=True), Node("memory", backend="memory")]
        # reads what the syncs wrote: no cached denial may answer for Redis
        exact = Node("exact", redis=r, deny_cache=False)
        try:
            yield nodes, exact
        finally:
            for n in nodes + [exact]:
                n.d.kill()


if __name__ == "__main__":
    cases = [(name, (lambda fn: lambda nodes, exact: fn(nodes))(fn)) for name, fn in CASES]
    cases.append(("a hybrid policy's charge is synced whole", t_hybrid))
    H.suite(cases, fixture, timeout=300)
