"""The lease reaper: applies the lease-lapse rules of the run queue every few seconds.

It runs in every ``serve`` process, even with ``--workers 0``, because self-hosted workers hold
leases too. Runs it moves back to QUEUED wake this process's claimers.

A database outage fails the workers' heartbeats (503) as well as the reaper's passes, so leases lapse
during it although their workers are alive. When the database is back, the reaper therefore waits one
lease period - in which every live worker heartbeats more than once - before it reaps again; a worker
that died meanwhile is reaped after that (docs/operations.md, "Faults and recovery").
"""

from __future__ import annotations

import datetime as dt
import logging

from aiohttp import web
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims import queue
from api.context import CLOCK, SESSIONS, SETTINGS
from api.periodic import Lifecycle, periodic
from api.problems import store_unavailable
from api.runs.event_hub import runs_queued
from store.clock import Clock

log = logging.getLogger("factoryctl.claims")
DEFAULT_INTERVAL_SECONDS = 5.0


async def reap_once(sessions: async_sessionmaker[AsyncSession], clock: Clock) -> int:
    """One pass: lapsed claims go back to QUEUED, lapsed executions end ERROR; how many moved."""
    async with sessions() as session, session.begin():
        return await queue.reap_expired_leases(session, clock)


class _Reaper:
    """One reaper's memory between passes: whether the store was down, and until when it holds off."""

    def __init__(self) -> None:
        self.down = False
        self.hold_until: dt.datetime | None = None

    async def tick(self, app: web.Application) -> None:
        sessions, clock = app[SESSIONS], app[CLOCK]
        if self.down:
            if not await self._store_answers(sessions):
                return
            self.down = False
            lease = app[SETTINGS].lease_seconds
            self.hold_until = clock.now() + dt.timedelta(seconds=lease)
            log.info(
                "lease reaper: the store is back; reaping resumes in %gs, after live workers heartbeat", lease
            )
            return
        if self.hold_until is not None:
            if clock.now() < self.hold_until:
                return
            self.hold_until = None
        try:
            moved = await reap_once(sessions, clock)
        except Exception as exc:
            reason = store_unavailable(exc)
            if reason is None:
                raise  # a bug, not an outage: logged with its traceback by the periodic job
            self.down = True
            log.warning("lease reaper: store unavailable (%s); no lease is reaped until it is back", reason)
            return
        if moved:
            log.info("lease reaper: %d run(s) with lapsed leases moved on", moved)
            runs_queued(app)  # some may be QUEUED again

    @staticmethod
    async def _store_answers(sessions: async_sessionmaker[AsyncSession]) -> bool:
        try:
            async with sessions() as session:
                await session.execute(text("SELECT 1"))
        except Exception as exc:
            if store_unavailable(exc) is None:
                raise
            return False
        return True


def lease_reaper(interval_seconds: float = DEFAULT_INTERVAL_SECONDS) -> Lifecycle:
    """The reaper as a ``cleanup_ctx`` lifecycle."""
    return periodic("lease-reaper", interval_seconds, _Reaper().tick, log=log)
