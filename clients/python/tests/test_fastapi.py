"""The ASGI middleware in a FastAPI app (Debian's python3-fastapi), through
its TestClient and through a real server (uvicorn, which python3-fastapi
depends on) that a client really leaves, against the real daemon."""

import asyncio
import socket
import threading

import harness as H
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from conftest import OK_TIMEOUT, fresh, url
from ratelimitd import AsyncClient
from ratelimitd.asgi import RateLimitMiddleware

CHUNK = 10       # units a streamed chunk costs


def api_key(scope):
    return dict(scope["headers"]).get(b"x-api-key", b"").decode() or None


def fastapi_app(client, **kw):
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, client=client, key=api_key, **kw)
    # set when a stream is past its first chunks and waits for what never comes
    app.state.waiting = threading.Event()

    @app.get("/orders")
    async def orders(request: Request):
        return {"hello": "fastapi", "remaining": request.scope["state"]["ratelimitd.decision"].remaining}

    @app.get("/stream/{chunks}")
    async def stream(chunks: int, request: Request, hold: bool = False):
        r = request.scope["state"]["ratelimitd.reservation"]

        async def body():
            for i in range(chunks):
                r.add(CHUNK)
                yield b"chunk %d\n" % i
            if hold:
                app.state.waiting.set()
                await asyncio.Event().wait()     # until the client goes
        return StreamingResponse(body(), media_type="text/plain")
    return app


def remaining(daemon, key):
    st, _, body = H.request(daemon.port, "POST", "/check", {"key": key, "policy": "budget", "cost": 0})
    assert st == 200, body
    return body["remaining"]


def test_fastapi_limit_then_429_with_the_daemons_headers(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    key = fresh()
    with TestClient(fastapi_app(client, headers=True)) as tc:
        rs = [tc.get("/orders", headers={"X-Api-Key": key}) for _ in range(4)]
        assert [r.status_code for r in rs] == [200, 200, 200, 429]
        # allowed: the app ran, the decision in its scope; headers=True passes the quota headers
        assert [r.json() for r in rs[:3]] == [{"hello": "fastapi", "remaining": n} for n in (2, 1, 0)]
        assert [r.headers["x-ratelimit-remaining"] for r in rs[:3]] == ["2", "1", "0"]
        assert "retry-after" not in rs[0].headers
        # denied: the daemon's 429, Retry-After and quota headers, the app never ran
        ra = rs[3].headers["retry-after"]
        assert ra.isdigit() and 1 <= int(ra) <= 60
        assert rs[3].headers["x-ratelimit-remaining"] == "0"
        assert rs[3].headers["x-ratelimit-limit"] == "3"
        assert rs[3].headers["ratelimit-policy"].startswith('"conf"')
        assert rs[3].json() == {"error": "too many requests", "retry_after": int(ra)}
        # another key has its own count
        assert tc.get("/orders", headers={"X-Api-Key": fresh()}).status_code == 200


def test_fastapi_fail_closed_answers_503(down_port):
    client = AsyncClient(url(down_port), timeout=1.0, fail_open=False)
    with TestClient(fastapi_app(client)) as tc:
        r = tc.get("/orders", headers={"X-Api-Key": fresh()})
        assert (r.status_code, r.headers["retry-after"]) == (503, "1")
        assert r.json() == {"error": "rate limiter unavailable"}


def test_fastapi_stream_settles_at_what_it_streamed(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    with TestClient(fastapi_app(client, reserve=lambda scope: 500)) as tc:
        r = tc.get("/stream/7", headers={"X-Api-Key": key})
        assert r.status_code == 200 and r.text == "".join("chunk %d\n" % i for i in range(7))
        # the estimate of 500 taken, 70 settled once the stream ended
        H.wait_for(lambda: remaining(daemon, key) == 1000 - 7 * CHUNK, "the stream settled at 70",
                   timeout=10)
    # a reservation past the budget is the daemon's 429, and the app never runs
    with TestClient(fastapi_app(client, reserve=lambda scope: 1000)) as tc:
        r = tc.get("/stream/1", headers={"X-Api-Key": key})
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60, r.text
        assert r.headers["x-ratelimit-remaining"] == str(1000 - 7 * CHUNK)
        assert r.json()["error"] == "too many requests"
    assert remaining(daemon, key) == 1000 - 7 * CHUNK


class Server:
    """A FastAPI app under uvicorn on a loopback port, in a thread of its own."""

    def __init__(self, app):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
        self.server.install_signal_handlers = lambda: None     # not the main thread
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        H.wait_for(lambda: self.server.started or not self.thread.is_alive(), "uvicorn started", timeout=30)
        assert self.server.started, "uvicorn did not start"

    def close(self):
        self.server.should_exit = True
        self.thread.join(30 * H.SLOW)
        self.sock.close()


@pytest.fixture
def served():
    servers = []

    def serve(app):
        servers.append(Server(app))
        return servers[-1]
    yield serve
    for s in servers:
        s.close()


def get(port, path, key):
    s = socket.create_connection(("127.0.0.1", port), timeout=10 * H.SLOW)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\nX-Api-Key: %s\r\n\r\n" % (path.encode(), key.encode()))
    return s


def read_until(s, what):
    data = b""
    while what not in data:
        got = s.recv(65536)
        assert got, "the server closed before %r: %r" % (what, data)
        data += got
    return data


def test_fastapi_stream_settles_when_the_client_goes(daemon, served):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    app = fastapi_app(client, reserve=lambda scope: 600, error_cost=0)
    srv = served(app)
    s = get(srv.port, "/stream/3?hold=true", key)
    try:
        head = read_until(s, b"chunk 2\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert app.state.waiting.wait(10 * H.SLOW)
        # the stream holds its reservation of 600 while it is open
        assert remaining(daemon, key) == 400
    finally:
        s.close()
    # the client went mid-stream: settled at the 30 it was sent, not the estimate
    H.wait_for(lambda: remaining(daemon, key) == 1000 - 3 * CHUNK, "the abandoned stream settled at 30",
               timeout=10)
    # and a stream to its end, through the same server and client
    s = get(srv.port, "/stream/5", key)
    try:
        data = read_until(s, b"0\r\n\r\n")
        assert b"chunk 4\n" in data, data
    finally:
        s.close()
    H.wait_for(lambda: remaining(daemon, key) == 1000 - 8 * CHUNK, "the finished stream settled at 50",
               timeout=10)
