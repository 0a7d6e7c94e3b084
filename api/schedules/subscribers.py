"""Automations that watch a schedule: ``schedule``/``cron_fired`` triggers with ``filter.schedule_ids``
(docs/definitions.md, "Triggers"). Each enabled automation of the schedule's team whose trigger names the
firing schedule's UID gets one run per fire, in the fire's transaction, so the fire row's primary key
makes these runs happen once too (docs/schedules.md, "How schedules fire").

The schedule's own automation (``automation:`` of a ``schedules/`` file, or an inline schedule's) already
runs for the fire; it is not started twice when it also names the schedule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.config import automation_config
from api.runs.new_run import Creator, NewRun
from api.runs.records import create_run
from store.clock import ManualClock
from store.models import Automation, Factory, Run, Schedule
from store.rules.vocabulary import RunSource


def watches(triggers: Any, schedule_uid: str) -> bool:
    """Whether any trigger is a ``schedule``/``cron_fired`` one whose ``schedule_ids`` include the UID."""
    for trigger in triggers if isinstance(triggers, list) else ():
        if not isinstance(trigger, Mapping) or (trigger.get("provider"), trigger.get("event")) != (
            "schedule",
            "cron_fired",
        ):
            continue
        ids = ((trigger.get("filter") or {}).get("schedule_ids") or {}).get("in") or ()
        if schedule_uid in ids:
            return True
    return False


async def start_subscribers(
    session: AsyncSession,
    now: dt.datetime,
    schedule: Schedule,
    snapshot: Mapping[str, Any],
    *,
    skip_automation: str | None,
) -> list[Run]:
    """One run for each automation that watches ``schedule``, in the caller's transaction."""
    stmt = (
        select(Automation, Factory.agents, Factory.worker_host)
        .join(Factory, Factory.uid == Automation.factory_uid)
        .where(
            Automation.team_id == schedule.team_id,
            Automation.enabled.is_(True),
            cast(Automation.triggers, Text).contains(schedule.uid),  # the index-free prefilter; then exact
        )
        .order_by(Automation.uid)
    )
    runs = []
    creator = Creator.for_definition("schedule", schedule.uid, schedule.name)
    for automation, agents, worker_host in await session.execute(stmt):
        if automation.uid == skip_automation or not watches(automation.triggers, schedule.uid):
            continue
        new = NewRun(
            team_id=schedule.team_id,
            prompt=automation.prompt,
            title=automation.title or automation.name,
            agent_config=automation_config(automation.config, automation.agent, agents, worker_host),
            source=RunSource.SCHEDULED_AGENT,
            creator=creator,
            factory_uid=automation.factory_uid,
            automation_id=automation.uid,
            agent=automation.agent,
            schedule_id=schedule.uid,
            schedule=dict(snapshot),
        )
        runs.append(await create_run(session, ManualClock(now), new))
    return runs
