"""The sync client's transport: keep-alive, reconnects, threads, timeouts."""

import threading
import time

import harness as H
import pytest

from conftest import CONFIG, OK_TIMEOUT, accepted, fresh, url
from ratelimitd import Client


@pytest.fixture
def own_daemon(redis):
    """A daemon of its own (connections counted), closing idle ones after 300 ms."""
    with H.Daemon(dict(CONFIG, http={"idle_timeout": "300ms"}), redis=redis) as d:
        yield d


def test_one_connection_for_many_calls(own_daemon):
    client = Client(url(own_daemon.port), timeout=OK_TIMEOUT)
    before = accepted(own_daemon)
    key = fresh()
    ds = [client.check(key=key, policy="conf") for _ in range(5)]
    ds.append(client.charge(3, key=fresh(), policy="budget"))
    assert [d.status for d in ds] == [200, 200, 200, 429, 429, 200]
    # the checks' one connection and the metrics read's
    assert accepted(own_daemon) - before == 2


def test_reconnects_after_the_daemon_closed_an_idle_connection(own_daemon):
    client = Client(url(own_daemon.port), timeout=OK_TIMEOUT)
    assert client.check(key=fresh(), policy="conf").allowed
    H.wait_for(lambda: H.metric(own_daemon, "ratelimitd_connections_open") == 1,
               "the daemon closing the client's idle connection (idle_timeout 300ms)", timeout=10 * H.SLOW)
    before = accepted(own_daemon)
    d = client.check(key=fresh(), policy="conf")
    assert d.allowed and not d.degraded, d
    assert accepted(own_daemon) - before == 2


def test_threads_each_keep_their_connection(own_daemon):
    client = Client(url(own_daemon.port), timeout=OK_TIMEOUT)
    key = fresh()
    got = []

    def worker():
        got.extend(client.check(key=key, policy="budget").status for _ in range(10))
    ts = [threading.Thread(target=worker) for _ in range(4)]
    before = accepted(own_daemon)
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [200] * 40
    assert accepted(own_daemon) - before <= 5
    st, _, body = H.request(own_daemon.port, "POST", "/check", {"key": key, "policy": "budget", "cost": 0})
    assert body["remaining"] == 1000 - 40, body


def test_total_timeout_bounds_a_hung_daemon(blackhole):
    client = Client(url(blackhole.port), timeout=0.3, fail_open=True)
    t0 = time.monotonic()
    d = client.check(key="k")
    took = time.monotonic() - t0
    assert d.allowed and d.degraded and d.reason and "after" in d.reason, d
    assert took < 0.3 + 0.5 * H.SLOW, took


def test_default_timeout_and_policy():
    c = Client()
    assert (c.timeout, c.fail_open, c.endpoint.host, c.endpoint.port) == (0.2, True, "127.0.0.1", 8080)
    with pytest.raises(ValueError):
        Client("https://example.com")


def test_client_policy_is_the_default(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    d = client.check(key=fresh())
    assert d.policy == "conf" and d.limit == 3 and d.remaining == 2, d
    d = client.check(key=fresh(), policy="budget")
    assert d.policy == "budget", d
