"""The definition objects a claimed run uses: its runner and its skills (docs/workers.md, "Runners and
skills").

A run started from a v1alpha1 factory carries their *names* in its config (``runner``, ``skills``,
resolved from the agent and the automation, docs/agent-config.md). The claim answer carries their
contents, read from ``factory_objects`` of the run's factory *as they are now*, like its environment: a
change applied after the run was queued reaches it, and a runner or skill deleted since leaves an
``{name, error}`` entry, which ends the run FAILED (``runner_unavailable`` / ``skill_unavailable``) before
any worker receives it (:func:`api.claims.payload.complete_claim`).

A run request's ``skills`` are skill *specs* in the same key (:mod:`api.runs.skill_list`): the ones after the
first were resolved when the run was created and are stored on the run; the claim appends them, in order,
after the definition objects (docs/agent-config.md, "Skills").

The run's team secrets by name (``secrets``, and ``harness.auth.secret_name`` when ``harness.auth.source``
is ``managedSecret``) are the third definition-only key: :func:`run_secret_refs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.skill_list import EXTRA_SKILLS_KEY, is_spec, request_specs
from store.models import FactoryObject, Run

RUNNER_UNAVAILABLE = "runner_unavailable"
SKILL_UNAVAILABLE = "skill_unavailable"
MANAGED_SECRET = "managedSecret"  # noqa: S105 - the auth source's name, not a secret


def run_secret_refs(config: Mapping[str, Any]) -> list[str]:
    """The team secret names a run's config grants its harness: ``secrets`` and a managed harness auth."""
    names = [n for n in config.get("secrets") or [] if isinstance(n, str) and n]
    harness = config.get("harness")
    auth = harness.get("auth") if isinstance(harness, Mapping) else None
    if isinstance(auth, Mapping) and auth.get("source") == MANAGED_SECRET:
        secret = auth.get("secret_name")
        if isinstance(secret, str) and secret:
            names.append(secret)
    return list(dict.fromkeys(names))


async def definition_payload(session: AsyncSession, run: Run, config: Mapping[str, Any]) -> dict[str, Any]:
    """``runner`` and ``skills`` of the claim answer (only the keys the run's config names)."""
    runner = config.get("runner")
    runner = runner if isinstance(runner, str) and runner else None
    skills = [n for n in config.get("skills") or [] if isinstance(n, str) and n and not is_spec(n)]
    extras = listed_skills(run.agent_config or {})
    if runner is None and not skills:
        return {"skills": extras} if extras else {}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    if run.factory_uid:
        stmt = select(FactoryObject.kind, FactoryObject.name, FactoryObject.spec).where(
            FactoryObject.team_id == run.team_id,
            FactoryObject.factory_uid == run.factory_uid,
            FactoryObject.kind.in_(("runner", "skill")),
            FactoryObject.name.in_([*skills, *([runner] if runner else [])]),
        )
        found = {(k, n): dict(s or {}) for k, n, s in (await session.execute(stmt)).all()}
    out: dict[str, Any] = {}
    if runner is not None:
        spec = found.get(("runner", runner))
        out["runner"] = runner_json(runner, spec) if spec is not None else _missing("runner", runner, run)
    if skills or extras:
        out["skills"] = [
            skill_json(name, spec) if (spec := found.get(("skill", name))) is not None
            else _missing("skill", name, run)
            for name in skills
        ] + extras  # fmt: skip
    return out


def listed_skills(stored: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run request's skills after the first, as resolved at creation (:data:`EXTRA_SKILLS_KEY`); an
    entry for each listed spec that was not (never expected: the run then fails ``skill_unavailable``)."""
    specs = request_specs(stored)[1:]
    resolved = {s.get("name"): s for s in stored.get(EXTRA_SKILLS_KEY) or [] if isinstance(s, Mapping)}
    out: list[dict[str, Any]] = []
    for spec in specs:
        skill = resolved.get(spec)
        if skill is None:
            out.append({"name": spec, "error": f"skill {spec!r} was not resolved when the run was created"})
        else:
            out.append(skill_json(spec, skill))
    return out


def runner_json(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "setup_commands": [c for c in spec.get("setup_commands") or [] if isinstance(c, str)],
        "instance_shape": spec.get("instance_shape"),
        "platform": spec.get("platform"),
    }


def skill_json(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    skill_name = spec.get("skill_name") or name.rpartition("/")[2]
    return {
        "name": name,
        "skill_name": str(skill_name),
        "description": spec.get("description"),
        "body": str(spec.get("body") or ""),
        "front_matter": dict(spec.get("front_matter") or {}),
    }


def _missing(kind: str, name: str, run: Run) -> dict[str, Any]:
    where = "the run's factory" if run.factory_uid else "any factory: the run was not started by one"
    return {"name": name, "error": f"{kind} {name!r} does not exist in {where}"}


def definition_problem(run: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(message, error_code)`` when the claim names a runner or skill that no longer exists."""
    runner = run.get("runner")
    if isinstance(runner, Mapping) and runner.get("error"):
        return f"the run's runner is unavailable: {runner['error']}", RUNNER_UNAVAILABLE
    missing = [s["error"] for s in run.get("skills") or [] if isinstance(s, Mapping) and s.get("error")]
    if missing:
        return f"the run's skills are unavailable: {'; '.join(missing)}", SKILL_UNAVAILABLE
    return None
