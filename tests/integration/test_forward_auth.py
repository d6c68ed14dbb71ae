#!/usr/bin/env python3
"""forward_auth (docs/operations.md, docs/checks.md): a gateway's own request is a check — any method on
/check or /check/<original path>, no body, the original request from the
X-Original-* headers (Envoy's recipe) or X-Forwarded-* ones (Traefik, Caddy:
forwarded_request_headers "forwarded"), never both — while with the option off
/check stays POST only (docs/API.md: 405 with Allow)."""

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

POLICIES = [
    {"name": "api", "match": {"path_prefix": "/api", "methods": ["GET", "DELETE"]},
     "limits": [{"algorithm": "fixed_window", "limit": 2, "window": "1h"}]},
]
# redis.timeout: semantics under test, not latency (the default 50 ms would
# answer a check degraded whenever a loaded host delays Redis that long)
CONFIG = {"forward_auth": True, "identity": ["header:X-Api-Key", "peer"], "redis": {"timeout": "2s"},
          "policies": POLICIES}
# Envoy's recipe sets X-Original-URI/-Method itself: it names that family
ENVOY = dict(CONFIG, forwarded_request_headers="original")


def status(d, method, path, headers=None, body=None):
    st, h, b = H.request(d.port, method, path, body, headers)
    return st, b


def t_traefik_style(on, off, r):
    # forward_auth's default family is what Traefik and Caddy send
    with H.Daemon(CONFIG, redis=r) as tr:
        h = {"X-Api-Key": "t1", "X-Forwarded-Uri": "/api/items?page=2", "X-Forwarded-Method": "GET"}
        got = [status(tr, "GET", "/check", h)[0] for _ in range(3)]
        eq(got, [200, 200, 429], "GET /check with X-Forwarded-Uri /api/items (limit 2)")
        st, b = status(tr, "GET", "/check", dict(h, **{"X-Forwarded-Uri": "/elsewhere"}))
        eq((st, b.get("policy")), (200, None), "a path no policy matches")
        # Traefik passes the client's own X-Original-URI through: not read
        st, b = status(tr, "GET", "/check", dict(h, **{"X-Original-URI": "/elsewhere"}))
        eq((st, b.get("policy")), (429, "api"), "a client's X-Original-URI beside X-Forwarded-Uri")
    # and the Envoy/nginx family does not read X-Forwarded-Uri at all
    st, b = status(on, "GET", "/check", {"X-Api-Key": "t2", "X-Forwarded-Uri": "/api/items"})
    eq((st, b.get("policy")), (200, None), "X-Forwarded-Uri to a forwarded_request_headers original daemon")


def t_default_not_spoofed(on, off, r):
    """Issue 24, 9: forward_auth on, forwarded_request_headers left alone:
    a client's own X-Original-URI: /free beside the X-Forwarded-Uri Traefik or
    Caddy set (both pass every client header on) used to win, walking around
    the policy.  It is the forwarded family now: the client's header is not
    read."""
    with H.Daemon(CONFIG, redis=r) as d:
        h = {"X-Api-Key": "spoof", "X-Forwarded-Uri": "/api/items", "X-Forwarded-Method": "GET",
             "X-Original-URI": "/free", "X-Original-Method": "GET"}
        got = [status(d, "GET", "/check", h) for _ in range(3)]
        eq([(st, b.get("policy")) for st, b in got], [(200, "api"), (200, "api"), (429, "api")],
           "X-Original-URI /free beside X-Forwarded-Uri /api/items (limit 2)")
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(dict(CONFIG, forwarded_request_headers="sideways"))])
    eq(rc, 1, "-t with a bad forwarded_request_headers")
    check("auto" in err, "the error does not list auto: %r", err)


def t_envoy_style(on, off, r):
    # Envoy's HTTP ext_authz sends the original method and appends the path
    h = {"X-Api-Key": "e1"}
    got = [status(on, "DELETE", "/check/api/x", h)[0] for _ in range(3)]
    eq(got, [200, 200, 429], "DELETE /check/api/x (original path after /check)")
    st, b = status(on, "PUT", "/check/api/x", h)
    eq((st, b.get("policy")), (200, None), "PUT is outside the policy's methods")


def t_body_ignored(on, off, r):
    # a gateway forwards its client's body: it must not be read as ours
    st, b = status(on, "PUT", "/check/api/y", {"X-Api-Key": "b1", "X-Original-Method": "GET"},
                   body={"key": "someone-else", "cost": 1000})
    eq((st, b.get("policy"), b.get("remaining")), (200, "api", 1), "the body of a forwarded request")


def t_post_still_api(on, off, r):
    st, b = status(on, "POST", "/check", {"X-Api-Key": "p1"}, body={"path": "/api/z", "cost": 2})
    eq((st, b.get("remaining")), (200, 0), "POST /check with a JSON body is still the API")


def t_off_is_405(on, off, r):
    st, h, b = H.request(off.port, "GET", "/check", None, {"X-Forwarded-Uri": "/api/a"})
    H.expect_error(st, h, b, 405, what="GET /check with forward_auth off")
    eq(h.get("allow"), "POST", "Allow")
    st, h, b = H.request(off.port, "GET", "/check/api/a")
    H.expect_error(st, h, b, 404, what="/check/... with forward_auth off")


CASES = [
    ("Traefik ForwardAuth style: GET /check with X-Forwarded-Uri/Method", t_traefik_style),
    ("Envoy ext_authz style: original method, path after /check/", t_envoy_style),
    ("forward_auth's default family is forwarded: a client's X-Original-URI beside Traefik's "
     "X-Forwarded-Uri picks nothing", t_default_not_spoofed),
    ("a forwarded request's body is ignored", t_body_ignored),
    ("POST /check with a body is unchanged", t_post_still_api),
    ("forward_auth off: GET /check is 405, /check/... is 404", t_off_is_405),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r, H.Daemon(ENVOY, redis=r) as on, \
            H.Daemon(dict(CONFIG, forward_auth=False), redis=r) as off:
        yield on, off, r


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
