#!/usr/bin/env python3
"""The gRPC listener (rls.listen): Envoy's rate limit service and gRPC health
checking, driven through the real daemon and a real Redis by real clients —
Debian's python3-grpcio (classes generated from src/proto with protoc), a
second implementation (@grpc/grpc-js), curl --http2-prior-knowledge for raw
framing, and hand-made HTTP/2 (python3-h2) for what no client sends: HTTP/1.1
and garbage on the port, a bad preface, oversized, malformed, compressed and
doubled messages, a wrong content-type, header blocks HTTP/2 makes malformed,
reset and PING floods, a client that
never reads.  Each is answered with an error or a close, and the daemon serves
the next call.  Then health as the backend comes and goes (failure_mode closed
and local) and while draining, SIGTERM with calls in flight, grpc-timeout,
exact counts with several channels on two daemons sharing one Redis (also on
Cluster and Sentinel: RL_TOPOLOGY), rls.all_or_nothing (a pair with one over
counts nothing; exact under concurrency; a config error on Cluster), TLS and
mutual TLS with SIGHUP rotation, the transport's metrics.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
from harness import check, eq, wait_for  # noqa: E402

DOMAIN = "rl-test"
RULES = """\
domain: rl-test
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: client
    rate_limit:
      unit: hour
      requests_per_unit: 50
  - key: big
    rate_limit:
      unit: hour
      requests_per_unit: 1000000000
"""


def write_rules(text=RULES, name="rules.yaml"):
    d = os.path.join(H.tmpdir(), "rules-%s" % uuid.uuid4().hex[:8])
    os.makedirs(d)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def conf(rls_port, rules, failure="open", tls=None, **rls):
    r = {"listen": "127.0.0.1:%d" % rls_port, "config": rules}
    if tls:
        r["tls"] = tls
    r.update(rls)
    return {"failure_mode": failure, "redis": {"timeout": "2s"}, "rls": r}


class RlsDaemon(H.Daemon):
    """A daemon with rls.listen on a port of its own (.rls_port)."""

    def __init__(self, redis=None, failure="open", tls=None, rules=None, workers=2, backend=None,
                 **rls):
        self.rls_port = H.free_port()
        self.rules = rules or write_rules()
        super().__init__(conf(self.rls_port, self.rules, failure, tls, **rls), redis=redis,
                         workers=workers, backend=backend)
        if not H.port_open(self.rls_port):
            self.kill()
            raise H.DaemonError("rls.listen %d not open; log:\n%s" % (self.rls_port, self.log()))


def metric(d, name, labels=None):
    st, _, body = H.request(d.port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    want = name + ("{%s}" % labels if labels else "")
    for line in body.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    raise H.Fail("no metric %s in /metrics" % want)


def serves(port, what=""):
    """The listener still answers a real client."""
    with G.Client(port) as c:
        eq(c.health(""), "SERVING", "Health/Check after %s" % what)


def one(key, value):
    return [[(key, value)]]


# ------------------------------------------------------------------ calls

def t_should_rate_limit(x):
    d, c = x.a, x.ca
    v = uuid.uuid4().hex
    for i in range(5):
        r = c.check(DOMAIN, one("remote_address", v))
        eq(x.pb.rls.RateLimitResponse.Code.Name(r.overall_code), "OK", "call %d overall" % i)
        eq(len(r.statuses), 1, "statuses")
        st = r.statuses[0]
        eq(st.current_limit.requests_per_unit, 5, "current_limit.requests_per_unit")
        eq(x.pb.rls.RateLimitResponse.RateLimit.Unit.Name(st.current_limit.unit), "MINUTE", "unit")
        eq(st.limit_remaining, 4 - i, "limit_remaining after %d" % (i + 1))
        check(0 < st.duration_until_reset.seconds <= 60, "duration_until_reset %r",
              st.duration_until_reset)
    r = c.check(DOMAIN, one("remote_address", v))
    eq(x.pb.rls.RateLimitResponse.Code.Name(r.overall_code), "OVER_LIMIT", "the sixth call")
    # several descriptors: one status each, in order; one no rule matches
    r = c.check(DOMAIN, [[("remote_address", v)], [("nothing", "here")],
                         [("client", uuid.uuid4().hex)]])
    eq([x.pb.rls.RateLimitResponse.Code.Name(s.code) for s in r.statuses],
       ["OVER_LIMIT", "OK", "OK"], "codes per descriptor")
    check(not r.statuses[1].HasField("current_limit"), "a descriptor no rule matched has a limit")
    eq(r.statuses[2].current_limit.requests_per_unit, 50, "the third's limit")
    # an empty domain is the request's fault
    eq(G.status_of(c.check, "", one("client", "x"))[0], "INVALID_ARGUMENT", "empty domain")


def t_health(x):
    c = x.ca
    eq(c.health(""), "SERVING", "service \"\"")
    eq(c.health("ratelimit"), "SERVING", "service ratelimit")
    code, details = G.status_of(c.health, "envoy.service.ratelimit.v3.RateLimitService.x")
    eq(code, "NOT_FOUND", "unknown service (%s)" % details)
    code, _ = G.status_of(c.call, "/grpc.health.v1.Health/Watch", b"")
    eq(code, "UNIMPLEMENTED", "Health/Watch (streaming)")
    code, details = G.status_of(c.call, "/no.such.Service/Method", b"")
    eq(code, "UNIMPLEMENTED", "an unknown method")
    check("ShouldRateLimit" in details, "the unknown method's message names ours: %r", details)


def t_grpc_js(x):
    v = uuid.uuid4().hex
    calls = [{"method": "ShouldRateLimit",
              "request": {"domain": DOMAIN, "descriptors": [
                  {"entries": [{"key": "client", "value": v}]}]}} for _ in range(60)]
    calls += [{"method": "Check", "request": {"service": "ratelimit"}},
              {"method": "Check", "request": {"service": "nope"}},
              {"method": "ShouldRateLimit", "request": {"domain": ""}}]
    res = G.node_client({"target": "127.0.0.1:%d" % x.a.rls_port, "channels": 4, "calls": calls})
    eq(len(res), len(calls), "answers")
    codes = [r["response"]["overall_code"] for r in res[:60] if r["code"] == 0]
    eq(len(codes), 60, "ShouldRateLimit answered OK by grpc-js (%r)" % res[:2])
    eq(codes.count("OK"), 50, "allowed of 60 under a limit of 50")
    eq(codes.count("OVER_LIMIT"), 10, "over the limit")
    eq(res[60]["response"]["status"], "SERVING", "Health/Check through grpc-js")
    eq(res[61]["code"], 5, "NOT_FOUND through grpc-js")
    eq(res[62]["code"], 3, "INVALID_ARGUMENT through grpc-js")


def t_curl(x):
    if shutil.which("curl") is None:
        raise H.HarnessError("curl not found in PATH")
    msg = G.request(DOMAIN, one("client", uuid.uuid4().hex)).SerializeToString()
    body = os.path.join(H.tmpdir(), "curl-body.bin")
    with open(body, "wb") as f:
        f.write(G.frame(msg))
    url = "http://127.0.0.1:%d%s" % (x.a.rls_port, G.SHOULD_RATE_LIMIT)
    r = subprocess.run(["curl", "-sS", "-i", "--http2-prior-knowledge", "-H",
                        "content-type: application/grpc", "-H", "te: trailers",
                        "--data-binary", "@" + body, url], capture_output=True, timeout=30)
    eq(r.returncode, 0, "curl exit (%s)" % r.stderr.decode())
    out = r.stdout
    check(out.startswith(b"HTTP/2 200"), "status line: %r", out[:40])
    check(re.search(rb"(?i)content-type: application/grpc", out), "content-type: %r", out)
    # the framed message, then the trailers curl prints after it
    i = out.index(b"\r\n\r\n") + 4
    n = int.from_bytes(out[i + 1:i + 5], "big")
    eq(out[i], 0, "compressed flag")
    resp = x.pb.rls.RateLimitResponse.FromString(out[i + 5:i + 5 + n])
    eq(resp.statuses[0].current_limit.requests_per_unit, 50, "the decoded answer's limit")
    check(b"grpc-status: 0" in out[i + 5 + n:], "trailers after the message: %r", out[i + 5 + n:])
    # not POST, not gRPC
    r = subprocess.run(["curl", "-sS", "-i", "--http2-prior-knowledge", url],
                       capture_output=True, timeout=30)
    check(r.stdout.startswith(b"HTTP/2 405"), "GET: %r", r.stdout[:80])
    r = subprocess.run(["curl", "-sS", "-i", "--http2-prior-knowledge", "-H",
                        "content-type: application/json", "--data-binary", "{}", url],
                       capture_output=True, timeout=30)
    check(r.stdout.startswith(b"HTTP/2 415"), "content-type application/json: %r", r.stdout[:80])


# -------------------------------------------------------------- bad input

def t_not_http2(x):
    port = x.a.rls_port
    before = metric(x.a, "ratelimitd_rls_refused_total", 'reason="preface"')
    with H.RawConn(port) as c:
        c.send(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        st, hdrs, body = c.read_response()
        eq(st, 505, "HTTP/1.1 on the gRPC port")
        check(b"HTTP/2" in body, "the answer says what the port speaks: %r", body)
        check(c.is_closed(wait=5.0), "closed after the answer")
    for junk in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(40),  # TLS to h2c
                 os.urandom(300), b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(5 * H.SLOW)
            got = b""
            try:
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    got += b
            except socket.timeout:
                raise H.Fail("not closed after %r" % junk[:20])
            check(b"HTTP/1.1" not in got, "an HTTP/1.1 answer to %r", junk[:20])
    eq(metric(x.a, "ratelimitd_rls_refused_total", 'reason="preface"') - before, 4,
       "refused prefaces counted")
    serves(port, "HTTP/1.1 and garbage")


def t_bad_messages(x):
    pb, port = x.pb, x.a.rls_port
    good = G.request(DOMAIN, one("client", uuid.uuid4().hex)).SerializeToString()
    cases = [
        ("oversized (max_message 4096)", G.frame(b"\x0a" + b"\x80\x40" + b"a" * 8192),
         None, "RESOURCE_EXHAUSTED"),
        ("not a RateLimitRequest", G.frame(b"\x0a\x05ab"), None, "INTERNAL"),
        ("compressed without grpc-encoding", G.frame(good, compressed=True), None, "INTERNAL"),
        ("compressed with gzip", G.frame(good, compressed=True),
         [("grpc-encoding", "gzip")], "UNIMPLEMENTED"),
        ("two messages", G.frame(good) + G.frame(good), None, "INTERNAL"),
        ("no message", b"", None, "INTERNAL"),
        ("a cut message", G.frame(good)[:-2], None, "INTERNAL"),
        ("a bad compressed flag", b"\x07" + G.frame(good)[1:], None, "INTERNAL"),
        ("grpc-timeout malformed", G.frame(good), [("grpc-timeout", "soon")], "INTERNAL"),
        ("grpc-timeout 0", G.frame(good), [("grpc-timeout", "0m")], "DEADLINE_EXCEEDED"),
        ("a header list past max_header_list", G.frame(good),
         [("x-pad-%d" % i, "v" * 1000) for i in range(12)], "RESOURCE_EXHAUSTED"),
    ]
    number = {"INTERNAL": "13", "RESOURCE_EXHAUSTED": "8", "UNIMPLEMENTED": "12",
              "DEADLINE_EXCEEDED": "4"}
    with G.Raw(port) as r:
        for what, body, extra, want in cases:
            sid = r.request(G.SHOULD_RATE_LIMIT, body,
                            headers=G.Raw.GRPC_HEADERS + (extra or []))
            hdrs, _ = r.answer(sid)
            eq(hdrs.get("grpc-status"), number[want], "%s: grpc-status (%r)" % (what, hdrs))
            check(hdrs.get("grpc-message"), "%s: no grpc-message", what)
        # and the same connection still answers
        sid = r.request(G.SHOULD_RATE_LIMIT, G.frame(good))
        hdrs, data = r.answer(sid)
        eq(hdrs.get("grpc-status"), "0", "a good call after the bad ones")
        resp = pb.rls.RateLimitResponse.FromString(data[5:])
        eq(resp.statuses[0].current_limit.requests_per_unit, 50, "its answer")
    serves(port, "bad messages")


def t_malformed_requests(x):
    """Requests HTTP/2 makes malformed (RFC 9113 8.1.1, 8.2, 8.3): each
    stream reset with PROTOCOL_ERROR, never answered, and the connection
    goes on.  nghttp2 checks these today; whoever takes HTTP's checks from
    it (its no_http_messaging option: ~1,900 instructions a call) keeps
    them."""
    pb, port = x.pb, x.a.rls_port
    good = G.frame(G.request(DOMAIN, one("client", uuid.uuid4().hex)).SerializeToString())
    base = [(":method", "POST"), (":scheme", "http"), (":path", G.SHOULD_RATE_LIMIT),
            (":authority", "127.0.0.1")] + G.Raw.GRPC_HEADERS
    cases = [
        ("an upper-case header name", base + [("X-Upper", "1")], good, None),
        ("a header value with leading whitespace", base + [("x-pad", " 1")], good, None),
        ("a header value with a line feed", base + [("x-pad", "1\n2")], good, None),
        ("no :scheme", [h for h in base if h[0] != ":scheme"], good, None),
        ("no :authority (nor host)", [h for h in base if h[0] != ":authority"], good, None),
        ("no :path", [h for h in base if h[0] != ":path"], good, None),
        ("a pseudo-header after a regular one", base + [(":authority", "127.0.0.1")],
         good, None),
        ("a pseudo-header given twice", base[:3] + [(":path", G.SHOULD_RATE_LIMIT)] + base[3:],
         good, None),
        ("an unknown pseudo-header", base[:4] + [(":status", "200")] + base[4:], good, None),
        ("a connection-specific header", base + [("connection", "keep-alive")], good, None),
        ("te other than trailers", [h for h in base if h[0] != "te"] + [("te", "gzip")],
         good, None),
        ("a :path with a space", [(k, v + " x" if k == ":path" else v) for k, v in base],
         good, None),
        ("a content-length the data does not match",
         base + [("content-length", str(len(good) - 1))], good, None),
        ("trailers that do not end the stream", base, good, [("x-trailer", "1")]),
    ]
    with G.Raw(port) as r:
        for what, hdrs, body, trailers in cases:
            sid = r.conn.get_next_available_stream_id()
            r.conn.send_headers(sid, hdrs)
            r.conn.send_data(sid, body, end_stream=trailers is None)
            r.flush()
            if trailers is not None:  # h2 will not send these: by hand
                r.send_raw(G.h2_frame(0x1, 0x4, sid, r.conn.encoder.encode(trailers)))
            check(r.until(lambda r: r.ended(sid)), "%s: the stream did not end" % what)
            resets = [ev for ev in r.events
                      if isinstance(ev, G.h2.events.StreamReset) and ev.stream_id == sid]
            check(resets and resets[0].error_code == 1,  # PROTOCOL_ERROR
                  "%s: not reset with PROTOCOL_ERROR (%r)", what, resets)
            eq(r.headers_of(sid), {}, "%s: answered" % what)
        # and the same connection still answers
        sid = r.request(G.SHOULD_RATE_LIMIT, good)
        hdrs, data = r.answer(sid)
        eq(hdrs.get("grpc-status"), "0", "a good call after the malformed ones")
        resp = pb.rls.RateLimitResponse.FromString(data[5:])
        eq(resp.statuses[0].current_limit.requests_per_unit, 50, "its answer")
    serves(port, "malformed requests")


def t_reset_flood(x):
    port = x.a.rls_port
    before = metric(x.a, "ratelimitd_rls_refused_total", 'reason="protocol"')
    good = G.frame(G.request(DOMAIN, one("big", "flood")).SerializeToString())
    with G.Raw(port) as r:
        # Rapid reset (CVE-2023-44487): open and cancel, over and over
        for _ in range(3000):
            sid = r.conn.get_next_available_stream_id()
            r.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                      (":path", G.SHOULD_RATE_LIMIT), (":authority", "x")]
                                + G.Raw.GRPC_HEADERS)
            for _ in range(20):
                try:
                    r.conn.send_data(sid, good, end_stream=True)
                    break
                except G.h2.exceptions.FlowControlError:
                    # a slow daemon's WINDOW_UPDATEs are still unread: read them
                    try:
                        r.flush()
                    except OSError:
                        break  # the daemon ended the connection
                    r.read(1.0)
                    if r.goaway is not None or r.closed:
                        break
            if r.goaway is not None or r.closed:
                break
            r.conn.reset_stream(sid)
            try:
                r.flush()
            except OSError:
                break
        r.until(lambda r: r.goaway is not None or r.closed, 20 * H.SLOW)
        check(r.goaway is not None or r.closed, "the flood was not stopped")
        if r.goaway is not None:
            check(r.goaway.error_code != 0, "GOAWAY without an error: %r", r.goaway)
    wait_for(lambda: metric(x.a, "ratelimitd_rls_refused_total", 'reason="protocol"') > before,
             "the flood counted")
    check(x.a.alive(), "the daemon died")
    serves(port, "a reset flood")


def t_ping_flood(x):
    """PINGs sent and their answers never read: the daemon stops reading,
    nghttp2 ends the session past its queue of acknowledgements, memory
    stays bounded."""
    port = x.a.rls_port
    rss0 = rss(x.a)
    with G.Raw(port) as r:
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        r.sock.settimeout(0.5)
        sent = 0
        deadline = time.monotonic() + 20 * H.SLOW
        ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"
        try:
            while time.monotonic() < deadline and sent < 2000000:
                r.sock.sendall(ping * 1000)
                sent += 1000
        except (socket.timeout, OSError):
            pass
        check(sent < 2000000, "2 million PINGs taken without pushing back")
    if H.RSS_MEANINGFUL:
        check(rss(x.a) - rss0 < 64 * 1024, "RSS grew by %d KiB under a PING flood",
              rss(x.a) - rss0)
    serves(port, "a PING flood")


def rss(d):
    with open("/proc/%d/status" % d.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def t_slow_reader(x):
    """A client that opens every stream it may and reads nothing (its
    receive window 0, so no answer can complete): the daemon holds at most
    max_concurrent_streams answers, its memory stays bounded, and after
    idle_timeout without progress the connection is closed."""
    with RlsDaemon(x.redis, workers=1, idle_timeout="1s") as d:
        good = G.frame(G.request(DOMAIN, one("big", "slow")).SerializeToString())
        rss0 = rss(d)
        with G.Raw(d.rls_port) as r:
            r.conn.update_settings({G.h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
            r.flush()
            r.until(lambda r: any(isinstance(e, G.h2.events.RemoteSettingsChanged)
                                  for e in r.events), 5 * H.SLOW)
            sent = 0
            try:
                for _ in range(1000):
                    r.request(G.SHOULD_RATE_LIMIT, good)
                    sent += 1
            except G.h2.exceptions.TooManyStreamsError:
                pass  # the daemon's SETTINGS said 100
            eq(sent, 100, "calls the client could open")
            wait_for(lambda: metric(d, "ratelimitd_rls_streams_total") >= 100, "100 calls read")
            if H.RSS_MEANINGFUL:
                check(rss(d) - rss0 < 16 * 1024, "RSS grew by %d KiB", rss(d) - rss0)
            wait_for(lambda: metric(d, "ratelimitd_rls_idle_closes_total") >= 1,
                     "the stuck connection closed after idle_timeout", timeout=20)
            check(r.until(lambda r: r.closed, 10 * H.SLOW), "the connection was not closed")
        serves(d.rls_port, "a client that did not read")


def t_limits(x):
    """SETTINGS say max_concurrent_streams and the header list; a third
    connection waits for max_connections; idle connections get GOAWAY."""
    with RlsDaemon(x.redis, workers=1, max_concurrent_streams=3, max_connections=2,
                   max_header_list="4k") as d:
        with G.Raw(d.rls_port) as r, G.Raw(d.rls_port) as r2:
            r.until(lambda r: any(isinstance(e, G.h2.events.RemoteSettingsChanged)
                                  for e in r.events), 5 * H.SLOW)
            s = [e for e in r.events if isinstance(e, G.h2.events.RemoteSettingsChanged)][0]
            eq(s.changed_settings[3].new_value, 3, "SETTINGS_MAX_CONCURRENT_STREAMS")
            eq(s.changed_settings[6].new_value, 4096, "SETTINGS_MAX_HEADER_LIST_SIZE")
            r2.until(lambda r: r.events, 5 * H.SLOW)
            with G.Raw(d.rls_port) as r3:
                r3.until(lambda r: r.events, 1.5)
                eq(r3.events, [], "a third connection served past max_connections 2")
                eq(metric(d, "ratelimitd_rls_connections_open"), 2, "connections open")
                r.close()
                check(r3.until(lambda r: r.events, 5 * H.SLOW), "the third not served once one closed")
    with RlsDaemon(x.redis, workers=1, idle_timeout="500ms") as d:
        with G.Raw(d.rls_port) as r:
            r.until(lambda r: r.goaway is not None or r.closed, 10 * H.SLOW)
            check(r.goaway is not None, "no GOAWAY for an idle connection")
            eq(r.goaway.error_code, 0, "idle GOAWAY's error code")
        check(metric(d, "ratelimitd_rls_idle_closes_total") >= 1, "idle closes counted")


# ----------------------------------------------------------------- health

def t_health_backend(x):
    """failure_mode closed: NOT_SERVING while Redis is away; local: SERVING
    (it answers from memory); both SERVING when Redis is back."""
    if x.redis.topology != "standalone":
        return  # stopping and restarting one Redis is standalone's fault
    with H.Redis() as redis:
        with RlsDaemon(redis, failure="closed", workers=2) as closed, \
                RlsDaemon(redis, failure="local", workers=2) as local:
            with G.Client(closed.rls_port) as cc, G.Client(local.rls_port) as cl:
                eq(cc.health(""), "SERVING", "closed, Redis up")
                redis.stop()
                wait_for(lambda: cc.health("ratelimit") == "NOT_SERVING",
                         "closed: NOT_SERVING without Redis")
                eq(cl.health("ratelimit"), "SERVING", "local without Redis")
                code, _ = G.status_of(cc.check, DOMAIN, one("client", "down"))
                eq(code, "UNAVAILABLE", "closed: a check without Redis")
                redis.restart()
                wait_for(lambda: cc.health("") == "SERVING", "closed: SERVING again")


def t_health_draining(x):
    """While draining, a Health/Check read after SIGTERM (its stream opened
    before the GOAWAY, its message sent after) says NOT_SERVING; a call in
    flight at SIGTERM is answered; exit 0."""
    with H.Redis(topology="standalone") as redis:
        with RlsDaemon(redis, workers=1) as d:
            with G.Client(d.rls_port) as c, G.Raw(d.rls_port) as r:
                eq(c.health(""), "SERVING", "before")
                redis.pause()
                fut = c.check_future(DOMAIN, one("client", "held"), timeout=30 * H.SLOW)
                wait_for(lambda: metric(d, "ratelimitd_inflight_checks") >= 1,
                         "a check in flight")
                opened = metric(d, "ratelimitd_rls_streams_total")
                sid = r.request(G.HEALTH_CHECK, None, end=False)
                wait_for(lambda: metric(d, "ratelimitd_rls_streams_total") > opened,
                         "the health call's stream read")
                d.send_signal(signal.SIGTERM)
                r.until(lambda r: r.goaway is not None, 10 * H.SLOW)
                check(r.goaway is not None, "no GOAWAY on SIGTERM")
                eq(r.goaway.last_stream_id, sid, "GOAWAY's last stream")
                # the h2 library sends nothing after a GOAWAY: the frame by hand
                r.send_raw(G.h2_frame(0, 0x1, sid, G.frame(b"")))
                hdrs, data = r.answer_after_goaway(sid)
                eq(hdrs.get("grpc-status"), "0", "the health call read after SIGTERM")
                eq(x.pb.health.HealthCheckResponse.ServingStatus.Name(
                    x.pb.health.HealthCheckResponse.FromString(data[5:]).status),
                   "NOT_SERVING", "health while draining")
                redis.resume()
                r2 = fut.result(timeout=30 * H.SLOW)
                eq(x.pb.rls.RateLimitResponse.Code.Name(r2.overall_code), "OK",
                   "the call in flight at SIGTERM answered")
            eq(d.wait(), 0, "exit code after the drain")


def t_sigterm_in_flight(x):
    """SIGTERM with calls in flight on several connections: GOAWAY naming
    the last stream read, every stream read answered, exit 0."""
    with H.Redis(topology="standalone") as redis:
        with RlsDaemon(redis, workers=2) as d:
            clients = [G.Client(d.rls_port) for _ in range(4)]
            try:
                for c in clients:
                    c.health("")
                redis.pause()
                futs = [c.check_future(DOMAIN, one("client", "t%d" % i), timeout=30 * H.SLOW)
                        for i, c in enumerate(clients) for _ in range(5)]
                wait_for(lambda: metric(d, "ratelimitd_inflight_checks") >= 20,
                         "20 checks in flight")
                with G.Raw(d.rls_port) as r:
                    r.until(lambda r: r.events, 5 * H.SLOW)
                    d.send_signal(signal.SIGTERM)
                    r.until(lambda r: r.goaway is not None or r.closed, 10 * H.SLOW)
                    check(r.goaway is not None, "no GOAWAY on SIGTERM")
                    eq(r.goaway.error_code, 0, "GOAWAY's error code")
                redis.resume()
                codes = []
                for f in futs:
                    try:
                        f.result(timeout=30 * H.SLOW)
                        codes.append("OK")
                    except G.grpc.RpcError as e:
                        codes.append(e.code().name)
                eq(codes, ["OK"] * 20, "every call read before SIGTERM answered")
            finally:
                for c in clients:
                    c.close()
            eq(d.wait(), 0, "exit code")


def t_deadline_and_reset(x):
    """grpc-timeout passes while Redis is away: DEADLINE_EXCEEDED from the
    transport; a call the client resets while in flight is answered into
    nothing (counted), and the daemon goes on."""
    with H.Redis(topology="standalone") as redis:
        with RlsDaemon(redis, workers=1) as d:
            with G.Client(d.rls_port) as c:
                c.health("")
                redis.pause()
                t0 = time.monotonic()
                code, _ = G.status_of(c.check, DOMAIN, one("client", "dl"), timeout=0.3)
                eq(code, "DEADLINE_EXCEEDED", "a call past its deadline")
                check(time.monotonic() - t0 < 1.5 * H.SLOW, "the deadline took %.2fs",
                      time.monotonic() - t0)
                before = metric(d, "ratelimitd_rls_streams_cancelled_total")
                with G.Raw(d.rls_port) as r:
                    good = G.frame(G.request(DOMAIN, one("client", "rst")).SerializeToString())
                    sids = [r.request(G.SHOULD_RATE_LIMIT, good) for _ in range(10)]
                    wait_for(lambda: metric(d, "ratelimitd_inflight_checks") >= 10, "in flight")
                    for sid in sids:
                        r.conn.reset_stream(sid)
                    r.flush()
                    wait_for(lambda: metric(d, "ratelimitd_rls_streams_cancelled_total")
                             >= before + 10, "resets counted")
                redis.resume()
                wait_for(lambda: metric(d, "ratelimitd_inflight_checks") == 0,
                         "the reset calls' checks finished")
                r = c.check(DOMAIN, one("client", "after"))
                eq(x.pb.rls.RateLimitResponse.Code.Name(r.overall_code), "OK", "a call after")


# ------------------------------------------------------------ concurrency

def at_once(x, daemons, domain, descriptors, per_client=19):
    """4 channels per daemon, each sending per_client calls of descriptors at
    once (after a barrier): the overall codes of every answer.  The channels
    connect first, one after another: what is tested is the calls at once,
    and 8 connects at once to a daemon under valgrind can outlast gRPC's
    20 s connect deadline.  The 152 calls' waits are scaled by H.SLOW: a
    daemon under valgrind on a loaded host answers them in tens of seconds."""
    clients = [G.Client(d.rls_port) for d in daemons for _ in range(4)]
    for c in clients:
        c.wait_ready()
    results, errors = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(len(clients))

    def run(c):
        out = []
        try:
            barrier.wait(timeout=30 * H.SLOW)
            futs = [c.check_future(domain, descriptors) for _ in range(per_client)]
            out = [x.pb.rls.RateLimitResponse.Code.Name(f.result(timeout=30 * H.SLOW).overall_code)
                   for f in futs]
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(repr(e))
        with lock:
            results.extend(out)

    ts = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60 * H.SLOW)
    for c in clients:
        c.close()
    check(not errors, "client errors: %s", errors[:3])
    eq(len(results), len(clients) * per_client, "answers")
    return results


def t_exact_counts(x):
    """8 channels across two daemons sharing one Redis, 3x the limit of
    calls at once: exactly the limit OK."""
    results = at_once(x, (x.a, x.b), DOMAIN, one("client", uuid.uuid4().hex))
    eq(results.count("OK"), 50, "OK answers under a limit of 50 (152 calls, 2 daemons)")


# ---------------------------------------------------------- all or nothing

AON_RULES = """\
domain: rl-aon
descriptors:
  - {key: small, rate_limit: {unit: day, requests_per_unit: 3}}
  - {key: fifty, rate_limit: {unit: day, requests_per_unit: 50}}
  - {key: large, rate_limit: {unit: day, requests_per_unit: 1000}}
"""


def remaining(c, key, value):
    """limit_remaining after one more hit of (key, value) alone."""
    return c.check("rl-aon", one(key, value)).statuses[0].limit_remaining


def t_all_or_nothing(x):
    """rls.all_or_nothing: a request one of whose descriptors is over counts
    in none; without it (the fixture's daemons) the other one counts.  On a
    Cluster the option is a config error."""
    rules = write_rules(AON_RULES)
    if x.redis.topology == "cluster":
        try:
            with RlsDaemon(x.redis, rules=rules, all_or_nothing=True):
                pass
        except H.DaemonError as e:
            check("rls.all_or_nothing" in str(e) and "Cluster" in str(e),
                  "the refusal does not name rls.all_or_nothing: %s", str(e)[-400:])
            return
        raise H.Fail("a Cluster daemon started with rls.all_or_nothing")
    code = x.pb.rls.RateLimitResponse.Code.Name
    with RlsDaemon(x.redis, rules=rules, all_or_nothing=True) as aon, \
            RlsDaemon(x.redis, rules=rules) as each:
        with G.Client(aon.rls_port) as ca, G.Client(each.rls_port) as ce:
            for c, on in ((ca, True), (ce, False)):
                v = uuid.uuid4().hex
                # both fit: both counted
                r = c.check("rl-aon", [[("large", v)], [("small", v)]])
                eq(code(r.overall_code), "OK", "a pair that fits")
                eq([s.limit_remaining for s in r.statuses], [999, 2], "both counted")
                for _ in range(2):
                    c.check("rl-aon", one("small", v))
                # small is over: large counted only without the option
                r = c.check("rl-aon", [[("large", v)], [("small", v)]])
                eq(code(r.overall_code), "OVER_LIMIT", "small over (all_or_nothing %s)" % on)
                eq([code(s.code) for s in r.statuses], ["OK", "OVER_LIMIT"],
                   "each status its own limit's")
                eq(remaining(c, "large", v), 998 if on else 997,
                   "large after a denied pair (all_or_nothing %s)" % on)


def t_all_or_nothing_exact(x):
    """8 channels on two all_or_nothing daemons sharing one Redis, 152 calls
    at once of [fifty, large]: exactly 50 OK, and large counted exactly 50
    times (each denied call counted nothing)."""
    if x.redis.topology == "cluster":
        return  # a config error there (t_all_or_nothing)
    rules = write_rules(AON_RULES)
    v = uuid.uuid4().hex
    with RlsDaemon(x.redis, rules=rules, all_or_nothing=True) as a, \
            RlsDaemon(x.redis, rules=rules, all_or_nothing=True) as b:
        results = at_once(x, (a, b), "rl-aon", [[("fifty", v)], [("large", v)]])
        eq(results.count("OK"), 50, "OK answers under a limit of 50 (152 calls, 2 daemons)")
        with G.Client(a.rls_port) as c:
            eq(remaining(c, "large", v), 1000 - 50 - 1,
               "large counted by the 50 admitted calls only")


# -------------------------------------------------------------------- TLS

def t_tls(x):
    pki = H.Pki()
    ca = pki.ca("rls-ca")
    other = pki.ca("rls-other")
    srv = pki.leaf("rls-server", ca)
    cli = pki.leaf("rls-client", ca)
    foreign = pki.leaf("rls-foreign", other)

    def read(p):
        with open(p, "rb") as f:
            return f.read()

    tls = {"cert_file": srv[0], "key_file": srv[1]}
    with RlsDaemon(x.redis, tls=tls, workers=2) as d:
        creds = G.grpc.ssl_channel_credentials(root_certificates=read(ca[0]))
        with G.Client(d.rls_port, creds=creds, name="localhost") as c:
            eq(c.health(""), "SERVING", "Health/Check over TLS")
            r = c.check(DOMAIN, one("client", uuid.uuid4().hex))
            eq(r.statuses[0].current_limit.requests_per_unit, 50, "ShouldRateLimit over TLS")
        res = G.node_client({"target": "localhost:%d" % d.rls_port, "tls": {"ca": ca[0]},
                             "calls": [{"method": "Check", "request": {"service": ""}}]})
        eq(res[0].get("response"), {"status": "SERVING"}, "grpc-js over TLS")
        # h2c to the TLS port: refused, counted.  The refusals below are
        # UNAVAILABLE; a deadline (or a socket timeout, which bounds a
        # handshake) shorter than a daemon under valgrind takes to answer
        # would turn them into DEADLINE_EXCEEDED: the harness's timeouts.
        with G.Client(d.rls_port) as c:
            eq(G.status_of(c.health, "", timeout=H.HTTP_TIMEOUT)[0], "UNAVAILABLE",
               "h2c on the TLS port")
        # ALPN without h2: refused in the handshake
        import ssl
        ctx = ssl.create_default_context(cafile=ca[0])
        ctx.set_alpn_protocols(["http/1.1"])
        with socket.create_connection(("127.0.0.1", d.rls_port), timeout=H.HTTP_TIMEOUT) as s:
            try:
                with ctx.wrap_socket(s, server_hostname="localhost"):
                    raise H.Fail("a handshake offering only http/1.1 succeeded")
            except ssl.SSLError:
                pass
        check(metric(d, "ratelimitd_rls_refused_total", 'reason="tls"') >= 2,
              "failed handshakes counted")

    tls = {"cert_file": srv[0], "key_file": srv[1], "client_ca_file": ca[0]}
    with RlsDaemon(x.redis, tls=tls, workers=1) as d:
        good = G.grpc.ssl_channel_credentials(root_certificates=read(ca[0]),
                                              private_key=read(cli[1]),
                                              certificate_chain=read(cli[0]))
        with G.Client(d.rls_port, creds=good, name="localhost") as c:
            eq(c.health(""), "SERVING", "mTLS with a client certificate the CA signed")
        none = G.grpc.ssl_channel_credentials(root_certificates=read(ca[0]))
        with G.Client(d.rls_port, creds=none, name="localhost") as c:
            eq(G.status_of(c.health, "", timeout=H.HTTP_TIMEOUT)[0], "UNAVAILABLE",
               "mTLS without a certificate")
        bad = G.grpc.ssl_channel_credentials(root_certificates=read(ca[0]),
                                             private_key=read(foreign[1]),
                                             certificate_chain=read(foreign[0]))
        with G.Client(d.rls_port, creds=bad, name="localhost") as c:
            eq(G.status_of(c.health, "", timeout=H.HTTP_TIMEOUT)[0], "UNAVAILABLE",
               "another CA's certificate")


def t_tls_rotation(x):
    """SIGHUP reads rls.tls's files again: new handshakes show the new
    certificate; a file that does not load keeps the running ones."""
    pki = H.Pki()
    ca = pki.ca("rot-ca")
    first = pki.leaf("rot-first", ca)
    second = pki.leaf("rot-second", ca)
    crt = os.path.join(H.tmpdir(), "rot-server.crt")
    key = os.path.join(H.tmpdir(), "rot-server.key")
    shutil.copy(first[0], crt)
    shutil.copy(first[1], key)
    import ssl

    def peer_cn(port):
        ctx = ssl.create_default_context(cafile=ca[0])
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", port), timeout=H.HTTP_TIMEOUT) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                eq(t.selected_alpn_protocol(), "h2", "ALPN")
                return dict(x[0] for x in t.getpeercert()["subject"])["commonName"]

    with RlsDaemon(x.redis, tls={"cert_file": crt, "key_file": key}, workers=1) as d:
        eq(peer_cn(d.rls_port), "rot-first", "the first certificate")
        shutil.copy(second[0], crt)
        shutil.copy(second[1], key)
        d.reload()
        wait_for(lambda: peer_cn(d.rls_port) == "rot-second", "the rotated certificate")
        with open(key, "w") as f:
            f.write("not a key\n")
        d.reload()
        wait_for(lambda: metric(d, "ratelimitd_config_reloads_total", 'result="failed"') >= 1,
                 "the reload with a bad key refused")
        check(re.search(r"rls\.tls: key_file %s" % re.escape(key), d.log()),
              "the refusal names rls.tls key_file:\n%s", d.log()[-2000:])
        eq(peer_cn(d.rls_port), "rot-second", "the running certificate kept")


def t_config_test(x):
    rules = write_rules()
    absent = os.path.join(H.tmpdir(), "absent.pem")
    path = H.write_config(conf(H.free_port(), rules,
                               tls={"cert_file": absent, "key_file": absent}))
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 1, "-t with an absent rls.tls cert_file (%s)" % err)
    check(re.search(r"rls\.tls: cert_file %s: cannot load" % re.escape(absent), err),
          "-t does not name rls.tls cert_file: %s", err)


def t_metrics(x):
    d = x.a
    calls0 = metric(d, "ratelimitd_rls_streams_total")
    ok0 = metric(d, "ratelimitd_rls_responses_total", 'grpc_status="OK"')
    nf0 = metric(d, "ratelimitd_rls_responses_total", 'grpc_status="NOT_FOUND"')
    with G.Client(d.rls_port) as c:
        for _ in range(3):
            c.check(DOMAIN, one("big", "m"))
        G.status_of(c.health, "nope")
    check(metric(d, "ratelimitd_rls_streams_total") - calls0 >= 4, "streams counted")
    check(metric(d, "ratelimitd_rls_responses_total", 'grpc_status="OK"') - ok0 >= 3, "OK counted")
    eq(metric(d, "ratelimitd_rls_responses_total", 'grpc_status="NOT_FOUND"') - nf0, 1,
       "NOT_FOUND counted")
    check(metric(d, "ratelimitd_rls_connections_accepted_total") >= 1, "connections counted")


def yaml_docs(path):
    try:
        import yaml
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            import yaml
        except ImportError:
            raise H.HarnessError("no YAML parser: install the Debian package python3-yaml")
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def envoy_descriptors(route_rate_limits, peer, headers):
    """The descriptors Envoy's actions build for a request (the two kinds the
    recipes use), as [[(key, value), ...]]; an action that finds nothing
    drops its descriptor, as Envoy does."""
    out = []
    for rl in route_rate_limits:
        entries = []
        for a in rl["actions"]:
            if "remote_address" in a:
                entries.append(("remote_address", peer))
            elif "request_headers" in a:
                h = a["request_headers"]
                if h["header_name"] not in headers:
                    entries = None
                    break
                entries.append((h["descriptor_key"], headers[h["header_name"]]))
            else:
                raise H.Fail("an action the test does not know: %r" % a)
        if entries:
            out.append(entries)
    return out


def t_recipes(x):
    """deploy/envoy/ratelimit.yaml, its rules and ratelimitd config, the
    Istio EnvoyFilter and the Kubernetes sidecar agree with each other; the
    daemon, run with the recipe's config and rules, answers the descriptors
    Envoy's actions build as the rules say (no Envoy binary here: its side
    is read from its config)."""
    src = H.RL_SRCDIR
    envoy = yaml_docs(os.path.join(src, "deploy/envoy/ratelimit.yaml"))[0]
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    vhost = hcm["route_config"]["virtual_hosts"][0]
    rlf = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ratelimit"][0]
    rlcfg = rlf["typed_config"]
    eq(rlcfg["rate_limit_service"]["transport_api_version"], "V3", "transport_api_version")
    cname = rlcfg["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    cluster = [c for c in envoy["static_resources"]["clusters"] if c["name"] == cname][0]
    opts = cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    check("http2_protocol_options" in opts["explicit_http_config"], "the cluster is not HTTP/2")
    eq(cluster["health_checks"][0]["grpc_health_check"]["service_name"], "ratelimit",
       "the cluster's gRPC health check")
    port = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
        "address"]["socket_address"]["port_value"]
    with open(os.path.join(src, "deploy/envoy/ratelimitd-rls.json")) as f:
        rcfg = json.load(f)
    eq(rcfg["rls"]["listen"], "127.0.0.1:%d" % port, "rls.listen against Envoy's cluster")
    rules = yaml_docs(os.path.join(src, "deploy/envoy/ratelimit-rules.yaml"))[0]
    eq(rules["domain"], rlcfg["domain"], "the rules' domain against the filter's")

    # the recipe's own config (on free ports) and rules, decided by the daemon
    rcfg["listen"] = "127.0.0.1:%d" % H.free_port()
    rls_port = H.free_port()
    rcfg["rls"]["listen"] = "127.0.0.1:%d" % rls_port
    rcfg["rls"]["config"] = os.path.join(src, "deploy/envoy/ratelimit-rules.yaml")
    rcfg["redis"].pop("url", None)
    rcfg["redis"]["timeout"] = "2s"
    with H.Daemon(rcfg, redis=x.redis, listen=False, port=int(rcfg["listen"].split(":")[1]),
                  workers=1) as d, G.Client(rls_port) as c:
        peer = "198.51.100.%d" % (uuid.uuid4().int % 250)
        descs = envoy_descriptors(vhost["rate_limits"], peer, {"x-api-key": "partner-7f3a"})
        eq(descs, [[("remote_address", peer)], [("api_key", "partner-7f3a")]], "descriptors")
        r = c.check(rlcfg["domain"], descs)
        eq([s.current_limit.requests_per_unit for s in r.statuses], [20, 1000],
           "each descriptor under its rule")
        eq(r.statuses[1].current_limit.name, "partner", "the partner key's rule")
        check(any(h.key.lower().startswith(("ratelimit", "x-ratelimit"))
                  for h in r.response_headers_to_add),
              "rls.response_headers: no RateLimit header in %r", r.response_headers_to_add)
        r = c.check(rlcfg["domain"], envoy_descriptors(vhost["rate_limits"], peer, {}))
        eq(len(r.statuses), 1, "no API key: one descriptor")
        del d

    # Istio: the same filter, cluster, actions
    ist = yaml_docs(os.path.join(src, "deploy/istio/envoyfilter.yaml"))
    filt = [d for d in ist if d["kind"] == "EnvoyFilter" and d["metadata"]["name"] ==
            "ratelimitd-filter"][0]["spec"]["configPatches"][0]["patch"]["value"]
    eq(filt["name"], "envoy.filters.http.ratelimit", "Istio's filter")
    eq(filt["typed_config"]["domain"], rules["domain"], "Istio's domain")
    svc = [d for d in ist if d["kind"] == "Service"][0]
    ncl = filt["typed_config"]["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    eq(ncl, "outbound|%d||%s.%s.svc.cluster.local" % (svc["spec"]["ports"][0]["port"],
                                                       svc["metadata"]["name"],
                                                       svc["metadata"]["namespace"]),
       "Istio's cluster name against the Service")
    eq(svc["spec"]["ports"][0].get("appProtocol"), "grpc", "the Service's appProtocol")
    acts = [d for d in ist if d["kind"] == "EnvoyFilter" and d["metadata"]["name"] ==
            "ratelimitd-descriptors"][0]["spec"]["configPatches"][0]["patch"]["value"]
    eq(acts["rate_limits"], vhost["rate_limits"], "Istio's actions against the Envoy recipe's")

    # Kubernetes: a gRPC readiness probe on rls.listen's port, service
    # "ratelimit"; the config it mounts passes -t with its rules
    k8s = yaml_docs(os.path.join(src, "deploy/kubernetes/envoy-sidecar.yaml"))
    cms = {d["metadata"]["name"]: d for d in k8s if d["kind"] == "ConfigMap"}
    dep = [d for d in k8s if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]
    rl = [c for c in dep["initContainers"] if c["name"] == "ratelimitd"][0]
    eq(rl.get("restartPolicy"), "Always", "a native sidecar")
    kcfg = json.loads(cms["ratelimitd-rls"]["data"]["ratelimitd.json"])
    kport = int(kcfg["rls"]["listen"].rsplit(":", 1)[1])
    for probe in ("readinessProbe", "startupProbe"):
        eq(rl[probe]["grpc"], {"port": kport, "service": "ratelimit"}, probe)
    rdir = os.path.join(H.tmpdir(), "k8s-rules")
    os.makedirs(rdir, exist_ok=True)
    for name, text in cms["ratelimitd-rules"]["data"].items():
        with open(os.path.join(rdir, name), "w") as f:
            f.write(text)
    kcfg["rls"]["config"] = rdir
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(kcfg)],
                             env={"RATELIMITD_REDIS_URL": "redis://redis:6379/0"})
    eq(rc, 0, "-t of the sidecar's config and rules (%s)" % err.strip())
    mounts = {m["mountPath"] for m in rl["volumeMounts"]}
    check("/etc/ratelimitd/rules" in mounts and kcfg["rls"]["config"],
          "the rules are not mounted where rls.config says")


CASES = [
    ("ShouldRateLimit (grpcio): statuses in order, limit, remaining, reset, OVER_LIMIT at the "
     "limit; an unmatched descriptor has no limit; an empty domain INVALID_ARGUMENT",
     t_should_rate_limit),
    ("Health/Check \"\" and \"ratelimit\" SERVING, another NOT_FOUND; Watch and unknown "
     "methods UNIMPLEMENTED", t_health),
    ("@grpc/grpc-js on 4 channels: exactly the limit OK, health, errors", t_grpc_js),
    ("curl --http2-prior-knowledge: the framed message and trailers; GET 405, JSON 415",
     t_curl),
    ("HTTP/1.1 on the port: a 505 and a close; TLS bytes, garbage, a bad preface: a close; "
     "counted; still serving", t_not_http2),
    ("bad calls answered with their status (oversized, malformed, compressed, two messages, "
     "none, cut, a bad flag, grpc-timeout, headers too large) on one connection that goes on",
     t_bad_messages),
    ("malformed requests (upper-case names, pseudo-headers missing, repeated, unknown or late, "
     "connection-specific headers, a content-length off, trailers that do not end): "
     "PROTOCOL_ERROR resets, the connection goes on", t_malformed_requests),
    ("a stream-reset flood: GOAWAY with an error, counted, still serving", t_reset_flood),
    ("a PING flood never read: pushed back, memory bounded, still serving", t_ping_flood),
    ("a client that reads nothing (window 0, every stream open): memory bounded, closed "
     "after idle_timeout", t_slow_reader),
    ("SETTINGS (max_concurrent_streams, max_header_list), max_connections, idle GOAWAY",
     t_limits),
    ("health with Redis gone: failure_mode closed NOT_SERVING (checks UNAVAILABLE), local "
     "SERVING; back: SERVING", t_health_backend),
    ("SIGTERM with calls in flight on 4 channels: GOAWAY NO_ERROR, all 20 answered, exit 0",
     t_sigterm_in_flight),
    ("draining: a health call read after SIGTERM NOT_SERVING, the call in flight answered",
     t_health_draining),
    ("grpc-timeout passing: DEADLINE_EXCEEDED; calls reset in flight answered into nothing",
     t_deadline_and_reset),
    ("exact counts: 8 channels on two daemons sharing one Redis, 152 calls at once, 50 OK",
     t_exact_counts),
    ("rls.all_or_nothing: a pair with one over counts nothing (grpcio), without it the other "
     "counts; a config error on a Cluster", t_all_or_nothing),
    ("rls.all_or_nothing exact: 8 channels on two daemons, 152 calls of two descriptors at "
     "once, 50 OK, the other descriptor counted 50 times", t_all_or_nothing_exact),
    ("TLS (ALPN h2, grpcio and grpc-js), h2c and http/1.1-only ALPN refused; mTLS: the CA's "
     "client in, none and another CA's out", t_tls),
    ("SIGHUP rotates rls.tls's files; a bad key keeps the running ones", t_tls_rotation),
    ("ratelimitd -t names an rls.tls file that does not load", t_config_test),
    ("the transport's metrics", t_metrics),
    ("recipes: deploy/envoy (filter, HTTP/2 cluster, rules, config), Istio's EnvoyFilter, the "
     "Kubernetes sidecar's gRPC probe agree; the daemon answers Envoy's descriptors by them",
     t_recipes),
]


class Fixture:
    pass


@contextlib.contextmanager
def fixture():
    x = Fixture()
    x.pb = G.protos()
    with H.Redis() as redis:
        x.redis = redis
        rules = write_rules()
        with RlsDaemon(redis, rules=rules, max_message="4k", max_header_list="4k") as a, \
                RlsDaemon(redis, rules=rules) as b:
            x.a, x.b = a, b
            with G.Client(a.rls_port) as ca:
                x.ca = ca
                yield x


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=600)
