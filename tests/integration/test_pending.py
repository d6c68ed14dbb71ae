#!/usr/bin/env python3
"""Charges the backend cannot take now (docs/API.md, "Charges the backend
cannot take now"; src/pending.h) through the real daemon and a real Redis
that these cases stop, pause and restart on purpose:

  - charges sent while Redis is down: 202 {"pending":true,...} within
    redis.timeout, applied once Redis is back: the count is their sum;
  - a charge whose reply is lost after it ran (Redis asleep past
    redis.timeout: the daemon drops the stalled connection and sends it
    again) is applied once, though Redis ran it twice;
  - the order the charges came is the order Redis applies them (MONITOR);
  - past max_pending_charges: 503 "charges: backlog full", counted, and
    nothing of the refused charge counted;
  - SIGTERM: what is kept is sent within shutdown_grace (the daemon waits
    for a paused Redis), and what cannot be is logged with its count and
    units and counted as lost;
  - settles (POST /settle) kept the same way: 202 without "settled" within
    redis.timeout, applied once when Redis is back (the count is the
    estimate adjusted by the settle exactly), in order with the caller's
    charges (MONITOR), sent without a once key, and one whose reply was
    lost after it ran not applied twice (its resend finds no record).

One worker each, so the bound and the queue are one worker's.  No fixed
sleeps: every wait is for a state the daemon or Redis reports.
"""

import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, note  # noqa: E402

LIMIT = 10 ** 12
TIMEOUT_MS = 250
# what the daemon may take past redis.timeout on a loaded box (test_faults);
# the answer is timed by the daemon itself (its access log's us=): a Python
# caller on a loaded 2-core box adds its own delays, bounded by CALLER_WORST
MARGIN = 0.7 * H.SLOW
CALLER_WORST = 3.0 * H.SLOW


def config(**kw):
    c = {"identity": ["body"], "failure_mode": "closed", "workers": 1, "access_log": 1,
         "redis": {"timeout": "%dms" % TIMEOUT_MS, "connect_timeout": "250ms"},
         "policies": [{"name": "tokens", "limits": [{"algorithm": "fixed_window", "limit": LIMIT,
                                                     "window": "1h"}]},
                      {"name": "bucket", "limits": [{"algorithm": "token_bucket", "limit": LIMIT,
                                                     "window": "1h", "burst": LIMIT}]}]}
    c.update(kw)
    return c


def charge(d, key, cost, policy="tokens"):
    t0 = time.monotonic()
    st, h, b = H.request(d.port, "POST", "/charge", {"policy": policy, "key": key, "cost": cost})
    return st, h, b, time.monotonic() - t0


def counted(d, key, policy="tokens"):
    """Units the policy counts for key now (a charge of 0 reads the state)."""
    st, _, b, _ = charge(d, key, 0, policy)
    eq(st, 200, "a charge of 0 with Redis up (%r)" % (b,))
    if policy == "tokens":
        return LIMIT - b["remaining"] + b["overdraft"]
    return b


def pending(d):
    return H.metric(d, "ratelimitd_charges_pending")


def expect_pending(d, st, b, dt, cost, what):
    """A 202 for a kept charge of `cost` (a settle's: its difference),
    decided by the daemon within redis.timeout (the last 202 of its access
    log: charges go one by one)."""
    eq(st, 202, what + ": status (body %r)" % (b,))
    eq(b, {"pending": True, "policy": "tokens", "charged": cost}, what + ": body")
    check(dt < CALLER_WORST, "%s: the caller waited %.3f s", what, dt)
    taken = re.findall(r"msg=check .*status=202 .* us=(\d+)$", d.log(), re.M)
    check(taken, "%s: no 202 in the access log:\n%s", what, d.log())
    check(int(taken[-1]) / 1e6 <= TIMEOUT_MS / 1000 + MARGIN,
          "%s: the daemon took %s us, past redis.timeout %d ms", what, taken[-1], TIMEOUT_MS)
    return int(taken[-1]) / 1e6


def t_down_then_back():
    """Redis stopped: 202 within redis.timeout; restarted: applied once."""
    with H.Redis(topology="standalone") as r, H.Daemon(config(), redis=r) as d:
        r.stop()
        costs = [7, 1000, 3, 250000, 1]
        worst = 0.0
        for i, c in enumerate(costs):
            st, _, b, dt = charge(d, "down", c)
            worst = max(worst, expect_pending(d, st, b, dt, c, "charge %d with Redis stopped" % i))
        eq(pending(d), len(costs), "ratelimitd_charges_pending")
        eq(H.metric(d, "ratelimitd_charges_pending_units"), sum(costs),
           "ratelimitd_charges_pending_units")
        before = H.metric(d, "ratelimitd_charged_units_total", {"policy": "tokens"})
        r.restart()
        H.wait_for(lambda: pending(d) == 0, "the kept charges applied", timeout=15 * H.SLOW)
        eq(counted(d, "down"), sum(costs), "the count after Redis came back: the sum, once")
        eq(H.metric(d, "ratelimitd_charged_units_total", {"policy": "tokens"}) - before, sum(costs),
           "ratelimitd_charged_units_total counts the kept charges when applied")
        eq(H.metric(d, "ratelimitd_charges_deferred_total"), len(costs),
           "ratelimitd_charges_deferred_total")
        eq(H.metric(d, "ratelimitd_charges_lost_total"), 0, "ratelimitd_charges_lost_total")
        # applied once means never again: later charges add to it exactly
        st, _, b, _ = charge(d, "down", 5)
        eq(st, 200, "a charge with Redis up")
        eq(counted(d, "down"), sum(costs) + 5, "the count after one more charge")
        eq(d.stop(), 0, "exit status")
        note("charges with Redis stopped: worst answer %.1f ms (redis.timeout %d ms)",
             worst * 1000, TIMEOUT_MS)


def fcalls(r):
    return H.commandstat_calls(r, "fcall", "evalsha", "eval")


def lose_reply(d, r, eater, send, what):
    """send() with the relay eating replies: Redis runs it, its reply is
    lost; the daemon drops the stalled connection and sends it again on the
    next, whose replies pass: wait until it is applied."""
    base = fcalls(r)
    eater.eat.set()
    send()
    H.wait_for(lambda: fcalls(r) > base, "Redis ran the " + what, timeout=5 * H.SLOW)
    # the daemon drops the stalled connection: the operation fails there,
    # and the relay lets the next one's replies through
    H.wait_for(lambda: "dropping the redis connection" in d.log(),
               "the stalled connection dropped", timeout=15 * H.SLOW)
    eater.eat.clear()
    H.wait_for(lambda: pending(d) == 0, "the kept %s applied" % what, timeout=15 * H.SLOW)
    ran = fcalls(r) - base
    check(ran >= 2, "Redis ran %d script calls: the %s was not sent again", ran, what)


def t_reply_lost_once():
    """A charge Redis ran whose reply was lost: answered 202, its connection
    dropped as stalled, sent again on the next: applied once, though Redis
    ran it twice."""
    with H.Redis(topology="standalone") as r, H.Relay(r.port) as eater, \
            H.Daemon(config(), redis=eater) as d:
        eq(counted(d, "lr"), 0, "a new key")
        def send():
            st, _, b, dt = charge(d, "lr", 1234)
            expect_pending(d, st, b, dt, 1234, "a charge whose reply is lost")

        lose_reply(d, r, eater, send, "charge")
        eq(counted(d, "lr"), 1234, "the count: the charge once, though sent twice")
        eq(H.metric(d, "ratelimitd_charged_units_total", {"policy": "tokens"}), 1234,
           "ratelimitd_charged_units_total")
        eq(d.stop(), 0, "exit status")


def monitor_costs(r, n, key, pattern=r'"(\d+)oc"'):
    """Collect the cost strings of the next n script calls touching key."""
    out = []
    c = r.server.resp(timeout=30)
    eq(c("MONITOR"), "OK", "MONITOR")

    def run():
        try:
            while len(out) < n:
                line = H._resp_read(c.f)
                if key in line and ("fcall" in line.lower() or "evalsha" in line.lower()):
                    out.extend(m for m in re.findall(pattern, line))
        except Exception:
            pass
        finally:
            c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return out, t


def t_order_preserved():
    """Kept charges reach Redis in the order they came."""
    with H.Redis(topology="standalone") as r, H.Daemon(config(), redis=r) as d:
        r.stop()
        costs = list(range(1, 41))
        for c in costs:
            st, _, b, dt = charge(d, "order", c)
            expect_pending(d, st, b, dt, c, "charge of %d" % c)
        r.restart()
        # Redis answers PING before the daemon reconnects (its backoff)
        seen, t = monitor_costs(r, len(costs), "order")
        H.wait_for(lambda: pending(d) == 0, "the kept charges applied", timeout=15 * H.SLOW)
        t.join(timeout=10 * H.SLOW)
        eq([int(x) for x in seen[:len(costs)]], costs, "the order Redis applied them in")
        eq(counted(d, "order"), sum(costs), "the count")
        eq(d.stop(), 0, "exit status")


def t_backlog_full():
    """max_pending_charges kept: the next is 503, counted, nothing of it counted."""
    with H.Redis(topology="standalone") as r, \
            H.Daemon(config(max_pending_charges=3), redis=r) as d:
        r.stop()
        for c in (1, 2, 4):
            st, _, b, dt = charge(d, "full", c)
            expect_pending(d, st, b, dt, c, "charge of %d" % c)
        st, h, b, _ = charge(d, "full", 100)
        H.expect_error(st, h, b, 503, None, "past max_pending_charges")
        eq(b, {"error": "charges: backlog full"}, "the 503's body")
        eq(h.get("retry-after"), "1", "Retry-After")
        eq(H.metric(d, "ratelimitd_charges_refused_total"), 1, "ratelimitd_charges_refused_total")
        eq(pending(d), 3, "ratelimitd_charges_pending")
        r.restart()
        H.wait_for(lambda: pending(d) == 0, "the kept charges applied", timeout=15 * H.SLOW)
        eq(counted(d, "full"), 7, "the count: the kept ones, not the refused one")
        # room again once applied
        st, _, b, _ = charge(d, "full", 10)
        eq(st, 200, "a charge after the backlog emptied (%r)" % (b,))
        eq(d.stop(), 0, "exit status")


def t_sigterm_flushes():
    """SIGTERM with charges kept for a paused Redis: the daemon waits (within
    shutdown_grace) and applies them when Redis moves again."""
    with H.Redis(topology="standalone") as r, \
            H.Daemon(config(shutdown_grace="60s"), redis=r) as d:
        r.pause()
        costs = [11, 22, 33]
        try:
            for c in costs:
                st, _, b, dt = charge(d, "flush", c)
                expect_pending(d, st, b, dt, c, "charge of %d with Redis paused" % c)
            d.send_signal(signal.SIGTERM)
            # still running while the charges are kept
            H.wait_for(lambda: "stopping" in d.log(), "the drain began", timeout=5 * H.SLOW)
            check(d.alive(), "the daemon exited with charges kept and shutdown_grace left")
        except BaseException:
            d.kill()  # it would wait its 60 s of grace for a Redis that is gone
            raise
        r.resume()
        eq(d.proc.wait(timeout=30 * H.SLOW), 0, "exit status after the flush")
        d.stop()
        log = d.log()
        check("charges not applied before exit" not in log, "charges logged as lost:\n%s", log)
        with H.Daemon(config(), redis=r) as reader:
            eq(counted(reader, "flush"), sum(costs), "the count in Redis after the flush")
            reader.stop()


def t_sigterm_logs_what_it_could_not():
    """Redis down through shutdown_grace: the daemon exits after it and logs
    the charges and units it could not apply."""
    with H.Redis(topology="standalone") as r, \
            H.Daemon(config(shutdown_grace="300ms"), redis=r) as d:
        r.stop()
        costs = [5, 6, 10 ** 9]
        for c in costs:
            st, _, b, dt = charge(d, "exit", c)
            expect_pending(d, st, b, dt, c, "charge of %d" % c)
        eq(d.stop(timeout=30 * H.SLOW), 0, "exit status")
        log = d.log()
        m = re.search(r'msg="charges not applied before exit" charges=(\d+) units=(\d+)', log)
        check(m is not None, "no line naming the charges not applied:\n%s", log)
        eq((int(m.group(1)), int(m.group(2))), (len(costs), sum(costs)), "charges and units logged")


# a reserving check with Redis up is decided in time under valgrind too
SETTLE_TIMEOUT_MS = TIMEOUT_MS * H.SLOW * H.SLOW


def settle_config(**kw):
    return config(redis={"timeout": "%dms" % SETTLE_TIMEOUT_MS, "connect_timeout": "250ms"}, **kw)


def reserve(d, key, estimate):
    st, _, b = H.request(d.port, "POST", "/check",
                         {"policy": "tokens", "key": key, "cost": estimate, "reserve": True})
    eq(st, 200, "a reserving check with Redis up (%r)" % (b,))
    check(b.get("reservation"), "no reservation in %r", b)
    return b["reservation"]


def settle(d, rid, cost):
    t0 = time.monotonic()
    st, h, b = H.request(d.port, "POST", "/settle", {"reservation": rid, "cost": cost})
    return st, h, b, time.monotonic() - t0


def expect_settle_pending(st, b, dt, charged, what):
    """A 202 for a kept settle, or a charge of a settle's case (settles are
    not in the access log: timed by the caller, within the case's
    redis.timeout and what a loaded box adds)."""
    eq(st, 202, what + ": status (body %r)" % (b,))
    eq(b, {"pending": True, "policy": "tokens", "charged": charged}, what + ": body")
    check(dt < SETTLE_TIMEOUT_MS / 1000 + CALLER_WORST, "%s: the caller waited %.3f s", what, dt)


def stop_keeping(r):
    """Stop Redis with what it holds saved (the reservation's record, the
    counts), so that its restart has them: Redis down, not emptied."""
    eq(r.cli("SAVE"), "OK", "SAVE")
    r.stop()


def rsv_metric(d, result):
    return H.metric(d, "ratelimitd_reservations_total", {"result": result})


def t_settle_down_then_back():
    """A settle with Redis stopped: 202 without "settled" in time, kept in
    order with the caller's charges, applied once when Redis is back."""
    with H.Redis(topology="standalone") as r, H.Daemon(settle_config(), redis=r) as d:
        rid = reserve(d, "sd", 1000)
        eq(counted(d, "sd"), 1000, "the estimate taken")
        stop_keeping(r)
        st, _, b, dt = charge(d, "sd", 7)
        expect_settle_pending(st, b, dt, 7, "a charge before the settle")
        st, h, b, dt = settle(d, rid, 300)
        expect_settle_pending(st, b, dt, -700, "a settle of 300 with Redis stopped")
        check("settled" not in b, "a kept settle says settled: %r", b)
        st, _, b, dt = charge(d, "sd", 9)
        expect_settle_pending(st, b, dt, 9, "a charge after the settle")
        eq(pending(d), 3, "ratelimitd_charges_pending: two charges and the settle")
        eq(H.metric(d, "ratelimitd_charges_pending_units"), 7 + 300 + 9,
           "ratelimitd_charges_pending_units (a settle's: its cost)")
        eq(rsv_metric(d, "settled"), 0, "nothing settled while Redis is down")
        r.restart()
        # the order Redis takes them in; the settle without a once key ("o")
        seen, t = monitor_costs(r, 3, "sd", r'"(\d+o?[cs])"')
        H.wait_for(lambda: pending(d) == 0, "the kept settle applied", timeout=15 * H.SLOW)
        t.join(timeout=10 * H.SLOW)
        eq(seen[:3], ["7oc", "300s", "9oc"], "what Redis ran, in order")
        eq(counted(d, "sd"), 300 + 7 + 9, "the count: the estimate settled at 300, once")
        eq(rsv_metric(d, "settled"), 1, "ratelimitd_reservations_total{settled}")
        eq(H.metric(d, "ratelimitd_charges_deferred_total"), 3, "ratelimitd_charges_deferred_total")
        eq(H.metric(d, "ratelimitd_charges_lost_total"), 0, "ratelimitd_charges_lost_total")
        # applied once: settling again settles nothing
        st, _, b, _ = settle(d, rid, 300)
        eq((st, b), (200, {"settled": False}), "the same settle again with Redis up")
        eq(counted(d, "sd"), 316, "the count after settling again")
        eq(d.stop(), 0, "exit status")


def t_settle_over_estimate_kept():
    """A kept settle for more than the estimate charges the difference once,
    counted in ratelimitd_charged_units_total when applied."""
    with H.Redis(topology="standalone") as r, H.Daemon(settle_config(), redis=r) as d:
        rid = reserve(d, "so", 100)
        stop_keeping(r)
        st, _, b, dt = settle(d, rid, 2500)
        expect_settle_pending(st, b, dt, 2400, "a settle of 2500 with Redis stopped")
        before = H.metric(d, "ratelimitd_charged_units_total", {"policy": "tokens"})
        r.restart()
        H.wait_for(lambda: pending(d) == 0, "the kept settle applied", timeout=15 * H.SLOW)
        eq(counted(d, "so"), 2500, "the count: the real cost, once")
        eq(H.metric(d, "ratelimitd_charged_units_total", {"policy": "tokens"}) - before, 2400,
           "ratelimitd_charged_units_total: the difference")
        eq(rsv_metric(d, "settled"), 1, "ratelimitd_reservations_total{settled}")
        eq(d.stop(), 0, "exit status")


def t_settle_reply_lost_once():
    """A settle Redis ran whose reply was lost: answered 202, sent again on
    the next connection, where it finds no record: applied once."""
    with H.Redis(topology="standalone") as r, H.Relay(r.port) as eater, \
            H.Daemon(settle_config(), redis=eater) as d:
        rid = reserve(d, "sl", 1000)

        def send():
            st, _, b, dt = settle(d, rid, 300)
            expect_settle_pending(st, b, dt, -700, "a settle whose reply is lost")

        lose_reply(d, r, eater, send, "settle")
        eq(counted(d, "sl"), 300, "the count: the settle once, though sent twice")
        eq(H.metric(d, "ratelimitd_charges_lost_total"), 0, "ratelimitd_charges_lost_total")
        eq(d.stop(), 0, "exit status")


def t_settle_backlog_full():
    """max_pending_charges kept: a settle is 503, nothing of it applied."""
    with H.Redis(topology="standalone") as r, \
            H.Daemon(settle_config(max_pending_charges=1), redis=r) as d:
        rid = reserve(d, "sf", 100)
        stop_keeping(r)
        st, _, b, dt = charge(d, "sf", 1)
        expect_settle_pending(st, b, dt, 1, "a charge filling the backlog")
        st, h, b, _ = settle(d, rid, 0)
        H.expect_error(st, h, b, 503, None, "a settle past max_pending_charges")
        eq(b, {"error": "charges: backlog full"}, "the 503's body")
        r.restart()
        H.wait_for(lambda: pending(d) == 0, "the kept charge applied", timeout=15 * H.SLOW)
        eq(counted(d, "sf"), 101, "the count: the estimate stands, the charge added")
        st, _, b, _ = settle(d, rid, 0)
        eq((st, b.get("settled"), b.get("charged")), (200, True, -100),
           "the settle again with Redis up (%r)" % (b,))
        eq(counted(d, "sf"), 1, "the count after it")
        eq(d.stop(), 0, "exit status")


CASES = [
    ("charges while Redis is down: 202 in time, applied once when it is back", t_down_then_back),
    ("a charge whose reply is lost after it ran is applied once", t_reply_lost_once),
    ("kept charges are applied in the order they came", t_order_preserved),
    ("past max_pending_charges: 503 charges: backlog full, counted", t_backlog_full),
    ("SIGTERM sends what is kept within shutdown_grace", t_sigterm_flushes),
    ("SIGTERM logs the charges and units it could not apply", t_sigterm_logs_what_it_could_not),
    ("a settle while Redis is down: 202, in order, applied once when back",
     t_settle_down_then_back),
    ("a kept settle past the estimate charges the difference once", t_settle_over_estimate_kept),
    ("a settle whose reply is lost after it ran is applied once", t_settle_reply_lost_once),
    ("past max_pending_charges a settle is 503, nothing applied", t_settle_backlog_full),
]

if __name__ == "__main__":
    t = H.Tests(timeout=300)
    t.run_cases(CASES)
    sys.exit(t.finish())
