"""Fixtures for agent-configuration tests: the real app with in-process service workers running a
``command`` harness that dumps what it received (PROMPT.md, .mcp.json, environment, workspace listing)
into ``<tmp>/dumps/<run_id>/``; a local git repository serving skills; keys, secrets and environments."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import builders
import git
import pytest
from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.claims.reaper import lease_reaper
from api.context import ServerSettings
from api.runs.claim_signal import wake_claimers
from factoryctl.serve.local_workers import service_workers
from factoryctl.worker.sandbox import Sandbox
from store.clock import SystemClock
from store.crypto import SecretBox

RUNS = "/api/v1/agent/runs"
SKILL_MD = "---\nname: triage-bot\ndescription: Sorts issues\n---\n\nYou are the triage skill.\n"
DUMP = (
    'out="$DUMP_DIR/$FACTORY_RUN_ID"; mkdir -p "$out"; cp PROMPT.md "$out/"; '
    'if [ -f .mcp.json ]; then cp .mcp.json "$out/"; fi; env > "$out/env.txt"; '
    'ls -A1 > "$out/ls.txt"; echo {model} > "$out/model.txt"; '
    'if [ -d app ]; then ls -A1 app > "$out/app.txt"; fi'
)


def commit(path: Path, files: dict[str, str]) -> None:
    repo = git.Repo.init(path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("t", "t@example.com")
    repo.index.commit("init", author=actor, committer=actor)


@dataclass
class Ctx(builders.TeamRows):
    """The app's client, keys, and where the harness dumps what it received; rows as in
    :class:`builders.TeamRows`."""

    client: TestClient[Any, Any]
    member: dict[str, str]
    admin: dict[str, str]
    dumps: Path
    repos: Path

    async def create(self, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        resp = await self.client.post(RUNS, json=body, headers=self.member)
        data: dict[str, Any] = await resp.json()
        assert resp.status == status, data
        if status == 200:
            wake_claimers(self.client.app)
        return data

    async def get(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"{RUNS}/{run_id}", headers=self.member)
        assert resp.status == 200
        data: dict[str, Any] = await resp.json()
        return data

    async def finished(self, run_id: str, within: float = 20.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            run = await self.get(run_id)
            if run["state"] in ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED"):
                return run
            assert asyncio.get_running_loop().time() < deadline, f"run is still {run['state']}"
            await asyncio.sleep(0.05)


@pytest.fixture
async def ctx(
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> Ctx:
    repos = tmp_path / "git"
    commit(repos / "acme" / "skills", {"skills/triage/SKILL.md": SKILL_MD, "x/SKILL.md": "tool body\n"})
    commit(repos / "acme" / "app", {"README.md": "app\n", "src/main.py": "print(1)\n"})
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = {"PATH": "/usr/bin:/bin", "DUMP_DIR": str(dumps)}
    # The harness runs in the sandbox (docs/workers.md, "Sandbox"): the dump directory is its one way out.
    sandbox = Sandbox(writable=[dumps])
    lifecycle = service_workers(
        1, "command", DUMP, tmp_path / "ws", harness_env=env, heartbeat_seconds=0.2, sandbox=sandbox
    )
    settings = ServerSettings(data_dir=tmp_path / "data", skills_source=str(repos / "{owner}" / "{repo}"))
    app = create_app(
        settings, engine, box, lifecycles=[lifecycle, lease_reaper(0.5)], route_modules=ROUTE_MODULES
    )
    client = await aiohttp_client(app)
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s, clock=clock)
        member = await builders.api_key(s, clock, team.id, "member", name="member")
        admin = await builders.api_key(s, clock, team.id, "admin", name="admin")
    return Ctx(
        client=client,
        sessions=sessions,
        box=box,
        team_id=team.id,
        member={"Authorization": f"Bearer {member}"},
        admin={"Authorization": f"Bearer {admin}"},
        dumps=dumps,
        repos=repos,
    )
