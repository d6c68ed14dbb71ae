"""The synchronous client, on http.client: one kept-alive connection per
thread (an http.client connection is not thread-safe), a total timeout per
call, and the fail-open/fail-closed choice."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _core
from ._core import Decision, Endpoint
from ._reserve import Reservation

Answer = Tuple[int, List[Tuple[str, str]], bytes]


class Client:
    """A client of one ratelimitd check listener; safe to share between threads.

    url        http://host:port of the check listener
    timeout    seconds for a whole call (connecting, sending, reading, and
               the one retry below): the limiter is never why a request hangs
    fail_open  when the daemon cannot answer (refused, timeout, 5xx): True
               allows (degraded), False answers 503 with Retry-After: 1
    policy     the policy every call names unless it names its own
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", timeout: float = 0.2,
                 fail_open: bool = True, policy: Optional[str] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        self.endpoint = Endpoint(url)
        self.timeout = timeout
        self.fail_open = fail_open
        self.policy = policy
        self.log = logger or _core.log
        self._local = threading.local()

    # ------------------------------------------------------------ transport

    def _conn(self) -> Tuple[http.client.HTTPConnection, bool]:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=self.timeout)
            self._local.conn = c
            self._local.used = False
        return c, self._local.used

    def _drop(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
        self._local.conn = None

    def _post(self, route: str, body: bytes, headers: Dict[str, str], deadline: float) -> Answer:
        """One exchange; OSError or HTTPException when it failed.  Every
        socket operation waits at most until `deadline` (monotonic)."""
        for attempt in (0, 1):
            c, reused = self._conn()
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            c.timeout = left
            if c.sock is not None:
                c.sock.settimeout(left)
            try:
                c.request("POST", route, body=body, headers=headers)
                if c.sock is not None:
                    c.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                r = c.getresponse()
                data = r.read()
                self._local.used = True
                if r.will_close:
                    self._drop()
                return r.status, r.getheaders(), data
            except (socket.timeout, TimeoutError):
                # the daemon is slow: a retry would only double the wait
                self._drop()
                raise
            except (OSError, http.client.HTTPException):
                self._drop()
                if not reused or attempt == 1:
                    raise
                # a kept-alive connection the daemon had closed while idle: it
                # closes one only between requests, never after reading one
                # without answering it (docs/API.md, "draining"), so the call
                # did not count and goes once more on a fresh connection
        raise AssertionError("unreachable")

    def _call(self, route: str, body: bytes, headers: Dict[str, str]) -> Decision:
        start = time.monotonic()
        try:
            status, rh, data = self._post(route, body, headers, start + self.timeout)
        except (OSError, http.client.HTTPException) as e:
            ms = (time.monotonic() - start) * 1000
            return _core.failed(route, "%s: %s after %.0f ms" % (type(e).__name__, e, ms), ms,
                                self.fail_open, self.log)
        return _core.decide(route, status, rh, data, (time.monotonic() - start) * 1000,
                            self.fail_open, self.log)

    # ---------------------------------------------------------------- calls

    def check(self, key: Optional[str] = None, path: Optional[str] = None,
              method: Optional[str] = None, client_ip: Optional[str] = None,
              policy: Optional[str] = None, cost: Optional[int] = None,
              limits: Optional[List[Dict[str, Any]]] = None,
              headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /check: may this request go on?  Never raises for the daemon's sake."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return self._call("/check", body, _core.request_headers(client_ip, headers))

    def charge(self, cost: int, key: Optional[str] = None, path: Optional[str] = None,
               method: Optional[str] = None, client_ip: Optional[str] = None,
               policy: Optional[str] = None, limits: Optional[List[Dict[str, Any]]] = None,
               headers: Optional[Mapping[str, str]] = None) -> Decision:
        """POST /charge: count `cost` now, past the limit too (work already
        done).  `charged` is None when the daemon did not take it."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=cost,
                                     limits=limits), self.policy)
        return self._call("/charge", body, _core.request_headers(client_ip, headers))

    def reserve(self, estimate: int, key: Optional[str] = None, path: Optional[str] = None,
                method: Optional[str] = None, client_ip: Optional[str] = None,
                policy: Optional[str] = None, error_cost: Optional[int] = None,
                headers: Optional[Mapping[str, str]] = None) -> Reservation:
        """POST /check with "reserve": true, taking `estimate` now.  The
        Reservation says whether the request may go on (`allowed`) and settles
        once, at its `with` block's end or by settle(cost).  Denied, or failed
        open, it holds no reservation and settles nothing."""
        body = _core.check_body(dict(key=key, policy=policy, path=path, method=method, cost=estimate,
                                     reserve=True), self.policy)
        d = self._call("/check", body, _core.request_headers(client_ip, headers))
        return Reservation(self, d, estimate, error_cost)

    def settle(self, reservation: str, cost: int) -> Decision:
        """POST /settle: the real cost of a reservation.  `settled` True: the
        difference applied (`charged`, negative when given back); False: not
        held (settled already, expired, unknown); None: unknown (the daemon did
        not answer: settling again is safe, it settles once)."""
        return self._call("/settle", _core.settle_body(reservation, cost), _core.request_headers(None, None))

    def release(self, lease: str) -> Decision:
        """POST /release: give back a concurrency slot (`released` says whether it was held)."""
        return self._call("/release", _core.json_body({"lease": lease}), _core.request_headers(None, None))

    def close(self) -> None:
        """Close this thread's connection (others close with their threads)."""
        self._drop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
