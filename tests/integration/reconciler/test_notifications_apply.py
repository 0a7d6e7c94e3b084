"""Applying notifications/<name>.yaml to real stores (SQLite and PostgreSQL): rows, canonical events and
filters, the sender's state kept across updates, renames, the secret checks, and invalid endpoints that
apply nothing at all."""

from __future__ import annotations

import base64
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import builders
import pytest
import yaml
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler.service import ReconcileOutcome, reconcile
from reconciler.specs import digest
from store import ids
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import ApplyRecord, Factory, NotificationEndpoint, NotificationMessage, Run
from store.teams import ensure_team

Sessions = async_sessionmaker[AsyncSession]
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = 86400.0
SECRET = "OPS_HOOK"
WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def write_tree(root: Path, notifications: dict[str, dict[str, Any] | str]) -> Path:
    """(Re)write a factory ``acme``; an endpoint given as a string is written as it is."""
    if root.exists():
        shutil.rmtree(root)
    (root / "notifications").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    for name, spec in notifications.items():
        text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
        (root / "notifications" / f"{name}.yaml").write_text(text)
    return root


def ops(**kw: Any) -> dict[str, Any]:
    return {"url": "https://hooks.example.com/factory", "secretName": SECRET, "events": ["FAILED"], **kw}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def team_id(sessions: Sessions, box: SecretBox, clock: ManualClock) -> str:
    """The default team, with a Standard Webhooks secret of scope ``webhook`` called ``OPS_HOOK``."""
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await builders.secret(s, box, clock, team.id, SECRET, WHSEC)
        return team.id


async def run(
    sessions: Sessions, box: SecretBox, clock: ManualClock, root: Path, **kw: Any
) -> ReconcileOutcome:
    kw.setdefault("revision", None)
    return await reconcile(sessions, box, clock, team="default", root=root, **kw)


async def endpoints(sessions: Sessions) -> dict[str, NotificationEndpoint]:
    async with sessions() as s:
        return {row.name: row for row in (await s.execute(select(NotificationEndpoint))).scalars()}


async def store_contents(sessions: Sessions) -> dict[str, list[tuple[str, ...]]]:
    """Every row apply may write, as comparable text."""
    out: dict[str, list[tuple[str, ...]]] = {}
    async with sessions() as s:
        for model in (Factory, NotificationEndpoint):
            rows = (await s.execute(select(model))).scalars()
            columns = [c.key for c in model.__mapper__.column_attrs]
            out[model.__tablename__] = sorted(tuple(str(getattr(r, c)) for c in columns) for r in rows)
    return out


async def test_create_then_nothing_changes(sessions, box, clock, team_id, tmp_path) -> None:  # type: ignore[no-untyped-def]
    full = ops(
        events=["SUCCEEDED", "run.failed", "FAILED", "ERROR"],
        filter={"factories": ["*"], "automations": ["triage", "triage"], "sources": ["CUSTOM_WEBHOOK"]},
        enabled=False,
        description="Tell the ops channel when a run ends",
    )
    root = write_tree(tmp_path / "f", {"ops-alerts": full, "local": ops(url="http://127.0.0.1:9000/hook")})
    planned = await run(sessions, box, clock, root, dry_run=True)
    assert planned.outcome == "planned", planned.errors_json()
    assert await endpoints(sessions) == {}  # a plan writes nothing
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert result.plan is not None
    assert [(c.action, c.kind, c.name) for c in result.plan.changes] == [
        ("create", "factory", "acme"),
        ("create", "notification", "local"),
        ("create", "notification", "ops-alerts"),
    ]
    rows = await endpoints(sessions)
    uids = {c.name: c.uid for c in result.plan.changes}
    for name, row in rows.items():
        assert row.uid.startswith("ne_") and row.uid == uids[name]
        assert (row.team_id, row.factory_uid, row.managed_by, row.definition_path) == (
            team_id,
            result.factory_uid,
            "definitions",
            f"notifications/{name}.yaml",
        )
        assert (row.failing, row.consecutive_failures, row.failing_since, row.last_success_at) == (
            False,
            0,
            None,
            None,
        )
        assert row.created_at == row.updated_at == START
    alerts = rows["ops-alerts"]
    fields = {
        "url": "https://hooks.example.com/factory",
        "secret_name": SECRET,
        "events": ["SUCCEEDED", "FAILED", "ERROR"],
        "filter": {"factories": ["*"], "automations": ["triage"], "sources": ["CUSTOM_WEBHOOK"]},
        "enabled": False,
        "description": "Tell the ops channel when a run ends",
    }
    assert {key: getattr(alerts, key) for key in fields} == fields
    assert alerts.spec_digest == digest(fields)
    assert (rows["local"].url, rows["local"].events, rows["local"].filter) == (
        "http://127.0.0.1:9000/hook",
        ["FAILED"],
        {},
    )
    before = await store_contents(sessions)
    clock.advance(DAY)
    again = await run(sessions, box, clock, root)
    assert again.outcome == "noop" and not again.has_changes
    assert (await store_contents(sessions))["notification_endpoints"] == before["notification_endpoints"]


async def test_an_update_keeps_the_senders_state(sessions, box, clock, team_id, tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = write_tree(tmp_path / "f", {"ops": ops(), "other": ops()})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    failing_since = START + dt.timedelta(hours=3)
    last_success = START + dt.timedelta(hours=1)
    async with sessions() as s, s.begin():  # what the sender records after ten failed attempts
        await s.execute(
            update(NotificationEndpoint)
            .where(NotificationEndpoint.name == "ops")
            .values(
                failing=True,
                consecutive_failures=10,
                failing_since=failing_since,
                last_success_at=last_success,
            )
        )
    before = await endpoints(sessions)
    clock.advance(DAY)
    async with sessions() as s, s.begin():
        await builders.secret(s, box, clock, team_id, "NEW_HOOK", WHSEC)
    edited = ops(
        url="https://other.example.org/hook",
        secretName="NEW_HOOK",
        events=["run.*"],
        filter={"sources": ["API"]},
        enabled=False,
        description="moved",
    )
    write_tree(root, {"ops": edited, "other": ops()})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert result.plan is not None
    assert [(c.action, c.name, c.fields) for c in result.plan.changes] == [
        ("update", "ops", ("url", "secret_name", "events", "filter", "enabled", "description"))
    ]
    after = await endpoints(sessions)
    row = after["ops"]
    assert (row.uid, row.created_at, row.updated_at) == (
        before["ops"].uid,
        START,
        START + dt.timedelta(days=1),
    )
    assert (row.url, row.secret_name, row.events, row.filter, row.enabled, row.description) == (
        "https://other.example.org/hook",
        "NEW_HOOK",
        ["run.*"],
        {"sources": ["API"]},
        False,
        "moved",
    )
    assert (row.failing, row.consecutive_failures, row.failing_since, row.last_success_at) == (
        True,
        10,
        failing_since,
        last_success,
    )
    assert after["other"].updated_at == START  # untouched rows are not written


async def test_delete_removes_the_row_and_its_messages_and_rename_is_a_replace(  # type: ignore[no-untyped-def]
    sessions, box, clock, team_id, tmp_path
) -> None:
    root = write_tree(tmp_path / "f", {"old": ops(), "gone": ops(events=["ERROR"])})
    applied = await run(sessions, box, clock, root)
    assert applied.outcome == "succeeded"
    rows = await endpoints(sessions)
    async with sessions() as s, s.begin():  # a message the sender has not delivered yet
        run_row = await builders.run(s, clock, team_id, factory_uid=applied.factory_uid)
        s.add(
            NotificationMessage(
                id=ids.new_id(ids.MESSAGE),
                team_id=team_id,
                endpoint_uid=rows["gone"].uid,
                run_id=run_row.run_id,
                event_id=1,
                event_type="run.error",
                payload="{}",
                status="pending",
                next_attempt_at=START,
                created_at=START,
            )
        )
    write_tree(root, {"new": ops()})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert result.plan is not None
    [replaced, deleted] = result.plan.changes
    assert (replaced.action, replaced.old_name, replaced.old_uid, replaced.name) == (
        "replace",
        "old",
        rows["old"].uid,
        "new",
    )
    assert (deleted.action, deleted.name, deleted.uid) == ("delete", "gone", rows["gone"].uid)
    assert result.plan.summary() == {"add": 1, "change": 0, "destroy": 2}
    after = await endpoints(sessions)
    assert list(after) == ["new"] and after["new"].uid == replaced.uid != rows["old"].uid
    async with sessions() as s:
        assert (await s.execute(select(NotificationMessage))).scalars().all() == []
        assert [r.run_id for r in (await s.execute(select(Run))).scalars()] == [run_row.run_id]


async def test_an_endpoint_created_by_other_means_is_pruned(  # type: ignore[no-untyped-def]
    sessions, box, clock, team_id, tmp_path
) -> None:
    root = write_tree(tmp_path / "f", {"ops": ops()})
    applied = await run(sessions, box, clock, root)
    assert applied.outcome == "succeeded" and applied.factory_uid is not None
    async with sessions() as s, s.begin():
        stray = await builders.notification(s, clock, team_id, applied.factory_uid, "stray", events=["ERROR"])
    result = await run(sessions, box, clock, root)
    assert result.plan is not None
    assert [(c.action, c.name, c.uid) for c in result.plan.changes] == [("delete", "stray", stray.uid)]
    assert list(await endpoints(sessions)) == ["ops"]


# (file text, rule, line, column) of notifications that must not apply
BAD = [
    pytest.param(
        "url: https://169.254.169.254/latest/meta-data/\nsecretName: OPS_HOOK\nevents: [FAILED]\n",
        "FC080",
        1,
        6,
        id="metadata-address",
    ),
    pytest.param(
        "# plain http\nsecretName: OPS_HOOK\nevents: [FAILED]\nurl: http://example.com/hook\n",
        "FC080",
        4,
        6,
        id="plain-http",
    ),
    pytest.param(
        "url: https://hooks.example.com/\nsecretName: OPS_HOOK\nevents: [SUCCEEDED, DONE]\n",
        "FC081",
        3,
        21,
        id="event",
    ),
    pytest.param(
        "url: https://h.example/\nsecretName: OPS_HOOK\nevents: [FAILED]\nfilter:\n  sources: [WEB]\n",
        "FC081",
        5,
        13,
        id="source",
    ),
    pytest.param(
        "url: https://hooks.example.com/\nsecretName: NOPE\nevents: [FAILED]\n", "FC040", 2, 1, id="no-secret"
    ),
    pytest.param(
        "url: https://hooks.example.com/\nsecretName: OPS_HOOK\nevents: [FAILED]\nenabled: 'no'\n",
        "FC010",
        4,
        10,
        id="schema",
    ),
]


@pytest.mark.parametrize(("bad", "rule", "line", "column"), BAD)
async def test_an_invalid_notification_applies_nothing(  # type: ignore[no-untyped-def]
    sessions, box, clock, team_id, tmp_path, bad: str, rule: str, line: int, column: int
) -> None:
    root = tmp_path / "f"
    # On an empty store: no factory, no endpoint; only the failure is recorded.
    write_tree(root, {"n": bad, "other": ops()})
    failed = await run(sessions, box, clock, root, revision="bad-1")
    assert failed.outcome == "failed" and failed.plan is None
    assert [(d.rule, d.path, d.line, d.column) for d in failed.diagnostics] == [
        (rule, f"{root.as_posix()}/notifications/n.yaml", line, column)
    ]
    assert all(rows == [] for rows in (await store_contents(sessions)).values())
    # On a store with a good revision: nothing else the bad revision changes is written either.
    write_tree(root, {"n": ops(), "other": ops()})
    assert (await run(sessions, box, clock, root, revision="good")).outcome == "succeeded"
    before = await store_contents(sessions)
    clock.advance(DAY)
    write_tree(root, {"n": bad, "other": ops(enabled=False), "added": ops()})
    failed = await run(sessions, box, clock, root, revision="bad-2")
    assert failed.outcome == "failed" and [d.rule for d in failed.diagnostics] == [rule]
    assert str(failed.diagnostics[0]).startswith(
        f"{root.as_posix()}/notifications/n.yaml:{line}:{column}: error[{rule}]"
    )
    after = await store_contents(sessions)
    assert after["notification_endpoints"] == before["notification_endpoints"]
    async with sessions() as s:
        [factory] = (await s.execute(select(Factory))).scalars()
        history = (await s.execute(select(ApplyRecord.revision, ApplyRecord.outcome))).all()
    assert (factory.last_applied_revision, factory.last_attempted_revision) == ("good", "bad-2")
    assert sorted(history) == [("bad-1", "failed"), ("bad-2", "failed"), ("good", "succeeded")]


async def test_the_signing_secret_must_be_a_standard_webhooks_secret_runs_cannot_read(  # type: ignore[no-untyped-def]
    sessions, box, clock, team_id, tmp_path
) -> None:
    async with sessions() as s, s.begin():
        await builders.secret(s, box, clock, team_id, "RUN_HOOK", WHSEC, scope="run")
        await builders.secret(s, box, clock, team_id, "PLAIN", "not-a-standard-webhooks-secret")
    root = write_tree(
        tmp_path / "f",
        {
            "missing": ops(secretName="MISSING"),
            "run": "# runs may read it\n" + yaml.safe_dump(ops(secretName="RUN_HOOK"), sort_keys=False),
            "plain": ops(secretName="PLAIN"),
            "ok": ops(),
        },
    )
    result = await run(sessions, box, clock, root)
    assert result.outcome == "failed"
    shown = f"{root.as_posix()}/notifications"
    assert [(d.rule, d.path, d.line) for d in result.diagnostics] == [
        ("FC040", f"{shown}/missing.yaml", 2),
        ("FC042", f"{shown}/plain.yaml", 2),
        ("FC044", f"{shown}/run.yaml", 3),
    ]
    missing, plain, scope = result.diagnostics
    assert missing.message == "team secret 'MISSING' does not exist"
    assert missing.hint is not None and "whsec_$(openssl rand -base64 32)" in missing.hint
    assert plain.message.startswith("secret 'PLAIN' is not a Standard Webhooks secret: expected 'whsec_'")
    assert "not-a-standard" not in str(plain)  # values never appear
    assert scope.message == (
        "team secret 'RUN_HOOK' may not sign notifications (scope: run); use a webhook-scoped secret"
    )
    assert scope.hint is not None and "factoryctl secrets set RUN_HOOK --scope webhook" in scope.hint
    assert await endpoints(sessions) == {}


async def test_a_tree_of_notifications_only_is_not_empty(  # type: ignore[no-untyped-def]
    sessions, box, clock, team_id, tmp_path
) -> None:
    root = write_tree(tmp_path / "f", {"ops": ops()})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    write_tree(root, {})
    refused = await run(sessions, box, clock, root)
    assert [d.rule for d in refused.diagnostics] == ["FC050"] and list(await endpoints(sessions)) == ["ops"]
    assert (await run(sessions, box, clock, root, allow_empty=True)).outcome == "succeeded"
    assert await endpoints(sessions) == {}
