"""Checks and resolution a resolved AmbientAgentConfig needs from the store before a run is created.

:func:`finalize_config` is what makes every key mean something at creation time (docs/agent-config.md): the
skill is resolved (its body stored on the run under the private key :data:`SKILL_KEY`, its name
filling ``config.name`` when none was given), and so is each other skill of a ``skills`` list (stored under
:data:`api.runs.skill_list.EXTRA_SKILLS_KEY`), the environment must exist in the team, and every
``secret:NAME`` reference (in MCP ``env``/``headers`` values and in the environment's ``secrets``)
must name an existing, ``run``-scoped team secret (:func:`store.secrets.run_problem`: a webhook's secret
never reaches a run, whoever creates it; docs/management.md, "Team secrets"). MCP servers are expanded
against the environment (:func:`api.runs.mcp.expand`): a command, a refused URL or a reference to no server
of the environment is refused, and the referenced servers' secrets are checked too. Any failure is one
:class:`api.ValidationFailed` (422) listing each field, so a bad value never becomes a failed run.
Secret *values* are never read here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from api import ValidationFailed
from api.context import SETTINGS
from api.http.bodies import field_error
from api.runs import mcp
from api.runs.skill_list import EXTRA_SKILLS_KEY, extra_skill, request_specs, unique_names, with_primary
from api.runs.skills import ResolvedSkill, SkillResolver, SkillUnavailable, factory_repositories
from store import secrets as secret_store
from store.models import Environment, Factory

SKILL_KEY = "_skill"  # private: stripped from every API answer, read by the claim payload
SKILLS = web.AppKey("skill_resolver", SkillResolver)


def install_resolver(app: web.Application) -> SkillResolver:
    """Create the app's skill resolver from its settings (once, at setup)."""
    if SKILLS not in app:
        settings = app[SETTINGS]
        app[SKILLS] = SkillResolver.from_settings(settings)
    return app[SKILLS]


async def find_environment(session: AsyncSession, team_id: str, environment_id: str) -> Environment | None:
    """The team's environment with this uid or name."""
    stmt = select(Environment).where(
        Environment.team_id == team_id,
        or_(Environment.uid == environment_id, Environment.name == environment_id),
    )
    rows = list((await session.execute(stmt)).scalars())
    by_uid = [r for r in rows if r.uid == environment_id]
    return (by_uid or rows)[0] if rows else None


async def resolve_skill(
    session: AsyncSession, resolver: SkillResolver, team_id: str, spec: str
) -> ResolvedSkill:
    """Resolve ``spec`` for the team (its factory repositories win over the source template).

    Raises :class:`SkillUnavailable`. The git/file work runs in a thread; ``session`` is only read.
    """
    repos = await skill_repositories(session, team_id)
    return await asyncio.to_thread(resolver.resolve, spec, repos=repos)


async def skill_repositories(session: AsyncSession, team_id: str) -> dict[str, str]:
    """``owner/repo`` → location of the team's factory definition repositories."""
    stmt = select(Factory.source).where(Factory.team_id == team_id, Factory.source.is_not(None))
    sources = {str(i): str(v) for i, v in enumerate((await session.execute(stmt)).scalars()) if v}
    return factory_repositories(sources)


def with_skill(config: Mapping[str, Any], skill: ResolvedSkill) -> dict[str, Any]:
    """``config`` with the resolved skill stored (private key) and ``name`` filled when unset."""
    out = dict(config)
    out[SKILL_KEY] = {"name": skill.name, "body": skill.body}
    if not out.get("name"):
        out["name"] = skill.name
    return out


async def finalize_config(
    session: AsyncSession,
    resolver: SkillResolver,
    team_id: str,
    config: dict[str, Any],
    *,
    field: str = "config",
    skill_field: str | None = None,
) -> dict[str, Any]:
    """Resolve the skill(s) and check environment and secret references; raises ValidationFailed (422)."""
    out = with_primary(config)
    errors: list[dict[str, Any]] = []
    needed: list[tuple[str, str]] = []
    env_id = out.get("environment_id")
    environment = None
    if isinstance(env_id, str) and env_id:
        environment = await find_environment(session, team_id, env_id)
        if environment is None:
            errors.append(field_error(f"{field}.environment_id", f"unknown environment {env_id!r}"))
        else:
            names = (environment.spec or {}).get("secrets") or []
            needed += [(f"{field}.environment_id", str(n)) for n in names if isinstance(n, str)]
    if out.get("mcp_servers") and (environment is not None or not env_id):
        expanded = expand_servers(out, environment)
        errors += [field_error(f"{field}.mcp_servers.{where}", why) for where, why in expanded.problems]
        needed += [
            (f"{field}.{where}", name) for where, name in secret_store.mcp_secret_refs(expanded.servers)
        ]
    if needed:
        found = await secret_store.scopes(session, team_id, (name for _, name in needed))
        for where, name in needed:
            problem = secret_store.run_problem(name, found.get(name))
            if problem is not None:
                errors.append(field_error(where, problem))
    spec = out.get("skill_spec")
    listed = out.get("skills") if request_specs(out) else None
    if isinstance(spec, str) and spec and not errors:  # last: a run refused anyway clones nothing
        try:
            skill = await resolve_skill(session, resolver, team_id, spec)
        except SkillUnavailable as exc:
            where = f"{field}.skills[0]" if listed else skill_field or f"{field}.skill_spec"
            errors.append(field_error(where, str(exc)))
        else:
            out.update(with_skill(out, skill))
        if isinstance(listed, list) and len(listed) > 1:
            extras, problems = await resolve_extra_skills(
                session, resolver, team_id, listed, f"{field}.skills"
            )
            errors += problems
            out[EXTRA_SKILLS_KEY] = extras
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValidationFailed(f"{first['field']}: {first['message']}{more}", errors=errors)
    return out


async def resolve_extra_skills(
    session: AsyncSession, resolver: SkillResolver, team_id: str, listed: list[Any], where: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The skills of ``listed`` after the first (the primary) as the claim sends them, and a field error
    at ``where[i]`` for each that cannot be resolved (docs/agent-config.md, "Skills")."""
    repos = await skill_repositories(session, team_id)
    extras: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for i, spec in enumerate(listed[1:], start=1):
        try:
            skill = await asyncio.to_thread(resolver.resolve, str(spec), repos=repos)
        except SkillUnavailable as exc:
            errors.append(field_error(f"{where}[{i}]", str(exc)))
        else:
            extras.append(extra_skill(skill))
    return unique_names(extras), errors


def expand_servers(config: Mapping[str, Any], environment: Environment | None) -> mcp.Expanded:
    """The config's MCP servers as a worker writes them, from ``environment`` (the run's, as it is now)."""
    env_id = config.get("environment_id")
    name = (environment.name if environment is not None else str(env_id)) if env_id else None
    spec = (environment.spec or {}) if environment is not None else None
    return mcp.expand(config.get("mcp_servers"), name, spec)


def public_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config as the API shows it: private keys (resolved skill body) removed."""
    return {k: v for k, v in (config or {}).items() if not k.startswith("_")}
