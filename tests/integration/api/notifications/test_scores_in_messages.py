"""A scorer's judgement reaches notification subscribers as a ``run.scored`` message (docs/notifications.md,
"Scores"), SQLite and PostgreSQL: a real run is judged by a real judge run (service-hosted echo workers, the
scorers' turn called directly), and the real sender delivers the judgement to a real receiver on 127.0.0.1,
where the official ``standardwebhooks`` library verifies its signature. An endpoint that is not told the
run's outcome is not told its judgement either."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import builders
import pytest
import standardwebhooks
from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import create_app
from api.context import ServerSettings
from api.notifications import fanout
from api.notifications.sender import Sender
from api.runs.claim_signal import wake_claimers
from api.scorers.judging import Turn, judge_tick
from factoryctl.serve.local_workers import service_workers
from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import FactoryObject, NotificationCursor, NotificationMessage, Run, RunEvent

from .conftest import MakeSender, Receiver, Team

NEWEST = (RunEvent.txid.desc(), RunEvent.id.desc())
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}
SCORER = {
    "scorer_name": "always",
    "agents": ["coder"],
    "labels": [{"value": "good", "score": 1}, {"value": "bad", "score": 0}],
    "passing_score": 0.5,
    "sampling_rate": 100,
    "model": None,
    "rubric": "LABEL: good\nDid the coder do it?",  # the echo judge answers its prompt's first line
}


@pytest.fixture
def app(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> web.Application:
    workers = service_workers(1, "echo", None, tmp_path / "ws", heartbeat_seconds=0.2)
    routes = ("api.ops", "api.runs.routes", "api.claims.routes")
    return create_app(
        ServerSettings(data_dir=tmp_path / "data"), engine, box, lifecycles=[workers], route_modules=routes
    )


async def with_scorer(team: Team) -> None:
    """The team's factory gets a foreman running the echo harness and a scorer of its ``coder`` agent."""
    now = SystemClock().now()
    foreman = {"agent_type": "FOREMAN", "config": {"harness": {"type": "echo"}}}
    async with team.sessions() as s, s.begin():
        for kind, name, prefix, spec in (
            ("agent", "foreman", ids.AGENT, foreman),
            ("scorer", "always", ids.SCORER, SCORER),
        ):
            s.add(
                FactoryObject(
                    uid=ids.new_id(prefix), team_id=team.team_id, factory_uid=team.factory_uid, kind=kind,
                    name=name, spec=spec, created_at=now, updated_at=now,
                )
            )  # fmt: skip


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not {what} after {within}s")
        await asyncio.sleep(0.05)


async def finished(team: Team, run_id: str) -> None:
    async def check() -> bool:
        async with team.sessions() as s:
            return await s.scalar(select(Run.state).where(Run.run_id == run_id)) in FINISHED

    await until(check, f"{run_id} finished")


async def turns_until(team: Team, wanted: Callable[[Turn], bool]) -> None:
    """Scorer turns until one does what is wanted (on PostgreSQL a turn reads only below the oldest running
    transaction, which other sessions can hold back)."""

    async def check() -> bool:
        return wanted(await judge_tick(team.sessions, SystemClock()))

    await until(check, "a scorers' turn did what was wanted")


async def delivered(sender: Sender, team: Team) -> None:
    """Sender turns until the fan-out's own cursor has passed the newest event and every message made is
    delivered (the notification conftest's ``settle`` reads whichever ``notification_cursor`` row comes
    first, and the scorers' row, behind its last ``score`` event, may come first on PostgreSQL)."""

    async def check() -> bool:
        await sender.step()
        if sender._running:
            await asyncio.wait(list(sender._running))
        async with team.sessions() as s:
            newest = (await s.execute(select(RunEvent.txid, RunEvent.id).order_by(*NEWEST).limit(1))).one()
            at = select(NotificationCursor.txid, NotificationCursor.event_id)
            cursor = (await s.execute(at.where(NotificationCursor.name == fanout.CURSOR))).one()
            statuses = set((await s.scalars(select(NotificationMessage.status))).all())
        return tuple(cursor) >= tuple(newest) and statuses == {"delivered"}

    await until(check, "every message delivered")


async def test_a_judgement_is_a_signed_run_scored_message_for_the_outcomes_subscribers(
    aiohttp_client: Any, app: web.Application, team: Team, receiver: Receiver, make_sender: MakeSender
) -> None:
    await aiohttp_client(app)  # starts the service worker
    await with_scorer(team)
    human = {"sources": ["API"]}  # not the judge run's own state changes (RUN_SCORER)
    told = await team.endpoint(receiver.url, name="outcomes", events=["SUCCEEDED"], filter=human)
    deaf = await team.endpoint(receiver.url, name="cancels", events=["CANCELLED"])
    sender = await make_sender()
    await sender.step()  # the fan-out's cursor starts at the newest event
    await judge_tick(team.sessions, SystemClock())  # and so does the scorers'
    async with team.sessions() as s, s.begin():
        judged = await builders.run(
            s, SystemClock(), team.team_id, prompt="Fix bug 7", factory_uid=team.factory_uid, agent="coder"
        )
    wake_claimers(app)
    await finished(team, judged.run_id)
    await turns_until(team, lambda t: bool(t.started))
    wake_claimers(app)
    async with team.sessions() as s:
        judge_id = await s.scalar(select(Run.run_id).where(Run.parent_run_id == judged.run_id))
    assert judge_id is not None
    await finished(team, judge_id)
    await turns_until(team, lambda t: bool(t.recorded))
    await delivered(sender, team)

    async with team.sessions() as s:
        rows = list(await s.scalars(select(NotificationMessage).order_by(NotificationMessage.event_id)))
    assert [(m.endpoint_uid, m.run_id, m.event_type) for m in rows] == [
        (told, judged.run_id, "run.succeeded"),
        (told, judged.run_id, "run.scored"),
    ]  # not the judge's own changes (filtered out), nothing for the endpoint of cancels
    assert deaf not in {m.endpoint_uid for m in rows}
    got = await receiver.wait_for(2)
    hook = standardwebhooks.Webhook(team.secret)
    bodies = [hook.verify(g.body, g.headers) for g in got]  # raises unless signed with the team's secret
    [scored] = [b for b in bodies if b["type"] == "run.scored"]
    assert [g.headers["webhook-id"] for g in got if json.loads(g.body)["type"] == "run.scored"] == [
        rows[1].id
    ]
    data = scored["data"]
    assert data["score"] == {
        "scorer": "always",
        "label": "good",
        "score": 1.0,
        "passed": True,
        "judge_run_id": judge_id,
    }
    assert data["run_id"] == judged.run_id and data["state"] == "SUCCEEDED" and data["source"] == "API"
    assert (
        data["factory"] == {"uid": team.factory_uid, "name": "acme"} and data["event_id"] == rows[1].event_id
    )
    assert "artifacts" not in data
