"""Plan on real databases: the diff against the store, and that planning never writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select

from reconciler.plan import render_text
from reconciler.service import reconcile
from store import secrets as secret_store
from store.models import ApplyRecord, Factory, Team, Webhook
from store.teams import ensure_team


def write_factory(root: Path, hooks: dict[str, dict[str, Any]]) -> Path:
    (root / "webhooks").mkdir(parents=True, exist_ok=True)
    (root / "factory.yaml").write_text("name: acme\n")
    for old in (root / "webhooks").glob("*.yaml"):
        old.unlink()
    for stem, spec in hooks.items():
        (root / "webhooks" / f"{stem}.yaml").write_text(yaml.safe_dump({"secretName": "s", **spec}))
    return root


async def count(sessions, model: Any) -> int:
    async with sessions() as s:
        return (await s.execute(select(func.count()).select_from(model))).scalar_one()


async def plan(sessions, box, clock, root: Path, *, apply: bool = False):
    return await reconcile(sessions, box, clock, team="default", root=root, revision=None, dry_run=not apply)


async def test_plan_on_an_empty_store_writes_nothing(sessions, box, clock, tmp_path) -> None:
    root = write_factory(tmp_path / "f", {"a": {}})
    result = await plan(sessions, box, clock, root)
    # No team, hence no secret: the online check fails, and still nothing is written.
    assert result.outcome == "failed" and [d.rule for d in result.diagnostics] == ["FC040"]
    assert await count(sessions, Team) == 0 and await count(sessions, ApplyRecord) == 0


async def test_plan_then_apply_then_no_changes(sessions, box, clock, tmp_path) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, "s", "value")
    root = write_factory(tmp_path / "f", {"a": {}, "b": {"enabled": False}})
    first = await plan(sessions, box, clock, root)
    assert first.outcome == "planned"
    assert render_text(first.plan).splitlines()[-1] == "Plan: 3 to add, 0 to change, 0 to destroy."
    assert await count(sessions, Factory) == 0 and await count(sessions, Webhook) == 0
    applied = await plan(sessions, box, clock, root, apply=True)
    again = await plan(sessions, box, clock, root)
    assert again.outcome == "planned" and render_text(again.plan) == "No changes.\n"
    assert again.factory_uid == applied.factory_uid
    assert await count(sessions, ApplyRecord) == 1  # plans are not recorded
    write_factory(root, {"a": {"description": "x"}, "c": {}})
    text = render_text((await plan(sessions, box, clock, root)).plan)
    b_uid = applied.plan.changes[2].uid
    assert text.splitlines() == [
        "~ webhook a: description",
        '    description: (none) -> "x"',  # field-level old -> new
        "+ webhook c (wh_... assigned on apply)",
        f"- webhook b ({b_uid})",
        "",
        "Plan: 1 to add, 1 to change, 1 to destroy.",
    ]


async def test_plan_reports_every_problem_with_its_file(sessions, box, clock, tmp_path) -> None:
    root = write_factory(tmp_path / "f", {"a": {}})
    (root / "webhooks" / "broken.yaml").write_text("secretName: [oops\n")
    result = await plan(sessions, box, clock, root)
    assert result.outcome == "failed" and result.plan is None
    assert {Path(d.path).name for d in result.diagnostics} >= {"broken.yaml", "a.yaml"}


async def test_plan_shows_known_after_apply_for_named_webhooks(sessions, box, clock, tmp_path) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, "s", "value")
    root = write_factory(tmp_path / "f", {"gh": {}})
    (root / "automations" / "triage").mkdir(parents=True)
    (root / "automations" / "triage" / "automation.md").write_text(
        "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        "      webhooks: [gh]\n---\nTriage.\n"
    )
    first = await plan(sessions, box, clock, root)
    assert first.outcome == "planned", first.errors_json()
    lines = render_text(first.plan).splitlines()
    assert "+ automation triage (au_... assigned on apply): webhook gh (known after apply)" in lines
    await plan(sessions, box, clock, root, apply=True)
    assert render_text((await plan(sessions, box, clock, root)).plan) == "No changes.\n"
    write_factory(root, {"github": {}})
    text = (root / "automations" / "triage" / "automation.md").read_text()
    (root / "automations" / "triage" / "automation.md").write_text(text.replace("[gh]", "[github]"))
    lines = render_text((await plan(sessions, box, clock, root)).plan).splitlines()
    assert lines[:2] == [
        "-/+ webhook gh -> github (new UID, new URL)",
        "~ automation triage: triggers; re-points to webhook github (known after apply)",
    ]
