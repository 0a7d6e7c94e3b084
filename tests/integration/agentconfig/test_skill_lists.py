"""The SDK's ``config.skills`` on a run request (docs/agent-config.md, "Skills"): an ordered list of skill
specs whose first is the run's primary skill (shown as ``skill_spec`` too) and whose others reach the worker
as files under ``$FACTORY_SKILLS_DIR``; each bad item is a 422 at ``config.skills[i]``. Real app, real store,
a real in-process service worker (the agentconfig fixture's ``command`` harness) and a real self-hosted
claim over HTTP."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import builders
import git
import pytest

from store.clock import SystemClock

if TYPE_CHECKING:
    from conftest import Ctx

CLAIM = "/api/v1/workers/claim"
LINT_MD = "---\nname: lint-rules\ndescription: House lint rules\n---\n\nAlways run the linter.\n"


def more_skills(ctx: Ctx) -> None:
    """``acme/more``: a second skills repository, with a skill whose directory repeats ``x``'s name."""
    path = ctx.repos / "acme" / "more"
    files = {"skills/lint/SKILL.md": LINT_MD, ".agents/skills/x/SKILL.md": "another x\n"}
    repo = git.Repo.init(path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("t", "t@example.com")
    repo.index.commit("init", author=actor, committer=actor)


def fields(problem: dict[str, Any]) -> dict[str, str]:
    return {e["field"]: e["message"] for e in problem.get("errors", [])}


async def test_the_first_skill_is_the_primary_and_the_response_shows_both_keys(ctx: Ctx) -> None:
    more_skills(ctx)
    skills = ["acme/skills:triage", "acme/more:lint", "acme/skills:x/SKILL.md"]
    created = await ctx.create({"prompt": "go", "config": {"skills": skills}})
    run = await ctx.finished(created["run_id"])
    assert run["state"] == "SUCCEEDED", run["status_message"]
    shown = run["agent_config"]
    assert shown["skills"] == skills and shown["skill_spec"] == "acme/skills:triage"
    assert shown["name"] == "triage-bot"  # the primary skill's name, as with skill_spec
    assert "Always run the linter" not in json.dumps(run)  # bodies stay private
    dump = ctx.dumps / created["run_id"]
    assert (dump / "PROMPT.md").read_text() == "You are the triage skill.\n\ngo"
    env = dict(line.split("=", 1) for line in (dump / "env.txt").read_text().splitlines() if "=" in line)
    assert env["FACTORY_SKILLS_DIR"].endswith("/.factory/skills")
    assert ".factory" in (dump / "ls.txt").read_text().split()


async def test_a_single_skill_list_is_a_primary_skill_only(ctx: Ctx) -> None:
    created = await ctx.create({"config": {"skills": ["acme/skills:x/SKILL.md"]}})  # no prompt needed
    run = await ctx.finished(created["run_id"])
    assert run["state"] == "SUCCEEDED", run["status_message"]
    assert run["agent_config"]["skill_spec"] == "acme/skills:x/SKILL.md"
    dump = ctx.dumps / created["run_id"]
    assert (dump / "PROMPT.md").read_text() == "tool body"
    assert "FACTORY_SKILLS_DIR=" not in (dump / "env.txt").read_text()  # no other skill: no directory


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        (
            {"config": {"skill_spec": "acme/skills:triage", "skills": ["acme/skills:x/SKILL.md"]}},
            "config.skills",
            "either config.skill_spec or config.skills, not both",
        ),
        (
            {"skill": "acme/skills:triage", "config": {"skills": ["acme/skills:x/SKILL.md"]}},
            "skill",
            "either skill or config.skills, not both",
        ),
        ({"prompt": "p", "config": {"skills": "acme/skills:triage"}}, "config.skills", "must be an array"),
        ({"prompt": "p", "config": {"skills": []}}, "config.skills", "at least one"),
        ({"prompt": "p", "config": {"skills": ["acme/skills:t"] * 2}}, "config.skills[1]", "repeats"),
        ({"prompt": "p", "config": {"skills": ["acme/skills:triage", 3]}}, "config.skills[1]", "string"),
        (
            {"prompt": "p", "config": {"skills": ["acme/skills:triage", "acme/skills:../etc/SKILL.md"]}},
            "config.skills[1]",
            "'..'",
        ),
        (
            {"prompt": "p", "config": {"skills": ["acme/skills:triage", "acme/skills:missing"]}},
            "config.skills[1]",
            "no skill 'missing'",
        ),
        ({"config": {"skills": ["acme/nope:triage"]}}, "config.skills[0]", "unknown repository acme/nope"),
    ],
)
async def test_each_bad_skill_is_a_422_at_its_index(
    ctx: Ctx, body: dict[str, Any], field: str, needle: str
) -> None:
    problem = await ctx.create(body, status=422)
    assert needle in fields(problem)[field], problem


async def test_the_claim_carries_the_other_skills_in_order(ctx: Ctx) -> None:
    more_skills(ctx)
    async with ctx.sessions() as s, s.begin():
        key = await builders.api_key(s, SystemClock(), ctx.team_id, "worker", worker_hosts=["myhost"])
    skills = ["acme/skills:triage", "acme/more:lint", "acme/skills:x/SKILL.md", "acme/more:x"]
    config = {"skills": skills, "worker_host": "myhost"}
    created = await ctx.create({"prompt": "go", "config": config})
    resp = await ctx.client.post(
        CLAIM,
        json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": "wk-1"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert resp.status == 200, await resp.text()
    run = (await resp.json())["run"]
    assert run["run_id"] == created["run_id"]
    assert run["skill_body"] == "You are the triage skill."
    assert run["agent_config"]["skills"] == skills and "_skills" not in run["agent_config"]
    assert [(s["name"], s["skill_name"], s["body"]) for s in run["skills"]] == [
        ("acme/more:lint", "lint", "Always run the linter."),
        ("acme/skills:x/SKILL.md", "x", "tool body"),
        ("acme/more:x", "x-2", "another x"),  # its own directory: no skill overwrites another
    ]
    assert run["skills"][0]["description"] == "House lint rules"
