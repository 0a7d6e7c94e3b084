"""The server side of the worker protocol (DESIGN §7): claim routes and service-hosted workers.

- :mod:`api.workers.routes` — ``/api/v1/workers/...`` for self-hosted workers (long-poll claims,
  heartbeats, state reports, log lines);
- :mod:`api.workers.service` — the in-process workers of ``serve --workers N`` and the lease reaper;
- :mod:`api.workers.execution` — how any worker executes one claimed run (shared with the
  self-hosted worker in :mod:`api.worker.agent`).

Queue semantics (claims, leases, lapse rules) live in :mod:`api.runs.queue`.

Claimers waiting in this process are woken through a :class:`ClaimSignal` stored on the app: code
that queues a run calls :func:`wake_claimers` after committing. Claimers in other processes (other
replicas) notice new runs by polling.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web


class ClaimSignal:
    """An edge-triggered broadcast: every waiter on :meth:`current` wakes at the next :meth:`wake`.

    Take :meth:`current` *before* looking for work, then wait on it: a wake that happens in
    between is not lost.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def current(self) -> asyncio.Event:
        return self._event

    def wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    @staticmethod
    async def wait(event: asyncio.Event, seconds: float) -> None:
        """Wait until ``event`` is set or ``seconds`` pass."""
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)


CLAIM_SIGNAL = web.AppKey("claim_signal", ClaimSignal)


def wake_claimers(app: web.Application) -> None:
    """Tell this process's waiting claimers that a run was queued (call after the commit)."""
    signal = app.get(CLAIM_SIGNAL)
    if signal is not None:
        signal.wake()
