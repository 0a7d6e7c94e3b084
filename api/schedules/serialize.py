"""Schedule rows as the wire's ``ScheduledAgentItem`` (docs/api.md, "Schedules").

The shape is the official SDK's (``id``, ``cron_schedule``, ``history.{last_ran,next_run}``, ``scope``,
``created_by``...) plus our extensions (``timezone``, ``managed_by``, ``factory_uid``,
``definition_path``, ``automation``). A schedule that names an automation (docs/schedules.md) stores no
prompt or config of its own: it shows what a fire would use now, the automation's prompt and resolved
configuration (:func:`api.runs.config.automation_config`, as ingress and a fire resolve it), so a reader
sees the run it will start. Those are loaded for a whole page in one query
(:func:`automation_views`), never one per schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.config import automation_config
from api.runs.prepare import public_config
from store.clock import rfc3339
from store.models import Automation, Factory, Schedule


@dataclass(frozen=True)
class AutomationView:
    """What a fire of an automation schedule would run: the automation's prompt and resolved config."""

    prompt: str
    agent_config: dict[str, Any]


AutomationKey = tuple[str, str]  # (factory_uid, automation name)


async def automation_views(
    session: AsyncSession, rows: Sequence[Schedule]
) -> dict[AutomationKey, AutomationView]:
    """The automations the ``automation`` schedules among ``rows`` name, by (factory, name): one query."""
    factories = sorted({r.factory_uid for r in rows if r.automation and r.factory_uid})
    if not factories:
        return {}
    stmt = (
        select(Automation, Factory.agents, Factory.worker_host)
        .join(Factory, Factory.uid == Automation.factory_uid)
        .where(Automation.factory_uid.in_(factories))
    )
    views: dict[AutomationKey, AutomationView] = {}
    for automation, agents, worker_host in (await session.execute(stmt)).all():
        config = automation_config(automation.config, automation.agent, agents, worker_host)
        views[(automation.factory_uid, automation.name)] = AutomationView(automation.prompt, config)
    return views


def schedule_item(row: Schedule, automations: Mapping[AutomationKey, AutomationView]) -> dict[str, Any]:
    """ScheduledAgentItem. An automation schedule whose automation is gone (removed from the factory's
    files) shows ``prompt: ""`` and ``agent_config: {}``: there is nothing a fire could run."""
    prompt, config = row.prompt or "", row.agent_config
    if row.automation:
        view = automations.get((row.factory_uid or "", row.automation))
        prompt, config = (view.prompt, view.agent_config) if view else ("", {})
    return {
        "id": row.uid,
        "name": row.name,
        "cron_schedule": row.cron,
        "timezone": row.timezone,
        "prompt": prompt,
        "enabled": row.enabled,
        "agent_config": public_config(config),
        "metadata": row.run_metadata or {},
        "history": {"last_ran": rfc3339(row.last_fired_at), "next_run": rfc3339(row.next_fire_at)},
        "last_spawn_error": row.last_spawn_error,
        "scope": {"type": "Team", "uid": row.team_id},
        "created_by": (
            {"type": "service_account", "uid": row.creator_uid, "display_name": row.creator_display_name}
            if row.creator_uid
            else None
        ),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
        "managed_by": row.managed_by,
        "factory_uid": row.factory_uid,
        "definition_path": row.definition_path,
        "automation": row.automation,
    }
