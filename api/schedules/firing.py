"""One run for a schedule (:func:`start_run`) and one fire of a due schedule (:func:`fire`).

docs/schedules.md, "How schedules fire". A fire is one transaction whose first statement inserts the
fire row ``(schedule, fire time)`` with ``ON CONFLICT DO NOTHING``: the primary key decides which replica
fires, never a lock held in memory. On PostgreSQL a second inserter of the same key waits for the first
one's commit and then inserts nothing; on SQLite the insert makes the transaction a write from its first
statement, so it waits for the write lock instead of having to upgrade a stale read snapshot. Only the
replica whose row went in starts the run, in the same transaction, and moves the schedule on.

The fire time is the *latest* due time of the expression (catch-up: a schedule that missed many times
while no replica ran fires once, for the most recent one). A run that cannot start (its automation is
gone or disabled, its config no longer resolves) still writes the fire row, with the error, and moves the
schedule on: a broken schedule does not retry on every tick.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Row, Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.errors import ApiError, Conflict
from api.runs.config import automation_config, resolve_config
from api.runs.new_run import Creator, NewRun
from api.runs.prepare import finalize_config, resolve_skill
from api.runs.records import create_run
from api.runs.skills import SkillResolver, SkillUnavailable
from api.schedules.subscribers import start_subscribers
from store.clock import ManualClock, rfc3339
from store.models import Automation, Factory, Run, Schedule, ScheduleFire
from store.rules.cron import CronError, latest_fire, next_fire, parse, zone
from store.rules.vocabulary import RunSource

log = logging.getLogger("factoryctl.schedules")

SOURCE = RunSource.SCHEDULED_AGENT
_ERROR_MAX = 1000  # schedules.last_spawn_error and schedule_fires.error
_FIRES: Table = ScheduleFire.__table__  # type: ignore[assignment]
_JUST_BEFORE = dt.timedelta(microseconds=1)


def default_creator(schedule: Schedule) -> Creator:
    """Who a scheduled run is started by: the schedule itself, as a service account."""
    return Creator.for_definition("schedule", schedule.uid, schedule.name)


async def start_run(
    session: AsyncSession,
    now: dt.datetime,
    schedule: Schedule,
    *,
    resolver: SkillResolver,
    creator: Creator | None = None,
    fire_time: dt.datetime | None = None,
) -> Run:
    """Create one QUEUED run for ``schedule`` in the caller's transaction (docs/schedules.md, "Runs
    started by a schedule").

    An ``automation`` schedule runs that automation of its factory, with the prompt, title and config a
    webhook delivery would give it; a missing or disabled automation raises :class:`api.errors.Conflict`.
    A prompt schedule runs its prompt with its config, finalized like a run request's (skill, environment,
    secrets: raises :class:`api.errors.ValidationFailed`). ``fire_time`` is None for a manual "run now".
    """
    factory_uid = automation_id = agent = None
    if schedule.automation:
        automation, agents, worker_host = await _automation(session, schedule)
        prompt, title = automation.prompt, automation.title or automation.name
        config = automation_config(automation.config, automation.agent, agents, worker_host)
        factory_uid, automation_id, agent = automation.factory_uid, automation.uid, automation.agent
    else:
        # A definition's prompt schedule belongs to its factory like its automations do: its runs are
        # the factory's (runs list --factory, the console's filter; docs/schedules.md). API-made: none.
        factory_uid = schedule.factory_uid
        prompt, title = schedule.prompt or "", schedule.name
        config = resolve_config(schedule.agent_config, None, None, None)
        if not prompt.strip() and not config.get("skill_spec"):
            raise Conflict(f"schedule {schedule.name!r} has neither a prompt nor a skill to run")
        config = await finalize_config(session, resolver, schedule.team_id, config, field="agent_config")
    snapshot = _snapshot(schedule, fire_time)
    new = NewRun(
        team_id=schedule.team_id,
        prompt=prompt,
        title=title,
        agent_config=config,
        source=SOURCE,
        creator=creator or default_creator(schedule),
        metadata=dict(schedule.run_metadata or {}),
        factory_uid=factory_uid,
        automation_id=automation_id,
        agent=agent,
        schedule_id=schedule.uid,
        schedule=snapshot,
    )
    # the run is created at the caller's ``now`` (a fire's, or the request's)
    return await create_run(session, ManualClock(now), new)


def _snapshot(schedule: Schedule, fire_time: dt.datetime | None) -> dict[str, Any]:
    """What a scheduled run records of its schedule (docs/schedules.md, "Runs started by a schedule")."""
    return {
        "schedule_id": schedule.uid,
        "schedule_name": schedule.name,
        "cron_schedule": schedule.cron,
        "fire_time": rfc3339(fire_time),  # stored for audit; the wire shows the first three
    }


async def _automation(
    session: AsyncSession, schedule: Schedule
) -> tuple[Automation, dict[str, Any], str | None]:
    """The schedule's automation with its factory's agents and worker host; Conflict when it cannot run."""
    where = f"schedule {schedule.name!r}: automation {schedule.automation!r}"
    if schedule.factory_uid is None:
        raise Conflict(f"{where} cannot run: the schedule belongs to no factory")
    stmt = (
        select(Automation, Factory.agents, Factory.worker_host)
        .join(Factory, Factory.uid == Automation.factory_uid)
        .where(
            Automation.factory_uid == schedule.factory_uid,
            Automation.name == schedule.automation,
            Automation.team_id == schedule.team_id,
        )
    )
    row = (await session.execute(stmt)).first()
    if row is None:
        raise Conflict(f"{where} does not exist in its factory")
    automation, agents, worker_host = row
    if not automation.enabled:
        raise Conflict(f"{where} is disabled")
    return automation, agents, worker_host


@dataclass(frozen=True, slots=True)
class Due:
    """A due schedule as the fire pass read it; a fire happens only while the row still says this."""

    uid: str
    cron: str
    timezone: str
    next_fire_at: dt.datetime
    team_id: str
    skill_spec: str | None  # a prompt schedule's skill, fetched before the fire (:func:`_warm_skill`)

    @classmethod
    def of(cls, row: Row[Any]) -> Due:
        """A row of :data:`DUE_COLUMNS`; the skill is kept for prompt schedules only."""
        spec = None if row.automation else (row.agent_config or {}).get("skill_spec")
        skill = spec if isinstance(spec, str) and spec else None
        return cls(row.uid, row.cron, row.timezone, row.next_fire_at, row.team_id, skill)


DUE_COLUMNS = (
    Schedule.uid,
    Schedule.cron,
    Schedule.timezone,
    Schedule.next_fire_at,
    Schedule.team_id,
    Schedule.automation,
    Schedule.agent_config,
)


@dataclass(frozen=True, slots=True)
class Fired:
    """What one fire did: the run it queued, or why it queued none."""

    schedule_uid: str
    fire_time: dt.datetime
    run_id: str | None
    error: str | None


class _Changed(Exception):
    """The schedule changed after it was read: roll the fire back; the next tick sees the new state."""


async def fire(
    sessions: async_sessionmaker[AsyncSession], now: dt.datetime, due: Due, *, resolver: SkillResolver
) -> Fired | None:
    """Fire ``due`` for its latest due time in one transaction; None when this replica fired nothing
    (another replica won the fire row, or the schedule changed or was not due after all)."""
    try:
        cron, tz = parse(due.cron), zone(due.timezone)
    except CronError as exc:  # writers validate; a row that still fails is stopped, not retried
        async with sessions() as session, session.begin():
            await _move_on(session, due, None, error=f"invalid schedule: {exc}")
        log.error("schedule %s: %s; it no longer fires", due.uid, exc)
        return None
    fire_time = latest_fire(cron, tz, now, after=due.next_fire_at - _JUST_BEFORE)
    next_at = next_fire(cron, tz, now)
    await _warm_skill(sessions, due, resolver)
    try:
        async with sessions() as session, session.begin():
            if fire_time is None or not await _insert_fire(session, due.uid, fire_time, now):
                # Not due after all (next_fire_at is no fire time of the expression), or this fire is
                # another replica's: only make sure next_fire_at moves on (a no-op when it already has).
                await _move_on(session, due, next_at)
                if fire_time is not None:
                    log.debug("schedule %s: the fire at %s is another replica's", due.uid, rfc3339(fire_time))
                return None
            schedule = await _locked(session, due)
            run_id = error = None
            own: str | None = None
            try:
                run = await start_run(session, now, schedule, resolver=resolver, fire_time=fire_time)
                run_id, own = run.run_id, run.automation_id
            except ApiError as exc:
                error = exc.detail[:_ERROR_MAX]
            watchers = await start_subscribers(
                session, now, schedule, _snapshot(schedule, fire_time), skip_automation=own
            )
            if watchers:
                log.info("schedule %s: %d watching automation(s) started", due.uid, len(watchers))
            await session.execute(
                update(ScheduleFire)
                .where(ScheduleFire.schedule_uid == due.uid, ScheduleFire.fire_time == fire_time)
                .values(run_id=run_id, error=error)
            )
            schedule.last_fired_at = fire_time
            schedule.last_spawn_error = error
            schedule.next_fire_at = next_at
    except _Changed:
        return None
    if error is not None:
        log.warning("schedule %s: the fire at %s started no run: %s", due.uid, rfc3339(fire_time), error)
    else:
        log.info("schedule %s: fired for %s: run %s", due.uid, rfc3339(fire_time), run_id)
    return Fired(due.uid, fire_time, run_id, error)


async def _warm_skill(sessions: async_sessionmaker[AsyncSession], due: Due, resolver: SkillResolver) -> None:
    """Fetch a prompt schedule's skill before the fire transaction, so git never runs while the fire
    holds its locks (on SQLite, the database's one write lock); the fire then reads the fresh checkout.
    A skill that cannot be fetched is reported by the fire itself. No skill: no session, no query."""
    if due.skill_spec is None:
        return
    async with sessions() as session:
        with contextlib.suppress(SkillUnavailable):
            await resolve_skill(session, resolver, due.team_id, due.skill_spec)


def _unchanged(due: Due) -> tuple[ColumnElement[bool], ...]:
    return (
        Schedule.uid == due.uid,
        Schedule.enabled.is_(True),
        Schedule.next_fire_at == due.next_fire_at,
        Schedule.cron == due.cron,
        Schedule.timezone == due.timezone,
    )


def _fire_statement(dialect: str) -> Any:
    insert_ = sqlite.insert if dialect == "sqlite" else postgresql.insert
    return (
        insert_(_FIRES)
        .on_conflict_do_nothing(index_elements=[_FIRES.c.schedule_uid, _FIRES.c.fire_time])
        .returning(_FIRES.c.schedule_uid)
    )


_INSERT_FIRE = {dialect: _fire_statement(dialect) for dialect in ("sqlite", "postgresql")}


async def _insert_fire(session: AsyncSession, uid: str, fire_time: dt.datetime, now: dt.datetime) -> bool:
    """Insert the fire row; True when this transaction's row went in (it is this replica's fire)."""
    statement = _INSERT_FIRE[session.get_bind().dialect.name]
    values = {"schedule_uid": uid, "fire_time": fire_time, "created_at": now, "run_id": None, "error": None}
    return (await session.execute(statement, [values])).first() is not None


async def _locked(session: AsyncSession, due: Due) -> Schedule:
    """The schedule row, still as ``due`` read it, locked until the commit; raises :class:`_Changed`.

    SQLite: the fire insert already holds the database's write lock. PostgreSQL: ``FOR NO KEY UPDATE``
    waits for an edit in flight and does not conflict with the key-share locks of other fire inserts.
    """
    stmt = select(Schedule).where(*_unchanged(due)).execution_options(populate_existing=True)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(key_share=True)
    schedule = (await session.execute(stmt)).scalar_one_or_none()
    if schedule is None:
        raise _Changed
    return schedule


async def _move_on(
    session: AsyncSession, due: Due, next_at: dt.datetime | None, *, error: str | None = None
) -> None:
    """Set next_fire_at (and the spawn error, if any) unless the row changed since ``due`` was read."""
    values: dict[str, Any] = {"next_fire_at": next_at}
    if error is not None:
        values["last_spawn_error"] = error[:_ERROR_MAX]
    await session.execute(
        update(Schedule).where(*_unchanged(due)).values(**values).execution_options(synchronize_session=False)
    )
