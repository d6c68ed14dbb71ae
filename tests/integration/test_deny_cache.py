#!/usr/bin/env python3
"""The local cache of denials (docs/operations.md: deny_cache): a hot denied key is
answered by the daemon itself until its denial must end, at no cost to Redis,
and never for longer than Redis would deny it."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post, script_calls as evalsha_calls  # noqa: E402

# "hot": its window (opened by the first check) must outlast every case that
# expects a denial of it (54 checks and two /metrics reads in a row, slower
# under valgrind or on a loaded machine): a window that ends mid-case turns
# a correct 200 into a failure.
# "tb": 2 tokens per TB_WINDOW_MS (one every TB_WINDOW_MS / 2): the case that
# waits for a refill needs its first three checks to land within one token's
# time, so that time scales with harness.SLOW.
TB_WINDOW_MS = 4000 * H.SLOW
TB_TOKEN_MS = TB_WINDOW_MS // 2
CONFIG = {
    "identity": ["body"],
    "redis": {"timeout": "2s"},
    "policies": [
        {"name": "hot", "limits": [{"algorithm": "fixed_window", "limit": 3, "window": "1h"}]},
        {"name": "tb", "limits": [{"algorithm": "token_bucket", "limit": 2, "window": "%dms" % TB_WINDOW_MS,
                                   "burst": 2}]},
    ],
}


def cache_hits(d):
    st, h, text = H.request(d.port, "GET", "/metrics")
    m = re.search(r"^ratelimitd_local_cache_hits_total (\d+)$", text, re.M)
    check(m, "no ratelimitd_local_cache_hits_total in /metrics")
    return int(m.group(1))


def t_hot_key_costs_redis_nothing(d, r):
    for i in range(3):
        st, h, b = post(d, {"key": "abuser", "policy": "hot"})
        eq(st, 200, "check #%d" % (i + 1))
    st, h, b = post(d, {"key": "abuser", "policy": "hot"})
    eq(st, 429, "4th check (denied by Redis)")
    calls, hits = evalsha_calls(r), cache_hits(d)
    for i in range(50):
        st, h, b = post(d, {"key": "abuser", "policy": "hot"})
        eq(st, 429, "cached denial #%d" % (i + 1))
        check(b.get("retry_after_ms", 0) > 0 and "retry-after" in h,
              "a cached denial still carries retry_after_ms and Retry-After: %r", b)
        eq(b.get("remaining"), 0, "remaining of a cached denial")
    eq(evalsha_calls(r) - calls, 0, "EVALSHA calls while the key was hot")
    eq(cache_hits(d) - hits, 50, "increase of ratelimitd_local_cache_hits_total")
    # another caller is not affected
    st, h, b = post(d, {"key": "neighbour", "policy": "hot"})
    eq(st, 200, "another key of the same policy")


def t_cached_denial_ends_in_time(d, r):
    # drain a token bucket (2 per TB_WINDOW_MS): the next token comes in TB_TOKEN_MS
    for i in range(2):
        eq(post(d, {"key": "tb1", "policy": "tb"})[0], 200, "token #%d" % (i + 1))
    st, h, b = post(d, {"key": "tb1", "policy": "tb"})
    eq(st, 429, "3rd check")
    wait = b["retry_after_ms"]
    check(0 < wait <= TB_TOKEN_MS, "retry_after_ms %r of an empty bucket (a token every %d ms)", wait,
          TB_TOKEN_MS)
    time.sleep(wait / 1000.0 + 0.05)
    st, h, b = post(d, {"key": "tb1", "policy": "tb"})
    eq(st, 200, "a check once retry_after_ms has passed (the cache must not outlast Redis)")


def t_cheaper_check_asks_redis(d, r):
    for i in range(2):
        post(d, {"key": "tb2", "policy": "tb", "cost": 1})
    st, h, b = post(d, {"key": "tb2", "policy": "tb", "cost": 2})
    eq(st, 429, "cost 2 on an empty bucket")
    calls = evalsha_calls(r)
    st, h, b = post(d, {"key": "tb2", "policy": "tb", "cost": 0})
    eq(st, 200, "cost 0 asks without consuming (not covered by a denial of cost 2)")
    check(evalsha_calls(r) > calls, "the cost 0 check went to Redis")


def t_same_decisions_without_cache(d, r):
    # the cache changes who answers, never the answer
    with H.Daemon(dict(CONFIG, deny_cache=False), redis=r) as off:
        for key, dd in (("same-a", d), ("same-b", off)):
            got = [post(dd, {"key": key, "policy": "hot"})[0] for _ in range(6)]
            eq(got, [200, 200, 200, 429, 429, 429], "statuses with deny_cache %s" %
               ("on" if dd is d else "off"))


CASES = [
    ("a hot denied key is answered locally: zero EVALSHA, cache hits counted", t_hot_key_costs_redis_nothing),
    ("a cached denial ends when Redis's would (token bucket refill)", t_cached_denial_ends_in_time),
    ("a cheaper check than the cached denial asks Redis", t_cheaper_check_asks_redis),
    ("the same decisions with the cache off", t_same_decisions_without_cache),
]


def fixture():
    return H.redis_and_daemon(CONFIG)


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
