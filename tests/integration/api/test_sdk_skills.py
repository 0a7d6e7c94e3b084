"""The official Python SDK (``oz-agent-sdk``), unchanged and with strict response validation, creates a run
with ``config={"skills": [...]}`` (docs/agent-config.md, "A list of skills") and reads it back: ``skills`` in
order, the first as ``skill_spec`` too, as the SDK's model documents; a bad item is the SDK's
``UnprocessableEntityError`` naming ``config.skills[i]``. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import builders
import oz_agent_sdk
import pytest
from oz_agent_sdk import AsyncOzAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import session_factory

SKILLS = ["acme/skills:triage", "acme/skills:.agents/skills/lint/SKILL.md"]


def skills_repository(path: Path) -> None:
    for name, text in (
        ("skills/triage", "Triage.\n"),
        (".agents/skills/lint", "---\nname: lint\n---\nLint.\n"),
    ):
        (path / name).mkdir(parents=True)
        (path / name / "SKILL.md").write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "--quiet"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "skills"], cwd=path, check=True)


async def test_the_strict_sdk_creates_and_reads_a_run_with_skills(
    aiohttp_server: Any, engine: AsyncEngine, box: SecretBox, tmp_path: Path
) -> None:
    await asyncio.to_thread(skills_repository, tmp_path / "git" / "acme" / "skills")
    clock = SystemClock()
    async with session_factory(engine)() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, clock, team.id, "member", name="sdk")
    source = str(tmp_path / "git" / "{owner}" / "{repo}")
    settings = ServerSettings(data_dir=tmp_path / "data", skills_source=source)
    server = await aiohttp_server(create_app(settings, engine, box, route_modules=ROUTE_MODULES))
    async with AsyncOzAPI(
        api_key=key, base_url=str(server.make_url("/api/v1")), max_retries=0, _strict_response_validation=True
    ) as client:
        created = await client.agent.run(config={"skills": SKILLS})  # no prompt: the first skill is one
        run = await client.agent.runs.retrieve(created.run_id)
        assert run.agent_config is not None
        assert run.agent_config.skills == SKILLS and run.agent_config.skill_spec == SKILLS[0]
        with pytest.raises(oz_agent_sdk.UnprocessableEntityError) as refused:
            await client.agent.run(prompt="p", config={"skills": [SKILLS[0], "acme/skills:gone"]})
    body = refused.value.body
    assert isinstance(body, dict)
    assert [e["field"] for e in body["errors"]] == ["config.skills[1]"]
