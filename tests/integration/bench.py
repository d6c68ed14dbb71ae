"""What scripts/bench measures with (scripts/bench is the driver: its options,
which modes run and in which order).

It sits beside the test harness and shares its helpers: free loopback ports,
waits, the redis-server of the tests (RedisServer, also over TLS), its RESP
client, the daemon (Daemon), the temporary directory and the cleanup of
every process at exit.  Python 3 stdlib only; wrk, redis-benchmark, nginx,
valgrind, perf/strace, gnuplot are run as programs.

Every figure is read from the processes themselves: CPU time from
/proc/PID/stat (all threads, and a server's children), the host's from
/proc/stat, Redis's own time from INFO commandstats, the daemon's counters
from its /metrics, RSS from /proc/PID/status.
"""

import http.client
import json
import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import harness as H

PROG = "bench"
HZ = os.sysconf("SC_CLK_TCK")
START_WAIT = 15            # s a server has to answer after its start
CONNS, THREADS, NKEYS = 50, 2, 100000


class BenchError(Exception):
    """Something failed to run: the benchmark stops (exit status 1)."""


def die(msg):
    raise BenchError(msg)


def out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Warnings:
    """WARN lines: unexpected errors under load, never a verdict on a figure."""

    def __init__(self):
        self.n = 0

    def __call__(self, msg):
        out("WARN: " + msg)
        self.n += 1


# ---------------------------------------------------------------- processes

def running(pid):
    """The process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[-1][:1] not in ("Z", "X", "")


def cpu_us(pid):
    """CPU time of a process (all its threads) in microseconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000000 // HZ


def children(pid):
    """The PIDs of a process's children (nginx's workers)."""
    out_ = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out_ += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out_


def tree_cpu_us(pid):
    """cpu_us of a process and of its children."""
    total = 0
    for p in [pid] + children(pid):
        try:
            total += cpu_us(p)
        except OSError:
            pass
    return total


def tree_pids(pid):
    return [pid] + children(pid)


def worker_pid(pid):
    """The process that serves: its first child (nginx's worker), else itself."""
    kids = children(pid)
    return kids[0] if kids else pid


def status_kb(pid, field):
    """VmRSS or VmHWM in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def host_ticks():
    """The host's CPU ticks since boot: (busy, idle, steal, total); idle
    includes iowait."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    t = sum(v)
    return (t - v[3] - v[4] - v[7], v[3] + v[4], v[7], t)


def host_pct(a, b, ours_us):
    """Idle, steal and other (busy, but not in the processes measured: ours_us
    microseconds) percentages of the host between two host_ticks()."""
    t = b[3] - a[3]
    if t <= 0:
        t = 1
    other = 100.0 * ((b[0] - a[0]) - ours_us * HZ / 1e6) / t
    return {"idle": round(100.0 * (b[1] - a[1]) / t), "steal": round(100.0 * (b[2] - a[2]) / t),
            "other": round(max(other, 0))}


def children_us():
    """CPU time of this process's finished children (wrk, redis-benchmark)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((r.ru_utime + r.ru_stime) * 1e6)


def median(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return float("nan")
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def ratio(a, b):
    return "%.2f" % (a / b) if b and b > 0 else "n/a"


# ------------------------------------------------------------------ servers

def http_ok(port, path="/"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=1) as r:
            return 200 <= r.status < 300
    except (OSError, ValueError):
        return False


def post_ok(port):
    """A POST of a check is answered 2xx."""
    try:
        st, _, _ = H.post(port, {"key": "bench-ready"}, timeout=1)
        return 200 <= st < 300
    except (OSError, http.client.HTTPException):
        return False


def owns_port(pid, port):
    """pid listens on port, not some other program that took the port between
    free_port and the start (unknown without ss: assume so)."""
    if shutil.which("ss") is None:
        return True
    r = subprocess.run(["ss", "-ltnpH", "sport = :%d" % port], capture_output=True, text=True)
    return "pid=%d," % pid in r.stdout


class Server:
    """A server bench started (bare_http, nginx, the Node.js peer; a daemon
    or a server under callgrind): pid, port, its log."""

    def __init__(self, name, proc, port, log):
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.pid = proc.pid


def start(tmp, name, argv, ready, wait=START_WAIT, wrap=None):
    """A server on a free port: "@PORT@" in argv is replaced; ready(port) says
    when it answers.  Tried on five ports (one may be taken meanwhile).
    wrap(argv, port): the command line to run (nginx writes its config)."""
    log = os.path.join(tmp, name + ".log")
    for attempt in range(1, 6):
        port = H.free_port()
        cmd = [a.replace("@PORT@", str(port)) for a in argv]
        if wrap:
            cmd = wrap(cmd, port)
        with open(log, "ab") as f:
            proc = H._track(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f,
                                             stderr=subprocess.STDOUT))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc.poll() is None and not ready(port):
            time.sleep(0.05)
        if proc.poll() is None and ready(port) and owns_port(proc.pid, port):
            return Server(name, proc, port, log)
        H.stop_process(proc, timeout=0)
        with open(log, "a") as f:
            f.write("-- attempt %d on port %d failed\n" % (attempt, port))
    sys.stderr.write("".join("%s\n" % ln for ln in H._tail(log, 20)))
    die("%s did not start (log: %s)" % (name, log))


def alive(pid, name, log):
    if not running(pid):
        die("%s (pid %d) died during the benchmark; log: %s" % (name, pid, log))


def stop_server(server, timeout=120):
    """SIGTERM, and the exit awaited (a process under valgrind writes its
    profile first)."""
    server.proc.terminate()
    try:
        server.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        die("%s (pid %d) did not stop on SIGTERM within %d s" % (server.name, server.pid, timeout))


# ------------------------------------------------------ the daemon's figures

def counters(text):
    """The daemon's counters of one /metrics scrape, summed over all labels
    but one: m_RESULT (ratelimitd_checks_total by result), rej_REASON
    (ratelimitd_requests_rejected_total by reason), be_STATUS
    (ratelimitd_backend_requests_total by status), c_NAME for counters
    without labels (ratelimitd_NAME_total).  A counter the daemon does not
    export is simply absent."""
    c = {}

    def add(k, v):
        c[k] = c.get(k, 0) + v
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or line.startswith("#"):
            continue
        name, value = parts
        try:
            v = float(value)
        except ValueError:
            continue
        for metric, prefix, label in (("ratelimitd_checks_total{", "m_", "result"),
                                      ("ratelimitd_requests_rejected_total{", "rej_", "reason"),
                                      ("ratelimitd_backend_requests_total{", "be_", "status")):
            if name.startswith(metric):
                m = re.search(r'%s="([^"]*)"' % label, name)
                add(prefix + (m.group(1) if m else ""), v)
        if re.fullmatch(r"ratelimitd_[a-z_]+_total", name):
            add("c_" + name[len("ratelimitd_"):], v)
    return c


def counter_deltas(before, after):
    a = counters(before)
    return {k: v - a.get(k, 0) for k, v in counters(after).items()}


def scrape(server):
    try:
        st, _, text = H.request(server.port, "GET", "/metrics", timeout=5)
        if st == 200:
            return str(text)
    except (OSError, http.client.HTTPException):
        pass
    alive(server.pid, "ratelimitd", server.log)
    die("GET /metrics of ratelimitd failed")


def commandstat(redis, field, command=None):
    """A field of INFO commandstats since the last CONFIG RESETSTAT (0 when
    the command did not run); without command, of the daemon's script calls:
    FCALL and EVALSHA together.  usec_per_call is computed."""
    v = {}
    names = ("cmdstat_" + command,) if command else ("cmdstat_evalsha", "cmdstat_fcall")
    for line in redis.cmd("INFO", "commandstats").splitlines():
        key, _, rest = line.strip().partition(":")
        if key in names:
            for kv in rest.split(","):
                k, _, x = kv.partition("=")
                try:
                    v[k] = v.get(k, 0) + float(x)
                except ValueError:
                    pass
    if field == "usec_per_call":
        return v["usec"] / v["calls"] if v.get("calls", 0) > 0 else 0
    n = v.get(field, 0)
    return int(n) if n == int(n) else n


# --------------------------------------------------------------- wrk's load

# Each wrk thread pre-formats its share of the distinct keys ("keys", and
# "hybrid" or "policy:NAME" of those policies) or the one hot request ("hot")
# and cycles through them; done() prints machine-readable lines.  The same
# script drives bare_http and ratelimitd.
CHECK_LUA = r'''local nthreads = 0
function setup(thread)
    thread:set("tid", nthreads)
    nthreads = nthreads + 1
end

local reqs, n, i = {}, 0, 0
function init(args)
    local mode, nkeys, threads = args[1], tonumber(args[2]), tonumber(args[3])
    local headers = { ["Content-Type"] = "application/json" }
    if mode == "hot" then
        reqs[1] = wrk.format("POST", "/check", headers, '{"key":"hot","policy":"hot"}')
    elseif mode == "hybrid" or mode:sub(1, 7) == "policy:" then
        local per = math.ceil(nkeys / threads)
        local fmt = mode == "hybrid" and '{"key":"h%d","policy":"hybrid"}' or
            '{"key":"c%d","policy":"' .. mode:sub(8) .. '"}'
        for k = 0, per - 1 do
            reqs[#reqs + 1] = wrk.format("POST", "/check", headers,
                string.format(fmt, tid * per + k))
        end
    else
        local per = math.ceil(nkeys / threads)
        for k = 0, per - 1 do
            reqs[#reqs + 1] = wrk.format("POST", "/check", headers,
                string.format('{"key":"u%d"}', tid * per + k))
        end
    end
    n = #reqs
end

function request()
    i = i % n + 1
    return reqs[i]
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests %d\nBENCH duration_us %d\nBENCH p50_us %d\nBENCH p99_us %d\n" ..
        "BENCH non2xx %d\nBENCH sockerr %d\n",
        summary.requests, summary.duration, latency:percentile(50),
        latency:percentile(99), e.status, e.connect + e.read + e.write + e.timeout))
end
'''

def wrk_figures(text):
    """The BENCH lines of wrk's output (CHECK_LUA's done()) as {name: int}."""
    return {fs[1]: int(fs[2]) for fs in (ln.split() for ln in text.splitlines())
            if len(fs) == 3 and fs[0] == "BENCH"}


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def run_logged(argv, log, what):
    """A program run to its end, its output appended to log and returned."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        die("%s failed; log: %s" % (what, log))
    return r.stdout


# ------------------------------------------------------------ the nginx target

def nginx_conf(tmp, master):
    """A config template (@LISTEN@: the port) of one worker answering every
    request `return 200` with a JSON body as long as ratelimitd's allowed
    answer (245 bytes), keep-alive as long as wrk likes, no access log;
    master off: one process in the foreground (for callgrind).  Everything
    it writes stays under TMP/nginx."""
    d = os.path.join(tmp, "nginx")
    return """worker_processes 1;
master_process %s;
daemon off;
pid %s/nginx-@LISTEN@.pid;
error_log %s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %s/body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fastcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    keepalive_timeout 60s;
    keepalive_requests 1000000000;
    server {
        listen 127.0.0.1:@LISTEN@;
        default_type application/json;
        location / {
            return 200 '{"allowed":true,"policy":"bench","limit":1000000000,"remaining":999999999,"reset_ms":60000,"retry_after_ms":0,"limits":[{"algorithm":"fixed_window","limit":1000000000,"window_ms":60000,"remaining":999999999,"reset_ms":60000,"retry_after_ms":0}]}';
        }
    }
}
""" % ((master,) + (d,) * 7)


def nginx_wrapper(tmp, master):
    """wrap() for start(): nginx's config for the port, then the command line
    (argv: what nginx runs under, e.g. valgrind)."""
    d = os.path.join(tmp, "nginx")
    os.makedirs(d, exist_ok=True)
    tmpl = nginx_conf(tmp, master)

    def wrap(argv, port):
        conf = write(os.path.join(d, "master-%s.conf-%d" % (master, port)),
                     tmpl.replace("@LISTEN@", str(port)))
        return argv + ["nginx", "-e", os.path.join(d, "error.log"), "-p", d + "/", "-c", conf]
    return wrap


# ------------------------------------------------------------ the callgrind driver

def drive(port, mode, n, conns, prefix):
    """The deterministic load of --callgrind: `conns` keep-alive connections,
    one request in flight on each, n requests in all; keys PREFIX0..(n-1)
    (new to Redis in every run) or the hot key; mode "charge": the keys'
    requests as POST /charge.  {status_CODE: count,
    "degraded": count}; BenchError on a dropped connection or after 20
    minutes."""
    def request(i):
        body = (b'{"key":"hot","policy":"hot"}' if mode == "hot"
                else ('{"key":"%s%d"}' % (prefix, i)).encode())
        path = b"/charge" if mode == "charge" else b"/check"
        return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (path, len(body), body))

    sel = selectors.DefaultSelector()
    sent = done = degraded = 0
    status, bufs, socks = {}, {}, []
    deadline = time.monotonic() + 1200
    try:
        for _ in range(min(conns, n)):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            socks.append(s)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            bufs[s] = bytearray()
            sel.register(s, selectors.EVENT_READ)
            s.sendall(request(sent))
            sent += 1
        while done < n:
            if time.monotonic() > deadline:
                die("drive: timed out after %d of %d answers" % (done, n))
            for key, _ in sel.select(timeout=1):
                s = key.fileobj
                data = s.recv(65536)
                if not data:
                    die("drive: the server closed a connection after %d answers" % done)
                b = bufs[s]
                b += data
                while True:
                    end = b.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head = bytes(b[:end]).split(b"\r\n")
                    clen = 0
                    for h in head[1:]:
                        name, _, value = h.partition(b":")
                        if name.strip().lower() == b"content-length":
                            clen = int(value)
                    if len(b) < end + 4 + clen:
                        break
                    code = head[0].split()[1].decode()
                    status[code] = status.get(code, 0) + 1
                    if b'"degraded":true' in b[end + 4:end + 4 + clen]:
                        degraded += 1
                    del b[:end + 4 + clen]
                    done += 1
                    if sent < n:
                        s.sendall(request(sent))
                        sent += 1
    finally:
        for s in socks:
            s.close()
        sel.close()
    res = {"status_" + c: k for c, k in sorted(status.items())}
    res["degraded"] = degraded
    return res


def callgrind_top(big, small, d, top):
    """Self instructions per request of each function: the profile of N
    requests minus that of M, over d = N - M; the top ones (callgrind_annotate)."""
    def profile(path):
        text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                              capture_output=True, text=True, check=True).stdout
        fns = {}
        for line in text.split("Auto-annotated source")[0].splitlines():
            m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S.*?)(?: \[(.*)\])?$", line)
            if not m or "PROGRAM TOTALS" in line:
                continue
            where = m.group(2)
            name = where.rsplit(":", 1)[-1] if ":" in where else where
            if name.startswith("0x") or name == "???":
                name = "(%s)" % os.path.basename(m.group(3) or "?")
            else:
                name = "%s (%s)" % (name, os.path.basename(where.split(":")[0]))
            fns[name] = fns.get(name, 0) + int(m.group(1).replace(",", ""))
        return fns
    b, s = profile(big), profile(small)
    rows = sorted(((v - s.get(k, 0)) / d, k) for k, v in b.items())
    total = sum(v for v, _ in rows)
    return ["    %6.0f %4.1f%%  %s" % (v, 100 * v / total, k) for v, k in reversed(rows[-top:])]


# ------------------------------------------------------------------- flood

def flood(port, pid, seconds, conns, cap_kb, metrics_port):
    """--flood's client: `conns` connections pipeline POST /check (distinct
    keys) as fast as the server takes them for `seconds` and never read an
    answer; meanwhile the server's VmRSS/VmHWM are sampled every 50 ms and a
    normal check on a fresh connection is timed every 0.5 s.  Then the flood
    connections are closed and, for ratelimitd (metrics_port not None), its
    ratelimitd_connections_open awaited back at its level before, when RSS
    is sampled again.  Flooding stops early when VmRSS passes cap_kb (0: no
    cap).  A dict of figures."""
    def open_conns():
        v = H.metric(metrics_port, "ratelimitd_connections_open", default=-1)
        return None if v == -1 else v

    def request(key):
        body = ('{"key":"%s"}' % key).encode()
        return (b"POST /check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    reqs = [request("flood-%d" % i) for i in range(2000)]
    stream = b"".join(reqs)
    loop = stream + stream          # a send may start anywhere in stream
    stop = threading.Event()
    sent = [0] * conns
    floods, probes = [], []         # probes: (ok, seconds)

    def flooder(i):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(0.05)
        off = 0
        try:
            while not stop.is_set():
                try:
                    k = s.send(loop[off:off + 65536])
                except socket.timeout:
                    continue        # the server stopped reading: back-pressure
                sent[i] += k
                off = (off + k) % len(stream)
            stop.wait()
        finally:
            floods.append(s)        # closed by the main thread, after sampling

    def probe(n):
        t0 = time.monotonic()
        ok = False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(request("probe-%d-%d" % (port, n)))
                buf = b""
                while b"\r\n\r\n" not in buf:
                    d = s.recv(4096)
                    if not d:
                        break
                    buf += d
                ok = buf.startswith(b"HTTP/1.1 200 ") and b'"degraded":true' not in buf
        except OSError:
            pass
        probes.append((ok, time.monotonic() - t0))

    def prober():
        n = 0
        while not stop.wait(0.5):
            probe(n)
            n += 1

    base_conns = open_conns() if metrics_port else None
    rss0, hwm0 = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
    threads = [threading.Thread(target=flooder, args=(i,)) for i in range(conns)]
    threads.append(threading.Thread(target=prober))
    t0 = time.monotonic()
    for t in threads:
        t.start()
    rss_max, capped = rss0, 0
    while time.monotonic() - t0 < seconds:
        rss = status_kb(pid, "VmRSS")
        rss_max = max(rss_max, rss)
        if cap_kb and rss > cap_kb:
            capped = 1
            break
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    rss_end, hwm_end = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
    stop.set()
    for t in threads:
        t.join()
    for s in floods:
        s.close()
    settled = -1
    if base_conns is not None:
        settled = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            c = open_conns()
            if c is not None and c <= base_conns:
                settled = 1
                break
            time.sleep(0.05)
    probe(9999)                     # and a check once the flood is gone
    per_req = len(stream) / len(reqs)
    return {"seconds": "%.2f" % elapsed, "capped": capped, "sent_bytes": sum(sent),
            "sent_requests": int(sum(sent) / per_req), "rss0": rss0, "hwm0": hwm0,
            "rss_max": rss_max, "rss_end": rss_end, "hwm_end": hwm_end,
            "rss_after": status_kb(pid, "VmRSS"), "hwm_after": status_kb(pid, "VmHWM"),
            "growth_kb_s": "%.0f" % ((rss_max - rss0) / elapsed), "settled": settled,
            "probes": len(probes) - 1, "probes_ok": sum(1 for ok, _ in probes[:-1] if ok),
            "probe_max_ms": "%.1f" % (1000 * max([t for _, t in probes[:-1]] or [0])),
            "after_ok": 1 if probes[-1][0] else 0}


# ------------------------------------------------------------------- syscalls

SYSCALL_NAMES = ["epoll_wait", "epoll_ctl", "readv", "writev", "read", "write", "ioctl",
                 "accept4", "close", "shutdown"]


def tracer_start(kind, pids, outfile, log):
    """perf (syscall tracepoints) or strace -c -f attached to pids (all
    their threads)."""
    if kind == "perf":
        ev = ",".join(["raw_syscalls:sys_enter"] + ["syscalls:sys_enter_" + n for n in SYSCALL_NAMES])
        argv = ["perf", "stat", "-x,", "-o", outfile, "-e", ev, "-p", ",".join(map(str, pids))]
    else:
        argv = ["strace", "-c", "-f", "-qq", "-o", outfile]
        for p in pids:
            argv += ["-p", str(p)]
    with open(log, "ab") as f:
        return H._track(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f))


def tracer_stop(proc):
    proc.send_signal(2)             # SIGINT: both write their counts
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def syscall_counts(kind, path, what, log):
    """{NAME: calls, "total": calls} of a tracer's output."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        die("%s wrote nothing for %s; log: %s" % (kind, what, log))
    c = {}
    with open(path) as f:
        for line in f:
            if kind == "perf":
                # count,,syscalls:sys_enter_NAME,...
                fs = line.strip().split(",")
                if len(fs) > 2 and fs[2] == "raw_syscalls:sys_enter":
                    c["total"] = float(fs[0])
                elif len(fs) > 2 and fs[2].startswith("syscalls:sys_enter_"):
                    c[fs[2][len("syscalls:sys_enter_"):]] = float(fs[0])
            else:
                # % time, seconds, usecs/call, calls, [errors,] syscall
                fs = line.split()
                if fs and re.fullmatch(r"[0-9.]+", fs[0]) and len(fs) >= 5:
                    c["total" if fs[-1] == "total" else fs[-1]] = float(fs[3])
    return c


def syscall_row(kind, label, counts, n):
    """One line of calls per request, and the total per request."""
    cells = []
    for name in ["total"] + SYSCALL_NAMES:
        w = max(len(name), 6)
        cells.append(" %*.2f" % (w, counts.get(name, 0) / n if n else 0))
    out("  %-28s%s  (%d requests)" % ("%s (%s)" % (label, kind), "".join(cells), n))
    return counts.get("total", 0) / n if n else 0


# ------------------------------------------------------------------- plot

def plot_table(table, svg):
    """The first results table in `table` (the header line that starts with
    "target req/s" and the rows after it, as scripts/bench prints them) as
    three bar charts side by side: req/s, p99 latency, and CPU per request
    split into the HTTP server's and Redis's (gnuplot)."""
    if shutil.which("gnuplot") is None:
        die("--plot: gnuplot not found (Debian: apt-get install gnuplot-nox)")
    try:
        with open(table) as f:
            lines = f.read().splitlines()
    except OSError:
        die("--plot-table: cannot read %s" % table)
    rows, found = [], False
    for line in lines:
        fs = line.split()
        if not found:
            found = len(fs) > 1 and fs[0] == "target" and fs[1] == "req/s"
            continue
        if len(fs) < 10 or not re.fullmatch(r"[0-9.]+", fs[1]):
            break
        srv = "0" if fs[6] == "-" else fs[6]
        red = "0" if fs[8] == "-" else fs[8]
        rows.append("%s %s %s %s %s" % (fs[0], fs[1], fs[3], srv, red))
    if not rows:
        die('--plot: no results table (a line starting with "target req/s") in %s' % table)
    dat = write(os.path.join(H.tmpdir(), "plot.dat"), "\n".join(rows) + "\n")
    script = """set terminal svg size 1200,420 dynamic enhanced font "sans,11" background rgb "white"
set output "%s"
set multiplot layout 1,3 title "ratelimitd benchmark: %s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.75
set grid ytics
set xtics rotate by -40 nomirror
set yrange [0:*]
set key top right
set title "requests per second"
plot "%s" using 2:xticlabels(1) notitle linecolor rgb "#3b75af"
set title "p99 latency (ms)"
plot "%s" using 3:xticlabels(1) notitle linecolor rgb "#ef8636"
set title "CPU per request (µs)"
set style histogram rowstacked
plot "%s" using 4:xticlabels(1) title "HTTP server" linecolor rgb "#519e3e", \\
     "" using 5 title "Redis" linecolor rgb "#c53a32"
unset multiplot
""" % (svg, os.path.basename(table), dat, dat, dat)
    if subprocess.run(["gnuplot"], input=script, text=True).returncode != 0:
        die("--plot: gnuplot failed")
    out("%s: chart written to %s" % (PROG, svg))


class Tee:
    """stdout also into a file (the report --plot reads its table back from)."""

    def __init__(self, stream, path):
        self.stream, self.f = stream, open(path, "w")

    def write(self, s):
        self.stream.write(s)
        self.f.write(s)

    def flush(self):
        self.stream.flush()
        self.f.flush()


def dump(path, res):
    """A run's figures as "name value" lines (kept with --keep)."""
    write(path, "".join("%s %s\n" % kv for kv in res.items()))


def config_json(extra_redis=None, **top):
    """The daemon's config of the main runs: policy "bench" (fixed_window,
    limit 1e9 per 60 s: every check allowed), "hot" (1 per hour, chosen by
    name: denied after the first), "hybrid" (mode hybrid, every check
    allowed)."""
    cfg = {}
    if extra_redis:
        cfg["redis"] = extra_redis
    cfg.update(top)
    cfg["identity"] = ["body"]
    cfg["policies"] = [
        {"name": "bench", "match": {"path_prefix": "/"},
         "limits": [{"algorithm": "fixed_window", "limit": 1000000000, "window": "60s"}]},
        {"name": "hot", "match": {"path": "/never-matched-by-path"},
         "limits": [{"algorithm": "fixed_window", "limit": 1, "window": "1h"}]},
        {"name": "hybrid", "match": {"path": "/never-matched-by-path"}, "mode": "hybrid",
         "limits": [{"algorithm": "fixed_window", "limit": 1000000000, "window": "60s"}]}]
    return json.dumps(cfg, indent=2)


# ------------------------------------------------------------------- a run

class Target:
    """What wrk drives: a server, the requests it gets (keys, hot, hybrid),
    the Redis it uses; label names it in logs and warnings."""

    def __init__(self, name, server, mode, redis, label, nkeys=NKEYS):
        self.name, self.server, self.mode, self.redis = name, server, mode, redis
        self.label, self.nkeys = label, nkeys


class Bench:
    """One benchmark: its settings (quick or full), the build it measures,
    the servers it started, the figures of every run (res[(target, run)]),
    the warnings."""

    def __init__(self, build, quick=False, workers=1):
        self.quick, self.workers = quick, workers
        if quick:
            self.reps, self.duration, self.warmup, self.rb_n = 1, 3, 1, 20000
        else:
            self.reps, self.duration, self.warmup, self.rb_n = 3, 8, 2, 60000
        build = os.path.abspath(build)
        self.ratelimitd = os.path.join(build, "src", "ratelimitd")
        self.bare = os.path.join(build, "tests", "bare_http")
        self.lua_c = os.path.join(build, "src", "lua_scripts.c")
        self.tmp = self.res_dir = None      # check_build() makes them
        self.warn = Warnings()
        self.targets = {}
        self.res = {}
        self.redis = None

    def check_build(self):
        if not os.access(self.ratelimitd, os.X_OK):
            die("%s: not an executable (build first, or pass BUILD_DIR)" % self.ratelimitd)
        if not os.access(self.bare, os.X_OK):
            die("%s: not an executable (run `make tests/bare_http` in %s)"
                % (self.bare, os.path.dirname(os.path.dirname(self.bare))))
        try:
            with open(self.lua_c) as f:
                m = re.search(r'rl_lua_check_sha\[\] *= *"([0-9a-f]{40})"', f.read())
        except OSError:
            die("%s: not found (the generated check script of the build)" % self.lua_c)
        if not m:
            die("no rl_lua_check_sha in %s" % self.lua_c)
        self.sha = m.group(1)
        H.RATELIMITD = self.ratelimitd
        self.tmp = H.tmpdir(prefix="rl-bench.")
        self.res_dir = os.path.join(self.tmp, "res")
        os.makedirs(self.res_dir, exist_ok=True)

    def log(self, name):
        return os.path.join(self.tmp, name + ".log")

    # ------------------------------------------------------------- servers

    def start_redis(self, name="redis", tls=None):
        try:
            return H.RedisServer("bench-" + name, tls=tls)
        except H.HarnessError as e:
            die("%s did not start: %s" % (name, e))

    def start_daemon(self, name, config, redis, wrapper=(), start_timeout=None):
        """ratelimitd (-w workers, -L warn) with config text against redis."""
        try:
            d = H.Daemon(config, args=["-r", redis.url, "-L", "warn"], workers=self.workers,
                         ready=True, wrapper=wrapper, start_timeout=start_timeout)
        except H.HarnessError as e:
            die("%s did not start: %s" % (name, e))
        s = Server(name, d.proc, d.port, d.logfile)
        s.daemon = d
        return s

    def target(self, name, server, mode, label, redis=None, nkeys=NKEYS):
        self.targets[name] = Target(name, server, mode, redis or self.redis, label, nkeys)

    # --------------------------------------------------------------- wrk

    def run_wrk(self, name, dur):
        """One wrk run on a target: its figures (requests, latency, CPU per
        request of the server, its Redis and the load generator, what Redis
        ran, the host's idle/steal/other, the daemon's counters)."""
        t = self.targets[name]
        pid, redis = t.server.pid, t.redis
        lua = os.path.join(self.tmp, "check.lua")
        if not os.path.exists(lua):
            write(lua, CHECK_LUA)
        before = scrape(t.server) if t.label == "ratelimitd" else None
        redis.cmd("CONFIG", "RESETSTAT")
        w0 = children_us()
        c0, r0, h0 = tree_cpu_us(pid), cpu_us(redis.proc.pid), host_ticks()
        log = self.log("wrk." + name)
        with open(log, "a") as f:
            f.write("== %s %s %ds\n" % (name, time.strftime("%T"), dur))
        text = run_logged(["wrk", "-t", str(THREADS), "-c", str(CONNS), "-d", "%ds" % dur, "--latency",
                           "-s", lua, "http://127.0.0.1:%d/check" % t.server.port, "--", t.mode,
                           str(t.nkeys), str(THREADS)], log, "wrk on %s" % name)
        w1 = children_us()
        h1, c1, r1 = host_ticks(), tree_cpu_us(pid), cpu_us(redis.proc.pid)
        alive(pid, t.label, t.server.log)
        alive(redis.proc.pid, "redis", redis.logfile)
        res = wrk_figures(text)
        if not res:
            die("wrk printed no results on %s; log: %s" % (name, log))
        reqs = res["requests"]
        if reqs <= 0:
            die("wrk completed no request on %s; log: %s" % (name, log))
        calls = commandstat(redis, "calls")
        res.update({
            "rps": round(reqs * 1e6 / res["duration_us"]),
            "srv_us": round((c1 - c0) / reqs, 2), "redis_us": round((r1 - r0) / reqs, 2),
            "client_us": round((w1 - w0) / reqs, 2),
            "rss": status_kb(worker_pid(pid), "VmRSS"), "hwm": status_kb(worker_pid(pid), "VmHWM"),
            "evalsha_us": commandstat(redis, "usec_per_call"), "evalsha_calls": calls,
            "evalsha_failed": commandstat(redis, "failed_calls"),
            "eval_calls": commandstat(redis, "calls", "eval"),
            "to_redis": round(calls / reqs, 2)})
        res.update(host_pct(h0, h1, c1 - c0 + r1 - r0 + w1 - w0))
        if before is not None:
            res.update(counter_deltas(before, scrape(t.server)))
        return res

    def run_rb(self, name):
        """redis-benchmark of the daemon's check script: EVALSHA with the
        arguments of send_check in src/backend_redis.c, on 100k random keys
        (redis-keys) or the hot key (redis-hot), over one connection with 50
        commands in flight: the daemon's own shape."""
        if name == "redis-keys":
            key, spec = "{rl:bench:k:u__rand_int__}:fw:60000", "fw 1000000000 60000 1000000000"
        else:
            key, spec = "{rl:hot:k:hot}:fw:3600000", "fw 1 3600000 1"
        redis = self.redis
        redis.cmd("CONFIG", "RESETSTAT")
        w0, r0, h0 = children_us(), cpu_us(redis.proc.pid), host_ticks()
        log = self.log("redis-benchmark")
        # EVALSHA sha 1 key now ('': the script reads TIME) checks=1 spec cost=1
        r = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(redis.port), "-c", "1",
                            "-P", str(CONNS), "-n", str(self.rb_n), "-r", str(NKEYS), "--csv",
                            "EVALSHA", self.sha, "1", key, "", "1", spec, "1"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        w1 = children_us()
        h1, r1 = host_ticks(), cpu_us(redis.proc.pid)
        with open(log, "a") as f:
            f.write(r.stderr + "== %s %s\n%s" % (name, time.strftime("%T"), r.stdout))
        if r.returncode != 0:
            die("redis-benchmark failed on %s; log: %s" % (name, log))
        alive(redis.proc.pid, "redis", redis.logfile)
        calls, failed = commandstat(redis, "calls"), commandstat(redis, "failed_calls")
        if calls <= 0:
            die("redis-benchmark ran no EVALSHA on %s" % name)
        if failed:
            die("%s of %s EVALSHA failed in redis-benchmark (%s): wrong argument shape?"
                % (failed, calls, name))
        f = r.stdout.strip().splitlines()[-1].replace('"', "").split(",")
        res = {"rps": round(float(f[-7])), "p50_us": round(float(f[-4]) * 1000),
               "p99_us": round(float(f[-2]) * 1000), "requests": self.rb_n,
               "redis_us": round((r1 - r0) / self.rb_n, 2),
               "evalsha_us": commandstat(redis, "usec_per_call"), "evalsha_calls": calls,
               "evalsha_failed": failed}
        res.update(host_pct(h0, h1, r1 - r0 + w1 - w0))
        return res

    def record(self, name, rep, res):
        self.res[(name, rep)] = res
        dump(os.path.join(self.res_dir, "%s.%s" % (name, rep)), res)

    def get(self, name, rep, key, default=None):
        return self.res.get((name, rep), {}).get(key, default)

    def med(self, name, key):
        """The median of a figure over the runs of a target."""
        return median(self.get(name, r, key) for r in range(1, self.reps + 1))

    def fmt(self, v):
        """A figure as the report shows it: integers without a point."""
        if isinstance(v, float) and v == int(v):
            return str(int(v))
        return str(v)

    # ------------------------------------------------------ the main targets

    def start_targets(self, nginx, node, peer_dir):
        """ratelimitd (coalescing, the default) and a twin with
        redis.coalesce 1, tests/bare_http, perhaps nginx and the Node.js
        peer; the wrk targets on them."""
        self.rl = self.start_daemon("ratelimitd", config_json(), self.redis)
        # the same with coalescing off: what one EVALSHA per check costs Redis
        self.rl1 = self.start_daemon("ratelimitd-single", config_json({"coalesce": 1}), self.redis)
        self.bare_srv = start(self.tmp, "bare_http", [self.bare, "-l", "127.0.0.1:@PORT@"], http_ok)
        self.nginx = None
        if nginx:
            self.nginx = start(self.tmp, "nginx", [], http_ok, wrap=nginx_wrapper(self.tmp, "on"))
            for _ in range(100):
                if worker_pid(self.nginx.pid) != self.nginx.pid:
                    break
                time.sleep(0.05)
            else:
                die("nginx (pid %d) started no worker; log: %s/nginx/error.log" % (self.nginx.pid, self.tmp))
        self.node = None
        if node:
            versions = subprocess.run(
                ["node", "-p", '["ioredis", "rate-limiter-flexible"].map((m) => m + " " + '
                 'require(m + "/package.json").version).join(", ")'],
                cwd=peer_dir, capture_output=True, text=True).stdout.strip()
            nv = subprocess.run(["node", "-v"], capture_output=True, text=True).stdout.strip()
            out("%s: node peer: node %s, %s" % (PROG, nv, versions))
            self.node = start(self.tmp, "node", ["node", os.path.join(peer_dir, "server.js"), "--port",
                                                 "@PORT@", "--redis", self.redis.url], post_ok)
        # the daemon loads its script when it connects: the SHA must be there
        if self.redis.cmd("SCRIPT", "EXISTS", self.sha) != [1]:
            die("Redis does not hold script %s from %s: is %s older than it?"
                % (self.sha, self.lua_c, self.ratelimitd))
        self.target("bare", self.bare_srv, "keys", "bare_http")
        if self.nginx:
            self.target("nginx", self.nginx, "keys", "nginx")
        self.target("rl-keys", self.rl, "keys", "ratelimitd")
        self.target("rl-single", self.rl1, "keys", "ratelimitd")
        self.target("rl-hot", self.rl, "hot", "ratelimitd")
        self.target("rl-hybrid", self.rl, "hybrid", "ratelimitd", nkeys=1000)
        if self.node:
            self.target("node-keys", self.node, "keys", "node")
        self.rss0 = {"rl": status_kb(self.rl.pid, "VmRSS"), "bare": status_kb(self.bare_srv.pid, "VmRSS")}
        if self.node:
            self.rss0["node"] = status_kb(self.node.pid, "VmRSS")

    def runs(self, wrk_targets, rb_targets):
        """Warm-up, then the runs, interleaved target by target; the daemon's
        (and the peer's) RSS after each."""
        self.wrk_targets, self.rb_targets = wrk_targets, rb_targets
        out("%s: warming up (%ds per target)" % (PROG, self.warmup))
        for t in wrk_targets:
            self.record(t, "warmup", self.run_wrk(t, self.warmup))
        self.rss1 = {"rl": status_kb(self.rl.pid, "VmRSS")}
        if self.node:
            self.rss1["node"] = status_kb(self.node.pid, "VmRSS")
        self.rss_rep = {"rl": [], "node": []}
        for rep in range(1, self.reps + 1):
            out("%s: run %d of %d (%ds per wrk target, %d EVALSHA per redis-benchmark)"
                % (PROG, rep, self.reps, self.duration, self.rb_n))
            for t in wrk_targets:
                self.record(t, rep, self.run_wrk(t, self.duration))
            for t in rb_targets:
                self.record(t, rep, self.run_rb(t))
            self.rss_rep["rl"].append(status_kb(self.rl.pid, "VmRSS"))
            if self.node:
                self.rss_rep["node"].append(status_kb(self.node.pid, "VmRSS"))

    def table(self):
        """The results table (medians over the runs), then the spread."""
        out()
        out("%-11s %8s %7s %7s %7s %7s %10s %10s %12s %10s %8s %8s %5s %6s %6s" % (
            "target", "req/s", "p50 ms", "p99 ms", "non2xx", "sockerr", "srv us/req", "EVALSHA/req",
            "redis us/req", "evalsha us", "RSS kB", "HWM kB", "idle%", "steal%", "other%"))
        m = self.med
        for t in self.wrk_targets + self.rb_targets:
            if t.startswith("redis-"):
                out("%-11s %8.0f %7.2f %7.2f %7s %7s %10s %10s %12.2f %10.2f %8s %8s %5.0f %6.0f %6.0f" % (
                    t, m(t, "rps"), m(t, "p50_us") / 1000, m(t, "p99_us") / 1000, "-", "-", "-", "1.00",
                    m(t, "redis_us"), m(t, "evalsha_us"), "-", "-", m(t, "idle"), m(t, "steal"),
                    m(t, "other")))
            else:
                out("%-11s %8.0f %7.2f %7.2f %7.0f %7.0f %10.2f %10.2f %12.2f %10.2f %8.0f %8.0f %5.0f %6.0f %6.0f" % (
                    t, m(t, "rps"), m(t, "p50_us") / 1000, m(t, "p99_us") / 1000, m(t, "non2xx"),
                    m(t, "sockerr"), m(t, "srv_us"), m(t, "to_redis"), m(t, "redis_us"),
                    m(t, "evalsha_us"), m(t, "rss"), m(t, "hwm"), m(t, "idle"), m(t, "steal"),
                    m(t, "other")))
        if self.reps > 1:
            out()
            out("req/s of each run (spread):")
            for t in self.wrk_targets + self.rb_targets:
                out("  %-11s" % t + "".join(" %8s" % self.fmt(self.get(t, r, "rps", ""))
                                            for r in range(1, self.reps + 1)))

    def ratios(self):
        m = self.med
        rps, p99, srv, red = ({t: m(t, k) for t in self.wrk_targets + self.rb_targets}
                              for k in ("rps", "p99_us", "srv_us", "redis_us"))
        self.srv = srv
        out()
        out("ratios (this run):")
        for t in ("rl-keys", "rl-single", "rl-hot", "rl-hybrid"):
            out("  %s ÷ bare:  req/s %s  p99 %s  CPU/req %s  CPU/req incl. Redis %s" % (
                t, ratio(rps[t], rps["bare"]), ratio(p99[t], p99["bare"]), ratio(srv[t], srv["bare"]),
                ratio(srv[t] + red[t], srv["bare"])))
        if self.nginx:
            # nginx is the leaner baseline: CPU per request is the figure to compare
            for t in ("bare", "rl-keys", "rl-hot", "rl-hybrid"):
                out("  %-9s ÷ nginx:  req/s %s  CPU/req %s  CPU/req incl. Redis %s" % (
                    t, ratio(rps[t], rps["nginx"]), ratio(srv[t], srv["nginx"]),
                    ratio(srv[t] + red[t], srv["nginx"])))
        out("  coalescing, rl-keys ÷ rl-single: Redis CPU per check %s  (%.2f vs %.2f us; %.2f vs %.2f "
            "EVALSHA per check)  req/s %s  daemon CPU/req %s" % (
                ratio(red["rl-keys"], red["rl-single"]), red["rl-keys"], red["rl-single"],
                m("rl-keys", "to_redis"), m("rl-single", "to_redis"),
                ratio(rps["rl-keys"], rps["rl-single"]), ratio(srv["rl-keys"], srv["rl-single"])))
        for t in ("keys", "hot"):
            line = "  %-7s ÷ %-10s (Redis ceiling): req/s %s" % (
                "rl-" + t, "redis-" + t, ratio(rps["rl-" + t], rps["redis-" + t]))
            # coalesced checks share a call; a denial the daemon answers itself
            # (its deny cache) never reaches Redis: either way no ceiling
            f = m("rl-" + t, "to_redis")
            if f < 0.9:
                if t == "keys":
                    line += "  (not a ceiling: %.2f EVALSHA per check, coalesced)" % f
                else:
                    line += ("  (not a ceiling: only %.2f EVALSHA per check, the daemon answered the "
                             "rest itself)" % f)
            out(line)
        if self.node:
            # above 1 ratelimitd is faster (req/s), below 1 it is cheaper (CPU/req)
            for t in ("rl-keys", "rl-hybrid"):
                out("  %-9s ÷ node-keys (Node.js peer): req/s %s  CPU/req %s  CPU/req incl. Redis %s" % (
                    t, ratio(rps[t], rps["node-keys"]), ratio(srv[t], srv["node-keys"]),
                    ratio(srv[t] + red[t], srv["node-keys"] + red["node-keys"])))

    def log_warnings(self, server, what):
        """A WARN line for a daemon that logged warnings or errors, and the first ones."""
        lines = [ln for ln in server.daemon.log().splitlines()
                 if "level=warn" in ln or "level=error" in ln]
        if lines:
            self.warn("%s %d warnings or errors; the first ones:" % (what, len(lines)))
            for ln in lines[:5]:
                out("    " + ln)

    def what_went_wrong(self):
        """WARN lines for what should not happen under load: answers not due,
        counters that moved where none should, socket errors, a busy host."""
        out()
        w, get = self.warn, self.get
        extra = (["node-keys"] if self.node else []) + (["nginx"] if self.nginx else [])
        for r in range(1, self.reps + 1):
            for t in ["rl-keys", "rl-single", "rl-hybrid"] + extra:
                if get(t, r, "non2xx", 0):
                    w("%s run %d: %d non-2xx answers where every check was due 200" % (t, r, get(t, r, "non2xx")))
            for t in ("rl-keys", "rl-single", "rl-hot", "rl-hybrid"):
                res = self.res[(t, r)]
                due = "m_denied" if t == "rl-hot" else "m_allowed"
                # every counter of /metrics that moved, but the one that should have
                for k, v in res.items():
                    if not re.match(r"(m|rej|be)_", k) or v == 0 or k in (due, "be_ok"):
                        continue
                    what = {"m": "checks counted as %s", "rej": "requests rejected as %s",
                            "be": "backend requests ended %s"}[k.split("_")[0]] % k.split("_", 1)[1]
                    w("%s run %d: %s %s by /metrics" % (t, r, self.fmt(v), what))
                n = sum(v for k, v in res.items() if k.startswith("m_"))
                if res["evalsha_calls"] > n:
                    w("%s run %d: Redis ran %s EVALSHA for %s checks" % (t, r, res["evalsha_calls"], self.fmt(n)))
                if res["eval_calls"]:
                    w("%s run %d: Redis ran %s EVAL (the daemon's NOSCRIPT fallback)" % (t, r, res["eval_calls"]))
                if res["evalsha_failed"]:
                    w("%s run %d: %s EVALSHA failed in Redis" % (t, r, res["evalsha_failed"]))
            for t in self.wrk_targets:
                if get(t, r, "sockerr", 0):
                    w("%s run %d: %d socket errors or timeouts in wrk" % (t, r, get(t, r, "sockerr")))
        for t in self.wrk_targets + self.rb_targets:
            o = self.med(t, "other")
            if o > 10:
                w("%s: %s%% of the host's CPU went to processes outside the benchmark; its figures are "
                  "unreliable" % (t, self.fmt(o)))
        if any(self.get(t, r, "m_degraded", 0) >= 1 for t in self.wrk_targets if t.startswith("rl-")
               for r in range(1, self.reps + 1)):
            out("  (degraded: the Redis reply outlived redis.timeout, 50 ms by default; with")
            out("   failure_mode open the daemon answers 200, even for the over-limit hot key)")
        out("ratelimitd RSS: %d kB idle, %d kB after warm-up, then after each run: %s kB "
            "(bare_http idle %d kB)" % (self.rss0["rl"], self.rss1["rl"],
                                        " ".join(map(str, self.rss_rep["rl"])), self.rss0["bare"]))
        if self.reps > 1:
            grew = self.rss_rep["rl"][-1] - self.rss_rep["rl"][0]
            if grew > 2048:
                w("ratelimitd RSS grew by %d kB from run 1 to run %d" % (grew, self.reps))
        if self.node:
            out("node peer RSS: %d kB idle, %d kB after warm-up, then after each run: %s kB" % (
                self.rss0["node"], self.rss1["node"], " ".join(map(str, self.rss_rep["node"]))))
            with open(self.node.log, errors="replace") as f:
                other = [ln.rstrip("\n") for ln in f
                         if not ln.startswith(("node peer: listening", "-- attempt"))]
            if other:
                w("the node peer printed %d other lines; the first ones:" % len(other))
                for ln in other[:5]:
                    out("    " + ln)
        self.log_warnings(self.rl, "ratelimitd logged")
        mem = re.search(r"^used_memory_human:(\S+)", self.redis.cmd("INFO", "memory"), re.M)
        out("Redis: %d keys, used_memory %s" % (self.redis.cmd("DBSIZE"), mem.group(1) if mem else "?"))

    # ------------------------------------------------------------- syscalls

    def syscalls(self):
        """System calls per request of each server during a 4 s wrk run,
        counted twice: perf stat on the syscall tracepoints costs next to
        nothing, so the servers run at full speed and batch as they do
        without a tracer; strace -c -f is the classic count but slows every
        traced process several times, which changes the batching (more checks
        per Redis round trip, hence fewer syscalls per check on Redis's side)."""
        self.sc_total = {}
        kinds = ["strace"]
        perf = shutil.which("perf") and subprocess.run(
            ["perf", "stat", "-e", "raw_syscalls:sys_enter", "--", "true"], capture_output=True).returncode == 0
        if perf:
            kinds = ["perf", "strace"]
        else:
            out("%s: perf cannot count syscall tracepoints here; strace only" % PROG)
        out()
        out("%s: syscalls per request, each server traced during a 4 s wrk run (nginx: all its "
            "processes)" % PROG)
        out("  %-28s" % "per request" + "".join(" %*s" % (max(len(n), 6), n)
                                                for n in ["total"] + SYSCALL_NAMES))
        log = self.log("tracer")
        for kind in kinds:
            for t in ["bare"] + (["nginx"] if self.nginx else []) + ["rl-keys", "rl-hot"]:
                srv = self.targets[t].server
                pids = tree_pids(srv.pid) if t == "nginx" else [srv.pid]
                path = os.path.join(self.tmp, "%s.%s" % (kind, t))
                tracers = [tracer_start(kind, pids, path, log)]
                if t not in ("bare", "nginx"):
                    tracers.append(tracer_start(kind, [self.redis.proc.pid],
                                                os.path.join(self.tmp, kind + ".redis"), log))
                time.sleep(0.5)
                res = self.run_wrk(t, 4)
                self.record("%s.%s" % (kind, t), "x", res)
                time.sleep(0.2)
                for p in tracers:
                    tracer_stop(p)
                if t in ("bare", "nginx"):
                    self.sc_total[kind + "." + t] = syscall_row(
                        kind, "bare_http" if t == "bare" else "nginx",
                        syscall_counts(kind, path, t, log), res["requests"])
                    continue
                n = int(sum(v for k, v in res.items() if k.startswith("m_")))
                self.sc_total[kind + "." + t] = syscall_row(
                    kind, "ratelimitd " + t, syscall_counts(kind, path, t, log), n)
                syscall_row(kind, "redis for " + t,
                            syscall_counts(kind, os.path.join(self.tmp, kind + ".redis"), t, log), n)
                if res.get("m_degraded"):
                    out("  (%s: %s of %d checks outlived redis.timeout, answered degraded)"
                        % (kind, self.fmt(res["m_degraded"]), n))

    # ------------------------------------------------------------ callgrind

    def cg_instr(self, target, n):
        """target's server under valgrind --tool=callgrind answering n
        requests of the driver, stopped: the instructions of the whole run."""
        outf = os.path.join(self.cg_dir, "%s.%d.out" % (target, n))
        vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outf]
        mode = "keys"
        if target.startswith("rl-"):
            srv = self.start_daemon("ratelimitd-cg", self.cg_config, self.redis, wrapper=vg,
                                    start_timeout=120)
            mode = {"rl-keys": "keys", "rl-charge": "charge"}.get(target, "hot")
        elif target == "bare":
            srv = start(self.tmp, "bare_http-cg", vg + [self.bare, "-l", "127.0.0.1:@PORT@"], http_ok,
                        wait=120)
        else:
            srv = start(self.tmp, "nginx-cg", vg, http_ok, wait=120,
                        wrap=nginx_wrapper(self.tmp, "off"))
        self.cg_run += 1
        res = drive(srv.port, mode, n, 10, "cg%d-" % self.cg_run)
        dump(os.path.join(self.cg_dir, "%s.%d.drive" % (target, n)), res)
        if target.startswith("rl-"):
            try:
                srv.daemon.stop(timeout=120)
            except H.HarnessError as e:
                die("%s: %s" % (srv.name, e))
        else:
            stop_server(srv)
        due = 429 if target == "rl-hot" else 200
        got = res.get("status_%d" % due, 0)
        # the hot key's first check may be its first in the window: allowed
        if got < n - 1:
            self.warn("callgrind %s: %d of %d answers %d (%s)" % (
                target, got, n, due, " ".join("%s %s" % kv for kv in res.items())))
        if res["degraded"]:
            self.warn("callgrind %s: %d answers degraded" % (target, res["degraded"]))
        with open(outf) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        die("callgrind wrote no totals for %s in %s" % (target, outf))

    def callgrind(self):
        """Instructions per request, independent of load: (I(N) - I(M)) / (N - M)
        leaves startup and exit out."""
        self.cg_ipr = {}
        targets = ["rl-keys", "rl-hot", "rl-charge", "bare"] + (["nginx"] if self.nginx else [])
        n, m = (1500, 500) if self.quick else (12000, 4000)
        self.cg_dir = os.path.join(self.tmp, "cg")
        os.makedirs(self.cg_dir, exist_ok=True)
        self.cg_run = 0
        # the bench's policies; a Redis reply may take long under callgrind
        self.cg_config = config_json({"timeout": "10s"})
        out()
        out("%s: instructions per request (callgrind, all threads): (I(%d) - I(%d)) / %d, 10 keep-alive "
            "connections" % (PROG, n, m, n - m))
        for t in targets:
            i_n = self.cg_instr(t, n)
            i_m = self.cg_instr(t, m)
            self.cg_ipr[t] = round((i_n - i_m) / (n - m))
            out("  %-10s %8s instructions per request   (%s in %d requests, %s in %d)"
                % (t, self.cg_ipr[t], i_n, n, i_m, m))
        pairs = [("rl-keys", "bare"), ("rl-hot", "bare"), ("rl-charge", "rl-keys")] + \
            ([("rl-keys", "nginx")] if self.nginx else [])
        for a, b in pairs:
            out("  %s ÷ %s: instructions per request %.2f" % (a, b, self.cg_ipr[a] / self.cg_ipr[b]))
        if not self.quick and shutil.which("callgrind_annotate"):
            # libraries without symbols show as (libname): jansson, libevent, hiredis
            for t in ("rl-keys", "rl-hot"):
                out("  %s: instructions per request by function (self, the top 15)" % t)
                big = os.path.join(self.cg_dir, "%s.%d.out" % (t, n))
                try:
                    for line in callgrind_top(big, os.path.join(self.cg_dir, "%s.%d.out" % (t, m)),
                                              n - m, 15):
                        out(line)
                except (subprocess.CalledProcessError, OSError):
                    self.warn("callgrind_annotate failed on %s" % big)
        out("  (profiles: %s/*.out, callgrind_annotate --inclusive=yes FILE; kept with --keep)" % self.cg_dir)

    # ---------------------------------------------------------------- flood

    def flood_row(self, name, f, answered):
        out("  %-11s %6s %9.1f %9s %9s %9s %9s %9s %10s %11s %7s %9s" % (
            name, f["seconds"], f["sent_bytes"] / 1048576, f["rss0"], f["rss_max"], f["hwm_end"],
            f["rss_after"], f["growth_kb_s"], f["sent_requests"], answered,
            "%s/%s" % (f["probes_ok"], f["probes"]), f["probe_max_ms"]))

    def flood(self):
        """--flood on ratelimitd (5 s, 4 connections), then on bare_http (2 s,
        stopped past +256 MiB: evhttp buffers every answer)."""
        out()
        out("%s: flood: 4 connections pipeline POST /check and never read; a check on a fresh "
            "connection every 0.5 s" % PROG)
        rl, bare = self.rl, self.bare_srv
        before = scrape(rl)
        c0 = cpu_us(rl.pid)
        f = flood(rl.port, rl.pid, 5, 4, 0, rl.port)
        c1 = cpu_us(rl.pid)
        alive(rl.pid, "ratelimitd", rl.log)
        f.update(counter_deltas(before, scrape(rl)))
        dump(os.path.join(self.res_dir, "flood.rl"), f)
        self.flood_max_kb = f["rss_max"]
        cap = status_kb(bare.pid, "VmRSS") + 256 * 1024
        fb = flood(bare.port, bare.pid, 2, 4, cap, None)
        dump(os.path.join(self.res_dir, "flood.bare"), fb)
        alive(bare.pid, "bare_http", bare.log)
        out("  %-11s %6s %9s %9s %9s %9s %9s %9s %10s %11s %7s %9s" % (
            "server", "seconds", "sent MB", "RSS0 kB", "RSSmax kB", "HWM kB", "after kB", "kB/s",
            "sent reqs", "answered", "probes", "probe ms"))
        self.flood_row("ratelimitd", f, self.fmt(sum(v for k, v in f.items() if k.startswith("m_"))))
        self.flood_row("bare_http", fb, "-")
        out("  (ratelimitd: %.0f%% of a CPU during the flood; RSS after is sampled once its "
            "connections_open is back at its level before)" % ((c1 - c0) / float(f["seconds"]) / 1e4))
        if fb["capped"]:
            out("  (bare_http: flood stopped at %d kB, +256 MiB, after %s s)" % (cap, fb["seconds"]))
        if f["probes_ok"] != f["probes"] or f["probes"] == 0:
            self.warn("flood: ratelimitd answered %d of %d checks on another connection with 200"
                      % (f["probes_ok"], f["probes"]))
        if f["after_ok"] != 1:
            self.warn("flood: ratelimitd did not answer a check 200 after the flood")
        if f["settled"] != 1:
            self.warn("flood: ratelimitd's connections_open did not come back within 20 s")
        if f["capped"]:
            self.warn("flood: ratelimitd passed the cap")
        for k, v in f.items():
            if k.startswith("rej_") and v:
                self.warn("flood: %s requests rejected as %s by /metrics" % (self.fmt(v), k[4:]))
            elif k == "m_degraded" and v:
                self.warn("flood: %s checks answered degraded" % self.fmt(v))

    # ------------------------------------------------------ issue 11 targets

    def issue_targets(self, ran_syscalls, ran_callgrind, ran_flood):
        """Issue 11's targets beside this run's figures (those of the modes that ran)."""
        sc = cpu = mib = ipr = ""
        if ran_syscalls:
            v = self.sc_total.get("perf.rl-keys", self.sc_total.get("strace.rl-keys"))
            sc = "" if v is None else "%.2f" % v
        if self.nginx:
            cpu = ratio(self.srv["rl-keys"], self.srv["nginx"])
        if ran_flood:
            mib = "%.1f" % (self.flood_max_kb / 1024)
        if ran_callgrind:
            ipr = str(self.cg_ipr["rl-keys"])
        rps = {t: self.med(t, "rps") for t in ("rl-keys", "rl-hot", "bare")}
        out()
        out("issue 11 targets, this run (-: its mode did not run; ratios of medians):")
        for what, v, op, bound in (
                ("instructions per check, distinct keys", ipr, "<=", 25000),
                ("syscalls per check, distinct keys", sc, "<=", 2.6),
                ("rl-keys ÷ bare req/s", ratio(rps["rl-keys"], rps["bare"]), ">=", 1.0),
                ("rl-keys CPU/req ÷ nginx CPU/req", cpu, "<=", 2),
                ("rl-hot ÷ bare req/s", ratio(rps["rl-hot"], rps["bare"]), ">=", 1.3),
                ("ratelimitd VmRSS under a pipelined flood, MiB", mib, "<=", 64)):
            verdict = "-"
            if v and v != "n/a":
                ok = float(v) <= bound if op == "<=" else float(v) >= bound
                verdict = "met" if ok else "NOT met"
            out("  %-46s %10s   %s %-6s %s" % (what, v or "-", op, bound, verdict))

    # ------------------------------------------------------------- xds-10k

    def xds_update(self):
        """xds-10k: an xDS update of 10,000 descriptors, its rules from the
        tests' aggregated discovery server (harness_xds.py, grpcio, loopback)
        into a daemon of its own, nothing else asked of it: the CPU of the
        thread that applies it (decoded, validated, swapped in; its log
        line's apply_cpu_us), its peak memory against the rules' steady size
        (VmHWM over VmRSS without rules, against VmRSS with them: the
        measure of test_rls_xds) and the bytes a rule keeps.  Quick: 1
        update; full: 3 (CPU: their median; peak: the highest)."""
        import harness_xds as X
        n, updates = 10000, 1 if self.quick else 3
        out()
        out("%s: xds-10k: %d update(s) of %d descriptors over xDS" % (PROG, updates, n))
        try:
            with X.AdsServer() as ads:
                cfg = {"failure_mode": "open",
                       "rls": {"listen": "127.0.0.1:%d" % H.free_port(),
                               "xds": {"server": "127.0.0.1:%d" % ads.port, "node_id": "bench",
                                       "max_message": "8m"}}}
                with H.Daemon(json.dumps(cfg), args=["-r", self.redis.url],
                              workers=self.workers, ready=True) as d:
                    f = X.swap_figures(d, ads, n, updates=updates)
                    srv = Server("xds-10k", d.proc, d.port, d.logfile)
                    srv.daemon = d
                    self.log_warnings(srv, "xds-10k")
        except (H.HarnessError, H.Fail) as e:
            die("xds-10k: %s" % e)
        cpu_ms, wall_ms = median(f["apply_cpu_us"]) / 1000.0, median(f["apply_us"]) / 1000.0
        self.xds = {"cpu_ms": cpu_ms, "ratio": f["ratio"], "per_rule": f["per_rule"]}
        out()
        out("%-9s %7s %12s %9s %8s %9s %11s %9s %7s" % (
            "target", "updates", "apply CPU ms", "apply ms", "peak kB", "steady kB",
            "peak÷steady", "rules B", "B/rule"))
        out("%-9s %7d %12.1f %9.1f %8d %9d %11.2f %9d %7.0f" % (
            "xds-10k", updates, cpu_ms, wall_ms, f["peak_kb"], f["steady_kb"], f["ratio"],
            f["rules_bytes"], f["per_rule"]))
        out()
        out("issue 30 targets, this run:")
        for what, v, op, bound in (
                ("update of 10,000 descriptors, CPU ms on its loop", cpu_ms, "<=", 100),
                ("its peak memory ÷ the rules' steady size", f["ratio"], "<=", 2)):
            ok = v <= bound
            out("  %-46s %10.2f   %s %-6s %s" % (what, v, op, bound, "met" if ok else "NOT met"))

    # ------------------------------------------------------------------ --tls

    def tls(self):
        """rl-keys (plain TCP) against rl-tls (the same daemon config, its Redis
        serving TLS only), interleaved run by run; its own table."""
        if shutil.which("openssl") is None:
            die("--tls: openssl not found in PATH")
        d = os.path.join(self.tmp, "tls")
        os.makedirs(d, exist_ok=True)
        log = self.log("openssl")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        p = lambda n: os.path.join(d, n)  # noqa: E731
        run_logged(["openssl", "req", "-x509"] + ec + ["-keyout", p("ca.key"), "-out", p("ca.crt"),
                   "-days", "2", "-subj", "/CN=bench-ca"], log, "openssl")
        run_logged(["openssl", "req"] + ec + ["-keyout", p("srv.key"), "-out", p("srv.csr"),
                   "-subj", "/CN=localhost"], log, "openssl")
        write(p("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run_logged(["openssl", "x509", "-req", "-in", p("srv.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
                    "-set_serial", "1", "-days", "2", "-extfile", p("ext"), "-out", p("srv.crt")],
                   log, "openssl")
        rt = self.start_redis("redis-tls", tls=H.RedisTls((p("srv.crt"), p("srv.key")), p("ca.crt"),
                                                          (p("ca.crt"), None)))
        rlt = self.start_daemon("ratelimitd-tls", config_json({"tls": {"ca_file": p("ca.crt")}}), rt)
        self.target("rl-tls", rlt, "keys", "ratelimitd", redis=rt)
        out("%s: --tls: warming up (%ds per target)" % (PROG, self.warmup))
        for t in ("rl-keys", "rl-tls"):
            self.record(t, "warmup", self.run_wrk(t, self.warmup))
        for rep in range(1, self.reps + 1):
            out("%s: --tls: run %d of %d (%ds per target)" % (PROG, rep, self.reps, self.duration))
            for t in ("rl-keys", "rl-tls"):
                self.record(t, rep, self.run_wrk(t, self.duration))
        m = self.med
        out()
        out("%-8s %8s %7s %7s %7s %10s %11s %12s %10s %5s %6s %6s" % (
            "target", "req/s", "p50 ms", "p99 ms", "non2xx", "srv us/req", "EVALSHA/req", "redis us/req",
            "evalsha us", "idle%", "steal%", "other%"))
        for t in ("rl-keys", "rl-tls"):
            out("%-8s %8.0f %7.2f %7.2f %7.0f %10.2f %11.2f %12.2f %10.2f %5.0f %6.0f %6.0f" % (
                t, m(t, "rps"), m(t, "p50_us") / 1000, m(t, "p99_us") / 1000, m(t, "non2xx"),
                m(t, "srv_us"), m(t, "to_redis"), m(t, "redis_us"), m(t, "evalsha_us"), m(t, "idle"),
                m(t, "steal"), m(t, "other")))
        if self.reps > 1:
            for t in ("rl-keys", "rl-tls"):
                out("  %-8s req/s of each run:" % t + "".join(
                    " %8s" % self.fmt(self.get(t, r, "rps", "")) for r in range(1, self.reps + 1)))
        out()
        out("ratios rl-tls ÷ rl-keys (this run; targets: CPU/req within 1.3, p99 within 1.5):"
            "  daemon CPU/req %s  Redis CPU/req %s  EVALSHA/req %s  p99 %s  req/s %s" % tuple(
                ratio(m("rl-tls", k), m("rl-keys", k))
                for k in ("srv_us", "redis_us", "to_redis", "p99_us", "rps")))
        for rep in range(1, self.reps + 1):
            for t in ("rl-keys", "rl-tls"):
                if self.get(t, rep, "non2xx", 0):
                    self.warn("%s run %d: %d non-2xx answers" % (t, rep, self.get(t, rep, "non2xx")))
                if self.get(t, rep, "sockerr", 0):
                    self.warn("%s run %d: %d socket errors" % (t, rep, self.get(t, rep, "sockerr")))
                if self.get(t, rep, "m_degraded", 0):
                    self.warn("%s run %d: %s checks answered degraded"
                              % (t, rep, self.fmt(self.get(t, rep, "m_degraded"))))
        lines = [ln for ln in rlt.daemon.log().splitlines() if "level=warn" in ln or "level=error" in ln]
        if lines:
            self.warn("ratelimitd-tls logged warnings or errors; the first ones:")
            for ln in lines[:5]:
                out("    " + ln)
        out()
        out("%s: --tls done, %d warning(s)" % (PROG, self.warn.n))

    # ----------------------------------------------------------- --redis-cost

    ALGOS = ["fixed_window", "token_bucket", "gcra", "sliding_window_counter", "sliding_window_log"]

    def redis_cost(self):
        """What Redis spends per check of each algorithm while ratelimitd runs
        (wrk on 100k keys, coalescing on), next to a minimal script's in the
        same run (INCRBY + PEXPIRE NX, 16 keys per call, redis-benchmark).
        An ALGO/1 row is the same from a daemon with redis.coalesce 1."""
        pols = [{"name": a, "match": {"path": "/never"},
                 "limits": [{"algorithm": a, "limit": 1000000 if a == "sliding_window_log" else 1000000000,
                             "window": "60s"}]} for a in self.ALGOS]
        pols.append({"name": "default", "limits": [{"algorithm": "fixed_window", "limit": 1000,
                                                     "window": "60s"}]})
        cfg = {"identity": ["body"], "deny_cache": False, "policies": pols}
        rl = self.start_daemon("ratelimitd", json.dumps(cfg), self.redis)
        # the same with one check per call: what a lone check costs
        rl1 = self.start_daemon("ratelimitd-single", json.dumps(dict({"redis": {"coalesce": 1}}, **cfg)),
                                self.redis)
        lua = write(os.path.join(self.tmp, "check.lua"), CHECK_LUA)
        mini = self.redis.cmd("SCRIPT", "LOAD", "for i = 1, #KEYS do redis.call('INCRBY', KEYS[i], 1) "
                              "redis.call('PEXPIRE', KEYS[i], 60000, 'NX') end return #KEYS")
        keys = ["{m:__rand_int__}:%d" % k for k in range(1, 17)]
        out("%-24s %10s %9s %11s %12s %10s" % ("target", "checks/s", "chk/call", "cpu us/chk",
                                               "eval us/chk", "x minimal"))
        base = None
        for a in ["minimal"] + self.ALGOS + [a + "/1" for a in self.ALGOS]:
            self.redis.cmd("CONFIG", "RESETSTAT")
            r0 = cpu_us(self.redis.proc.pid)
            if a == "minimal":
                n = self.rb_n // 4
                t0 = time.monotonic_ns()
                run_logged(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.redis.port), "-c", "1",
                            "-P", "16", "-n", str(n), "-r", str(NKEYS), "EVALSHA", mini, "16"] + keys,
                           self.log("cost-minimal"), "redis-benchmark on the minimal script")
                reqs, dur, errs = n * 16, (time.monotonic_ns() - t0) // 1000, 0
            else:
                port = rl1.port if a.endswith("/1") else rl.port
                text = run_logged(["wrk", "-t", str(THREADS), "-c", str(CONNS), "-d", "%ds" % self.duration,
                                   "-s", lua, "http://127.0.0.1:%d/check" % port, "--",
                                   "policy:" + a.split("/")[0], str(NKEYS), str(THREADS)],
                                  self.log("cost-wrk"), "wrk on %s" % a)
                got = wrk_figures(text)
                if not got:
                    die("wrk printed no results for %s; log: %s" % (a, self.log("cost-wrk")))
                reqs, dur, errs = got["requests"], got["duration_us"], got["non2xx"] + got["sockerr"]
            r1 = cpu_us(self.redis.proc.pid)
            alive(self.redis.proc.pid, "redis", self.redis.logfile)
            alive(rl.pid, "ratelimitd", rl.log)
            alive(rl1.pid, "ratelimitd", rl1.log)
            if errs:
                self.warn("%s: %d requests not 2xx or failed" % (a, errs))
            if commandstat(self.redis, "failed_calls"):
                self.warn("%s: failed script calls" % a)
            calls, usec = commandstat(self.redis, "calls"), commandstat(self.redis, "usec")
            if calls <= 0 or reqs <= 0:
                die("%s: no script call ran" % a)
            cpu = round((r1 - r0) / reqs, 2)
            base = cpu if base is None else base
            out("%-24s %10.0f %9.1f %11.2f %12.2f %10.2f" % (a, reqs * 1e6 / dur, reqs / calls, cpu,
                                                             usec / reqs, cpu / base if base > 0 else 0))
