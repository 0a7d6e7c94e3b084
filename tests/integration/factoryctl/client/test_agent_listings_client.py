"""``client.agents.list()`` and ``client.agents.list_environments()`` against the real server.

The skills come from a local directory per repository (the server's ``skills_source`` template), so the
catalog reads real SKILL.md files without a network; the environment that clones that repository from
GitHub links the skill to it. One server for the module, on SQLite, with its own team's keys.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import builders
import pytest
from aiohttp import web
from live_servers import LiveServer

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from factoryctl.client import (
    AgentSkill,
    AsyncFactoryClient,
    BadRequestError,
    CloudEnvironment,
    FactoryClient,
    NotFoundError,
    PermissionDeniedError,
)
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine

SECRET_KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
SKILL = "---\nname: triage\ndescription: Sorts issues\n---\n\nYou triage issues.\n"
BROKEN = b"\xff\xfe not UTF-8\n"  # a SKILL.md the catalog lists with an error


class SkillsServer(LiveServer):
    """The real app with a skills source: ``<repos>/<owner>/<repo>`` directories."""

    def __init__(self, db_url: str, data_dir: Path, repos: Path) -> None:
        self.repos = repos
        super().__init__(db_url, data_dir, SecretBox.from_setting(SECRET_KEY))

    async def _app(self, port: int) -> web.Application:
        self.engine = create_engine(self.db_url)
        async with self.sessions() as s, s.begin():
            keys = await builders.role_keys(s, SystemClock())
            team = await builders.team(s)
            await builders.environment(
                s,
                SystemClock(),
                team.id,
                "widgets-env",
                {
                    "description": "builds widgets",
                    "repos": [
                        {"url": "https://github.com/acme/widgets.git"},
                        {"url": "https://example.com/x.git"},
                    ],
                    "setup": ["make deps"],
                },
            )
        self.keys = {"admin": keys.admin, "member": keys.member, "worker": keys.worker}
        settings = ServerSettings(
            data_dir=self.data_dir, port=port, skills_source=str(self.repos / "{owner}" / "{repo}")
        )
        return create_app(settings, self.engine, self.box, route_modules=ROUTE_MODULES)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[SkillsServer]:
    root = tmp_path_factory.mktemp("agents")
    repo = root / "repos" / "acme" / "widgets"
    (repo / ".agents" / "skills" / "triage").mkdir(parents=True)
    (repo / ".agents" / "skills" / "triage" / "SKILL.md").write_text(SKILL)
    (repo / "skills" / "broken").mkdir(parents=True)
    (repo / "skills" / "broken" / "SKILL.md").write_bytes(BROKEN)
    shutil.copyfile(sqlite_template, root / "factory.db")
    server = SkillsServer(f"sqlite+aiosqlite:///{root / 'factory.db'}", root, root / "repos")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def member(served: SkillsServer) -> Iterator[FactoryClient]:
    with FactoryClient(served.url, served.member_key) as client:
        yield client


def test_environments_in_the_sdk_shape(member: FactoryClient) -> None:
    [env] = member.agents.list_environments()
    assert member.agents.list_environments(sort_by="name") == [env]
    assert isinstance(env, CloudEnvironment) and env.uid.startswith("env_")
    assert (env.config.name, env.config.description, env.config.setup_commands) == (
        "widgets-env",
        "builds widgets",
        ["make deps"],
    )
    assert [(r.owner, r.repo) for r in env.config.github_repos] == [("acme", "widgets")]  # GitHub ones only
    assert [r.url for r in env.config.repos] == [
        "https://github.com/acme/widgets.git",
        "https://example.com/x.git",
    ]
    assert env.last_updated is not None and env.setup_failed is False and env.last_task_created is None
    assert env.scope is not None and env.scope.type == "Team"


def test_agents_are_the_skills_of_the_environments_repositories(member: FactoryClient) -> None:
    [env] = member.agents.list_environments()
    [agent] = member.agents.list()
    assert isinstance(agent, AgentSkill) and agent.name == "triage"
    [variant] = agent.variants
    assert variant.id == "acme/widgets:.agents/skills/triage/SKILL.md"
    assert variant.description == "Sorts issues" and "You triage issues." in variant.base_prompt
    assert variant.source is not None and (variant.source.owner, variant.source.name) == ("acme", "widgets")
    assert [(e.name, e.uid) for e in variant.environments] == [("widgets-env", env.uid)]
    assert variant.error is None

    with_broken = member.agents.list(repo="acme/widgets", include_malformed_skills=True, sort_by="name")
    errors = {v.id: v.error for a in with_broken for v in a.variants}
    assert errors["acme/widgets:skills/broken/SKILL.md"]  # malformed, with why
    assert errors["acme/widgets:.agents/skills/triage/SKILL.md"] is None


def test_listing_refusals(served: SkillsServer, member: FactoryClient) -> None:
    with pytest.raises(BadRequestError):
        member.agents.list(sort_by="bogus")
    with pytest.raises(BadRequestError):
        member.agents.list_environments(sort_by="bogus")
    with pytest.raises(NotFoundError):
        member.agents.list(repo="acme/nothing-here")
    with FactoryClient(served.url, served.worker_key) as worker, pytest.raises(PermissionDeniedError):
        worker.agents.list_environments()


async def test_the_async_client_lists_the_same(served: SkillsServer, member: FactoryClient) -> None:
    async with AsyncFactoryClient(served.url, served.member_key) as client:
        assert await client.agents.list_environments() == member.agents.list_environments()
        assert [a.name for a in await client.agents.list(refresh=True)] == ["triage"]
