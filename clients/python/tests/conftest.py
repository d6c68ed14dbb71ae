"""The Python client's tests run against the real daemon over a real
redis-server, started as every integration test starts them: by
tests/integration/harness.py (RATELIMITD names the daemon; make check sets
it, else the build under build/ is taken).

    RATELIMITD=build/src/ratelimitd pytest-3 clients/python/tests
"""

import json
import os
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
if not os.environ.get("RATELIMITD"):
    os.environ["RATELIMITD"] = os.path.join(os.environ.get("RL_BUILD", os.path.join(TOP, "build")),
                                            "src", "ratelimitd")

import harness as H  # noqa: E402

with open(os.path.join(TOP, "clients", "conformance.json")) as f:
    CONFORMANCE = json.load(f)
CONFIG = CONFORMANCE["config"]
#: towards a working daemon: a loaded machine (or valgrind) must not make a call fail open
OK_TIMEOUT = 5.0 * H.SLOW


def fresh(prefix="k"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


def url(port):
    return "http://127.0.0.1:%d" % port


@pytest.fixture(scope="session")
def redis():
    with H.Redis(topology="standalone") as r:
        yield r


@pytest.fixture(scope="session")
def daemon(redis):
    """A daemon with the conformance file's configuration."""
    with H.Daemon(CONFIG, redis=redis) as d:
        yield d


@pytest.fixture(scope="session")
def unavailable():
    """A daemon answering 503: failure_mode closed, its Redis unreachable."""
    with H.Daemon(dict(CONFIG, failure_mode="closed"), args=["-r", "redis://127.0.0.1:%d/0" % H.free_port()],
                  ready=False) as d:
        st, _, _ = H.request(d.port, "POST", "/check", {"key": "k", "policy": "conf"})
        assert st == 503, "the 503 daemon answered %d" % st
        yield d


@pytest.fixture
def blackhole():
    b = H.Blackhole()
    yield b
    b.close()


@pytest.fixture
def down_port():
    """A loopback port nothing listens on."""
    return H.free_port()


def accepted(d):
    return H.metric(d, "ratelimitd_connections_accepted_total")
