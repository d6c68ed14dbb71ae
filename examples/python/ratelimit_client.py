"""ratelimitd from a Python service: a client and WSGI / ASGI middleware.

Standard library only (http.client).  Copy this file into your project.

    from ratelimit_client import RateLimitClient, RateLimitWSGI, RateLimitASGI

    client = RateLimitClient("http://127.0.0.1:8080", timeout=0.2)
    app = RateLimitWSGI(app, client, key=lambda environ: environ.get("HTTP_X_API_KEY"))

What it does, and why:

- **One persistent connection per thread.**  A connection per call costs a
  TCP handshake and leaves a TIME_WAIT socket behind each check; at a few
  hundred requests per second that exhausts ephemeral ports.  http.client
  connections are not thread-safe, so each thread keeps its own.  The daemon
  closes idle keep-alive connections after 60 s: a call that fails on a
  *reused* connection is retried once on a fresh one (the check never reached
  the daemon, or its answer was lost; either way nothing was decided twice
  in a way the caller could see, at worst one unit was counted).
- **A timeout** (default 200 ms) for the whole check, the retry below
  included: the limiter must never be why a request hangs.  Each Decision
  says how long the check took (``elapsed_ms``), and so does the warning of
  one that failed.
- **A stated policy when the daemon cannot answer** (connection refused,
  timeout, 5xx): ``fail_open=True`` (the default) lets the request through and
  logs a warning; ``fail_open=False`` answers 503.
- **A 4xx but 429 denies the request** (400 to the client), never the failure
  policy: the daemon refused what this request made of its client's (a path
  it cannot normalise, ``/api%2Fitems``, or a bug here, an oversized key), and
  letting it through would let a client walk around every limit by sending
  such a path.  Logged at error level.
- **The client's address is forwarded** (``X-Forwarded-For``) so anonymous
  callers are told apart; otherwise they would all be this app's address.
  Behind a reverse proxy, pass ``client_ip=`` to pick the right hop: trust the
  proxy's header only when the proxy sets it.
- **A 429 is passed through** with the daemon's ``Retry-After`` and quota
  headers, so clients back off for the right time.
- **The whole path is checked**: under a mount (``SCRIPT_NAME``, ASGI's
  ``root_path``) the app sees only the rest of it, and a policy of
  ``/api/...`` would never match.
"""

import asyncio
import concurrent.futures
import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse

log = logging.getLogger("ratelimit")

# Headers of the daemon's answer worth passing on to the client.
QUOTA_HEADERS = ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining",
                 "x-ratelimit-reset", "ratelimit-policy", "ratelimit")


class Decision:
    """What the daemon said (or what the failure policy decided).

    allowed      the request may proceed
    status       200 / 429 from the daemon; 400 when the daemon refused the
                 check (a 4xx: the request is denied); 503 when it could not
                 answer and the policy is fail-closed; 200 when it failed open
    retry_after  seconds (str) on a 429, else None
    headers      [(name, value)] of quota headers to pass on
    degraded     True when the decision is the failure policy's, not the daemon's
    elapsed_ms   how long the check took, retry included
    """

    __slots__ = ("allowed", "status", "retry_after", "headers", "degraded", "reason", "elapsed_ms")

    def __init__(self, allowed, status, retry_after=None, headers=(), degraded=False, reason=None,
                 elapsed_ms=None):
        self.allowed = allowed
        self.status = status
        self.retry_after = retry_after
        self.headers = list(headers)
        self.degraded = degraded
        self.reason = reason
        self.elapsed_ms = elapsed_ms

    def __repr__(self):
        return "Decision(allowed=%r, status=%r, retry_after=%r, degraded=%r, reason=%r, elapsed_ms=%r)" % (
            self.allowed, self.status, self.retry_after, self.degraded, self.reason, self.elapsed_ms)


class RateLimitClient:
    """Thread-safe client of POST /check with one keep-alive connection per thread."""

    def __init__(self, url="http://127.0.0.1:8080", timeout=0.2, fail_open=True, policy=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("url must be http://host:port, got %r" % url)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout = timeout
        self.fail_open = fail_open
        self.policy = policy
        self._local = threading.local()

    def _conn(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = c
            self._local.used = False
        return c

    def _drop(self):
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
        self._local.conn = None

    def _post(self, body, headers, deadline):
        """(status, headers, body bytes); OSError / HTTPException on failure.
        Each socket operation waits at most until `deadline` (monotonic)."""
        for attempt in (0, 1):
            c = self._conn()
            reused = self._local.used
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            c.timeout = left
            if c.sock is not None:
                c.sock.settimeout(left)
            try:
                c.request("POST", "/check", body=body, headers=headers)
                r = c.getresponse()
                data = r.read()
                self._local.used = True
                if r.getheader("connection", "").lower() == "close":
                    self._drop()
                return r.status, r.getheaders(), data
            except (socket.timeout, TimeoutError):
                # the daemon is slow: a retry would only double the wait
                self._drop()
                raise
            except (OSError, http.client.HTTPException):
                self._drop()
                if not reused or attempt == 1:
                    raise
                # a kept-alive connection the daemon had closed: once more, fresh
        raise AssertionError("unreachable")

    def check(self, key=None, path="/", method="GET", client_ip=None, policy=None, cost=None):
        body = {"path": path, "method": method}
        if key is not None:
            body["key"] = key
        if policy or self.policy:
            body["policy"] = policy or self.policy
        if cost is not None:
            body["cost"] = cost
        headers = {"Content-Type": "application/json"}
        if client_ip:
            headers["X-Forwarded-For"] = client_ip
        start = time.monotonic()
        try:
            status, rh, data = self._post(json.dumps(body).encode(), headers, start + self.timeout)
        except (OSError, http.client.HTTPException) as e:
            ms = (time.monotonic() - start) * 1000
            return self._failed("%s: %s after %.0f ms" % (type(e).__name__, e, ms), ms)
        ms = (time.monotonic() - start) * 1000
        quota = [(k, v) for k, v in rh if k.lower() in QUOTA_HEADERS]
        if status == 200:
            return Decision(True, 200, headers=quota, elapsed_ms=ms)
        if status == 429:
            ra = next((v for k, v in rh if k.lower() == "retry-after"), "1")
            return Decision(False, 429, retry_after=ra, headers=quota, elapsed_ms=ms)
        reason = "ratelimitd answered %d after %.0f ms: %s" % (status, ms, data[:200].decode("utf-8", "replace"))
        if 400 <= status < 500:
            # the client's doing (a path the daemon cannot read) or a bug
            # here: denied, never the failure policy
            log.error("%s: the request is refused", reason)
            return Decision(False, 400, reason=reason, elapsed_ms=ms)
        return self._failed(reason, ms)

    def _failed(self, reason, ms):
        if self.fail_open:
            log.warning("rate limiter unavailable, allowing the request: %s", reason)
            return Decision(True, 200, degraded=True, reason=reason, elapsed_ms=ms)
        log.warning("rate limiter unavailable, refusing the request: %s", reason)
        return Decision(False, 503, headers=[("Retry-After", "1")], degraded=True, reason=reason, elapsed_ms=ms)


def _deny_body(d):
    if d.status == 429:
        return json.dumps({"error": "too many requests", "retry_after": int(d.retry_after)}).encode()
    if d.status == 400:
        return json.dumps({"error": "bad request"}).encode()
    return json.dumps({"error": "rate limiter unavailable"}).encode()


_STATUS_LINES = {429: "429 Too Many Requests", 400: "400 Bad Request",
                 503: "503 Service Unavailable"}


class RateLimitWSGI:
    """WSGI middleware: one check per request before the app runs.

    key(environ)        the caller's key (API key, user id) or None for anonymous
    client_ip(environ)  the client's address (default REMOTE_ADDR)
    """

    def __init__(self, app, client, key=None, client_ip=None):
        self.app = app
        self.client = client
        self.key = key or (lambda environ: None)
        self.client_ip = client_ip or (lambda environ: environ.get("REMOTE_ADDR"))

    def __call__(self, environ, start_response):
        # under a mount, PATH_INFO is what follows SCRIPT_NAME: the request's
        # path is both
        path = (environ.get("SCRIPT_NAME") or "") + (environ.get("PATH_INFO") or "")
        d = self.client.check(key=self.key(environ), path=path or "/",
                              method=environ.get("REQUEST_METHOD", "GET"),
                              client_ip=self.client_ip(environ))
        if d.allowed:
            return self.app(environ, start_response)
        body = _deny_body(d)
        status = _STATUS_LINES.get(d.status, "503 Service Unavailable")
        start_response(status, [("Content-Type", "application/json"),
                                ("Content-Length", str(len(body)))] + d.headers)
        return [body]


class RateLimitASGI:
    """ASGI middleware (HTTP scopes; others pass through).

    The blocking client runs in a bounded thread pool, each thread with its own
    keep-alive connection, so the event loop never waits on the limiter.
    key(scope) and client_ip(scope) as for RateLimitWSGI (default: scope["client"][0]).
    """

    def __init__(self, app, client, key=None, client_ip=None, threads=8):
        self.app = app
        self.client = client
        self.key = key or (lambda scope: None)
        self.client_ip = client_ip or (lambda scope: (scope.get("client") or (None,))[0])
        self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="ratelimit")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        # the whole path: some servers leave a mount's root_path out of path
        root, path = scope.get("root_path") or "", scope.get("path") or "/"
        if root and not path.startswith(root):
            path = root + path
        d = await loop.run_in_executor(
            self.pool, lambda: self.client.check(key=self.key(scope), path=path,
                                                 method=scope.get("method", "GET"),
                                                 client_ip=self.client_ip(scope)))
        if d.allowed:
            return await self.app(scope, receive, send)
        body = _deny_body(d)
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in d.headers]
        await send({"type": "http.response.start", "status": d.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
