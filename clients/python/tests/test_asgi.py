"""The ASGI middleware in Starlette (Debian's python3-starlette), through its
TestClient and through a real event loop, against the real daemon."""

import asyncio

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from conftest import OK_TIMEOUT, fresh, url
from ratelimitd import AsyncClient
from ratelimitd.asgi import RateLimitMiddleware


async def orders(request):
    return PlainTextResponse("hello from starlette\n")


def starlette_app(client, **kw):
    return Starlette(routes=[Route("/orders", orders, methods=["GET", "POST"])],
                     middleware=[Middleware(RateLimitMiddleware, client=client, **kw)])


def test_starlette_limit_then_429_with_the_daemons_headers(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    key = fresh()
    app = starlette_app(client, key=lambda scope: dict(scope["headers"]).get(b"x-api-key", b"").decode() or None)
    with TestClient(app) as tc:
        rs = [tc.post("/orders", headers={"X-Api-Key": key}) for _ in range(4)]
        assert [r.status_code for r in rs] == [200, 200, 200, 429]
        assert rs[0].text == "hello from starlette\n"
        ra = rs[3].headers["retry-after"]
        assert ra.isdigit() and 1 <= int(ra) <= 60
        assert rs[3].headers["x-ratelimit-remaining"] == "0"
        assert rs[3].headers["ratelimit-policy"].startswith('"conf"')
        assert rs[3].json() == {"error": "too many requests", "retry_after": int(ra)}


def test_starlette_fail_closed_and_bad_path(down_port, daemon):
    with TestClient(starlette_app(AsyncClient(url(down_port), timeout=1.0, fail_open=False))) as tc:
        r = tc.get("/orders")
        assert (r.status_code, r.headers["retry-after"]) == (503, "1")
    with TestClient(starlette_app(AsyncClient(url(down_port), timeout=1.0))) as tc:
        assert tc.get("/orders").status_code == 200
    with TestClient(starlette_app(AsyncClient(url(daemon.port), timeout=OK_TIMEOUT))) as tc:
        r = tc.get("/api/it%00ems")
        assert (r.status_code, r.json()) == (400, {"error": "bad request"})


def test_concurrent_requests_on_one_loop(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="conf", max_connections=2)
    app = starlette_app(client, headers=True)

    async def call(ip):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(msg):
            sent.append(msg)
        scope = {"type": "http", "method": "GET", "path": "/orders", "root_path": "", "headers": [],
                 "query_string": b"", "client": (ip, 1234), "server": ("t", 80), "scheme": "http",
                 "http_version": "1.1"}
        await app(scope, receive, send)
        return sent[0]["status"], dict(sent[0]["headers"])

    async def run():
        ip = "203.0.113.%d" % (int(fresh()[-4:], 16) % 250 + 1)
        return await asyncio.gather(*(call(ip) for _ in range(5)))
    res = asyncio.run(run())
    assert sorted(st for st, _ in res) == [200, 200, 200, 429, 429]
    assert all(b"x-ratelimit-remaining" in h for _, h in res)
