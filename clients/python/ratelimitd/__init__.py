"""ratelimitd: a client of the ratelimitd daemon's check listener.

    from ratelimitd import Client, AsyncClient

    client = Client("http://127.0.0.1:8080", timeout=0.2, fail_open=True)
    d = client.check(key="user-42", path="/orders", method="POST")
    if not d.allowed:
        ...  # d.status (429, 400, 503), d.retry_after, d.headers

Middleware: ratelimitd.wsgi (Flask, Django), ratelimitd.asgi (Starlette,
FastAPI).  Standard library only.  The contract is docs/API.md of ratelimitd.
"""

from ._core import QUOTA_HEADERS, Decision
from ._reserve import AsyncReservation, Reservation
from .aio import AsyncClient
from .client import Client

__all__ = ["Client", "AsyncClient", "Decision", "Reservation", "AsyncReservation", "QUOTA_HEADERS"]
__version__ = "0.1.0"
