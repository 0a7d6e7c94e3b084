"""A prompt schedule's ``agent_config.skills`` (docs/agent-config.md, "Skills"; docs/schedules.md): checked
and resolved when the schedule is saved, shown with its first as ``skill_spec`` as the SDK shows it, and
resolved again for each run it starts. Real app, real store (SQLite and PostgreSQL), a local git repository
as the skills source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git
import pytest
from jsonschema import Draft202012Validator
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.context import ServerSettings
from api.runs.routes import load_openapi
from store.models import Run

SCHEDULES = "/api/v1/agent/schedules"
DOC = load_openapi()
ITEM = Draft202012Validator(
    {"$ref": "#/components/schemas/ScheduledAgentItem", "components": DOC["components"]}
)
SKILLS = ["acme/skills:triage", "acme/skills:lint"]


@pytest.fixture
def api_settings(tmp_path: Path) -> ServerSettings:
    """The conftest's settings with a skills source: ``acme/skills`` holds ``triage`` and ``lint``."""
    path = tmp_path / "git" / "acme" / "skills"
    files = {
        "skills/triage/SKILL.md": "Triage it.\n",
        "skills/lint/SKILL.md": "---\nname: lint\n---\nLint.\n",
    }
    repo = git.Repo.init(path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("t", "t@example.com")
    repo.index.commit("init", author=actor, committer=actor)
    return ServerSettings(
        data_dir=tmp_path / "data", skills_source=str(tmp_path / "git" / "{owner}" / "{repo}")
    )


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_schedule_with_skills_needs_no_prompt_and_its_runs_carry_them(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    body = {"name": "n", "cron_schedule": "0 9 * * *", "agent_config": {"skills": SKILLS}}
    resp = await client.post(SCHEDULES, json=body, headers=h(member_key))
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    assert not [e.message for e in ITEM.iter_errors(created)]
    assert created["agent_config"] == {"skills": SKILLS, "skill_spec": SKILLS[0]}
    again = {**body, "enabled": True, "agent_config": created["agent_config"]}  # sent back as it was shown
    resp = await client.put(f"{SCHEDULES}/{created['id']}", json=again, headers=h(member_key))
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["agent_config"] == created["agent_config"]
    resp = await client.post(f"{SCHEDULES}/{created['id']}/run", headers=h(member_key))
    assert resp.status == 200, await resp.text()
    run_id = (await resp.json())["run_id"]
    resp = await client.get(f"/api/v1/agent/runs/{run_id}", headers=h(member_key))
    shown = (await resp.json())["agent_config"]
    assert shown["skills"] == SKILLS and shown["skill_spec"] == SKILLS[0] and shown["name"] == "triage"
    async with sessions() as s:
        stored = (await s.execute(select(Run.agent_config).where(Run.run_id == run_id))).scalar_one()
    assert stored["_skill"]["body"] == "Triage it."
    assert [(x["name"], x["skill_name"], x["body"]) for x in stored["_skills"]] == [
        ("acme/skills:lint", "lint", "Lint.")
    ]


@pytest.mark.parametrize(
    ("config", "field", "needle"),
    [
        ({"skills": ["acme/skills:triage", "acme/skills:gone"]}, "agent_config.skills[1]", "no skill 'gone'"),
        (
            {"skills": SKILLS, "skill_spec": SKILLS[1]},
            "agent_config.skills",
            "either agent_config.skill_spec or agent_config.skills",
        ),
    ],
)
async def test_a_bad_skill_list_is_a_422_naming_the_item(
    client: Any, member_key: str, config: dict[str, Any], field: str, needle: str
) -> None:
    body = {"name": "n", "cron_schedule": "0 9 * * *", "agent_config": config}
    resp = await client.post(SCHEDULES, json=body, headers=h(member_key))
    assert resp.status == 422, await resp.text()
    errors = {e["field"]: e["message"] for e in (await resp.json())["errors"]}
    assert needle in errors[field], errors
