"""ASGI middleware (Starlette, FastAPI, any ASGI app): one check per HTTP
request before the app runs, on the asyncio client; a denied request gets
the daemon's 429 with its Retry-After and quota headers.

    from ratelimitd import AsyncClient
    from ratelimitd.asgi import RateLimitMiddleware

    client = AsyncClient("http://127.0.0.1:8080", timeout=0.2)
    app.add_middleware(RateLimitMiddleware, client=client)   # Starlette, FastAPI

With reserve(scope), the check is a reservation of that estimate, settled
once the app returns: its response sent to the end, or the client gone (a
Starlette/FastAPI StreamingResponse stops at http.disconnect), or the app
failed (at error_cost), or its task cancelled.  The app reports the real cost
on the reservation, scope["state"]["ratelimitd.reservation"] (`cost = n`, or
`add(n)` per streamed chunk).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ._core import Decision
from ._http import allowed_headers, denial
from ._reserve import AsyncReservation
from .aio import AsyncClient

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _raw(pairs: List[Tuple[str, str]]) -> List[Tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


class RateLimitMiddleware:
    """key(scope), client_ip(scope) (default scope["client"][0]), policy,
    cost(scope) and headers as for the WSGI middleware; other scopes
    (websocket, lifespan) pass through.  The check carries the whole path:
    root_path and path (some servers leave root_path out of path)."""

    def __init__(self, app: ASGIApp, client: AsyncClient,
                 key: Optional[Callable[[Scope], Optional[str]]] = None,
                 client_ip: Optional[Callable[[Scope], Optional[str]]] = None,
                 policy: Optional[str] = None,
                 cost: Optional[Callable[[Scope], Optional[int]]] = None,
                 headers: bool = False,
                 reserve: Optional[Callable[[Scope], int]] = None,
                 error_cost: Optional[int] = None) -> None:
        self.app = app
        self.client = client
        self.key = key or (lambda scope: None)
        self.client_ip = client_ip or (lambda scope: (scope.get("client") or (None,))[0])
        self.policy = policy
        self.cost = cost or (lambda scope: None)
        self.headers = headers
        self.reserve = reserve
        self.error_cost = error_cost

    @staticmethod
    def _path(scope: Scope) -> str:
        root, path = scope.get("root_path") or "", scope.get("path") or "/"
        if root and not path.startswith(root):
            path = root + path
        return path

    async def check(self, scope: Scope) -> Decision:
        return await self.client.check(key=self.key(scope), path=self._path(scope),
                                       method=scope.get("method", "GET"), client_ip=self.client_ip(scope),
                                       policy=self.policy, cost=self.cost(scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        r: Optional[AsyncReservation] = None
        if self.reserve is not None:
            r = await self.client.reserve(self.reserve(scope), key=self.key(scope), path=self._path(scope),
                                          method=scope.get("method", "GET"),
                                          client_ip=self.client_ip(scope), policy=self.policy,
                                          error_cost=self.error_cost)
            state["ratelimitd.reservation"] = r
            d = r.decision
        else:
            d = await self.check(scope)
        state["ratelimitd.decision"] = d
        if d.allowed:
            if self.headers and d.headers:
                extra = _raw(allowed_headers(d))

                async def send_with(msg: Message) -> None:
                    if msg["type"] == "http.response.start":
                        msg = dict(msg, headers=list(msg.get("headers", [])) + extra)
                    await send(msg)
                app_send = send_with
            else:
                app_send = send
            if r is None:
                return await self.app(scope, receive, app_send)
            # settled at the block's end whatever way the app ends (a
            # cancellation too: the settle is shielded from it)
            async with r:
                return await self.app(scope, receive, app_send)
        status, hdrs, body = denial(d)
        await send({"type": "http.response.start", "status": status, "headers": _raw(hdrs)})
        await send({"type": "http.response.body", "body": body})
