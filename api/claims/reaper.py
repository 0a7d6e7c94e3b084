"""The lease reaper: applies the lease-lapse rules of the run queue every few seconds.

It runs in every ``serve`` process, even with ``--workers 0``, because self-hosted workers hold
leases too. Runs it moves back to QUEUED wake this process's claimers.
"""

from __future__ import annotations

import logging

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.context import CLOCK, SESSIONS
from api.periodic import Lifecycle, periodic
from api.runs import queue
from api.runs.claim_signal import wake_claimers
from store.clock import Clock

log = logging.getLogger("factoryctl.claims")
DEFAULT_INTERVAL_SECONDS = 5.0


async def reap_once(sessions: async_sessionmaker[AsyncSession], clock: Clock) -> int:
    """One pass: lapsed claims go back to QUEUED, lapsed executions end ERROR; how many moved."""
    async with sessions() as session, session.begin():
        return await queue.reap_expired_leases(session, clock)


async def _tick(app: web.Application) -> None:
    moved = await reap_once(app[SESSIONS], app[CLOCK])
    if moved:
        log.info("lease reaper: %d run(s) with lapsed leases moved on", moved)
        wake_claimers(app)  # some may be QUEUED again


def lease_reaper(interval_seconds: float = DEFAULT_INTERVAL_SECONDS) -> Lifecycle:
    """The reaper as a ``cleanup_ctx`` lifecycle."""
    return periodic("lease-reaper", interval_seconds, _tick, log=log)
