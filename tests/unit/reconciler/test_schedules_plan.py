"""Planning schedules (pure): order after automations, compared fields, renames, text and JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from reconciler.plan import KIND_ORDER, StoredObject, StoreState, diff, render_text
from reconciler.specs import AutomationSpec, FactoryDefinition, FactorySpec, ScheduleSpec, digest


def schedule(name: str, **kw: Any) -> ScheduleSpec:
    kw.setdefault("cron", "0 2 * * *")
    if "automation" not in kw:
        kw.setdefault("prompt", "Write the report.")
    return ScheduleSpec(name=name, path=f"schedules/{name}.yaml", **kw)


def automation(name: str) -> AutomationSpec:
    return AutomationSpec(name=name, path=f"automations/{name}/automation.md", prompt="Report.")


def definition(*schedules: ScheduleSpec, automations: tuple[AutomationSpec, ...] = ()) -> FactoryDefinition:
    return FactoryDefinition(
        root="/x",
        factory=FactorySpec(name="acme", path="factory.yaml"),
        automations=automations,
        schedules=schedules,
    )


def applied(d: FactoryDefinition) -> StoreState:
    """The store as the last apply of ``d`` left it."""
    factory = d.factory.fields()
    factory.pop("name")
    return StoreState(
        factory=StoredObject("fa_1", "acme", factory),
        managed_by="definitions",
        stored={
            "automation": {
                a.name: StoredObject(f"au_{a.name}", a.name, a.fields({}), digest(a.fields({})))
                for a in d.automations
            },
            "schedule": {
                s.name: StoredObject(f"sch_{s.name}", s.name, s.fields(), digest(s.fields()))
                for s in d.schedules
            },
        },
    )


def test_schedules_come_last_with_their_prefix() -> None:
    i = KIND_ORDER.index("automation")  # then notifications (test_notifications_plan.py)
    assert KIND_ORDER[i : i + 2] == ("automation", "schedule")
    d = definition(
        schedule("nightly", automation="report"), schedule("adhoc"), automations=(automation("report"),)
    )
    assert render_text(diff(d, StoreState())) == (
        "+ factory acme (fa_... assigned on apply)\n"
        "+ automation report (au_... assigned on apply)\n"
        "+ schedule adhoc (sch_... assigned on apply)\n"
        "+ schedule nightly (sch_... assigned on apply)\n"
        "\n"
        "Plan: 4 to add, 0 to change, 0 to destroy.\n"
    )


def test_an_applied_tree_has_no_changes_and_description_is_not_compared() -> None:
    d = definition(schedule("nightly", description="v1"))
    again = definition(schedule("nightly", description="v2, reworded"))
    assert not diff(again, applied(d)).has_changes


def test_updates_list_the_changed_fields_in_order() -> None:
    d = definition(schedule("nightly"))
    edited = definition(
        schedule(
            "nightly",
            cron="0 3 * * *",
            timezone="Europe/Berlin",
            prompt="Write it shorter.",
            config={"model_id": "m"},
            enabled=False,
        )
    )
    plan = diff(edited, applied(d))
    assert [(c.action, c.kind, c.name, c.uid, c.fields) for c in plan.changes] == [
        ("update", "schedule", "nightly", "sch_nightly", ("cron", "timezone", "prompt", "config", "enabled"))
    ]
    assert render_text(plan).splitlines()[0] == "~ schedule nightly: cron, timezone, prompt, config, enabled"


def test_an_edit_made_in_the_store_is_drift() -> None:
    d = definition(schedule("nightly"))
    state = applied(d)
    row = state.objects("schedule")["nightly"]
    drifted = StoredObject(row.uid, row.name, row.fields | {"enabled": False}, row.spec_digest)
    plan = diff(d, replace(state, stored=state.stored | {"schedule": {"nightly": drifted}}))
    assert [(c.action, c.fields) for c in plan.changes] == [("update", ("enabled",))]


def test_rename_is_a_replace_and_removal_a_delete() -> None:
    d = definition(schedule("old", cron="5 4 * * *"), schedule("gone"))
    plan = diff(definition(schedule("new", cron="5 4 * * *")), applied(d))
    assert render_text(plan).splitlines() == [
        "-/+ schedule old -> new (new UID)",
        "- schedule gone (sch_gone)",
        "",
        "Plan: 1 to add, 0 to change, 2 to destroy.",
    ]


def test_an_automation_renamed_in_the_same_commit_updates_the_schedule() -> None:
    d = definition(schedule("nightly", automation="report"), automations=(automation("report"),))
    renamed = definition(
        schedule("nightly", automation="daily-report"), automations=(automation("daily-report"),)
    )
    plan = diff(renamed, applied(d))
    assert render_text(plan).splitlines()[:2] == [
        "-/+ automation report -> daily-report (new UID)",
        "~ schedule nightly: automation",
    ]


def test_json_names_the_kind_and_uids() -> None:
    d = definition(schedule("keep"), schedule("gone"))
    plan = diff(definition(schedule("keep", enabled=False), schedule("fresh", cron="1 1 * * *")), applied(d))
    data = json.loads(json.dumps(plan.to_json()))
    assert data["changes"] == [
        {
            "action": "update",
            "kind": "schedule",
            "name": "keep",
            "uid": "sch_keep",
            "fields": ["enabled"],
            "values": [{"path": "enabled", "old": True, "new": False}],
        },
        {"action": "create", "kind": "schedule", "name": "fresh", "uid": None, "fields": []},
        {"action": "delete", "kind": "schedule", "name": "gone", "uid": "sch_gone", "fields": []},
    ]
    assert data["summary"] == {"add": 1, "change": 1, "destroy": 1}
    minted = plan.with_uids({("schedule", "fresh"): "sch_new"})
    assert [c.uid for c in minted.changes] == ["sch_keep", "sch_new", "sch_gone"]
