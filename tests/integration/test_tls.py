#!/usr/bin/env python3
"""Redis over TLS (docs/redis.md: Redis over TLS; ratelimitd.json(5): redis.tls).

Every Redis here is a real redis-server serving TLS only (--port 0
--tls-port P) with certificates this file makes with the openssl command in
its temp dir: two CAs, server and client certificates, one expired.  Cases:
a check decided over TLS; a wrong CA, an expired certificate, a name that
does not match, mTLS required without a client certificate -> not ready,
failure_mode applied, one clear log line however often the daemon retries;
the server restarted mid-run; SIGHUP with rotated certificates (the open
connection stays, the next handshake uses the new files); a TLS peer that
closes mid-record; Sentinel (sentinels, master and replica over TLS) and
Cluster (tls-cluster yes) over TLS."""

import contextlib
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import Pki, check, eq  # noqa: E402

POLICY = {"name": "api", "match": {"path_prefix": "/"},
          "limits": [{"algorithm": "fixed_window", "limit": 1000, "window": "60s"}]}
FAILED_LINE = re.compile(r'level=warn msg="redis TLS connection failed" server=\S+ reason="([^"]*)"')
RETRY_LINE = re.compile(r'level=debug msg="redis TLS connection failed"')


# ------------------------------------------------------------- certificates

# -------------------------------------------------------------- TLS Redis

class TlsRedis(H.RedisServer):
    """redis-server (or sentinel) serving TLS only on a free loopback port.

    srv: (crt, key) it serves; client_ca: whom it trusts (clients, and its
    peers'); auth: tls-auth-clients; admin: (ca, (crt, key)) this file talks
    to it with."""

    def __init__(self, name, srv, client_ca, admin, auth="no", lines=(), sentinel=False,
                 port=None):
        super().__init__(name, lines, sentinel=sentinel, port=port,
                         tls=H.RedisTls(srv, client_ca, admin, auth=auth))

    def restart(self, srv=None, client_ca=None, admin=None):
        """Kill and start again on the same port, perhaps with other files."""
        t = self.tls
        super().restart(stop=False, tls=H.RedisTls(srv or t.cert, client_ca or t.ca,
                                                   admin or t.client, auth=t.auth))

    def other_clients(self):
        """Ids of the connections that are not this call's own."""
        with self.resp() as c:
            me = c("CLIENT", "ID")
            ids = re.findall(r"^id=(\d+) ", c("CLIENT", "LIST"), re.M)
            return sorted(int(i) for i in ids if int(i) != me)


# ----------------------------------------------------------------- helpers

def tls_conf(url=None, **tls):
    cfg = {"identity": ["body"], "failure_mode": "open", "log_level": "debug",
           "policies": [POLICY], "redis": {"timeout": "2s", "tls": tls}}
    if url is not None:
        cfg["redis"]["url"] = url
    return cfg


def decided(d, key="k"):
    """A check Redis decided (not failure_mode): its body."""
    st, _, b = H.request(d.port, "POST", "/check", {"key": key})
    eq((st, b.get("allowed"), b.get("degraded", False)), (200, True, False),
       "a check over TLS (status, allowed, degraded): %r" % (b,))
    return b


def wait_ready(d, what):
    deadline = time.monotonic() + H.START_TIMEOUT * 2
    while True:
        st, _, b = H.request(d.port, "GET", "/readyz")
        if st == 200:
            return
        check(time.monotonic() < deadline, "not ready %s: %r", what, b)
        time.sleep(0.05)


def wait_log(d, pattern, count=1, what=None):
    deadline = time.monotonic() + H.START_TIMEOUT * 2
    while len(re.findall(pattern, d.log())) < count:
        check(d.alive(), "the daemon died waiting for %s; log:\n%s", what or pattern, d.log()[-3000:])
        check(time.monotonic() < deadline, "no %r in the log (%s); log:\n%s",
              pattern, what or "", d.log()[-3000:])
        time.sleep(0.05)


def expect_refused(d, reason_part, failure="open"):
    """Not ready, failure_mode applied, and the TLS failure logged once
    although the daemon retried: its reason contains reason_part."""
    wait_log(d, RETRY_LINE, count=3, what="three retries")
    st, _, b = H.request(d.port, "GET", "/readyz")
    eq(st, 503, "GET /readyz while TLS fails (%r)" % (b,))
    st, _, b = H.request(d.port, "POST", "/check", {"key": "k"})
    if failure == "open":
        eq((st, b.get("allowed"), b.get("degraded")), (200, True, True),
           "failure_mode open: allowed and degraded (%r)" % (b,))
    else:
        eq((st, b.get("error")), (503, "backend unavailable"), "failure_mode closed (%r)" % (b,))
    lines = FAILED_LINE.findall(d.log())
    eq(len(lines), 1, "warnings about the TLS failure after several retries: %r" % lines)
    check(re.search(reason_part, lines[0]), "the reason %r does not say %r", lines[0], reason_part)
    check(d.alive(), "the daemon died")


# ------------------------------------------------------------------- cases

def t_check_over_tls(x):
    srv = x.standalone
    with H.Daemon(tls_conf("rediss://localhost:%d/0" % srv.port, ca_file=x.ca_a[0]),
                  workers=2, ready=True) as d:
        b = decided(d, "alice")
        eq(b["limits"][0]["remaining"], 999, "remaining after one check")
        decided(d, "alice")
        keys = srv.cmd("KEYS", "*rl:*")
        check(len(keys) == 1 and "alice" in keys[0], "keys in the TLS Redis: %r", keys)
        check(FAILED_LINE.search(d.log()) is None, "a TLS failure logged:\n%s", d.log())
        eq(len(srv.other_clients()), 2, "connections of two workers to the TLS Redis")


def t_wrong_ca(x):
    with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % x.standalone.port, ca_file=x.ca_b[0]),
                  workers=2, ready=False) as d:
        expect_refused(d, "certificate verification failed: ")


def t_wrong_ca_closed(x):
    cfg = tls_conf("rediss://127.0.0.1:%d/0" % x.standalone.port, ca_file=x.ca_b[0])
    cfg["failure_mode"] = "closed"
    with H.Daemon(cfg, workers=1, ready=False) as d:
        expect_refused(d, "certificate verification failed", failure="closed")


def t_name_mismatch(x):
    with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % x.standalone.port, ca_file=x.ca_a[0],
                           server_name="redis.elsewhere.example"), workers=1, ready=False) as d:
        expect_refused(d, "certificate verification failed: hostname mismatch")


def t_verify_off(x):
    """verify false: a certificate no CA here signed still connects, with a
    warning at start."""
    with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % x.standalone.port, ca_file=x.ca_b[0],
                           verify=False), workers=1, ready=True) as d:
        decided(d)
        check("certificate verification is off" in d.log(), "no warning about verify false")


def t_expired(x):
    with TlsRedis("expired", x.expired, x.ca_a[0], (None, x.cli_a)) as srv:
        with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % srv.port, ca_file=x.ca_a[0]),
                      workers=2, ready=False) as d:
            expect_refused(d, "certificate verification failed: certificate has expired")


def t_mtls(x):
    with TlsRedis("mtls", x.srv_a, x.ca_a[0], (x.ca_a[0], x.cli_a), auth="yes") as srv:
        url = "rediss://127.0.0.1:%d/0" % srv.port
        with H.Daemon(tls_conf(url, ca_file=x.ca_a[0]), workers=2, ready=False) as d:
            # TLS 1.3: the alert, or a reset that loses it
            expect_refused(d, "certificate required|client certificate")
        with H.Daemon(tls_conf(url, ca_file=x.ca_a[0], cert_file=x.cli_a[0], key_file=x.cli_a[1]),
                      workers=2, ready=True) as d:
            decided(d)
        # a client certificate from a CA the server does not trust
        with H.Daemon(tls_conf(url, ca_file=x.ca_a[0], cert_file=x.cli_b[0], key_file=x.cli_b[1]),
                      workers=1, ready=False) as d:
            expect_refused(d, "TLS error|client certificate")


def t_restart(x):
    with TlsRedis("restart", x.srv_a, x.ca_a[0], (x.ca_a[0], x.cli_a)) as srv:
        with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % srv.port, ca_file=x.ca_a[0]),
                      workers=2, ready=True) as d:
            decided(d)
            srv.restart()
            wait_log(d, r'msg="redis ready"', count=4, what="both workers reconnected")
            wait_ready(d, "after the restart")
            decided(d, "after")
            eq(srv.cmd("DBSIZE"), 1, "keys in the restarted Redis")
            check(FAILED_LINE.search(d.log()) is None, "a restart logged as a TLS failure:\n%s",
                  d.log())


def write_atomic(path, src):
    with open(src, "rb") as f:
        data = f.read()
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


RELOAD_FAILED = re.compile(r'ratelimitd_config_reloads_total\{result="failed"\} (\d+)')
TESTED_BAD = 'reload rejected, keeping the running configuration" problem="redis.tls: a TLS ' \
    'handshake with the new settings failed'


def failed_reloads(d):
    st, _, text = H.request(d.port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    m = RELOAD_FAILED.search(text if isinstance(text, str) else str(text))
    check(m, "no failed-reloads sample in /metrics")
    return int(m.group(1))


def rotation_conf(port, ca, crt, key):
    cfg = tls_conf("rediss://127.0.0.1:%d/0" % port, ca_file=ca, cert_file=crt, key_file=key)
    # the bound of a reload's test handshake: generous on a loaded host
    cfg["redis"]["connect_timeout"] = "10s"
    return cfg


def rotate_dir(x, name):
    """ca.pem, client.crt and client.key in a dir of their own, from CA A."""
    tdir = os.path.join(H.tmpdir(), name)
    os.makedirs(tdir, exist_ok=True)
    files = tuple(os.path.join(tdir, n) for n in ("ca.pem", "client.crt", "client.key"))
    for dst, src in zip(files, (x.ca_a[0],) + x.cli_a):
        write_atomic(dst, src)
    return files


def t_rotation(x):
    """A good rotation: the server trusts both CAs' clients; the daemon's new
    files (both CAs, client certificate B) pass the test handshake and the
    open connection stays; the server restarted with certificate B, taking
    only CA B's clients, is reached with the new files alone."""
    ca, crt, key = rotate_dir(x, "rotate-good")
    both = os.path.join(H.tmpdir(), "ca-a-and-b.pem")
    with open(both, "wb") as f:
        for src in (x.ca_a[0], x.ca_b[0]):
            with open(src, "rb") as g:
                f.write(g.read())
    with TlsRedis("rotate", x.srv_a, both, (x.ca_a[0], x.cli_a), auth="yes") as srv:
        with H.Daemon(rotation_conf(srv.port, ca, crt, key), workers=1, ready=True) as d:
            decided(d)
            conns = srv.other_clients()
            eq(len(conns), 1, "connections of one worker")
            write_atomic(ca, both)
            write_atomic(crt, x.cli_b[0])
            write_atomic(key, x.cli_b[1])
            d.reload()
            wait_log(d, r'msg="configuration reloaded"', what="the reload with new files")
            check('a handshake with the new settings worked' in d.log(),
                  "no test handshake logged before the reload took the new files")
            decided(d)
            eq(srv.other_clients(), conns, "the connection after the reload (kept until it ends)")
            eq(failed_reloads(d), 0, "failed reloads")

            # only the new files open this server: its certificate is CA B's
            # and it takes only CA B's client certificates
            srv.restart(srv=x.srv_b, client_ca=x.ca_b[0], admin=(x.ca_b[0], x.cli_b))
            wait_log(d, r'msg="redis ready"', count=2, what="a reconnect with the new files")
            wait_ready(d, "with the new files")
            decided(d, "new")
            check(FAILED_LINE.search(d.log()) is None, "a TLS failure logged:\n%s", d.log())


def t_rotation_refused(x):
    """Reloads whose files cannot open the server: a key that does not load,
    a CA that did not sign the server's certificate, a client certificate
    the server does not take.  Each is rejected with one line and counted;
    checks go on over the open connection, and a reconnect after the server
    restarted still uses the running files."""
    ca, crt, key = rotate_dir(x, "rotate-bad")
    with TlsRedis("rotate-bad", x.srv_a, x.ca_a[0], (x.ca_a[0], x.cli_a), auth="yes") as srv:
        with H.Daemon(rotation_conf(srv.port, ca, crt, key), workers=1, ready=True) as d:
            decided(d)
            conns = srv.other_clients()
            with open(key, "w") as f:
                f.write("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
            d.reload()
            wait_log(d, r'reload rejected.*key_file %s' % re.escape(key),
                     what="the reload with a bad key rejected")
            write_atomic(key, x.cli_a[1])
            steps = ((ca, x.ca_b[0], "certificate verification failed"),
                     (crt, x.cli_b[0], "TLS error|closed the connection"))
            for n, (dst, src, why) in enumerate(steps, 1):
                keep = os.path.join(H.tmpdir(), "rotate-bad-keep")
                write_atomic(keep, dst)
                write_atomic(dst, src)
                if dst == crt:
                    write_atomic(key, x.cli_b[1])
                d.reload()
                wait_log(d, re.escape(TESTED_BAD), count=n, what="reload %d rejected" % n)
                line = [ln for ln in d.log().splitlines() if TESTED_BAD in ln][-1]
                check(re.search(why, line), "the rejection %r does not say %r", line, why)
                decided(d, "after-%d" % n)
                eq(srv.other_clients(), conns, "the connection after rejected reload %d" % n)
                write_atomic(dst, keep)
                write_atomic(key, x.cli_a[1])
            eq(failed_reloads(d), 3, "failed reloads (bad key, wrong CA, foreign client cert)")
            # the running settings are still CA A's: a new connection works
            srv.restart()
            wait_log(d, r'msg="redis ready"', count=2, what="a reconnect with the running files")
            wait_ready(d, "after the restart")
            decided(d, "reconnected")
            check(FAILED_LINE.search(d.log()) is None, "a TLS failure logged:\n%s", d.log())


class HalfRecordPeer(threading.Thread):
    """A TLS peer that sends half a record and closes: during the handshake
    (after the ClientHello) or after it (once the client has spoken)."""

    def __init__(self, srv, after_handshake):
        super().__init__(daemon=True)
        self.after = after_handshake
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*srv)
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.stop = threading.Event()
        self.served = 0
        self.start()

    def run(self):
        while not self.stop.is_set() and self.served < 200:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            self.served += 1
            try:
                c.settimeout(5)
                if self.after:
                    s = self.ctx.wrap_socket(c, server_side=True)
                    s.recv(1)           # the client's first command
                    # a record header promising 16 KiB, then 100 bytes of it
                    socket.socket.send(s, b"\x17\x03\x03\x40\x00" + os.urandom(100))
                    s.close()
                else:
                    c.recv(4096)        # the ClientHello
                    c.sendall(b"\x16\x03\x03\x40\x00" + os.urandom(100))
            except (OSError, ssl.SSLError):
                pass
            finally:
                c.close()
        self.lsock.close()


def t_half_record(x):
    for after in (False, True):
        peer = HalfRecordPeer(x.srv_a, after)
        try:
            with H.Daemon(tls_conf("rediss://127.0.0.1:%d/0" % peer.port, ca_file=x.ca_a[0]),
                          workers=2, ready=False) as d:
                expect_refused(d, "unexpected eof|closed the connection" if after else "TLS error")
                check(peer.served >= 3, "the peer served %d connections", peer.served)
                st, _, _ = H.request(d.port, "GET", "/healthz")
                eq(st, 200, "GET /healthz after peers that closed mid-record")
                eq(d.stop(), 0, "exit code after peers that closed mid-record")
        finally:
            peer.stop.set()
            peer.join(timeout=5)


def t_sentinel(x):
    admin = (x.ca_a[0], x.cli_a)
    common = ["tls-replication yes"]
    servers = []
    try:
        master = TlsRedis("tls-master", x.srv_a, x.ca_a[0], admin, auth="yes", lines=common)
        servers.append(master)
        replica = TlsRedis("tls-replica", x.srv_a, x.ca_a[0], admin, auth="yes",
                           lines=common + ["replicaof 127.0.0.1 %d" % master.port])
        servers.append(replica)
        sentinel = TlsRedis("tls-sentinel", x.srv_a, x.ca_a[0], admin, auth="yes", sentinel=True,
                            lines=common + ["sentinel monitor rlm 127.0.0.1 %d 1" % master.port,
                                            "sentinel down-after-milliseconds rlm 10000"])
        servers.append(sentinel)
        H.wait_until(lambda: "master_link_status:up" in replica.cmd("INFO", "replication"),
                      "the replica to sync over TLS")
        cfg = tls_conf(None, enabled=True, ca_file=x.ca_a[0], cert_file=x.cli_a[0],
                       key_file=x.cli_a[1])
        cfg["redis"]["sentinel"] = {"master": "rlm", "nodes": ["127.0.0.1:%d" % sentinel.port]}
        with H.Daemon(cfg, workers=2, ready=True) as d:
            decided(d, "s1")
            decided(d, "s1")
            keys = master.cmd("KEYS", "*rl:*")
            check(len(keys) == 1 and "s1" in keys[0], "keys in the master: %r", keys)
            H.wait_until(lambda: replica.cmd("KEYS", "*rl:*") == keys, "the key on the replica")
    finally:
        for s in servers:
            s.kill()


NODE_NAME = "node.cluster.test"


def cluster_daemon(x, seed, **tls):
    cfg = tls_conf(None, enabled=True, ca_file=x.ca_a[0], cert_file=x.cli_a[0],
                   key_file=x.cli_a[1], **tls)
    cfg["redis"]["cluster"] = [seed]
    return cfg


def cluster_cases(x, nodes):
    """The seed's certificate names localhost, 127.0.0.1 and NODE_NAME; the
    others' only 127.0.0.1 (the address CLUSTER SLOTS gives) and NODE_NAME."""
    p0 = nodes[0].port
    # no server_name: the seed verified as localhost, the others as 127.0.0.1
    with H.Daemon(cluster_daemon(x, "localhost:%d" % p0), workers=2, ready=True) as d:
        H.ready_everywhere(d.port)
        for i in range(30):
            decided(d, "c%d" % i)
        sizes = [n.cmd("DBSIZE") for n in nodes]
        eq(sum(sizes), 30, "keys over the cluster's nodes (%r)" % sizes)
        check(sum(1 for s in sizes if s > 0) >= 2, "every key on one node: %r", sizes)
        check(FAILED_LINE.search(d.log()) is None, "a TLS failure logged:\n%s", d.log())
    # server_name: every node verified as it, whatever it is reached by
    with H.Daemon(cluster_daemon(x, "127.0.0.1:%d" % p0, server_name=NODE_NAME),
                  workers=1, ready=True) as d:
        H.ready_everywhere(d.port)
        for i in range(30):
            decided(d, "n%d" % i)
    with H.Daemon(cluster_daemon(x, "127.0.0.1:%d" % p0, server_name="localhost"),
                  workers=1, ready=False) as d:
        wait_log(d, FAILED_LINE, what="a node refused for server_name localhost")
        refused = {int(m) for m in re.findall(
            r'msg="redis TLS connection failed" server=127\.0\.0\.1:(\d+) '
            r'reason="certificate verification failed: hostname mismatch"', d.log())}
        check(refused and refused <= {nodes[1].port, nodes[2].port},
              "nodes refused for a server_name only the seed carries: %r (nodes %r)",
              refused, [n.port for n in nodes])


def t_cluster(x):
    admin = (x.ca_a[0], x.cli_a)
    nodes = []
    try:
        for srv in (x.srv_seed, x.srv_node, x.srv_node):
            nodes.append(TlsRedis("tls-cluster", srv, x.ca_a[0], admin, auth="yes", lines=[
                "cluster-enabled yes", "cluster-config-file nodes.conf",
                "cluster-node-timeout 5000", "cluster-require-full-coverage no",
                "tls-cluster yes", "tls-replication yes"]))
        r = subprocess.run([H.REDIS_CLI, "--tls", "--cacert", x.ca_a[0], "--cert", x.cli_a[0],
                            "--key", x.cli_a[1], "--cluster", "create"] +
                           ["127.0.0.1:%d" % n.port for n in nodes] +
                           ["--cluster-replicas", "0", "--cluster-yes"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        check(r.returncode == 0, "redis-cli --cluster create over TLS failed:\n%s",
              (r.stdout + r.stderr).decode("utf-8", "replace"))

        def consistent():
            for n in nodes:
                info = n.cmd("CLUSTER", "INFO")
                if "cluster_state:ok" not in info or "cluster_known_nodes:3" not in info:
                    return False
            return True
        H.wait_until(consistent, "cluster_state:ok on every TLS node")
        ports = sorted(s[2][1] for s in nodes[0].cmd("CLUSTER", "SLOTS"))
        eq(ports, sorted(n.port for n in nodes), "CLUSTER SLOTS ports (the TLS ones)")
        cluster_cases(x, nodes)
    finally:
        for n in nodes:
            n.kill()


def t_config_errors(x):
    """Files that cannot be read stop the start with the file named; a key
    without its certificate is a config error."""
    cfg = tls_conf("rediss://127.0.0.1:1/0", ca_file=os.path.join(H.tmpdir(), "absent.pem"))
    with H.Daemon(cfg, wait=False) as d:
        eq(d.wait(), 1, "exit code with an absent ca_file")
        check("absent.pem" in d.log(), "the absent ca_file not named:\n%s", d.log())
    cfg = tls_conf("rediss://127.0.0.1:1/0", key_file=x.cli_a[1])
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(cfg)])
    check(rc != 0 and "cert_file and key_file together" in out + err,
          "-t with key_file alone: exit %d, %r", rc, out + err)


def config_test(tls):
    """ratelimitd -t on a config with these redis.tls settings: (exit, output)."""
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(tls_conf("rediss://127.0.0.1:1/0",
                                                                  **tls))])
    return rc, out + err


def t_config_test_files(x):
    """-t reads the certificate files: each one that does not load fails the
    test with the field and the file named; an expired one is a warning."""
    garbage = os.path.join(H.tmpdir(), "garbage.pem")
    with open(garbage, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    absent = os.path.join(H.tmpdir(), "absent-ca.pem")
    bad = [
        ({"ca_file": absent}, r"redis\.tls: ca_file %s: cannot load" % re.escape(absent)),
        ({"ca_file": garbage}, r"redis\.tls: ca_file %s: cannot load" % re.escape(garbage)),
        ({"ca_file": x.ca_a[0], "cert_file": garbage, "key_file": x.cli_a[1]},
         r"redis\.tls: cert_file %s: cannot load" % re.escape(garbage)),
        ({"ca_file": x.ca_a[0], "cert_file": x.cli_a[0], "key_file": x.cli_b[1]},
         r"redis\.tls: key_file %s: the key does not match cert_file" % re.escape(x.cli_b[1])),
    ]
    for tls, want in bad:
        rc, out = config_test(tls)
        eq(rc, 1, "-t exit code with %r (%s)" % (tls, out))
        check(re.search(want, out), "-t with %r does not say %r:\n%s", tls, want, out)
        check("configuration OK" not in out, "-t said OK with %r", tls)
    rc, out = config_test({"ca_file": x.ca_a[0], "cert_file": x.expired[0],
                           "key_file": x.expired[1]})
    eq(rc, 0, "-t exit code with an expired client certificate (%s)" % out)
    check("configuration OK" in out, "-t did not say OK:\n%s", out)
    check(re.search(r'level=warn msg="redis TLS certificate expired" field=redis\.tls\.cert_file '
                    r'file=%s ' % re.escape(x.expired[0]), out),
          "no warning about the expired cert_file:\n%s", out)
    rc, out = config_test({"ca_file": x.ca_a[0], "cert_file": x.cli_a[0], "key_file": x.cli_a[1]})
    eq((rc, "configuration OK" in out, "level=warn" in out), (0, True, False),
       "-t with good files (%s)" % out)


CASES = [
    ("a check decided over TLS (rediss://, the CA given, SNI and name verified)", t_check_over_tls),
    ("a wrong CA: not ready, failure_mode open applied, one log line naming the reason",
     t_wrong_ca),
    ("a wrong CA with failure_mode closed: 503 backend unavailable", t_wrong_ca_closed),
    ("server_name that the certificate does not carry: refused", t_name_mismatch),
    ("verify false: connects to a certificate no trusted CA signed, with a warning", t_verify_off),
    ("an expired server certificate: refused, one log line", t_expired),
    ("mTLS required: no client certificate refused, one from the CA works, another CA's refused",
     t_mtls),
    ("the TLS server restarted mid-run: the daemon reconnects and decides", t_restart),
    ("SIGHUP with rotated certificates: tested with a handshake first, the open connection "
     "kept, the new files used for the next handshake", t_rotation),
    ("SIGHUP with files that cannot open the server (bad key, wrong CA, foreign client "
     "certificate): rejected, counted, checks decided, reconnects use the running files",
     t_rotation_refused),
    ("a TLS peer closing mid-record (in and after the handshake): survived, logged once",
     t_half_record),
    ("Sentinel over TLS: sentinel, master and replica (tls-replication)", t_sentinel),
    ("Cluster over TLS (tls-cluster yes): CLUSTER SLOTS gives TLS ports, checks decided; each "
     "node verified as the host it is reached by, or every one as server_name", t_cluster),
    ("bad TLS settings: an unreadable file stops the start; key_file alone is a config error",
     t_config_errors),
    ("ratelimitd -t loads the files: absent, not PEM, a key that does not match named with "
     "their field; an expired certificate a warning", t_config_test_files),
]


class Fixture:
    pass


@contextlib.contextmanager
def fixture():
    x = Fixture()
    pki = Pki()
    x.ca_a, x.ca_b = pki.ca("ca-a"), pki.ca("ca-b")
    x.srv_a = pki.leaf("server-a", x.ca_a)
    x.srv_b = pki.leaf("server-b", x.ca_b)
    x.expired = pki.leaf("server-expired", x.ca_a, days=-1)
    x.srv_seed = pki.leaf("server-seed", x.ca_a,
                          san="DNS:localhost,DNS:%s,IP:127.0.0.1" % NODE_NAME)
    x.srv_node = pki.leaf("server-node", x.ca_a, san="DNS:%s,IP:127.0.0.1" % NODE_NAME)
    x.cli_a = pki.leaf("client-a", x.ca_a, san="DNS:ratelimitd")
    x.cli_b = pki.leaf("client-b", x.ca_b, san="DNS:ratelimitd")
    x.standalone = TlsRedis("standalone", x.srv_a, x.ca_a[0], (x.ca_a[0], x.cli_a))
    try:
        yield x
    finally:
        x.standalone.kill()


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=240)
