"""``GET /api/v1/agent/environments``: the team's environments as the SDKs' ``CloudEnvironment``
(docs/api.md, "Environments for the SDKs").

The answer is a view of the ``environments`` rows (definitions-managed and API-managed alike) plus what the
team's runs say about each: runs name their environment in ``agent_config.environment_id`` (a name or a
uid, docs/agent-config.md "Environments"), so one windowed query over the team's runs finds, per
environment, the newest run (``last_task_created``), the newest start (``last_task_run_timestamp``) and
whether the newest *finished* run failed its setup (``setup_failed``). Secrets are never shown (the spec
holds only their names, and those are left out too), nor ``env`` values: ``CloudEnvironmentConfig`` has
no field for either.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

import safegit
from api.auth import require
from api.context import sessions
from api.errors import BadRequest
from api.runs.skills import SkillUnavailable, parse_repository
from store.clock import rfc3339
from store.models import Environment, Run

SORTS = ("last_updated", "name")
# The worker's error code for a failed environment setup (factoryctl.worker.errors.EnvironmentSetupFailed;
# docs/agent-config.md, "Environments"). The API cannot import the worker (docs/architecture.md), so the
# wire value is repeated here.
SETUP_FAILED = "environment_setup_failed"
_KEYS_PER_QUERY = 400  # environment names and uids per query (well under every driver's parameter limit)
_GITHUB = re.compile(
    r"^(?:(?:https?|ssh|git|git\+ssh|ssh\+git)://(?:[^@/]+@)?github\.com(?::\d+)?/"
    r"|(?:[^@/:]+@)?github\.com:)"
    r"(?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$",
    re.IGNORECASE,
)


def github_repository(url: str) -> tuple[str, str] | None:
    """``(owner, repo)`` of a GitHub repository URL (``https://github.com/o/r(.git)``,
    ``git@github.com:o/r.git``, ``ssh://git@github.com/o/r``); None for any other host or for a name the
    skill spec syntax refuses (docs/agent-config.md, "Skills")."""
    match = _GITHUB.match(url.strip())
    if match is None:
        return None
    try:
        return parse_repository(f"{match['owner']}/{match['repo']}")
    except SkillUnavailable:
        return None


def github_repos(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The GitHub repositories of an environment spec's ``repos``, in order, without repeats."""
    found: list[tuple[str, str]] = []
    for repo in spec.get("repos") or []:
        url = repo.get("url") if isinstance(repo, dict) else None
        parsed = github_repository(url) if isinstance(url, str) else None
        if parsed is not None and parsed not in found:
            found.append(parsed)
    return found


def _repos(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every repository (GitHub or not) with its ref and path: the ``repos`` extension of the config.
    Credentials in a URL (``https://user:token@host/...``) are replaced by ``***``."""
    out = []
    for repo in spec.get("repos") or []:
        if isinstance(repo, dict) and isinstance(repo.get("url"), str):
            out.append(
                {"url": safegit.display_url(repo["url"]), "ref": repo.get("ref"), "path": repo.get("path")}
            )
    return out


@dataclass(frozen=True)
class RunSummary:
    """What the runs of one environment say: the newest run, the newest start, the newest finished run."""

    newest: Mapping[str, Any] | None = None
    last_started: dt.datetime | None = None
    last_finished: Mapping[str, Any] | None = None

    def merged(self, other: RunSummary) -> RunSummary:
        """The summary of both (runs naming the environment by name and by uid)."""
        return RunSummary(
            _later(self.newest, other.newest, "created_at"),
            max((t for t in (self.last_started, other.last_started) if t is not None), default=None),
            _later(self.last_finished, other.last_finished, "finished_at"),
        )

    @property
    def setup_failed(self) -> bool:
        status = (self.last_finished or {}).get("status_message")
        return isinstance(status, dict) and status.get("error_code") == SETUP_FAILED


def _later(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    if a is None or b is None:
        return a or b
    return max(a, b, key=lambda row: (row[key], row["run_id"]))


async def run_summaries(session: AsyncSession, team_id: str, keys: Sequence[str]) -> dict[str, RunSummary]:
    """``environment_id`` value → :class:`RunSummary` of the team's runs using it, for every value in
    ``keys`` some run uses. One query per :data:`_KEYS_PER_QUERY` keys, whatever the number of runs: each
    run is ranked within its ``environment_id`` (newest created, newest finished) by window functions,
    which SQLite and PostgreSQL both have, and only the first of each ranking comes back."""
    env_key = Run.agent_config["environment_id"].as_string()
    out: dict[str, RunSummary] = {}
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = list(keys[start : start + _KEYS_PER_QUERY])
        ranked = (
            select(
                env_key.label("env_key"),
                Run.run_id,
                Run.title,
                Run.state,
                Run.created_at,
                Run.updated_at,
                Run.started_at,
                Run.finished_at,
                Run.status_message,
                func.row_number()
                .over(partition_by=env_key, order_by=(Run.created_at.desc(), Run.run_id.desc()))
                .label("newest_rank"),
                func.row_number()
                .over(
                    partition_by=env_key,
                    order_by=(Run.finished_at.is_(None), Run.finished_at.desc(), Run.run_id.desc()),
                )
                .label("finished_rank"),
                func.max(Run.started_at).over(partition_by=env_key).label("last_started"),
            )
            .where(Run.team_id == team_id, env_key.in_(chunk))
            .subquery()
        )
        stmt = select(ranked).where(or_(ranked.c.newest_rank == 1, ranked.c.finished_rank == 1))
        for mapping in (await session.execute(stmt)).mappings():
            row: dict[str, Any] = dict(mapping)
            found = out.get(row["env_key"], RunSummary())
            out[row["env_key"]] = found.merged(
                RunSummary(
                    newest=row if row["newest_rank"] == 1 else None,
                    last_started=row["last_started"],
                    last_finished=row
                    if row["finished_rank"] == 1 and row["finished_at"] is not None
                    else None,
                )
            )
    return out


async def team_environments(session: AsyncSession, team_id: str) -> list[Environment]:
    """Every environment of the team, by name."""
    stmt = select(Environment).where(Environment.team_id == team_id).order_by(Environment.name)
    return list((await session.execute(stmt)).scalars())


def summaries_by_environment(
    rows: Iterable[Environment], by_key: Mapping[str, RunSummary]
) -> dict[str, RunSummary]:
    """Environment uid → summary. A run's ``environment_id`` is a uid or a name; a uid wins, as when the run
    was created (:func:`api.runs.prepare.find_environment`)."""
    rows = list(rows)
    uids = {row.uid for row in rows}
    by_name = {row.name: row.uid for row in rows}
    out: dict[str, RunSummary] = {}
    for key, summary in by_key.items():
        uid = key if key in uids else by_name.get(key)
        if uid is not None:
            out[uid] = out.get(uid, RunSummary()).merged(summary)
    return out


def cloud_environment(row: Environment, summary: RunSummary) -> dict[str, Any]:
    """The SDKs' ``CloudEnvironment`` of one environment (docs/api.md, "Environments for the SDKs")."""
    spec = row.spec or {}
    description = spec.get("description")
    setup = [c for c in spec.get("setup") or [] if isinstance(c, str)]
    newest = summary.newest
    return {
        "uid": row.uid,
        "config": {
            "name": row.name,
            "description": description if isinstance(description, str) else None,
            "github_repos": [{"owner": o, "repo": r} for o, r in github_repos(spec)],
            "setup_commands": setup,
            "docker_image": None,
            "repos": _repos(spec),
        },
        "last_updated": rfc3339(row.updated_at),
        "setup_failed": summary.setup_failed,
        "last_task_created": None
        if newest is None
        else {
            "id": newest["run_id"],
            "title": newest["title"],
            "state": newest["state"],
            "created_at": rfc3339(newest["created_at"]),
            "updated_at": rfc3339(newest["updated_at"]),
            "started_at": rfc3339(newest["started_at"]),
        },
        "last_task_run_timestamp": rfc3339(summary.last_started),
        "scope": {"type": "Team", "uid": row.team_id},
    }


def _sort_key(sort_by: str) -> Any:
    if sort_by == "name":
        return lambda row: (row.name, row.uid)
    return lambda row: (-row.updated_at.timestamp(), row.name, row.uid)


async def list_environments(request: web.Request) -> web.Response:
    """``GET /agent/environments`` (member): every environment of the team, ``sort_by=last_updated``
    (default, newest first) or ``name``; one page, as the SDKs expect no ``page_info`` here."""
    who = await require(request, "member")
    sort_by = request.query.get("sort_by", "last_updated")
    if sort_by not in SORTS:
        raise BadRequest(f"sort_by must be one of {', '.join(SORTS)}, not {sort_by!r}")
    async with sessions(request)() as session:
        rows = await team_environments(session, who.team_id)
        keys = sorted({row.uid for row in rows} | {row.name for row in rows})
        summaries = summaries_by_environment(rows, await run_summaries(session, who.team_id, keys))
    rows.sort(key=_sort_key(sort_by))
    return web.json_response(
        {"environments": [cloud_environment(row, summaries.get(row.uid, RunSummary())) for row in rows]}
    )
