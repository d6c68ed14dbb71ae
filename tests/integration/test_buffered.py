#!/usr/bin/env python3
"""Request bytes the daemon buffers, both listeners (issue 31, 1): a gRPC
message's buffer grows as its bytes arrive, never to the length its 5-byte
prefix only declares, and both listeners buffer from one daemon-wide pool
bounded by http.max_buffered.

- A flood of streams sending only prefixes that declare large messages: the
  daemon's own address space (VmSize) and RSS grow by far less than declared.
- The same flood with rls.max_message 4m against a daemon under an
  address-space limit (prlimit --as): it survives and still answers.
- Messages actually sent past http.max_buffered: RESOURCE_EXHAUSTED naming
  the setting, counted, logged; the streams within it complete; afterwards
  the pool is empty, memory returns and the daemon answers.
- The pool is shared: gRPC messages held make an HTTP/1.1 body 503, and HTTP
  bodies held make a gRPC message RESOURCE_EXHAUSTED.

Memory figures are asserted by the plain build only (harness RSS_MEANINGFUL);
under ASan or valgrind the floods are smaller and the pool's own gauge and
answers are what is checked.
"""

import contextlib
import os
import shutil
import socket
import struct
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
from harness import check, eq, note  # noqa: E402
from test_rls_grpc import DOMAIN, conf, one, write_rules  # noqa: E402

BUSY = "busy: the daemon buffers http.max_buffered request bytes already"
INLINE_IN = 512       # bytes of a message a call holds without the pool (grpc.c)
RBUF_INIT = 4096      # bytes of an HTTP/1.1 connection's buffer outside the pool (http.c)

# the prefix flood: connections x streams (the daemon's SETTINGS say 100)
FLOOD_CONNS = 10 if H.VALGRIND else (20 if H.SANITIZED else 60)
FLOOD_STREAMS = 100


def vm_kib(d, field):
    """VmSize / VmRSS of the daemon in KiB, from /proc/<pid>/status."""
    with open("/proc/%d/status" % d.proc.pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise H.HarnessError("no %s in /proc/%d/status" % (field, d.proc.pid))


def start(redis, rls=None, http=None, top=None, wrapper=()):
    """A daemon with rls.listen (d.rls_port) and the rule file of test_rls_grpc."""
    rls_port = H.free_port()
    cfg = conf(rls_port, write_rules(), **(rls or {}))
    if http:
        cfg["http"] = http
    cfg.update(top or {})
    d = H.Daemon(cfg, redis=redis, workers=2, wrapper=wrapper)
    d.rls_port = rls_port
    if not H.port_open(rls_port):
        d.kill()
        raise H.DaemonError("rls.listen %d not open; log:\n%s" % (rls_port, d.log()))
    return d


def answers(d, what):
    """ShouldRateLimit and Health/Check answer as usual."""
    with G.Client(d.rls_port) as c:
        r = c.check(DOMAIN, one("client", uuid.uuid4().hex))
        eq(c.pb.rls.RateLimitResponse.Code.Name(r.overall_code), "OK",
           "ShouldRateLimit after %s" % what)
        eq(c.health(""), "SERVING", "Health/Check after %s" % what)


def raw(port):
    """A hand-driven HTTP/2 connection that has the daemon's SETTINGS."""
    r = G.Raw(port)
    if not r.until(lambda r: any(isinstance(e, G.h2.events.RemoteSettingsChanged)
                                 for e in r.events), 10 * H.SLOW):
        r.close()
        raise H.Fail("no SETTINGS from the daemon")
    return r


def prefix(n):
    return struct.pack(">BI", 0, n)


def push(r, sid, data, end=False):
    """Send data on stream sid as the windows allow; False when the daemon
    ended the stream first (refused)."""
    deadline = time.monotonic() + 30 * H.SLOW
    try:
        while data:
            if r.ended(sid):
                return False
            n = min(len(data), r.conn.local_flow_control_window(sid),
                    r.conn.max_outbound_frame_size)
            if n <= 0:
                check(time.monotonic() < deadline and not r.closed,
                      "stream %d: no window to send in", sid)
                r.read(0.2)
                continue
            r.conn.send_data(sid, data[:n])
            data = data[n:]
            r.flush()
        if end:
            r.conn.end_stream(sid)
            r.flush()
    except (G.h2.exceptions.StreamClosedError, OSError):
        return False
    return True


def open_message(port, path, msg_len, sent):
    """A connection with one stream: HEADERS, a prefix declaring msg_len and
    `sent` bytes of the message.  (raw, sid, still open)."""
    r = raw(port)
    sid = r.request(path, None, end=False)
    return r, sid, push(r, sid, prefix(msg_len) + b"x" * sent)


def refused_busy(r, sid, timeout):
    """The stream was answered RESOURCE_EXHAUSTED naming http.max_buffered."""
    if not r.until(lambda r: r.ended(sid), timeout):
        return False
    h = r.headers_of(sid)
    if h.get("grpc-status") != "8":
        raise H.Fail("stream %d ended with %r, not RESOURCE_EXHAUSTED" % (sid, h))
    msg = h.get("grpc-message", "")
    check(msg.replace("%20", " ") == BUSY or msg == BUSY,
          "stream %d: grpc-message %r does not name http.max_buffered", sid, msg)
    return True


def settled(d, what, timeout=20):
    """The pool is empty again (every held stream and body gone)."""
    H.wait_for(lambda: H.metric(d, "ratelimitd_http_buffered_bytes") == 0,
               "%s: ratelimitd_http_buffered_bytes back to 0" % what, timeout)


# ------------------------------------------------------------------ cases

def t_prefix_flood(x):
    """Streams sending HEADERS and a prefix declaring 64 KiB each, nothing
    more: on main each allocated 64 KiB at once (60 x 100 streams: +384 MB
    of address space, +33 MB RSS)."""
    declared = 64 * 1024
    n = FLOOD_CONNS * FLOOD_STREAMS
    with start(x.redis) as d:
        answers(d, "start")
        calls0 = H.metric(d, "ratelimitd_rls_streams_total")
        size0, rss0 = vm_kib(d, "VmSize"), vm_kib(d, "VmRSS")
        conns = []
        try:
            for _ in range(FLOOD_CONNS):
                r = raw(d.rls_port)
                conns.append(r)
                for _ in range(FLOOD_STREAMS):
                    sid = r.conn.get_next_available_stream_id()
                    r.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                              (":path", G.SHOULD_RATE_LIMIT),
                                              (":authority", "127.0.0.1")] + r.GRPC_HEADERS)
                    r.conn.send_data(sid, prefix(declared))
                r.flush()
            H.wait_for(lambda: H.metric(d, "ratelimitd_rls_streams_total") >= calls0 + n,
                       "the daemon read the %d streams" % n, 60)
            # their prefixes too: a PING sent after them comes back
            for r in conns:
                r.conn.ping(b"prefixes")
                r.flush()
            for r in conns:
                check(r.until(lambda r: any(isinstance(e, G.h2.events.PingAckReceived)
                                            for e in r.events), 20 * H.SLOW),
                      "no PING answer on a flooded connection")
            dsize, drss = vm_kib(d, "VmSize") - size0, vm_kib(d, "VmRSS") - rss0
            pooled = H.metric(d, "ratelimitd_http_buffered_bytes")
            note("%d streams declaring %d KiB each (%d MiB in all): VmSize %+d KiB, "
                 "VmRSS %+d KiB, pool %d B", n, declared >> 10, n * declared >> 20, dsize,
                 drss, pooled)
            eq(pooled, 0, "bytes in the pool for prefixes alone")
            if H.RSS_MEANINGFUL:
                # ~1.5 KiB per stream (the call, nghttp2's stream): allow 4 KiB
                check(dsize <= n * 4 + 64 * 1024, "VmSize grew by %d KiB for %d streams "
                      "declaring %d KiB each", dsize, n, declared >> 10)
                check(drss <= n * 4, "VmRSS grew by %d KiB for %d streams declaring %d KiB "
                      "each", drss, n, declared >> 10)
            answers(d, "a prefix flood (connections still open)")
        finally:
            for r in conns:
                r.close()


def t_address_space_limit(x):
    """rls.max_message 4m, the daemon under an address-space limit of what
    it takes at rest + 512 MiB: 1,000 prefixes declaring 4 MiB (4 GB) used
    to end it with `out of memory` and SIGABRT."""
    rls = {"max_message": "4m"}
    conns = 4 if H.VALGRIND else 10
    wrapper = ()
    if H.RSS_MEANINGFUL:  # ASan's shadow and valgrind need more than any such limit
        with start(x.redis, rls) as probe:
            rest = vm_kib(probe, "VmSize")
        limit = (rest + 512 * 1024) * 1024
        if shutil.which("prlimit") is None:
            raise H.HarnessError("prlimit not found in PATH (Debian package util-linux)")
        wrapper = ("prlimit", "--as=%d" % limit, "--")
        note("address space at rest %d MiB, limit %d MiB", rest >> 10, limit >> 20)
    with start(x.redis, rls, wrapper=wrapper) as d:
        calls0 = H.metric(d, "ratelimitd_rls_streams_total")
        held = []
        try:
            with contextlib.suppress(H.Fail, OSError):  # the daemon's death is told below
                for _ in range(conns):
                    r = raw(d.rls_port)
                    held.append(r)
                    for _ in range(FLOOD_STREAMS):
                        r.request(G.SHOULD_RATE_LIMIT, prefix(4 * 1024 * 1024), end=False)
            H.wait_for(lambda: not d.alive() or H.metric(d, "ratelimitd_rls_streams_total")
                       >= calls0 + conns * FLOOD_STREAMS, "the streams read", 60)
            for r in held:
                with contextlib.suppress(OSError):
                    r.conn.ping(b"prefixes")
                    r.flush()
                    r.until(lambda r: r.closed or any(
                        isinstance(e, G.h2.events.PingAckReceived) for e in r.events),
                        20 * H.SLOW)
            check(d.alive(), "the daemon died under the prefix flood: %s",
                  "\n".join(d.log().splitlines()[-5:]))
            answers(d, "4 GB declared under an address-space limit")
        finally:
            for r in held:
                r.close()
        check("out of memory" not in d.log(), "the daemon logged out of memory")


POOL = 2 * 1024 * 1024
MSG = 250000  # each gRPC message in the pool cases


def pool_daemon(redis):
    return start(redis, {"max_message": "256k"}, http={"max_buffered": "2m"},
                 top={"max_body": "1m"})


PAST_POOL = 8 * 1024 * 1024
PAST_MSG = 1000000


def t_past_the_pool(x):
    """16 streams each sending all but the last byte of a 1 MB message with
    http.max_buffered 8 MiB: those the pool holds go on and complete, the
    others get RESOURCE_EXHAUSTED naming the setting, counted and logged;
    afterwards the pool is empty, RSS comes back and the daemon answers."""
    n, MSG, POOL = 16, PAST_MSG, PAST_POOL
    with start(x.redis, {"max_message": "1m"}, http={"max_buffered": "8m"}) as d:
        answers(d, "start")
        rss0 = vm_kib(d, "VmRSS")
        ref0 = H.metric(d, "ratelimitd_rls_refused_total", {"reason": "buffered"})
        st0 = H.metric(d, "ratelimitd_rls_responses_total", {"grpc_status": "RESOURCE_EXHAUSTED"})
        # a valid Health/Check request of exactly MSG bytes: the ones held
        # must complete with the handler's answer (NOT_FOUND for the service)
        pad = MSG - 5
        body = G.protos().health.HealthCheckRequest(service="s" * pad).SerializeToString()
        body = G.protos().health.HealthCheckRequest(
            service="s" * (pad - (len(body) - MSG))).SerializeToString()
        eq(len(body), MSG, "the message's length")
        streams = []
        try:
            for _ in range(n):
                r = raw(d.rls_port)
                sid = r.request(G.HEALTH_CHECK, None, end=False)
                streams.append((r, sid, push(r, sid, prefix(MSG) + body[:-1])))
            # every stream is either refused (its bytes dropped) or holds its
            # whole buffer (MSG + 5, INLINE_IN of it outside the pool)
            per = MSG + 5 - INLINE_IN

            def refused():
                return H.metric(d, "ratelimitd_rls_refused_total", {"reason": "buffered"}) - ref0

            H.wait_for(lambda: H.metric(d, "ratelimitd_http_buffered_bytes")
                       == (n - refused()) * per, "each stream held or refused", 30)
            nbusy = refused()
            peak = H.metric(d, "ratelimitd_http_buffered_bytes")
            rss_peak = vm_kib(d, "VmRSS")
            deadline = time.monotonic() + 20 * H.SLOW
            while sum(r.ended(sid) for r, sid, _ in streams) < nbusy and \
                    time.monotonic() < deadline:
                for r, sid, _ in streams:
                    if not r.ended(sid):
                        r.read(0.02)
            busy = [s for s in streams if s[0].ended(s[1])]
            for r, sid, _ in busy:
                check(refused_busy(r, sid, 0), "stream %d ended", sid)
            held = [s for s in streams if s not in busy]
            note("%d streams of %d B with a pool of %d B: %d held, %d refused; pool %d B; "
                 "VmRSS %+d KiB", n, MSG, POOL, len(held), len(busy), peak, rss_peak - rss0)
            check(peak <= POOL, "%d bytes in the pool, past http.max_buffered %d", peak, POOL)
            check(len(held) * per <= POOL, "%d streams of %d B held with a pool of %d B",
                  len(held), per, POOL)
            check(len(held) >= POOL // per - 2, "only %d streams held with room for %d",
                  len(held), POOL // per)
            check(len(busy) >= n - POOL // per - 1, "%d refused", len(busy))
            eq(nbusy, len(busy), "ratelimitd_rls_refused_total{reason=\"buffered\"}")
            check(H.metric(d, "ratelimitd_rls_responses_total",
                           {"grpc_status": "RESOURCE_EXHAUSTED"}) - st0 >= len(busy),
                  "RESOURCE_EXHAUSTED answers not counted")
            H.wait_for(lambda: "request buffers full" in d.log(), "the log line", 10)
            # those held finish: their whole message reaches the handler
            for r, sid, _ in held:
                check(push(r, sid, body[-1:], end=True), "stream %d: could not end it", sid)
            for r, sid, _ in held:
                h, _ = r.answer(sid, 10 * H.SLOW)
                eq(h.get("grpc-status"), "5", "a held stream's answer (Health NOT_FOUND)")
            settled(d, "after the held streams were answered")
        finally:
            for r, _, _ in streams:
                r.close()
        settled(d, "after the connections closed")
        answers(d, "the pool was full")
        lines = [l for l in d.log().splitlines() if "request buffers full" in l]
        check(len(lines) <= 2, "the full pool logged %d lines in one burst", len(lines))
        check("listener=rls" in lines[0] and "max_buffered=%d" % POOL in lines[0],
              "the log line says neither the listener nor the bound: %s", lines[0])
        if H.RSS_MEANINGFUL:
            # what the messages took goes back (the connections' own
            # memory, nghttp2's blocks the slab keeps, may stay: a third)
            allowed = rss0 + (rss_peak - rss0) // 3
            deadline = time.monotonic() + 10
            while vm_kib(d, "VmRSS") > allowed and time.monotonic() < deadline:
                time.sleep(0.2)
            after = vm_kib(d, "VmRSS")
            note("VmRSS %d KiB before, %d at the peak, %d after", rss0, rss_peak, after)
            check(rss_peak - rss0 >= POOL // 1024 // 2, "VmRSS grew only %d KiB holding %d B",
                  rss_peak - rss0, peak)
            check(after <= allowed, "VmRSS %d KiB after the flood, %d before, %d at the peak",
                  after, rss0, rss_peak)


def http_body(port, length, sent):
    """A POST /check whose Content-Length is `length`, `sent` bytes of it
    sent: a JSON body padded with spaces."""
    s = socket.create_connection(("127.0.0.1", port), timeout=H.HTTP_TIMEOUT)
    js = b'{"key":"pool-%s"}' % uuid.uuid4().hex.encode()
    body = js + b" " * (length - len(js))
    s.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % length + body[:sent])
    return s, body[sent:]


def http_status(s, timeout):
    """The status of the answer on s (None: none within timeout)."""
    s.settimeout(timeout)
    data = b""
    with contextlib.suppress(socket.timeout, OSError):
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else None, data


def t_shared_pool(x):
    """One pool for both listeners: gRPC messages held make a 900 kB HTTP
    body 503 (it was answered before them), and HTTP bodies held make a
    gRPC message RESOURCE_EXHAUSTED (it is read once they are gone)."""
    big = 900 * 1024
    with pool_daemon(x.redis) as d:
        # alone, the body is read and answered
        s, rest = http_body(d.port, big, big)
        with contextlib.closing(s):
            st, data = http_status(s, 10 * H.SLOW)
            eq(st, 200, "a 900 kB body with an empty pool (%r)" % data[:200])
        # six gRPC messages held: 1.5 MB of 2 MiB
        held = []
        try:
            for _ in range(6):
                r, sid, ok = open_message(d.rls_port, G.HEALTH_CHECK, MSG, MSG - 1)
                held.append(r)
                check(ok, "a gRPC message refused with the pool nearly empty")
            H.wait_for(lambda: H.metric(d, "ratelimitd_http_buffered_bytes")
                       >= 6 * (MSG + 5 - INLINE_IN), "six messages in the pool", 20)
            s, rest = http_body(d.port, big, big)
            with contextlib.closing(s):
                st, data = http_status(s, 10 * H.SLOW)
                eq(st, 503, "a 900 kB body with gRPC holding the pool (%r)" % data[:200])
                check(b"http.max_buffered" in data, "the 503 does not name http.max_buffered")
        finally:
            for r in held:
                r.close()
        settled(d, "the gRPC messages gone")
        # two HTTP bodies of 1,000,000 held (~2 MB): a gRPC message is refused
        bodies = []
        try:
            for _ in range(2):
                bodies.append(http_body(d.port, 1000000, 990000))
            H.wait_for(lambda: H.metric(d, "ratelimitd_http_buffered_bytes")
                       >= 2 * (990000 - RBUF_INIT), "two HTTP bodies in the pool", 20)
            r, sid, _ = open_message(d.rls_port, G.HEALTH_CHECK, MSG, MSG - 1)
            with r:
                check(refused_busy(r, sid, 10 * H.SLOW),
                      "a gRPC message read while HTTP bodies hold the pool")
            # the bodies end and are answered
            for s, rest in bodies:
                s.sendall(rest)
            for s, _ in bodies:
                eq(http_status(s, 10 * H.SLOW)[0], 200, "a held body's answer")
        finally:
            for s, _ in bodies:
                s.close()
        settled(d, "the HTTP bodies gone")
        r, sid, ok = open_message(d.rls_port, G.HEALTH_CHECK, MSG, MSG - 1)
        with r:
            check(ok, "a gRPC message refused with the pool empty")
            H.wait_for(lambda: H.metric(d, "ratelimitd_http_buffered_bytes")
                       == MSG + 5 - INLINE_IN, "the message in the pool", 20)
        answers(d, "the shared pool was full")


def t_config(x):
    """http.max_buffered below rls.max_message is a configuration error."""
    cfg = conf(H.free_port(), write_rules(), max_message="4m")
    cfg["http"] = {"max_buffered": "1m"}
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(cfg)],
                             env={"RATELIMITD_REDIS_URL": x.redis.url})
    check(rc != 0, "-t accepted http.max_buffered 1m with rls.max_message 4m")
    check("http.max_buffered" in err and "rls.max_message" in err, "-t said: %s", err.strip())


CASES = [
    ("a flood of streams sending only prefixes that declare 64 KiB: VmSize and RSS grow by "
     "far less than declared, nothing in the pool, still answering", t_prefix_flood),
    ("rls.max_message 4m under an address-space limit: 4 GB declared by prefixes, the daemon "
     "lives and answers", t_address_space_limit),
    ("messages sent past http.max_buffered: RESOURCE_EXHAUSTED naming it, counted, logged once; "
     "the held ones complete; the pool empties, RSS returns, still answering", t_past_the_pool),
    ("one pool for both listeners: gRPC held makes an HTTP body 503, HTTP held makes a gRPC "
     "message RESOURCE_EXHAUSTED", t_shared_pool),
    ("-t: http.max_buffered below rls.max_message is refused", t_config),
]


class Fixture:
    pass


@contextlib.contextmanager
def fixture():
    x = Fixture()
    G.protos()
    with H.Redis() as redis:
        x.redis = redis
        yield x


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=600)
