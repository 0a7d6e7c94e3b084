"""A terminal state's notification carries the run's artifacts (docs/notifications.md, "The message"), in the
run API's ``ArtifactItem`` shape; other states' messages have no ``artifacts``. SQLite and PostgreSQL."""

from __future__ import annotations

import json

from sqlalchemy import select

from api.notifications import fanout
from api.runs import records
from store import ids
from store.models import NotificationMessage, RunArtifact

from .conftest import Team, readable


async def fan_out_now(team: Team) -> int:
    await readable(team.sessions)
    async with team.sessions() as session, session.begin():
        return await fanout.fan_out(session, team.clock)


async def test_terminal_messages_carry_the_artifacts(team: Team) -> None:
    await team.endpoint("https://hooks.example.com/x")
    await fan_out_now(team)  # the cursor starts at the newest event
    run_id = await team.run()
    other = await team.run()
    async with team.sessions() as s, s.begin():
        s.add(
            RunArtifact(
                uid=ids.new_id(ids.ARTIFACT), run_id=run_id, artifact_type="PULL_REQUEST",
                created_at=team.clock.now(), url="https://github.com/acme/app/pull/3", branch="fix",
            )
        )  # fmt: skip
        s.add(
            RunArtifact(
                uid=ids.new_id(ids.ARTIFACT), run_id=run_id, artifact_type="FILE",
                created_at=team.clock.now(), filename="r.md", filepath="out/r.md", mime_type="text/markdown",
                size_bytes=2, data=b"hi",
            )
        )  # fmt: skip
    for run in (run_id, other):
        async with team.sessions() as s, s.begin():
            await records.cancel_run(s, team.clock, team.team_id, run)
    await fan_out_now(team)
    async with team.sessions() as s:
        rows = list(await s.scalars(select(NotificationMessage)))
    bodies = {(m.run_id, json.loads(m.payload)["data"]["state"]): json.loads(m.payload)["data"] for m in rows}
    ended = bodies[(run_id, "CANCELLED")]
    kinds = sorted(a["artifact_type"] for a in ended["artifacts"])
    assert kinds == ["FILE", "PULL_REQUEST"]
    [pr] = [a for a in ended["artifacts"] if a["artifact_type"] == "PULL_REQUEST"]
    assert pr["data"] == {"branch": "fix", "url": "https://github.com/acme/app/pull/3"}
    [file] = [a for a in ended["artifacts"] if a["artifact_type"] == "FILE"]
    assert file["data"]["filepath"] == "out/r.md" and file["data"]["size_bytes"] == 2
    assert bodies[(other, "CANCELLED")]["artifacts"] == []
    assert all("artifacts" not in body for (_, state), body in bodies.items() if state != "CANCELLED")
