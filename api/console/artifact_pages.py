"""The run page's artifacts (docs/console.md, "Run page"): what it shows, and the file downloads.

A declared link is shown as a link only when its URL is ``http(s)`` with a host (checked again here,
whatever the store holds), opening with ``rel="noopener noreferrer"``; anything else is shown as text.
A file downloads from ``/console/runs/{run_id}/artifacts/{artifact_uid}`` for a signed-in member of the
run's team, with the API download's headers: always an attachment, never rendered (the bytes are the
agent's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from api.claims.artifacts import valid_url
from api.console.rendering import missing, or_404
from api.console.security import signed_in
from api.context import SESSIONS
from api.runs.artifacts import file_artifact, file_response


def artifact_views(run_id: str, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each ``ArtifactItem`` as the template reads it: ``kind``, ``label``, ``detail`` and ``href`` (None:
    not a link)."""
    views = []
    for item in items:
        data, kind = dict(item.get("data") or {}), str(item.get("artifact_type"))
        if kind == "FILE":
            uid = quote(str(data["artifact_uid"]), safe="")
            href = f"/console/runs/{quote(run_id, safe='')}/artifacts/{uid}"
            detail = f"{data.get('mime_type')} · {data.get('size_bytes')} bytes"
            views.append({"kind": kind, "label": data.get("filepath"), "detail": detail, "href": href})
            continue
        url = data.get("url")
        label = data.get("title") or url
        extra = data.get("branch") if kind == "PULL_REQUEST" else data.get("reference_type")
        views.append({"kind": kind, "label": label, "detail": extra, "href": url if valid_url(url) else None})
    return views


async def download(request: web.Request) -> web.Response:
    """``GET /console/runs/{run_id}/artifacts/{artifact_uid}``: the file, as an attachment."""
    user = await signed_in(request)
    uid = request.match_info["artifact_uid"]
    async with request.app[SESSIONS]() as session:
        with or_404(missing(f"artifact {uid}")):
            row = await file_artifact(session, user.team_id, uid, request.match_info["run_id"])
    return file_response(row)


def setup(app: web.Application) -> None:
    app.router.add_get("/console/runs/{run_id}/artifacts/{artifact_uid}", download)
