#!/usr/bin/env python3
"""A policy's answers after a reload: the same bytes as a daemon started on the new file.

The constant parts of a policy's answers (its limits, windows, bursts, names,
the RateLimit-Policy header) are rendered once when its config loads
(src/policy_text.h) and copied into every answer.  So a reload must render
them again: a daemon reloaded from file 1 to file 2 (every limit and window
changed, partition_key added) answers each check exactly as a daemon
started on file 2, and back again as one started on file 1.  Each daemon has
a Redis of its own, and both get the same checks with the same keys.  What
depends on the clock alone (Date, reset_ms, retry_after_ms, X-RateLimit-Reset,
t, Retry-After, a calendar period's window_ms) is masked before the answers are
compared; every other byte of the status line, the headers and the body is
compared as is.
"""

import contextlib
import os
import re
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

PK = "answer-text-test-partition-secret"


def config(gen):
    """File 1 or 2: every limit and window of 2 differs from 1's."""
    a = gen == 1

    def lim(algo, limit, window, **kw):
        return dict({"algorithm": algo, "limit": limit, "window": window}, **kw)

    pols = [
        {"name": "fw", "match": {"path": "/fw"},
         "limits": [lim("fixed_window", 5 if a else 7, "1h" if a else "2h")]},
        {"name": "tb", "match": {"path": "/tb"},
         "limits": [lim("token_bucket", 5 if a else 6, "1h" if a else "3h", burst=10 if a else 12)]},
        {"name": "gcra", "match": {"path": "/gcra"},
         "limits": [lim("gcra", 2 if a else 3, "1h" if a else "90m", burst=3 if a else 4)]},
        # a window of no whole seconds: RateLimit-Policy leaves its w out
        {"name": "odd", "match": {"path": "/odd"},
         "limits": [lim("fixed_window", 4 if a else 9, "3600500ms" if a else "7200700ms")]},
        {"name": "multi", "match": {"path": "/multi"},
         "limits": [lim("fixed_window", 3 if a else 4, "1h" if a else "2h"),
                    lim("sliding_window_counter", 100 if a else 200, "24h" if a else "48h")]},
        {"name": "tiny", "match": {"path": "/tiny"},
         "limits": [lim("fixed_window", 1 if a else 2, "1h" if a else "4h")]},
        {"name": "shadow", "match": {"path": "/shadow"}, "shadow": True,
         "limits": [lim("fixed_window", 1 if a else 2, "1h" if a else "5h")]},
        {"name": "tier", "match": {"path": "/tier"},
         "limits": [lim("fixed_window", 2 if a else 3, "1h" if a else "6h")],
         "overrides": [{"identities": ["key:a-gold", "key:b-gold", "key:c-gold"],
                        "limits": [lim("fixed_window", 8 if a else 11, "2h" if a else "7h")]}]},
        # a calendar period: written at each check (its length depends on when)
        {"name": "daily", "match": {"path": "/daily"},
         "limits": [lim("fixed_window", 6 if a else 8, None, period="day", timezone="UTC")]},
    ]
    for p in pols:
        for lm in p["limits"]:
            if lm["window"] is None:
                del lm["window"]
    cfg = {"identity": ["body"], "redis": {"timeout": "2s"}, "policies": pols}
    if not a:
        cfg["partition_key"] = PK
    return cfg


# (policy, key, how many checks): allowed, denied (the deny cache's answer on
# the third), shadow-denied, an override's caller
CHECKS = [("fw", "u1", 2), ("tb", "u1", 2), ("gcra", "u1", 2), ("odd", "u1", 2),
          ("multi", "u1", 2), ("tiny", "u1", 4), ("shadow", "u1", 3), ("tier", "u1", 1),
          ("tier", "gold", 2), ("daily", "u1", 2)]

CLOCK = re.compile(r'("reset_ms":|"retry_after_ms":|X-RateLimit-Reset: |;t=|Retry-After: )\d+')
PERIOD_WINDOW = re.compile(r'"window_ms":\d+(,"period")')


def answer(port, policy, key):
    """One POST /check on its own connection: the answer's bytes, the
    clock's numbers masked, Date left out."""
    body = b'{"key":"%s","policy":"%s"}' % (key.encode(), policy.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=H.HTTP_TIMEOUT) as s:
        s.sendall(H.http_bytes("POST", "/check", body, {"Connection": "close"}))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    text = data.decode("latin-1")
    text = "".join(line for line in text.splitlines(True) if not line.startswith("Date: "))
    return PERIOD_WINDOW.sub(r'"window_ms":W\1', CLOCK.sub(r"\1N", text))


def answers(d, phase):
    out = []
    for path, key, n in CHECKS:
        for i in range(n):
            out.append(("/%s %s #%d" % (path, key, i + 1),
                        answer(d.port, path, "%s-%s" % (phase, key))))
    return out


def same(got, want, what):
    """got (the reloaded daemon's) against want (a fresh one's), answer by answer."""
    eq(len(got), len(want), what + ": answers")
    for (name, a), (_, b) in zip(got, want):
        check(a == b, "%s, %s: the reloaded daemon answered\n%s\nA daemon started on the file "
              "answered\n%s", what, name, a, b)


def reload_to(d, cfg):
    before = H.metric(d, "ratelimitd_config_reloads_total", {"result": "ok"})
    d.rewrite_config(cfg)
    d.reload()
    H.wait_for(lambda: H.metric(d, "ratelimitd_config_reloads_total", {"result": "ok"}) > before,
               "the reload counted ok")


def fresh(cfg, phase):
    with H.Redis() as r, H.Daemon(cfg, redis=r) as d:
        return answers(d, phase)


def t_reload_renders_again(S):
    d = S.d
    one = answers(d, "a")
    same(one, fresh(config(1), "a"), "file 1, as started")
    # what file 1 says, in the bytes (not only equal to another daemon's)
    fw = dict(one)["/fw u1 #1"]
    check('"limit":5,"remaining":4' in fw and '"window_ms":3600000' in fw and
          'RateLimit-Policy: "fw";q=5;w=3600\r\n' in fw, "file 1's fw answer: %s", fw)

    reload_to(d, config(2))
    two = answers(d, "b")
    same(two, fresh(config(2), "b"), "file 2, after a reload from file 1")
    fw = dict(two)["/fw u1 #1"]
    check('"limit":7,"remaining":6' in fw and '"window_ms":7200000' in fw and
          re.search(r'RateLimit-Policy: "fw";q=7;w=7200;pk=:[A-Za-z0-9+/]+=:\r\n', fw),
          "file 2's fw answer: %s", fw)
    odd = dict(two)["/odd u1 #1"]
    check('"window_ms":7200700' in odd and 'RateLimit-Policy: "odd";q=9;pk=' in odd,
          "file 2's odd answer: %s", odd)
    gold = dict(two)["/tier gold #1"]
    check('"limit":11,"remaining":10' in gold, "file 2's override answer: %s", gold)

    reload_to(d, config(1))
    same(answers(d, "c"), fresh(config(1), "c"), "file 1 again, after a reload from file 2")


CASES = [
    ("a reload renders a policy's answers again: each byte as a daemon started on the file",
     t_reload_renders_again),
]


class State:
    pass


@contextlib.contextmanager
def fixture():
    S = State()
    with H.Redis() as r, H.Daemon(config(1), redis=r) as d:
        S.d = d
        yield S


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=300)
