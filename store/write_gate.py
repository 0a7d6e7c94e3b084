"""One in-process writer at a time on SQLite, the workers' calls first (docs/operations.md, "Fair sharing").

SQLite has one write lock per database. Two writers of one process that meet at it do not queue: the one
that loses sleeps in SQLite's busy handler (1, 2, 5 ... up to 100 ms between tries) and retries. Under
sustained ingress the group-commit writer holds the lock most of the time, so a worker's claim,
heartbeat or state report lost almost every retry: service-hosted workers fell from 46 to under 4 runs/s
(issue 29). The gate makes those writers take turns on the event loop instead, in a fixed order: a waiting
worker call (``urgent``) goes before the next ingress batch, and each ingress batch is one bounded
transaction, so a worker waits for at most one batch. PostgreSQL has row locks and needs no gate.

The gate travels with the app's session factory (:func:`store.db.session_factory` puts it in the
factory's ``info``), so every part holding the factory finds the same one (:func:`write_gate`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

INFO_KEY = "factoryctl.write_gate"


class WriteGate:
    """An asyncio lock with two queues: ``urgent`` waiters are handed the lock before the others."""

    def __init__(self) -> None:
        self._held = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @property
    def held(self) -> bool:
        return self._held

    @contextlib.asynccontextmanager
    async def hold(self, *, urgent: bool = False) -> AsyncIterator[None]:
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, urgent: bool) -> None:
        if not self._held and not self._urgent and not self._normal:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._normal
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed the lock just as we were cancelled: pass it on
            else:
                queue.remove(waiter)
            raise

    def _release(self) -> None:
        """Hand the lock to the next waiter (urgent ones first), or free it."""
        for queue in (self._urgent, self._normal):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the lock stays held, now by that waiter
                    return
        self._held = False


def write_gate(sessions: Any) -> WriteGate | None:
    """The gate of a session factory made by :func:`store.db.session_factory` (None: PostgreSQL, or a
    factory made elsewhere)."""
    info = getattr(sessions, "kw", {}).get("info") or {}
    gate = info.get(INFO_KEY)
    return gate if isinstance(gate, WriteGate) else None


@contextlib.asynccontextmanager
async def writing(gate: WriteGate | None, *, urgent: bool = False) -> AsyncIterator[None]:
    """Hold ``gate`` for one write transaction; nothing when there is no gate."""
    if gate is None:
        yield
        return
    async with gate.hold(urgent=urgent):
        yield
