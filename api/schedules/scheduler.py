"""The scheduler: a periodic job in every ``serve`` process that fires the schedules that are due.

docs/schedules.md, "How schedules fire". Every replica runs it; none coordinates with another: each due
schedule is fired through :func:`api.schedules.firing.fire`, whose fire row decides which replica starts
the run. A tick reads the due schedules with one indexed query (``ix_schedules_due``) and fires each in
a transaction of its own, so a schedule that fails (logged) never keeps the others from firing; a store
that is down ends the tick, which the periodic job retries. Runs are queued with this process's claimers
woken after each commit, like every other path that queues runs (docs/architecture.md).

The tick interval bounds the fire latency: a schedule fires within one interval after its time
(default :data:`DEFAULT_INTERVAL_SECONDS`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.context import CLOCK, SESSIONS, SETTINGS
from api.periodic import Lifecycle, periodic
from api.problems import store_unavailable
from api.runs.event_hub import runs_queued
from api.runs.prepare import SKILLS
from api.runs.skills import SkillResolver
from api.schedules.firing import DUE_COLUMNS, Due, Fired, fire
from store.clock import Clock
from store.models import Schedule

log = logging.getLogger("factoryctl.schedules")

DEFAULT_INTERVAL_SECONDS = 5.0
MAX_PER_TICK = 500  # more due schedules than this are fired by the following ticks


async def fire_due(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    resolver: SkillResolver,
    *,
    limit: int = MAX_PER_TICK,
    queued: Callable[[], None] | None = None,
) -> list[Fired]:
    """One tick: fire every enabled schedule whose ``next_fire_at`` has come, oldest first.

    Returns what this replica fired (a fire another replica won is not in it); ``queued`` is called
    after each commit that queued a run.
    """
    now = clock.now()
    stmt = (
        select(*DUE_COLUMNS)
        .where(Schedule.enabled.is_(True), Schedule.next_fire_at <= now)
        .order_by(Schedule.next_fire_at, Schedule.uid)
        .limit(limit)
    )
    async with sessions() as session:
        due = [Due.of(row) for row in (await session.execute(stmt)).all() if row.next_fire_at]
    fired: list[Fired] = []
    for item in due:
        try:
            outcome = await fire(sessions, now, item, resolver=resolver)
        except Exception as exc:
            if store_unavailable(exc) is not None:
                raise  # the store is down: end the tick; the periodic job logs and retries it
            log.exception("schedule %s: firing failed; retried on the next tick", item.uid)
            continue
        if outcome is not None:
            fired.append(outcome)
            if outcome.run_id is not None and queued is not None:
                queued()
    return fired


def schedule_scheduler(interval_seconds: float = DEFAULT_INTERVAL_SECONDS) -> Lifecycle:
    """The scheduler as a ``cleanup_ctx`` lifecycle, ticking every ``interval_seconds``."""
    resolver: SkillResolver | None = None

    async def tick(app: web.Application) -> list[Fired]:
        nonlocal resolver
        if resolver is None:  # the runs routes install one; an app without them gets its own
            settings = app[SETTINGS]
            resolver = app.get(SKILLS) or SkillResolver.from_settings(settings)
        return await fire_due(app[SESSIONS], app[CLOCK], resolver, queued=lambda: runs_queued(app))

    return periodic("scheduler", interval_seconds, tick, log=log)
