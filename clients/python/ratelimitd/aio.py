"""The asyncio client, on a protocol of its own: a pool of kept-alive
connections (at most `max_connections`, shared by the tasks of one event
loop), a total timeout per call, and the fail-open/fail-closed choice.

Why not asyncio streams and asyncio.timeout: on a loopback check they cost
more than the rest of the client together (a StreamReader wakes its task per
read, a timeout context schedules and cancels a loop timer per call), against
issue 34's target of 10% of the round trip (scripts/bench-clients).  Here an
answer is read in the protocol's callbacks and completes one future, and one
loop timer, re-armed only when it fires, expires the calls past their deadline.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _core
from ._core import QUOTA_HEADERS, Decision, Endpoint
from ._reserve import AsyncReservation, Reserving

Answer = Tuple[int, List[Tuple[str, str]], bytes]

#: an answer's head longer than this is not the daemon's
MAX_HEAD = 65536


class _Stale(Exception):
    """A kept-alive connection the daemon had closed while it was idle."""


def _parse(buf: bytes) -> Optional[Tuple[Answer, bool]]:
    """(answer, close) of the answer at the start of `buf`; None while it is
    incomplete.  Only the headers a Decision carries are kept."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise ConnectionError("an answer's head longer than 64 KiB")
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ConnectionError("not an HTTP/1.1 answer: %r" % lines[0][:80])
    headers: List[Tuple[str, str]] = []
    length = 0
    close = parts[0] == "HTTP/1.0"
    for h in lines[1:]:
        name, _, value = h.partition(":")
        low = name.strip().lower()
        if low in QUOTA_HEADERS:
            headers.append((name.strip(), value.strip()))
        elif low == "content-length":
            value = value.strip()
            if not value.isdigit():
                raise ConnectionError("a bad Content-Length: %r" % value[:40])
            length = int(value)
        elif low == "connection":
            close = value.strip().lower() == "close"
    start = end + 4
    if len(buf) < start + length:
        return None
    # bytes past the answer were not asked for: the connection goes
    return (int(parts[1]), headers, buf[start:start + length]), close or len(buf) > start + length


class _Conn(asyncio.Protocol):
    """One connection to the daemon; `waiter` is the future of the answer
    awaited, completed from the callbacks below."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.buf = b""
        self.waiter: Optional["asyncio.Future[Tuple[Answer, bool]]"] = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        w = self.waiter
        if w is None or w.done():
            # nothing was asked: this connection cannot be trusted
            self.lost = True
            if self.transport is not None:
                self.transport.abort()
            return
        try:
            done = _parse(self.buf)
        except ConnectionError as e:
            w.set_exception(e)
            return
        if done is not None:
            self.buf = b""
            w.set_result(done)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = True
        w = self.waiter
        if w is not None and not w.done():
            if self.buf:
                w.set_exception(ConnectionResetError("the daemon closed the connection mid-answer"))
            else:
                w.set_exception(_Stale())


class AsyncClient:
    """The asyncio twin of Client: the same calls, each a coroutine.

    max_connections bounds the connections open at once: a call beyond them
    waits for one (within its timeout).  The pool belongs to the event loop it
    was made on; on another loop (a test client's, a worker's) it starts afresh.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", timeout: float = 0.2,
                 fail_open: bool = True, policy: Optional[str] = None,
                 max_connections: int = 16, logger: Optional[logging.Logger] = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.endpoint = Endpoint(url)
        self.timeout = timeout
        self.fail_open = fail_open
        self.policy = policy
        self.max_connections = max_connections
        self.log = logger or _core.log
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._idle: List[_Conn] = []
        self._slots: Optional[asyncio.Semaphore] = None
        # the futures awaited by calls, with their deadlines (loop time), and
        # the one timer that expires them
        self._pending: Dict["asyncio.Future[Any]", float] = {}
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = 0.0
        self._host = ("%s:%d" % (self.endpoint.host, self.endpoint.port)).encode()
        # what every request of a route starts with
        self._start = {route: b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
            route.encode(), self._host) for route in ("/check", "/charge", "/settle", "/release")}

    # ------------------------------------------------------------ transport

    def _on(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        """The pool of `loop`, started afresh when the client moves to it."""
        if self._loop is not loop or self._slots is None:
            # connections of another loop cannot be used here
            if self._loop is not None and not self._loop.is_closed():
                for c in self._idle:
                    if c.transport is not None:
                        c.transport.abort()
                if self._timer is not None:
                    self._timer.cancel()
            self._idle = []
            self._pending = {}
            self._timer = None
            self._loop = loop
            self._slots = asyncio.Semaphore(self.max_connections)
        return self._slots

    def _expire_at(self, loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[Any]", deadline: float) -> None:
        self._pending[fut] = deadline
        # the timer stays at or before every pending deadline: a call's
        # deadline is later than the calls' before it (unless `timeout` was
        # made shorter), so it is armed about once a timeout, not once a call
        if self._timer is None or deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._sweep)
            self._timer_at = deadline

    def _sweep(self) -> None:
        self._timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        nxt: Optional[float] = None
        for fut, deadline in list(self._pending.items()):
            if deadline <= now:
                del self._pending[fut]
                if not fut.done():
                    fut.set_exception(asyncio.TimeoutError())
            elif nxt is None or deadline < nxt:
                nxt = deadline
        if nxt is not None:
            self._timer = loop.call_at(nxt, self._sweep)
            self._timer_at = nxt

    async def _within(self, loop: asyncio.AbstractEventLoop, aw: Any, deadline: float) -> Any:
        """`aw` (connecting, waiting for a connection: not the common path) by `deadline`."""
        left = deadline - loop.time()
        if left <= 0:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise asyncio.TimeoutError()
        return await asyncio.wait_for(aw, left)

    async def _exchange(self, loop: asyncio.AbstractEventLoop, msg: bytes, deadline: float) -> Answer:
        slots = self._on(loop)
        if slots.locked():
            await self._within(loop, slots.acquire(), deadline)
        else:
            await slots.acquire()
        try:
            for attempt in (0, 1):
                conn = None
                while self._idle:
                    conn = self._idle.pop()
                    if not conn.lost:
                        break
                    conn = None
                reused = conn is not None
                if conn is None:
                    _, conn = await self._within(loop, loop.create_connection(
                        _Conn, self.endpoint.host, self.endpoint.port), deadline)
                assert conn.transport is not None
                w = conn.waiter = loop.create_future()
                self._expire_at(loop, w, deadline)
                done = False
                try:
                    conn.transport.write(msg)
                    answer, close = await w
                    done = True
                except _Stale:
                    if not reused or attempt == 1:
                        raise ConnectionResetError("the daemon closed the connection without an answer")
                    # closed while idle: the daemon never drops a request it
                    # read (docs/API.md, "draining"), so send it again
                    continue
                except ConnectionError as e:
                    if not reused or attempt == 1:
                        raise
                    self.log.debug("a kept-alive connection failed (%s): once more", e)
                    continue
                finally:
                    self._pending.pop(w, None)
                    conn.waiter = None
                    if not done:
                        # an error, a timeout or a cancellation mid-answer:
                        # what is left on this connection cannot be trusted
                        conn.transport.abort()
                if close or conn.lost:
                    conn.transport.abort()
                else:
                    self._idle.append(conn)
                return answer
        finally:
            slots.release()
        raise AssertionError("unreachable")

    async def _call(self, route: str, body: bytes, client_ip: Optional[str],
                    extra: Optional[Mapping[str, str]]) -> Decision:
        loop = asyncio.get_running_loop()
        start = loop.time()
        if extra:
            h = _core.request_headers(client_ip, extra)
            head = b"POST " + route.encode() + b" HTTP/1.1\r\nHost: " + self._host + b"\r\n" + b"".join(
                ("%s: %s\r\n" % kv).encode("latin-1") for kv in h.items())
        elif client_ip:
            # the client's address, for the `forwarded` identity source
            head = self._start[route] + b"X-Forwarded-For: " + client_ip.encode("latin-1") + b"\r\n"
        else:
            head = self._start[route]
        msg = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        try:
            status, rh, data = await self._exchange(loop, msg, start + self.timeout)
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            ms = (loop.time() - start) * 1000
            what = "timed out" if isinstance(e, asyncio.TimeoutError) else "%s: %s" % (type(e).__name__, e)
            return _core.failed(route, "%s after %.0f ms" % (what, ms), ms, self.fail_open, self.log)
        return _core.decide(route, status, rh, data, (loop.time() - start) * 1000,
                            self.fail_open, self.log, quota=rh)

    # ---------------------------------------------------------------- calls

    async def check(self, key: Optional[str] = None, path: Optional[str] = None,
                    method: Optional[str] = None, client_ip: Optional[str] = None,
                    policy: Optional[str] = None, cost: Optional[int] = None,
                    limits: Optional[List[Dict[str, Any]]] = None,
                    headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /check, as Client.check."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return await self._call("/check", body, client_ip, headers)

    async def charge(self, cost: int, key: Optional[str] = None, path: Optional[str] = None,
                     method: Optional[str] = None, client_ip: Optional[str] = None,
                     policy: Optional[str] = None, limits: Optional[List[Dict[str, Any]]] = None,
                     headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /charge, as Client.charge."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return await self._call("/charge", body, client_ip, headers)

    def reserve(self, estimate: int, key: Optional[str] = None, path: Optional[str] = None,
                method: Optional[str] = None, client_ip: Optional[str] = None,
                policy: Optional[str] = None, error_cost: Optional[int] = None,
                headers: Optional[Mapping[str, str]] = None) -> Reserving:
        """As Client.reserve: `r = await client.reserve(...)`, or
        `async with client.reserve(...) as r:` to settle at the block's end —
        on success, on an exception and on cancellation alike."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=estimate,
                                     reserve=True), self.policy)

        async def make() -> AsyncReservation:
            d = await self._call("/check", body, client_ip, headers)
            return AsyncReservation(self, d, estimate, error_cost)
        return Reserving(make)

    async def settle(self, reservation: str, cost: int) -> Decision:
        """POST /settle, as Client.settle."""
        return await self._call("/settle", _core.settle_body(reservation, cost),
                                None, None)

    async def release(self, lease: str) -> Decision:
        """POST /release, as Client.release."""
        return await self._call("/release", _core.json_body({"lease": lease}),
                                None, None)

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for c in idle:
            if c.transport is not None:
                c.transport.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
