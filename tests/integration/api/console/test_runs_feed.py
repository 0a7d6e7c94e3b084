"""The runs list's live feed, ``GET /console/runs/events`` (docs/console.md, "Live pages"), on SQLite and
PostgreSQL: a signed-in session gets its team's run state changes (run, state, time) after an id-only
frame with its starting position, never another team's; signed out it is sent to sign in."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient
from sse_support import frames

from .support import sign_in


async def new_run(client: TestClient[Any, Any], key: str, prompt: str) -> str:
    resp = await client.post(
        "/api/v1/agent/run",
        json={"prompt": prompt, "config": {"worker_host": "nowhere"}},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert resp.status == 200, await resp.text()
    return str((await resp.json())["run_id"])


async def test_the_feed_sends_the_teams_state_changes_only(
    client: TestClient[Any, Any], member_key: str, admin_key: str, make_key: Any
) -> None:
    signed_out = await client.get("/console/runs/events", allow_redirects=False)
    assert signed_out.status == 303 and signed_out.headers["Location"].startswith("/console/login")

    foreign_key = await make_key("admin", team="another-team")
    assert (await sign_in(client, member_key)).status == 303
    async with client.get("/console/runs/events") as feed:
        assert feed.status == 200 and feed.content_type == "text/event-stream"
        received = frames(feed)
        async with asyncio.timeout(10):
            first = await anext(received)
            while "retry" in first:  # the reconnect hint comes first
                first = await anext(received)
            assert set(first) == {"id"}  # where the stream starts: an id only
            theirs = await new_run(client, foreign_key, "not ours")
            ours = await new_run(client, admin_key, "ours")
            await client.post(
                f"/api/v1/agent/runs/{ours}/cancel", headers={"Authorization": f"Bearer {admin_key}"}
            )
            seen: list[tuple[str, str]] = []
            async for frame in received:
                if frame.get("event") != "state":
                    continue
                event = json.loads(frame["data"])
                assert set(event) == {"run_id", "state", "created_at"}
                seen.append((event["run_id"], event["state"]))
                if event["state"] == "CANCELLED":
                    break
    assert seen == [(ours, "QUEUED"), (ours, "CANCELLED")], seen
    assert theirs not in {run for run, _ in seen}
