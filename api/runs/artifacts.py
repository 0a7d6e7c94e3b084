"""A run's artifacts as readers see them (docs/api.md, "Artifacts").

- :func:`artifacts_of`: the SDK's ``ArtifactItem`` list of each run of a page, one query for the page (the
  bytes are never read here);
- ``GET /api/v1/agent/runs/{id}/artifacts/{artifact_uid}``: a ``FILE`` artifact's bytes, to a member of
  the run's team, always as an attachment (``Content-Disposition: attachment``, ``nosniff``, a sandboxing
  CSP): the bytes are the agent's, untrusted, and never rendered by the browser as a page of this origin;
- ``GET /api/v1/agent/artifacts/{artifact_uid}``: the SDK's ``getArtifact`` answer for a ``FILE``
  artifact, whose ``download_url`` is the route above (it takes the same key; ``expires_at`` is when this
  answer stops being fresh, the URL itself does not expire).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import quote

from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import require
from api.context import CLOCK, SETTINGS, sessions
from api.http.paths import API_V1
from store import NotFound
from store.clock import rfc3339
from store.models import Run, RunArtifact

FILE: Final = "FILE"
PULL_REQUEST: Final = "PULL_REQUEST"
DEFAULT_REFERENCE_TYPE: Final = "link"
DOWNLOAD_FRESH: Final = dt.timedelta(hours=1)
_LISTED = (
    RunArtifact.uid,
    RunArtifact.run_id,
    RunArtifact.artifact_type,
    RunArtifact.created_at,
    RunArtifact.filename,
    RunArtifact.filepath,
    RunArtifact.mime_type,
    RunArtifact.size_bytes,
    RunArtifact.url,
    RunArtifact.branch,
    RunArtifact.reference_type,
    RunArtifact.title,
)


def artifact_item(row: Any) -> dict[str, Any]:
    """One ``ArtifactItem`` in the SDK's shape (only the keys it knows, so a strict client parses it)."""
    created = rfc3339(row.created_at)
    if row.artifact_type == FILE:
        data: dict[str, Any] = {
            "artifact_uid": row.uid,
            "filename": row.filename,
            "filepath": row.filepath,
            "mime_type": row.mime_type,
            "size_bytes": row.size_bytes,
        }
    elif row.artifact_type == PULL_REQUEST:
        data = {"branch": row.branch, "url": row.url}
    else:
        data = {"reference_type": row.reference_type or DEFAULT_REFERENCE_TYPE, "url": row.url}
        if row.title:
            data["title"] = row.title
    return {"artifact_type": row.artifact_type, "created_at": created, "data": data}


async def artifacts_of(session: AsyncSession, run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's artifacts, oldest first (then by uid), in one query; every id has an entry."""
    out: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
    if not out:
        return out
    stmt = (
        select(*_LISTED)
        .where(RunArtifact.run_id.in_(list(out)))
        .order_by(RunArtifact.run_id, RunArtifact.created_at, RunArtifact.uid)
    )
    for row in (await session.execute(stmt)).all():
        out[row.run_id].append(artifact_item(row))
    return out


async def file_artifact(session: AsyncSession, team_id: str, uid: str, run_id: str | None = None) -> Any:
    """A ``FILE`` artifact of a run of the team (with ``run_id``: of that run) and its bytes; NotFound
    otherwise, another team's included."""
    stmt = (
        select(*_LISTED, RunArtifact.data)
        .join(Run, Run.run_id == RunArtifact.run_id)
        .where(RunArtifact.uid == uid, RunArtifact.artifact_type == FILE, Run.team_id == team_id)
    )
    if run_id is not None:
        stmt = stmt.where(RunArtifact.run_id == run_id)
    row = (await session.execute(stmt)).first()
    if row is None:
        raise NotFound(f"artifact {uid} does not exist")
    return row


def download_path(run_id: str, uid: str) -> str:
    return f"{API_V1}/agent/runs/{quote(run_id, safe='')}/artifacts/{quote(uid, safe='')}"


def attachment_headers(row: Any) -> dict[str, str]:
    """Headers that keep an untrusted file a download: attachment, no sniffing, no script, no cache."""
    name = row.filename or "artifact"
    encoded = quote(name, safe="")
    ascii_name = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\;' else "_" for c in name)
    return {
        "Content-Type": row.mime_type or "application/octet-stream",
        "Content-Disposition": f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{encoded}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "Cache-Control": "private, no-store",
    }


def file_response(row: Any) -> web.Response:
    return web.Response(body=bytes(row.data or b""), headers=attachment_headers(row))


async def download(request: web.Request) -> web.Response:
    who = await require(request, "member")
    async with sessions(request)() as session:
        row = await file_artifact(
            session, who.team_id, request.match_info["artifact_uid"], request.match_info["run_id"]
        )
    return file_response(row)


async def get_artifact(request: web.Request) -> web.Response:
    """The SDK's ``AgentGetArtifactResponse`` for a ``FILE`` artifact (the only kind it can download)."""
    who = await require(request, "member")
    async with sessions(request)() as session:
        row = await file_artifact(session, who.team_id, request.match_info["artifact_uid"])
    base = request.app[SETTINGS].base_url.rstrip("/")
    return web.json_response(
        {
            "artifact_type": FILE,
            "artifact_uid": row.uid,
            "created_at": rfc3339(row.created_at),
            "data": {
                "content_type": row.mime_type,
                "download_url": base + download_path(row.run_id, row.uid),
                "expires_at": rfc3339(request.app[CLOCK].now() + DOWNLOAD_FRESH),
                "filename": row.filename,
                "filepath": row.filepath,
                "size_bytes": row.size_bytes,
            },
        }
    )


def setup(app: web.Application) -> None:
    app.router.add_get(API_V1 + "/agent/runs/{run_id}/artifacts/{artifact_uid}", download)
    app.router.add_get(API_V1 + "/agent/artifacts/{artifact_uid}", get_artifact)


__all__ = ["artifact_item", "artifacts_of", "attachment_headers", "download_path", "file_artifact", "setup"]
