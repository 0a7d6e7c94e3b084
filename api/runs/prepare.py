"""Checks and resolution a resolved AmbientAgentConfig needs from the store before a run is created.

:func:`finalize_config` is what makes every key mean something at creation time (docs/agent-config.md): the
skill is resolved (its body stored on the run under the private key :data:`SKILL_KEY`, its name
filling ``config.name`` when none was given), the environment must exist in the team, and every
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
    """Resolve the skill and check environment and secret references; raises ValidationFailed (422)."""
    out = dict(config)
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
    if isinstance(spec, str) and spec and not errors:  # last: a run refused anyway clones nothing
        try:
            skill = await resolve_skill(session, resolver, team_id, spec)
        except SkillUnavailable as exc:
            errors.append(field_error(skill_field or f"{field}.skill_spec", str(exc)))
        else:
            out.update(with_skill(out, skill))
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValidationFailed(f"{first['field']}: {first['message']}{more}", errors=errors)
    return out


def expand_servers(config: Mapping[str, Any], environment: Environment | None) -> mcp.Expanded:
    """The config's MCP servers as a worker writes them, from ``environment`` (the run's, as it is now)."""
    env_id = config.get("environment_id")
    name = (environment.name if environment is not None else str(env_id)) if env_id else None
    spec = (environment.spec or {}) if environment is not None else None
    return mcp.expand(config.get("mcp_servers"), name, spec)


def public_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config as the API shows it: private keys (resolved skill body) removed."""
    return {k: v for k, v in (config or {}).items() if not k.startswith("_")}
