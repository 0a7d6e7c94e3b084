"""The factory page's definition sections (docs/console.md, "Pages"): a small v1alpha1 tree applied through
the reconciler's real apply path, then read back as agents, skills, runners, scorers, benchmarks, the
factory's settings and each automation's triggers, on SQLite and PostgreSQL; team-authored text stays text."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler.service import reconcile
from store.clock import SystemClock
from store.crypto import SecretBox

from .support import sign_in

SCRIPT = "<script>alert(1)</script>"
TREE: dict[str, str] = {
    "factory.yaml": """\
schemaVersion: v1alpha1
name: console-defs
alias: Acme
repositories:
  - owner: acme
    name: api
agentDefaults:
  model: auto
  runner: linux
integrations:
  - type: slack
""",
    "agents/foreman/agent.md": f"""\
---
description: Routes the team's work.
agentType: FOREMAN
---
Lead the team. {SCRIPT}
""",
    "agents/reviewer/agent.md": """\
---
description: Reviews pull requests.
agentType: REVIEW
harness:
  type: codex
  model: gpt-5
---
Review carefully.
""",
    "agents/reviewer/skills/x/SKILL.md": """\
---
name: x
description: Only the reviewer's skill.
---
Do x.
""",
    "skills/conventions/SKILL.md": """\
---
name: conventions
description: The repository's conventions.
---
Follow them.
""",
    "runners/linux.yaml": """\
description: The default Linux runner.
setupCommands:
  - make deps
  - echo ready
instanceShape:
  vcpus: 4
  memoryGb: 8
platform:
  os: linux
  arch: x86_64
  linux:
    dockerImage: python:3.12
""",
    "scorers/q/scorer.md": """\
---
description: Review quality.
agents: [reviewer]
labels:
  - {value: actionable, score: 1, description: Every finding has a location.}
  - {value: vague, score: 0, description: Findings without locations.}
passingScore: 1
samplingRate: 25
model: claude-4-5-haiku
---
Judge the review.
""",
    "benchmarks/smoke/suite.yaml": """\
name: smoke
agent: reviewer
tasks: [one, two]
""",
    "benchmarks/smoke/tasks/one.yaml": "title: One\nprompt: Review one.\nsuccessCriteria: Finds it.\n",
    "benchmarks/smoke/tasks/two.yaml": "title: Two\nprompt: Review two.\nsuccessCriteria: Finds it.\n",
    "automations/triage/automation.md": """\
---
agent: reviewer
triggers:
  - provider: github
    event: issue_labeled
    filter:
      repos: [acme/api]
      labels: [triage]
  - provider: linear
    event: issue_created
---
Triage the issue.
""",
}


def write_tree(root: Path) -> Path:
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def section(page: str, title: str) -> str:
    """The page's markup from the ``<h2>`` titled ``title`` to the next ``<h2>``."""
    match = re.search(rf"<h2>{re.escape(title)}</h2>(.*?)(?=<h2>|\Z)", page, re.S)
    assert match is not None, title
    return match.group(1)


def text(markup: str) -> str:
    """The visible text of ``markup``, whitespace collapsed: what a reader sees of a table."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


async def applied_factory(sessions: async_sessionmaker[AsyncSession], box: SecretBox, root: Path) -> str:
    outcome = await reconcile(
        sessions, box, SystemClock(), team="default", root=write_tree(root), revision=None
    )
    assert outcome.outcome == "succeeded", outcome
    assert outcome.factory_uid is not None
    return outcome.factory_uid


async def test_definition_sections_show_the_applied_tree(
    client: TestClient[Any, Any],
    admin_key: str,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> None:
    uid = await applied_factory(sessions, box, tmp_path / "factory")
    await sign_in(client, admin_key)
    resp = await client.get(f"/console/factories/{uid}")
    page = await resp.text()
    assert resp.status == 200

    head = text(page.split("<h2>Conditions</h2>")[0])
    for shown in (
        "Schema version v1alpha1",
        "Alias Acme",
        "Repositories acme/api",
        "model auto",
        "runner linux",
        "Integrations slack not connected",
    ):
        assert shown in head, shown

    agents = section(page, "Agents")
    rows = re.findall(r"<tr>(.*?)</tr>", agents.split("<tbody>")[1], re.S)
    assert [text(r).split()[0] for r in rows] == ["foreman", "reviewer"]
    foreman, reviewer = (text(r) for r in rows)
    assert '<span class="badge foreman">FOREMAN</span>' in rows[0]
    assert "Routes the team's work." in foreman and "agents/foreman/agent.md" in foreman
    assert "oz auto linux" in foreman  # harness, model, runner from agentDefaults
    assert foreman.endswith(" 1")  # the factory-wide skill
    assert "REVIEW" in reviewer and "codex gpt-5 linux" in reviewer and reviewer.endswith(" 2")
    # the prompt is collapsed, and the script tag in it is text, never markup
    assert re.search(
        r"<details[^>]*><summary>Prompt</summary><pre[^>]*>Lead the team\. "
        r"&lt;script&gt;alert\(1\)&lt;/script&gt;",
        rows[0],
    )
    assert SCRIPT not in page and "<script>alert" not in page

    skills = text(section(page, "Skills"))
    assert "conventions skills/conventions/SKILL.md all agents The repository's conventions." in skills
    assert "x agents/reviewer/skills/x/SKILL.md agent reviewer Only the reviewer's skill." in skills

    runners = text(section(page, "Runners"))
    for shown in (
        "linux The default Linux runner.",
        "2 commands make deps echo ready",
        "4 vCPU · 8 GB",
        "linux/x86_64",
        "python:3.12 not run",
    ):
        assert shown in runners, shown

    scorers = text(section(page, "Scorers"))
    assert (
        "q Review quality. scorers/q/scorer.md reviewer 1 25% claude-4-5-haiku actionable 1 vague 0"
        in scorers
    )

    benchmarks = text(section(page, "Benchmarks"))
    assert "smoke benchmarks/smoke/suite.yaml reviewer 2" in benchmarks

    automations = section(page, "Automations")
    assert "triage" in automations
    assert "reviewer github · issue_labeled linear · issue_created not connected" in text(automations)
    github_row = re.search(r"<div><code>github · issue_labeled</code>(.*?)</div>", automations, re.S)
    assert github_row is not None and "not connected" not in github_row.group(1)


async def test_a_factory_without_definitions_shows_empty_sections(
    client: TestClient[Any, Any], admin_key: str
) -> None:
    """An API-managed factory has no definition objects: each section says so, and the page still renders."""
    await sign_in(client, admin_key)
    resp = await client.post(
        "/api/v1/factory",
        json={"name": "api-made"},
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert resp.status == 201, await resp.text()
    uid = (await resp.json())["uid"]
    page = await (await client.get(f"/console/factories/{uid}")).text()
    for title, empty in (
        ("Agents", "No agent definitions."),
        ("Skills", "No skills."),
        ("Runners", "No runners."),
        ("Scorers", "No scorers."),
        ("Benchmarks", "No benchmark suites."),
    ):
        assert empty in section(page, title), title
    assert "Alias" not in text(page.split("<h2>Conditions</h2>")[0])


async def test_another_teams_definitions_are_a_404(
    client: TestClient[Any, Any],
    other_team_key: str,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> None:
    uid = await applied_factory(sessions, box, tmp_path / "factory")
    await sign_in(client, other_team_key)
    resp = await client.get(f"/console/factories/{uid}")
    assert resp.status == 404
    assert "Routes the team" not in await resp.text()
