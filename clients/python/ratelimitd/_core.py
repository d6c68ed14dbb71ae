"""What the sync and the asyncio clients share: the request bodies, the
reading of the daemon's answers and the failure policy.  No I/O here.

The contract is docs/API.md ("The check listener"); the scenarios both this
client and the Node one must pass are in clients/conformance.json.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger("ratelimitd")

#: The daemon's headers worth passing on to a caller (lower-case).
QUOTA_HEADERS = ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining",
                 "x-ratelimit-reset", "ratelimit-policy", "ratelimit", "x-ratelimit-lease")

Headers = List[Tuple[str, str]]


class Decision:
    """What the daemon answered, or what the failure policy decided.

    allowed      the request may proceed (a charge: whether a check of cost 0
                 would pass now; a release: the daemon took the call)
    status       the daemon's 200 / 429; 400 when it refused the call (any
                 4xx: a bug or a path it cannot read, denied whatever
                 fail_open says); when it could not answer (refused, timeout,
                 5xx), 200 failing open or 503 failing closed
    degraded     the failure policy decided, or the daemon said it answered
                 without its backend ("degraded": true)
    retry_after  seconds to wait, on a 429 (the daemon's Retry-After) and on a
                 fail-closed 503 (1); else None
    headers      [(name, value)] of the daemon's quota headers, to pass on
    body         the daemon's JSON answer ({} when there was none)
    reason       why the failure policy or a 400 decided, else None
    elapsed_ms   how long the call took, a retry included
    """

    __slots__ = ("allowed", "status", "degraded", "retry_after", "headers", "_body", "_raw", "reason",
                 "elapsed_ms")

    def __init__(self, allowed: bool, status: int, *, degraded: bool = False,
                 retry_after: Optional[int] = None, headers: Sequence[Tuple[str, str]] = (),
                 body: Optional[Dict[str, Any]] = None, reason: Optional[str] = None,
                 elapsed_ms: float = 0.0, raw: bytes = b"") -> None:
        self.allowed = allowed
        self.status = status
        self.degraded = degraded
        self.retry_after = retry_after
        self.headers: Headers = list(headers)
        # the answer's JSON, read when first asked for (`raw`, the daemon's
        # bytes): a middleware reads `allowed` and `headers` only
        self._body = body
        self._raw = raw
        self.reason = reason
        self.elapsed_ms = elapsed_ms

    def __bool__(self) -> bool:
        return self.allowed

    def __repr__(self) -> str:
        return ("Decision(allowed=%r, status=%r, degraded=%r, retry_after=%r, reason=%r, "
                "elapsed_ms=%.1f)" % (self.allowed, self.status, self.degraded, self.retry_after,
                                      self.reason, self.elapsed_ms))

    @property
    def body(self) -> Dict[str, Any]:
        """The daemon's JSON answer ({} when there was none)."""
        if self._body is None:
            self._body = _json(self._raw)
        return self._body

    def header(self, name: str) -> Optional[str]:
        """A quota header's value, by any case of its name."""
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)

    @property
    def policy(self) -> Optional[str]:
        return self.body.get("policy")

    @property
    def limit(self) -> Optional[int]:
        return self.body.get("limit")

    @property
    def remaining(self) -> Optional[int]:
        return self.body.get("remaining")

    @property
    def lease(self) -> Optional[str]:
        """A concurrency limit's lease, for release()."""
        return self.body.get("lease")

    @property
    def charged(self) -> Optional[int]:
        """A charge's units counted; None when the daemon did not take it."""
        return self.body.get("charged")

    @property
    def overdraft(self) -> Optional[int]:
        return self.body.get("overdraft")

    @property
    def reservation(self) -> Optional[str]:
        """A reserving check's reservation id, for settle()."""
        return self.body.get("reservation")

    @property
    def settled(self) -> Optional[bool]:
        """A settle: True applied now, False not held (settled already,
        expired, unknown); None when the outcome is unknown (the daemon did
        not answer, or took it for later: `pending`)."""
        return self.body.get("settled")

    @property
    def pending(self) -> bool:
        """A charge or settle the daemon kept to apply when its backend answers (202)."""
        return bool(self.body.get("pending"))

    @property
    def released(self) -> Optional[bool]:
        """A release: whether the lease held its slot; None when the daemon did not answer it."""
        return self.body.get("released")


class Endpoint:
    """Where the daemon listens, from its URL (http://host:port)."""

    __slots__ = ("host", "port", "url")

    def __init__(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("url must be http://host[:port], got %r" % url)
        self.host = u.hostname
        self.port = u.port or 80
        self.url = url


# one encoder: json.dumps with separators builds one per call
_encode = json.JSONEncoder(separators=(",", ":")).encode


def json_body(body: Mapping[str, Any]) -> bytes:
    return _encode(body).encode()


def check_body(fields: Mapping[str, Any], default_policy: Optional[str]) -> bytes:
    """The JSON body of /check or /charge: the fields given, None left out."""
    body = {k: v for k, v in fields.items() if v is not None}
    if "policy" not in body and default_policy:
        body["policy"] = default_policy
    return json_body(body)


def request_headers(client_ip: Optional[str], extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    h = {"Content-Type": "application/json"}
    if client_ip:
        # the client's address, for the `forwarded` identity source: without
        # it every anonymous caller would be this service's own address
        h["X-Forwarded-For"] = client_ip
    if extra:
        h.update(extra)
    return h


def _json(data: bytes) -> Dict[str, Any]:
    try:
        v = json.loads(data.decode("utf-8")) if data else {}
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def settle_body(reservation: str, cost: int) -> bytes:
    return json_body({"reservation": reservation, "cost": cost})


def failed(route: str, reason: str, ms: float, fail_open: bool,
           logger: logging.Logger = log) -> Decision:
    """The failure policy's decision: the daemon could not answer `route`."""
    if fail_open:
        logger.warning("rate limiter unavailable, allowing the request: %s %s", route, reason)
        return Decision(True, 200, degraded=True, reason=reason, elapsed_ms=ms)
    logger.warning("rate limiter unavailable, refusing the request: %s %s", route, reason)
    return Decision(False, 503, degraded=True, retry_after=1, headers=[("Retry-After", "1")],
                    reason=reason, elapsed_ms=ms)


def decide(route: str, status: int, headers: Sequence[Tuple[str, str]], data: bytes, ms: float,
           fail_open: bool, logger: logging.Logger = log,
           quota: Optional[Sequence[Tuple[str, str]]] = None) -> Decision:
    """The daemon's answer to `route` as a Decision.  `quota`: `headers`
    already reduced to QUOTA_HEADERS (the asyncio client reads no others)."""
    if quota is None:
        quota = [(k, v) for k, v in headers if k.lower() in QUOTA_HEADERS]
    if status == 202:
        # kept by the daemon, applied once its backend answers again
        # (docs/API.md, "Charges the backend cannot take now"): not a failure
        return Decision(True, 202, headers=quota, raw=data, elapsed_ms=ms)
    if status in (200, 429):
        ra = None
        if status == 429:
            v = next((v for k, v in headers if k.lower() == "retry-after"), "1")
            ra = int(v) if v.isdigit() else 1
        if route == "/check" and b'"degraded"' not in data:
            # the common answer: nothing in the JSON decides it
            return Decision(status == 200, status, retry_after=ra, headers=quota, raw=data, elapsed_ms=ms)
        body = _json(data)
        allowed = status == 200 if route == "/check" else bool(body.get("allowed", True))
        return Decision(allowed, status, degraded=bool(body.get("degraded")), retry_after=ra,
                        headers=quota, body=body, elapsed_ms=ms)
    body = _json(data)
    reason = "ratelimitd answered %d after %.0f ms: %s" % (status, ms, body.get("error") or
                                                           data[:200].decode("utf-8", "replace"))
    if 400 <= status < 500:
        # this call's doing (a path the daemon cannot normalise, a bug here):
        # denied, never the failure policy, which would let a client walk
        # around every limit by sending such a path (issue 24)
        logger.error("%s %s: the request is refused", route, reason)
        return Decision(False, 400, reason=reason, body=body, elapsed_ms=ms)
    return failed(route, reason, ms, fail_open, logger)
