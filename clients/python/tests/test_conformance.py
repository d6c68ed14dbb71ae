"""clients/conformance.json, through the sync and the asyncio client alike
(the Node client runs the same file: clients/node/test/conformance.test.js)."""

import asyncio

import pytest

from conftest import CONFORMANCE, OK_TIMEOUT, fresh, url
from ratelimitd import AsyncClient, Client

SCENARIOS = CONFORMANCE["scenarios"]
DECISION_FIELDS = ("allowed", "status", "degraded", "charged", "released", "settled")


def substitute(v, saved):
    if isinstance(v, str) and v.startswith("$"):
        return saved[v[1:]]
    return v


def hold(d, expect, what):
    """The decision `d` against a step's `expect`."""
    for f in DECISION_FIELDS:
        if f in expect:
            assert getattr(d, f) == expect[f], "%s: %s is %r, want %r (%r)" % (what, f, getattr(d, f),
                                                                             expect[f], d)
    if "reservation" in expect:
        assert bool(d.reservation) == expect["reservation"], "%s: reservation %r" % (what, d.reservation)
    if "retry_after" in expect:
        want = expect["retry_after"]
        if want is None:
            assert d.retry_after is None, "%s: retry_after %r, want none" % (what, d.retry_after)
        else:
            assert d.retry_after is not None and want[0] <= d.retry_after <= want[1], \
                "%s: retry_after %r, want %r" % (what, d.retry_after, want)
    for k, v in expect.get("body", {}).items():
        assert k in d.body, "%s: no %r in the answer %r" % (what, k, d.body)
        if v is not True:
            assert d.body[k] == v, "%s: body %s is %r, want %r" % (what, k, d.body[k], v)
    for k, v in expect.get("headers", {}).items():
        got = d.header(k)
        assert got is not None, "%s: no header %s in %r" % (what, k, d.headers)
        if v is not True:
            assert got == v, "%s: header %s is %r, want %r" % (what, k, got, v)
    if "reason" in expect:
        assert expect["reason"] in (d.reason or ""), "%s: reason %r, want it to say %r" % (
            what, d.reason, expect["reason"])
    if "max_elapsed_ms" in expect:
        assert d.elapsed_ms < expect["max_elapsed_ms"], "%s: took %.0f ms" % (what, d.elapsed_ms)


def target_url(sc, daemon, unavailable, blackhole, down_port):
    return url({"daemon": daemon.port, "unavailable": unavailable.port, "hung": blackhole.port,
                "down": down_port}[sc["target"]])


def options(sc):
    o = sc.get("client", {})
    return dict(fail_open=o.get("fail_open", True), timeout=o.get("timeout_ms", OK_TIMEOUT * 1000) / 1000.0)


def calls(sc):
    """(step number, repetition, call, args, expect, save) of a scenario, "$key" given."""
    key = fresh()
    for i, step in enumerate(sc["steps"]):
        for rep in range(step.get("repeat", 1)):
            args = {k: (key if v == "$key" else v) for k, v in step.get("args", {}).items()}
            yield i, rep, step["call"], args, step.get("expect", {}), step.get("save", {})


def invoke(client, call, args):
    """The call's decision (a coroutine's, for the asyncio client)."""
    if call == "release":
        return client.release(args["lease"])
    if call == "settle":
        return client.settle(args["reservation"], args["cost"])
    if call == "reserve":
        args = dict(args)
        r = client.reserve(args.pop("cost"), **args)
        if hasattr(r, "__await__"):
            async def decision():
                return (await r).decision
            return decision()
        return r.decision
    if call == "charge":
        return client.charge(**args)
    return client.check(**args)


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_sync(sc, daemon, unavailable, blackhole, down_port):
    with Client(target_url(sc, daemon, unavailable, blackhole, down_port), **options(sc)) as client:
        saved = {}
        for i, rep, call, args, expect, save in calls(sc):
            d = invoke(client, call, {k: substitute(v, saved) for k, v in args.items()})
            hold(d, expect, "step %d (%s) #%d" % (i + 1, call, rep + 1))
            saved.update({name: d.body.get(field) for name, field in save.items()})


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_async(sc, daemon, unavailable, blackhole, down_port):
    async def run():
        async with AsyncClient(target_url(sc, daemon, unavailable, blackhole, down_port), **options(sc)) as client:
            saved = {}
            for i, rep, call, args, expect, save in calls(sc):
                co = invoke(client, call, {k: substitute(v, saved) for k, v in args.items()})
                d = await co
                hold(d, expect, "step %d (%s) #%d" % (i + 1, call, rep + 1))
                saved.update({name: d.body.get(field) for name, field in save.items()})
    asyncio.run(run())
