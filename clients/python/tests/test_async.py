"""The asyncio client: its pool, timeouts and cancellation."""

import asyncio
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
