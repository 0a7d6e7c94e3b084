"""Scorers judge runs (docs/scorers.md): the real app with service-hosted echo workers, the scorers' turn
(:func:`api.scorers.judging.judge_tick`) called directly so each step is observed, SQLite and PostgreSQL.

The echo harness answers with its prompt's first line, and a judge's prompt starts with the scorer's rubric:
a rubric whose first line is ``LABEL: good`` makes a judge that answers ``good``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import builders
import pytest
from aiohttp import web
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.context import ServerSettings
from api.runs.claim_signal import wake_claimers
from api.scorers.judging import CURSOR, Turn, judge_tick
from factoryctl.serve.local_workers import service_workers
from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import FactoryObject, NotificationCursor, Run, RunEvent, RunScore

ROUTES = ("api.ops", "api.runs.routes", "api.claims.routes")
RUNS = "/api/v1/agent/runs"
LABELS = [{"value": "good", "score": 1}, {"value": "meh", "score": 0.4}, {"value": "bad", "score": 0}]
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}


def scorer(agents: Sequence[str], rate: float, rubric: str, name: str) -> dict[str, Any]:
    return {
        "scorer_name": name,
        "description": None,
        "agents": list(agents),
        "labels": LABELS,
        "passing_score": 0.5,
        "sampling_rate": rate,
        "model": "judge-model",
        "output": "classification",
        "self_improvement": False,
        "rubric": rubric,
    }


SCORERS = {
    "always": scorer(["coder"], 100, "LABEL: good\nDid the coder do it?", "always"),
    "never": scorer(["coder"], 0, "LABEL: bad\nNever sampled.", "never"),
    "confused": scorer(["coder"], 100, "LABEL: excellent\nA judge naming no declared label.", "confused"),
    "elsewhere": scorer(["reviewer"], 100, "LABEL: good\nAnother agent's runs.", "elsewhere"),
}


@pytest.fixture
def app(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> web.Application:
    workers = service_workers(2, "echo", None, tmp_path / "ws", heartbeat_seconds=0.2)
    return create_app(
        ServerSettings(data_dir=tmp_path / "data"), engine, box, lifecycles=[workers], route_modules=ROUTES
    )


@pytest.fixture
async def factory_uid(sessions: async_sessionmaker[AsyncSession], team_id: str) -> str:
    """A factory whose foreman runs the echo harness, with the scorers of :data:`SCORERS`."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        factory = await builders.factory(s, clock, team_id, "acme", agents={"foreman": {}, "coder": {}})
        now = clock.now()
        foreman = {"agent_type": "FOREMAN", "config": {"harness": {"type": "echo"}}}
        rows = [("agent", "foreman", ids.AGENT, foreman)]
        rows += [("scorer", name, ids.SCORER, spec) for name, spec in SCORERS.items()]
        for kind, name, prefix, spec in rows:
            s.add(
                FactoryObject(
                    uid=ids.new_id(prefix),
                    team_id=team_id,
                    factory_uid=factory.uid,
                    kind=kind,
                    name=name,
                    spec=spec,
                    created_at=now,
                    updated_at=now,
                )
            )
        return factory.uid


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not {what} after {within}s")
        await asyncio.sleep(0.05)


async def finished(sessions: async_sessionmaker[AsyncSession], *run_ids: str) -> list[Run]:
    async def check() -> bool:
        async with sessions() as s:
            states = await s.scalars(select(Run.state).where(Run.run_id.in_(run_ids)))
            return set(states.all()) <= FINISHED and len(run_ids) > 0

    await until(check, f"finished: {run_ids}")
    async with sessions() as s:
        return list((await s.scalars(select(Run).where(Run.run_id.in_(run_ids)).order_by(Run.run_id))).all())


async def judges(sessions: async_sessionmaker[AsyncSession]) -> list[Run]:
    async with sessions() as s:
        stmt = select(Run).where(Run.source == "RUN_SCORER").order_by(Run.title)
        return list((await s.scalars(stmt)).all())


async def turns(
    sessions: async_sessionmaker[AsyncSession], wanted: Callable[[list[Turn]], bool], *, racing: int = 1
) -> list[Turn]:
    """Turns (``racing`` at once, as replicas would) until what they did together is ``wanted``. On
    PostgreSQL a turn reads only events older than the cluster's oldest running transaction
    (docs/events.md, "Ordering and delivery"), which other databases' tests on the server can hold back."""
    done: list[Turn] = []
    clock = SystemClock()

    async def check() -> bool:
        done.extend(await asyncio.gather(*(judge_tick(sessions, clock) for _ in range(racing))))
        return wanted(done)

    await until(check, "judged as wanted")
    return done


def started(done: list[Turn]) -> list[str]:
    return [r for t in done for r in t.started]


def recorded(done: list[Turn]) -> list[str]:
    return [j.scorer for t in done for j in t.recorded]


async def past(sessions: async_sessionmaker[AsyncSession], run_id: str) -> bool:
    """Whether the scorers' cursor has moved past the run's last event."""
    async with sessions() as s:
        last = select(RunEvent.txid, RunEvent.id).where(RunEvent.run_id == run_id)
        event = (await s.execute(last.order_by(RunEvent.id.desc()).limit(1))).one()
        at = select(NotificationCursor.txid, NotificationCursor.event_id).where(
            NotificationCursor.name == CURSOR
        )
        cursor = (await s.execute(at)).one()
        return tuple(cursor) >= tuple(event)


async def new_run(
    sessions: async_sessionmaker[AsyncSession], team_id: str, factory_uid: str, prompt: str, **columns: Any
) -> str:
    async with sessions() as s, s.begin():
        run = await builders.run(
            s, SystemClock(), team_id, prompt=prompt, factory_uid=factory_uid, agent="coder", **columns
        )
        return run.run_id


async def test_a_finished_run_is_judged_once_per_sampling_scorer_and_the_labels_are_recorded(
    aiohttp_client: Any,
    app: web.Application,
    sessions: async_sessionmaker[AsyncSession],
    team_id: str,
    factory_uid: str,
    make_key: Callable[..., Awaitable[str]],
) -> None:
    client = await aiohttp_client(app)
    clock = SystemClock()
    assert (await judge_tick(sessions, clock)).started == []  # the first turn places the cursor
    run_id = await new_run(sessions, team_id, factory_uid, "Fix bug 12")
    wake_claimers(app)
    [judged] = await finished(sessions, run_id)
    assert judged.state == "SUCCEEDED"

    # two replicas' turns race over the same finish: one judge run per sampling scorer, not two
    done = await turns(sessions, lambda d: len(started(d)) >= 2, racing=2)
    found = await judges(sessions)
    assert sorted(started(done)) == sorted(j.run_id for j in found) and len(found) == 2
    assert [j.title.split(":")[0] for j in found] == ["always", "confused"]  # not "never", not "elsewhere"
    for judge in found:
        assert judge.parent_run_id == run_id and judge.factory_uid == factory_uid and judge.agent is None
        assert judge.agent_config["model_id"] == "judge-model"
        assert judge.agent_config["harness"] == {"type": "echo", "model_id": "judge-model"}  # the foreman's
        assert "Fix bug 12" in judge.prompt and "Final state: SUCCEEDED" in judge.prompt
        assert judge.prompt.index("BEGIN RUN DATA") < judge.prompt.index("echo: Fix bug 12")
    async with sessions() as s:
        rows = (await s.scalars(select(RunScore).order_by(RunScore.scorer))).all()
        assert [(r.scorer, r.run_id, r.recorded_at) for r in rows] == [
            ("always", run_id, None),
            ("confused", run_id, None),
        ]
    assert (await judge_tick(sessions, clock)).started == []  # a later turn starts nothing more

    wake_claimers(app)
    await finished(sessions, *(j.run_id for j in found))
    done = await turns(sessions, lambda d: len(recorded(d)) >= 2, racing=2)
    assert sorted(recorded(done)) == ["always", "confused"] and started(done) == []
    assert [j.run_id for j in await judges(sessions)] == [j.run_id for j in found]  # judges are never judged

    always = {
        "scorer": "always",
        "label": "good",
        "score": 1.0,
        "passed": True,
        "judge_run_id": found[0].run_id,
    }
    confused = {
        "scorer": "confused",
        "label": None,
        "score": None,
        "passed": None,
        "judge_run_id": found[1].run_id,
        "error": "no valid label",
    }
    member = await make_key("member")
    body = await (await client.get(f"{RUNS}/{run_id}", headers={"Authorization": f"Bearer {member}"})).json()
    assert sorted(body["scores"], key=lambda x: x["scorer"]) == [always, confused]
    async with sessions() as s:
        stmt = select(RunEvent.data).where(RunEvent.run_id == run_id, RunEvent.kind == "score")
        assert sorted((await s.scalars(stmt.order_by(RunEvent.id))).all(), key=lambda x: x["scorer"]) == [
            always,
            confused,
        ]
    assert (await judge_tick(sessions, clock)).recorded == []  # recorded once


async def test_failed_runs_are_judged_and_a_judge_runs_finish_starts_no_judge(
    app: web.Application,
    aiohttp_client: Any,
    sessions: async_sessionmaker[AsyncSession],
    team_id: str,
    factory_uid: str,
) -> None:
    await aiohttp_client(app)
    clock = SystemClock()
    await judge_tick(sessions, clock)
    failed = await new_run(sessions, team_id, factory_uid, "Break it [echo:fail]")
    wake_claimers(app)
    assert [r.state for r in await finished(sessions, failed)] == ["FAILED"]
    judged = started(await turns(sessions, lambda d: len(started(d)) >= 2))
    assert len(judged) == 2 and {j.parent_run_id for j in await judges(sessions)} == {failed}
    async with sessions() as s:
        await s.execute(delete(Run).where(Run.run_id.in_(judged)))  # out of the way: not run here
        await s.commit()

    # a RUN_SCORER run that runs as the scorers' agent: its finish is a judge's, never judged
    run_id = await new_run(sessions, team_id, factory_uid, "LABEL: good", source="RUN_SCORER")
    wake_claimers(app)
    [run] = await finished(sessions, run_id)
    assert run.state == "SUCCEEDED"

    # the turn that reads its finish (the cursor moves past it) starts nothing and records nothing
    done: list[Turn] = []

    async def turn_past() -> bool:
        done.append(await judge_tick(sessions, clock))
        return await past(sessions, run_id)

    await until(turn_past, "past the judge's finish")
    assert started(done) == [] and recorded(done) == []
    async with sessions() as s:
        assert [r.run_id for r in (await s.scalars(select(RunScore))).all()] == [failed, failed]


async def test_finishes_while_no_factory_has_a_scorer_are_skipped(
    app: web.Application, aiohttp_client: Any, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    await aiohttp_client(app)
    clock = SystemClock()
    async with sessions() as s, s.begin():
        bare = (await builders.factory(s, clock, team_id, "bare", agents={"foreman": {}, "coder": {}})).uid
    await judge_tick(sessions, clock)
    run_id = await new_run(sessions, team_id, bare, "Fix bug 13")
    wake_claimers(app)
    await finished(sessions, run_id)
    done: list[Turn] = []

    async def turn_past() -> bool:
        done.append(await judge_tick(sessions, clock))
        return await past(sessions, run_id)

    await until(turn_past, "past the run's finish")
    async with sessions() as s, s.begin():  # a scorer added now judges what finishes from now on
        now = clock.now()
        spec = SCORERS["always"]
        s.add(
            FactoryObject(
                uid=ids.new_id(ids.SCORER),
                team_id=team_id,
                factory_uid=bare,
                kind="scorer",
                name="always",
                spec=spec,
                created_at=now,
                updated_at=now,
            )
        )
    assert (await judge_tick(sessions, clock)).started == [] and started(done) == []
    assert await judges(sessions) == []
