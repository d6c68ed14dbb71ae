"""A Starlette (or FastAPI) app behind ratelimitd, with the ratelimitd
package (clients/python) and its asyncio client:

    pip install ./clients/python starlette uvicorn     # or Debian's python3-starlette
    RATELIMITD_URL=http://127.0.0.1:8080 uvicorn --app-dir examples/python starlette_app:app

FastAPI takes the same line: app.add_middleware(RateLimitMiddleware, client=client, key=...).
"""

import os
import sys

try:
    import ratelimitd
except ImportError:     # run from a clone, the package not installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import ratelimitd
from ratelimitd.asgi import RateLimitMiddleware

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def orders(request):
    return PlainTextResponse("hello from the app\n")


def api_key(scope):
    return dict(scope.get("headers") or []).get(b"x-api-key", b"").decode("latin-1") or None


def create_app(url="http://127.0.0.1:8080", fail_open=True, timeout=0.2):
    app = Starlette(routes=[Route("/orders", orders, methods=["GET", "POST"])])
    client = ratelimitd.AsyncClient(url, timeout=timeout, fail_open=fail_open)
    app.add_middleware(RateLimitMiddleware, client=client, key=api_key)
    return app


app = create_app(os.environ.get("RATELIMITD_URL", "http://127.0.0.1:8080"),
                 fail_open=os.environ.get("RATELIMIT_FAIL") != "closed")
