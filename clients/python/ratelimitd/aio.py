"""The asyncio client, on asyncio streams: a pool of kept-alive connections
(at most `max_connections`, shared by the tasks of one event loop), a total
timeout per call, and the fail-open/fail-closed choice."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _core
from ._core import Decision, Endpoint
from ._reserve import AsyncReservation, Reserving

Conn = Tuple[asyncio.StreamReader, asyncio.StreamWriter]
Answer = Tuple[int, List[Tuple[str, str]], bytes]


_timeout = getattr(asyncio, "timeout", None)     # Python 3.11


class _Stale(Exception):
    """A kept-alive connection the daemon had closed while it was idle."""


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
        self._idle: List[Conn] = []
        self._slots: Optional[asyncio.Semaphore] = None
        self._host = ("%s:%d" % (self.endpoint.host, self.endpoint.port)).encode()

    def _pool(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._slots is None:
            # connections of another loop cannot be used here
            for _, w in self._idle:
                if self._loop is not None and not self._loop.is_closed():
                    w.transport.abort()
            self._idle = []
            self._loop = loop
            self._slots = asyncio.Semaphore(self.max_connections)
        return self._slots

    async def _open(self) -> Tuple[Conn, bool]:
        while self._idle:
            r, w = self._idle.pop()
            if not r.at_eof() and not w.is_closing():
                return (r, w), True
            w.transport.abort()
        return await asyncio.open_connection(self.endpoint.host, self.endpoint.port), False

    def _head(self, route: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [b"POST " + route.encode() + b" HTTP/1.1", b"Host: " + self._host,
                 b"Content-Length: " + str(len(body)).encode()]
        lines += [("%s: %s" % kv).encode("latin-1") for kv in headers.items()]
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    @staticmethod
    async def _read(r: asyncio.StreamReader, reused: bool) -> Tuple[Answer, bool]:
        try:
            # the whole head at once: a readline per header costs more than
            # the rest of the client's work together
            head = await r.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial and reused:
                raise _Stale()
            raise ConnectionResetError("the daemon closed the connection without an answer")
        except asyncio.LimitOverrunError:
            raise ConnectionError("an answer's head longer than 64 KiB")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ConnectionError("not an HTTP/1.1 answer: %r" % lines[0][:80])
        headers: List[Tuple[str, str]] = []
        length = 0
        close = parts[0] == "HTTP/1.0"
        for h in lines[1:-2]:
            name, _, value = h.partition(":")
            name, value = name.strip(), value.strip()
            headers.append((name, value))
            low = name.lower()
            if low == "content-length":
                length = int(value)
            elif low == "connection":
                close = value.lower() == "close"
        data = await r.readexactly(length) if length else b""
        return (int(parts[1]), headers, data), close

    async def _exchange(self, route: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        msg = self._head(route, body, headers)
        async with self._pool():
            for attempt in (0, 1):
                (r, w), reused = await self._open()
                done = False
                try:
                    w.write(msg)
                    await w.drain()
                    answer, close = await self._read(r, reused)
                    done = True
                except _Stale:
                    if attempt == 1:
                        raise ConnectionResetError("the daemon closed the connection without an answer")
                    # closed while idle: the daemon never drops a request it
                    # read (docs/API.md, "draining"), so send it again
                    continue
                except (ConnectionError, BrokenPipeError) as e:
                    if not reused or attempt == 1:
                        raise
                    self.log.debug("a kept-alive connection failed (%s): once more", e)
                    continue
                finally:
                    if not done:
                        # an error, a timeout or a cancellation mid-answer:
                        # what is left on this connection cannot be trusted
                        w.transport.abort()
                if close:
                    w.transport.abort()
                else:
                    self._idle.append((r, w))
                return answer
        raise AssertionError("unreachable")

    async def _call(self, route: str, body: bytes, headers: Mapping[str, str]) -> Decision:
        start = time.monotonic()
        try:
            if _timeout is not None:
                # no task of its own per call (asyncio.wait_for makes one: a
                # third of a loopback check's time in Python 3.11)
                async with _timeout(self.timeout):
                    status, rh, data = await self._exchange(route, body, headers)
            else:
                status, rh, data = await asyncio.wait_for(self._exchange(route, body, headers), self.timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            ms = (time.monotonic() - start) * 1000
            what = "timed out" if isinstance(e, asyncio.TimeoutError) else "%s: %s" % (type(e).__name__, e)
            return _core.failed(route, "%s after %.0f ms" % (what, ms), ms, self.fail_open, self.log)
        return _core.decide(route, status, rh, data, (time.monotonic() - start) * 1000,
                            self.fail_open, self.log)

    # ---------------------------------------------------------------- calls

    async def check(self, key: Optional[str] = None, path: Optional[str] = None,
                    method: Optional[str] = None, client_ip: Optional[str] = None,
                    policy: Optional[str] = None, cost: Optional[int] = None,
                    limits: Optional[List[Dict[str, Any]]] = None,
                    headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /check, as Client.check."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return await self._call("/check", body, _core.request_headers(client_ip, headers))

    async def charge(self, cost: int, key: Optional[str] = None, path: Optional[str] = None,
                     method: Optional[str] = None, client_ip: Optional[str] = None,
                     policy: Optional[str] = None, limits: Optional[List[Dict[str, Any]]] = None,
                     headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /charge, as Client.charge."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return await self._call("/charge", body, _core.request_headers(client_ip, headers))

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
            d = await self._call("/check", body, _core.request_headers(client_ip, headers))
            return AsyncReservation(self, d, estimate, error_cost)
        return Reserving(make)

    async def settle(self, reservation: str, cost: int) -> Decision:
        """POST /settle, as Client.settle."""
        return await self._call("/settle", _core.settle_body(reservation, cost),
                                _core.request_headers(None, None))

    async def release(self, lease: str) -> Decision:
        """POST /release, as Client.release."""
        return await self._call("/release", _core.json_body({"lease": lease}),
                                _core.request_headers(None, None))

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for _, w in idle:
            w.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
