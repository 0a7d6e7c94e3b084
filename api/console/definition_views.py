"""What a factory's page shows of its definition objects and v1alpha1 settings (docs/console.md, "Pages").

Agents, skills, runners, scorers and benchmark suites are ``factory_objects`` rows (docs/definitions.md):
one query reads them all, ordered by kind and name, and :func:`definition_views` shapes each kind's ``spec``
into the few values its table shows. Specs were written by the team, so every value stays plain data for
the template to escape; a spec missing a field (an older apply, an API-created factory) shows a dash rather
than failing the page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import Factory, FactoryObject
from store.rules.triggers import CONNECTED

KINDS = ("agent", "skill", "runner", "scorer", "benchmark")


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def agent_view(row: FactoryObject, skills: Mapping[str, int], worker_host: str | None) -> dict[str, Any]:
    spec = _map(row.spec)
    config = _map(spec.get("config"))
    harness = _map(config.get("harness"))
    return {
        "name": row.name,
        "agent_type": spec.get("agent_type") or "CUSTOM",
        "description": spec.get("description"),
        "harness": harness.get("type"),
        "model": harness.get("model_id") or config.get("model_id"),
        "runner": config.get("runner"),
        "worker_host": config.get("worker_host") or worker_host,
        "skills": len(_list(config.get("skills") or spec.get("skills"))) or skills.get(row.name, 0),
        "prompt": spec.get("prompt") or config.get("base_prompt") or "",
        "definition_path": row.definition_path,
    }


def skill_view(row: FactoryObject) -> dict[str, Any]:
    spec = _map(row.spec)
    return {
        "name": spec.get("skill_name") or row.name,
        "agent": spec.get("agent"),
        "description": spec.get("description"),
        "definition_path": row.definition_path,
    }


def runner_view(row: FactoryObject) -> dict[str, Any]:
    spec = _map(row.spec)
    shape = _map(spec.get("instance_shape"))
    platform = _map(spec.get("platform"))
    return {
        "name": row.name,
        "description": spec.get("description"),
        "setup_commands": [str(c) for c in _list(spec.get("setup_commands"))],
        "vcpus": shape.get("vcpus"),
        "memory_gb": shape.get("memory_gb"),
        "os": platform.get("os"),
        "arch": platform.get("arch"),
        "docker_image": platform.get("docker_image"),
        "mac_version": platform.get("mac_version"),
        "definition_path": row.definition_path,
    }


def scorer_view(row: FactoryObject) -> dict[str, Any]:
    spec = _map(row.spec)
    return {
        "name": spec.get("scorer_name") or row.name,
        "description": spec.get("description"),
        "agents": [str(a) for a in _list(spec.get("agents"))],
        "passing_score": spec.get("passing_score"),
        "sampling_rate": spec.get("sampling_rate"),
        "model": spec.get("model"),
        "labels": [_map(label) for label in _list(spec.get("labels"))],
        "definition_path": row.definition_path,
    }


def benchmark_view(row: FactoryObject) -> dict[str, Any]:
    spec = _map(row.spec)
    return {
        "name": spec.get("suite_name") or row.name,
        "description": spec.get("description"),
        "agent": spec.get("agent"),
        "tasks": len(_list(spec.get("tasks"))),
        "definition_path": row.definition_path,
    }


def definition_views(
    rows: Iterable[FactoryObject], worker_host: str | None
) -> dict[str, list[dict[str, Any]]]:
    """The rows of one factory as each kind's table rows (``agents``, ``skills``, ...), in name order."""
    by_kind: dict[str, list[FactoryObject]] = {kind: [] for kind in KINDS}
    for row in rows:
        by_kind.setdefault(row.kind, []).append(row)
    local: dict[str, int] = {}  # agent name -> its own skills, when a spec does not list them
    for row in by_kind["skill"]:
        agent = _map(row.spec).get("agent")
        if isinstance(agent, str):
            local[agent] = local.get(agent, 0) + 1
    return {
        "agents": [agent_view(r, local, worker_host) for r in by_kind["agent"]],
        "skills": [skill_view(r) for r in by_kind["skill"]],
        "runners": [runner_view(r) for r in by_kind["runner"]],
        "scorers": [scorer_view(r) for r in by_kind["scorer"]],
        "benchmarks": [benchmark_view(r) for r in by_kind["benchmark"]],
    }


def settings_view(factory: Factory) -> dict[str, Any]:
    """What the page shows of ``factory.yaml``: alias, repositories, agent defaults, integrations."""
    settings = _map(factory.settings)
    defaults = _map(settings.get("agentDefaults"))
    repos = [_map(r) for r in _list(factory.repositories)]
    return {
        "schema_version": settings.get("schemaVersion"),
        "alias": factory.alias,
        "repositories": [f"{r.get('owner', '')}/{r.get('name', '')}" for r in repos],
        "default_model": defaults.get("model"),
        "default_harness": _map(defaults.get("harness")).get("type"),
        "default_runner": defaults.get("runner"),
        "default_worker_host": defaults.get("workerHost"),
        "integrations": [
            {"type": str(kind), "connected": kind in CONNECTED}
            for kind in (_map(i).get("type", "") for i in _list(settings.get("integrations")))
        ],
    }


def trigger_views(triggers: Iterable[Any]) -> list[dict[str, Any]]:
    """An automation's triggers as ``provider · event``, marking providers factoryctl has no ingress for."""
    views = []
    for trigger in triggers:
        t = _map(trigger)
        provider = str(t.get("provider") or "webhook")
        views.append({"provider": provider, "event": t.get("event"), "connected": provider in CONNECTED})
    return views


async def load_definitions(session: AsyncSession, team_id: str, factory: Factory) -> dict[str, Any]:
    """One query for every definition object of ``factory``, scoped to the team like every console read."""
    rows = await session.scalars(
        select(FactoryObject)
        .where(FactoryObject.team_id == team_id, FactoryObject.factory_uid == factory.uid)
        .order_by(FactoryObject.kind, FactoryObject.name)
    )
    return {**definition_views(rows, factory.worker_host), "settings": settings_view(factory)}
