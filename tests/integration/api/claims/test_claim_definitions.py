"""The claim answer carries a run's definition objects (runner, skills) and the secrets endpoint answers
its config's own secrets (docs/workers.md, "Runners and skills"); a runner deleted since the run was
queued fails it ``runner_unavailable`` before any worker receives it. Real app, real store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import builders
from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import FactoryObject, Run

if TYPE_CHECKING:
    from conftest import MakeKey, NewRun

CLAIM = "/api/v1/workers/claim"
RUNNER = {
    "description": None,
    "setup_commands": ["echo hi > setup.txt"],
    "instance_shape": {"vcpus": 2, "memory_gb": 4},
    "platform": {"os": "linux", "arch": "x86_64", "docker_image": "ubuntu:24.04", "mac_version": None},
}
SKILL = {
    "agent": "oncall",
    "skill_name": "check",
    "description": "How to check",
    "front_matter": {"name": "check", "description": "How to check"},
    "body": "Check things.\n",
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def seed_factory(sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> str:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        factory = await builders.factory(s, clock, team.id, "defs")
        for name, value in (
            ("DEPLOY_KEY", "deploy-value-1234"),
            ("AUTH", "auth-value-5678"),
            ("NO", "n" * 9),
        ):
            await builders.secret(s, box, clock, team.id, name, value, scope="run")
        for kind, name, spec in (("runner", "box", RUNNER), ("skill", "oncall/check", SKILL)):
            s.add(
                FactoryObject(
                    uid=ids.new_id("rn" if kind == "runner" else "sk"),
                    team_id=team.id,
                    factory_uid=factory.uid,
                    kind=kind,
                    name=name,
                    spec=spec,
                    created_at=clock.now(),
                    updated_at=clock.now(),
                )
            )
        return factory.uid


async def claim(client: Any, key: str) -> dict[str, Any] | None:
    resp = await client.post(
        CLAIM, json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": "wk-1"}, headers=auth(key)
    )
    if resp.status == 204:
        return None
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def test_the_claim_carries_runner_skills_and_the_configs_secrets(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    factory = await seed_factory(sessions, box)
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    config = {
        "runner": "box",
        "skills": ["oncall/check"],
        "secrets": ["DEPLOY_KEY"],
        "harness": {"type": "command", "auth": {"source": "managedSecret", "secret_name": "AUTH"}},
    }
    run_id = await new_run(worker_host="myhost", agent_config=config, factory_uid=factory)
    claimed = await claim(client, key)
    assert claimed is not None and claimed["run"]["run_id"] == run_id
    run = claimed["run"]
    assert run["runner"] == {
        "name": "box",
        **{k: RUNNER[k] for k in ("setup_commands", "instance_shape", "platform")},
    }
    assert run["skills"] == [
        {"name": "oncall/check", "skill_name": "check", "description": "How to check",
         "body": "Check things.\n", "front_matter": SKILL["front_matter"]}
    ]  # fmt: skip
    assert run["agent_config"]["secrets"] == ["DEPLOY_KEY"]  # names are shown; values never travel
    assert "deploy-value-1234" not in str(claimed)
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/secrets",
        json={"worker_id": "wk-1", "lease_token": claimed["lease_token"]},
        headers=auth(key),
    )
    assert resp.status == 200
    assert (await resp.json()) == {"secrets": {"AUTH": "auth-value-5678", "DEPLOY_KEY": "deploy-value-1234"}}


async def test_a_runner_that_no_longer_exists_fails_the_run_at_claim(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    factory = await seed_factory(sessions, box)
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    gone = await new_run(worker_host="myhost", agent_config={"runner": "gpu"}, factory_uid=factory)
    skill = await new_run(worker_host="myhost", agent_config={"skills": ["nope"]}, factory_uid=factory)
    assert await claim(client, key) is None  # neither is handed to a worker
    assert await claim(client, key) is None
    async with sessions() as s:
        rows = {r.run_id: r for r in (await s.execute(select(Run))).scalars()}
    for run_id, code, words in (
        (gone, "runner_unavailable", "runner 'gpu'"),
        (skill, "skill_unavailable", "'nope'"),
    ):
        row = rows[run_id]
        assert row.state == "FAILED", row.status_message
        status = row.status_message or {}
        assert status["error_code"] == code and words in status["message"], status
