"""WSGI middleware (Flask, Django, any WSGI app): one check per request
before the app runs; a denied request gets the daemon's 429 with its
Retry-After and quota headers.

    from ratelimitd import Client
    from ratelimitd.wsgi import RateLimitMiddleware

    client = Client("http://127.0.0.1:8080", timeout=0.2)
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, client)          # Flask
    application = RateLimitMiddleware(get_wsgi_application(), client)  # Django's wsgi.py
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ._core import Decision
from ._http import REASONS, allowed_headers, denial
from .client import Client

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class RateLimitMiddleware:
    """key(environ)        the caller (an API key, a user id), or None: the
                           daemon's identity chain names it (the forwarded address)
    client_ip(environ)     the client's address (default REMOTE_ADDR); behind a
                           reverse proxy, the right hop of its header
    policy, cost(environ)  what each check names (default: the daemon matches
                           the path; cost 1)
    headers                also pass the quota headers on allowed answers

    The check carries the whole path: under a mount (SCRIPT_NAME) the app sees
    only the rest of it, and a policy of /api/... would never match.
    """

    def __init__(self, app: WSGIApp, client: Client,
                 key: Optional[Callable[[Environ], Optional[str]]] = None,
                 client_ip: Optional[Callable[[Environ], Optional[str]]] = None,
                 policy: Optional[str] = None,
                 cost: Optional[Callable[[Environ], Optional[int]]] = None,
                 headers: bool = False) -> None:
        self.app = app
        self.client = client
        self.key = key or (lambda environ: None)
        self.client_ip = client_ip or (lambda environ: environ.get("REMOTE_ADDR"))
        self.policy = policy
        self.cost = cost or (lambda environ: None)
        self.headers = headers

    def check(self, environ: Environ) -> Decision:
        path = (environ.get("SCRIPT_NAME") or "") + (environ.get("PATH_INFO") or "")
        return self.client.check(key=self.key(environ), path=path or "/",
                                 method=environ.get("REQUEST_METHOD", "GET"),
                                 client_ip=self.client_ip(environ), policy=self.policy,
                                 cost=self.cost(environ))

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        d = self.check(environ)
        environ["ratelimitd.decision"] = d
        if d.allowed:
            if not self.headers or not d.headers:
                return self.app(environ, start_response)
            extra = allowed_headers(d)

            def start(status: str, hdrs: List[Tuple[str, str]], exc_info: Any = None) -> Any:
                return start_response(status, list(hdrs) + extra, exc_info)
            return self.app(environ, start)
        status, hdrs, body = denial(d)
        start_response("%d %s" % (status, REASONS[status]), hdrs)
        return [body]
