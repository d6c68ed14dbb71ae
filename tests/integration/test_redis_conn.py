#!/usr/bin/env python3
"""The Redis connection's failures, against real Redis (RL_TOPOLOGY picks
standalone, cluster or sentinel where a case applies to all three):

- error replies are logged once per distinct error, with counts, and every
  one is counted in /metrics (before: one warning per failed batch, 10,541
  lines in 3 s under OOM);
- a master demoted to a replica by a real REPLICAOF (or a URL naming a
  replica) is left: READONLY drops the connection, /readyz says 503 while
  the server is not a master, and checks are decided again once it is
  (before: READONLY on every check, forever, /readyz 200);
- checks that arrive while the first connection is being made wait for it
  (up to redis.timeout) instead of failing at once (before: in closed mode,
  hundreds of 503s in the first milliseconds of a fresh start);
- checks are FCALLs of a function library the handshake loads, named by the
  script's hash (another version's library is left alone); one forgotten by
  a real FUNCTION FLUSH is loaded again, the checks then sent as EVAL once;
  a server without FUNCTION (a real `rename-command FUNCTION ""`) gets
  EVALSHA, decided alike."""

import contextlib
import functools
import hashlib
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, wait_for  # noqa: E402

WORKERS = 2


def policy(limit=1000000):
    return [{"name": "p", "limits": [{"algorithm": "fixed_window", "limit": limit,
                                      "window": "1h"}]}]


def metric(port, name, labels):
    """One sample of GET /metrics, 0 when absent."""
    return H.metric(port, name, labels, default=0)


def post(d, key):
    return H.post(d, {"key": key, "policy": "p"})


class Load:
    """POST /check from `threads` keep-alive connections until stop(): the
    statuses seen, with the body's degraded flag."""

    def __init__(self, port, threads=4, prefix="load"):
        self.port, self.prefix = port, prefix
        self.answers, self.errors = [], []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.ts = [threading.Thread(target=self._run, args=(i,), daemon=True)
                   for i in range(threads)]
        for t in self.ts:
            t.start()

    def _run(self, i):
        n = 0
        try:
            with H.Client(self.port) as c:
                while not self.stop_ev.is_set():
                    # a new key each time: never a denial the daemon's deny
                    # cache could answer without Redis
                    st, _, b = c.request("POST", "/check",
                                         {"key": "%s-%d-%d" % (self.prefix, i, n),
                                          "policy": "p"})
                    with self.lock:
                        self.answers.append((st, isinstance(b, dict) and b.get("degraded", False)))
                    n += 1
        except Exception as e:  # noqa: BLE001 - reported by stop()
            with self.lock:
                self.errors.append("%s: %s" % (type(e).__name__, e))

    def count(self):
        with self.lock:
            return len(self.answers)

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(timeout=30)
        check(not self.errors, "client errors: %r", self.errors[:3])
        return list(self.answers)


def first_checks(port, threads=4, seconds=0.5):
    """POST /check from `threads` threads from the moment the daemon's port
    accepts, for `seconds` after that: [(status, degraded, seconds taken)]."""
    out, lock = [], threading.Lock()
    listening = threading.Event()
    end = [None]

    def run(i):
        n = 0
        deadline = time.monotonic() + H.START_TIMEOUT
        while end[0] is None or time.monotonic() < end[0]:
            t = time.monotonic()
            try:
                st, _, b = H.request(port, "POST", "/check",
                                     {"key": "first-%d-%d" % (i, n), "policy": "p"})
            except (ConnectionRefusedError, ConnectionResetError) as e:
                # not listening yet (a connection the kernel took before the
                # port was the daemon's may be reset): the first check goes
                # the moment it listens; after that a reset is a failed check
                if listening.is_set():
                    with lock:
                        out.append((repr(e), False, time.monotonic() - t))
                    n += 1
                    continue
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.001)
                continue
            except OSError as e:  # a timeout: the check was not answered
                with lock:
                    out.append((repr(e), False, time.monotonic() - t))
                n += 1
                continue
            if not listening.is_set():
                end[0] = time.monotonic() + seconds
                listening.set()
            with lock:
                out.append((st, isinstance(b, dict) and b.get("degraded", False),
                            time.monotonic() - t))
            n += 1
    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
    check(out, "no check answered: the daemon never listened on %d within %.0f s",
          port, H.START_TIMEOUT)
    return out


# ------------------------------------------------------------------ cases

def t_error_flood(topology, _):
    """Under OOM every check fails alike: a few log lines, every check counted."""
    with H.Redis(topology=topology) as r:
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(),
               "redis": {"timeout": "2s"}}
        with H.Daemon(cfg, redis=r, workers=WORKERS) as d:
            eq(post(d, "before")[0], 200, "a check before OOM")
            before = metric(d.port, "ratelimitd_redis_errors_total", 'kind="oom"')
            r.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
            r.cli("CONFIG", "SET", "maxmemory", "1")
            try:
                load = Load(d.port, prefix="oom")
                t0 = time.monotonic()
                # at least 3 s and 300 failed checks: the defect's scale
                while time.monotonic() - t0 < 3.0 or load.count() < 300:
                    check(time.monotonic() - t0 < 30 * H.SLOW, "only %d checks in 30 s",
                          load.count())
                    time.sleep(0.1)
                answers = load.stop()
            finally:
                r.cli("CONFIG", "SET", "maxmemory", "0")
            failed = sum(1 for st, _ in answers if st == 503)
            check(failed >= 300, "only %d of %d checks failed under OOM: %r", failed, len(answers),
                  sorted({a for a in answers}))
            wait_for(lambda: post(d, "after-%d" % time.monotonic_ns())[0] == 200,
                     "a check decided again after OOM")
            counted = metric(d.port, "ratelimitd_redis_errors_total", 'kind="oom"') - before
            check(counted >= failed, "ratelimitd_redis_errors_total{kind=\"oom\"} grew by %d, "
                  "%d checks failed", counted, failed)
            # one line when it starts and one with the count when it ends, per
            # worker (per node on a cluster): a handful, never one per check
            def oom_lines():
                return [ln for ln in d.log().splitlines() if "OOM" in ln]
            # a run ends with the next good reply on that connection: checks on
            # fresh connections reach every worker (SO_REUSEPORT), and every node
            for i in range(20 * WORKERS):
                eq(post(d, "recovered-%d" % i)[0], 200, "a check after OOM")
            ended = wait_for(lambda: [ln for ln in oom_lines() if "errors ended" in ln],
                             "the line that ends the run of OOM errors")
            lines = oom_lines()
            print("# OOM: %d checks failed in %.1f s, %d log lines, metric %d"
                  % (failed, time.monotonic() - t0, len(lines), counted))
            nodes = 3 if r.topology == "cluster" else 1
            check(len(lines) <= 2 * WORKERS * nodes,
                  "%d log lines for %d OOM errors:\n%s", len(lines), failed, "\n".join(lines[:10]))
            counts = [int(re.search(r"count=(\d+)", ln).group(1)) for ln in ended]
            check(max(counts) > 1, "the ending lines count no repeats: %r", ended)


def readyz(d):
    st, _, b = H.request(d.port, "GET", "/readyz", timeout=5.0)
    return st, (b.get("reason") if isinstance(b, dict) else b)


def role(port):
    return H.Resp(port)("ROLE")[0]


def wait_role(port, want):
    wait_for(lambda: role(port) == want, "redis on %d to be a %s" % (port, want))


def stays(d, status, seconds, what):
    """/readyz answers `status` on every probe for `seconds` (the bound of a
    state the daemon must hold, not a wait for one)."""
    end = time.monotonic() + seconds
    seen = []
    while time.monotonic() < end:
        seen.append(readyz(d))
        time.sleep(0.05)
    bad = [x for x in seen if x[0] != status]
    check(not bad, "/readyz %s: %d of %d probes not %d: %r", what, len(bad), len(seen), status,
          bad[:3])
    return seen


def t_demoted_master(_):
    """A real REPLICAOF turns our master into a replica: the daemon notices
    (idle: its heartbeat asks ROLE; busy: READONLY), says not ready, answers
    checks at once, and comes back when the server is a master again."""
    with H.Redis(topology="standalone") as a, H.Redis(topology="standalone") as b:
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(3),
               "redis": {"timeout": "2s", "connect_timeout": "1s"}}
        with H.Daemon(cfg, redis=a, workers=WORKERS) as d:
            eq([post(d, "k1")[0] for _ in range(4)], [200, 200, 200, 429], "limit 3 on the master")
            H.ready_everywhere(d.port)
            # 1. idle: no check tells, the heartbeat must
            eq(a.cli("REPLICAOF", "127.0.0.1", b.port), "OK", "REPLICAOF")
            t0 = time.monotonic()
            wait_for(lambda: readyz(d)[0] == 503, "/readyz 503 once our master is a replica")
            print("# idle: /readyz 503 %.2f s after REPLICAOF" % (time.monotonic() - t0))
            seen = stays(d, 503, 1.5, "while the server is a replica")
            check(any("master" in str(r) or "READONLY" in str(r) for _, r in seen),
                  "no probe says why: %r", seen[:3])
            # checks fail at once (closed: 503), never with Redis' error
            t1 = time.monotonic()
            got = [post(d, "k2-%d" % i)[0] for i in range(20)]
            eq(set(got), {503}, "checks while the server is a replica (closed)")
            check(time.monotonic() - t1 < 2.0 * H.SLOW, "20 checks took %.2f s: not failing fast",
                  time.monotonic() - t1)
            # a master again: decided again, on the same server
            eq(a.cli("REPLICAOF", "NO", "ONE"), "OK", "REPLICAOF NO ONE")
            H.ready_everywhere(d.port, timeout=15 * H.SLOW)
            eq([post(d, "k3")[0] for _ in range(4)], [200, 200, 200, 429],
               "limit 3 once a master again")
            eq(a.cli("EXISTS", "{rl:p:k:k3}:fw:3600000"), "1", "the key is on our server")

            # 2. busy: READONLY while checks flow
            load = Load(d.port, prefix="busy")
            try:
                wait_for(lambda: load.count() >= 50, "checks flowing")
                eq(a.cli("REPLICAOF", "127.0.0.1", b.port), "OK", "REPLICAOF under load")
                t0 = time.monotonic()
                wait_for(lambda: readyz(d)[0] == 503, "/readyz 503 under load")
                print("# busy: /readyz 503 %.2f s after REPLICAOF" % (time.monotonic() - t0))
                stays(d, 503, 1.0, "under load while the server is a replica")
                n0 = load.count()
                wait_for(lambda: load.count() >= n0 + 100, "checks answered while a replica")
            finally:
                answers = load.stop()
            late = answers[n0:]
            eq({st for st, _ in late}, {503}, "checks under load while a replica (closed)")
            readonly = metric(d.port, "ratelimitd_redis_errors_total", 'kind="readonly"')
            check(readonly < len(answers) // 2,
                  "%d checks met READONLY of %d: the connection was not left", readonly,
                  len(answers))
            eq(a.cli("REPLICAOF", "NO", "ONE"), "OK", "REPLICAOF NO ONE")
            H.ready_everywhere(d.port, timeout=15 * H.SLOW)
            eq(post(d, "k4")[0], 200, "a check once a master again")
            lines = [ln for ln in d.log().splitlines() if "READONLY" in ln or "not a master" in ln
                     or "no longer a master" in ln]
            check(len(lines) <= 8 * WORKERS, "%d log lines about the replica:\n%s", len(lines),
                  "\n".join(lines[:12]))


def t_url_names_replica(_):
    """A URL naming a replica: never ready, checks fail at once; promoted: ready."""
    with H.Redis(topology="standalone") as m, H.Redis(topology="standalone") as r:
        eq(r.cli("REPLICAOF", "127.0.0.1", m.port), "OK", "REPLICAOF")
        wait_role(r.port, "slave")
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(3),
               "redis": {"url": r.url, "timeout": "2s", "connect_timeout": "1s"}}
        with H.Daemon(cfg, workers=WORKERS, ready=False) as d:
            # every worker's handshake refused it, and each has published
            # that reason (readiness is published every 100 ms): only then
            # must every probe say it
            wait_for(lambda: d.log().count("is not a master") >= WORKERS,
                     "every worker's handshake to refuse the replica")
            wait_for(lambda: all("not a master" in str(readyz(d)) for _ in range(2 * WORKERS)),
                     "/readyz to give the replica as the reason")
            seen = stays(d, 503, 1.5, "against a replica")
            check(all("not a master" in str(rz) for _, rz in seen), "reasons: %r",
                  sorted({str(rz) for _, rz in seen}))
            eq({post(d, "k%d" % i)[0] for i in range(10)}, {503}, "checks against a replica")
            eq(r.cli("EXISTS", "{rl:p:k:k0}:fw:3600000"), "0", "nothing written")
            eq(r.cli("REPLICAOF", "NO", "ONE"), "OK", "REPLICAOF NO ONE")
            H.ready_everywhere(d.port, timeout=15 * H.SLOW)
            eq([post(d, "k")[0] for _ in range(4)], [200, 200, 200, 429], "limit 3 once promoted")


def t_connecting_waits(_):
    """Every connection to Redis takes 400 ms (a relay holds it): checks that
    come meanwhile wait for it and are decided, in closed mode too; /readyz
    says 503 until then.  Before: 503 at once, until the handshake."""
    delay = 0.4
    with H.Redis(topology="standalone") as r, H.Relay(r.port, delay) as px:
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(),
               "redis": {"url": px.url, "timeout": "3s", "connect_timeout": "2s"}}
        d = H.Daemon(cfg, workers=WORKERS, wait=False)
        try:
            got = first_checks(d.port)
            st = [a[0] for a in got]
            print("# %d checks in the first 0.5 s, %d 200, slowest %.0f ms (connection %.0f ms)"
                  % (len(got), st.count(200), max(a[2] for a in got) * 1000, delay * 1000))
            check(len(got) >= WORKERS, "only %d checks", len(got))
            eq(sorted(set(st)), [200], "statuses of the checks made while connecting")
            check(not any(a[1] for a in got), "a check answered degraded")
            eq(r.cli("EXISTS", "{rl:p:k:first-0-0}:fw:3600000"), "1", "the first check counted")
        finally:
            d.stop()


def t_fresh_starts(topology, _):
    """Fresh starts, checks from the first moment: none answered by
    failure_mode (closed: no 503).  Sentinel and Cluster take longer to
    connect (a sentinel asked first, the slot map loaded first)."""
    starts = 6
    with H.Redis(topology=topology) as r:
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(),
               "redis": {"timeout": "3s", "connect_timeout": "2s"}}
        bad, total = [], 0
        for i in range(starts):
            d = H.Daemon(cfg, redis=r, workers=WORKERS, wait=False)
            try:
                got = first_checks(d.port, seconds=0.2)
            finally:
                d.stop()
            total += len(got)
            bad += [(i, a) for a in got if a[0] != 200 or a[1]]
        print("# %d fresh starts, %d checks, %d not decided" % (starts, total, len(bad)))
        eq(bad, [], "checks not decided by Redis in the first 0.2 s of %d fresh starts" % starts)


class NotifySocket:
    """The systemd notification socket: a Unix datagram socket in the temp
    dir; wait(msg) returns the monotonic time a datagram containing msg came."""

    def __init__(self):
        self.path = os.path.join(H.tmpdir(), "notify-%d.sock" % H.free_port())
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(self.path)
        self.s.settimeout(0.05)

    def wait(self, msg, timeout):
        deadline = time.monotonic() + timeout * H.SLOW
        while time.monotonic() < deadline:
            try:
                data = self.s.recv(4096).decode()
            except socket.timeout:
                continue
            if msg in data.split("\n"):
                return time.monotonic()
        raise H.Fail("no %s on NOTIFY_SOCKET within %ss" % (msg, timeout))

    def close(self):
        self.s.close()
        os.unlink(self.path)


def t_ready_after_handshake(_):
    """READY=1 to systemd comes after the backend's first handshake (here
    400 ms late through the relay): /readyz is 200 when it comes.  Before:
    READY=1 as soon as the sockets were bound.  With no Redis at all it still
    comes, after connect_timeout."""
    delay = 0.4
    with H.Redis(topology="standalone") as r, H.Relay(r.port, delay) as px:
        ns = NotifySocket()
        try:
            cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(),
                   "redis": {"url": px.url, "timeout": "3s", "connect_timeout": "5s"}}
            t0 = time.monotonic()
            d = H.Daemon(cfg, workers=WORKERS, wait=False, env={"NOTIFY_SOCKET": ns.path})
            try:
                t_ready = ns.wait("READY=1", 15)
                st = [readyz(d)[0] for _ in range(2 * WORKERS)]
                print("# READY=1 %.0f ms after the start (connections take %.0f ms)"
                      % ((t_ready - t0) * 1000, delay * 1000))
                check(t_ready - t0 >= delay, "READY=1 %.3f s after the start, before the "
                      "first connection could be made (%.1f s)", t_ready - t0, delay)
                eq(set(st), {200}, "/readyz right after READY=1")
            finally:
                d.stop()
        finally:
            ns.close()
    # nothing listening: READY=1 anyway, after connect_timeout
    ns = NotifySocket()
    try:
        cfg = {"identity": ["body"], "policies": policy(),
               "redis": {"url": "redis://127.0.0.1:%d/0" % H.free_port(), "connect_timeout": "1s"}}
        t0 = time.monotonic()
        d = H.Daemon(cfg, workers=WORKERS, wait=False, env={"NOTIFY_SOCKET": ns.path})
        try:
            took = ns.wait("READY=1", 15) - t0
            check(0.9 <= took <= 10 * H.SLOW, "READY=1 %.2f s after the start with no Redis "
                  "(connect_timeout 1 s)", took)
            check("not ready within connect_timeout" in d.log(), "the late READY=1 not logged")
        finally:
            d.stop()
    finally:
        ns.close()


# make check runs these on every topology (make check-topologies runs only
# the core suites under the others); RL_TOPOLOGY picks one.
TOPOLOGIES = [os.environ["RL_TOPOLOGY"]] if os.environ.get("RL_TOPOLOGY") else list(H.TOPOLOGIES)


def library():
    """Our library's (and function's) name: the embedded script's SHA1."""
    return "ratelimitd_" + hashlib.sha1(H.lua_check_source()).hexdigest()


def libraries(r):
    return sorted(lib[1] for lib in H._resp(r.port, "FUNCTION", "LIST") or [])


def calls(r, cmd):
    m = re.search(r"^cmdstat_%s:calls=(\d+)" % cmd, r.cli("INFO", "commandstats"), re.M)
    return int(m.group(1)) if m else 0


def limit3(d, key, what):
    eq([post(d, key)[0] for _ in range(4)], [200, 200, 200, 429], what)


def t_functions(_):
    """Redis 7: every check an FCALL; FUNCTION FLUSH costs no check."""
    other = "ratelimitd_" + "0" * 40      # another daemon version's
    with H.Redis(topology="standalone") as r:
        H._resp(r.port, "FUNCTION", "LOAD", "#!lua name=%s\nredis.register_function("
                "'%s', function() return 0 end)" % (other, other))
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(3)}
        with H.Daemon(cfg, redis=r, workers=WORKERS) as d:
            limit3(d, "f1", "limit 3 by FCALL")
            eq(libraries(r), sorted([other, library()]), "libraries: ours next to the other's")
            check(calls(r, "fcall") >= 4, "%d FCALLs for 4 checks", calls(r, "fcall"))
            eq((calls(r, "evalsha"), calls(r, "eval")), (0, 0), "EVALSHA and EVAL calls")
            before = metric(d.port, "ratelimitd_redis_errors_total", 'kind="noscript"')
            eq(r.cli("FUNCTION", "FLUSH"), "OK", "FUNCTION FLUSH")
            eq(libraries(r), [], "libraries right after FUNCTION FLUSH")
            # fresh connections reach both workers: each finds its function gone
            limit3(d, "f2", "limit 3 right after FUNCTION FLUSH")
            for i in range(20):
                eq(post(d, "f3-%d" % i)[0], 200, "a check after FUNCTION FLUSH")
            check(calls(r, "eval") >= 1, "no EVAL after \"Function not found\"")
            got = metric(d.port, "ratelimitd_redis_errors_total", 'kind="noscript"') - before
            check(1 <= got <= 2 * WORKERS, "%d \"Function not found\" counted", got)
            wait_for(lambda: library() in libraries(r), "our library loaded again")
            fcalls, evals = calls(r, "fcall"), calls(r, "eval")
            limit3(d, "f4", "limit 3 after the reload")
            eq(calls(r, "eval"), evals, "EVAL calls once the library is back")
            check(calls(r, "fcall") >= fcalls + 4, "checks after the reload are not FCALLs")
            check("no function library" not in d.log(), "a fallback to EVALSHA logged")


def repl_offset(r):
    m = re.search(r"^master_repl_offset:(\d+)", r.cli("INFO", "replication"), re.M)
    return int(m.group(1))


def replicated(m, rep):
    """rep is m's replica, in sync: every write on m from now on counts in
    m's master_repl_offset (without a replica Redis keeps no offset)."""
    eq(rep.cli("REPLICAOF", "127.0.0.1", m.port), "OK", "REPLICAOF")
    wait_for(lambda: "master_link_status:up" in rep.cli("INFO", "replication"),
             "the replica in sync")
    wait_for(lambda: repl_offset(m) > 0, "a replication offset on the master")


def t_library_kept(_):
    """Our library already on the server (its name is its code's hash) is
    ours: a handshake that meets it (a reconnect, a second daemon) loads
    nothing, so nothing is replicated, and checks stay FCALLs.  Before:
    FUNCTION LOAD REPLACE wrote and replicated the whole library (~32 KB) on
    every connection's every handshake."""
    size = len(H.lua_check_source())
    loads = r"function\|load"
    with H.Redis(topology="standalone") as r, H.Redis(topology="standalone") as rep:
        replicated(r, rep)
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(3)}
        with H.Daemon(cfg, redis=r, workers=WORKERS) as d:
            limit3(d, "k1", "limit 3, the library loaded")
            eq(libraries(r), [library()], "libraries once loaded")
            n0, off0 = calls(r, loads), repl_offset(r)
            killed = int(r.cli("CLIENT", "KILL", "TYPE", "normal"))
            check(killed >= WORKERS, "%d connections killed, %d workers", killed, WORKERS)
            wait_for(lambda: calls(r, loads) >= n0 + WORKERS, "the workers' handshakes again")
            H.ready_everywhere(d.port, timeout=15 * H.SLOW)
            grew = repl_offset(r) - off0
            print("# %d handshakes again: replication offset +%d bytes (library %d bytes)"
                  % (calls(r, loads) - n0, grew, size))
            check(grew < size // 4, "reconnects replicated %d bytes (library: %d)", grew, size)
            fcalls = calls(r, "fcall")
            limit3(d, "k2", "limit 3 after the reconnect")
            check(calls(r, "fcall") >= fcalls + 4, "checks after the reconnect are not FCALLs")
            off1 = repl_offset(r)
            with H.Daemon(cfg, redis=r, workers=WORKERS) as d2:
                limit3(d2, "k3", "limit 3 on a second daemon")
            grew = repl_offset(r) - off1
            print("# a second daemon's start and 4 checks: replication offset +%d bytes" % grew)
            check(grew < size // 4, "a second daemon replicated %d bytes (library: %d)", grew,
                  size)
            eq(libraries(r), [library()], "libraries after reconnects and a second daemon")
            eq(libraries(rep), [library()], "the replica's libraries")
            eq((calls(r, "evalsha"), calls(r, "eval")), (0, 0), "EVALSHA and EVAL calls")
            check("no function library" not in d.log() + d2.log(), "a fallback to EVALSHA logged")


def t_same_lua_both_paths(_):
    """FCALL and EVALSHA of the same script answer the same numbers, call for
    call: single checks and batches, every algorithm, several limits, costs
    0, 2 and forced, time driven explicitly (the library's caches live
    across calls; the script's last one call)."""
    specs = ["fw 5 1000 0", "tb 4 1000 6", "gcra 3 1000 3", "swl 4 1000 0", "swc 5 1000 0",
             "fw 5 1000 0 gcra 3 1000 3"]
    costs = ["1", "2", "0", "1f", "1"]
    sha = hashlib.sha1(H.lua_check_source()).hexdigest()
    with H.Redis(topology="standalone") as r:
        cfg = {"identity": ["body"], "policies": policy(3)}
        with H.Daemon(cfg, redis=r, workers=1) as d:
            eq(post(d, "load")[0], 200, "a check (the handshake loaded both)")
            t0, answers = 1700000000000000, 0
            for step in range(60):
                now = str(t0 + step * 137000)
                checks = [(specs[(step + j) % len(specs)], costs[(step * 3 + j) % len(costs)],
                           "k%d" % ((step + j) % 4)) for j in range(1 + step % 3)]

                def call(cmd, name, side):
                    keys, argv = [], [now, str(len(checks))]
                    for sp, cost, k in checks:
                        # one key type per key: an error element would end the reply's reader
                        keys += ["{%s:%s}:%s:%d" % (side, k, sp.split()[4 * i], i)
                                 for i in range(len(sp.split()) // 4)]
                        # the block key is an argument, not one of KEYS (see check.lua)
                        argv += [sp, cost, "{%s:%s}:block" % (side, k)]
                    return H._resp(r.port, cmd, name, len(keys), *keys, *argv)
                got = call("FCALL", library(), "f")
                eq(got, call("EVALSHA", sha, "e"), "step %d, checks %r" % (step, checks))
                answers += len(checks)
            print("# %d checks answered alike by FCALL and EVALSHA" % answers)


def t_no_functions(_):
    """A server without FUNCTION (here renamed away, as on Redis 6): EVALSHA."""
    with H.Redis(topology="standalone", conf=['rename-command FUNCTION ""']) as r:
        check("unknown command" in r.cli("FUNCTION", "LIST"), "FUNCTION still answers")
        cfg = {"identity": ["body"], "failure_mode": "closed", "policies": policy(3)}
        with H.Daemon(cfg, redis=r, workers=WORKERS) as d:
            limit3(d, "n1", "limit 3 by EVALSHA")
            check(calls(r, "evalsha") >= 4, "%d EVALSHAs for 4 checks", calls(r, "evalsha"))
            eq(calls(r, "fcall"), 0, "FCALLs")
            lines = [ln for ln in d.log().splitlines() if "no function library" in ln]
            check(1 <= len(lines) <= WORKERS, "fallback log lines: %r", lines)
            eq(r.cli("SCRIPT", "FLUSH"), "OK", "SCRIPT FLUSH")
            limit3(d, "n2", "limit 3 after SCRIPT FLUSH")
            check(calls(r, "eval") >= 1, "no EVAL after NOSCRIPT")


def per_topology(name, fn):
    return [("%s (%s)" % (name, t), functools.partial(fn, t)) for t in TOPOLOGIES]


CASES = per_topology("OOM for 3 s: a handful of log lines with counts, every error in /metrics",
                     t_error_flood) + [
    ("REPLICAOF (idle, then under load): readyz 503, checks fail fast; a master again: decided",
     t_demoted_master),
    ("a URL naming a replica: never ready, checks fail fast; promoted: ready", t_url_names_replica),
    ("checks while the first connection is made (400 ms): they wait and are decided",
     t_connecting_waits),
    ("READY=1 after the first handshake (400 ms late); with no Redis, after connect_timeout",
     t_ready_after_handshake),
    ("Redis 7: FCALL of the library named by the script's hash, another version's kept; "
     "FUNCTION FLUSH: reloaded, no check lost", t_functions),
    ("our library already loaded (a reconnect, a second daemon): nothing replicated, FCALLs",
     t_library_kept),
    ("no FUNCTION (rename-command): EVALSHA, logged once, NOSCRIPT still handled",
     t_no_functions),
    ("FCALL and EVALSHA answer alike, call for call, every algorithm", t_same_lua_both_paths),
] + per_topology("6 fresh starts, checks from the first moment: all decided by Redis (closed mode)",
                 t_fresh_starts)


@contextlib.contextmanager
def fixture():
    yield None


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=240)
