"""Reservations as context managers: settled once at the block's end, on
success, on an exception and on cancellation alike — the daemon's own
numbers say what was settled."""

import asyncio

import harness as H
import pytest

from conftest import OK_TIMEOUT, fresh, url
from ratelimitd import AsyncClient, Client


def remaining(daemon, key):
    st, _, body = H.request(daemon.port, "POST", "/check", {"key": key, "policy": "budget", "cost": 0})
    return body["remaining"]


def test_block_settles_at_the_cost_it_reported(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    with client.reserve(400, key=key) as r:
        assert r.allowed and r.id, r
        assert remaining(daemon, key) == 600
        r.cost = 150
    assert (r.result.settled, r.result.charged) == (True, -250), r.result
    assert remaining(daemon, key) == 850
    # once: a second settle answers the first's result, and the daemon agrees
    assert r.settle(0) is r.result
    assert client.settle(r.id, 0).settled is False
    assert remaining(daemon, key) == 850


def test_block_without_a_cost_keeps_the_estimate(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    with client.reserve(300, key=key) as r:
        pass
    assert (r.result.settled, r.result.charged) == (True, 0)
    assert remaining(daemon, key) == 700


def test_exception_settles_at_error_cost_and_propagates(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    with pytest.raises(ZeroDivisionError):
        with client.reserve(500, key=key, error_cost=0) as r:
            1 / 0
    assert (r.result.settled, r.result.charged) == (True, -500)
    assert remaining(daemon, key) == 1000
    # what the block counted before failing wins over error_cost
    with pytest.raises(RuntimeError):
        with client.reserve(500, key=key, error_cost=0) as r:
            r.add(40)
            r.add(2)
            raise RuntimeError("upstream broke mid-stream")
    assert r.result.charged == -458
    assert remaining(daemon, key) == 958


def test_denied_reservation_holds_nothing(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    with client.reserve(1000, key=key) as r:
        assert r.allowed
    with client.reserve(1, key=key) as r2:
        assert not r2.allowed and r2.id is None and r2.decision.status == 429
    assert r2.result is None and r2.settle(5) is None


def test_async_block_settles_on_cancellation(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()
    started = []

    async def work():
        async with client.reserve(800, key=key, error_cost=0) as r:
            started.append(r)
            r.add(120)          # a stream's first chunks
            await asyncio.sleep(3600)

    async def run():
        t = asyncio.ensure_future(work())
        while not started:
            await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return started[0]
    r = asyncio.run(run())
    assert (r.result.settled, r.result.charged) == (True, -680), r.result
    assert remaining(daemon, key) == 880


def test_async_await_and_explicit_settle(daemon):
    client = AsyncClient(url(daemon.port), timeout=OK_TIMEOUT, policy="budget")
    key = fresh()

    async def run():
        r = await client.reserve(100, key=key)
        assert r.allowed and r.id
        d = await r.settle(250)
        again = await r.settle(0)
        return d, again
    d, again = asyncio.run(run())
    assert (d.settled, d.charged) == (True, 150) and again is d
    assert remaining(daemon, key) == 750
