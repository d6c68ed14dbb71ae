#!/usr/bin/env python3
"""The Redis Cluster backend against a real cluster.

Starts three cluster-enabled redis-servers on free loopback ports, joins them
with `redis-cli --cluster create` (3 masters, no replicas), and two daemons
configured with {"redis": {"cluster": [seed]}}.  Then: readiness, the seed
article case on keys of every master (their keys found on the master our
CRC16 says, and no MOVED in steady state), exact limits under concurrency, a
SCRIPT FLUSH, a slot migrated by hand while checks flow (ASK, TRYAGAIN, then
MOVED), slots moved by `redis-cli --cluster reshard`, a master restarted, a
throughput figure with 1 and 3 masters (printed, not asserted), and a clean
stop.  A missing redis-server or redis-cli is a failure.
"""

import binascii
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402

SUITE_TIMEOUT = 230
SLOTS = 16384
PREFIX = "rl:"

POLICIES = [
    {"name": "demo", "limits": [{"algorithm": "fixed_window", "limit": 3, "window": "60s"}]},
    {"name": "hot", "limits": [{"algorithm": "fixed_window", "limit": 100, "window": "1h"}]},
    {"name": "multi", "limits": [{"algorithm": "fixed_window", "limit": 20, "window": "1h"}]},
    {"name": "flush", "limits": [{"algorithm": "fixed_window", "limit": 10, "window": "1h"}]},
    {"name": "mig1", "limits": [{"algorithm": "fixed_window", "limit": 100000, "window": "1h"}]},
    {"name": "mig2", "limits": [{"algorithm": "fixed_window", "limit": 100000, "window": "1h"},
                                {"algorithm": "sliding_window_counter", "limit": 50000,
                                 "window": "24h"}]},
    {"name": "down", "limits": [{"algorithm": "fixed_window", "limit": 1000, "window": "1h"}]},
    {"name": "bench", "limits": [{"algorithm": "fixed_window", "limit": 1000000000,
                                  "window": "60s"}]},
]


def daemon_config(seed_port):
    # failure_mode closed and a generous timeout: a lost or failed check is a
    # visible 503/degraded answer, never a silent admission
    return {"identity": ["body", "peer"], "failure_mode": "closed",
            "redis": {"cluster": ["127.0.0.1:%d" % seed_port], "timeout": "2s"},
            "policies": POLICIES}


def rcmd(port, *args):
    return H._resp(port, *args, timeout=5.0)


def info(port, section):
    out = {}
    for line in rcmd(port, "INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def errorstat(port, code):
    v = info(port, "errorstats").get("errorstat_" + code)
    return int(v.split("count=")[1].split(",")[0]) if v else 0


def cmdstat_calls(port, cmd):
    v = info(port, "commandstats").get("cmdstat_" + cmd)
    return int(v.split("calls=")[1].split(",")[0]) if v else 0


# ------------------------------------------------------------- slots

def slot_of_tag(tag):
    return binascii.crc_hqx(tag.encode(), 0) & (SLOTS - 1)


def tag(policy, ident):
    """The hash tag the daemon gives a body key (identity.c)."""
    return "%s%s:k:%s" % (PREFIX, policy, ident)


def slot_of(policy, ident):
    return slot_of_tag(tag(policy, ident))


def idents_in_slot(policy, slot, n, start=0):
    out, i = [], start
    while len(out) < n:
        ident = "s%d-%d" % (slot, i)
        if slot_of(policy, ident) == slot:
            out.append(ident)
        i += 1
    return out


# ----------------------------------------------------------- the cluster

class Node(H.RedisServer):
    """One cluster-enabled redis-server in its own directory; `.id` its node id."""

    def __init__(self, port=None):
        super().__init__("node", ["cluster-enabled yes", "cluster-config-file nodes.conf",
                                  "cluster-node-timeout 3000", "cluster-require-full-coverage no"],
                         port=port)
        self.id = rcmd(self.port, "CLUSTER", "MYID")

    def restart(self):
        """Killed and started again on its port, its nodes.conf kept."""
        super().restart(stop=False)


def cli(*args, timeout=60):
    H._need(H.REDIS_CLI, "redis-tools")
    r = subprocess.run([H.REDIS_CLI] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


def slot_owners(port):
    """slot -> master port, from CLUSTER SLOTS on `port`."""
    owners = {}
    for rng in rcmd(port, "CLUSTER", "SLOTS"):
        for s in range(rng[0], rng[1] + 1):
            owners[s] = rng[2][1]
    return owners


def wait_cluster_ok(nodes, what, timeout=30.0):
    """Every node says cluster_state:ok, knows every other and agrees on the
    map: the map."""
    return H.wait_until(lambda: H.cluster_slot_map([n.port for n in nodes]),
                        "a consistent cluster (%s)" % what, timeout)


def make_cluster(n):
    nodes = [Node() for _ in range(n)]
    if n >= 3:
        H.cluster_create(nodes)
    else:
        rcmd(nodes[0].port, "CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
        wait_cluster_ok(nodes, "after create")
    return nodes


class Fx:
    def __init__(self):
        self.nodes = []
        self.daemons = []

    def by_port(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def owners(self):
        return slot_owners(self.nodes[0].port)

    def owner(self, policy, ident):
        return self.by_port(self.owners()[slot_of(policy, ident)])

    def masters(self):
        ports = set(self.owners().values())
        return [n for n in self.nodes if n.port in ports]

    @property
    def ports(self):
        return [d.port for d in self.daemons]


def ready_everywhere(d, timeout=15.0, streak=12):
    """d, once `streak` fresh connections in a row (SO_REUSEPORT spreads them
    over the workers, each with its own backend) said /readyz 200."""
    H.ready_everywhere(d.port, timeout, streak)
    return d


def start_daemon(cfg, workers=2):
    return ready_everywhere(H.Daemon(cfg, workers=workers, ready=True))


@contextmanager
def fixture():
    fx = Fx()
    H._need(H.REDIS_SERVER, "redis-server")
    H._need(H.REDIS_CLI, "redis-tools")
    fx.nodes = make_cluster(3)
    # two daemons with different seeds, two workers each
    fx.daemons.append(start_daemon(daemon_config(fx.nodes[0].port)))
    fx.daemons.append(start_daemon(daemon_config(fx.nodes[1].port)))
    for n in fx.nodes:
        rcmd(n.port, "CONFIG", "RESETSTAT")
    try:
        yield fx
    finally:
        for d in fx.daemons:
            d.kill()
        for n in fx.nodes:
            n.kill()


# --------------------------------------------------------------- traffic

def clean(st, ans):
    """'allowed', 'denied', or raise on anything else (degraded, 5xx, ...)."""
    if isinstance(ans, dict) and ans.get("degraded") is True:
        raise H.Fail("degraded answer %r %r" % (st, ans))
    if st == 200 and isinstance(ans, dict) and ans.get("allowed") is True:
        return "allowed"
    if st == 429 and isinstance(ans, dict) and ans.get("allowed") is False:
        return "denied"
    raise H.Fail("not a clean 200 allowed / 429 denied: %r %r" % (st, ans))


class Flow:
    """Threads sending checks for `bodies` round robin until stop(); every
    answer is recorded (body index, status, answer)."""

    def __init__(self, ports, bodies, threads=6, pause=0.002):
        self.bodies = list(bodies)
        self.results = []
        self.answered = 0
        self.errors = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.ts = [threading.Thread(target=self._run, args=(i, ports[i % len(ports)], pause),
                                    daemon=True) for i in range(threads)]
        for t in self.ts:
            t.start()

    def _run(self, i, port, pause):
        out = []
        k = i
        try:
            with H.Client(port) as c:
                while not self.halt.is_set():
                    with self.lock:
                        idx = k % len(self.bodies)
                        body = self.bodies[idx]
                    k += 1
                    st, _, ans = c.request("POST", "/check", body)
                    out.append((idx, st, ans))
                    with self.lock:
                        self.answered += 1
                    time.sleep(pause)
        except Exception as e:  # noqa: BLE001 - reported by stop()
            with self.lock:
                self.errors.append("%s: %s" % (type(e).__name__, e))
        with self.lock:
            self.results.extend(out)

    def add(self, body):
        """Checks for `body` too, from now on."""
        with self.lock:
            self.bodies.append(body)

    def count(self):
        with self.lock:
            return self.answered

    def stop(self):
        self.halt.set()
        for t in self.ts:
            t.join(timeout=30)
        check(not any(t.is_alive() for t in self.ts), "flow threads did not stop")
        check(not self.errors, "%d client errors, first: %s", len(self.errors),
              self.errors[0] if self.errors else "")
        allowed = [0] * len(self.bodies)
        bad = []
        for idx, st, ans in self.results:
            try:
                if clean(st, ans) == "allowed":
                    allowed[idx] += 1
            except H.Fail as e:
                bad.append(str(e))
        check(not bad, "%d of %d answers lost or failed, first: %s", len(bad), len(self.results),
              bad[0] if bad else "")
        return allowed


def remaining(port, policy, ident):
    """Ask without consuming (cost 0): the remaining count of every limit."""
    st, _, ans = post(port, {"key": ident, "policy": policy, "cost": 0})
    check(st == 200 and isinstance(ans, dict) and not ans.get("degraded"),
          "cost-0 check: %r %r", st, ans)
    return [lim["remaining"] for lim in ans["limits"]]


def exact_after(port, policy, ident, limits, allowed):
    """After `allowed` admitted checks of cost 1: the remaining counts are
    exactly limit - allowed, the rest of the smallest fits, one more does not."""
    rem = remaining(port, policy, ident)
    eq(rem, [lim - allowed for lim in limits], "%s/%s remaining after %d allowed"
       % (policy, ident, allowed))
    left = min(rem)
    st, _, ans = post(port, {"key": ident, "policy": policy, "cost": left})
    check(clean(st, ans) == "allowed", "the last %d units of %s/%s refused: %r", left, policy,
          ident, ans)
    st, _, ans = post(port, {"key": ident, "policy": policy})
    check(clean(st, ans) == "denied", "%s/%s allowed past its limit: %r", policy, ident, ans)


# ----------------------------------------------------------------- cases

def case_cluster_up(fx):
    owners = fx.owners()
    eq(len(owners), SLOTS, "slots covered")
    eq(sorted(set(owners.values())), sorted(n.port for n in fx.nodes), "masters owning slots")


def case_keyslot(fx):
    for ident in ("alice", "bob", "10.0.0.7", "x" * 40):
        key = "{%s}:fw:60000" % tag("demo", ident)
        got = rcmd(fx.nodes[0].port, "CLUSTER", "KEYSLOT", key)
        eq(got, slot_of("demo", ident), "CLUSTER KEYSLOT of %r" % key)


def case_ready(fx):
    for d in fx.daemons:
        st, _, body = H.request(d.port, "GET", "/readyz")
        eq(st, 200, "GET /readyz (body %r)" % (body,))


def case_article(fx):
    owners = fx.owners()
    per_master = {n.port: [] for n in fx.nodes}
    i = 0
    while any(len(v) < 2 for v in per_master.values()):
        ident = "user%d" % i
        i += 1
        p = owners[slot_of("demo", ident)]
        if len(per_master[p]) < 2:
            per_master[p].append(ident)
    for port, idents in per_master.items():
        for k, ident in enumerate(idents):
            d = fx.daemons[k % 2]
            got = [post(d.port, {"key": ident, "policy": "demo"}) for _ in range(4)]
            eq([g[0] for g in got], [200, 200, 200, 429], "statuses for %s (master %d)"
               % (ident, port))
            eq([g[2]["remaining"] for g in got], [2, 1, 0, 0], "remaining for " + ident)
            check(all(not g[2].get("degraded") for g in got), "degraded answer for %s", ident)
            # the counter lives on the master our CRC16 names, and only there
            slot = slot_of("demo", ident)
            keys = rcmd(port, "CLUSTER", "GETKEYSINSLOT", slot, 100)
            check(any(k.startswith("{%s}" % tag("demo", ident)) for k in keys),
                  "no key of %s in slot %d on master %d: %r", ident, slot, port, keys)
    for n in fx.nodes:
        check(rcmd(n.port, "DBSIZE") >= 2, "master %d holds no counters", n.port)


def case_no_redirects(fx):
    # keys on the first and last slot of every master's range: a slot off by
    # one lands on the wrong master there (and only there)
    owners = fx.owners()
    edges = sorted({s for s in range(SLOTS)
                    if owners.get(s - 1) != owners[s] or owners.get(s + 1) != owners[s]})
    check(len(edges) >= 6, "range boundaries found: %r", edges)
    for k, slot in enumerate(edges):
        (ident,) = idents_in_slot("demo", slot, 1)
        st, _, ans = post(fx.ports[k % 2], {"key": ident, "policy": "demo"})
        eq(clean(st, ans), "allowed", "check on slot %d" % slot)
        keys = rcmd(owners[slot], "CLUSTER", "GETKEYSINSLOT", slot, 10)
        check(any(x.startswith("{%s}" % tag("demo", ident)) for x in keys),
              "the counter of slot %d is not on its master %d", slot, owners[slot])
    # every check so far went straight to the right master
    for n in fx.nodes:
        for code in ("MOVED", "ASK", "NOSCRIPT"):
            eq(errorstat(n.port, code), 0, "errorstat %s on master %d" % (code, n.port))
        check(cmdstat_calls(n.port, "fcall") > 0, "no FCALL ran on master %d", n.port)
        eq(cmdstat_calls(n.port, "evalsha"), 0, "EVALSHA on master %d (Redis 7: FCALL)" % n.port)


def library(port):
    """Our function library's name on the node at port, or None."""
    out = rcmd(port, "FUNCTION", "LIST", "LIBRARYNAME", "ratelimitd_*")
    names = [lib[1] for lib in out] if out else []
    want = "ratelimitd_" + hashlib.sha1(H.lua_check_source()).hexdigest()
    return want if want in names else None


def case_functions(fx):
    # the handshake loaded it on every master the router connects to (a
    # replica gets it by replication: case_failover's promoted one answers)
    for n in fx.nodes:
        check(library(n.port), "no ratelimitd library on master %d: %r", n.port,
              rcmd(n.port, "FUNCTION", "LIST"))


def case_hot_key(fx):
    body = {"key": "hot-1", "policy": "hot"}
    res = H.blast(fx.ports, [body] * 300, 30)
    verdicts = [clean(st, ans) for _, st, ans, _ in res]
    eq(verdicts.count("allowed"), 100, "allowed of 300 checks on one key with limit 100")


def case_spread_keys(fx):
    owners = fx.owners()
    idents, per = [], {}
    i = 0
    while len(idents) < 5:      # 2 + 2 + 1 over the three masters
        ident = "spread%d" % i
        i += 1
        p = owners[slot_of("multi", ident)]
        if per.get(p, 0) < 2:
            idents.append(ident)
            per[p] = per.get(p, 0) + 1
    masters = set(per)
    eq(len(masters), 3, "masters holding the 5 keys")
    bodies = [{"key": k, "policy": "multi"} for k in idents for _ in range(60)]
    res = H.blast(fx.ports, bodies, 30)
    allowed = {k: 0 for k in idents}
    for b, st, ans, _ in res:
        if clean(st, ans) == "allowed":
            allowed[b["key"]] += 1
    eq(allowed, {k: 20 for k in idents}, "allowed per key (limit 20, 60 checks each, "
       "masters %s)" % sorted(masters))


def case_script_flush(fx):
    idents = ["flush%d" % i for i in range(20)]
    target = fx.owner("flush", idents[0])
    mine = [k for k in idents if fx.owner("flush", k) is target][:3]
    before = errorstat(target.port, "ERR")
    # both: FCALL then finds no function, and the resend (EVAL) no cache
    eq(rcmd(target.port, "SCRIPT", "FLUSH"), "OK", "SCRIPT FLUSH")
    eq(rcmd(target.port, "FUNCTION", "FLUSH"), "OK", "FUNCTION FLUSH")
    eq(info(target.port, "memory").get("number_of_cached_scripts"), "0",
       "scripts cached right after SCRIPT FLUSH")
    eq(library(target.port), None, "our library right after FUNCTION FLUSH")
    bodies = [{"key": k, "policy": "flush"} for k in mine for _ in range(15)]
    res = H.blast(fx.ports, bodies, 6)
    allowed = {k: 0 for k in mine}
    for b, st, ans, _ in res:
        if clean(st, ans) == "allowed":
            allowed[b["key"]] += 1
    eq(allowed, {k: 10 for k in mine}, "allowed per key after SCRIPT FLUSH")
    check(errorstat(target.port, "ERR") > before,
          "the flushed master never answered \"Function not found\" (no fallback exercised)")
    check(cmdstat_calls(target.port, "eval") > 0, "no EVAL ran on the flushed master")
    eq(info(target.port, "memory").get("number_of_cached_scripts"), "1",
       "scripts cached again on the flushed master")
    check(library(target.port), "the library was not loaded again on the flushed master")
    # and the next calls are FCALLs again, decided exactly
    fcalls = cmdstat_calls(target.port, "fcall")
    (ident,) = [k for k in idents if fx.owner("flush", k) is target][3:4] or [None]
    check(ident is not None, "a fourth key on the flushed master")
    eq([clean(*post(fx.ports[0], {"key": ident, "policy": "flush"})[::2])
        for _ in range(11)], ["allowed"] * 10 + ["denied"], "limit 10 after the reload")
    check(cmdstat_calls(target.port, "fcall") >= fcalls + 11, "checks after the reload not FCALLs")


def migrate_keys(src, dst, slot):
    """MIGRATE slot's keys from src to dst one at a time (as redis-cli
    does), a moment apart, so a check's keys spend a while on different
    nodes; then every node names dst the slot's owner.  The keys moved."""
    moved = 0
    while True:
        keys = rcmd(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 1)
        if not keys:
            break
        eq(rcmd(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys),
           "OK", "MIGRATE %r" % keys)
        moved += len(keys)
        time.sleep(0.15)
    return moved


def slot_owner_everywhere(nodes, slot, src, dst):
    for n in (dst, src) + tuple(x for x in nodes if x not in (src, dst)):
        rcmd(n.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id)


def case_migrate_ask(fx):
    """One slot moved by hand (as redis-cli does it) while checks flow: new keys
    go by ASK to the importing node, a check whose two keys are split between
    the nodes gets TRYAGAIN, and after the move MOVED.  Nothing lost, exact."""
    owners = fx.owners()
    # a slot of the first master, moved to the second
    src, dst = fx.nodes[0], fx.nodes[1]
    slot = next(s for s in range(SLOTS) if owners[s] == src.port and s > 100)
    a1, a2 = idents_in_slot("mig1", slot, 2)
    (b1,) = idents_in_slot("mig2", slot, 1)
    # a1 and b1 exist on the source before the migration; a2 is first checked
    # during it, so it is born on the importing node (by ASK)
    bodies = [{"key": a1, "policy": "mig1"}, {"key": b1, "policy": "mig2"},
              {"key": a2, "policy": "mig1"}]
    for b in bodies[:2]:
        st, _, ans = post(fx.ports[0], b)
        check(clean(st, ans) == "allowed", "first check %r: %r", b, ans)
    ask0, try0, moved0 = (errorstat(src.port, c) for c in ("ASK", "TRYAGAIN", "MOVED"))
    flow = Flow(fx.ports, bodies[:2], threads=6)
    try:
        time.sleep(0.3)
        rcmd(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
        rcmd(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)
        flow.add(bodies[2])
        time.sleep(0.4)
        born = [k for k in rcmd(dst.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)
                if k.startswith("{%s}" % tag("mig1", a2))]
        check(born, "a key first checked while its slot migrates was not created on the "
              "importing node")
        check(not any(k.startswith("{%s}" % tag("mig1", a2))
                      for k in rcmd(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)),
              "a key first checked while its slot migrates was created on the source")
        # one key at a time, so mig2's two keys spend a while on different nodes
        moved_keys = migrate_keys(src, dst, slot)
        time.sleep(0.3)
        slot_owner_everywhere(fx.nodes, slot, src, dst)
        time.sleep(0.5)
        during = flow.count()
    finally:
        allowed = flow.stop()
    eq(moved_keys, 3, "keys migrated (a1's, b1's two)")
    check(during > 100, "only %d checks during the migration", during)
    ask = errorstat(src.port, "ASK") - ask0
    tryagain = errorstat(src.port, "TRYAGAIN") + errorstat(dst.port, "TRYAGAIN") - try0
    moved = errorstat(src.port, "MOVED") - moved0
    print("# migration of slot %d: %d checks, %d migrated keys, ASK %d, TRYAGAIN %d, MOVED %d"
          % (slot, during, moved_keys, ask, tryagain, moved))
    check(ask > 0, "no ASK redirection happened (the test did not exercise it)")
    check(moved > 0, "no MOVED redirection happened after the slot changed owner")
    wait_cluster_ok(fx.nodes, "after the manual migration")
    eq(fx.owners()[slot], dst.port, "owner of slot %d" % slot)
    for b, n in zip(bodies, allowed):
        check(n > 0, "no check of %r allowed during the migration", b)
    # the counts, including the ones taken before the flow, are exact
    exact_after(fx.ports[1], "mig1", a1, [100000], allowed[0] + 1)
    exact_after(fx.ports[1], "mig2", b1, [100000, 50000], allowed[1] + 1)
    exact_after(fx.ports[0], "mig1", a2, [100000], allowed[2])
    for ident, pol in ((a1, "mig1"), (a2, "mig1"), (b1, "mig2")):
        keys = rcmd(dst.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)
        check(any(k.startswith("{%s}" % tag(pol, ident)) for k in keys),
              "the counter of %s is not on the new owner", ident)


def case_charges_migrate(fx):
    """POST /charge while a slot moves by hand (the charge's key and its once
    key spend a while on different nodes: TRYAGAIN, then MOVED): every
    charge answered 200 or 202 (kept, docs/API.md "Charges the backend cannot
    take now"), and once the kept ones are applied the count is the number
    answered: none lost, none twice."""
    owners = fx.owners()
    src, dst = fx.nodes[0], fx.nodes[1]
    slot = next(s for s in range(SLOTS) if owners[s] == src.port and s > 200)
    (ident,) = idents_in_slot("mig1", slot, 1, start=500)
    body = {"key": ident, "policy": "mig1", "cost": 1}
    answers, stop = [], threading.Event()

    def charge(port):
        while not stop.is_set():
            st, _, ans = H.request(port, "POST", "/charge", body)
            answers.append((st, ans))
            time.sleep(0.002)

    # the charge's keys exist on the source before the migration
    eq(H.request(fx.ports[0], "POST", "/charge", body)[0], 200, "the first charge")
    threads = [threading.Thread(target=charge, args=(p,), daemon=True) for p in fx.ports]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        rcmd(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
        rcmd(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)
        check(migrate_keys(src, dst, slot) > 0, "no key of the charge migrated")
        slot_owner_everywhere(fx.nodes, slot, src, dst)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    statuses = {}
    for st, _ in answers:
        statuses[st] = statuses.get(st, 0) + 1
    print("# charges while slot %d moved: %r" % (slot, statuses))
    check(set(statuses) <= {200, 202}, "answers other than 200 and 202: %r" % statuses)
    check(len(answers) > 50, "only %d charges during the migration" % len(answers))
    wait_cluster_ok(fx.nodes, "after the manual migration")
    for d in fx.daemons:
        H.wait_for(lambda: H.metric(d, "ratelimitd_charges_pending") == 0,
                   "the kept charges applied", timeout=30)
    eq(remaining(fx.ports[1], "mig1", ident), [100000 - 1 - len(answers)],
       "the count: every charge answered, once")


def case_reshard(fx):
    """redis-cli --cluster reshard moves the lowest slots of a master while a
    hot key among them is checked: nothing lost, the count exact."""
    owners = fx.owners()
    src, dst = fx.nodes[2], fx.nodes[0]
    nslots = 20
    moving = sorted(s for s in range(SLOTS) if owners[s] == src.port)[:nslots]
    k1 = idents_in_slot("mig1", moving[-1], 1)[0]
    k2 = idents_in_slot("mig1", moving[0], 1, start=1000)[0]
    bodies = [{"key": k1, "policy": "mig1"}, {"key": k2, "policy": "mig1"}]
    for b in bodies:        # the counters exist on the source beforehand
        st, _, ans = post(fx.ports[0], b)
        check(clean(st, ans) == "allowed", "first check %r: %r", b, ans)
    moved0 = errorstat(src.port, "MOVED")
    flow = Flow(fx.ports, bodies, threads=6)
    try:
        time.sleep(0.3)
        rc, out = cli("--cluster", "reshard", "127.0.0.1:%d" % src.port,
                      "--cluster-from", src.id, "--cluster-to", dst.id,
                      "--cluster-slots", nslots, "--cluster-yes")
        check(rc == 0, "redis-cli --cluster reshard failed:\n%s", out[-2000:])
        time.sleep(0.5)
        during = flow.count()
    finally:
        allowed = flow.stop()
    moved = errorstat(src.port, "MOVED") - moved0
    print("# reshard of %d slots: %d checks, MOVED %d" % (nslots, during, moved))
    owners = wait_cluster_ok(fx.nodes, "after the reshard")
    eq([owners[s] for s in (moving[0], moving[-1])], [dst.port] * 2, "owners of the moved slots")
    check(moved > 0, "no MOVED redirection happened after the reshard")
    exact_after(fx.ports[0], "mig1", k1, [100000], allowed[0] + 1)
    exact_after(fx.ports[1], "mig1", k2, [100000], allowed[1] + 1)


def wait_readyz(port, status, timeout):
    """GET /readyz's body once its status is `status`."""
    last = []

    def answered():
        st, _, body = H.request(port, "GET", "/readyz")
        last[:] = [st, body]
        return st == status
    try:
        H.wait_for(answered, "GET /readyz to become %d" % status, timeout, interval=0.05)
    except H.Fail as e:
        raise H.Fail("%s: the last answer %r" % (e, last))
    return last[1]


def case_master_restart(fx):
    victim = fx.nodes[1]
    owners = fx.owners()
    theirs = next("d%d" % i for i in range(1000) if owners[slot_of("down", "d%d" % i)] == victim.port)
    ours = next("d%d" % i for i in range(1000) if owners[slot_of("down", "d%d" % i)] != victim.port)
    victim.kill()
    for d in fx.daemons:
        body = wait_readyz(d.port, 503, 5)
        check("cluster master" in str(body), "/readyz reason does not say why: %r", body)
    # its keys: answered at once by failure_mode (closed: 503), never queued
    t0 = time.monotonic()
    st, _, ans = post(fx.ports[0], {"key": theirs, "policy": "down"})
    eq(st, 503, "a check on the dead master (%r)" % (ans,))
    check(time.monotonic() - t0 < 1.0, "the check on a dead master waited %.2fs",
          time.monotonic() - t0)
    # the other masters' keys are served meanwhile
    st, _, ans = post(fx.ports[0], {"key": ours, "policy": "down"})
    eq(clean(st, ans), "allowed", "a check on a live master")
    # charges of its keys are kept (202), a live master's applied meanwhile
    for port, cost in zip(fx.ports, (7, 5)):
        st, _, ans = H.request(port, "POST", "/charge", {"key": theirs, "policy": "down",
                                                         "cost": cost})
        eq((st, ans), (202, {"pending": True, "policy": "down", "charged": cost}),
           "a charge of a dead master's key")
    st, _, ans = H.request(fx.ports[0], "POST", "/charge", {"key": ours, "policy": "down",
                                                            "cost": 3})
    check(st in (200, 202), "a charge of a live master's key: %r %r", st, ans)
    H.wait_for(lambda: remaining(fx.ports[0], "down", ours) == [1000 - 1 - 3],
               "the live master's charge applied while the other is down", timeout=10)
    victim.restart()
    wait_cluster_ok(fx.nodes, "after the restart")
    for d in fx.daemons:
        ready_everywhere(d)
    for d in fx.daemons:
        H.wait_for(lambda: H.metric(d, "ratelimitd_charges_pending") == 0,
                   "the kept charges applied", timeout=30)
    # the restart lost the master's data: what it holds now is the kept charges, once
    eq(remaining(fx.ports[1], "down", theirs), [1000 - 12], "the count after the restart")
    for d in fx.daemons:
        st, _, ans = post(d.port, {"key": theirs, "policy": "down"})
        eq(clean(st, ans), "allowed", "a check on the restarted master")
    eq(remaining(fx.ports[0], "down", theirs), [1000 - 12 - 2], "the count after two checks")
    for d in fx.daemons:
        st, _, text = H.request(d.port, "GET", "/metrics")
        m = re.search(r"^ratelimitd_\w*reconnect\w* (\d+)", str(text), re.M)
        check(m is not None and int(m.group(1)) >= 1, "no reconnect counted in /metrics")


def settle_after_stall(fx):
    """The cluster and both daemons as the next case expects them, after a
    master was SIGSTOPped and resumed."""
    wait_cluster_ok(fx.nodes, "after the stall")
    for d in fx.daemons:
        ready_everywhere(d)


def case_max_pending(fx):
    """redis.max_pending holds per cluster node as it does for one Redis: a
    stalled master gets at most that many requests queued, and past them a
    check fails fast instead of waiting for its deadline."""
    victim = fx.masters()[0]
    owners = fx.owners()
    idents = [i for i in ("mp%d" % k for k in range(20000))
              if owners[slot_of("down", i)] == victim.port][:40]
    eq(len(idents), 40, "identities on the stalled master")
    cfg = daemon_config(fx.nodes[0].port)
    # one check per request, so the cap counts checks here
    # "waited" is half the timeout or more: long enough that 40 fresh
    # connections on a loaded host cannot make a fast failure look like a wait
    tmo = 4.0
    cfg["redis"].update({"timeout": "%dms" % (tmo * 1000), "max_pending": 16, "coalesce": 1})
    d = start_daemon(cfg, workers=1)
    results, lock = [], threading.Lock()

    def one(ident):
        t0 = time.monotonic()
        st, _, ans = post(d.port, {"key": ident, "policy": "down"})
        with lock:
            results.append((time.monotonic() - t0, st, ans))

    try:
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in idents]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=tmo + H.HTTP_TIMEOUT)
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        eq(len(results), len(idents), "answers")
        check(all(st == 503 for _, st, _ in results), "answers while stalled: %r",
              sorted({st for _, st, _ in results}))
        waited = [dt for dt, _, _ in results if dt >= tmo / 2]
        check(len(waited) <= 16, "%d checks waited for the stalled master (max_pending 16)",
              len(waited))
        check(len(results) - len(waited) >= 24, "only %d checks failed fast",
              len(results) - len(waited))
    finally:
        d.kill()
    settle_after_stall(fx)


def case_idle_hang(fx):
    """A master that hangs while no check is waiting is noticed all the same
    (the connection's heartbeat: a probe every second, dropped when overdue):
    /readyz 503 within a few seconds; resumed: 200 again.  Before, a Cluster
    node was only judged by the checks sent to it."""
    victim = fx.masters()[0]
    d = start_daemon(daemon_config(fx.nodes[0].port), workers=1)
    try:
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            H.wait_for(lambda: H.request(d.port, "GET", "/readyz", timeout=5.0)[0] == 503,
                       "/readyz 503 after a master hung with no check waiting", 6.0, interval=0.05)
            sys.stdout.write("# idle master hung: /readyz 503 after %.2f s\n"
                             % (time.monotonic() - t0))
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        ready_everywhere(d, timeout=20)
    finally:
        d.kill()
    settle_after_stall(fx)


def case_hybrid_stall(fx):
    """A hybrid policy's sync stuck in a stalled master is never sent again
    beside itself (RL_CHECK_SETTLE: no deadline once sent; the stall drop
    settles it), and its resend after the drop is applied once with it
    (RL_CHECK_ONCE): local answers go on meanwhile, and after SIGCONT the
    master holds exactly the admitted units."""
    victim = fx.masters()[0]
    owners = fx.owners()
    ident = next(i for i in ("hy%d" % k for k in range(20000))
                 if owners[slot_of("hyb", i)] == victim.port)
    key = "{%s}:fw:3600000" % tag("hyb", ident)
    cfg = daemon_config(fx.nodes[0].port)
    cfg["failure_mode"] = "open"
    cfg["redis"]["timeout"] = "200ms"
    cfg["policies"] = [{"name": "hyb", "mode": "hybrid", "sync_interval": "100ms",
                        "limits": [{"algorithm": "fixed_window", "limit": 100000,
                                    "window": "1h"}]}]
    d = start_daemon(cfg, workers=1)
    body = {"key": ident, "policy": "hyb"}

    def count():
        v = H.state_numbers(lambda *a: rcmd(victim.port, *a), key)     # count, start
        return v[0] if v else 0

    def wait_count(cond, what, timeout):
        try:
            H.wait_for(lambda: cond(count()), what, timeout, interval=0.05)
        except H.Fail as e:
            raise H.Fail("%s: the master holds %d" % (e, count()))

    try:
        for i in range(10):
            st, _, ans = post(d.port, body)
            eq(clean(st, ans), "allowed", "warm-up check %d" % i)
        wait_count(lambda c: c == 10, "the warm-up synced", 5)
        log = []                                # (time since the stop, status)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.0:
                t = time.monotonic() - t0
                st, _, ans = post(d.port, body)
                log.append((t, st))
                time.sleep(0.02)
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
        eq(sorted({st for _, st in log}), [200], "statuses while the master is stopped")
        admitted = 10 + len(log)
        wait_count(lambda c: c >= admitted, "every admitted unit after SIGCONT", 15)
        time.sleep(1.0)         # a late second application would land by now
        got = count()
        sys.stdout.write("# hybrid on a stalled master: admitted %d, the master holds %d\n"
                         % (admitted, got))
        eq(got, admitted, "what the master holds after the stall, for %d admitted" % admitted)
    finally:
        d.kill()
    settle_after_stall(fx)


def role(port):
    return info(port, "replication").get("role")


def daemon_clients(port):
    """Client connections on a node that are neither replication links nor
    this very CLIENT LIST: the daemons'."""
    out = []
    for line in rcmd(port, "CLIENT", "LIST").splitlines():
        f = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        if "M" in f.get("flags", "") or "S" in f.get("flags", "") or f.get("cmd") == "client|list":
            continue
        out.append(line)
    return out


def case_failover(fx):
    """A replica promoted by CLUSTER FAILOVER while its master's keys are
    checked: nothing lost, the counts exact (the replica had every write), and
    the daemons close their connections to the demoted master."""
    old = fx.nodes[2]
    rep = Node()
    rc, out = cli("--cluster", "add-node", "127.0.0.1:%d" % rep.port, "127.0.0.1:%d" % old.port,
                  "--cluster-slave", "--cluster-master-id", old.id)
    check(rc == 0, "redis-cli --cluster add-node failed:\n%s", out[-2000:])
    fx.nodes.append(rep)
    wait_cluster_ok(fx.nodes, "after adding a replica")
    H.wait_for(lambda: info(rep.port, "replication").get("master_link_status") == "up",
               "the replica's sync", 20, interval=0.1)
    owners = fx.owners()
    idents = [i for i in ("fo%d" % k for k in range(200))
              if owners[slot_of("mig1", i)] == old.port][:3]
    bodies = [{"key": i, "policy": "mig1"} for i in idents]
    for b in bodies:
        st, _, ans = post(fx.ports[0], b)
        check(clean(st, ans) == "allowed", "first check %r: %r", b, ans)
    check(daemon_clients(old.port), "no daemon connection on the master before the failover")
    moved0 = errorstat(old.port, "MOVED")
    flow = Flow(fx.ports, bodies, threads=6)
    try:
        time.sleep(0.3)
        eq(rcmd(rep.port, "CLUSTER", "FAILOVER"), "OK", "CLUSTER FAILOVER")
        H.wait_for(lambda: role(rep.port) == "master" and role(old.port) == "slave",
                   "the failover to complete", 15, interval=0.05)
        time.sleep(0.5)
        during = flow.count()
    finally:
        allowed = flow.stop()
    print("# failover: %d checks, MOVED from the demoted master %d"
          % (during, errorstat(old.port, "MOVED") - moved0))
    owners = wait_cluster_ok(fx.nodes, "after the failover")
    check(all(owners[slot_of("mig1", i)] == rep.port for i in idents),
          "the promoted replica does not own the keys' slots")
    for port, (ident, n) in zip([fx.ports[0], fx.ports[1], fx.ports[0]], zip(idents, allowed)):
        exact_after(port, "mig1", ident, [100000], n + 1)
    # Redis tells no client about a failover: a worker learns it from a MOVED
    # or its periodic refresh.  The flow's few connections may all have gone to
    # one worker per daemon; fresh connections (cost 0) reach every worker.
    for d in fx.daemons:
        for k in range(24):
            st, _, ans = post(d.port, {"key": idents[k % len(idents)], "policy": "mig1", "cost": 0})
            clean(st, ans)
    H.wait_for(lambda: not daemon_clients(old.port), "the connections to the demoted master to close",
               5, interval=0.05)
    for d in fx.daemons:
        ready_everywhere(d)


def case_auto_failover(fx):
    """A master with a replica killed: after cluster-node-timeout the replica
    is promoted; the daemons find it (reconnect attempts to the dead master ask
    for a refresh), and its keys are served again with their counts."""
    def pair():
        """(a master, its replica with the link up), or None while the
        replication left by the previous case (CLUSTER FAILOVER) settles."""
        for m in fx.masters():
            for n in fx.nodes:
                rep = info(n.port, "replication")
                if n is not m and rep.get("role") == "slave" and \
                        rep.get("master_port") == str(m.port) and \
                        rep.get("master_link_status") == "up":
                    return m, n
        return None
    victim, heir = H.wait_for(pair, "a master with a connected replica", 15, interval=0.1)
    owners = fx.owners()
    idents = [i for i in ("af%d" % k for k in range(300))
              if owners[slot_of("down", i)] == victim.port][:2]
    for i in idents:
        for _ in range(5):
            st, _, ans = post(fx.ports[0], {"key": i, "policy": "down"})
            eq(clean(st, ans), "allowed", "check before the kill")
    H.wait_for(lambda: (int(info(heir.port, "replication").get("master_repl_offset", 0)) >=
                        int(info(victim.port, "replication").get("master_repl_offset", 0))),
               "the replica to catch up", 10, interval=0.05)
    t0 = time.monotonic()
    victim.kill()
    H.wait_for(lambda: role(heir.port) == "master", "the replica's promotion", 20, interval=0.05)
    promoted = time.monotonic() - t0
    for d in fx.daemons:
        ready_everywhere(d, timeout=20)
    ready = time.monotonic() - t0
    print("# automatic failover: replica promoted %.1f s after the kill "
          "(cluster-node-timeout 3 s), both daemons ready on every worker at %.1f s"
          % (promoted, ready))
    for k, i in enumerate(idents):
        st, _, ans = post(fx.ports[k % 2], {"key": i, "policy": "down"})
        eq(clean(st, ans), "allowed", "check after the failover")
        eq(ans["remaining"], 1000 - 6, "remaining of %s after the failover (counts kept)" % i)
    victim.restart()            # back as a replica of its heir
    wait_cluster_ok(fx.nodes, "after the old master came back")


def case_auth(fx):
    user, good_pw, bad_pw = "rluser", "s3cret-pw-0xC0FFEE", "wr0ng-pw-0xBADBAD"
    for n in fx.nodes:
        eq(rcmd(n.port, "ACL", "SETUSER", user, "on", ">" + good_pw, "~*", "+@all"), "OK",
           "ACL SETUSER on %d" % n.port)
    try:
        cfg = daemon_config(fx.nodes[0].port)
        cfg["redis"] = dict(cfg["redis"], username=user, password=good_pw)
        with start_daemon(cfg, workers=1) as d:
            st, _, ans = post(d.port, {"key": "auth-1", "policy": "demo"})
            eq(clean(st, ans), "allowed", "a check with AUTH")
            for n in fx.masters():
                clients = rcmd(n.port, "CLIENT", "LIST")
                check("user=%s " % user in clients, "no connection authenticated as %s on "
                      "master %d", user, n.port)
            check(good_pw not in d.log(), "the password reached the log")
        cfg["redis"] = dict(cfg["redis"], password=bad_pw)
        with H.Daemon(cfg, ready=False) as d:
            H.wait_for(lambda: "handshake failed" in d.log(), "a refused AUTH in the log", 5, interval=0.05)
            st, _, body = H.request(d.port, "GET", "/readyz")
            eq(st, 503, "GET /readyz with a wrong password (%r)" % (body,))
            st, _, ans = post(d.port, {"key": "auth-2", "policy": "demo"})
            eq(st, 503, "a check with a wrong password (%r)" % (ans,))
            check(bad_pw not in d.log(), "the password reached the log")
    finally:
        for n in fx.nodes:
            rcmd(n.port, "ACL", "DELUSER", user)


WRK_LUA = r"""
local counter = 0
function setup(thread)
    thread:set("tid", counter)
    counter = counter + 1
end
local reqs, i = {}, 0
function init(args)
    local headers = { ["Content-Type"] = "application/json" }
    for k = 0, 4999 do
        reqs[#reqs + 1] = wrk.format("POST", "/check", headers,
            string.format('{"key":"t%d-%d","policy":"bench"}', tid, k))
    end
end
function request()
    i = i % #reqs + 1
    return reqs[i]
end
"""


def measure(port, seconds=3):
    """Checks per second answered 200 on distinct keys: wrk when installed,
    else Python threads.  (rate, tool, non-2xx)."""
    if shutil.which("wrk"):
        path = os.path.join(H.tmpdir(), "bench.lua")
        with open(path, "w") as f:
            f.write(WRK_LUA)
        r = subprocess.run(["wrk", "-t2", "-c32", "-d%ds" % seconds, "-s", path,
                            "http://127.0.0.1:%d" % port], capture_output=True,
                           timeout=seconds + 30)
        out = r.stdout.decode("utf-8", "replace")
        m = re.search(r"Requests/sec:\s*([\d.]+)", out)
        check(m is not None, "wrk printed no rate:\n%s", out + r.stderr.decode())
        bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
        return float(m.group(1)), "wrk -t2 -c32", int(bad.group(1)) if bad else 0
    done, bad = [0], [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker(i):
        n = b = 0
        with H.Client(port) as c:
            while time.monotonic() < stop:
                st, _, _ = c.request("POST", "/check", {"key": "p%d-%d" % (i, n),
                                                        "policy": "bench"})
                n += 1
                b += st != 200
        with lock:
            done[0] += n
            bad[0] += b

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=seconds + 30)
    return done[0] / seconds, "python 16 threads", bad[0]


def evalsha_usec(nodes):
    calls = usec = 0
    for n in nodes:
        stats = info(n.port, "commandstats")
        for cmd in ("cmdstat_fcall", "cmdstat_evalsha"):
            m = re.search(r"calls=(\d+),usec=(\d+)", stats.get(cmd, ""))
            if m:
                calls += int(m.group(1))
                usec += int(m.group(2))
    return usec / calls if calls else 0.0


def case_throughput(fx):
    """Checks/s on distinct keys through one daemon (-w 2): the standalone
    backend on one plain Redis (the baseline), the cluster backend on a
    1-master cluster and on the 3-master one; rounds interleaved, means
    printed.  Everything shares this host's cores: not asserted."""
    single = make_cluster(1)
    plain = H.Redis(topology="standalone")
    daemons = []
    try:
        cfg = daemon_config(0)
        del cfg["redis"]["cluster"]
        # the baseline: backend "redis" (-r URL), the same policies
        daemons.append(ready_everywhere(H.Daemon(cfg, redis=plain, workers=2, ready=True)))
        daemons.append(start_daemon(daemon_config(single[0].port)))
        daemons.append(start_daemon(daemon_config(fx.masters()[0].port)))
        setups = [("standalone", daemons[0], [plain]), ("1 master", daemons[1], single),
                  ("3 masters", daemons[2], fx.masters())]
        rates = {label: [] for label, _, _ in setups}
        usec = {label: [] for label, _, _ in setups}
        tool = ""
        for _ in range(2):
            for label, d, nodes in setups:
                for n in nodes:
                    rcmd(n.port, "CONFIG", "RESETSTAT")
                rate, tool, bad = measure(d.port)
                eq(bad, 0, "non-2xx answers under load (%s)" % label)
                rates[label].append(rate)
                usec[label].append(evalsha_usec(nodes))
        for label, _, _ in setups:
            r = rates[label]
            print("# throughput %-10s: %6.0f checks/s (mean of %s; %s, daemon -w 2, distinct "
                  "keys, 2 shared cores); Redis EVALSHA %.1f us/call" % (
                      label, sum(r) / len(r), "/".join("%.0f" % x for x in r), tool,
                      sum(usec[label]) / len(usec[label])))
        check(all(min(v) > 0 for v in rates.values()), "no throughput measured")
    finally:
        for d in daemons:
            d.kill()
        for n in single:
            n.kill()
        plain.kill()


def case_clean_stop(fx):
    # in-flight checks answered, every connection and timer freed: exit 0
    # (a sanitizer build exits non-zero on a leak)
    flow = Flow(fx.ports, [{"key": "stop%d" % i, "policy": "bench"} for i in range(10)],
                threads=4, pause=0)
    time.sleep(0.3)
    codes = [d.stop() for d in fx.daemons]
    flow.halt.set()
    for t in flow.ts:
        t.join(timeout=30)
    eq(codes, [0, 0], "exit codes after SIGTERM with checks in flight")


CASES = [
    ("3-master cluster covers every slot", case_cluster_up),
    ("the test's CRC16 matches CLUSTER KEYSLOT", case_keyslot),
    ("GET /readyz 200 on both daemons (cluster backend)", case_ready),
    ("limit 3: 3 allowed then 429, for keys on each of the 3 masters", case_article),
    ("slot-range edges too: no MOVED/ASK/NOSCRIPT in steady state, FCALL (our slot = the cluster's)",
     case_no_redirects),
    ("one key, limit 100: 300 checks, 30 threads, 2 daemons -> exactly 100", case_hot_key),
    ("5 keys over 3 masters, limit 20: exactly 20 each", case_spread_keys),
    ("the function library (named by the script's hash) on every master and replica",
     case_functions),
    ("SCRIPT and FUNCTION FLUSH on one master: no error, limit exact (EVAL, library reloaded)",
     case_script_flush),
    ("slot migrated by hand under load (ASK, TRYAGAIN, MOVED): none lost, exact",
     case_migrate_ask),
    ("POST /charge while a slot moves: 200 or 202, every charge counted once",
     case_charges_migrate),
    ("redis-cli --cluster reshard under load: none lost, exact", case_reshard),
    ("redis.max_pending per node: a stalled master queues at most that many, the rest fail fast",
     case_max_pending),
    ("a master hung with no check waiting: /readyz 503 within seconds; resumed: 200",
     case_idle_hang),
    ("hybrid: a sync stuck in a stalled master is applied once with its resend; exact",
     case_hybrid_stall),
    ("a master killed: /readyz 503, its keys fail fast; restarted: ready again",
     case_master_restart),
    ("replica promoted (CLUSTER FAILOVER) under load: none lost, exact, old master closed",
     case_failover),
    ("master killed, replica promoted by the cluster: daemons follow, counts kept",
     case_auto_failover),
    ("AUTH with redis.username/password on every node; a wrong one: 503, not logged",
     case_auth),
    ("throughput with 1 and 3 masters (printed)", case_throughput),
    ("SIGTERM with checks in flight: both daemons exit 0", case_clean_stop),
]


if __name__ == "__main__":
    from harness import suite
    suite(CASES, fixture, timeout=SUITE_TIMEOUT)
