"""An OpenAI-compatible proxy that holds each tenant to a token budget, with
the ratelimitd package (clients/python): standard library only.

    RATELIMITD_URL=http://127.0.0.1:8080 UPSTREAM_URL=https://api.openai.com \\
        RATELIMIT_POLICY=tokens PORT=8000 python3 examples/python/openai_proxy.py

For each POST /v1/chat/completions (or /v1/completions):

1. the tenant is the bearer token's hash (or X-Tenant);
2. it reserves an estimate: the prompt's length (4 characters a token,
   rounded up) plus max_tokens (DEFAULT_MAX_TOKENS when the request has none);
   a tenant past its budget gets the daemon's 429 and Retry-After, and the
   upstream is never called;
3. it forwards the request, and relays the answer (a stream chunk by chunk);
4. it settles at the answer's `usage.total_tokens` — for a stream, the last
   SSE chunk's (the proxy asks for it: stream_options.include_usage) — or,
   when the client went away or the upstream broke mid-stream, at the prompt
   estimate plus a token per chunk relayed; an upstream error before any
   answer gives the whole estimate back.

The daemon's policy counts tokens, e.g. {"name": "tokens", "limits":
[{"algorithm": "fixed_window", "limit": 100000, "window": "1m"}]}.
"""

import hashlib
import http.client
import http.server
import json
import math
import os
import sys
import urllib.parse

try:
    import ratelimitd
except ImportError:     # run from a clone, the package not installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import ratelimitd

ROUTES = ("/v1/chat/completions", "/v1/completions")
DEFAULT_MAX_TOKENS = int(os.environ.get("DEFAULT_MAX_TOKENS", "1024"))
UPSTREAM = urllib.parse.urlsplit(os.environ.get("UPSTREAM_URL", "https://api.openai.com"))
POLICY = os.environ.get("RATELIMIT_POLICY", "tokens")
CLIENT = ratelimitd.Client(os.environ.get("RATELIMITD_URL", "http://127.0.0.1:8080"),
                           timeout=float(os.environ.get("RATELIMIT_TIMEOUT", "0.2")),
                           fail_open=os.environ.get("RATELIMIT_FAIL") != "closed", policy=POLICY)


def prompt_tokens(req):
    """A prompt's tokens, estimated: 4 characters a token."""
    if "messages" in req:
        text = "".join(str(m.get("content") or "") for m in req["messages"] if isinstance(m, dict))
    else:
        text = str(req.get("prompt") or "")
    return math.ceil(len(text) / 4)


def tenant(headers):
    auth = headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        # the key itself never leaves the proxy: the daemon counts its hash
        return "key-" + hashlib.sha256(auth[7:].encode()).hexdigest()[:32]
    return headers.get("X-Tenant")


def upstream_conn():
    cls = http.client.HTTPSConnection if UPSTREAM.scheme == "https" else http.client.HTTPConnection
    return cls(UPSTREAM.hostname, UPSTREAM.port, timeout=600)


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in list(headers) + [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?")[0] not in ROUTES:
            return self.answer(404, {"error": {"message": "not proxied here"}})
        try:
            req = json.loads(raw)
            assert isinstance(req, dict)
        except (ValueError, AssertionError):
            return self.answer(400, {"error": {"message": "the body must be a JSON object"}})
        prompt = prompt_tokens(req)
        estimate = prompt + int(req.get("max_tokens") or DEFAULT_MAX_TOKENS)
        streaming = bool(req.get("stream"))
        if streaming:
            req["stream_options"] = dict(req.get("stream_options") or {}, include_usage=True)
        # the reservation is settled when this block ends, however it ends
        with CLIENT.reserve(estimate, key=tenant(self.headers), path=self.path, method="POST",
                            client_ip=self.client_address[0]) as r:
            if not r.allowed:
                d = r.decision
                return self.answer(d.status, {"error": {"message": "token budget exceeded" if d.status == 429
                                                        else "rate limiter: %s" % d.reason,
                                                        "type": "rate_limit_exceeded"}}, d.headers)
            self.forward(req, r, prompt, streaming)

    def forward(self, req, r, prompt, streaming):
        body = json.dumps(req).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if self.headers.get("Authorization"):
            headers["Authorization"] = self.headers["Authorization"]
        up = upstream_conn()
        try:
            up.request("POST", self.path, body=body, headers=headers)
            resp = up.getresponse()
        except OSError as e:
            r.cost = 0      # nothing was generated: the whole estimate back
            return self.answer(502, {"error": {"message": "upstream: %s" % e}})
        if resp.status != 200 or not streaming:
            data = resp.read()
            try:
                usage = json.loads(data).get("usage") or {}
            except (ValueError, AttributeError):
                usage = {}
            r.cost = int(usage.get("total_tokens", 0 if resp.status != 200 else r.estimate))
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        # a stream: relayed line by line; the cost so far is the prompt and a
        # token per chunk, until the last chunk's usage says it exactly
        r.cost = prompt
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for line in resp:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                try:
                    chunk = json.loads(line[6:])
                except ValueError:
                    chunk = {}
                usage = chunk.get("usage") if isinstance(chunk, dict) else None
                if usage and "total_tokens" in usage:
                    r.cost = int(usage["total_tokens"])
                elif isinstance(chunk, dict) and chunk.get("choices"):
                    r.cost += 1
            self.wfile.write(line)      # a client gone raises here: settled at what was relayed
            self.wfile.flush()


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Proxy)
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
