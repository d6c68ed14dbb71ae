"""The asyncio client: its pool, timeouts and cancellation."""

import asyncio
import json
import socket
import time

import harness as H
import pytest

from conftest import CONFIG, OK_TIMEOUT, accepted, fresh, url
from ratelimitd import AsyncClient


@pytest.fixture
def own_daemon(redis):
    with H.Daemon(dict(CONFIG, http={"idle_timeout": "300ms"}), redis=redis) as d:
        yield d


def test_pool_is_bounded_and_kept(own_daemon):
    async def run():
        async with AsyncClient(url(own_daemon.port), timeout=OK_TIMEOUT, max_connections=3) as c:
            key = fresh()
            first = await asyncio.gather(*(c.check(key=key, policy="budget") for _ in range(30)))
            second = await asyncio.gather(*(c.check(key=key, policy="budget") for _ in range(30)))
            return first + second
    before = accepted(own_daemon)
    ds = asyncio.run(run())
    assert [d.status for d in ds] == [200] * 60
    assert [d.remaining for d in ds[-1:]] == [940]
    assert accepted(own_daemon) - before <= 4


def test_reconnects_after_an_idle_close(own_daemon):
    async def run():
        async with AsyncClient(url(own_daemon.port), timeout=OK_TIMEOUT) as c:
            assert (await c.check(key=fresh(), policy="conf")).allowed
            deadline = time.monotonic() + 10 * H.SLOW
            while H.metric(own_daemon, "ratelimitd_connections_open") != 1:
                assert time.monotonic() < deadline, "the daemon kept the idle connection"
                await asyncio.sleep(0.05)
            return await c.check(key=fresh(), policy="conf")
    d = asyncio.run(run())
    assert d.allowed and not d.degraded, d


def test_cancelled_call_leaves_the_pool_usable(daemon, blackhole):
    async def run():
        async with AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, max_connections=1) as c:
            t = asyncio.ensure_future(c.check(key=fresh(), policy="conf"))
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            return await c.check(key=fresh(), policy="conf")
    d = asyncio.run(run())
    assert d.allowed and not d.degraded, d


def test_timeout_covers_waiting_for_a_connection(blackhole):
    async def run():
        async with AsyncClient(url(blackhole.port), timeout=0.3, max_connections=1, fail_open=False) as c:
            t0 = time.monotonic()
            ds = await asyncio.gather(*(c.check(key="k") for _ in range(3)))
            return ds, time.monotonic() - t0
    ds, took = asyncio.run(run())
    assert [(d.status, d.degraded) for d in ds] == [(503, True)] * 3
    assert took < 0.3 + 0.5 * H.SLOW, took


def test_a_new_event_loop_starts_a_new_pool(daemon):
    c = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT)
    for _ in range(2):
        d = asyncio.run(c.check(key=fresh(), policy="conf"))
        assert d.allowed and not d.degraded, d


class Scripted(H.Blackhole):
    """A loopback listener answering each request on one connection with the
    next of `answers` (bytes, sent a byte at a time to split it across
    reads; a None next closes the connection after it), for what the daemon
    never sends."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        super().__init__()

    def _accept(self):
        try:
            c, _ = self.sock.accept()
        except OSError:
            return
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with c:
            data = b""
            while self.answers:
                while b"\r\n\r\n" not in data:
                    got = c.recv(65536)
                    if not got:
                        return
                    data += got
                head, _, data = data.partition(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(data) < n:
                    data += c.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + data[:n])
                data = data[n:]
                answer = self.answers.pop(0)
                if answer is None:
                    return
                for i in range(len(answer)):
                    c.sendall(answer[i:i + 1])
                if self.answers and self.answers[0] is None:
                    return      # closed right after this answer


def answer(status, body, *headers):
    data = json.dumps(body).encode()
    return (b"HTTP/1.1 %d X\r\n" % status + b"".join(h + b"\r\n" for h in headers) +
            b"Content-Length: %d\r\n\r\n" % len(data) + data)


def checks(port, n, **kw):
    async def run():
        async with AsyncClient(url(port), timeout=OK_TIMEOUT, **kw) as c:
            return [await c.check(key="k", client_ip="198.51.100.7") for _ in range(n)]
    return asyncio.run(run())


def test_an_answer_split_across_reads():
    s = Scripted([answer(429, {"allowed": False, "remaining": 0}, b"retry-after:  7 ", b"Date: x",
                         b"X-RateLimit-Remaining: 0"),
                  answer(200, {"allowed": True, "remaining": 4, "degraded": True})])
    try:
        d1, d2 = checks(s.port, 2)
    finally:
        s.close()
    assert (d1.allowed, d1.status, d1.retry_after, d1.remaining, d1.degraded) == (False, 429, 7, 0, False)
    assert d1.headers == [("retry-after", "7"), ("X-RateLimit-Remaining", "0")]
    assert (d2.allowed, d2.status, d2.remaining, d2.degraded) == (True, 200, 4, True)
    # both on one connection, each request whole, the client's address passed on
    assert len(s.requests) == 2 and all(r.startswith(b"POST /check HTTP/1.1\r\n") for r in s.requests)
    assert b"\r\nX-Forwarded-For: 198.51.100.7\r\n" in s.requests[0]
    assert s.requests[0].endswith(b'{"key":"k"}')


def test_an_answer_cut_or_garbled_is_the_failure_policy():
    for answers, reason in (([answer(200, {"allowed": True})[:30], None], "mid-answer"),
                            ([b"SSH-2.0-OpenSSH\r\n\r\n"], "not an HTTP/1.1 answer"),
                            ([b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"], "bad Content-Length")):
        s = Scripted(answers)
        try:
            (d,) = checks(s.port, 1, fail_open=False)
        finally:
            s.close()
        assert (d.allowed, d.status, d.degraded) == (False, 503, True), d
        assert reason in d.reason, d.reason
        # a failure on a new connection is not tried again
        assert len(s.requests) == 1


def test_a_shorter_timeout_is_kept_at_once(blackhole):
    async def run():
        async with AsyncClient(url(blackhole.port), timeout=30 * H.SLOW, fail_open=False) as c:
            first = asyncio.ensure_future(c.check(key="k"))
            # until the first call waits for its answer (its deadline, 30 s on, armed)
            while not c._pending:
                await asyncio.sleep(0.01)
            c.timeout = 0.3
            t0 = time.monotonic()
            d = await c.check(key="k")
            took = time.monotonic() - t0
            first.cancel()
            return d, took
    d, took = asyncio.run(run())
    assert (d.status, d.degraded) == (503, True) and "timed out" in d.reason, d
    assert took < 0.3 + 0.5 * H.SLOW, took
