"""``GET /api/v1/agent``: the skills available to the team as the SDKs' ``AgentSkill`` list
(docs/api.md, "Agents (skills)").

Skills are read by the run API's own machinery (:class:`api.runs.skills.SkillResolver`): the same
``--skills-source`` template, the same cached clones, the same confined SKILL.md reader; a factory's
definitions repository serves its ``owner/repo`` as it does for runs (docs/agent-config.md, "Skills").
Which repositories: ``?repo=owner/repo`` alone, or else the team's factory repositories and every GitHub
repository its environments clone, at most :data:`MAX_REPOSITORIES`. Every location is hostile
input: the git and file work runs in threads, through :mod:`safegit` and the resolver's checks only.

A variant's ``last_run_timestamp`` is the newest run whose ``config.name`` is the skill's name: runs keep
the resolved skill's name as their name unless the request named them otherwise, and they do not record
which repository a skill came from, so same-named skills share it (an approximation, documented).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import MultiMapping
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.agents.environments import github_repos, team_environments
from api.auth import require
from api.context import sessions
from api.errors import BadRequest, ResourceNotFound
from api.runs.prepare import SKILLS, skill_repositories
from api.runs.skills import MAX_LISTED_SKILLS, ListedSkill, SkillResolver, SkillUnavailable, parse_repository
from store.clock import rfc3339
from store.models import Environment, Run

log = logging.getLogger(__name__)

MAX_REPOSITORIES = 20  # repositories listed per request without ?repo= (docs/api.md, "Agents (skills)")
PARALLEL_CHECKOUTS = 4  # repositories checked out (cloned, fetched, read) at once
SORTS = ("name", "last_run")
_NAMES_PER_QUERY = 500
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


@dataclass(frozen=True)
class CatalogQuery:
    repo: tuple[str, str] | None
    sort_by: str
    include_malformed: bool
    refresh: bool


def parse_query(query: MultiMapping[str]) -> CatalogQuery:
    """The query parameters; anything unusable is a 400 (docs/api.md, "Errors")."""
    sort_by = query.get("sort_by", "name")
    if sort_by not in SORTS:
        raise BadRequest(f"sort_by must be one of {', '.join(SORTS)}, not {sort_by!r}")
    repo = None
    if "repo" in query:
        try:
            repo = parse_repository(query["repo"])
        except SkillUnavailable as exc:
            raise BadRequest(f"repo: {exc}") from None
    return CatalogQuery(
        repo, sort_by, _boolean(query, "include_malformed_skills"), _boolean(query, "refresh")
    )


def _boolean(query: MultiMapping[str], name: str) -> bool:
    value = query.get(name, "false").strip().lower()
    if value not in _BOOLEANS:
        raise BadRequest(f"{name} must be true or false, not {query[name]!r}")
    return _BOOLEANS[value]


@dataclass(frozen=True)
class Listing:
    """The skills of one repository (``owner/repo``)."""

    owner: str
    repo: str
    skills: Sequence[ListedSkill]


def candidate_repositories(
    environments: Iterable[Environment], factory_repos: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The team's factory repositories, then its environments' GitHub repositories (sorted); the same
    repository once (compared without case, as GitHub names are), at most :data:`MAX_REPOSITORIES`."""
    found: dict[str, tuple[str, str]] = {}
    for key in factory_repos:
        try:
            owner, repo = parse_repository(key)
        except SkillUnavailable:
            continue
        found.setdefault(key.lower(), (owner, repo))
    for owner, repo in sorted({r for row in environments for r in github_repos(row.spec or {})}):
        found.setdefault(f"{owner}/{repo}".lower(), (owner, repo))
    if len(found) > MAX_REPOSITORIES:
        log.warning(
            "listing skills: %d repositories, only the first %d are read", len(found), MAX_REPOSITORIES
        )
    return list(found.values())[:MAX_REPOSITORIES]


async def read_listings(
    resolver: SkillResolver,
    targets: Sequence[tuple[str, str]],
    factory_repos: Mapping[str, str],
    *,
    refresh: bool,
    strict: bool,
) -> list[Listing]:
    """The skills of each target, :data:`PARALLEL_CHECKOUTS` at a time, each in a thread. ``strict`` (one
    named repository): a repository that cannot be read is a 404; otherwise it is logged and left out."""
    gate = asyncio.Semaphore(PARALLEL_CHECKOUTS)

    async def one(owner: str, repo: str) -> Listing | None:
        async with gate:
            try:
                skills = await asyncio.to_thread(
                    resolver.list_repository,
                    owner,
                    repo,
                    repos=factory_repos,
                    refresh=refresh,
                    limit=MAX_LISTED_SKILLS,
                )
            except (SkillUnavailable, OSError) as exc:
                why = str(exc) if isinstance(exc, SkillUnavailable) else type(exc).__name__
                if strict:
                    raise ResourceNotFound(f"repository {owner}/{repo} cannot be listed: {why}") from None
                log.warning("listing skills: repository %s/%s left out: %s", owner, repo, why)
                return None
        return Listing(owner, repo, skills)

    found = await asyncio.gather(*(one(owner, repo) for owner, repo in targets))
    return [listing for listing in found if listing is not None]


async def last_runs(session: AsyncSession, team_id: str, names: Iterable[str]) -> dict[str, dt.datetime]:
    """Skill name → ``created_at`` of the team's newest run with that ``config_name``; one grouped query
    per :data:`_NAMES_PER_QUERY` names."""
    wanted = sorted(set(names))
    out: dict[str, dt.datetime] = {}
    for start in range(0, len(wanted), _NAMES_PER_QUERY):
        stmt = (
            select(Run.config_name, func.max(Run.created_at))
            .where(Run.team_id == team_id, Run.config_name.in_(wanted[start : start + _NAMES_PER_QUERY]))
            .group_by(Run.config_name)
        )
        for name, when in (await session.execute(stmt)).all():
            if name is not None and when is not None:
                out[name] = when
    return out


def agent_skills(
    listings: Iterable[Listing],
    environments: Iterable[Environment],
    runs: Mapping[str, dt.datetime],
    *,
    include_malformed: bool,
    sort_by: str,
) -> list[dict[str, Any]]:
    """``AgentSkill`` objects: variants grouped by skill name, variants by id, skills sorted."""
    linked: dict[str, list[dict[str, str]]] = {}
    for row in sorted(environments, key=lambda e: e.name):
        for owner, repo in github_repos(row.spec or {}):
            linked.setdefault(f"{owner}/{repo}".lower(), []).append({"name": row.name, "uid": row.uid})
    groups: dict[str, list[dict[str, Any]]] = {}
    newest: dict[str, dt.datetime] = {}
    for listing in listings:
        for found in listing.skills:
            if found.skill is None and not include_malformed:
                continue
            when = runs.get(found.name)
            variant: dict[str, Any] = {
                "id": f"{listing.owner}/{listing.repo}:{found.path}",
                "base_prompt": found.skill.body if found.skill else "",
                "description": (found.skill.description if found.skill else None) or "",
                "environments": linked.get(f"{listing.owner}/{listing.repo}".lower(), []),
                "source": {"owner": listing.owner, "name": listing.repo, "skill_path": found.path},
                "last_run_timestamp": rfc3339(when),
            }
            if found.error is not None:
                variant["error"] = found.error
            groups.setdefault(found.name, []).append(variant)
            if when is not None:
                newest[found.name] = when
    order = sorted(groups, key=lambda name: (name.casefold(), name))
    if sort_by == "last_run":
        never = dt.datetime.min.replace(tzinfo=dt.UTC)
        order.sort(key=lambda name: newest.get(name, never), reverse=True)  # stable: ties stay by name
    return [{"name": name, "variants": sorted(groups[name], key=lambda v: str(v["id"]))} for name in order]


async def list_agents(request: web.Request) -> web.Response:
    """``GET /agent`` (member): ``repo``, ``sort_by=name|last_run``, ``include_malformed_skills``,
    ``refresh`` as the SDKs send them (docs/api.md, "Agents (skills)")."""
    who = await require(request, "member")
    query = parse_query(request.query)
    async with sessions(request)() as session:
        factory_repos = await skill_repositories(session, who.team_id)
        environments = await team_environments(session, who.team_id)
    targets = [query.repo] if query.repo else candidate_repositories(environments, factory_repos)
    listings = await read_listings(
        request.app[SKILLS], targets, factory_repos, refresh=query.refresh, strict=query.repo is not None
    )
    names = {found.name for listing in listings for found in listing.skills}
    async with sessions(request)() as session:
        runs = await last_runs(session, who.team_id, names)
    agents = agent_skills(
        listings, environments, runs, include_malformed=query.include_malformed, sort_by=query.sort_by
    )
    return web.json_response({"agents": agents})
