"""Sync status, manager claims and commits on real databases (docs/reconcile.md, "Sync status", "Who manages
a factory")."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import func, select, update
from test_apply import add_secret, hook, rows, run, write_tree

from reconciler.sources import Snapshot
from reconciler.sync import Checked, check, release
from reconciler.syncstate import Manager
from store.clock import ManualClock
from store.models import ApplyRecord, Factory, Webhook

SERVE = Manager("git", "https://github.com/acme/defs.git@main", ttl_seconds=60)
COMMIT = {
    "sha": "a" * 40,
    "subject": "Add the alerts webhook",
    "author": "Ada",
    "author_email": "ada@example.com",
    "committed_at": "2026-11-26T12:00:00+00:00",
    "remote": "https://github.com/acme/defs.git",
    "url": "https://github.com/acme/defs/commit/" + "a" * 40,
}


async def compare(sessions, box, clock, snapshot: Snapshot, name: str | None = None) -> Checked | None:
    return await check(sessions, box, clock, team="default", snapshot=snapshot, source="x", factory_name=name)


async def factory(sessions) -> Factory:
    [row] = await rows(sessions, Factory)
    return row


async def history_count(sessions) -> int:
    async with sessions() as s:
        return int((await s.execute(select(func.count()).select_from(ApplyRecord))).scalar_one())


async def test_serve_apply_records_commit_manager_and_synced(sessions, box, clock, tmp_path: Path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook()})
    result = await run(sessions, box, clock, root, revision="a" * 40, commit=COMMIT, manager=SERVE)
    assert result.outcome == "succeeded", result.errors_json()
    row = await factory(sessions)
    assert row.applied_commit == COMMIT
    assert row.sync is not None and row.sync["status"] == "Synced" and row.sync["revision"] == "a" * 40
    assert row.manager is not None and row.manager["location"] == SERVE.location
    [record] = await rows(sessions, ApplyRecord)
    assert record.commit == COMMIT

    # A directory apply replaces the commit: the revision is no longer one.
    again = await run(sessions, box, clock, root, manager=SERVE)
    assert again.outcome == "noop" and (await factory(sessions)).applied_commit is None


async def test_drift_is_listed_object_by_object(sessions, box, clock, tmp_path: Path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook(), "quiet": hook()})
    await run(sessions, box, clock, root, manager=SERVE)
    snapshot = Snapshot(root, None)

    synced = await check(
        sessions, box, clock, team="default", snapshot=snapshot, source="x", factory_name=None
    )
    assert synced is not None and synced.record["status"] == "Synced" and not synced.out_of_sync

    # A change made through the store (as the API makes it) to a definitions-managed object.
    async with sessions() as s, s.begin():
        await s.execute(update(Webhook).where(Webhook.name == "alerts").values(enabled=False))
    drifted = await check(
        sessions, box, clock, team="default", snapshot=snapshot, source="x", factory_name=None
    )
    assert drifted is not None and drifted.out_of_sync
    assert [(d["action"], d["kind"], d["name"], d["fields"]) for d in drifted.drift] == [
        ("update", "webhook", "alerts", ["enabled"])
    ]
    stored = (await factory(sessions)).sync
    assert stored is not None and stored["status"] == "OutOfSync" and stored["drift"] == drifted.drift

    # Re-applying the source corrects it; the next check says so.
    healed = await run(sessions, box, clock, root, manager=SERVE)
    assert [c.name for c in healed.plan.changes] == ["alerts"]
    again = await check(
        sessions, box, clock, team="default", snapshot=snapshot, source="x", factory_name=None
    )
    assert again is not None and again.record["status"] == "Synced"


async def test_secret_changes_show_field_names_only(sessions, box, clock, tmp_path: Path) -> None:
    await add_secret(sessions, box, clock)
    await add_secret(sessions, box, clock, name="other-secret", value="do-not-show-this-value")
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook()})
    await run(sessions, box, clock, root)
    write_tree(root, webhooks={"alerts": hook(secret="other-secret")})
    checked = await check(
        sessions, box, clock, team="default", snapshot=Snapshot(root, None), source="x", factory_name=None
    )
    assert checked is not None and checked.drift[0]["fields"] == ["secret_name"]
    assert "do-not-show-this-value" not in repr((await factory(sessions)).sync)


async def test_invalid_source_is_unknown(sessions, box, clock, tmp_path: Path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook()})
    await run(sessions, box, clock, root)
    write_tree(root, webhooks={"alerts": hook(secret="missing-secret")})
    checked = await check(
        sessions, box, clock, team="default", snapshot=Snapshot(root, None), source="x", factory_name="acme"
    )
    assert checked is not None and checked.record["status"] == "Unknown"
    assert "missing-secret" in checked.record["message"]


async def test_apply_to_a_managed_factory_is_refused_unless_forced(
    sessions, box, clock, tmp_path: Path
) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook()})
    await run(sessions, box, clock, root, manager=SERVE)
    before = await history_count(sessions)
    other = write_tree(tmp_path / "other", webhooks={"alerts": hook(), "extra": hook()})

    refused = await run(sessions, box, clock, other)
    assert refused.outcome == "failed" and refused.reason == "ManagedElsewhere"
    assert refused.error is not None and SERVE.location in refused.error and "--force" in refused.error
    assert await history_count(sessions) == before  # nothing recorded: the live state is fine
    assert {w.name for w in await rows(sessions, Webhook)} == {"alerts"}
    ready = next(c for c in (await factory(sessions)).conditions if c["type"] == "Ready")
    assert ready["status"] == "True"

    # Another serve following a different source is refused the same way.
    rival = Manager("directory", "/elsewhere", ttl_seconds=60)
    assert (await run(sessions, box, clock, other, manager=rival)).reason == "ManagedElsewhere"

    forced = await run(sessions, box, clock, other, force=True)
    assert forced.outcome == "succeeded"
    row = await factory(sessions)
    assert row.sync is not None and row.sync["status"] == "Unknown" and "--force" in row.sync["message"]
    assert row.manager is not None and row.manager["location"] == SERVE.location  # still the manager

    await release(sessions, team="default", factory_name="acme", manager=rival)  # not its claim
    assert (await factory(sessions)).manager is not None
    await release(sessions, team="default", factory_name="acme", manager=SERVE)
    assert (await factory(sessions)).manager is None
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"


async def test_a_lapsed_claim_does_not_block(sessions, box, tmp_path: Path) -> None:
    clock = ManualClock(dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC))
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"alerts": hook()})
    await run(sessions, box, clock, root, manager=SERVE)
    other = write_tree(tmp_path / "other", webhooks={"alerts": hook(description="x")})
    clock.advance(SERVE.ttl_seconds - 1)
    assert (await run(sessions, box, clock, other)).reason == "ManagedElsewhere"
    clock.advance(2)
    assert (await run(sessions, box, clock, other)).outcome == "succeeded"


async def test_an_empty_tree_applied_with_allow_empty_is_compared_the_same_way(
    sessions, box, clock, tmp_path
) -> None:
    root = write_tree(tmp_path / "f")
    assert (await run(sessions, box, clock, root, allow_empty=True)).outcome == "succeeded"
    snapshot = Snapshot(root, None)
    kw = {"team": "default", "snapshot": snapshot, "source": "x", "factory_name": None}
    allowed = await check(sessions, box, clock, allow_empty=True, **kw)
    assert allowed is not None and allowed.record["status"] == "Synced"
    refused = await check(sessions, box, clock, **kw)
    assert (
        refused is not None and refused.record["status"] == "Unknown" and "FC050" in refused.record["message"]
    )
