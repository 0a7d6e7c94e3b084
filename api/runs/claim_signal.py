"""Waking claimers: how a queued run reaches a waiting worker without a poll delay.

It sits here, below every path that queues a run; the claimers are the worker protocol's
(:mod:`api.claims`). Every path that makes a run claimable —
run creation, factory dispatch, webhook ingress, follow-ups that re-queue a run, the lease reaper —
calls :func:`wake_claimers` after its transaction commits. Claimers in this process (long-polling
self-hosted workers, service-hosted workers) wait on :meth:`ClaimSignal.current` and wake at once;
claimers in other replicas notice new runs by polling (docs/architecture.md, "Who runs where").
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


def claim_signal(app: web.Application) -> ClaimSignal:
    """The app's signal, created on first use so every claimer and waker shares one."""
    signal = app.get(CLAIM_SIGNAL)
    if signal is None:
        signal = app[CLAIM_SIGNAL] = ClaimSignal()
    return signal


def wake_claimers(app: web.Application) -> None:
    """Tell this process's waiting claimers that a run became claimable (call after the commit)."""
    signal = app.get(CLAIM_SIGNAL)
    if signal is not None:
        signal.wake()
