#!/usr/bin/env python3
"""Every error answer of docs/API.md: status, Content-Type application/json and
{"error": "..."} naming the field; the daemon survives all of them and keeps
serving, also on the same connection.  Plus /healthz and /readyz."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402

CONFIG = {
    "identity": ["body", "peer"],
    "redis": {"timeout": "2s"},
    "max_body": "1k",
    "policies": [
        {"name": "p", "limits": [{"algorithm": "fixed_window", "limit": 1000, "window": "60s"}]},
    ],
}


def err(d, body, status, field=None, what=None, headers=None):
    st, h, b = post(d, body, headers)
    return H.expect_error(st, h, b, status, field, what or repr(body)[:60])


def valid(d):
    st, h, b = post(d, {"key": "fine"})
    H.expect_json(st, h, b, 200, "a valid check")
    eq(b.get("allowed"), True, "allowed")


# ---------------------------------------------------------------- cases

def t_malformed_json(d, r):
    for body in (b'{"key":', b'{"key": "a",}', b"not json", b"{'key': 'a'}", b'{"key": "a"} trailing',
                 b'{"key": "\xff\xfe"}'):
        err(d, body, 400, None, "malformed %r" % body)


def t_not_an_object(d, r):
    for body in (b"[]", b'["key"]', b'"alice"', b"42", b"true", b"null"):
        err(d, body, 400, None, "body %r" % body)


def t_wrong_types(d, r):
    cases = [
        ("key", 42), ("key", ["a"]), ("key", {"a": 1}), ("key", True),
        ("policy", 1), ("policy", ["p"]), ("policy", False),
        ("path", []), ("path", 7), ("path", {}),
        ("method", 5), ("method", ["POST"]), ("method", True),
        ("cost", "1"), ("cost", True), ("cost", [1]), ("cost", {}),
    ]
    for field, value in cases:
        err(d, {"key": "k", field: value} if field != "key" else {"key": value}, 400, field,
            "%s: %r" % (field, value))


def t_cost_range(d, r):
    for cost in (-1, 10**15 + 1, 1.5, -0.5, 1e300, -9223372036854775808, 9223372036854775807):
        err(d, {"key": "k", "cost": cost}, 400, "cost", "cost %r" % cost)
    # beyond 64 bits: JSON parsers may call this malformed; a 400 either way
    err(d, b'{"key": "k", "cost": 99999999999999999999}', 400, None, "cost 1e20 as an integer")
    # bounds that are fine: 0 and 1000000 (above the limit: denied, not malformed)
    st, h, b = post(d, {"key": "bounds", "cost": 0})
    H.expect_json(st, h, b, 200, "cost 0")
    st, h, b = post(d, {"key": "bounds", "cost": 1000000})
    H.expect_json(st, h, b, 429, "cost 1000000 over limit 1000")


def t_key_size(d, r):
    err(d, {"key": ""}, 400, "key", "empty key")
    err(d, {"key": "a" * 513}, 400, "key", "513-byte key")
    err(d, {"key": "\u00e9" * 257}, 400, "key", "514-byte key of 257 characters")
    for k in ("a" * 512, "\u00e9" * 256, "b"):
        st, h, b = post(d, {"key": k})
        H.expect_json(st, h, b, 200, "key of %d bytes" % len(k.encode()))
        eq(b.get("allowed"), True, "allowed")


def t_unknown_policy(d, r):
    err(d, {"key": "k", "policy": "no-such-policy"}, 400, "policy")
    err(d, {"key": "k", "policy": ""}, 400, "policy", "empty policy name")


def t_unknown_path(d, r):
    for method, path in (("GET", "/nope"), ("POST", "/nope"), ("GET", "/"), ("POST", "/check/extra"),
                         ("GET", "/healthzz")):
        st, h, b = H.request(d.port, method, path, {"key": "k"} if method == "POST" else None)
        H.expect_error(st, h, b, 404, None, "%s %s" % (method, path))


def t_wrong_method(d, r):
    for method, path, allow in (("GET", "/check", "POST"), ("PUT", "/check", "POST"),
                                ("DELETE", "/check", "POST"), ("POST", "/healthz", "GET"),
                                ("DELETE", "/healthz", "GET"), ("POST", "/readyz", "GET")):
        st, h, b = H.request(d.port, method, path, {"key": "k"} if method in ("PUT", "POST") else None)
        H.expect_error(st, h, b, 405, None, "%s %s" % (method, path))
        check("allow" in h, "%s %s: 405 without an Allow header", method, path)
        methods = [m.strip().upper() for m in h["allow"].split(",")]
        check(allow in methods, "%s %s: Allow %r does not list %s", method, path, h["allow"], allow)
        check(method not in methods, "%s %s: Allow %r lists the refused method", method, path, h["allow"])


def t_body_too_large(d, r):
    big = {"key": "k", "pad": "x" * 2048}
    st, h, b = post(d, big)
    H.expect_error(st, h, b, 413, None, "2k body, max_body 1k")
    # just under the limit is fine
    st, h, b = post(d, {"key": "k", "pad": "x" * 900})
    H.expect_json(st, h, b, 200, "900-byte body")


def t_body_too_large_chunked(d, r):
    data = b'{"key": "k", "pad": "' + b"x" * 2048 + b'"}'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 500]), data[i:i + 500]) for i in range(0, len(data), 500))
    req = H.http_bytes("POST", "/check", b"", {"Transfer-Encoding": "chunked",
                                               "Content-Type": "application/json"}) + chunks + b"0\r\n\r\n"
    st, h, body = H.raw_request(d.port, req)
    H.expect_error(st, h, H._decode_body(body), 413, None, "chunked 2k body")


def t_error_then_valid_same_connection(d, r):
    with H.Client(d.port) as c:
        for what, method, path, body, want in (
                ("malformed JSON", "POST", "/check", b'{"key":', 400),
                ("wrong type", "POST", "/check", {"cost": "x"}, 400),
                ("bad cost", "POST", "/check", {"key": "k", "cost": -1}, 400),
                ("empty key", "POST", "/check", {"key": ""}, 400),
                ("unknown policy", "POST", "/check", {"policy": "zz"}, 400),
                ("unknown path", "GET", "/nope", None, 404),
                ("wrong method", "GET", "/check", None, 405)):
            st, h, b = c.request(method, path, body)
            H.expect_error(st, h, b, want, None, what)
            check(h.get("connection", "").lower() != "close", "%s: Connection: close", what)
            check(not c.server_closed, "%s: the server closed the connection", what)
            st, h, b = c.request("POST", "/check", {"key": "same-conn"})
            H.expect_json(st, h, b, 200, "valid check after " + what)
            check(c.same_connection(), "not the same connection after %s", what)


def t_garbage_http(d, r):
    # not HTTP at all, a bad request line, a huge header: any answer or a close, never a crash
    for data in (b"\x00\x01\x02garbage\r\n\r\n", b"GET\r\n\r\n", b"POST /check HTTP/9.9\r\n\r\n",
                 b"POST /check HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                 b"POST /check HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"):
        try:
            with H.RawConn(d.port, timeout=5) as c:
                c.send(data)
                try:
                    c.read_response()
                except (EOFError, OSError, ValueError):
                    pass
        except OSError:
            pass
        check(d.alive(), "daemon died after %r", data[:40])
    st, _, b = H.request(d.port, "GET", "/healthz")
    eq(st, 200, "/healthz after garbage")


def t_still_serving(d, r):
    check(d.alive(), "the daemon process exited (code %r)", d.proc.poll())
    st, h, b = H.request(d.port, "GET", "/healthz")
    H.expect_json(st, h, b, 200, "/healthz")
    valid(d)


def t_healthz(d, r):
    st, h, b = H.request(d.port, "GET", "/healthz")
    H.expect_json(st, h, b, 200, "/healthz")
    eq(b, {"status": "ok"}, "/healthz body")


def t_readyz_up(d, r):
    st, h, b = H.request(d.port, "GET", "/readyz")
    eq(st, 200, "/readyz with Redis up (body %r)" % (b,))


def _poll_readyz(d, want, seconds):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = H.request(d.port, "GET", "/readyz")
        if last[0] == want:
            return last
        time.sleep(0.1)
    return last


def t_readyz_redis_down(d, r):
    r.stop()
    try:
        # /readyz should notice the lost backend; poll (bounded) rather than assume when
        st, h, b = _poll_readyz(d, 503, 10 * H.SLOW)
        eq(st, 503, "/readyz with Redis stopped (body %r)" % (b,))
        check(b not in ("", None, {}), "503 from /readyz without a reason")
        eq(h.get("retry-after"), "1", "Retry-After on /readyz's 503")
        st, h, b = H.request(d.port, "GET", "/healthz")
        eq(st, 200, "/healthz while Redis is down")
    finally:
        r.restart()
    st, h, b = _poll_readyz(d, 200, 15 * H.SLOW)
    eq(st, 200, "/readyz after Redis came back (body %r)" % (b,))


def t_503_overloaded(d, r):
    # max_inflight 1 and Redis paused: the first check waits, the second is
    # shed at once with a 503 that says when to come back
    cfg = dict(CONFIG, max_inflight=1, redis={"timeout": "30s"})
    with H.Daemon(cfg, redis=r) as d1:
        c = H.RawConn(d1.port)
        r.pause()
        try:
            c.send(H.http_bytes("POST", "/check", b'{"key":"waits"}'))
            deadline = time.monotonic() + 10 * H.SLOW
            while _inflight(d1.port) < 1:
                check(time.monotonic() < deadline, "the first check never waited for Redis")
                time.sleep(0.02)
            st, h, b = post(d1, {"key": "shed"})
            H.expect_error(st, h, b, 503, None, "past max_inflight")
            eq(b.get("error"), "overloaded: too many checks in flight", "the 503's message")
            eq(h.get("retry-after"), "1", "Retry-After on the overload 503")
        finally:
            r.resume()
        c.close()


def _inflight(port):
    st, _, text = H.request(port, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("ratelimitd_inflight_checks "):
            return float(line.split()[1])
    raise H.Fail("no ratelimitd_inflight_checks in /metrics")


def t_503_draining(d, r):
    # a request read after SIGTERM is answered (issue 24: a check is decided
    # as usual); what the drain itself says 503 to, readiness, carries
    # Retry-After like every 503 of the daemon
    cfg = dict(CONFIG, shutdown_grace="5s")
    with H.Daemon(cfg, redis=r) as d1:
        c = H.RawConn(d1.port)
        req = H.http_bytes("GET", "/readyz")
        c.send(req[:10])            # a request coming in: the drain waits for it
        d1.send_signal(signal.SIGTERM)  # (a connection still queued is accepted first)
        deadline = time.monotonic() + 10 * H.SLOW
        while H.port_open(d1.port):         # the drain has begun: no more accepts
            check(time.monotonic() < deadline, "the daemon still accepts 10 s after SIGTERM")
            time.sleep(0.02)
        c.send(req[10:])
        st, h, raw = c.read_response()
        body = json.loads(raw)
        eq((st, body.get("reason")), (503, "shutting down"), "GET /readyz after SIGTERM (%r)" % body)
        eq(h.get("retry-after"), "1", "Retry-After on the drain's 503")
        eq(h.get("connection"), "close", "the drain's last answer closes")
        c.close()
        eq(d1.wait(15), 0, "exit code after the drain")


CASES = [
    ("400 malformed JSON", t_malformed_json),
    ("400 body is not an object", t_not_an_object),
    ("400 wrong type of key/policy/path/method/cost names the field", t_wrong_types),
    ("400 cost out of range or not an integer", t_cost_range),
    ("400 empty or oversized key (bytes, not characters); 512 ok", t_key_size),
    ("400 unknown policy", t_unknown_policy),
    ("404 unknown path", t_unknown_path),
    ("405 wrong method with Allow", t_wrong_method),
    ("413 body over max_body", t_body_too_large),
    ("413 chunked body over max_body", t_body_too_large_chunked),
    ("an error then a valid request on the same connection", t_error_then_valid_same_connection),
    ("garbage HTTP does not kill the daemon", t_garbage_http),
    ("after every error the daemon is alive and serving", t_still_serving),
    ("GET /healthz -> 200 {\"status\":\"ok\"}", t_healthz),
    ("GET /readyz -> 200 with Redis up", t_readyz_up),
    ("GET /readyz -> 503 with Redis down (Retry-After: 1), 200 again after", t_readyz_redis_down),
    ("503 past max_inflight carries Retry-After: 1", t_503_overloaded),
    ("503 shutting down (readiness read after SIGTERM) carries Retry-After: 1 and closes", t_503_draining),
]


def fixture():
    return H.redis_and_daemon(CONFIG)


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
