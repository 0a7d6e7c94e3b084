"""The official Python SDK (``oz-agent-sdk``), unchanged, against the real app on a real TCP port:
``client.agent.list_environments()`` and ``client.agent.list()`` (docs/api.md, "Environments for the SDKs"
and "Agents (skills)"), blocking and async. SQLite is enough: the wire shape does not depend on the store.

The blocking client runs in a worker thread while the server answers on the test's event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import builders
import oz_agent_sdk
import pytest
from oz_agent_sdk import AsyncOzAPI, OzAPI

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory

SKILL = "---\nname: triage-bot\ndescription: Sorts issues\n---\n\nYou triage issues.\n"
T0 = dt.datetime(2026, 1, 31, 12, 0, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Served:
    base_url: str  # ends in /api/v1, as the SDKs' base URL does
    key: str
    environment_uid: str
    run_id: str


def skills_repository(path: Path) -> None:
    (path / "skills" / "triage").mkdir(parents=True)
    (path / "skills" / "triage" / "SKILL.md").write_text(SKILL)
    (path / "skills" / "broken").mkdir()
    (path / "skills" / "broken" / "SKILL.md").write_text("---\nname: [unclosed\n---\nbody\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch", "main"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "skills"], cwd=path, check=True)


@pytest.fixture
async def served(
    aiohttp_server: Any, sqlite_url: str, box: SecretBox, tmp_path: Path
) -> AsyncIterator[Served]:
    await asyncio.to_thread(skills_repository, tmp_path / "git" / "acme" / "skills")
    engine = create_engine(sqlite_url)
    clock = SystemClock()
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "member", name="sdk")
        env = await builders.environment(
            s,
            clock,
            team.id,
            "backend",
            {"repos": [{"url": "https://github.com/acme/skills.git"}], "setup": ["make deps"]},
        )
        run = await builders.run(
            s,
            clock,
            team.id,
            title="triage 42",
            agent_config={"environment_id": "backend", "name": "triage-bot"},
            state="FAILED",
            created_at=T0,
            updated_at=T0,
            finished_at=T0,
            status_message={"message": "setup exited 1", "error_code": "environment_setup_failed"},
        )
    settings = ServerSettings(
        data_dir=tmp_path / "data", skills_source=str(tmp_path / "git" / "{owner}" / "{repo}")
    )
    server = await aiohttp_server(create_app(settings, engine, box, route_modules=ROUTE_MODULES))
    yield Served(str(server.make_url("/api/v1")), key, env.uid, run.run_id)
    await engine.dispose()


def check_environments(served: Served, answer: Any) -> None:
    assert isinstance(answer, oz_agent_sdk.types.AgentListEnvironmentsResponse)
    (env,) = answer.environments
    assert env.uid == served.environment_uid
    assert env.config.name == "backend" and env.config.setup_commands == ["make deps"]
    assert env.config.github_repos is not None
    assert [(r.owner, r.repo) for r in env.config.github_repos] == [("acme", "skills")]
    assert env.setup_failed is True
    assert env.last_task_created is not None
    assert (env.last_task_created.id, env.last_task_created.state) == (served.run_id, "FAILED")
    assert env.last_task_created.created_at == T0
    assert env.scope is not None and env.scope.type == "Team"
    assert isinstance(env.last_updated, dt.datetime)


def check_agents(served: Served, answer: Any, names: tuple[str, ...] = ("triage-bot",)) -> None:
    """``answer`` lists ``names`` in this order; triage-bot as served, any other with its parse error."""
    assert isinstance(answer, oz_agent_sdk.types.AgentListResponse)
    assert tuple(a.name for a in answer.agents) == names
    for agent in answer.agents:
        if agent.name != "triage-bot":
            assert agent.variants[0].error and not agent.variants[0].base_prompt
    (variant,) = next(a for a in answer.agents if a.name == "triage-bot").variants
    assert variant.id == "acme/skills:skills/triage/SKILL.md"
    assert (variant.base_prompt, variant.description) == ("You triage issues.", "Sorts issues")
    assert [(e.name, e.uid) for e in variant.environments] == [("backend", served.environment_uid)]
    assert (variant.source.owner, variant.source.name, variant.source.skill_path) == (
        "acme",
        "skills",
        "skills/triage/SKILL.md",
    )
    assert variant.last_run_timestamp == T0 and variant.error is None


async def test_blocking_sdk_reads_environments_and_agents(served: Served) -> None:
    def calls() -> None:
        with OzAPI(api_key=served.key, base_url=served.base_url, max_retries=0) as client:
            check_environments(served, client.agent.list_environments())
            check_environments(served, client.agent.list_environments(sort_by="name"))
            check_agents(served, client.agent.list())
            malformed = client.agent.list(include_malformed_skills=True, sort_by="last_run")
            check_agents(served, malformed, ("triage-bot", "broken"))  # broken was never run
            malformed = client.agent.list(include_malformed_skills=True)
            check_agents(served, malformed, ("broken", "triage-bot"))
            check_agents(served, client.agent.list(repo="acme/skills", refresh=True))
            with pytest.raises(oz_agent_sdk.NotFoundError):
                client.agent.list(repo="acme/nope")
            with pytest.raises(oz_agent_sdk.AuthenticationError):
                OzAPI(api_key="fk_wrong", base_url=served.base_url, max_retries=0).agent.list_environments()

    await asyncio.to_thread(calls)


async def test_async_sdk_reads_environments_and_agents(served: Served) -> None:
    async with AsyncOzAPI(api_key=served.key, base_url=served.base_url, max_retries=0) as client:
        check_environments(served, await client.agent.list_environments(sort_by="last_updated"))
        check_agents(served, await client.agent.list(sort_by="name"))
        with pytest.raises(oz_agent_sdk.BadRequestError):
            await client.agent.list(repo="not a repository")
