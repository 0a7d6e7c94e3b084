"""The console's runs list, ``/console/runs`` (docs/console.md, "Runs at scale").

The team's runs, newest first, filtered like ``GET /agent/runs`` (the same parser,
:func:`api.runs.requests.parse_list_query`, and query, :func:`api.runs.records.list_runs`), in keyset
pages both ways (``cursor`` continues after a page; ``before`` goes back, reading the other way). A text
search or a second filter examines at most ``SCAN_LIMIT`` runs per page and its links continue from the
last run examined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiDict
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.console import run_list_live
from api.console.rendering import render
from api.console.security import signed_in
from api.console.sessions import ConsoleUser
from api.console.times import duration
from api.context import SESSIONS
from api.errors import ApiError
from api.http.pagination import (
    Cursor,
    InvalidCursor,
    decode_cursor,
    encode_cursor,
    fingerprint,
    timestamp_key,
)
from api.runs import records as runs
from api.runs.requests import parse_list_query
from store.clock import rfc3339
from store.models import Factory, Run
from store.rules.vocabulary import RUN_SOURCES, RUN_STATES

PAGE_SIZE: Final = 25
SCAN_LIMIT: Final = 5_000  # runs one page of a search (or of two filters) examines at most
FILTER_FIELDS: Final = (
    "state",
    "source",
    "q",
    "name",
    "factory_uid",
    "creator",
    "created_after",
    "created_before",
)


def _picked(query: MultiDict[str]) -> dict[str, Any]:
    """The filter form's values as given (for the form and for page links), empty fields dropped."""
    out: dict[str, Any] = {key: query.get(key, "").strip() for key in FILTER_FIELDS if key != "state"}
    out["state"] = [s for s in query.getall("state", []) if s]
    return {k: v for k, v in out.items() if v}


def _api_query(picked: dict[str, Any]) -> MultiDict[str]:
    """The API query string of the form's values (a browser's ``datetime-local`` is read as UTC)."""
    query: MultiDict[str] = MultiDict()
    for key, value in picked.items():
        for item in value if isinstance(value, list) else [value]:
            if key.startswith("created_") and len(item) in (16, 19) and "T" in item:
                item = item + (":00Z" if len(item) == 16 else "Z")
            query.add(key, item)
    return query


def _link(picked: dict[str, Any], **page: str) -> str:
    pairs = [(k, i) for k, v in picked.items() for i in (v if isinstance(v, list) else [v])]
    return "/console/runs?" + urlencode([*pairs, *page.items()])


def _position(run: Run) -> Cursor:
    return Cursor(value=timestamp_key(run.created_at), row_id=run.run_id)


@dataclass
class RunsPage:
    rows: list[Run]
    next_link: str | None
    prev_link: str | None
    error: str | None
    scan_stopped: bool = False  # the page ended after examining SCAN_LIMIT runs


async def _runs_page(
    request: web.Request, session: AsyncSession, user: ConsoleUser, picked: dict[str, Any]
) -> RunsPage:
    try:
        filters = parse_list_query(_api_query(picked)).filters
    except ApiError as exc:
        return RunsPage([], None, None, f"Filter not applied: {exc}")
    base = {"sort_by": "created_at", **filters.params()}
    newest, oldest = fingerprint({**base, "sort_order": "desc"}), fingerprint({**base, "sort_order": "asc"})
    error = None
    before = after = None
    try:
        if request.query.get("before"):
            before = decode_cursor(request.query["before"], oldest)
        elif request.query.get("cursor"):
            after = decode_cursor(request.query["cursor"], newest)
    except InvalidCursor:
        error = "That page link no longer fits these filters; showing the newest runs."
    # A page of a search or of two filters examines at most SCAN_LIMIT runs; the links continue from the
    # last run examined, which may lie beyond the last run shown (docs/console.md, "Runs at scale").
    next_at: Cursor | None
    prev_at: Cursor | None
    backwards = before is not None  # read back towards the newest, then show newest first
    page = await runs.list_runs(
        session,
        user.team_id,
        filters,
        runs.PageRequest(
            PAGE_SIZE, "created_at", "asc" if backwards else "desc", before if backwards else after
        ),
        scan_limit=SCAN_LIMIT,
    )
    if backwards:
        rows = list(reversed(page.runs))
        prev_at, next_at = page.next_position, _position(rows[-1]) if rows else before
    else:
        rows = page.runs
        next_at = page.next_position
        prev_at = (_position(rows[0]) if rows else after) if after is not None else None
    next_link = _link(picked, cursor=encode_cursor(next_at, newest)) if next_at else None
    prev_link = _link(picked, before=encode_cursor(prev_at, oldest)) if prev_at else None
    return RunsPage(rows, next_link, prev_link, error, page.scan_stopped)


async def runs_list(request: web.Request) -> web.StreamResponse:
    """``GET /console/runs``: the filter form and one page of runs, newest first."""
    user = await signed_in(request)
    picked = _picked(MultiDict(request.query))
    async with request.app[SESSIONS]() as session:
        page = await _runs_page(request, session, user, picked)
        factories = (
            await session.execute(
                select(Factory.uid, Factory.name)
                .where(Factory.team_id == user.team_id)
                .order_by(Factory.name)
            )
        ).all()
    names = {uid: name for uid, name in factories}
    return render(
        request,
        "runs.html",
        {
            "user": user,
            "nav": "runs",
            "runs": [
                {
                    "run_id": r.run_id,
                    "title": r.title,
                    "state": r.state,
                    "source": r.source,
                    "creator": r.creator_display_name or r.creator_uid,
                    "factory_uid": r.factory_uid,
                    "factory_name": names.get(r.factory_uid or "", r.factory_uid),
                    "created": r.created_at,
                    "updated": r.updated_at,
                    "duration": duration(r.started_at, r.finished_at),
                    "started": rfc3339(r.started_at),
                }
                for r in page.rows
            ],
            "form": {**{key: "" for key in FILTER_FIELDS}, "state": [], **picked},
            "states": RUN_STATES,
            "sources": RUN_SOURCES,
            "factories": factories,
            "next_link": page.next_link,
            "prev_link": page.prev_link,
            "error": page.error,
            "scan_stopped": page.scan_stopped,
            "scan_limit": SCAN_LIMIT,
            "filtered": bool(picked),
            # live on the newest page only: an older page would shift under the reader (docs/console.md,
            # "Live pages")
            "live": not (request.query.get("cursor") or request.query.get("before")),
        },
    )


# --- one run --------------------------------------------------------------------------------------


def setup(app: web.Application) -> None:
    """Register the runs list and its live feed."""
    app.router.add_get("/console/runs", runs_list)
    run_list_live.setup(app)
