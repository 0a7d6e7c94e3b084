"""Applying schedules/<name>.yaml to real stores (SQLite and PostgreSQL): rows, next_fire_at, renames,
and invalid schedules that apply nothing at all."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler.service import ReconcileOutcome, reconcile
from reconciler.specs import digest
from store import secrets as secret_store
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import ApplyRecord, Automation, Factory, Schedule, ScheduleFire
from store.teams import ensure_team

Sessions = async_sessionmaker[AsyncSession]
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # a Thursday; Berlin is UTC+1, New York UTC-5
DAY = 86400.0
REPORT = {"title": "Nightly report"}


def utc(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 1, day, hour, minute, tzinfo=dt.UTC)


def write_tree(
    root: Path,
    schedules: dict[str, dict[str, Any] | str],
    automations: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """(Re)write a factory ``acme``; a schedule given as a string is written as it is."""
    if root.exists():
        shutil.rmtree(root)
    (root / "schedules").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    for name, front in (automations or {}).items():
        (root / "automations" / name).mkdir(parents=True)
        (root / "automations" / name / "automation.md").write_text(
            f"---\n{yaml.safe_dump(front)}---\nReport.\n"
        )
    for name, spec in schedules.items():
        text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
        (root / "schedules" / f"{name}.yaml").write_text(text)
    return root


def nightly(**kw: Any) -> dict[str, Any]:
    return {"cron": "0 6 * * *", "timezone": "Europe/Berlin", "automation": "report", **kw}


def adhoc(**kw: Any) -> dict[str, Any]:
    return {"cron": "0 2 * * *", "prompt": "Check the dependencies.", "config": {"model_id": "m1"}, **kw}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


async def run(
    sessions: Sessions, box: SecretBox, clock: ManualClock, root: Path, **kw: Any
) -> ReconcileOutcome:
    kw.setdefault("revision", None)
    return await reconcile(sessions, box, clock, team="default", root=root, **kw)


async def schedules(sessions: Sessions) -> dict[str, Schedule]:
    async with sessions() as s:
        return {row.name: row for row in (await s.execute(select(Schedule))).scalars()}


async def store_contents(sessions: Sessions) -> dict[str, list[tuple[str, ...]]]:
    """Every row apply may write, as comparable text."""
    out: dict[str, list[tuple[str, ...]]] = {}
    async with sessions() as s:
        for model in (Factory, Automation, Schedule, ScheduleFire):
            rows = (await s.execute(select(model))).scalars()
            columns = [c.key for c in model.__mapper__.column_attrs]
            out[model.__tablename__] = sorted(tuple(str(getattr(r, c)) for c in columns) for r in rows)
    return out


async def test_first_apply_creates_schedules_then_nothing_changes(sessions, box, clock, tmp_path) -> None:
    root = write_tree(tmp_path / "f", {"nightly": nightly(), "adhoc": adhoc()}, {"report": REPORT})
    planned = await run(sessions, box, clock, root, dry_run=True)
    assert planned.outcome == "planned", planned.errors_json()
    assert await schedules(sessions) == {}  # a plan writes nothing
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert [(c.action, c.kind, c.name) for c in result.plan.changes] == [
        ("create", "factory", "acme"),
        ("create", "automation", "report"),
        ("create", "schedule", "adhoc"),
        ("create", "schedule", "nightly"),
    ]
    rows = await schedules(sessions)
    uids = {c.name: c.uid for c in result.plan.changes}
    for name, row in rows.items():
        assert row.uid.startswith("sch_") and row.uid == uids[name]
        assert (row.managed_by, row.factory_uid, row.definition_path) == (
            "definitions",
            result.factory_uid,
            f"schedules/{name}.yaml",
        )
        assert row.enabled is True and row.last_fired_at is None and row.run_metadata == {}
    assert rows["nightly"].next_fire_at == utc(1, 5)  # 06:00 in Berlin
    assert (rows["nightly"].automation, rows["nightly"].prompt, rows["nightly"].agent_config) == (
        "report",
        None,
        {},
    )
    assert rows["adhoc"].next_fire_at == utc(1, 2)
    assert (rows["adhoc"].automation, rows["adhoc"].prompt, rows["adhoc"].agent_config) == (
        None,
        "Check the dependencies.",
        {"model_id": "m1"},
    )
    assert rows["adhoc"].spec_digest == digest(
        {
            "cron": "0 2 * * *",
            "timezone": "UTC",
            "automation": None,
            "prompt": "Check the dependencies.",
            "config": {"model_id": "m1"},
            "enabled": True,
        }
    )
    before = await store_contents(sessions)
    again = await run(sessions, box, clock, root)
    assert again.outcome == "noop" and not again.has_changes
    after = await store_contents(sessions)
    assert after["schedules"] == before["schedules"]


async def test_next_fire_at_moves_only_when_the_timing_changes(sessions, box, clock, tmp_path) -> None:
    current = {"nightly": nightly(), "adhoc": adhoc()}
    root = write_tree(tmp_path / "f", current, {"report": REPORT})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    clock.advance(DAY)  # 2026-01-02 00:00 UTC: a recomputed fire would now be a day later

    async def edit(name: str, **changes: Any) -> dict[str, Schedule]:
        """Apply ``changes`` to one schedule's file; the plan must update exactly those fields."""
        current[name] = {**current[name], **changes}
        write_tree(root, current, {"report": REPORT})
        result = await run(sessions, box, clock, root)
        assert result.outcome == "succeeded", result.errors_json()
        compared = tuple(k for k in changes if k != "description")
        assert [(c.action, c.name, c.fields) for c in result.plan.changes] == [("update", name, compared)]
        return await schedules(sessions)

    rows = await edit("adhoc", prompt="Check them twice.", config={"model_id": "m2"}, description="x")
    assert rows["adhoc"].next_fire_at == utc(1, 2) and rows["adhoc"].agent_config == {"model_id": "m2"}

    rows = await edit("adhoc", cron="30 3 * * *")
    assert rows["adhoc"].next_fire_at == utc(2, 3, 30)

    rows = await edit("nightly", timezone="America/New_York")
    assert rows["nightly"].next_fire_at == utc(2, 11)  # 06:00 in New York
    assert rows["adhoc"].next_fire_at == utc(2, 3, 30)  # untouched rows keep theirs

    rows = await edit("adhoc", enabled=False)
    assert rows["adhoc"].enabled is False and rows["adhoc"].next_fire_at is None

    clock.advance(4 * 3600)  # 04:00 UTC: today's 03:30 has passed
    rows = await edit("adhoc", enabled=True)
    assert rows["adhoc"].next_fire_at == utc(3, 3, 30)
    assert rows["nightly"].next_fire_at == utc(2, 11)


async def test_delete_removes_the_row_and_its_fires_and_rename_is_a_replace(
    sessions, box, clock, tmp_path
) -> None:
    root = write_tree(tmp_path / "f", {"old": adhoc(), "gone": adhoc(cron="0 9 * * *")})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    rows = await schedules(sessions)
    async with sessions() as s, s.begin():
        s.add(ScheduleFire(schedule_uid=rows["gone"].uid, fire_time=utc(1, 9), run_id=None, created_at=START))
    clock.advance(DAY)
    write_tree(root, {"new": adhoc()})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    [replaced, deleted] = result.plan.changes
    assert (replaced.action, replaced.old_name, replaced.old_uid, replaced.name) == (
        "replace",
        "old",
        rows["old"].uid,
        "new",
    )
    assert (deleted.action, deleted.name, deleted.uid) == ("delete", "gone", rows["gone"].uid)
    after = await schedules(sessions)
    assert list(after) == ["new"] and after["new"].uid == replaced.uid != rows["old"].uid
    assert after["new"].next_fire_at == utc(2, 2)  # a new schedule: timed from this apply
    async with sessions() as s:
        assert (await s.execute(select(ScheduleFire))).scalars().all() == []
    assert result.plan.summary() == {"add": 1, "change": 0, "destroy": 2}


async def test_an_automation_renamed_in_the_same_commit_updates_the_schedule(
    sessions, box, clock, tmp_path
) -> None:
    root = write_tree(tmp_path / "f", {"nightly": nightly()}, {"report": REPORT})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    before = (await schedules(sessions))["nightly"]
    write_tree(root, {"nightly": nightly(automation="daily-report")}, {"daily-report": REPORT})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert [(c.action, c.kind, c.name, c.fields) for c in result.plan.changes] == [
        ("replace", "automation", "daily-report", ()),
        ("update", "schedule", "nightly", ("automation",)),
    ]
    after = (await schedules(sessions))["nightly"]
    assert (after.uid, after.automation, after.next_fire_at) == (
        before.uid,
        "daily-report",
        before.next_fire_at,
    )


BAD = [
    pytest.param(
        'cron: "0 2 * * *"\nprompt: x\n', 'cron: "61 2 * * *"\nprompt: x\n', "FC070", 1, 7, id="cron"
    ),
    pytest.param(
        'cron: "0 2 * * *"\nprompt: x\n',
        'cron: "0 2 * * *"\ntimezone: Europe/Berln\nprompt: x\n',
        "FC071",
        2,
        11,
        id="zone",
    ),
    pytest.param(
        'cron: "0 2 * * *"\nautomation: report\n',
        'cron: "0 2 * * *"\nautomation: reprot\n',
        "FC072",
        2,
        13,
        id="automation",
    ),
]


@pytest.mark.parametrize(("good", "bad", "rule", "line", "column"), BAD)
async def test_an_invalid_schedule_applies_nothing(  # type: ignore[no-untyped-def]
    sessions, box, clock, tmp_path, good: str, bad: str, rule: str, line: int, column: int
) -> None:
    root = tmp_path / "f"
    # On an empty store: no factory, no automation, no schedule; only the failure is recorded.
    write_tree(root, {"s": bad, "other": adhoc()}, {"report": REPORT})
    failed = await run(sessions, box, clock, root, revision="bad-1")
    assert failed.outcome == "failed" and failed.plan is None
    assert [(d.rule, d.path, d.line, d.column) for d in failed.diagnostics] == [
        (rule, f"{root.as_posix()}/schedules/s.yaml", line, column)
    ]
    contents = await store_contents(sessions)
    assert all(rows == [] for rows in contents.values())
    # On a store with a good revision: everything else the bad revision changes is not written either.
    write_tree(root, {"s": good, "other": adhoc()}, {"report": REPORT})
    assert (await run(sessions, box, clock, root, revision="good")).outcome == "succeeded"
    before = await store_contents(sessions)
    write_tree(
        root, {"s": bad, "other": adhoc(enabled=False), "added": adhoc()}, {"report": REPORT, "more": {}}
    )
    failed = await run(sessions, box, clock, root, revision="bad-2")
    assert failed.outcome == "failed" and [d.rule for d in failed.diagnostics] == [rule]
    assert str(failed.diagnostics[0]).startswith(
        f"{root.as_posix()}/schedules/s.yaml:{line}:{column}: error[{rule}]"
    )
    after = await store_contents(sessions)
    factory_before, factory_after = before.pop("factories"), after.pop("factories")
    assert after == before
    async with sessions() as s:
        [factory] = (await s.execute(select(Factory))).scalars()
        history = (await s.execute(select(ApplyRecord.revision, ApplyRecord.outcome))).all()
    assert (factory.last_applied_revision, factory.last_attempted_revision) == ("good", "bad-2")
    assert len(factory_after) == len(factory_before) == 1
    assert sorted(history) == [("bad-1", "failed"), ("bad-2", "failed"), ("good", "succeeded")]


async def test_a_tree_of_schedules_only_is_not_empty(sessions, box, clock, tmp_path) -> None:
    root = write_tree(tmp_path / "f", {"adhoc": adhoc()})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    write_tree(root, {})
    refused = await run(sessions, box, clock, root)
    assert [d.rule for d in refused.diagnostics] == ["FC050"] and list(await schedules(sessions)) == ["adhoc"]
    assert (await run(sessions, box, clock, root, allow_empty=True)).outcome == "succeeded"
    assert await schedules(sessions) == {}


async def test_a_schedule_config_may_only_reference_run_secrets(sessions, box, clock, tmp_path) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, "hook-token", "value-123")  # scope: webhook
    config = {
        "mcp_servers": {"gh": {"url": "https://gh.example/mcp", "headers": {"TOKEN": "secret:hook-token"}}}
    }
    root = write_tree(tmp_path / "f", {"adhoc": adhoc(config=config)})
    result = await run(sessions, box, clock, root)
    assert [(d.rule, Path(d.path).name, d.line) for d in result.diagnostics] == [("FC044", "adhoc.yaml", 8)]
    assert await schedules(sessions) == {}
