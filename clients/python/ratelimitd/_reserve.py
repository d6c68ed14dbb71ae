"""Reservations: a budget taken at its estimate before the work, settled at
the real cost after it, exactly once, whatever way the work ends.

docs/API.md, "Reserve and settle": POST /check with "reserve": true answers a
"reservation"; POST /settle {"reservation", "cost"} applies the difference.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, Optional

from ._core import Decision

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client


class _Base:
    def __init__(self, decision: Decision, estimate: int, error_cost: Optional[int]) -> None:
        self.decision = decision
        self.estimate = estimate
        #: the real cost, as the work learns it (set it, or add() as a stream goes)
        self.cost: Optional[int] = None
        self.error_cost = error_cost
        #: the settle's answer, once the daemon gave a definite one
        self.result: Optional[Decision] = None

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def id(self) -> Optional[str]:
        """The reservation; None when the check took none (denied, failed open, cost 0)."""
        return self.decision.reservation

    def add(self, units: int) -> None:
        """Count `units` more of the real cost (a stream's chunks)."""
        self.cost = (self.cost or 0) + units

    def _final_cost(self, failed: bool) -> int:
        if self.cost is not None:
            return self.cost
        if failed and self.error_cost is not None:
            return self.error_cost
        # nothing reported: the estimate stays counted (as an unsettled
        # reservation would), and the reservation is closed
        return self.estimate

    def _done(self, d: Decision) -> Decision:
        # a definite answer (settled or not held, pending, refused) ends it;
        # a failed call may be tried again: the daemon settles once
        if not d.degraded:
            self.result = d
        return d

    def __repr__(self) -> str:
        return "Reservation(id=%r, allowed=%r, estimate=%r, cost=%r, settled=%r)" % (
            self.id, self.allowed, self.estimate, self.cost, self.result and self.result.settled)


class Reservation(_Base):
    """What Client.reserve() took.  A context manager: the block's end settles
    it — at `cost` when the block set it, else at the estimate on success and
    at `error_cost` (default: the estimate) on an exception."""

    def __init__(self, client: "Client", decision: Decision, estimate: int,
                 error_cost: Optional[int]) -> None:
        super().__init__(decision, estimate, error_cost)
        self.client = client

    def settle(self, cost: Optional[int] = None) -> Optional[Decision]:
        """POST /settle at `cost` (default: as the block's end would); once.
        None when there is nothing to settle."""
        if self.id is None:
            return None
        if self.result is not None:
            return self.result
        return self._done(self.client.settle(self.id, self._final_cost(False) if cost is None else cost))

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.id is not None and self.result is None:
            self.settle(self._final_cost(exc_type is not None))


class AsyncReservation(_Base):
    """What AsyncClient.reserve() took: `async with` settles it at the
    block's end as Reservation does — on success, on an exception and on
    cancellation alike (the settle is shielded from the cancellation)."""

    def __init__(self, client: "AsyncClient", decision: Decision, estimate: int,
                 error_cost: Optional[int]) -> None:
        super().__init__(decision, estimate, error_cost)
        self.client = client

    async def settle(self, cost: Optional[int] = None) -> Optional[Decision]:
        if self.id is None:
            return None
        if self.result is not None:
            return self.result
        return self._done(await self.client.settle(self.id, self._final_cost(False) if cost is None else cost))

    async def __aenter__(self) -> "AsyncReservation":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.id is None or self.result is not None:
            return
        # a task of its own: a cancellation of this one (a client gone, a
        # timeout) must not cancel the settle that accounts for it
        task = asyncio.ensure_future(self.settle(self._final_cost(exc_type is not None)))
        await asyncio.shield(task)


class Reserving:
    """AsyncClient.reserve()'s result: `await` it for the AsyncReservation, or
    `async with` it to settle at the block's end."""

    def __init__(self, make: Callable[[], Awaitable[AsyncReservation]]) -> None:
        self._make = make
        self._r: Optional[AsyncReservation] = None

    def __await__(self) -> Generator[Any, None, AsyncReservation]:
        return self._make().__await__()

    async def __aenter__(self) -> AsyncReservation:
        self._r = await self._make()
        return self._r

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._r is not None
        await self._r.__aexit__(exc_type, exc, tb)
