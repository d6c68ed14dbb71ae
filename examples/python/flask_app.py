"""A Flask app behind ratelimitd, with the ratelimitd package (clients/python):

    pip install ./clients/python flask      # or Debian's python3-flask
    RATELIMITD_URL=http://127.0.0.1:8080 python3 examples/python/flask_app.py

Callers are named by their X-Api-Key header, else by their address (the
middleware forwards it); a denied request gets the daemon's 429 with its
Retry-After and quota headers.  RATELIMIT_FAIL=closed answers 503 when the
daemon cannot answer (the default lets requests through).
"""

import os
import sys

try:
    import ratelimitd
except ImportError:     # run from a clone, the package not installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import ratelimitd
from ratelimitd.wsgi import RateLimitMiddleware

from flask import Flask


def create_app(url="http://127.0.0.1:8080", fail_open=True, timeout=0.2):
    app = Flask(__name__)

    @app.route("/orders", methods=["GET", "POST"])
    def orders():
        return "hello from the app\n"

    client = ratelimitd.Client(url, timeout=timeout, fail_open=fail_open)
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, client, key=lambda environ: environ.get("HTTP_X_API_KEY"))
    return app


if __name__ == "__main__":
    create_app(os.environ.get("RATELIMITD_URL", "http://127.0.0.1:8080"),
               fail_open=os.environ.get("RATELIMIT_FAIL") != "closed").run(
        port=int(os.environ.get("PORT", "5000")))
