"""Apply on real databases: UIDs, updates, prunes, renames, atomicity, history, rotation, locking."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select

from reconciler.loadcache import LoadCache
from reconciler.service import ReconcileOutcome, reconcile
from store import secrets as secret_store
from store.models import ApplyRecord, Automation, AutomationWebhook, Environment, Factory, Webhook
from store.teams import ensure_team


def write_tree(
    root: Path,
    *,
    name: str = "acme",
    webhooks: dict[str, dict[str, Any]] | None = None,
    automations: dict[str, dict[str, Any]] | None = None,
    environments: dict[str, dict[str, Any]] | None = None,
    description: str | None = None,
) -> Path:
    """(Re)write a whole factory directory; an automation dict's ``prompt`` becomes the Markdown body."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    factory: dict[str, Any] = {"name": name}
    if description:
        factory["description"] = description
    (root / "factory.yaml").write_text(yaml.safe_dump(factory))
    for stem, spec in (webhooks or {}).items():
        (root / "webhooks").mkdir(exist_ok=True)
        (root / "webhooks" / f"{stem}.yaml").write_text(yaml.safe_dump(spec))
    for stem, spec in (automations or {}).items():
        front = dict(spec)
        prompt = front.pop("prompt", f"Handle the event for {stem}.")
        (root / "automations" / stem).mkdir(parents=True)
        text = f"---\n{yaml.safe_dump(front)}---\n{prompt}\n"
        (root / "automations" / stem / "automation.md").write_text(text)
    for stem, spec in (environments or {}).items():
        (root / "environments").mkdir(exist_ok=True)
        (root / "environments" / f"{stem}.yaml").write_text(yaml.safe_dump(spec))
    return root


def hook(secret: str = "hook-secret", **kw: Any) -> dict[str, Any]:
    return {"authMode": "token", "secretName": secret, **kw}


def trigger(*uids: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    flt: dict[str, Any] = {"webhook_ids": list(uids)}
    if payload is not None:
        flt["payload"] = payload
    return {"provider": "webhook", "event": "received", "filter": flt}


async def add_secret(sessions, box, clock, name: str = "hook-secret", value: str = "v1-secret-value") -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, name, value)


async def rotate(sessions, box, clock, name: str = "hook-secret") -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.set_value(s, box, clock, team.id, name, "rotated-value")


async def run(sessions, box, clock, root: Path, **kw: Any) -> ReconcileOutcome:
    kw.setdefault("revision", None)
    return await reconcile(sessions, box, clock, team="default", root=root, **kw)


async def rows(sessions, model: Any, *where: Any) -> list[Any]:
    async with sessions() as s:
        return list((await s.execute(select(model).where(*where))).scalars())


async def snapshot(sessions) -> dict[str, Any]:
    """Everything apply may touch, as comparable values (counts and digests)."""
    async with sessions() as s:
        out: dict[str, Any] = {}
        for model, cols in (
            (Factory, ("uid", "spec_digest", "last_applied_revision", "description")),
            (Webhook, ("uid", "name", "spec_digest", "secret_version", "deleted_at", "enabled")),
            (Automation, ("uid", "name", "spec_digest")),
            (Environment, ("uid", "name", "spec_digest")),
            (AutomationWebhook, ("automation_uid", "trigger_index", "webhook_uid")),
        ):
            found = (await s.execute(select(*[getattr(model, c) for c in cols]))).all()
            out[model.__tablename__] = sorted(tuple(str(v) for v in r) for r in found)
        return out


async def live_hooks(sessions) -> dict[str, Webhook]:
    return {w.name: w for w in await rows(sessions, Webhook, Webhook.deleted_at.is_(None))}


async def test_first_apply_creates_everything_with_prefixed_uids(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"github": hook(description="gh"), "stripe": hook()})
    result = await run(sessions, box, clock, root, revision="abc123")
    assert result.outcome == "succeeded", result.errors_json()
    assert result.plan is not None and result.plan.summary() == {"add": 3, "change": 0, "destroy": 0}
    [factory] = await rows(sessions, Factory)
    assert factory.uid.startswith("fa_") and factory.uid == result.factory_uid
    assert factory.managed_by == "definitions" and factory.last_applied_revision == "abc123"
    hooks = await live_hooks(sessions)
    assert set(hooks) == {"github", "stripe"}
    assert all(w.uid.startswith("wh_") and w.secret_version == 1 for w in hooks.values())
    assert hooks["github"].definition_path == "webhooks/github.yaml" and hooks["github"].description == "gh"
    by_name = {c.name: c.uid for c in result.plan.changes}
    assert by_name == {"acme": factory.uid, "github": hooks["github"].uid, "stripe": hooks["stripe"].uid}


async def test_uids_are_stable_and_updates_touch_only_changed_fields(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook(), "b": hook()})
    await run(sessions, box, clock, root)
    before = await live_hooks(sessions)
    write_tree(root, webhooks={"a": hook(enabled=False, description="off"), "b": hook()}, description="new")
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded"
    assert [(c.action, c.kind, c.name, c.fields) for c in result.plan.changes] == [
        ("update", "factory", "acme", ("description",)),
        ("update", "webhook", "a", ("enabled", "description")),
    ]
    after = await live_hooks(sessions)
    assert {n: w.uid for n, w in after.items()} == {n: w.uid for n, w in before.items()}
    assert after["a"].enabled is False and after["b"].updated_at == before["b"].updated_at
    again = await run(sessions, box, clock, root)
    assert again.outcome == "noop" and not again.has_changes


async def test_automations_build_routing_rows_and_prune(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook(), "b": hook()})
    await run(sessions, box, clock, root)
    uids = {n: w.uid for n, w in (await live_hooks(sessions)).items()}
    autos = {
        "triage": {
            "title": "Triage",
            "triggers": [trigger(uids["a"], uids["b"], payload={"action": "opened"})],
        },
        "other": {"triggers": [trigger(uids["a"]), trigger(uids["b"])]},
    }
    write_tree(root, webhooks={"a": hook(), "b": hook()}, automations=autos)
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    [triage] = await rows(sessions, Automation, Automation.name == "triage")
    assert triage.uid.startswith("au_") and triage.title == "Triage" and triage.prompt.startswith("Handle")
    routes = await rows(sessions, AutomationWebhook, AutomationWebhook.automation_uid == triage.uid)
    assert sorted((r.trigger_index, r.webhook_uid, r.payload_filter["action"]) for r in routes) == sorted(
        [(0, uids["a"], "opened"), (0, uids["b"], "opened")]
    )
    autos["triage"]["triggers"] = [trigger(uids["b"])]
    del autos["other"]
    write_tree(root, webhooks={"a": hook(), "b": hook()}, automations=autos)
    result = await run(sessions, box, clock, root)
    assert [(c.action, c.name) for c in result.plan.changes] == [("update", "triage"), ("delete", "other")]
    routes = await rows(sessions, AutomationWebhook)
    assert [(r.automation_uid, r.webhook_uid, r.payload_filter) for r in routes] == [
        (triage.uid, uids["b"], None)
    ]
    assert [a.name for a in await rows(sessions, Automation)] == ["triage"]


async def test_removed_webhook_file_is_soft_deleted(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"keep": hook(), "gone": hook()})
    await run(sessions, box, clock, root)
    gone_uid = (await live_hooks(sessions))["gone"].uid
    write_tree(root, webhooks={"keep": hook()})
    result = await run(sessions, box, clock, root)
    assert [(c.action, c.name, c.uid) for c in result.plan.changes] == [("delete", "gone", gone_uid)]
    [row] = await rows(sessions, Webhook, Webhook.uid == gone_uid)
    assert row.deleted_at is not None  # kept, so the UID is never reused
    write_tree(root, webhooks={"keep": hook(), "gone": hook()})
    await run(sessions, box, clock, root)
    assert (await live_hooks(sessions))["gone"].uid != gone_uid  # re-adding makes a new webhook


async def test_rename_is_a_replace_with_a_new_uid(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"old-name": hook(description="same")})
    await run(sessions, box, clock, root)
    old_uid = (await live_hooks(sessions))["old-name"].uid
    write_tree(root, webhooks={"new-name": hook(description="same")})
    result = await run(sessions, box, clock, root)
    [change] = result.plan.changes
    assert (change.action, change.old_name, change.old_uid, change.name) == (
        "replace",
        "old-name",
        old_uid,
        "new-name",
    )
    hooks = await live_hooks(sessions)
    assert list(hooks) == ["new-name"] and hooks["new-name"].uid == change.uid != old_uid
    assert result.plan.summary() == {"add": 1, "change": 0, "destroy": 1}


async def test_one_invalid_file_of_ten_leaves_the_store_exactly_as_before(
    sessions, box, clock, tmp_path
) -> None:
    await add_secret(sessions, box, clock)
    hooks = {f"h{i}": hook(description=f"v1 {i}") for i in range(10)}
    root = write_tree(tmp_path / "f", webhooks=hooks)
    first = await run(sessions, box, clock, root, revision="good")
    assert first.outcome == "succeeded"
    before = await snapshot(sessions)
    changed = {f"h{i}": hook(description=f"v2 {i}") for i in range(10)}
    write_tree(root, webhooks=changed | {"h10": hook()})
    (root / "webhooks" / "h7.yaml").write_text("authMode: token\nsecretName: [unclosed\n")
    result = await run(sessions, box, clock, root, revision="bad")
    assert result.outcome == "failed" and result.diagnostics
    assert any(d.path.endswith("h7.yaml") for d in result.diagnostics)
    assert await snapshot(sessions) == before
    [factory] = await rows(sessions, Factory)
    assert factory.last_applied_revision == "good" and factory.last_attempted_revision == "bad"
    ready = {c["type"]: c["status"] for c in factory.conditions}
    assert ready == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}
    history = await rows(sessions, ApplyRecord)
    assert [(h.revision, h.outcome) for h in history] == [("good", "succeeded"), ("bad", "failed")]
    assert history[1].errors and "h7.yaml" in history[1].errors[0]["path"]


async def test_a_missing_secret_fails_the_whole_apply(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook(), "b": hook("no-such-secret")})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "failed"
    assert [d.rule for d in result.diagnostics] == ["FC040"]
    assert await rows(sessions, Factory) == [] and await rows(sessions, Webhook) == []
    [record] = await rows(sessions, ApplyRecord)
    assert record.outcome == "failed" and record.factory_uid is None and record.factory_name == "acme"


async def test_history_records_revision_outcome_and_duration(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook()})
    first = await run(sessions, box, clock, root, revision="0123abcd")
    second = await run(sessions, box, clock, root)  # no revision: the content digest
    assert second.outcome == "noop" and second.revision.startswith("sha256:")
    history = await rows(sessions, ApplyRecord)
    assert [(h.revision, h.outcome) for h in history] == [
        ("0123abcd", "succeeded"),
        (second.revision, "noop"),
    ]
    assert all(h.duration_ms >= 0 and h.factory_uid == first.factory_uid for h in history)
    assert history[0].summary["add"] == 2 and history[0].summary["changes"][1]["kind"] == "webhook"
    [factory] = await rows(sessions, Factory)
    assert factory.last_applied_revision == second.revision  # a no-op apply still tracks the revision
    assert {c["type"]: c["status"] for c in factory.conditions}["Ready"] == "True"


async def test_rotated_secret_is_picked_up_on_the_next_apply(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook()})
    await run(sessions, box, clock, root)
    await rotate(sessions, box, clock)
    assert (await live_hooks(sessions))["a"].secret_version == 1  # keeps verifying with what it captured
    plan = await run(sessions, box, clock, root, dry_run=True)
    assert [(c.name, c.fields) for c in plan.plan.changes] == [("a", ("secret_version",))]
    assert (await live_hooks(sessions))["a"].secret_version == 1
    await run(sessions, box, clock, root)
    assert (await live_hooks(sessions))["a"].secret_version == 2


async def test_concurrent_applies_of_one_factory_do_not_corrupt(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={f"h{i}": hook() for i in range(5)})
    results = await asyncio.gather(*(run(sessions, box, clock, root) for _ in range(3)))
    assert sorted(r.outcome for r in results) == ["noop", "noop", "succeeded"]
    assert len(await rows(sessions, Factory)) == 1
    assert len(await rows(sessions, Webhook)) == 5


async def test_empty_tree_is_refused_unless_allowed(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook()})
    await run(sessions, box, clock, root)
    write_tree(root)
    refused = await run(sessions, box, clock, root)
    assert refused.outcome == "failed" and [d.rule for d in refused.diagnostics] == ["FC050"]
    assert len(await live_hooks(sessions)) == 1
    allowed = await run(sessions, box, clock, root, allow_empty=True)
    assert allowed.outcome == "succeeded" and await live_hooks(sessions) == {}


async def test_missing_directory_is_an_error(sessions, box, clock, tmp_path) -> None:
    result = await run(sessions, box, clock, tmp_path / "nope", allow_empty=True)
    assert result.outcome == "failed" and result.diagnostics and result.plan is None
    assert await rows(sessions, Factory) == []


async def test_api_managed_factory_is_refused(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        now = clock.now()
        s.add(
            Factory(
                uid="fa_api", team_id=team.id, name="acme", managed_by="api", created_at=now, updated_at=now
            )
        )
    root = write_tree(tmp_path / "f", webhooks={"a": hook()})
    result = await run(sessions, box, clock, root)
    assert result.outcome == "failed" and "managed through the API" in (result.error or "")
    assert await rows(sessions, Webhook) == []


async def test_a_plan_that_changed_since_approval_is_not_applied(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook()})
    shown = await run(sessions, box, clock, root, dry_run=True)
    write_tree(root, webhooks={"a": hook(), "b": hook()})
    result = await run(sessions, box, clock, root, expected_plan=shown.plan.digest())
    assert result.outcome == "failed" and "plan changed" in (result.error or "")
    assert await rows(sessions, Webhook) == []


async def test_environments_are_applied_and_names_are_team_wide(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    root = write_tree(tmp_path / "f", webhooks={"a": hook()}, environments={"py": {"setup": ["make"]}})
    assert (await run(sessions, box, clock, root)).outcome == "succeeded"
    [env] = await rows(sessions, Environment)
    assert env.uid.startswith("env_") and env.spec == {"setup": ["make"]} and env.managed_by == "definitions"
    write_tree(root, webhooks={"a": hook()}, environments={"py": {"setup": ["make", "test"]}})
    result = await run(sessions, box, clock, root)
    assert [(c.kind, c.action, c.uid) for c in result.plan.changes] == [("environment", "update", env.uid)]
    other = write_tree(tmp_path / "g", name="other", webhooks={"a": hook()}, environments={"py": {}})
    clash = await run(sessions, box, clock, other)
    assert clash.outcome == "failed" and [d.rule for d in clash.diagnostics] == ["FC020"]
    write_tree(root, webhooks={"a": hook()})
    await run(sessions, box, clock, root)
    async with sessions() as s:
        assert (await s.execute(select(func.count()).select_from(Environment))).scalar_one() == 0


async def test_a_load_cache_still_sees_every_edit(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    cache = LoadCache()
    root = write_tree(tmp_path / "f", webhooks={"a": hook(description="one")})
    assert (await run(sessions, box, clock, root, cache=cache)).outcome == "succeeded"
    write_tree(root, webhooks={"a": hook(description="two")})
    result = await run(sessions, box, clock, root, cache=cache)
    assert [(c.name, c.fields) for c in result.plan.changes] == [("a", ("description",))]
    assert (await live_hooks(sessions))["a"].description == "two"


def by_name(*names: str, uids: tuple[str, ...] = ()) -> dict[str, Any]:
    flt: dict[str, Any] = {"webhooks": list(names)}
    if uids:
        flt["webhook_ids"] = list(uids)
    return {"provider": "webhook", "event": "received", "filter": flt}


async def routes_of(sessions, name: str) -> list[tuple[int, str]]:
    [auto] = await rows(sessions, Automation, Automation.name == name)
    found = await rows(sessions, AutomationWebhook, AutomationWebhook.automation_uid == auto.uid)
    return sorted((r.trigger_index, r.webhook_uid) for r in found)


async def test_webhook_names_resolve_to_uids_minted_in_the_same_apply(sessions, box, clock, tmp_path) -> None:
    await add_secret(sessions, box, clock)
    autos = {"triage": {"triggers": [by_name("gh", "keep")]}, "other": {"triggers": [by_name("keep")]}}
    root = write_tree(tmp_path / "f", webhooks={"gh": hook(), "keep": hook()}, automations=autos)
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    uids = {n: w.uid for n, w in (await live_hooks(sessions)).items()}
    [change] = [c for c in result.plan.changes if c.name == "triage"]
    assert change.webhooks == (("gh", uids["gh"]), ("keep", uids["keep"]))  # filled in after apply
    assert await routes_of(sessions, "triage") == sorted([(0, uids["gh"]), (0, uids["keep"])])
    [triage] = await rows(sessions, Automation, Automation.name == "triage")
    assert triage.triggers[0]["filter"] == {
        "webhook_ids": [],
        "webhooks": ["gh", "keep"],
        "resolved_webhook_ids": [uids["gh"], uids["keep"]],
    }
    again = await run(sessions, box, clock, root)
    assert again.outcome == "noop" and not again.has_changes

    # Rename gh -> github (a new UID) and point triage at the new name: one apply re-points it.
    autos["triage"] = {"triggers": [by_name("github", "keep")]}
    write_tree(root, webhooks={"github": hook(), "keep": hook()}, automations=autos)
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    new = {n: w.uid for n, w in (await live_hooks(sessions)).items()}
    assert new["github"] != uids["gh"] and new["keep"] == uids["keep"]
    assert [(c.action, c.kind, c.name, c.webhooks) for c in result.plan.changes] == [
        ("replace", "webhook", "github", ()),
        ("update", "automation", "triage", (("github", new["github"]),)),
    ]
    assert await routes_of(sessions, "triage") == sorted([(0, new["github"]), (0, new["keep"])])
    assert await routes_of(sessions, "other") == [(0, new["keep"])]
    assert not (await run(sessions, box, clock, root)).has_changes


async def test_a_recreated_webhook_re_points_automations_naming_it(sessions, box, clock, tmp_path) -> None:
    """The webhook row goes away behind the definitions' back: the next apply recreates it (a new UID)
    and updates the unchanged automation that names it, with its routing rows."""
    await add_secret(sessions, box, clock)
    autos = {"triage": {"triggers": [by_name("gh")]}}
    root = write_tree(tmp_path / "f", webhooks={"gh": hook()}, automations=autos)
    await run(sessions, box, clock, root)
    old = (await live_hooks(sessions))["gh"]
    async with sessions() as s, s.begin():
        row = await s.get(Webhook, old.uid)
        assert row is not None
        row.deleted_at = clock.now()
    result = await run(sessions, box, clock, root)
    assert result.outcome == "succeeded", result.errors_json()
    assert [(c.action, c.kind, c.name) for c in result.plan.changes] == [
        ("create", "webhook", "gh"),
        ("update", "automation", "triage"),
    ]
    new_uid = (await live_hooks(sessions))["gh"].uid
    assert new_uid != old.uid and await routes_of(sessions, "triage") == [(0, new_uid)]
