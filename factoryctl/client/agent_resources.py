"""The SDK's ``/agent`` surfaces besides runs: scheduled agents, environments and agents (skills).

``client.schedules`` manages ``/agent/schedules`` (docs/api.md, "Schedules"); ``client.agents`` lists
what a run can use: ``list()`` the agents (skills) and ``list_environments()`` the environments in the
SDK's ``CloudEnvironment`` shape. That listing sits on ``agents`` rather than on an ``environments``
resource because ``/api/v1/environments`` is a different API (management of environment definitions,
docs/management.md) that a client resource of that name would serve.

Retries: pause, resume and update send absolute values (repeating one is harmless), so they are retried
as idempotent; create and "run now" start something and delete of a deleted schedule answers 404, so
those are not repeated after an ambiguous failure (docs/client.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    parse_list_of,
    parse_model,
    parse_nothing,
)
from factoryctl.client._transport import RequestSpec, path, query
from factoryctl.client.models import AgentSkill, CloudEnvironment, RunCreated, ScheduledAgent

_SCHEDULES = f"{V1}/agent/schedules"
_SCHEDULE = _SCHEDULES + "/{}"


def list_schedules() -> RequestSpec[list[ScheduledAgent]]:
    """Every schedule of the team, definition-managed and API-created (the API does not page them)."""
    return RequestSpec("GET", _SCHEDULES, parse_list_of("schedules", ScheduledAgent))


def get_schedule(schedule_id: str) -> RequestSpec[ScheduledAgent]:
    return RequestSpec("GET", path(_SCHEDULE, schedule_id), parse_model(ScheduledAgent))


def create_schedule(
    name: str,
    cron_schedule: str,
    *,
    prompt: str | None = None,
    agent_config: Mapping[str, Any] | None = None,
    enabled: bool | None = None,
    metadata: Mapping[str, str] | None = None,
    timezone: str | None = None,
) -> RequestSpec[ScheduledAgent]:
    """Create an API-managed schedule; ``timezone`` is an IANA name (the server's default: UTC)."""
    body = json_body(
        name=name,
        cron_schedule=cron_schedule,
        prompt=prompt,
        agent_config=dict(agent_config) if agent_config is not None else None,
        enabled=enabled,
        metadata=dict(metadata) if metadata is not None else None,
        timezone=timezone,
    )
    return RequestSpec("POST", _SCHEDULES, parse_model(ScheduledAgent), json=body)


def update_schedule(
    schedule_id: str,
    *,
    name: str,
    cron_schedule: str,
    enabled: bool,
    prompt: str | None = None,
    agent_config: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    timezone: str | None = None,
) -> RequestSpec[ScheduledAgent]:
    """PUT: ``name``, ``cron_schedule`` and ``enabled`` are replaced, the others only when given (None
    keeps the stored value). A definition-managed schedule answers 409 (ConflictError) naming its file."""
    body = json_body(
        name=name,
        cron_schedule=cron_schedule,
        enabled=enabled,
        prompt=prompt,
        agent_config=dict(agent_config) if agent_config is not None else None,
        metadata=dict(metadata) if metadata is not None else None,
        timezone=timezone,
    )
    return RequestSpec(
        "PUT", path(_SCHEDULE, schedule_id), parse_model(ScheduledAgent), json=body, idempotent=True
    )


def delete_schedule(schedule_id: str) -> RequestSpec[None]:
    """Delete an API-managed schedule (the answer's ``{"success": true}`` is not kept)."""
    return RequestSpec("DELETE", path(_SCHEDULE, schedule_id), parse_nothing)


def pause_schedule(schedule_id: str) -> RequestSpec[ScheduledAgent]:
    """Stop firing (``enabled: false``) until resumed; answers the schedule."""
    return RequestSpec(
        "POST", path(_SCHEDULE + "/pause", schedule_id), parse_model(ScheduledAgent), idempotent=True
    )


def resume_schedule(schedule_id: str) -> RequestSpec[ScheduledAgent]:
    """Fire again from now on (missed times do not fire); answers the schedule with its next run."""
    return RequestSpec(
        "POST", path(_SCHEDULE + "/resume", schedule_id), parse_model(ScheduledAgent), idempotent=True
    )


def run_schedule_now(schedule_id: str) -> RequestSpec[RunCreated]:
    """Start the run a fire would start, now (definition-managed schedules too); the next fire time
    does not move. Answers the queued run, like run creation."""
    return RequestSpec("POST", path(_SCHEDULE + "/run", schedule_id), parse_model(RunCreated))


class Schedules(Resource[Mode]):
    list = endpoint(list_schedules)
    get = endpoint(get_schedule)
    create = endpoint(create_schedule)
    update = endpoint(update_schedule)
    delete = endpoint(delete_schedule)
    pause = endpoint(pause_schedule)
    resume = endpoint(resume_schedule)
    run_now = endpoint(run_schedule_now)


def list_agents(
    *,
    repo: str | None = None,
    sort_by: str | None = None,
    include_malformed_skills: bool | None = None,
    refresh: bool | None = None,
) -> RequestSpec[list[AgentSkill]]:
    """The agents (skills) runs can use (``GET /agent``): ``repo`` is ``owner/repo``, ``sort_by``
    ``name`` or ``last_run``; ``include_malformed_skills`` adds variants with an ``error``."""
    params = query(
        repo=repo, sort_by=sort_by, include_malformed_skills=include_malformed_skills, refresh=refresh
    )
    return RequestSpec("GET", f"{V1}/agent", parse_list_of("agents", AgentSkill), params=params)


def list_environments(*, sort_by: str | None = None) -> RequestSpec[list[CloudEnvironment]]:
    """The team's environments in the SDK's shape (``GET /agent/environments``); ``sort_by``
    ``last_updated`` (the server's default, newest first) or ``name``."""
    return RequestSpec(
        "GET",
        f"{V1}/agent/environments",
        parse_list_of("environments", CloudEnvironment),
        params=query(sort_by=sort_by),
    )


class Agents(Resource[Mode]):
    list = endpoint(list_agents)
    list_environments = endpoint(list_environments)
