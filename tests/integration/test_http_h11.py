#!/usr/bin/env python3
"""The daemon's request framing cross-checked against h11, an independent
strict HTTP/1.1 parser (Debian python3-h11), on a few hundred generated
request streams, valid and hostile (fixed seed).

Each stream is a few pipelined requests and a last `GET /healthz` with
`Connection: close`.  h11 reads it as a server would; the daemon gets the same
bytes on one connection.  Every stream h11 rejects, the daemon rejects: the
requests before the bad one answered, then a JSON 4xx/5xx and a close.  Every
stream h11 accepts, the daemon reads the same way: as many requests, and each
POST /check answered for the body h11 read (the body names a policy of its
own and cost 0, and the answer names the policy the daemon read).

Where RFC 9112 lets a recipient choose and h11 chose otherwise, the
exception is listed in EXCEPTIONS with its reason, and the daemon's own
choice is asserted instead.
"""

import contextlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check  # noqa: E402

try:
    import h11
except ImportError:
    # Debian's package lives in the system Python's path, which a pyenv or
    # venv python3 does not search
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import h11
    except ImportError:
        h11 = None

SEED = 20261203
STREAMS = 300
NPOL = 4
CONFIG = {
    "identity": ["body", "peer"],
    "redis": {"timeout": "5s"},
    "policies": [{"name": "p%d" % i, "limits": [{"algorithm": "fixed_window", "limit": 1000000000,
                                                 "window": "1h"}]} for i in range(NPOL)],
}
READ_WAIT = 5.0 * H.SLOW

# mutation -> (who is stricter, the RFC's word).  "we reject": h11 accepts,
# the daemon refuses; "we accept": h11 refuses, the daemon reads it as the
# stream without the mutation.
EXCEPTIONS = {
    "bare LF line ends": ("we reject", "RFC 9112 2.2: a recipient MAY accept a bare LF; we do not, "
                                       "since a proxy that does not would frame differently"),
    "bare LF ending one header": ("we reject", "RFC 9112 2.2, as above"),
    "obs-fold": ("we reject", "RFC 9112 5.2: a server MUST either reject obs-fold with 400 or replace it; "
                              "we reject, h11 replaces"),
    "Content-Length and Transfer-Encoding": (
        "we reject", "RFC 9112 6.1: a server MAY reject a request with both, and MUST close after it; "
                     "h11 reads it as chunked"),
    "Content-Length list of one value": (
        "we reject", "RFC 9112 6.3: a recipient MAY accept a list of identical values; we accept one value"),
    "control character in a value": (
        "we reject", "RFC 9110 5.5: field values are VCHAR, obs-text, SP, HTAB; h11 accepts any "
                     "byte but NUL and whitespace"),
    "Transfer-Encoding on HTTP/1.0": (
        "we reject", "RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing"),
    "leading empty line": ("we accept", "RFC 9112 2.2: a server SHOULD ignore at least one empty line "
                                        "before the request-line; h11 refuses it"),
    "BWS before a chunk extension": ("we accept", "RFC 9112 7.1.1: chunk-ext = *( BWS \";\" ... ); h11's "
                                                  "grammar has no BWS before the \";\""),
}


class Req:
    """One request as parts, so that a mutation can change any of them."""

    def __init__(self, rnd, i, last=False):
        self.eol = b"\r\n"
        self.pre = b""
        self.version = b"HTTP/1.1"
        self.chunked = False
        self.ext = b""
        self.size_pad = b""
        self.policy = None
        if last:
            self.method, self.target = b"GET", b"/healthz"
            self.headers = [b"Host: x", b"Connection: close"]
            self.body = b""
            return
        host = rnd.choice([b"Host: x", b"host: 127.0.0.1", b"HOST:\tx", b"Host:  example.com  "])
        self.headers = [host]
        for _ in range(rnd.randint(0, 3)):
            self.headers.append(rnd.choice([b"X-A: 1", b"x-b:two words", b"X-C: \t v\t", b"X-E:",
                                            b"Accept: */*", b"X-Obs: caf\xc3\xa9",
                                            b"User-Agent: gen/1.0 (x; y)"]))
        if rnd.random() < 0.75:
            self.policy = "p%d" % (i % NPOL)
            self.method = b"POST"
            self.target = rnd.choice([b"/check", b"/check?x=1", b"http://h/check"])
            self.body = json.dumps({"policy": self.policy, "cost": 0}).encode()
            self.headers.append(b"Content-Type: application/json")
        else:
            self.method, self.target = b"GET", rnd.choice([b"/healthz", b"/healthz?y"])
            self.body = b"" if rnd.random() < 0.6 else b"ignored body %d" % i
        self.chunked = bool(self.body) and rnd.random() < 0.4
        if self.chunked:
            self.headers.append(rnd.choice([b"Transfer-Encoding: chunked", b"transfer-encoding: Chunked"]))
            self.ext = rnd.choice([b"", b"", b";a=b", b";a=\"x y\";b"])
            self.trailer = rnd.choice([b"", b"", b"X-T: 1\r\n"])
            self.upper = rnd.random() < 0.5
            self.cuts = sorted(rnd.sample(range(1, len(self.body)), min(2, len(self.body) - 1)))
        elif self.body:
            self.headers.append(b"Content-Length: %d" % len(self.body))
        rnd.shuffle(self.headers)

    def framed_body(self):
        if not self.chunked:
            return self.body
        out, start = b"", 0
        for cut in self.cuts + [len(self.body)]:
            piece = self.body[start:cut]
            start = cut
            size = (b"%X" if self.upper else b"%x") % len(piece)
            out += self.size_pad + size + self.ext + b"\r\n" + piece + b"\r\n"
        return out + b"0\r\n" + self.trailer + b"\r\n"

    def bytes(self):
        e = self.eol
        head = self.method + b" " + self.target + b" " + self.version + e
        head += b"".join(h + e for h in self.headers) + e
        return self.pre + head + self.framed_body()


def _set_header(r, name, new):
    """Replace the header `name` (case-insensitive) by the lines `new`."""
    out, done = [], False
    for h in r.headers:
        if h.split(b":", 1)[0].strip().lower() == name.lower() and not done:
            out += new
            done = True
        else:
            out.append(h)
    if not done:
        out += new
    r.headers = out


def _drop_header(r, name):
    r.headers = [h for h in r.headers if h.split(b":", 1)[0].strip().lower() != name.lower()]


def _needs_body(r):
    return bool(r.body)


def _needs_chunked(r):
    return r.chunked


def _needs_length(r):
    return bool(r.body) and not r.chunked


def _m_ws_colon(r):
    _set_header(r, b"content-length", [b"Content-Length : %d" % len(r.body)])


def _m_two_cl(r):
    _set_header(r, b"content-length", [b"Content-Length: %d" % len(r.body), b"Content-Length: 1"])


def _m_cl_list_same(r):
    _set_header(r, b"content-length", [b"Content-Length: %d, %d" % (len(r.body), len(r.body))])


def _m_cl_te(r):
    r.headers.append(b"Content-Length: %d" % len(r.framed_body()))


def _m_obs_fold(r):
    r.headers.append(b"X-Fold: a")
    r.headers.append(b" b")


def _m_bare_lf(r):
    r.eol = b"\n"


def _m_bare_lf_one(r):
    r.headers.insert(1, b"X-LF: 1\nX-After: 2")


def _m_dup_host(r):
    r.headers.append(b"Host: other")


def _m_no_host(r):
    _drop_header(r, b"host")


def _m_bad_cl(rnd):
    def m(r):
        _set_header(r, b"content-length", [b"Content-Length: " + rnd.choice(
            [b"+%d" % len(r.body), b"%d x" % len(r.body), b"0x%x" % len(r.body), b"-1", b""])])
    return m


def _m_te_gzip(r):
    _set_header(r, b"transfer-encoding", [b"Transfer-Encoding: gzip"])
    _drop_header(r, b"content-length")


def _m_te_10(r):
    r.version = b"HTTP/1.0"


def _m_chunk_0x(r):
    r.size_pad = b"0x"


def _m_chunk_space_before(r):
    r.size_pad = b" "


def _m_chunk_bws(r):
    r.ext = b" ;a=b"


def _m_chunk_zeros(r):
    r.size_pad = b"0" * 14


def _m_ctl_value(r):
    r.headers.append(b"X-Ctl: a\x01b")


def _m_nul_value(r):
    r.headers.append(b"X-Nul: a\x00b")


def _m_bad_name(r):
    r.headers.append(b"X@Y: 1")


def _m_two_spaces(r):
    r.target = b" " + r.target


def _m_lower_version(r):
    r.version = b"http/1.1"


def _m_leading_crlf(r):
    r.pre = b"\r\n"


def _m_close(r):
    r.headers.append(b"Connection: close")


def _m_expect(r):
    r.headers.append(b"Expect: 100-continue")


def _m_http10(r):
    r.version = b"HTTP/1.0"


def _m_data_longer(r):
    r.cuts = []
    body = r.body
    r.body = body[:-1]           # the size says one byte less than what follows
    orig = r.framed_body

    def framed():
        out = orig()
        return out.replace(r.body + b"\r\n", body + b"\r\n", 1)
    r.framed_body = framed


def mutations(rnd):
    """(name, applies to a request?, mutate)."""
    return [
        ("whitespace before the colon", _needs_length, _m_ws_colon),
        ("two differing Content-Lengths", _needs_length, _m_two_cl),
        ("Content-Length list of one value", _needs_length, _m_cl_list_same),
        ("Content-Length and Transfer-Encoding", _needs_chunked, _m_cl_te),
        ("malformed Content-Length", _needs_length, _m_bad_cl(rnd)),
        ("Transfer-Encoding gzip", _needs_body, _m_te_gzip),
        ("Transfer-Encoding on HTTP/1.0", _needs_chunked, _m_te_10),
        ("chunk size 0x..", _needs_chunked, _m_chunk_0x),
        ("chunk size after a space", _needs_chunked, _m_chunk_space_before),
        ("BWS before a chunk extension", _needs_chunked, _m_chunk_bws),
        ("chunk size with leading zeros", _needs_chunked, _m_chunk_zeros),
        ("chunk data longer than its size", _needs_chunked, _m_data_longer),
        ("obs-fold", None, _m_obs_fold),
        ("bare LF line ends", None, _m_bare_lf),
        ("bare LF ending one header", None, _m_bare_lf_one),
        ("two Host headers", None, _m_dup_host),
        ("HTTP/1.1 without Host", None, _m_no_host),
        ("control character in a value", None, _m_ctl_value),
        ("NUL in a value", None, _m_nul_value),
        ("invalid header name", None, _m_bad_name),
        ("two spaces in the request line", None, _m_two_spaces),
        ("lower-case version", None, _m_lower_version),
        ("leading empty line", None, _m_leading_crlf),
        ("Connection: close", None, _m_close),
        ("Expect: 100-continue", None, _m_expect),
        ("HTTP/1.0", lambda r: not r.chunked, _m_http10),
    ]


class Stream:
    def __init__(self, rnd, n):
        self.reqs = [Req(rnd, i) for i in range(rnd.randint(1, 3))] + [Req(rnd, 0, last=True)]
        self.mutation = None
        self.at = None
        self.clean = self.data()
        if rnd.random() < 0.6:
            ms = mutations(rnd)
            rnd.shuffle(ms)
            for name, fits, fn in ms:
                cands = [i for i, r in enumerate(self.reqs[:-1]) if fits is None or fits(r)]
                if cands:
                    self.at = rnd.choice(cands)
                    fn(self.reqs[self.at])
                    self.mutation = name
                    break
        self.name = "stream %d (%s)" % (n, "%s on request %d" % (self.mutation, self.at)
                                        if self.mutation else "valid")

    def data(self):
        return b"".join(r.bytes() for r in self.reqs)


def h11_read(data):
    """h11 as a server on `data`: (verdict, [(method, target, body)]) with
    verdict "accepted" (it read up to a close), "rejected" or "incomplete"."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    reqs, cur = [], None
    while True:
        try:
            ev = conn.next_event()
        except h11.RemoteProtocolError:
            return "rejected", reqs
        if ev is h11.NEED_DATA:
            return "incomplete", reqs
        if isinstance(ev, h11.Request):
            cur = [ev.method, ev.target, b""]
        elif isinstance(ev, h11.Data):
            cur[2] += ev.data
        elif isinstance(ev, h11.EndOfMessage):
            reqs.append(tuple(cur))
            conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            conn.send(h11.EndOfMessage())
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return "accepted", reqs
            conn.start_next_cycle()
        elif isinstance(ev, h11.ConnectionClosed) or ev is h11.PAUSED:
            return "accepted", reqs


def daemon_read(port, data):
    """The daemon on `data`: ([(status, headers, body)] final answers, closed?)."""
    out = []
    with H.RawConn(port, timeout=READ_WAIT) as c:
        c.send(data)
        while True:
            try:
                st, h, b = c.read_response()
            except (EOFError, ConnectionResetError):
                return out, True
            except OSError as e:           # a timeout: neither an answer nor a close
                return out + [("hung", None, str(e))], False
            if 100 <= st < 200:
                continue
            try:
                b = json.loads(b)
            except ValueError:
                pass
            out.append((st, h, b))
            if h.get("connection", "").lower() == "close" or st >= 400 and c.is_closed(0.5):
                try:
                    return out, c.is_closed(READ_WAIT)
                except ConnectionResetError:
                    return out, True


def expected_answer(req):
    """What the daemon must answer for a request h11 read as (method, target, body)."""
    method, target, body = req
    if method == b"POST" and target.split(b"?")[0].endswith(b"/check"):
        pol = json.loads(body)["policy"]
        return ("check", pol)
    return ("healthz", None)


def same_reading(s, reqs, answers, closed):
    """The daemon answered each of h11's requests as that request's body says."""
    check(len(answers) == len(reqs) and all(a[0] != "hung" for a in answers),
          "%s: h11 read %d requests, the daemon answered %d: %s", s.name, len(reqs), len(answers),
          [(a[0], a[2]) for a in answers][:5])
    for i, (req, (st, h, b)) in enumerate(zip(reqs, answers)):
        kind, pol = expected_answer(req)
        if kind == "check":
            check(st == 200 and isinstance(b, dict) and b.get("policy") == pol,
                  "%s: request %d: h11 read a body for %s, the daemon answered %r %r",
                  s.name, i, pol, st, b)
        else:
            check(st == 200 and b == {"status": "ok"}, "%s: request %d: /healthz answered %r %r",
                  s.name, i, st, b)
    check(closed, "%s: the connection stayed open after the last request (Connection: close)", s.name)


def rejected_after(s, k, answers, closed):
    """k requests answered, then a JSON error and a close."""
    check(len(answers) == k + 1, "%s: expected %d answers then a refusal, got %s", s.name, k,
          [(a[0], a[2]) for a in answers][:5])
    st, h, b = answers[-1]
    check(st != "hung", "%s: no answer to the bad request, no close (hung)", s.name)
    H.expect_error(st, h, b, st if isinstance(st, int) and st >= 400 else 400, None,
                   "%s: the refusal" % s.name)
    check(closed, "%s: not closed after the refusal", s.name)


def t_cross_check(ctx):
    check(h11 is not None, "python3-h11 is not installed (Debian package python3-h11)")
    rnd = random.Random(SEED)
    streams = [Stream(rnd, n) for n in range(STREAMS)]
    tally = {}
    bad = []
    for s in streams:
        data = s.data()
        verdict, reqs = h11_read(data)
        exc = EXCEPTIONS.get(s.mutation)
        key = "%s/%s" % (verdict, exc[0] if exc else "same")
        tally[key] = tally.get(key, 0) + 1
        if verdict == "incomplete":
            bad.append("%s: h11 wants more bytes (a generator bug): %r" % (s.name, data[:200]))
            continue
        try:
            answers, closed = daemon_read(ctx.port, data)
            if exc and exc[0] == "we reject":
                if verdict == "accepted":
                    rejected_after(s, s.at, answers, closed)
                else:                  # h11 became as strict: then the same reading
                    rejected_after(s, len(reqs), answers, closed)
            elif exc and exc[0] == "we accept":
                v2, reqs2 = h11_read(s.clean)
                check(v2 == "accepted", "%s: h11 rejects the stream without the mutation", s.name)
                same_reading(s, reqs2, answers, closed)
            elif verdict == "accepted":
                same_reading(s, reqs, answers, closed)
            else:
                rejected_after(s, len(reqs), answers, closed)
        except H.Fail as e:
            bad.append("%s\n      stream %r" % (str(e).splitlines()[0][:300], data[:300]))
    sys.stdout.write("#   %d streams: %s\n" % (len(streams), ", ".join("%s %d" % kv for kv in sorted(tally.items()))))
    check(tally.get("rejected/same", 0) >= 50 and tally.get("accepted/same", 0) >= 100,
          "too few streams of a kind to mean much: %r", tally)
    check(not bad, "%d of %d streams read differently:\n%s", len(bad), len(streams), "\n".join(bad[:15]))


CASES = [
    ("%d generated streams: every h11 rejection is ours, every h11 reading is ours "
     "(listed exceptions asserted as our choice)" % STREAMS, t_cross_check),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r, H.Daemon(CONFIG, redis=r, workers=1) as d:
        yield d


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=300)
