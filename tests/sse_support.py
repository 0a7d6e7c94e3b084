"""Reading the event streams in tests (docs/events.md, "Wire format"): an open aiohttp response frame by
frame, a run stream's events until it ends, and where the team stream stands now.

Importable as ``import sse_support`` (``tests/`` is on ``sys.path``, as for ``builders``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

TEAM_EVENTS = "/api/v1/agent/events"


async def frames(resp: Any) -> AsyncIterator[dict[str, str]]:
    """SSE frames as dicts (``id``, ``event``, ``data``, ``retry``), comments as ``{"comment": ...}``."""
    current: dict[str, str] = {}
    while raw := await resp.content.readline():
        line = raw.decode().rstrip("\n")
        if not line:
            if current:
                yield current
            current = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(": ")
            current[name] = value


async def collect(resp: Any, *, until: str | None = None) -> list[dict[str, Any]]:
    """A run stream's events (data decoded, checked against their frame) until it ends, or until a state
    event ``until`` arrives."""
    out: list[dict[str, Any]] = []
    async for frame in frames(resp):
        if "data" in frame:
            event = json.loads(frame["data"])
            assert frame["id"] == str(event["id"]) and frame["event"] == event["kind"]
            out.append(event)
            if until is not None and event["data"].get("state") == until:
                return out
    return out


def now_cursor(url: str, key: str) -> str:
    """The cursor of the team's newest event: what a live team stream starts from (its id-only first
    frame). ``url`` is the server's base URL."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("GET", url + TEAM_EVENTS, headers=headers, timeout=10) as resp:
        for line in resp.iter_lines():
            if line.startswith("id: "):
                return line.removeprefix("id: ")
    raise AssertionError("the stream sent no position")
