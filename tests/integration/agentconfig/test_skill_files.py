"""What a run may name as its skill, over HTTP on SQLite and PostgreSQL (docs/agent-config.md, "Skills"):
never a file of a repository's ``.git`` (the reported leak: ``.git/config`` with a credentialed remote
became the agent's prompt), never a file that is not a ``SKILL.md`` in an allowed layout; and a run that is
refused costs no clone."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import builders
import pytest
from aiohttp.test_utils import TestClient
from gitobjects import git
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from store.clock import SystemClock
from store.crypto import SecretBox

if TYPE_CHECKING:
    from conftest import Ctx

RUNS = "/api/v1/agent/runs"
TOKEN = "ghp_deploytoken12345"


@pytest.mark.parametrize(
    "spec",
    [
        "acme/skills:.git/config",
        "acme/skills:.git/HEAD",
        "acme/skills:.GIT/config",
        "acme/skills:README.md",
        "acme/skills:src/main.py",
        "acme/skills:skills/triage/notes.md",
        "acme/skills:evil",  # skills/evil/SKILL.md -> ../../.git/config
    ],
)
async def test_a_file_that_is_not_a_skill_is_refused_at_creation(ctx: Ctx, spec: str) -> None:
    root = ctx.repos / "acme" / "skills"
    git(root, "remote", "add", "origin", f"https://deploy:{TOKEN}@git.example/acme/skills.git")
    (root / "README.md").write_text("readme\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print()\n")
    (root / "skills" / "triage" / "notes.md").write_text("notes\n")
    (root / "skills" / "evil").mkdir()
    os.symlink("../../.git/config", root / "skills" / "evil" / "SKILL.md")
    problem = await ctx.create({"prompt": "go", "config": {"skill_spec": spec}}, status=422)
    assert "config.skill_spec" in {e["field"] for e in problem["errors"]}, problem
    assert TOKEN not in json.dumps(problem)
    runs = await (await ctx.client.get(RUNS, headers=ctx.member)).json()
    assert runs["runs"] == []


@pytest.mark.parametrize(
    "path",
    [
        ".agents/skills/ops/SKILL.md",
        ".warp/skills/ops/SKILL.md",
        "agents/foreman/skills/ops/SKILL.md",
        "ops/SKILL.md",
    ],
)
async def test_the_allowed_layouts_are_accepted(ctx: Ctx, path: str) -> None:
    root = ctx.repos / "acme" / "skills"
    (root / path).parent.mkdir(parents=True)
    (root / path).write_text("---\nname: ops\n---\nRun the ops checklist.\n")
    created = await ctx.create({"prompt": "go", "config": {"skill_spec": f"acme/skills:{path}"}})
    run = await ctx.finished(created["run_id"])
    assert run["agent_config"]["name"] == "ops"
    assert (ctx.dumps / created["run_id"] / "PROMPT.md").read_text() == "Run the ops checklist.\n\ngo"


async def test_a_refused_run_clones_nothing(
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> None:
    """The reported cost: 422s that each cloned a whole repository. A skill spec in no allowed layout, and a
    valid spec in a run refused for another reason (an unknown environment), leave the cache empty."""
    source = tmp_path / "git" / "acme" / "skills"
    (source / "skills" / "triage").mkdir(parents=True)
    (source / "skills" / "triage" / "SKILL.md").write_text("Triage.\n")
    git(source, "init", "--quiet", "--initial-branch", "main")
    git(source, "add", "-A")
    git(source, "commit", "--quiet", "-m", "skills")
    data = tmp_path / "data"
    settings = ServerSettings(data_dir=data, skills_source=f"file://{tmp_path}/git/{{owner}}/{{repo}}")
    client = await aiohttp_client(create_app(settings, engine, box, route_modules=ROUTE_MODULES))
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s, clock=clock)
        key = await builders.api_key(s, clock, team.id, "member", name="member")
    member = {"Authorization": f"Bearer {key}"}
    refused = [
        {"prompt": "go", "config": {"skill_spec": "acme/skills:.git/config"}},
        {"prompt": "go", "config": {"skill_spec": "acme/skills:docs/guide.md"}},
        {"prompt": "go", "config": {"skill_spec": "acme/skills:triage", "environment_id": "nope"}},
        {"prompt": "go", "skill": "acme/skills:.git/HEAD"},
    ]
    for body in refused:
        resp = await client.post(RUNS, json=body, headers=member)
        assert resp.status == 422, await resp.text()
    cache = data / "skills-cache"
    assert not cache.exists() or list(cache.iterdir()) == []
    resp = await client.post(RUNS, json={"prompt": "go", "skill": "acme/skills:triage"}, headers=member)
    assert resp.status == 200, await resp.text()
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1
