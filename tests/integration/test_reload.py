#!/usr/bin/env python3
"""SIGHUP reloads the config file (docs/API.md "Signals", docs/operations.md, "Command line").

A good file takes effect for new checks (a changed limit, a new policy, a
removed one); a broken file (bad JSON, or valid JSON with semantic problems) is
logged with every problem and the running config stays; a restart-only option
(listen) is logged as such and the old address keeps serving.  Under load: 20
SIGHUPs alternating a good and a broken file while threads send checks over
keep-alive connections -> not one failed request; the cost of a reload is
measured and printed (not asserted).

The daemon reads `listen` from its file (no -l), so that a reload can try to
change it.  Local helper (not in harness.py): LogWatch follows the daemon's log
from an offset and waits for a line.
"""

import contextlib
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402

WAIT = 10.0          # a reload's log line must appear within this


def fw(limit, window="1h"):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


def config(port, p_limit=3, extra=(), drop=(), listen_port=None, load_limit=100000):
    pols = [
        {"name": "p", "match": {"path_prefix": "/p"}, "limits": [fw(p_limit)]},
        {"name": "oldpol", "match": {"path_prefix": "/old"}, "limits": [fw(10)]},
        {"name": "stay", "match": {"path_prefix": "/stay"}, "limits": [fw(10)]},
        {"name": "load", "match": {"path_prefix": "/load"}, "limits": [fw(load_limit)]},
        {"name": "tiny", "match": {"path_prefix": "/tiny"}, "limits": [fw(1)]},
    ]
    pols = [p for p in pols if p["name"] not in drop] + list(extra)
    return {
        "listen": "127.0.0.1:%d" % (listen_port or port),
        "workers": 2,
        "identity": ["body", "peer"],
        # semantics under test, not latency: the default 50 ms would answer a
        # check degraded whenever a loaded host delays Redis that long
        "redis": {"timeout": "2s"},
        "log_level": "info",
        "policies": pols,
    }


NEWPOL = {"name": "newpol", "match": {"path_prefix": "/new"}, "limits": [fw(4)]}


# ------------------------------------------------------------ local helpers

class LogWatch:
    """Follows a daemon's log: lines written after mark()."""

    def __init__(self, d):
        self.d = d
        self.offset = 0

    def mark(self):
        try:
            self.offset = os.path.getsize(self.d.logfile)
        except OSError:
            self.offset = 0

    def text(self):
        with open(self.d.logfile, "rb") as f:
            f.seek(self.offset)
            return f.read().decode("utf-8", "replace")

    def wait(self, pattern, timeout=WAIT, poll=0.0002):
        """The first line since mark() matching `pattern` (regex); Fail after timeout."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.text().splitlines():
                if rx.search(line):
                    return line
            if time.monotonic() > deadline:
                raise H.Fail("no log line matching %r within %ss; log since the mark:\n%s"
                             % (pattern, timeout, self.text()[-3000:]))
            if not self.d.alive():
                raise H.Fail("the daemon died (exit %s); log since the mark:\n%s"
                             % (self.d.proc.poll(), self.text()[-3000:]))
            time.sleep(poll)


RELOADED = r'msg="configuration reloaded"'
REJECTED = r'msg="reload rejected'


def reload_with(d, lw, cfg, expect_ok=True):
    """Write cfg, SIGHUP, wait for the outcome's log line; the new log text."""
    d.rewrite_config(cfg)
    lw.mark()
    d.reload()
    lw.wait(RELOADED if expect_ok else REJECTED)
    if not expect_ok:
        time.sleep(0.05)            # the rest of the problems, written right after
    text = lw.text()
    if expect_ok:
        check(not re.search(REJECTED, text), "a good file was rejected:\n%s", text)
    else:
        check(not re.search(RELOADED, text), "a broken file was reloaded:\n%s", text)
    return text


def expect(resp, policy, limit, want, what):
    """want: remaining of an allowed check, or 429."""
    st, h, b = resp
    check(st in (200, 429), "%s: status %r (body %r)", what, st, b)
    H.expect_json(st, h, b, st, what)
    eq(b.get("policy"), policy, what + ": body.policy")
    eq(b.get("limit"), limit, what + ": body.limit")
    eq(h.get("x-ratelimit-limit"), str(limit), what + ": X-RateLimit-Limit")
    if want == 429:
        check(st == 429, "%s: expected 429, got %d remaining %r", what, st, b.get("remaining"))
    else:
        check(st == 200 and b.get("remaining") == want, "%s: expected 200 remaining %d, got %d remaining %r",
              what, want, st, b.get("remaining"))


def unknown_policy(d, name, what):
    st, h, b = post(d, {"key": "x", "policy": name})
    H.expect_error(st, h, b, 400, field="policy", what=what)


# ------------------------------------------------------------ cases

class State:
    pass


def t_limit_change(d, lw, S):
    expect(post(d, {"key": "lc1", "policy": "p"}), "p", 3, 2, "limit 3, lc1 #1")
    expect(post(d, {"key": "lc1", "policy": "p"}), "p", 3, 1, "limit 3, lc1 #2")
    for i, rem in enumerate((2, 1, 0)):
        expect(post(d, {"key": "lc0", "policy": "p"}), "p", 3, rem, "limit 3, lc0 #%d" % (i + 1))
    expect(post(d, {"key": "lc0", "policy": "p"}), "p", 3, 429, "limit 3, lc0 #4")
    S.cfg = config(S.port, p_limit=5)
    reload_with(d, lw, S.cfg)
    for i, rem in enumerate((4, 3, 2, 1, 0)):
        expect(post(d, {"key": "lc2", "policy": "p"}), "p", 5, rem, "limit 5, fresh key lc2 #%d" % (i + 1))
    expect(post(d, {"key": "lc2", "policy": "p"}), "p", 5, 429, "limit 5, lc2 #6")
    # the counters are kept: lc1 had used 2 of its window, lc0 3
    expect(post(d, {"key": "lc1", "policy": "p"}), "p", 5, 2, "limit 5, lc1 #3 (2 used before the reload)")
    expect(post(d, {"key": "lc0", "policy": "p"}), "p", 5, 1, "limit 5, lc0 #4 (denied by 3, allowed by 5)")


def t_policy_added_removed(d, lw, S):
    unknown_policy(d, "newpol", "newpol before the reload")
    expect(post(d, {"key": "pa", "policy": "oldpol"}), "oldpol", 10, 9, "oldpol before the reload")
    st, h, b = post(d, {"key": "pa", "path": "/new/x"})
    H.expect_json(st, h, b, 200, "/new/x before the reload")
    eq(b.get("policy"), None, "/new/x before the reload: matches nothing")
    S.cfg = config(S.port, p_limit=5, extra=[NEWPOL], drop=["oldpol"])
    reload_with(d, lw, S.cfg)
    expect(post(d, {"key": "pa", "policy": "newpol"}), "newpol", 4, 3, "newpol by name after the reload")
    expect(post(d, {"key": "pa", "path": "/new/x"}), "newpol", 4, 2, "/new/x matches newpol after the reload")
    unknown_policy(d, "oldpol", "oldpol after it was removed")
    expect(post(d, {"key": "pa", "path": "/stay"}), "stay", 10, 9, "an unchanged policy")


def running_config_intact(d, what):
    expect(post(d, {"key": "keep-%s" % what, "policy": "p"}), "p", 5, 4, what + ": p still has limit 5")
    expect(post(d, {"key": "keep-%s" % what, "policy": "newpol"}), "newpol", 4, 3, what + ": newpol still there")
    unknown_policy(d, "oldpol", what + ": oldpol still gone")
    st, h, b = H.request(d.port, "GET", "/readyz")
    H.expect_json(st, h, b, 200, what + ": /readyz")


def t_broken_json(d, lw, S):
    bad = b'{ "listen": "127.0.0.1:%d", "policies": [ { "name": "p", \n "limits": [ }'
    text = reload_with(d, lw, bad % S.port, expect_ok=False)
    check(d.config_path in text, "the rejection does not name the file %s:\n%s", d.config_path, text)
    check(re.search(r":2:\d+", text), "the rejection does not give the line (2) of the JSON error:\n%s", text)
    running_config_intact(d, "after bad JSON")
    # an empty file too
    reload_with(d, lw, b"", expect_ok=False)
    running_config_intact(d, "after an empty file")


# the paths that semantic_bad() gets wrong, each must be named in the log
SEMANTIC_PROBLEMS = ["lisen", "failure_mode", "policies[0].limits[0].window", "policies[1].limits[0].algorithm",
                     "policies[2].name", "policies[3].limits", "trusted_proxies[1]"]


def semantic_bad(port):
    c = config(port, p_limit=7, extra=[NEWPOL], drop=["oldpol"])
    c["lisen"] = "127.0.0.1:1"
    c["failure_mode"] = "sometimes"
    c["trusted_proxies"] = ["127.0.0.0/8", "300.1.2.3/8"]
    c["policies"][0]["limits"][0]["window"] = "10 parsecs"
    c["policies"][1]["limits"][0]["algorithm"] = "leaky_bucket"
    c["policies"][2]["name"] = c["policies"][0]["name"]
    c["policies"][3]["limits"] = []
    return c


def t_broken_semantics(d, lw, S):
    text = reload_with(d, lw, semantic_bad(S.port), expect_ok=False)
    rejected = [l for l in text.splitlines() if re.search(REJECTED, l)]
    missing = [p for p in SEMANTIC_PROBLEMS if not any(p in l for l in rejected)]
    check(not missing, "problems not logged: %r; the rejection lines:\n%s", missing, "\n".join(rejected))
    # the same file through -t names the same problems (a cross-check of the file itself)
    path = H.write_config(semantic_bad(S.port))
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 1, "ratelimitd -t on the semantically bad file")
    running_config_intact(d, "after a semantically bad file")


def t_restart_only_listen(d, lw, S):
    other = H.free_port()
    S.cfg = config(S.port, p_limit=6, extra=[NEWPOL], drop=["oldpol"], listen_port=other)
    text = reload_with(d, lw, S.cfg)
    lines = [l for l in text.splitlines() if "listen" in l and "restart" in l]
    check(lines, "no log line says that listen changes only on restart:\n%s", text)
    # still serving on the old address, nothing on the new one
    expect(post(d, {"key": "lo", "policy": "p"}), "p", 6, 5, "the old address, p now limit 6")
    st, h, b = H.request(d.port, "GET", "/healthz")
    eq(st, 200, "GET /healthz on the old address")
    check(not H.port_open(other), "something answers on the new address 127.0.0.1:%d", other)
    # back to the running address: no complaint about listen any more
    S.cfg = config(S.port, p_limit=5, extra=[NEWPOL], drop=["oldpol"])
    text = reload_with(d, lw, S.cfg)
    check(not [l for l in text.splitlines() if "listen" in l and "restart" in l],
          "listen reported as changed though the file names the running address:\n%s", text)


def metric_samples(d):
    st, h, text = H.request(d.port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)', line)
        if m and "reload" in m.group(1):
            out[m.group(1)] = float(m.group(2))
    return out


def t_reload_metrics(d, lw, S):
    # docs/API.md: /metrics has "config reloads (ok/failed)"
    m0 = metric_samples(d)
    check(m0, "/metrics has no sample about reloads (docs/API.md: config reloads (ok/failed))")
    reload_with(d, lw, S.cfg)
    m1 = metric_samples(d)
    reload_with(d, lw, b"{", expect_ok=False)
    m2 = metric_samples(d)

    def grew(a, b):
        return {k: b[k] - a.get(k, 0) for k in b if b[k] != a.get(k, 0)}
    g1, g2 = grew(m0, m1), grew(m1, m2)
    check(len(g1) == 1 and list(g1.values()) == [1] and re.search(r"ok|success", list(g1)[0]),
          "a good reload: expected one ok sample +1, changes %r", g1)
    check(len(g2) == 1 and list(g2.values()) == [1] and re.search(r"fail|error|reject", list(g2)[0]),
          "a failed reload: expected one failed sample +1, changes %r", g2)


# ------------------------------------------------------------ under load

THREADS = 4
RELOADS = 20


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def t_reload_under_load(d, lw, S):
    good = [config(S.port, p_limit=5, extra=[NEWPOL], drop=["oldpol"], load_limit=100000),
            config(S.port, p_limit=5, extra=[NEWPOL], drop=["oldpol"], load_limit=100001)]
    broken = [b'{"policies": [', semantic_bad(S.port)]
    limits_ok = {"load": {100000, 100001}, "tiny": {1}}
    reload_with(d, lw, good[0])
    stop = threading.Event()
    lock = threading.Lock()
    records = []          # (t_start, latency_s)
    errors = []
    counts = {"200": 0, "429": 0}

    def worker(i):
        mine, bad, n = [], [], 0
        try:
            with H.Client(d.port) as c:
                while not stop.is_set():
                    pol = "load" if n % 2 == 0 else "tiny"
                    body = {"key": "t%d-%d" % (i, n % 50), "policy": pol}
                    t0 = time.monotonic()
                    st, h, b = c.request("POST", "/check", body)
                    dt = time.monotonic() - t0
                    n += 1
                    mine.append((t0, dt))
                    okb = (isinstance(b, dict) and st in (200, 429) and b.get("allowed") is (st == 200)
                           and b.get("policy") == pol and b.get("limit") in limits_ok[pol]
                           and H.media_type(h) == "application/json"
                           and h.get("x-ratelimit-limit") == str(b.get("limit"))
                           and b.get("degraded") is not True)
                    if not okb:
                        bad.append("thread %d request %d: %d %r" % (i, n, st, b))
                    else:
                        with lock:
                            counts[str(st)] += 1
                    if c.server_closed:
                        bad.append("thread %d: the server closed the keep-alive connection after "
                                   "request %d" % (i, n))
                        break
        except Exception as e:  # noqa: BLE001 - every transport error is a failed request
            bad.append("thread %d after %d requests: %s: %s" % (i, n, type(e).__name__, e))
        with lock:
            records.extend(mine)
            errors.extend(bad)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    t_begin = time.monotonic()
    for t in ts:
        t.start()
    time.sleep(2.0)                                   # baseline: load, no reloads
    t_base_end = time.monotonic()
    windows, cost_ok, cost_bad, internal = [], [], [], []
    problems = []
    for i in range(RELOADS):
        ok = i % 2 == 0
        cfg = good[(i // 2) % 2] if ok else broken[(i // 2) % 2]
        d.rewrite_config(cfg)
        lw.mark()
        t0 = time.monotonic()
        d.reload()
        try:
            line = lw.wait(RELOADED if ok else REJECTED, poll=0.0002)
        except H.Fail as e:
            problems.append("reload %d (%s file): %s" % (i + 1, "good" if ok else "broken", str(e)[:300]))
            continue
        t1 = time.monotonic()
        (cost_ok if ok else cost_bad).append(t1 - t0)
        windows.append((t0 - 0.02, t1 + 0.02))
        # the daemon's own view: ms timestamps of "reloading" -> outcome
        text = lw.text()
        tsx = re.findall(r"^ts=\S*T(\d+):(\d+):(\d+\.\d+)Z .*msg=\"(reloading configuration|configuration "
                         r"reloaded|reload rejected)", text, re.M)
        if len(tsx) >= 2:
            secs = [int(h_) * 3600 + int(m_) * 60 + float(s_) for h_, m_, s_, _ in tsx]
            internal.append(secs[-1] - secs[0])
        if ok and re.search(REJECTED, text) or (not ok and re.search(RELOADED, text)):
            problems.append("reload %d: wrong outcome:\n%s" % (i + 1, text))
        time.sleep(0.1)
    time.sleep(0.3)
    stop.set()
    for t in ts:
        t.join(timeout=H.HTTP_TIMEOUT + 5)
    t_end = time.monotonic()
    check(not any(t.is_alive() for t in ts), "client threads still running")

    base = [lat for t0, lat in records if t_begin + 0.2 <= t0 < t_base_end]
    around = [lat for t0, lat in records if any(a <= t0 <= b for a, b in windows)]
    ms = lambda v: v * 1000.0  # noqa: E731

    def show(name, v):
        return "%s: n=%d p50=%.2fms p99=%.2fms max=%.2fms" % (name, len(v), ms(pct(v, 50)), ms(pct(v, 99)),
                                                              ms(max(v)) if v else float("nan"))
    emit = sys.stdout.write
    emit("# reload under load: %d threads, %d requests in %.1fs (%d x 200, %d x 429), %d failed\n"
           % (THREADS, len(records), t_end - t_begin, counts["200"], counts["429"], len(errors)))
    if cost_ok:
        emit("# SIGHUP -> 'configuration reloaded' in the log (good file, n=%d): min %.2fms median %.2fms "
               "max %.2fms\n" % (len(cost_ok), ms(min(cost_ok)), ms(pct(cost_ok, 50)), ms(max(cost_ok))))
    if cost_bad:
        emit("# SIGHUP -> 'reload rejected' in the log (broken file, n=%d): min %.2fms median %.2fms "
               "max %.2fms\n" % (len(cost_bad), ms(min(cost_bad)), ms(pct(cost_bad, 50)), ms(max(cost_bad))))
    if internal:
        emit("# daemon's own log timestamps 'reloading' -> outcome (1ms resolution): max %.0fms\n"
               % ms(max(internal)))
    emit("# check latency %s\n" % show("without reloads (baseline 1.8s)", base))
    emit("# check latency %s\n" % show("in windows around reloads (SIGHUP-20ms .. outcome+20ms)", around))
    sys.stdout.flush()

    check(not errors, "%d failed requests under reload, first ones:\n%s", len(errors), "\n".join(errors[:10]))
    check(not problems, "%d reloads went wrong:\n%s", len(problems), "\n".join(problems))
    check(len(records) > 100, "only %d requests were sent: no real load", len(records))
    check(counts["200"] > 0 and counts["429"] > 0, "expected both 200s and 429s: %r", counts)
    check(around, "no request fell into a reload window: the load did not overlap the reloads")
    check(d.alive(), "the daemon died")
    # the last file was broken: the running config is the last good one
    last_good = good[((RELOADS - 2) // 2) % 2]
    want = last_good["policies"][[p["name"] for p in last_good["policies"]].index("load")]["limits"][0]["limit"]
    st, h, b = post(d, {"key": "after-load", "policy": "load"})
    H.expect_json(st, h, b, 200, "a check after the reloads")
    eq(b.get("limit"), want, "the load policy's limit after the reloads (the last good file)")


CASES = [
    ("good file: a changed limit (3 -> 5) takes effect for new checks", t_limit_change),
    ("good file: a new policy appears, a removed one is 400", t_policy_added_removed),
    ("broken file (bad JSON, empty): logged, the running config stays", t_broken_json),
    ("broken file (semantic problems): every problem logged, the running config stays", t_broken_semantics),
    ("restart-only listen: logged as such, the old address keeps serving", t_restart_only_listen),
    ("metrics count reloads ok/failed (docs/API.md)", t_reload_metrics),
    ("under load: %d SIGHUPs good/broken, zero failed requests (cost printed)" % RELOADS, t_reload_under_load),
]


@contextlib.contextmanager
def fixture():
    S = State()
    S.port = H.free_port()
    S.cfg = config(S.port)
    with H.Redis() as r, H.Daemon(S.cfg, redis=r, listen=False, port=S.port) as d:
        lw = LogWatch(d)
        yield d, lw, S


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=150)
