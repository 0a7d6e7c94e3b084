"""A v1alpha1 tree on real stores (SQLite and PostgreSQL): every kind applies, agents become the runtime's
agent map, an inline ``cron_fired`` schedule fires exactly once as its automation's agent, and a
re-apply plans nothing (docs/definitions.md)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs.skills import SkillResolver
from api.schedules.scheduler import fire_due
from reconciler.service import ReconcileOutcome, reconcile
from store import secrets as secret_store
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import Automation, Factory, FactoryObject, Run, Schedule
from store.teams import ensure_team

Sessions = async_sessionmaker[AsyncSession]
FULL = Path(__file__).resolve().parents[2] / "fixtures" / "v1alpha1-factory"
START = dt.datetime(2026, 3, 2, 8, 30, tzinfo=dt.UTC)  # a Monday

TREE = {
    "factory.yaml": (
        "schemaVersion: v1alpha1\n"
        "name: acme\n"
        "alias: Acme Bot\n"
        "repositories:\n  - owner: acme\n    name: api\n"
        "secrets: [SHARED_TOKEN]\n"
        "agentDefaults:\n  model: auto\n  runner: linux\n"
    ),
    "agents/lead/agent.md": "---\nagentType: MAIN\ndescription: Leads.\n---\nYou lead the factory.\n",
    "agents/coder/agent.md": (
        "---\nagentType: IMPLEMENT\nharness:\n  type: claude-code\n  model: opus\n"
        "  auth: {source: managedSecret, secretName: ANTHROPIC_API_KEY}\n---\nYou write code.\n"
    ),
    "agents/coder/skills/testing/SKILL.md": "---\nname: testing\ndescription: Tests.\n---\nRun the tests.\n",
    "skills/conventions/SKILL.md": "---\nname: conventions\n---\nFollow the conventions.\n",
    "runners/linux.yaml": (
        "setupCommands: [make deps]\ninstanceShape: {vcpus: 2, memoryGb: 4}\n"
        "platform: {os: linux, arch: x86_64, linux: {dockerImage: 'ubuntu:24.04'}}\n"
    ),
    "scorers/quality/scorer.md": (
        "---\nagents: [coder]\nlabels:\n  - {value: good, score: 1}\n  - {value: bad, score: 0}\n"
        "passingScore: 1\nmodel: judge\n---\nJudge it.\n"
    ),
    "benchmarks/review/suite.yaml": "name: Review\nagent: coder\ntasks: [one]\n",
    "benchmarks/review/tasks/one.yaml": "title: One\nprompt: Do one.\nsuccessCriteria: Done.\n",
    "automations/hourly/automation.md": (
        "---\ntriggers:\n  - provider: schedule\n    event: cron_fired\n"
        "    schedule: {name: top, cron: '@every 1h'}\n---\nSweep the backlog.\n"
    ),
    "automations/labeled/automation.md": (
        "---\nagent: coder\nsecrets: [OWN_TOKEN]\ntriggers:\n  - provider: github\n    event: issue_labeled\n"
        "    filter:\n      repos: [acme/api]\n      labels: [Ready]\n---\nImplement the issue.\n"
    ),
}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


async def apply(sessions: Sessions, box: SecretBox, clock: ManualClock, root: Path) -> ReconcileOutcome:
    return await reconcile(sessions, box, clock, team="default", root=root, revision=None)


async def with_secrets(sessions: Sessions, box: SecretBox, clock: ManualClock, *names: str) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s, "default", clock)
        for name in names:
            await secret_store.create(s, box, clock, team.id, name, "value", scope=secret_store.RUN)


async def test_every_kind_applies_and_a_second_apply_changes_nothing(
    sessions: Sessions, box: SecretBox, clock: ManualClock, tmp_path: Path
) -> None:
    root = write(tmp_path / "f", TREE)
    missing = await apply(sessions, box, clock, root)
    assert missing.outcome == "failed"
    assert sorted(d.message for d in missing.diagnostics if d.severity == "error") == [
        "team secret 'ANTHROPIC_API_KEY' does not exist",
        "team secret 'OWN_TOKEN' does not exist",
        "team secret 'SHARED_TOKEN' does not exist",
    ]
    await with_secrets(sessions, box, clock, "ANTHROPIC_API_KEY", "OWN_TOKEN", "SHARED_TOKEN")
    result = await apply(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert sorted((c.kind, c.name) for c in result.plan.changes) == sorted(
        [("factory", "acme"), ("agent", "lead"), ("agent", "coder"), ("skill", "coder/testing"),
         ("skill", "conventions"), ("runner", "linux"), ("scorer", "quality"), ("benchmark", "review"),
         ("automation", "hourly"), ("automation", "labeled"), ("schedule", "hourly:top")]
    )  # fmt: skip
    async with sessions() as s:
        factory = (await s.execute(select(Factory))).scalar_one()
        objects = {(o.kind, o.name): o for o in (await s.execute(select(FactoryObject))).scalars()}
        automations = {a.name: a for a in (await s.execute(select(Automation))).scalars()}
    assert (factory.alias, factory.repositories) == ("Acme Bot", [{"owner": "acme", "name": "api"}])
    assert factory.settings["agentDefaults"] == {"model": "auto", "runner": "linux"}
    assert objects[("agent", "lead")].uid.startswith("ag_")
    assert objects[("agent", "lead")].spec["agent_type"] == "FOREMAN"  # MAIN is FOREMAN
    # The runtime's map: agentDefaults, then the agent's overrides, then the factory-wide secrets.
    assert factory.agents["coder"] == {
        "model_id": "opus",
        "harness": {
            "type": "claude",
            "auth": {"source": "managedSecret", "secret_name": "ANTHROPIC_API_KEY"},
        },
        "runner": "linux",
        "secrets": ["SHARED_TOKEN"],
        "base_prompt": "You write code.",
        "skills": ["conventions", "coder/testing"],
    }
    assert factory.agents["lead"]["harness"] == {"type": "oz"}
    assert objects[("runner", "linux")].spec["instance_shape"] == {"vcpus": 2, "memory_gb": 4}
    assert [t["slug"] for t in objects[("benchmark", "review")].spec["tasks"]] == ["one"]
    assert automations["hourly"].agent == "lead"  # no agent named: the foreman
    assert automations["labeled"].config == {"secrets": ["SHARED_TOKEN", "OWN_TOKEN"]}
    assert automations["labeled"].triggers == [
        {"provider": "github", "event": "issue_labeled",
         "filter": {"repos": {"in": ["acme/api"], "not_in": []}, "labels": {"in": ["ready"], "not_in": []}}}
    ]  # fmt: skip

    again = await apply(sessions, box, clock, root)
    assert again.outcome == "noop"


async def test_an_inline_schedule_fires_once_as_its_automations_agent(
    sessions: Sessions, box: SecretBox, clock: ManualClock, tmp_path: Path
) -> None:
    files = {k: v for k, v in TREE.items() if not k.startswith("automations/labeled")}
    files["agents/coder/agent.md"] = "---\nagentType: IMPLEMENT\n---\nYou write code.\n"
    await with_secrets(sessions, box, clock, "SHARED_TOKEN")
    result = await apply(sessions, box, clock, write(tmp_path / "f", files))
    assert result.outcome == "succeeded", result.errors_json()
    async with sessions() as s:
        schedule = (await s.execute(select(Schedule))).scalar_one()
    assert (schedule.name, schedule.cron, schedule.timezone, schedule.inline_of) == (
        "hourly:top", "0 * * * *", "UTC", "hourly",
    )  # fmt: skip
    assert schedule.next_fire_at == dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)

    resolver = SkillResolver(None, tmp_path / "skills")
    clock.advance(30 * 60)  # 09:00
    first = await fire_due(sessions, clock, resolver)
    again = await fire_due(sessions, clock, resolver)  # the same instant: nothing more
    assert len(first) == 1 and again == []
    async with sessions() as s:
        [run] = (await s.execute(select(Run))).scalars()
    config: dict[str, Any] = run.agent_config
    assert run.prompt == "Sweep the backlog."
    assert (config["base_prompt"], config["model_id"], config["harness"]) == (
        "You lead the factory.", "auto", {"type": "oz"},
    )  # fmt: skip
    assert run.schedule_id == schedule.uid and run.automation_id is not None and run.agent == "lead"


async def test_an_automation_watching_a_schedule_by_uid_runs_once_per_fire(
    sessions: Sessions, box: SecretBox, clock: ManualClock, tmp_path: Path
) -> None:
    files = {k: v for k, v in TREE.items() if not k.startswith("automations/")}
    files["agents/coder/agent.md"] = "---\nagentType: IMPLEMENT\n---\nYou write code.\n"
    files["schedules/nightly.yaml"] = "cron: '0 9 * * *'\ntimezone: UTC\nprompt: Write the report.\n"
    await with_secrets(sessions, box, clock, "SHARED_TOKEN")
    root = write(tmp_path / "f", files)
    assert (await apply(sessions, box, clock, root)).outcome == "succeeded"
    async with sessions() as s:
        nightly = (await s.execute(select(Schedule))).scalar_one()
    watcher = (
        "---\nagent: coder\ntriggers:\n  - provider: schedule\n    event: cron_fired\n"
        f"    filter:\n      schedule_ids: [{nightly.uid}]\n---\nReview the report.\n"
    )
    write(root, {"automations/watch/automation.md": watcher})
    result = await apply(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()

    resolver = SkillResolver(None, tmp_path / "skills")
    clock.advance(30 * 60)  # 09:00
    fired = await fire_due(sessions, clock, resolver)
    assert len(fired) == 1 and await fire_due(sessions, clock, resolver) == []
    async with sessions() as s:
        runs = {r.prompt: r for r in (await s.execute(select(Run))).scalars()}
    assert sorted(runs) == ["Review the report.", "Write the report."]
    watched = runs["Review the report."]
    assert (watched.agent, watched.schedule_id, watched.agent_config["base_prompt"]) == (
        "coder",
        nightly.uid,
        "You write code.",
    )
    assert runs["Write the report."].agent is None  # a prompt schedule runs as no agent


async def test_the_full_fixture_applies_then_plans_nothing(
    sessions: Sessions, box: SecretBox, clock: ManualClock
) -> None:
    """tests/fixtures/v1alpha1-factory: every key, kind and trigger the official examples use."""
    root = FULL
    await with_secrets(sessions, box, clock, "SHARED_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")
    result = await apply(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    kinds = sorted({c.kind for c in result.plan.changes})
    assert kinds == [
        "agent", "automation", "benchmark", "factory", "runner", "schedule", "scorer", "skill",
    ]  # fmt: skip
    assert (await apply(sessions, box, clock, root)).outcome == "noop"


async def test_an_alias_is_one_factorys_in_the_team(
    sessions: Sessions, box: SecretBox, clock: ManualClock, tmp_path: Path
) -> None:
    def tree(name: str, alias: str) -> Path:
        return write(
            tmp_path / name,
            {
                "factory.yaml": (
                    f"schemaVersion: v1alpha1\nname: {name}\nalias: {alias}\n"
                    "repositories: [{owner: acme, name: api}]\nagentDefaults: {model: auto}\n"
                ),
                "agents/lead/agent.md": "---\nagentType: FOREMAN\n---\nLead.\n",
            },
        )

    assert (await apply(sessions, box, clock, tree("first", "Acme Bot"))).outcome == "succeeded"
    again = await apply(sessions, box, clock, tree("first", "Acme Bot"))
    assert again.outcome == "noop"  # its own alias is no clash
    clash = await apply(sessions, box, clock, tree("second", "acme bot"))
    assert clash.outcome == "failed"
    [found] = [d for d in clash.diagnostics if d.severity == "error"]
    assert (found.rule, found.line) == ("FC046", 3)
    assert found.message == "alias 'acme bot' is already factory 'first''s"
