#!/usr/bin/env python3
"""Who is the caller: every source of the identity chain end to end (docs/API.md
"identity", "trusted_proxies"), forwarding headers that a client cannot spoof,
address normalisation, and caller keys that cannot escape their Redis hash tag.

Identities are proven by behaviour: two requests share an identity exactly when
they share a counter (exhausting a small limit with one shows on the other).
Every case uses its own policy (selected by name), so counters never mix.

Two daemons share one Redis:
  trusted    default chain and trusted_proxies (127.0.0.0/8: the test's peer is
             a trusted proxy), log level debug;
  untrusted  the same chain, trusted_proxies ["10.0.0.0/8"] (127.0.0.1 is not).

Local helpers (not in harness.py): resp() speaks RESP to read Redis keys byte
for byte; raw_check() sends a request whose header lines repeat a name.
"""

import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

PREFIX_T = "rl:"      # key_prefix of the trusted daemon
PREFIX_U = "ut:"      # key_prefix of the untrusted daemon
SECRET = "sk-live-Zq81cK0rXw5v"   # an API key that must never reach the log


def fw(limit, window="1h"):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


def pol(name, limit, identity=None, limits=None):
    p = {"name": name, "limits": limits or [fw(limit)]}
    if identity is not None:
        p["identity"] = identity
    return p


POLICIES = [
    pol("src_body", 2, ["body"]),
    pol("src_header", 2, ["header:X-Api-Key"]),
    pol("src_fwd", 2, ["forwarded"]),
    dict(pol("src_fwd_rfc", 2, ["forwarded"]), ipv6_prefix=128),
    pol("src_fwd_only_xff", 2, ["forwarded"]),
    pol("src_peer", 2, ["peer"]),
    pol("chain", 2),                        # the global chain
    pol("chain_peer", 2),
    pol("ovr", 2, ["header:X-Client"]),
    pol("ovr_peer", 2, ["peer"]),
    pol("sp", 3, ["forwarded", "peer"]),
    pol("sp_fwd_only", 3, ["forwarded"]),
    pol("sp_rfc", 3, ["forwarded", "peer"]),
    pol("sp_trusted_hop", 2, ["forwarded", "peer"]),
    pol("sp_join", 2, ["forwarded", "peer"]),
    dict(pol("v6", 3, ["forwarded", "peer"]), ipv6_prefix=128),   # address by address
    pol("v4mapped", 2, ["forwarded", "peer"]),
    pol("inj", 2, ["body"]),
    pol("inj2", 2, ["body"], limits=[fw(2, "1h"), fw(5, "1m")]),
    pol("apikey", 2, ["header:X-Api-Key"]),
    # issue 24
    pol("pad", 2, ["forwarded", "peer"]),
    pol("pad_hops", 2, ["forwarded", "peer"]),
    pol("rot", 5, ["forwarded", "peer"]),
    dict(pol("rot4", 5, ["forwarded", "peer"]), ipv4_prefix=24),
    dict(pol("rot_ovr", 2, ["forwarded", "peer"]),
         overrides=[{"identities": ["ip:2001:db8:cc:dd::9"], "limits": [fw(10)]}]),
    pol("th", 2, ["trusted_header:X-User", "peer"]),
    pol("hdr_long", 2, ["header:X-Api-Key", "peer"]),
    pol("login", 0, ["forwarded", "peer"],
        limits=[fw(5), {"algorithm": "sliding_window_counter", "limit": 3, "window": "1h",
                        "identity": ["forwarded+body", "peer+body"]}]),
]

CONFIG_TRUSTED = {
    "identity": ["body", "header:X-Api-Key", "forwarded", "peer"],
    "trusted_proxies": ["127.0.0.0/8", "::1/128"],
    # timeout: semantics under test, not latency (the default 50 ms would
    # answer a check degraded whenever a loaded host delays Redis that long)
    "redis": {"key_prefix": PREFIX_T, "timeout": "2s"},
    "policies": POLICIES,
}
CONFIG_UNTRUSTED = dict(CONFIG_TRUSTED, trusted_proxies=["10.0.0.0/8"],
                        redis={"key_prefix": PREFIX_U, "timeout": "2s"})
# The same as the trusted daemon (same Redis, same key prefix, so the same
# counters) but its proxies write RFC 7239 Forwarded instead of
# X-Forwarded-For: each daemon believes only the header it is told to.
CONFIG_TRUSTED_RFC = dict(CONFIG_TRUSTED, forwarded_header="forwarded")
PEERS = {}   # the trusted daemon -> its RFC 7239 twin


# ------------------------------------------------------------ local helpers

def resp(port, *args, timeout=H.HTTP_TIMEOUT):
    """One Redis command; the reply with bulk strings as bytes."""
    return H._resp(port, *args, timeout=timeout, raw=True)


def redis_keys(r):
    """Every key in Redis, exact bytes (SCAN to the end)."""
    keys, cursor = set(), b"0"
    while True:
        cursor, batch = resp(r.port, "SCAN", cursor, "COUNT", "1000")
        keys.update(batch)
        if cursor == b"0":
            return keys


def hash_tag(key):
    """Redis Cluster's hash tag: between the first '{' and the first '}' after it."""
    i = key.find(b"{")
    if i < 0:
        return None
    j = key.find(b"}", i + 1)
    if j <= i + 1:
        return None
    return key[i + 1:j]


def rfc_twin(d, names):
    """A check with a Forwarded header goes to the daemon configured for it."""
    if any(n.lower() == "forwarded" for n in names) and d in PEERS:
        return PEERS[d]
    return d


def post(d, body=None, headers=None):
    return H.post(rfc_twin(d, (headers or {}).keys()), body, headers)


def raw_check(d, header_lines, body):
    """POST /check with header lines given as a list (names may repeat)."""
    d = rfc_twin(d, [k for k, _ in header_lines])
    data = json.dumps(body).encode()
    head = ["POST /check HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            "Content-Length: %d" % len(data), "Connection: close"]
    head += ["%s: %s" % kv for kv in header_lines]
    st, h, raw = H.raw_request(d.port, ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
    try:
        b = json.loads(raw.decode("utf-8"))
    except ValueError:
        b = raw
    return st, h, b


def answer(resp_, policy, what):
    """A 200/429 check answer of `policy`: (status, remaining)."""
    st, h, b = resp_
    check(st in (200, 429), "%s: status %r, expected 200 or 429 (body %r)", what, st, b)
    H.expect_json(st, h, b, st, what)
    eq(b.get("policy"), policy, what + ": body.policy")
    eq(b.get("allowed"), st == 200, what + ": body.allowed vs status %d" % st)
    check(H.is_int(b.get("remaining")), "%s: body.remaining %r", what, b.get("remaining"))
    return st, b["remaining"]


def expect(resp_, policy, want, what):
    """want: remaining after an allowed check (int), or 429."""
    st, rem = answer(resp_, policy, what)
    if want == 429:
        check(st == 429, "%s: expected 429 (same counter, exhausted), got %d with remaining %d", what, st, rem)
    else:
        check(st == 200 and rem == want, "%s: expected 200 with remaining %d, got %d with remaining %d",
              what, want, st, rem)


# ---------------------------------------------------------------- sources

def t_source_body(dt, du, r):
    P = "src_body"
    expect(post(dt, {"policy": P, "key": "u1"}), P, 1, "key u1 #1")
    expect(post(dt, {"policy": P, "key": "u1"}, {"X-Api-Key": "other", "X-Forwarded-For": "198.51.100.1"}),
           P, 0, "key u1 #2 (header and XFF too: body only chain)")
    expect(post(dt, {"policy": P, "key": "u1"}), P, 429, "key u1 #3")
    expect(post(dt, {"policy": P, "key": "u2"}), P, 1, "key u2 (a different key, fresh)")
    st, h, b = post(dt, {"policy": P}, {"X-Api-Key": "other"})
    H.expect_error(st, h, b, 400, what="chain [body] and no body key")


def t_source_header(dt, du, r):
    P = "src_header"
    expect(post(dt, {"policy": P, "key": "b1"}, {"X-Api-Key": "ak1"}), P, 1, "X-Api-Key ak1 #1")
    expect(post(dt, {"policy": P, "key": "b2"}, {"X-Api-Key": "ak1"}), P, 0,
           "X-Api-Key ak1 #2 (another body key: ignored)")
    expect(post(dt, {"policy": P}, {"x-api-key": "ak1"}), P, 429, "x-api-key (lower case name) ak1 #3")
    expect(post(dt, {"policy": P, "key": "b1"}, {"X-Api-Key": "ak2"}), P, 1, "X-Api-Key ak2 (fresh)")
    st, h, b = post(dt, {"policy": P, "key": "b1"})
    H.expect_error(st, h, b, 400, what="chain [header:X-Api-Key] without the header")


def t_other_header_not_believed(dt, du, r):
    # a proxy that writes X-Forwarded-For passes the client's Forwarded
    # through: the daemon told to read XFF must not believe it, and the
    # other way round
    P = "src_fwd_only_xff"
    st, h, b = H.request(dt.port, "POST", "/check", {"policy": P},
                         {"Forwarded": "for=198.51.100.200"})
    H.expect_error(st, h, b, 400, what="XFF daemon, only a Forwarded header")
    st, h, b = H.request(PEERS[dt].port, "POST", "/check", {"policy": P},
                         {"X-Forwarded-For": "198.51.100.200"})
    H.expect_error(st, h, b, 400, what="Forwarded daemon, only an X-Forwarded-For header")
    expect(H.request(dt.port, "POST", "/check", {"policy": P},
                     {"Forwarded": "for=198.51.100.201", "X-Forwarded-For": "198.51.100.202"}),
           P, 1, "XFF daemon, both headers: the XFF address")
    expect(H.request(dt.port, "POST", "/check", {"policy": P},
                     {"X-Forwarded-For": "198.51.100.202"}), P, 0, "XFF .202 again: the same caller")


def t_source_forwarded_xff(dt, du, r):
    P = "src_fwd"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.7"}), P, 1, "XFF 198.51.100.7 #1")
    expect(post(dt, {"policy": P, "key": "ignored"}, {"X-Forwarded-For": "198.51.100.7"}), P, 0,
           "XFF 198.51.100.7 #2")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.7"}), P, 429, "XFF 198.51.100.7 #3")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.8"}), P, 1, "XFF 198.51.100.8 (fresh)")
    # RFC 7239 with extra parameters: the for= address, the same caller as in XFF
    expect(post(dt, {"policy": P}, {"Forwarded": "for=198.51.100.8;proto=https;by=203.0.113.43"}), P, 0,
           "Forwarded: for=198.51.100.8;proto=https;by=... (same caller as XFF 198.51.100.8)")
    st, h, b = post(dt, {"policy": P})
    H.expect_error(st, h, b, 400, what="chain [forwarded] without a forwarding header")


def t_source_forwarded_rfc7239(dt, du, r):
    P = "src_fwd_rfc"
    F = {"Forwarded": 'for="[2001:db8::1]:4711"'}
    expect(post(dt, {"policy": P}, F), P, 1, 'Forwarded: for="[2001:db8::1]:4711" #1')
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8::1"}), P, 0,
           "XFF 2001:db8::1 (the same caller, port dropped)")
    expect(post(dt, {"policy": P}, F), P, 429, 'Forwarded: for="[2001:db8::1]:4711" #3')
    expect(post(dt, {"policy": P}, {"Forwarded": 'for="[2001:db8::2]:4711"'}), P, 1,
           'Forwarded: for="[2001:db8::2]:4711" (fresh)')
    # a list of elements: the rightmost untrusted hop
    expect(post(dt, {"policy": P}, {"Forwarded": 'for=192.0.2.1, for="[2001:db8::2]"'}), P, 0,
           "Forwarded: for=192.0.2.1, for=\"[2001:db8::2]\" (rightmost wins)")


def t_source_peer(dt, du, r):
    P = "src_peer"
    expect(post(dt, {"policy": P, "key": "p1"}), P, 1, "peer #1 (body key p1 ignored)")
    expect(post(dt, {"policy": P, "key": "p2"}, {"X-Api-Key": "x", "X-Forwarded-For": "198.51.100.9"}), P, 0,
           "peer #2 (other key, header, XFF: all ignored)")
    expect(post(dt, {"policy": P}), P, 429, "peer #3")
    keys = [k for k in redis_keys(r) if (hash_tag(k) or b"").startswith((PREFIX_T + P + ":").encode())]
    check(keys, "no Redis key for policy %s", P)
    check(all(b"127.0.0.1" in hash_tag(k) for k in keys), "peer keys do not name 127.0.0.1: %r", keys)


# ------------------------------------------------------------ chain order

def t_first_hit_wins(dt, du, r):
    P = "chain"
    ALL = {"X-Api-Key": "c-hdr", "X-Forwarded-For": "198.51.100.20"}
    # body + header + forwarded + peer: the body key wins
    expect(post(dt, {"policy": P, "key": "c-body"}, ALL), P, 1, "body+header+XFF #1")
    expect(post(dt, {"policy": P, "key": "c-body"}, ALL), P, 0, "body+header+XFF #2")
    expect(post(dt, {"policy": P, "key": "c-body"}), P, 429, "body key alone (the same counter)")
    expect(post(dt, {"policy": P}, {"X-Api-Key": "c-hdr"}), P, 1, "header alone (untouched so far)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.20"}), P, 1, "XFF alone (untouched so far)")
    # header + forwarded: the header wins
    expect(post(dt, {"policy": P}, {"X-Api-Key": "c-hdr2", "X-Forwarded-For": "198.51.100.21"}), P, 1,
           "header+XFF #1")
    expect(post(dt, {"policy": P}, {"X-Api-Key": "c-hdr2", "X-Forwarded-For": "198.51.100.21"}), P, 0,
           "header+XFF #2")
    expect(post(dt, {"policy": P}, {"X-Api-Key": "c-hdr2"}), P, 429, "header c-hdr2 alone (the same counter)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.21"}), P, 1, "XFF .21 alone (untouched)")
    # forwarded (trusted peer) beats peer
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.21"}), P, 0, "XFF .21 #2")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.21"}), P, 429, "XFF .21 #3")
    expect(post(dt, {"policy": P}), P, 1, "nothing: the peer (untouched so far)")


def t_peer_last_resort(dt, du, r):
    # an empty header value is no hit: the chain moves on to the peer
    P = "chain_peer"
    expect(post(dt, {"policy": P}, {"X-Api-Key": ""}), P, 1, "empty X-Api-Key -> peer #1")
    expect(post(dt, {"policy": P}), P, 0, "peer #2")
    expect(post(dt, {"policy": P}, {"X-Api-Key": ""}), P, 429, "empty X-Api-Key -> peer #3")


def t_policy_identity_overrides(dt, du, r):
    P = "ovr"   # identity ["header:X-Client"]; the global chain starts with body
    expect(post(dt, {"policy": P, "key": "o1"}, {"X-Client": "cl1", "X-Api-Key": "o-ak"}), P, 1,
           "X-Client cl1 with body key o1")
    expect(post(dt, {"policy": P, "key": "o2"}, {"X-Client": "cl1", "X-Api-Key": "o-ak2"}), P, 0,
           "X-Client cl1 with body key o2 (the body key is not consulted)")
    expect(post(dt, {"policy": P, "key": "o3"}, {"X-Client": "cl1"}), P, 429, "X-Client cl1 #3")
    expect(post(dt, {"policy": P, "key": "o1"}, {"X-Client": "cl2"}), P, 1, "X-Client cl2 (fresh)")
    st, h, b = post(dt, {"policy": P, "key": "o1"}, {"X-Api-Key": "o-ak"})
    H.expect_error(st, h, b, 400, what="policy chain [header:X-Client] without X-Client (no fallback to "
                                      "the global chain)")
    P = "ovr_peer"
    expect(post(dt, {"policy": P, "key": "q1"}), P, 1, "policy chain [peer]: key q1")
    expect(post(dt, {"policy": P, "key": "q2"}), P, 0, "policy chain [peer]: key q2 (same peer)")
    expect(post(dt, {"policy": P, "key": "q3"}), P, 429, "policy chain [peer]: key q3")


# ------------------------------------------------------------ spoofing

def t_untrusted_xff_ignored(dt, du, r):
    P = "sp"
    expect(post(du, {"policy": P}, {"X-Forwarded-For": "198.51.100.1"}), P, 2, "untrusted peer, XFF .1")
    expect(post(du, {"policy": P}, {"X-Forwarded-For": "198.51.100.2"}), P, 1,
           "untrusted peer, XFF .2 (the same caller: the peer)")
    expect(post(du, {"policy": P}, {"Forwarded": "for=198.51.100.3"}), P, 0,
           "untrusted peer, Forwarded: for=.3 (the same caller)")
    expect(post(du, {"policy": P}, {"X-Forwarded-For": "198.51.100.4"}), P, 429,
           "untrusted peer, a fresh XFF cannot escape the limit")
    expect(post(du, {"policy": P}), P, 429, "untrusted peer, no XFF: the peer, exhausted")
    # chain [forwarded] only: from an untrusted peer it yields nothing
    st, h, b = post(du, {"policy": "sp_fwd_only"}, {"X-Forwarded-For": "198.51.100.1"})
    H.expect_error(st, h, b, 400, what="chain [forwarded], XFF from an untrusted peer")


def t_trusted_xff_left_part_spoof(dt, du, r):
    P = "sp"
    lefts = ["spoofed", "10.9.8.7", "198.51.100.99", "1.2.3.4, 5.6.7.8", "unknown", "::1"]
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "spoofed, 203.0.113.7"}), P, 2,
           "XFF 'spoofed, 203.0.113.7' #1")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "10.9.8.7, 203.0.113.7"}), P, 1,
           "XFF '10.9.8.7, 203.0.113.7' (another left part, same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.99,203.0.113.7"}), P, 0,
           "XFF '198.51.100.99,203.0.113.7'")
    for left in lefts:
        expect(post(dt, {"policy": P}, {"X-Forwarded-For": "%s, 203.0.113.7" % left}), P, 429,
               "XFF '%s, 203.0.113.7': a fresh left part picks no fresh identity" % left)
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.7"}), P, 429, "XFF '203.0.113.7' alone")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "spoofed, 203.0.113.8"}), P, 2,
           "XFF 'spoofed, 203.0.113.8' (another real client)")
    expect(post(dt, {"policy": P}), P, 2, "no XFF: the peer (untouched)")


def t_trusted_rfc7239_left_part_spoof(dt, du, r):
    P = "sp_rfc"
    for i, left in enumerate(["for=6.6.6.6", 'for="[2001:db8::66]"', "for=unknown", "for=_hidden"]):
        expect(post(dt, {"policy": P}, {"Forwarded": "%s, for=203.0.113.70" % left}), P,
               2 - i if i < 3 else 429, "Forwarded: %s, for=203.0.113.70" % left)


def t_trusted_hop_skipped(dt, du, r):
    P = "sp_trusted_hop"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.30, 127.0.0.9"}), P, 1,
           "XFF '203.0.113.30, 127.0.0.9' (a trusted proxy hop is skipped)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.30"}), P, 0,
           "XFF '203.0.113.30' (the same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "evil, 203.0.113.30, 127.0.0.2, 127.0.0.3"}), P, 429,
           "XFF 'evil, 203.0.113.30, 127.0.0.2, 127.0.0.3'")


def t_second_xff_line_joined(dt, du, r):
    P = "sp_join"
    lines = [("X-Forwarded-For", "198.51.100.50"), ("X-Forwarded-For", "203.0.113.60")]
    expect(raw_check(dt, lines, {"policy": P}), P, 1, "two XFF lines .50 / .60 #1")
    expect(raw_check(dt, [("X-Forwarded-For", "198.51.100.51")] + lines[1:], {"policy": P}), P, 0,
           "two XFF lines .51 / .60 (another first line, same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.60"}), P, 429,
           "XFF 203.0.113.60 alone: the rightmost of the joined lines was the caller")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.50"}), P, 1,
           "XFF 198.51.100.50 alone (the first line was not the caller: untouched)")
    expect(raw_check(dt, [("Forwarded", "for=198.51.100.52"), ("Forwarded", "for=203.0.113.61")],
                     {"policy": P}), P, 1, "two Forwarded lines .52 / .61 (fresh)")
    expect(post(dt, {"policy": P}, {"Forwarded": "for=203.0.113.61"}), P, 0,
           "Forwarded: for=203.0.113.61 alone (same caller as the joined lines)")


def t_ipv6_normalised(dt, du, r):
    P = "v6"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:DB8:0:0:0:0:0:1"}), P, 2, "XFF 2001:DB8:0:0:0:0:0:1")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8::1"}), P, 1, "XFF 2001:db8::1 (same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "[2001:db8::1]:80"}), P, 0,
           "XFF [2001:db8::1]:80 (same caller)")
    expect(post(dt, {"policy": P}, {"Forwarded": 'for="[2001:0db8:0000::0001]:4711"'}), P, 429,
           'Forwarded: for="[2001:0db8:0000::0001]:4711" (same caller)')
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8::1:0"}), P, 2,
           "XFF 2001:db8::1:0 (another address)")


def t_ipv4_mapped(dt, du, r):
    P = "v4mapped"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "::ffff:203.0.113.7"}), P, 1, "XFF ::ffff:203.0.113.7")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.7"}), P, 0, "XFF 203.0.113.7 (same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "::FFFF:203.0.113.7"}), P, 429,
           "XFF ::FFFF:203.0.113.7 (same caller)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "::ffff:203.0.113.8"}), P, 1,
           "XFF ::ffff:203.0.113.8 (another address)")


# ------------------------------------------------------------ key injection

INJ_KEYS = [
    "a", "ab", "a}", "{a}", "{a", "a:b", "a%3Ab", "a\nb", "a\u0000b", "héllo", "h%C3%A9llo",
    "k" * 512, "}" * 512, "é" * 256,
]


INJ_ACCEPTED = []   # keys whose three checks went as expected (their tags are inspected below)


def t_injection_own_counters(dt, du, r):
    P = "inj"
    problems = []
    for k in INJ_KEYS:
        kb = k.encode("utf-8")
        what = "key %r (%d bytes)" % (k if len(k) < 20 else k[:8] + "...", len(kb))
        try:
            expect(post(dt, {"policy": P, "key": k}), P, 1, what + " #1 (fresh despite every key before it)")
            expect(post(dt, {"policy": P, "key": k}), P, 0, what + " #2")
            expect(post(dt, {"policy": P, "key": k}), P, 429, what + " #3")
            INJ_ACCEPTED.append(k)
        except H.Fail as e:      # go on: one bad key must not hide the others
            problems.append(str(e))
    # the JSON escape form is the same string as the literal: the same counter
    try:
        st, h, b = H.request(dt.port, "POST", "/check", '{"policy":"inj","key":"a\\nb"}',
                             {"Content-Type": "application/json"})
        expect((st, h, b), P, 429, "key \"a\\nb\" sent JSON-escaped by hand (the same key as above)")
    except H.Fail as e:
        problems.append(str(e))
    check(not problems, "%d of %d keys failed:\n%s", len(problems), len(INJ_KEYS) + 1, "\n".join(problems))


def t_injection_multi_limit_shared_tag(dt, du, r):
    P = "inj2"
    for k in ("x}y", "{x}"):
        expect(post(dt, {"policy": P, "key": k}), P, 1, "two-limit policy, key %r" % k)
    tags = {}
    for key in redis_keys(r):
        t = hash_tag(key)
        if t is not None and t.startswith((PREFIX_T + P + ":").encode()):
            tags.setdefault(t, []).append(key)
    eq(len(tags), 2, "distinct hash tags of policy %s (one per caller key)" % P)
    for t, ks in tags.items():
        eq(len(ks), 2, "keys under tag %r (one per limit, both in one hash slot)" % t)


def t_injection_redis_keys(dt, du, r):
    lines = [k for k in r.cli("--scan").splitlines() if k]
    check(lines, "redis-cli --scan shows no key")
    bad = [k for k in lines if not k.startswith("{")]
    check(not bad, "redis-cli --scan: keys not starting with '{': %r", bad[:5])
    keys = redis_keys(r)
    eq(len(keys), len(lines), "keys by RESP SCAN vs lines of redis-cli --scan")
    policies = [p["name"] for p in POLICIES]
    inj_tags = set()
    for key in keys:
        check(key.startswith(b"{"), "key %r does not start with '{'", key)
        tag = hash_tag(key)
        check(tag is not None, "key %r has no hash tag", key)
        prefix = tag.split(b":", 1)[0] + b":"
        check(prefix in (PREFIX_T.encode(), PREFIX_U.encode()), "key %r: tag %r has no known key prefix", key, tag)
        rest = tag[len(prefix):]
        name = rest.split(b":", 1)[0].decode("latin-1")
        check(name in policies, "key %r: the hash tag %r does not hold a policy name", key, tag)
        # the caller's bytes stay inside the tag: after it only ":<algorithm>:<window>"
        after = key[len(tag) + 2:]
        check(b"{" not in after and b"}" not in after, "key %r: a brace after the hash tag", key)
        check(all(0x21 <= c <= 0x7e for c in key), "key %r: a raw control, space or non-ASCII byte "
              "(docs/design.md: caller bytes are percent-escaped)", key)
        if name == "inj":
            inj_tags.add(tag)
    check(INJ_ACCEPTED, "no tricky key was accepted by the case before")
    eq(len(inj_tags), len(INJ_ACCEPTED), "distinct hash tags of policy inj (one per caller key accepted before)")


def t_key_513_bytes(dt, du, r):
    for k in ("k" * 513, "é" * 256 + "x", "}" * 513):
        st, h, b = post(dt, {"policy": "inj", "key": k})
        H.expect_error(st, h, b, 400, field="key", what="a %d-byte key (%d characters)" % (len(k.encode()), len(k)))
    st, h, b = post(dt, {"policy": "inj", "key": ""})
    H.expect_error(st, h, b, 400, field="key", what="an empty key")


def t_api_key_not_logged(dt, du, r):
    P = "apikey"
    H.expect_json(*post(dt, {"policy": P}, {"X-Api-Key": SECRET}), want_status=200, what="#1")
    H.expect_json(*post(dt, {"policy": P}, {"X-Api-Key": SECRET}), want_status=200, what="#2")
    H.expect_json(*post(dt, {"policy": P}, {"X-Api-Key": SECRET}), want_status=429, what="#3 denied")
    st, h, b = post(dt, '{"policy": "apikey", ', {"X-Api-Key": SECRET, "Content-Type": "application/json"})
    H.expect_error(st, h, b, 400, what="malformed body with the API key header")
    st, h, b = post(dt, {"policy": "no-such"}, {"X-Api-Key": SECRET})
    H.expect_error(st, h, b, 400, what="unknown policy with the API key header")
    st, h, b = post(dt, {"policy": P, "key": SECRET})
    H.expect_json(st, h, b, st, "the secret as a body key")
    for d in (dt, du):
        log = d.log()
        check(log.strip() != "", "the daemon wrote no log at all (is it logging?)")
        check(SECRET not in log, "the API key value %r appears in the log:\n%s", SECRET,
              "\n".join(l for l in log.splitlines() if SECRET in l)[:2000])


def t_access_log(dt, du, r):
    # access_log samples one check in N and never writes the key
    cfg = dict(CONFIG_TRUSTED, access_log=2)
    with H.Daemon(cfg, redis=r) as d:
        for i in range(6):
            H.request(d.port, "POST", "/check", {"policy": "apikey"}, {"X-Api-Key": SECRET})
        lines = [l for l in d.log().splitlines() if "msg=check " in l]
        eq(len(lines), 3, "access log lines for 6 checks sampled 1 in 2")
        check(all("policy=apikey" in l and "status=" in l for l in lines),
              "access log lines name the policy and status: %r", lines)
        check(SECRET not in d.log(), "the API key is in the log")


# ---------------------------------------------------------------- issue 24

PAD = "6.6.6.6, " * 1200      # 10.8 KB a client wrote before its proxy appended


def t_forwarded_padded(dt, du, r):
    """A client pads its X-Forwarded-For past 8 KiB before the proxy appends
    its address: the chain is read from the right, so it stays itself (on
    main it became the proxy, 127.0.0.1, and took a quota everyone shared)."""
    P = "pad"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": PAD + "203.0.113.50"}), P, 1, "padded A #1")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": PAD + "203.0.113.50"}), P, 0, "padded A #2")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": PAD + "203.0.113.50"}), P, 429, "padded A #3")
    # HAProxy's option forwardfor: a line of its own after the client's
    expect(raw_check(dt, [("X-Forwarded-For", PAD + "1.1.1.1"), ("X-Forwarded-For", "203.0.113.51")],
                     {"policy": P}), P, 1, "padded B (its proxy's own line)")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.50"}), P, 429,
           "A unpadded: the same caller as padded")
    expect(post(dt, {"policy": P}), P, 1, "the proxy itself (no header): its bucket untouched")


def t_forwarded_too_long(dt, du, r):
    """More trusted hops than can be read: a 400 naming the header, never the
    proxy's own bucket."""
    P = "pad_hops"
    hops = ", ".join("127.0.%d.%d" % (i // 250, i % 250 + 1) for i in range(70))
    st, h, b = post(dt, {"policy": P}, {"X-Forwarded-For": "203.0.113.52, " + hops})
    H.expect_error(st, h, b, 400, what="70 trusted hops")
    check("X-Forwarded-For" in b.get("error", ""), "the error does not name the header: %r", b)
    expect(post(dt, {"policy": P}), P, 1, "the proxy's own bucket untouched")


def t_header_too_long(dt, du, r):
    """An X-Api-Key over 512 bytes is a 400 naming it, not the next source."""
    P = "hdr_long"
    st, h, b = post(dt, {"policy": P}, {"X-Api-Key": "k" * 513})
    H.expect_error(st, h, b, 400, what="a 513-byte X-Api-Key")
    check("X-Api-Key" in b.get("error", ""), "the error does not name the header: %r", b)
    expect(post(dt, {"policy": P}), P, 1, "the peer's bucket untouched")


def t_ipv6_rotation(dt, du, r):
    """100 addresses of one /64, 5 checks each, against 5 per caller: 5
    admitted (on main 500: every address its own caller).  Another /64 is
    another caller; the key names the network."""
    P = "rot"
    admitted = 0
    with H.Client(dt.port) as c:
        for i in range(100):
            for _ in range(5):
                st, _, _ = c.request("POST", "/check", {"policy": P},
                                     {"X-Forwarded-For": "2001:db8:aa:bb:%x:%x::1" % (i, i * 7)})
                admitted += st == 200
    eq(admitted, 5, "checks admitted from 100 addresses of 2001:db8:aa:bb::/64")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8:aa:bc::1"}), P, 4, "another /64")
    keys = redis_keys(r)
    check(b"{rl:rot:ip:2001%3Adb8%3Aaa%3Abb%3A%3A/64}:fw:3600000" in keys,
          "no key of the /64: %r", sorted(k for k in keys if b"rot:" in k))


def t_ipv4_prefix(dt, du, r):
    """ipv4_prefix 24 on a policy: a /24 is one caller; the next /24 another."""
    P = "rot4"
    got = [answer(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.100.%d" % (i + 1)}), P, "#%d" % i)[0]
           for i in range(8)]
    eq(got, [200] * 5 + [429] * 3, "statuses of 8 addresses of 198.51.100.0/24")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "198.51.101.1"}), P, 4, "another /24")


def t_override_by_network(dt, du, r):
    """An ip: override for one address of a /64 applies to the whole /64."""
    P = "rot_ovr"
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8:cc:dd:1:2:3:4"}), P, 9,
           "another address of the override's /64: its 10")
    expect(post(dt, {"policy": P}, {"X-Forwarded-For": "2001:db8:cc:de::9"}), P, 1,
           "a neighbour /64: the policy's 2")


def t_trusted_header(dt, du, r):
    """trusted_header:X-User is read only from a trusted proxy: a client that
    reaches the daemon directly gets its address, whatever it sends."""
    P = "th"
    expect(post(dt, {"policy": P}, {"X-User": "alice"}), P, 1, "alice via a trusted proxy")
    expect(post(dt, {"policy": P}, {"X-User": "bob"}), P, 1, "bob via a trusted proxy")
    expect(post(dt, {"policy": P}, {"X-User": "alice"}), P, 0, "alice again")
    expect(post(du, {"policy": P}, {"X-User": "u1"}), P, 1, "untrusted peer, X-User u1: the peer")
    expect(post(du, {"policy": P}, {"X-User": "u2"}), P, 0, "untrusted peer, a fresh X-User: the same peer")
    expect(post(du, {"policy": P}, {"X-User": "u3"}), P, 429, "untrusted peer, a third X-User: still the peer")


def t_limit_identities(dt, du, r):
    """login: 5 per address and 3 per address + user, in one policy, decided
    together: a user walks around neither, and a denied check consumes from
    no limit.  Keys: one hash tag for the policy, a key per limit's caller."""
    P = "login"
    ip = {"X-Forwarded-For": "198.51.100.9"}

    def nums(resp_, what):
        st, h, b = resp_
        check(st in (200, 429), "%s: status %r (%r)", what, st, b)
        return st, [e["remaining"] for e in b["limits"]]
    eq(nums(post(dt, {"policy": P, "key": "alice"}, ip), "alice #1"), (200, [4, 2]), "alice #1")
    eq(nums(post(dt, {"policy": P, "key": "alice"}, ip), "alice #2"), (200, [3, 1]), "alice #2")
    eq(nums(post(dt, {"policy": P, "key": "alice"}, ip), "alice #3"), (200, [2, 0]), "alice #3")
    eq(nums(post(dt, {"policy": P, "key": "alice"}, ip), "alice #4"), (429, [2, 0]),
       "alice #4: denied by her limit, the address's untouched")
    eq(nums(post(dt, {"policy": P, "key": "bob"}, ip), "bob #1"), (200, [1, 2]), "bob #1")
    eq(nums(post(dt, {"policy": P, "key": "carol"}, ip), "carol #1"), (200, [0, 2]), "carol #1")
    eq(nums(post(dt, {"policy": P, "key": "dave"}, ip), "dave #1"), (429, [0, 3]),
       "dave: a fresh user, denied by the address")
    eq(nums(post(dt, {"policy": P, "key": "alice"}, {"X-Forwarded-For": "198.51.100.10"}),
            "alice elsewhere"), (200, [4, 2]), "alice from another address")
    keys = redis_keys(r)
    for k in (b"{rl:login}:ip:198.51.100.9:fw:3600000",
              b"{rl:login}:+ip%3A198.51.100.9+k%3Aalice:swc:3600000",
              b"{rl:login}:+ip%3A198.51.100.9+k%3Abob:swc:3600000"):
        check(k in keys, "no key %r: %r", k, sorted(x for x in keys if b"login" in x))
    st, h, b = post(dt, {"policy": P}, ip)
    H.expect_error(st, h, b, 400, field="key", what="no user for the per-user limit")


CASES = [
    ("source body: the body key names the caller", t_source_body),
    ("source header:X-Api-Key: the header names the caller", t_source_header),
    ("source forwarded: X-Forwarded-For from a trusted peer", t_source_forwarded_xff),
    ("forwarded_header: only the configured header is believed", t_other_header_not_believed),
    ("source forwarded: RFC 7239 Forwarded: for=\"[2001:db8::1]:4711\"", t_source_forwarded_rfc7239),
    ("source peer: the TCP peer address", t_source_peer),
    ("chain: first hit wins (body > header > forwarded > peer)", t_first_hit_wins),
    ("chain: an empty header is no hit, the peer is the last resort", t_peer_last_resort),
    ("per-policy identity replaces the global chain", t_policy_identity_overrides),
    ("spoofing: XFF/Forwarded from an untrusted peer is ignored (identity = peer)", t_untrusted_xff_ignored),
    ("spoofing: trusted peer, XFF left part cannot pick a fresh identity", t_trusted_xff_left_part_spoof),
    ("spoofing: trusted peer, Forwarded left elements cannot pick a fresh identity",
     t_trusted_rfc7239_left_part_spoof),
    ("spoofing: trusted proxy hops on the right are skipped", t_trusted_hop_skipped),
    ("spoofing: a second X-Forwarded-For/Forwarded line is joined, the rightmost wins", t_second_xff_line_joined),
    ("IPv6: 2001:DB8:0:0:0:0:0:1 = 2001:db8::1 = [2001:db8::1]:80", t_ipv6_normalised),
    ("IPv6: ::ffff:203.0.113.7 = 203.0.113.7", t_ipv4_mapped),
    ("injection: every tricky key has its own counter", t_injection_own_counters),
    ("injection: a policy's limits share one hash tag per caller", t_injection_multi_limit_shared_tag),
    ("injection: every Redis key starts with '{', its tag holds the policy, no caller brace escapes",
     t_injection_redis_keys),
    ("key of 513 bytes (or empty) is 400 naming key", t_key_513_bytes),
    ("the X-Api-Key value never appears in the log (level debug)", t_api_key_not_logged),
    ("access_log: one check in N, no key", t_access_log),
    ("issue 24: X-Forwarded-For padded past 8 KiB (one line or two): read from the right, not the proxy",
     t_forwarded_padded),
    ("issue 24: more trusted hops than can be read: 400 naming X-Forwarded-For", t_forwarded_too_long),
    ("issue 24: an X-Api-Key over 512 bytes: 400 naming it, not the next source", t_header_too_long),
    ("issue 24: 100 addresses of one IPv6 /64 x 5 checks: 5 admitted (ipv6_prefix 64)", t_ipv6_rotation),
    ("issue 24: ipv4_prefix 24 on a policy: one caller per /24", t_ipv4_prefix),
    ("issue 24: an ip: override for an address covers its /64", t_override_by_network),
    ("issue 24: trusted_header only from a trusted proxy", t_trusted_header),
    ("issue 24: login, 5 per address and 3 per address + user, decided together", t_limit_identities),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r, \
            H.Daemon(CONFIG_TRUSTED, redis=r, args=["-L", "debug"]) as dt, \
            H.Daemon(CONFIG_UNTRUSTED, redis=r, args=["-L", "debug"]) as du, \
            H.Daemon(CONFIG_TRUSTED_RFC, redis=r, args=["-L", "debug"]) as dr, \
            H.Daemon(dict(CONFIG_UNTRUSTED, forwarded_header="forwarded"), redis=r,
                     args=["-L", "debug"]) as dur:
        PEERS[dt] = dr
        PEERS[du] = dur
        yield dt, du, r


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
