"""What the WSGI and ASGI middleware share: the answer to a denied request."""

from __future__ import annotations

import json
from typing import List, Tuple

from ._core import Decision

REASONS = {400: "Bad Request", 429: "Too Many Requests", 503: "Service Unavailable"}


def denial(d: Decision) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """(status, headers, body) of the answer to a request the decision denies:
    the daemon's 429 with its Retry-After and quota headers, a 400 for a
    request the daemon refused, a 503 failing closed."""
    status = d.status if d.status in REASONS else 503
    if status == 429:
        body = {"error": "too many requests", "retry_after": d.retry_after or 1}
    elif status == 400:
        body = {"error": "bad request"}
    else:
        body = {"error": "rate limiter unavailable"}
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    headers += [(k, v) for k, v in d.headers if k.lower() != "content-length"]
    return status, headers, data


def allowed_headers(d: Decision) -> List[Tuple[str, str]]:
    """The quota headers an allowed answer may carry (headers=True)."""
    return [(k, v) for k, v in d.headers if k.lower() not in ("retry-after", "x-ratelimit-lease")]
