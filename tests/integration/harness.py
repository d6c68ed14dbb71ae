"""Shared helpers of ratelimitd's integration tests (Python 3 stdlib only).

Each test file is an executable script: it starts a real redis-server on a free
loopback port, the real daemon ($RATELIMITD) against it, drives it over HTTP and
reports one TAP line per case (`ok 3 - name` / `not ok 4 - name` and the reason
as `#` lines; see "runner" below), the plan and a last `# N passed, M failed`.
Exit status 0 when every case that ran passed, else 1.  `-k WORDS` (or
RL_CASE=WORDS) runs only the cases whose name contains WORDS; `--list` names
them.

Environment:
  RATELIMITD   absolute path of the built daemon (default: ../../src/ratelimitd
               relative to this file, i.e. an in-tree build)
  RL_SRCDIR    absolute path of the source tree (unused by most tests)
  REDIS_SERVER / REDIS_CLI  override the redis binaries' names
  RL_TOPOLOGY  standalone (default) | cluster | sentinel: what `Redis()` starts.
               cluster: 3 masters (no replicas) joined by `redis-cli --cluster
               create`; sentinel: a master, one replica and 3 sentinels.  A
               Daemon given redis=r then gets r.daemon_config() merged into its
               config ({"redis": {"cluster": [...]}} / {"redis": {"sentinel":
               {...}}}) instead of `-r URL`, and r.cli() answers for the whole
               topology (see ClusterRedis.cli).  `make check-topologies` runs
               Makefile.am's TOPOLOGY_TESTS under each.
  RL_VALGRIND  1: run every Daemon under valgrind (memcheck, definite leaks are
               errors) with generous timeouts; Daemon.stop() and wait() then
               fail on valgrind's exit code 99, and a daemon that valgrind
               complained about at any exit (also from a `with` block) fails
               the file with valgrind's report.  VALGRIND overrides the binary.
               `make check-valgrind` runs Makefile.am's VALGRIND_TESTS so.
  RL_CASE      run only the cases whose name contains it (as -k does)

A missing redis-server is a failure, never a skip.
"""

import ast
import atexit
import contextlib
import http.client
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
RATELIMITD = os.environ.get("RATELIMITD") or os.path.join(HERE, "..", "..", "src", "ratelimitd")
RL_SRCDIR = os.environ.get("RL_SRCDIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
REDIS_CLI = os.environ.get("REDIS_CLI", "redis-cli")

VALGRIND = os.environ.get("RL_VALGRIND", "") == "1"
TOPOLOGIES = ("standalone", "cluster", "sentinel")
TOPOLOGY = os.environ.get("RL_TOPOLOGY", "") or "standalone"
# RL_SANITIZED=1: the daemon is an ASan/UBSan build; every daemon still
# running at the end of its block is stopped with SIGTERM, and an exit code
# other than 0 (a leak report, an error) fails the file with its log.
SANITIZED = os.environ.get("RL_SANITIZED", "") == "1"
# Under valgrind or ASan the process's RSS is the tool's, not the daemon's:
# memory bounds are asserted by the plain build's run only.
RSS_MEANINGFUL = not (VALGRIND or SANITIZED)
VALGRIND_BIN = os.environ.get("VALGRIND", "valgrind")
VALGRIND_ARGS = ["--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite",
                 "--track-fds=no", "-q"]
VALGRIND_EXIT = 99
SLOW = 4 if VALGRIND else 1   # how much longer everything may take under valgrind

HTTP_TIMEOUT = 10.0 * SLOW    # every socket operation of a test
START_TIMEOUT = 15.0 * (SLOW * 1.5 if VALGRIND else 1)  # a daemon or redis-server getting ready
STOP_TIMEOUT = 20.0 * SLOW    # SIGTERM to exit (shutdown_grace defaults to 10 s)
# A file's watchdog (Tests) bounds a whole run of daemons and `ratelimitd -t`
# processes, a guard against a hang, not a claim about speed: an ASan build
# starts and exits each process several times slower (its shadow memory, the
# leak check at exit: test_api_doc's hundreds of -t runs took over 300 s on
# a loaded 2-core host, 37 s in the plain build), which SLOW does not count.
WATCHDOG_SLOW = SLOW * (4 if SANITIZED else 1)

_children = []            # every Popen we started, killed at exit
_daemons = []             # live Daemon objects, their logs shown on failure
_valgrind_reports = []    # (daemon argv, exit code, valgrind's output) of every complaint
_lock = threading.Lock()
_tmpdir = None
_keep_tmpdir = False


class HarnessError(Exception):
    """The environment or a fixture failed (not an assertion about the daemon)."""


def tmpdir(prefix="rl-it-"):
    """The process's temporary directory (made at the first call, with
    `prefix`), removed at exit unless keep_tmpdir() was called."""
    global _tmpdir
    with _lock:
        if _tmpdir is None:
            _tmpdir = tempfile.mkdtemp(prefix=prefix)
        return _tmpdir


def keep_tmpdir(keep=True):
    """Leave tmpdir() in place at exit (logs, configs, raw results)."""
    global _keep_tmpdir
    _keep_tmpdir = keep


def _track(p):
    with _lock:
        _children.append(p)
    return p


def _kill_all():
    with _lock:
        procs = list(_children)
    for p in procs:
        try:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        except Exception:
            pass


def _cleanup():
    _kill_all()
    if _tmpdir is not None and not _keep_tmpdir:
        shutil.rmtree(_tmpdir, ignore_errors=True)


atexit.register(_cleanup)


def _on_term(signum, frame):
    # make check interrupted: leave no redis-server or daemon behind
    _cleanup()
    os._exit(1)


for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    try:
        signal.signal(_s, _on_term)
    except (ValueError, OSError):
        pass


_ports_given = set()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, at most 55535: a
    Redis Cluster node refuses a higher one (its bus port is 10000 above),
    and every test may start cluster nodes on these ports.  Never one this
    process was given before: two calls before either port is bound (a
    daemon's listen and rls.listen) could otherwise get the same one."""
    for _ in range(1000):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port <= 55535 and port not in _ports_given:
            _ports_given.add(port)
            return port
    raise HarnessError("no new free loopback port at or below 55535 in 1000 tries")


class Blackhole:
    """A loopback listener that accepts connections and never answers: a
    stopped or overloaded daemon, for clients' timeouts."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(c)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def stop_process(proc, timeout=None):
    """SIGTERM a child and wait for it; SIGKILL when it outlasts timeout."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT if timeout is None else timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def wait_listening(proc, port, timeout):
    """Until proc listens on port (True), or exits or outlasts timeout
    (False: stopped then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if port_open(port):
            return True
        time.sleep(0.02)
    stop_process(proc)
    return False


def port_open(port, host="127.0.0.1", timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def clean_env(extra=None):
    """The current environment without any RATELIMITD_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATELIMITD_")}
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def _tail(path, n=40):
    try:
        with open(path, "r", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return lines[-n:]


def _squeeze(lines):
    """Collapse runs of log lines that differ only in their ts= field."""
    out, last, n = [], None, 0
    for line in lines:
        body = line.split(" ", 1)[1] if line.startswith("ts=") and " " in line else line
        if body == last:
            n += 1
            continue
        if n:
            out.append("    (the line above %d more times)" % n)
        out.append(line)
        last, n = body, 0
    if n:
        out.append("    (the line above %d more times)" % n)
    return out


# --------------------------------------------------------------------- Redis
#
# Every redis-server of the Python tests is a RedisServer: the standalone
# Redis(), the nodes and sentinels of ClusterRedis / SentinelRedis (and of
# test_cluster's and test_sentinel's own topologies), the TLS servers of
# test_tls, the servers of scripts/bench.  Every connection the tests open to
# one is a Resp (or redis-cli, through .cli()).

class RespError(HarnessError):
    """An error reply from Redis."""


def _resp_read(f, raw=False):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed by redis")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RespError("redis error: %s" % rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data if raw else data.decode("utf-8", "replace")
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_read(f, raw) for _ in range(n)]
    raise ConnectionError("bad RESP line %r" % line)


def resp_encode(args):
    """A command as RESP bytes (what a client sends)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Resp:
    """A minimal RESP2 client on one connection (stdlib only): r(*args) is the
    reply (str, int, list, None; bulk strings as bytes when raw); an error
    reply raises RespError.  tls=(ca_file, (crt, key)) speaks TLS (ca_file
    None: the server's certificate is not verified; (crt, key) None: no
    client certificate)."""

    def __init__(self, port, timeout=5.0, raw=False, tls=None):
        self.raw = raw
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls is not None:
            ca, cert = tls
            ctx = ssl.create_default_context(cafile=ca)
            if ca is None:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if cert is not None:
                ctx.load_cert_chain(*cert)
            try:
                # the tests' certificates all carry IP:127.0.0.1, not all a name
                sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.f = self.sock.makefile("rb")

    def __call__(self, *args):
        self.sock.sendall(resp_encode(args))
        return _resp_read(self.f, self.raw)

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _resp(port, *args, timeout=2.0, raw=False, tls=None):
    """One command on a fresh connection (see Resp)."""
    r = Resp(port, timeout=timeout, raw=raw, tls=tls)
    try:
        return r(*args)
    finally:
        r.close()


def _need(binary, package):
    if shutil.which(binary) is None:
        raise HarnessError("%s not found in PATH (%r): it is required, install the Debian "
                           "package %s" % (os.path.basename(binary), binary, package))


def _cli_at(port, args, tls_args=()):
    _need(REDIS_CLI, "redis-tools")
    r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port)] + list(tls_args) +
                       [str(a) for a in args],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=HTTP_TIMEOUT)
    return r.stdout.decode("utf-8", "replace").strip()


def _poll(cond, timeout, interval, tolerate=()):
    """cond() until it returns a true value: (value, None); after timeout
    (None, its last value or the last exception of `tolerate` it raised)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = cond()
        except tolerate as e:
            last = e
        else:
            if last:
                return last, None
        if time.monotonic() >= deadline:
            return None, last
        time.sleep(interval)


def wait_until(cond, what, timeout=START_TIMEOUT * 2, interval=0.05):
    """A fixture's wait (a topology coming up): cond()'s first true value;
    connection and harness errors meanwhile are tolerated; HarnessError after
    timeout.  A case waits with wait_for."""
    v, last = _poll(cond, timeout, interval, (OSError, HarnessError))
    if v is None:
        raise HarnessError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))
    return v


_wait_until = wait_until     # the name test files used


class RedisTls:
    """What a TLS-only redis-server serves and trusts, and how the tests talk
    to it.

        cert    (crt, key) it presents
        ca      the CA file it trusts (clients, and its peers)
        auth    tls-auth-clients: "no", "yes" or "optional"
        client  (ca_file, (crt, key)) of the tests' own connections (see Resp)
    """

    def __init__(self, cert, ca, client, auth="no"):
        self.cert, self.ca, self.client, self.auth = cert, ca, client, auth

    def conf(self, port):
        return ("port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
                "tls-auth-clients %s\n" % (port, self.cert[0], self.cert[1], self.ca, self.auth))

    def cli_args(self):
        ca, cert = self.client
        out = ["--tls"] + (["--cacert", ca] if ca else ["--insecure"])
        return out + (["--cert", cert[0], "--key", cert[1]] if cert else [])


class RedisServer:
    """One redis-server (or sentinel) with its redis.conf in a directory of its
    own, on a free loopback port (tried again when another program takes the
    port meanwhile) or the given one, ready once it answers PING.

        lines     more redis.conf lines ("cluster-enabled yes", "replicaof ...")
        sentinel  run as a sentinel (redis-server --sentinel)
        tls       a RedisTls: TLS only on the port (plain TCP off)
        name      names its directory and its errors

    cmd(*args) is one command (Resp), cli(*args) redis-cli's text; kill()
    (SIGKILL), stop() (SIGTERM), pause()/resume() (SIGSTOP/SIGCONT) and
    restart(), on the same port, perhaps with other tls files."""

    def __init__(self, name="redis", lines=(), sentinel=False, tls=None, port=None):
        _need(REDIS_SERVER, "redis-server")
        self.name, self.lines, self.sentinel, self.tls = name, list(lines), sentinel, tls
        self.proc = None
        self.paused = False
        for _ in range(1 if port else 5):
            self.port = port or free_port()
            if self._start():
                return
        raise HarnessError("%s did not start on port %d%s; log:\n%s"
                           % (name, self.port, "" if port else " (5 ports tried)", "\n".join(self.log_tail())))

    @property
    def url(self):
        return "%s://127.0.0.1:%d/0" % ("rediss" if self.tls else "redis", self.port)

    def _start(self):
        # a directory of its own: a replica's full sync writes dump.rdb
        # there, and a server started later in a shared directory would load
        # that file's keys
        self.dir = os.path.join(tmpdir(), "%s-%d" % (self.name, self.port))
        os.makedirs(self.dir, exist_ok=True)
        self.logfile = os.path.join(self.dir, "redis.log")
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write(self.tls.conf(self.port) if self.tls else "port %d\n" % self.port)
            f.write("bind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\ndaemonize no\n" % self.dir)
            for line in self.lines:
                f.write(line + "\n")
        with open(self.logfile, "ab") as log:
            self.proc = _track(subprocess.Popen(
                [REDIS_SERVER, conf] + (["--sentinel"] if self.sentinel else []),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        self.paused = False
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.ping():
                return True
            time.sleep(0.02)
        self.kill()
        return False

    def log_tail(self, n=40):
        return _tail(self.logfile, n)

    def resp(self, timeout=5.0, raw=False):
        """A connection of its own (close it, or use `with`)."""
        return Resp(self.port, timeout=timeout, raw=raw, tls=self.tls.client if self.tls else None)

    def cmd(self, *args, timeout=5.0, raw=False):
        """One command on a fresh connection: the reply (RespError: an error)."""
        with self.resp(timeout=timeout, raw=raw) as c:
            return c(*args)

    def ping(self):
        try:
            return self.cmd("PING", timeout=1.0) == "PONG"
        except (OSError, HarnessError, ssl.SSLError):
            return False

    def cli(self, *args):
        """redis-cli's output (text, stripped) for one command."""
        return _cli_at(self.port, args, self.tls.cli_args() if self.tls else ())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self):
        if self.alive():
            try:
                self.proc.send_signal(signal.SIGCONT)
            except OSError:
                pass
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.paused = False

    def stop(self):
        """SIGTERM and wait; the port is free afterwards."""
        if self.alive():
            if self.paused:
                self.resume()
            stop_process(self.proc)

    def restart(self, stop=True, tls=None):
        """Stop (kill when not `stop`) and start again on the same port, with
        `tls` instead of the files it had when given."""
        self.stop() if stop else self.kill()
        self.tls = tls or self.tls
        deadline = time.monotonic() + START_TIMEOUT
        while not self._start():
            if time.monotonic() > deadline:
                raise HarnessError("%s could not restart on port %d; log:\n%s"
                                   % (self.name, self.port, "\n".join(self.log_tail())))
            time.sleep(0.1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False


class Redis:
    """A private redis-server on a free loopback port.

        with Redis() as r:
            r.port, r.url, r.cli("DBSIZE")

    Under RL_TOPOLOGY=cluster / sentinel, Redis() builds a ClusterRedis /
    SentinelRedis instead (Redis(topology="standalone") forces this class).
    `.server` is its RedisServer; conf: more redis.conf lines.
    """

    topology = "standalone"

    def __new__(cls, *args, topology=None, **kw):
        if cls is Redis:
            topo = topology or TOPOLOGY
            if topo not in TOPOLOGIES:
                raise HarnessError("RL_TOPOLOGY=%r: expected one of %s" % (topo, "|".join(TOPOLOGIES)))
            cls = {"standalone": Redis, "cluster": ClusterRedis, "sentinel": SentinelRedis}[topo]
        return super().__new__(cls)

    def daemon_config(self):
        """What a Daemon given redis=self merges into its config (None: pass -r URL)."""
        return None

    def __init__(self, topology=None, conf=()):
        self.conf = list(conf)      # redis.conf lines (e.g. rename-command)
        self.server = RedisServer("redis", self.conf)
        self._adopt()

    def _adopt(self):
        self.port, self.proc, self.logfile = self.server.port, self.server.proc, self.server.logfile

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    @property
    def paused(self):
        return self.server.paused

    def ping(self):
        return self.server.ping()

    def cli(self, *args):
        return self.server.cli(*args)

    def stop(self):
        """SIGTERM and wait; the port is free afterwards."""
        self.server.stop()

    def kill(self):
        self.server.kill()

    def pause(self):
        self.server.pause()

    def resume(self):
        self.server.resume()

    def restart(self):
        """Stop and start again on the same port (empty data set)."""
        self.server.restart()
        self._adopt()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False


class Relay:
    """A TCP relay on a free loopback port to a Redis on `upstream`:

        delay   each connection is held that many seconds before its upstream
                connection is made, so every connection to Redis through it
                takes that long to become usable (a distant or busy server,
                deterministically);
        eat     an Event: while it is set, what Redis answers is dropped (a
                command runs, its reply never comes: a reply lost on the way).

    `url` is what a daemon is given (-r, or redis.url); as a Daemon's
    `redis`, it is that URL."""

    def __init__(self, upstream, delay=0.0):
        self.upstream, self.delay = upstream, delay
        self.eat = threading.Event()
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.socks = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def daemon_config(self):
        return None

    def _accept(self):
        while not self.closed.is_set():
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.socks.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        if self.closed.wait(self.delay):
            return
        try:
            u = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
        except OSError:
            c.close()
            return
        u.settimeout(None)
        self.socks.append(u)
        threading.Thread(target=self._pump, args=(u, c, True), daemon=True).start()
        self._pump(c, u, False)

    def _pump(self, a, b, replies):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not (replies and self.eat.is_set()):
                    b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed.set()
        self.ls.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def lua_check_source():

    """The check script as the daemon embeds it (bytes): Makefile.am's
    LUA_CHECK files, in order."""
    with open(os.path.join(RL_SRCDIR, "Makefile.am")) as f:
        text = f.read().replace("\\\n", " ")
    m = re.search(r"^LUA_CHECK\s*=(.*)$", text, re.M)
    out = []
    for name in m.group(1).split():
        with open(os.path.join(RL_SRCDIR, name), "rb") as f:
            out.append(f.read())
    return b"".join(out)


# The numbers an O(1) algorithm keeps in its key (little-endian doubles, see
# scripts/lua/prelude.lua), decoded by Redis itself, so that a Cluster client
# that follows MOVED reads them where the key lives.
STATE_LUA = ("local v = redis.call('GET', KEYS[1]) if not v then return {} end "
             "local t = {struct.unpack('<' .. string.rep('d', #v / 8), v)} "
             "t[#t] = nil return t")


def state_numbers(run, key):
    """[count, start] of a fixed window ([] for no key): run(*args) is a
    Redis client call, r.cli (text) or a Resp/_resp (list)."""
    out = run("EVAL", STATE_LUA, 1, key)
    if isinstance(out, list):
        return [int(x) for x in out]
    return [int(x) for x in re.findall(r"-?\d+", out or "")]


def _sum_stat_fields(acc, text):
    """'calls=3,usec=10,...' added into the dict acc (numbers summed)."""
    for kv in text.split(","):
        k, _, v = kv.partition("=")
        try:
            n = float(v) if "." in v else int(v)
        except ValueError:
            acc.setdefault(k, v)
            continue
        acc[k] = acc.get(k, 0) + n


def _merge_info(outputs):
    """INFO of every master as one: cmdstat_*, errorstat_* and dbN lines summed
    (usec_per_call recomputed), every other line as the first master says."""
    summed, order, base = {}, [], []
    for i, text in enumerate(outputs):
        for line in text.splitlines():
            key, sep, val = line.partition(":")
            if sep and (key.startswith(("cmdstat_", "errorstat_")) or
                        (key.startswith("db") and key[2:].isdigit())):
                if key not in summed:
                    summed[key] = {}
                    order.append(key)
                    if i == 0:
                        base.append(("stat", key))
                _sum_stat_fields(summed[key], val)
            elif i == 0:
                base.append(("line", line))
    placed = {v for t, v in base if t == "stat"}
    out = []

    def fmt(key):
        d = summed[key]
        if "usec_per_call" in d and d.get("calls"):
            d["usec_per_call"] = "%.2f" % (d["usec"] / d["calls"])
        return "%s:%s" % (key, ",".join("%s=%s" % kv for kv in d.items()))
    for t, v in base:
        out.append(fmt(v) if t == "stat" else v)
    out += [fmt(k) for k in order if k not in placed]
    return "\n".join(out)


class _TopologyRedis(Redis):
    """What ClusterRedis and SentinelRedis share: .port/.url/.proc name the
    first node (the master); kill()/stop() end every process of the topology;
    pause/resume/restart are standalone-only (HarnessError).  `.servers`:
    every RedisServer of it."""

    paused = False

    def _base_init(self):
        self.port = None
        self.proc = None
        self.logfile = None
        self.servers = []

    def ping(self):
        return self.servers[0].ping() if self.servers else False

    def cli(self, *args):
        return _cli_at(self.port, args)

    def _unsupported(self, what):
        raise HarnessError("Redis.%s() is standalone-only; RL_TOPOLOGY=%s has no such fault yet"
                           % (what, self.topology))

    def pause(self):
        self._unsupported("pause")

    def resume(self):
        self._unsupported("resume")

    def restart(self):
        self._unsupported("restart")

    def stop(self):
        self.kill()

    def kill(self):
        for s in self.servers:
            try:
                s.kill()
            except Exception:
                pass


def cluster_slot_map(ports):
    """{slot: master port} once every node of `ports` says cluster_state:ok,
    knows exactly those nodes and gives the same map of all 16384 slots; else
    None."""
    maps = []
    for port in ports:
        info = dict(line.split(":", 1) for line in _resp(port, "CLUSTER", "INFO").splitlines() if ":" in line)
        if info.get("cluster_state", "").strip() != "ok" or \
                int(info.get("cluster_known_nodes", "0")) != len(ports):
            return None
        owners = {}
        for rng in _resp(port, "CLUSTER", "SLOTS"):
            for s in range(rng[0], rng[1] + 1):
                owners[s] = rng[2][1]
        maps.append(owners)
    return maps[0] if len(maps[0]) == 16384 and all(m == maps[0] for m in maps) else None


def cluster_create(servers):
    """Join cluster-enabled RedisServers (3 or more) as masters without
    replicas (`redis-cli --cluster create`); the slot map once every node
    agrees on it (cluster_slot_map)."""
    _need(REDIS_CLI, "redis-tools")
    r = subprocess.run([REDIS_CLI, "--cluster", "create"] + ["127.0.0.1:%d" % s.port for s in servers] +
                       ["--cluster-replicas", "0", "--cluster-yes"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise HarnessError("redis-cli --cluster create failed:\n%s"
                           % (r.stdout + r.stderr).decode("utf-8", "replace"))
    return wait_until(lambda: cluster_slot_map([s.port for s in servers]),
                      "cluster_state:ok and one slot map on every node")


class ClusterRedis(_TopologyRedis):
    """Three cluster-enabled masters (no replicas) on free loopback ports.

    daemon_config(): {"redis": {"cluster": [every node]}}.  cli() answers for
    the cluster: --scan / KEYS list every master's keys, DBSIZE sums, INFO sums
    the cmdstat_/errorstat_/dbN lines, FLUSHALL/FLUSHDB/SCRIPT/CONFIG go to
    every master (the first's answer returned), an option-led call goes to the
    first node as is, and any other command is routed by key (`redis-cli -c`).
    """

    topology = "cluster"
    NODES = 3
    ALL_MASTERS = ("flushall", "flushdb", "script", "config", "function")

    def __init__(self, topology=None):
        self._base_init()
        try:
            for _ in range(self.NODES):
                self.servers.append(RedisServer("cluster-node", [
                    "cluster-enabled yes", "cluster-config-file nodes.conf",
                    "cluster-node-timeout 5000", "cluster-require-full-coverage no"]))
            self.port, self.proc = self.servers[0].port, self.servers[0].proc
            self.logfile = self.servers[0].logfile
            cluster_create(self.servers)
        except BaseException:
            self.kill()
            raise

    def master_ports(self):
        return [s.port for s in self.servers]

    def daemon_config(self):
        return {"redis": {"cluster": ["127.0.0.1:%d" % p for p in self.master_ports()]}}

    def cli(self, *args):
        a = [str(x) for x in args]
        head = a[0].lower() if a else ""
        ports = self.master_ports()
        if head == "--scan" or head == "keys":
            return "\n".join(o for o in (_cli_at(p, a) for p in ports) if o)
        if head == "dbsize":
            outs = [_cli_at(p, a) for p in ports]
            try:
                return str(sum(int(o) for o in outs))
            except ValueError:
                return "\n".join(outs)
        if head == "info":
            return _merge_info([_cli_at(p, a) for p in ports])
        if head in self.ALL_MASTERS:
            outs = [_cli_at(p, a) for p in ports]
            return outs[0]
        if head.startswith("-"):
            return _cli_at(self.port, a)
        return _cli_at(self.port, ["-c"] + a)


class SentinelRedis(_TopologyRedis):
    """A master, one replica and three sentinels (quorum 2) on loopback.

    .port/.url/.proc are the master's, so cli() talks to the master;
    daemon_config(): {"redis": {"sentinel": {"master": MASTER, "nodes": [...]}}}.
    """

    topology = "sentinel"
    MASTER = "rlmaster"

    def __init__(self, topology=None):
        self._base_init()
        try:
            self.master = RedisServer("sentinel-master")
            self.servers.append(self.master)
            self.port, self.proc = self.master.port, self.master.proc
            self.logfile = self.master.logfile
            self.replica = RedisServer("sentinel-replica", ["replicaof 127.0.0.1 %d" % self.port])
            self.servers.append(self.replica)
            self.sentinels = []
            for _ in range(3):
                # down-after generous: a loaded host must not cause a failover
                s = RedisServer("sentinel", [
                    "sentinel monitor %s 127.0.0.1 %d 2" % (self.MASTER, self.port),
                    "sentinel down-after-milliseconds %s 10000" % self.MASTER,
                    "sentinel failover-timeout %s 20000" % self.MASTER,
                    "sentinel parallel-syncs %s 1" % self.MASTER], sentinel=True)
                self.servers.append(s)
                self.sentinels.append(s)
            wait_until(lambda: "master_link_status:up" in self.replica.cmd("INFO", "replication"),
                        "the replica to sync")
            wait_until(lambda: all(self._named_master(s) == self.port for s in self.sentinels),
                        "every sentinel to name the master")
        except BaseException:
            self.kill()
            raise

    def _named_master(self, s):
        r = _resp(s.port, "SENTINEL", "get-master-addr-by-name", self.MASTER)
        return int(r[1]) if r else None

    def daemon_config(self):
        return {"redis": {"sentinel": {"master": self.MASTER,
                                       "nodes": ["127.0.0.1:%d" % s.port for s in self.sentinels]}}}


def merge_redis_config(cfg, redis):
    """cfg (a dict, JSON text or None) with redis.daemon_config() deep-merged
    into its "redis" object (the test's timeout, key_prefix... kept).  Returns
    (config, merged?): text that is not a JSON object is returned unmerged."""
    extra = redis.daemon_config() if redis is not None else None
    if not extra:
        return cfg, False
    if cfg is None:
        base = {}
    elif isinstance(cfg, dict):
        base = cfg
    else:
        try:
            base = json.loads(cfg.decode() if isinstance(cfg, bytes) else cfg)
        except ValueError:
            return cfg, False
        if not isinstance(base, dict):
            return cfg, False
    out = dict(base)
    rc = out.get("redis")
    rc = dict(rc) if isinstance(rc, dict) else {}
    rc.update(extra["redis"])
    out["redis"] = rc
    return out, True


def ready_everywhere(port, timeout=START_TIMEOUT, streak=12):
    """GET /readyz 200 on `streak` fresh connections in a row: every worker
    (each with its own backend) has connected."""
    deadline = time.monotonic() + timeout
    ok, last = 0, None
    while time.monotonic() < deadline:
        try:
            st, _, body = request(port, "GET", "/readyz", timeout=1.0)
        except (OSError, http.client.HTTPException) as e:
            st, body = None, str(e)
        ok = ok + 1 if st == 200 else 0
        if ok >= streak:
            return
        last = (st, body)
        time.sleep(0.01 if st == 200 else 0.05)
    raise DaemonError("GET /readyz not 200 on every worker within %ss (last %r)" % (timeout, last))



# ---------------------------------------------------------------- TLS files

OPENSSL = os.environ.get("OPENSSL", "openssl")


class Pki:
    """CAs and leaf certificates (P-256 keys: quick to make) in one dir, made
    with the openssl command (test_tls.py, test_rls_grpc.py)."""

    def __init__(self):
        if shutil.which(OPENSSL) is None:
            raise HarnessError("openssl not found in PATH (Debian package openssl)")
        self.dir = os.path.join(tmpdir(), "pki")
        os.makedirs(self.dir, exist_ok=True)

    def _run(self, *args):
        r = subprocess.run([OPENSSL] + list(args), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60)
        if r.returncode != 0:
            raise HarnessError("openssl %s failed: %s" % (args[0], r.stderr.decode()))

    def path(self, name):
        return os.path.join(self.dir, name)

    def ca(self, name):
        crt, key = self.path(name + ".crt"), self.path(name + ".key")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=" + name,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return crt, key

    def leaf(self, name, ca, days=2, san="DNS:localhost,IP:127.0.0.1"):
        """A certificate signed by ca ((crt, key)); days -1: expired a day ago."""
        crt, key, csr = self.path(name + ".crt"), self.path(name + ".key"), self.path(name + ".csr")
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\n" % san)
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", "/CN=" + name)
        self._run("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1],
                  "-set_serial", str(secrets.randbits(62)), "-days", str(days),
                  "-out", crt, "-extfile", ext)
        return crt, key


# -------------------------------------------------------------------- Daemon

class DaemonError(HarnessError):
    pass


def run_cli(args, env=None, timeout=HTTP_TIMEOUT, input=None):
    """Run $RATELIMITD with `args` to completion: (exit code, stdout, stderr).

    The environment is the test's minus every RATELIMITD_* variable, plus env.
    """
    r = subprocess.run([RATELIMITD] + [str(a) for a in args], env=clean_env(env),
                       input=input, stdin=None if input is not None else subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def write_config(cfg, name=None):
    """Write a config (dict -> JSON, str/bytes as is) to a temp file; its path."""
    fd, path = tempfile.mkstemp(prefix=name or "config-", suffix=".json", dir=tmpdir())
    with os.fdopen(fd, "wb") as f:
        if isinstance(cfg, bytes):
            f.write(cfg)
        elif isinstance(cfg, str):
            f.write(cfg.encode())
        else:
            f.write(json.dumps(cfg, indent=2).encode())
    return path


class Daemon:
    """The daemon under test.

        with Daemon(config_dict, redis=r) as d:      # -c FILE -l 127.0.0.1:P -r URL
            request(d.port, "POST", "/check", {...})

    config   dict (written as JSON), str/bytes (written as is) or None (no -c)
    redis    a Redis (its url goes to -r) or None
    backend  "memory" adds `-b memory`
    args     extra command-line arguments
    env      extra environment (RATELIMITD_* of the caller's environment are dropped)
    exact_env  True: the environment is `env` alone, plus PATH and the sanitizers'
             and valgrind's own variables (a container's environment, exactly)
    binary   the executable to start instead of RATELIMITD (a link to it named
             `ratelimit`, envoyproxy/ratelimit's command)
    listen   False: do not pass -l; then `port` says where the daemon will listen
    wait     False: do not wait for /healthz (for daemons expected to fail)
    ready    also wait for GET /readyz 200 (the backend connected) before returning;
             default: when `redis` is given or backend is "memory"
    wrapper  a command line the daemon runs under (scripts/bench: valgrind
             --tool=callgrind), with `start_timeout` seconds to get ready
    """

    def __init__(self, config=None, redis=None, backend=None, args=(), env=None,
                 listen=True, port=None, wait=True, workers=None, ready=None,
                 wrapper=(), start_timeout=None, exact_env=False, binary=None):
        self.wrapper = list(wrapper)
        self.exact_env = exact_env
        self.binary = binary or RATELIMITD
        self.start_timeout = start_timeout or START_TIMEOUT
        self.want_ready = ready if ready is not None else (redis is not None or backend == "memory")
        # RL_TOPOLOGY cluster/sentinel: the Redis's seeds/sentinels go in the
        # config instead of -r (standalone: config untouched, -r URL)
        config, self.redis_in_config = merge_redis_config(config, redis)
        self.config_path = write_config(config) if config is not None else None
        self.redis = redis
        self.backend = backend
        self.extra = [str(a) for a in args]
        self.env = env
        self.listen = listen
        self.workers = workers
        self.proc = None
        self.port = port
        self.logfile = None
        self.exit_code = None
        attempts = 5 if (listen and port is None) else 1
        for i in range(attempts):
            if listen and port is None:
                self.port = free_port()
            self._spawn()
            if not wait:
                break
            state = self._wait_ready()
            if state == "ready":
                break
            log = self.log()
            bind_race = self.exit_code == 2 and ("in use" in log.lower() or "bind" in log.lower())
            if not (bind_race and i + 1 < attempts):
                raise DaemonError("daemon %s exited with %s before answering /healthz; stderr:\n%s"
                                  % (self.argv, self.exit_code, log))
        if wait and self.want_ready and self.redis_in_config:
            try:
                ready_everywhere(self.port)
            except DaemonError as e:
                self.kill()
                raise DaemonError("%s; daemon %s log:\n%s" % (e, self.argv, self.log()))
        with _lock:
            _daemons.append(self)

    def _spawn(self):
        argv = [self.binary]
        if self.config_path:
            argv += ["-c", self.config_path]
        if self.listen:
            argv += ["-l", "127.0.0.1:%d" % self.port]
        if self.redis is not None and not self.redis_in_config:
            argv += ["-r", self.redis.url]
        if self.backend:
            argv += ["-b", self.backend]
        if self.workers is not None:
            argv += ["-w", str(self.workers)]
        argv += self.extra
        self.argv = argv
        if not os.access(RATELIMITD, os.X_OK):
            raise DaemonError("daemon binary %r is not an executable file (set RATELIMITD)" % RATELIMITD)
        fd, self.logfile = tempfile.mkstemp(prefix="daemon-", suffix=".log", dir=tmpdir())
        run = self.wrapper + argv
        if VALGRIND and not self.wrapper:
            if shutil.which(VALGRIND_BIN) is None:
                os.close(fd)
                raise DaemonError("RL_VALGRIND=1 but %r is not in PATH (Debian package valgrind)"
                                  % VALGRIND_BIN)
            self.vglog = self.logfile[:-len(".log")] + ".valgrind"
            run = [VALGRIND_BIN] + VALGRIND_ARGS + ["--log-file=" + self.vglog] + argv
        try:
            env = clean_env(self.env)
            if self.exact_env:
                env = {k: v for k, v in os.environ.items()
                       if k == "PATH" or k.startswith(("ASAN_", "LSAN_", "UBSAN_", "VALGRIND"))}
                env.update({k: str(v) for k, v in (self.env or {}).items()})
            self.proc = _track(subprocess.Popen(run, env=env, stdin=subprocess.DEVNULL,
                                                stdout=fd, stderr=subprocess.STDOUT))
        finally:
            os.close(fd)
        self.exit_code = None
        self.vg_checked = False

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        healthy, path, body = False, "/healthz", None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_code = rc
                return "exited"
            path = "/readyz" if (self.want_ready and healthy) else "/healthz"
            try:
                st, _, body = request(self.port, "GET", path, timeout=1.0)
                if st == 200:
                    if path == "/readyz" or not self.want_ready:
                        return "ready"
                    healthy = True
                    continue
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.02)
        self.kill()
        raise DaemonError("daemon %s did not answer GET %s 200 within %ss (last: %r); stderr:\n%s"
                          % (self.argv, path, self.start_timeout, body, self.log()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.logfile, "r", errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def valgrind_log(self):
        """What valgrind wrote ("" when not under valgrind)."""
        try:
            with open(self.vglog, "r", errors="replace") as f:
                return f.read()
        except (OSError, TypeError, AttributeError):
            return ""

    def _valgrind_verdict(self, strict):
        """Under valgrind, after the process ended: record a complaint (exit 99);
        with strict, raise DaemonError on it or on any exit code but 0."""
        if not VALGRIND or self.vg_checked or self.exit_code is None:
            return
        self.vg_checked = True
        if self.exit_code == VALGRIND_EXIT:
            report = self.valgrind_log().strip() or "(no output)"
            with _lock:
                _valgrind_reports.append((self.argv, self.exit_code, report))
            if strict:
                raise DaemonError("valgrind reported errors (exit %d) for %s:\n%s"
                                  % (self.exit_code, " ".join(self.argv[1:]), report))
        elif strict and self.exit_code != 0:
            raise DaemonError("daemon under valgrind exited %s, expected 0; valgrind:\n%s\nlog:\n%s"
                              % (self.exit_code, self.valgrind_log().strip(),
                                 "\n".join(self.log().splitlines()[-20:])))

    def wait(self, timeout=None):
        """Wait for the process to exit by itself; its exit code (DaemonError on timeout)."""
        timeout = STOP_TIMEOUT if timeout is None else timeout * SLOW
        try:
            self.exit_code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DaemonError("daemon still running after %ss" % timeout)
        self._forget()
        # a test waiting for an exit may expect 1 or 2: only valgrind's own code fails here
        if self.exit_code == VALGRIND_EXIT:
            self._valgrind_verdict(strict=True)
        self._valgrind_verdict(strict=False)
        return self.exit_code

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Send SIGTERM (or sig), wait, return the exit code.  Kills and raises on timeout.

        Under RL_VALGRIND=1 it also asserts the exit code is 0: valgrind's 99
        (memory errors, definite leaks) raises DaemonError with its report."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.exit_code = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
                self._forget()
                raise DaemonError("daemon did not exit within %ss of signal %d" % (timeout, sig))
        else:
            self.exit_code = self.proc.returncode
        self._forget()
        self._valgrind_verdict(strict=True)
        return self.exit_code

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        elif self.proc is not None and self.exit_code is None:
            self.exit_code = self.proc.returncode
            self._valgrind_verdict(strict=False)
        self._forget()

    def reload(self):
        self.proc.send_signal(signal.SIGHUP)

    def rewrite_config(self, cfg):
        """Replace the config file's content (then call reload())."""
        if self.redis_in_config:
            cfg, _ = merge_redis_config(cfg, self.redis)
        with open(self.config_path, "wb") as f:
            f.write(cfg if isinstance(cfg, bytes) else
                    cfg.encode() if isinstance(cfg, str) else json.dumps(cfg, indent=2).encode())

    def _forget(self):
        with _lock:
            if self in _daemons:
                _daemons.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if VALGRIND and self.proc is not None and self.proc.poll() is None:
            # a clean stop, so valgrind checks for leaks; a complaint is
            # recorded and fails the file in Tests.finish()
            try:
                self.stop()
            except DaemonError:
                pass
        elif SANITIZED and self.proc is not None and self.proc.poll() is None:
            try:
                code = self.stop()
            except DaemonError as e:
                code = str(e)
            if code != 0:
                with _lock:
                    _valgrind_reports.append((self.argv, code, "\n".join(
                        self.log().splitlines()[-120:])))
        self.kill()
        return False


# ---------------------------------------------------------------------- HTTP

class Headers(dict):
    """Response headers: lower-case name -> value (repeated headers joined by ", ").

    `.raw` keeps every (name, value) pair as received; `.count(name)` how many
    times a header was sent.
    """

    def __init__(self, pairs):
        super().__init__()
        self.raw = list(pairs)
        for k, v in self.raw:
            k = k.lower()
            self[k] = v if k not in self else self[k] + ", " + v

    def count(self, name):
        name = name.lower()
        return sum(1 for k, _ in self.raw if k.lower() == name)


def _decode_body(data):
    text = data.decode("utf-8", "replace")
    if not text:
        return ""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _encode_body(body, headers):
    headers = dict(headers or {})
    if body is None:
        return None, headers
    if isinstance(body, (dict, list)):
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return data, headers
    if isinstance(body, str):
        return body.encode("utf-8"), headers
    return bytes(body), headers


def request(port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT, host="127.0.0.1"):
    """One request on a fresh connection: (status, Headers, JSON value or raw text).

    body: dict/list -> JSON (Content-Type application/json unless given),
          str/bytes -> sent as is, None -> no body.
    """
    data, hdrs = _encode_body(body, headers)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, Headers(resp.getheaders()), _decode_body(raw)
    finally:
        conn.close()


class Client:
    """A keep-alive HTTP/1.1 client that never reconnects behind your back.

    Each request() raises ConnectionLost when the previous response closed the
    connection (http.client would silently open a new one).  `.local_port`
    identifies the TCP connection; `.server_closed` tells whether the last
    response ended it.
    """

    class ConnectionLost(Exception):
        pass

    def __init__(self, port, host="127.0.0.1", timeout=HTTP_TIMEOUT):
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.conn.connect()
        self.sock = self.conn.sock
        self.local_port = self.sock.getsockname()[1]
        self.requests = 0
        self.server_closed = False

    def request(self, method, path, body=None, headers=None):
        if self.conn.sock is None or self.conn.sock is not self.sock:
            raise Client.ConnectionLost("the connection was closed after request %d" % self.requests)
        data, hdrs = _encode_body(body, headers)
        self.conn.request(method, path, body=data, headers=hdrs)
        resp = self.conn.getresponse()
        raw = resp.read()
        self.requests += 1
        # http.client drops its socket when the response said Connection: close
        # (or HTTP/1.0 without keep-alive)
        self.server_closed = self.conn.sock is None
        return resp.status, Headers(resp.getheaders()), _decode_body(raw)

    def same_connection(self):
        """True while this is still the original, open TCP connection."""
        if self.conn.sock is not self.sock or self.sock is None:
            return False
        try:
            return self.sock.getsockname()[1] == self.local_port and not _peer_closed(self.sock)
        except OSError:
            return False

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _peer_closed(sock):
    """True when the peer has closed (EOF/RST pending) — without consuming data."""
    sock.setblocking(False)
    try:
        data = sock.recv(1, socket.MSG_PEEK)
        return data == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


class RawConn:
    """Bytes in, parsed response out, on one TCP connection (nothing hidden).

        c = RawConn(port); c.send(b"GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        status, headers, body = c.read_response()      # body: bytes
    """

    def __init__(self, port, host="127.0.0.1", timeout=HTTP_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed by the server")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_response(self, head=False):
        """(status, Headers, body bytes).  head=True: a response to HEAD (no body)."""
        status_line = self._line().decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError("bad status line %r" % status_line)
        self.version = parts[0]
        status = int(parts[1])
        pairs = []
        while True:
            line = self._line().decode("latin-1")
            if line == "":
                break
            name, _, value = line.partition(":")
            pairs.append((name.strip(), value.strip()))
        hdrs = Headers(pairs)
        if head or status in (204, 304) or 100 <= status < 200:
            return status, hdrs, b""
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line() != b"":
                        pass
                    break
                body += self._exact(size)
                self._line()
            return status, hdrs, body
        if "content-length" in hdrs:
            return status, hdrs, self._exact(int(hdrs["content-length"]))
        body = self.buf          # read until close
        self.buf = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                body += chunk
        except OSError:
            pass
        return status, hdrs, body

    def is_closed(self, wait=0.0):
        """True when the server has closed the connection (waits up to `wait` s for it)."""
        if self.buf:
            return False
        deadline = time.monotonic() + wait
        while True:
            if _peer_closed(self.sock):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def raw_request(port, data, timeout=HTTP_TIMEOUT):
    """Send raw bytes on a new connection, read one response: (status, Headers, body bytes)."""
    with RawConn(port, timeout=timeout) as c:
        c.send(data)
        return c.read_response()


def http_bytes(method, path, body=b"", headers=None, version="HTTP/1.1"):
    """Build a request's bytes (Host and Content-Length added unless given)."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body, ensure_ascii=False).encode("utf-8")
    elif isinstance(body, str):
        body = body.encode()
    hdrs = [("Host", "127.0.0.1")] + list((headers or {}).items())
    names = {k.lower() for k, _ in hdrs}
    if body and "content-length" not in names and "transfer-encoding" not in names:
        hdrs.append(("Content-Length", str(len(body))))
    if body and "content-type" not in names:
        hdrs.append(("Content-Type", "application/json"))
    head = "%s %s %s\r\n" % (method, path, version) + "".join("%s: %s\r\n" % kv for kv in hdrs) + "\r\n"
    return head.encode("latin-1") + body


# ---------------------------------------------------------------- metrics

def scrape_metrics(port):
    """The daemon's /metrics: ({family: its TYPE}, {series name: {label: {values}}});
    a histogram's series are name_bucket, name_sum and name_count."""
    st, _, body = request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    text = body if isinstance(body, str) else body.decode()
    metrics, types = {}, {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\w+) (\w+)", line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"(\w+)(?:\{(.*)\})? ", line)
        check(m, "unparsable /metrics line %r", line)
        labels = metrics.setdefault(m.group(1), {})
        for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""):
            labels.setdefault(k, set()).add(v)
    for name, kind in types.items():
        if kind == "histogram":
            check(name + "_bucket" in metrics, "histogram %s has no _bucket series", name)
        else:
            check(name in metrics, "%s has a TYPE line but no sample", name)
    return types, metrics


# ------------------------------------------------- src/config.c's option tables

def _c_split(s, sep=","):
    """Split at `sep` outside parentheses, braces and string literals."""
    out, depth, cur, i, q = [], 0, [], 0, False
    while i < len(s):
        c = s[i]
        if q:
            cur.append(c)
            if c == "\\":
                cur.append(s[i + 1])
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
            cur.append(c)
        elif c in "({":
            depth += 1
            cur.append(c)
        elif c in ")}":
            depth -= 1
            cur.append(c)
        elif c == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _c_int(expr, consts):
    e = re.sub(r"(\d+)(?:LL|L|U|ULL)\b", r"\1", expr)
    for k, v in consts.items():
        e = re.sub(r"\b%s\b" % k, str(v), e)
    check(re.fullmatch(r"[0-9\s*+()-]+", e), "cannot evaluate %r from src/config.c", expr)
    return int(eval(e, {"__builtins__": {}}))  # digits and * + - ( ) only


def _config_sources():
    srcs = {}
    for fn in ("config.c", "policy.c", "log.c"):
        with open(os.path.join(RL_SRCDIR, "src", fn)) as f:
            srcs[fn] = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    return srcs


def _algo_names():
    """The algorithms' names in the order of algo.c's table (enum rl_algo), as
    src/algo_*.c's definitions write them: the limit's "algorithm" row looks
    them up there."""
    src = os.path.join(RL_SRCDIR, "src")
    defs = {}
    for fn in sorted(os.listdir(src)):
        if re.fullmatch(r"algo_\w+\.c", fn):
            with open(os.path.join(src, fn)) as f:
                defs.update(re.findall(r'const struct rl_algo_def (rl_algo_\w+) = \{.*?\.name\s*=\s*"([^"]+)"',
                                       f.read(), re.S))
    with open(os.path.join(src, "algo.c")) as f:
        order = re.findall(r"\[RL_ALGO_\w+\]\s*=\s*&(rl_algo_\w+)", f.read())
    check(order and all(d in defs for d in order), "cannot read the algorithm table of src/algo.c")
    return [defs[d] for d in order]


def config_tables():
    """{table name: [field dict]} from the rows of src/config.c and src/policy.c
    (designated initialisers; the names arrays from src/config.c, src/policy.c
    and src/log.c, the algorithms' from src/algo_*.c).  A field: name, type
    (SCHEMA_*), default (JSON text or None), min, max, names (enum values or
    None), sub (the table an OBJECT or ARRAY row holds, or None), restart,
    required.  The daemon cannot list its options itself, so its tables are
    read where they are written; test_api_doc.py holds the result against the
    binary (`ratelimitd -t`)."""
    srcs = _config_sources()
    src = srcs["config.c"] + srcs["policy.c"]
    consts = {"DAY_MS": 24 * 3600 * 1000}
    names = {}
    for text in srcs.values():
        for m in re.finditer(r"const char \*const (\w+)\[\] = \{(.*?)\};", text, re.S):
            names[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
    schemas = dict(re.findall(r"(?:static )?const struct schema (\w+) = \{\s*SCHEMA_FIELDS\((\w+)\)", src))
    tables = {}
    for m in re.finditer(r"static const struct schema_field (\w+)\[\] = \{(.*?)\n\};", src, re.S):
        fields = []
        for entry in _c_split(m.group(2)):
            entry = entry.strip()
            if not entry.startswith("{"):
                continue
            row = {}
            for part in _c_split(entry[1:-1]):
                k = re.fullmatch(r"\.(\w+)\s*=\s*(.*)", part, re.S)
                check(k, "unexpected part %r of a row in %s", part[:80], m.group(1))
                row[k.group(1)] = k.group(2).strip()
            flags = row.get("flags", "")
            sub = row.get("sub", "").lstrip("&") or None
            if row.get("custom") == "&algorithm_type":  # one of the algorithms' names
                row["type"], row["names"] = "SCHEMA_ENUM", "algo_names"
                names["algo_names"] = _algo_names()
            fields.append({
                "name": ast.literal_eval(row["name"]), "type": row["type"],
                "default": ast.literal_eval(row["def"]) if "def" in row else None,
                "min": _c_int(row.get("min", "0"), consts), "max": _c_int(row.get("max", "0"), consts),
                "names": names.get(row["names"]) if "names" in row else None,
                "sub": schemas.get(sub) if sub else None,
                "restart": "SCHEMA_RESTART" in flags, "required": "SCHEMA_REQUIRED" in flags,
            })
        tables[m.group(1)] = fields
    # every row found: the parse above must not skip one silently
    nrows = len(re.findall(r"\{\s*\.name\s*=", src))
    check(nrows == sum(len(v) for v in tables.values()),
          "src/config.c and src/policy.c have %d rows, %d were read", nrows, sum(len(v) for v in tables.values()))
    return tables


def config_options(tables=None):
    """Every option as [(path, field)], walked from top_fields: "redis.timeout",
    "policies[].limits[].window".  A table reached twice (the limit object of
    policies[].limits and policies[].overrides[].limits) is listed at its first
    path only."""
    tables = tables or config_tables()
    out, seen = [], set()

    def walk(table, prefix):
        seen.add(table)
        for f in tables[table]:
            path = prefix + f["name"]
            out.append((path, f))
            if f["sub"] and f["sub"] not in seen:
                walk(f["sub"], path + ("[]." if f["type"] == "SCHEMA_ARRAY" else "."))

    walk("top_fields", "")
    check(seen == set(tables), "tables not reachable from top_fields: %s", sorted(set(tables) - seen))
    return out


def config_renderings(v, ftype):
    """The ways a bound of a duration (ms) or size (bytes) may be written: "60000",
    "60s", "1m"; "1024", "1k"."""
    out = {str(v)}
    if ftype == "SCHEMA_DURATION":
        out.add("%dms" % v)
        for unit, ms in (("s", 1000), ("m", 60000), ("h", 3600000)):
            if v % ms == 0:
                out.add("%d%s" % (v // ms, unit))
    elif ftype == "SCHEMA_SIZE":
        for unit, b in (("k", 1024), ("m", 1024 * 1024)):
            if v % b == 0:
                out.add("%d%s" % (v // b, unit))
    return out


# -------------------------------------------------------------- assertions

class Fail(AssertionError):
    pass


def check(cond, msg, *args):
    if not cond:
        raise Fail(msg % args if args else msg)


def eq(got, want, what):
    if got != want:
        raise Fail("%s: expected %r, got %r" % (what, want, got))


# --------------------------------------------------------- what cases share

def note(fmt, *args):
    """A line of the file's log (a TAP comment: not a result)."""
    sys.stdout.write("#   " + (fmt % args if args else fmt) + "\n")
    sys.stdout.flush()


def wait_for(cond, what, timeout=30.0, interval=0.02):
    """cond()'s first true value, polled; Fail naming `what` and cond's last
    value after `timeout` seconds (SLOW times that under valgrind).  An
    exception of cond fails the case at once."""
    timeout *= SLOW
    v, last = _poll(cond, timeout, interval)
    if v is None:
        raise Fail("timed out after %.1fs waiting for %s (last %r)" % (timeout, what, last))
    return v


def post(target, body=None, headers=None, timeout=HTTP_TIMEOUT):
    """POST /check to a Daemon (or a port): (status, Headers, JSON or text)."""
    return request(getattr(target, "port", target), "POST", "/check", body, headers,
                   timeout=timeout)


def readyz(target, timeout=5.0):
    """The status of GET /readyz (None: no answer)."""
    try:
        return request(getattr(target, "port", target), "GET", "/readyz", timeout=timeout)[0]
    except (OSError, http.client.HTTPException):
        return None


def rss_kib(target):
    """VmRSS in KiB of a process: a pid, or what has one (a Daemon, a
    RedisServer, a Popen)."""
    proc = getattr(target, "proc", target)
    pid = getattr(proc, "pid", proc)
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise HarnessError("no VmRSS in /proc/%d/status" % pid)


def _labels(text):
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text or ""))


def metric(target, name, labels=None, default=None):
    """One sample of the daemon's GET /metrics (target: a Daemon or a port):
    `name` with exactly `labels` (a dict, or text as between the braces:
    'kind="noscript"'), or with none given the first sample of that name.
    An int or a float; absent: `default`, or Fail when None."""
    st, _, text = request(getattr(target, "port", target), "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    want = labels if isinstance(labels, dict) or labels is None else _labels(labels)
    for m in re.finditer(r"^%s(?:\{(.*)\})? (\S+)$" % re.escape(name), str(text), re.M):
        if want is None or _labels(m.group(1)) == {k: str(v) for k, v in want.items()}:
            v = m.group(2)
            return int(v) if re.fullmatch(r"-?\d+", v) else float(v)
    if default is None:
        raise Fail("no %s%s in /metrics" % (name, "" if labels is None else " %r" % (labels,)))
    return default


def commandstat_calls(redis, *commands):
    """How often Redis ran `commands` (lower-case names) since its last
    CONFIG RESETSTAT: INFO commandstats of a Redis (every master of a
    Cluster) or a RedisServer."""
    total = 0
    for cmd, calls in re.findall(r"^cmdstat_([^:]+):calls=(\d+)", redis.cli("INFO", "commandstats"),
                                 re.M):
        if cmd in commands:
            total += int(calls)
    return total


def script_calls(redis):
    """The daemon's script calls: FCALL (Redis 7), EVALSHA (no FUNCTION)."""
    return commandstat_calls(redis, "fcall", "evalsha")


class AdminDaemon:
    """A daemon (of `workers`) with `policies`, identity from the body,
    admin_listen on a loopback port of its own and, given `token`, an
    admin_token_file holding it; more options in `config`.  .d the Daemon,
    .port and .aport its listeners, .r the Redis."""

    def __init__(self, server, policies, token=None, workers=2, **config):
        self.r = server
        self.aport = free_port()
        cfg = {"identity": ["body"], "admin_listen": "127.0.0.1:%d" % self.aport,
               "policies": policies}
        if token is not None:
            tok = os.path.join(tmpdir(), "admin-token-%d" % self.aport)
            with open(tok, "w") as f:
                f.write(token + "\n")
            cfg["admin_token_file"] = tok
        cfg.update(config)
        self.d = Daemon(cfg, redis=server, workers=workers)
        self.port = self.d.port

    def close(self):
        self.d.kill()


@contextlib.contextmanager
def admin_fixture(policies, token=None, **kw):
    """A Redis and an AdminDaemon on it, yielded."""
    with Redis() as r:
        a = AdminDaemon(r, policies, token, **kw)
        try:
            yield a
        finally:
            a.close()


_node_projects = {}
_node_lock = threading.Lock()


def node_project(src, files, timeout=600):
    """A copy of the npm project in `src` (its `files`, package.json,
    package-lock.json and .npmrc among them) with its packages installed from
    the lock (npm ci, no install scripts), once per process: its directory."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise HarnessError("%s not found in PATH (Debian packages nodejs, npm)" % tool)
    with _node_lock:
        if src not in _node_projects:
            d = os.path.join(tmpdir(), os.path.basename(src))
            os.makedirs(d, exist_ok=True)
            for f in files:
                shutil.copy(os.path.join(src, f), d)
            r = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                               cwd=d, capture_output=True, timeout=timeout)
            if r.returncode != 0:
                raise HarnessError("npm ci in %s failed:\n%s" % (d, r.stderr.decode()[-2000:]))
            _node_projects[src] = d
        return _node_projects[src]


@contextlib.contextmanager
def redis_and_daemon(config, **daemon_args):
    """The usual fixture: a Redis (of RL_TOPOLOGY) and one Daemon with
    `config` against it; yields (daemon, redis)."""
    with Redis() as r, Daemon(config, redis=r, **daemon_args) as d:
        yield d, r


# ---------------------------------------------------------------- traffic

def blast(ports, bodies, threads):
    """Send every body as POST /check from `threads` threads, each on one keep-alive
    connection to ports[i % len(ports)], all starting together.
    Returns [(body, status, answer, port)]; raises on any transport error."""
    results = []
    errors = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads, timeout=HTTP_TIMEOUT)

    def worker(i):
        port = ports[i % len(ports)]
        mine = bodies[i::threads]
        out = []
        try:
            with Client(port) as c:
                barrier.wait()
                for b in mine:
                    st, h, ans = c.request("POST", "/check", b)
                    out.append((b, st, ans, port))
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append("thread %d (port %d): %s: %s" % (i, port, type(e).__name__, e))
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass
        with lock:
            results.extend(out)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    check(not any(t.is_alive() for t in ts), "some client threads did not finish within 60 s")
    check(not errors, "%d client errors, first: %s", len(errors), errors[0] if errors else "")
    eq(len(results), len(bodies), "answers received")
    return results


def together(threads, fn, timeout=120):
    """fn(i) in `threads` threads started together (a barrier); raises with
    the first error any of them met."""
    errors = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads, timeout=HTTP_TIMEOUT)

    def worker(i):
        try:
            barrier.wait()
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append("thread %d: %s: %s" % (i, type(e).__name__, e))

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=timeout * SLOW)
    check(not any(t.is_alive() for t in ts), "threads still running after %ss", timeout)
    check(not errors, "%d errors, first: %s", len(errors), errors[0] if errors else "")


def pipelined(port, reqs, depth=32, timeout=HTTP_TIMEOUT):
    """Send raw requests (bytes each) on one keep-alive connection, `depth`
    ahead of their answers (the daemon's http.max_pipelined is 32 by
    default); the statuses, in order.  Fast enough to load a daemon from
    one Python thread."""
    out = []
    with RawConn(port, timeout=timeout) as c:
        for i in range(0, len(reqs), depth):
            batch = reqs[i:i + depth]
            c.send(b"".join(batch))
            for _ in batch:
                out.append(c.read_response()[0])
    return out


def is_int(v):
    return type(v) is int


def ceil_s(ms):
    """Milliseconds to whole seconds, rounded up."""
    return int(math.ceil(ms / 1000.0))


def media_type(headers):
    return headers.get("content-type", "").split(";")[0].strip().lower()


def expect_json(status, headers, body, want_status, what=""):
    """Status, Content-Type application/json and a JSON object body."""
    pre = (what + ": ") if what else ""
    check(status == want_status, "%sstatus %r, expected %r (body %r)", pre, status, want_status, body)
    check(media_type(headers) == "application/json",
          "%sContent-Type %r, expected application/json", pre, headers.get("content-type"))
    check(isinstance(body, dict), "%sbody is not a JSON object: %r", pre, body)
    return body


def expect_error(status, headers, body, want_status, field=None, what=""):
    """An error answer per docs/API.md: status, JSON {"error": "..."} naming `field`."""
    pre = (what + ": ") if what else ""
    expect_json(status, headers, body, want_status, what)
    err = body.get("error")
    check(isinstance(err, str) and err.strip() != "", "%s\"error\" is not a non-empty string: %r", pre, body)
    if field is not None:
        check(field.lower() in err.lower(), "%serror %r does not name the field %r", pre, err, field)
    return err


# ----------------------------------------------------------------- runner
#
# A file's cases are reported in TAP (the Test Anything Protocol), which
# automake's tap-driver.sh reads: `make check` then counts and names every
# case, not only the file.
#
#     ok 1 - a check under the limit is allowed
#     not ok 2 - the limit is exact
#     # expected 429, got 200            <- the reason, then the daemons' logs
#     1..2
#     # 1 passed, 1 failed
#
# Some cases alone: `python3 test_x.py -k WORDS` (or RL_CASE=WORDS in the
# environment, which also reaches the files `make check` runs) runs only the
# cases whose name contains WORDS, case-insensitively (several -k: any of
# them); `--list` prints the names instead of running them.

USAGE = """usage: %s [-k WORDS]... [--list]
  -k WORDS  run only the cases whose name contains WORDS (case-insensitive;
            several -k: a case matching any runs).  RL_CASE=WORDS: the same.
  --list    print the names of the cases instead of running them (a file
            with its own main still starts what it starts between cases)"""


def _options(argv):
    """(patterns, listing) from the command line and RL_CASE; exits on a bad one."""
    pats = [os.environ["RL_CASE"]] if os.environ.get("RL_CASE") else []
    listing = False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "-k" and args:
            pats.append(args.pop(0))
        elif a.startswith("-k") and len(a) > 2:
            pats.append(a[2:])
        elif a == "--list":
            listing = True
        elif a in ("-h", "--help"):
            print(USAGE % os.path.basename(sys.argv[0]))
            sys.exit(0)
        else:
            sys.stderr.write("%s: unknown argument %r\n%s\n"
                             % (os.path.basename(sys.argv[0]), a, USAGE % os.path.basename(sys.argv[0])))
            sys.exit(2)
    return [p.lower() for p in pats if p], listing


def tap_name(name):
    """A case name as one TAP description: one line, and a '#' that would
    read as a SKIP/TODO directive escaped."""
    name = " ".join(str(name).split())
    return name.replace("#", "\\#") if re.search(r"#\s*(skip|todo)", name, re.I) else name


class Tests:
    """One file's cases, reported in TAP (see above); `finish()` ends with the
    plan and `# N passed, M failed`, and says the exit status: 0 when every
    case that ran passed and at least one ran.

    A watchdog ends the whole file (as a failure) after `timeout` seconds.
    """

    def __init__(self, timeout=120):
        self.passed = 0
        self.failed = 0
        self.number = 0          # the last TAP test number given
        self.done = set()
        self.out_lock = threading.RLock()
        self.patterns, self.listing = _options(sys.argv[1:])
        timeout *= WATCHDOG_SLOW
        self.timeout = timeout
        w = threading.Timer(timeout, self._expired)
        w.daemon = True
        w.start()

    def _emit(self, line):
        with self.out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _expired(self):
        # the lock is kept to the end: no line of the main thread after the plan
        with self.out_lock:
            self.fail("global timeout", "the file did not finish within %ss" % self.timeout)
            self._plan()
            _cleanup()
            os._exit(1)

    def _dump_logs(self):
        with _lock:
            ds = list(_daemons)
        for d in ds:
            self._emit("#   daemon %s (pid %s, %s) log tail:" % (
                " ".join(d.argv[1:]), d.proc.pid if d.proc else "-",
                "running" if d.alive() else "exit %s" % (d.proc.poll() if d.proc else "-")))
            for line in _squeeze(_tail(d.logfile, 400))[-20:]:
                self._emit("#     " + line)

    def wanted(self, name):
        """Whether the case `name` is to run (-k / RL_CASE)."""
        low = str(name).lower()
        return not self.patterns or any(p in low for p in self.patterns)

    def ok(self, name):
        with self.out_lock:
            self.passed += 1
            self.number += 1
            self.done.add(name)
            self._emit("ok %d - %s" % (self.number, tap_name(name)))

    def fail(self, name, reason):
        with self.out_lock:
            self.failed += 1
            self.number += 1
            self.done.add(name)
            self._emit("not ok %d - %s" % (self.number, tap_name(name)))
            for line in str(reason).splitlines() or [""]:
                self._emit("#   " + line)
            self._dump_logs()

    def run(self, name, fn, *args, **kw):
        """Run one case; any exception is its failure.  Returns fn's result or
        None (also when the case is not selected)."""
        if not self.wanted(name):
            return None
        if self.listing:
            self._emit(name)
            return None
        try:
            r = fn(*args, **kw)
        except Fail as e:
            self.fail(name, e)
            return None
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = ""
            for fr in reversed(tb):
                if os.path.basename(fr.filename).startswith("test_"):
                    where = " (%s:%d)" % (os.path.basename(fr.filename), fr.lineno)
                    break
            self.fail(name, "%s: %s%s" % (type(e).__name__, e, where))
            return None
        self.ok(name)
        return r

    def run_cases(self, cases, *args):
        """cases: [(name, fn)]; each fn(*args)."""
        for name, fn in cases:
            self.run(name, fn, *args)

    def fail_rest(self, cases, reason):
        """Mark every selected case of `cases` not run yet as failed (a fixture broke)."""
        first = True
        for name, _ in cases:
            if name not in self.done and self.wanted(name) and not self.listing:
                self.fail(name, reason if first else str(reason).split("\n")[0][:160] + " (see above)")
                first = False

    def _plan(self):
        if self.number == 0:
            why = ("no case matches %s" % " or ".join(repr(p) for p in self.patterns)
                   if self.patterns else "no case ran")
            self._emit("1..0 # SKIP %s" % why)
        else:
            self._emit("1..%d" % self.number)
        self._emit("# %d passed, %d failed" % (self.passed, self.failed))

    def finish(self):
        if self.listing:
            return 0
        with _lock:
            reports = list(_valgrind_reports)
        for argv, code, report in reports:
            # once per daemon valgrind complained about, even when the case
            # that stopped it already failed on it
            self.fail("%s: exit %s for daemon %s" % ("valgrind" if VALGRIND else "sanitizer",
                                                     code, " ".join(argv[1:])),
                      "\n".join(report.splitlines()[:200]))
        with self.out_lock:
            self._plan()
        return 0 if self.failed == 0 and self.passed > 0 else 1


def suite(cases, fixture, timeout=120):
    """Run `cases` ([(name, fn)]) with the objects `fixture()` (a context
    manager) yields; exit.

    When the fixture itself fails, every selected case not run yet is a
    failure; when -k selects none, the fixture is not started.
    """
    t = Tests(timeout=timeout)
    if t.listing or not any(t.wanted(name) for name, _ in cases):
        t.run_cases(cases)
        sys.exit(t.finish())
    try:
        with fixture() as fx:
            t.run_cases(cases, *(fx if isinstance(fx, tuple) else (fx,)))
    except Exception as e:
        t.fail_rest(cases, "fixture failed: %s: %s" % (type(e).__name__, e))
    sys.exit(t.finish())
