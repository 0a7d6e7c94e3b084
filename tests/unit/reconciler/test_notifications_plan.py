"""Planning notification endpoints (pure): order after schedules, canonical comparison, renames, secrets
shown by name only, text and JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from reconciler.plan import KIND_ORDER, StoredObject, StoreState, diff, render_text
from reconciler.specs import FactoryDefinition, FactorySpec, NotificationSpec, ScheduleSpec, digest


def notification(name: str, **kw: Any) -> NotificationSpec:
    kw.setdefault("url", "https://hooks.example.com/factory")
    kw.setdefault("secret_name", "OPS_HOOK")
    kw.setdefault("events", ("SUCCEEDED", "FAILED"))
    return NotificationSpec(name=name, path=f"notifications/{name}.yaml", **kw)


def definition(
    *notifications: NotificationSpec, schedules: tuple[ScheduleSpec, ...] = ()
) -> FactoryDefinition:
    return FactoryDefinition(
        root="/x",
        factory=FactorySpec(name="acme", path="factory.yaml"),
        schedules=schedules,
        notifications=notifications,
    )


def applied(d: FactoryDefinition) -> StoreState:
    """The store as the last apply of ``d`` left it."""
    factory = d.factory.fields()
    factory.pop("name")
    return StoreState(
        factory=StoredObject("fa_1", "acme", factory),
        managed_by="definitions",
        stored={
            "schedule": {
                s.name: StoredObject(f"sch_{s.name}", s.name, s.fields(), digest(s.fields()))
                for s in d.schedules
            },
            "notification": {
                n.name: StoredObject(f"ne_{n.name}", n.name, n.fields(), digest(n.fields()))
                for n in d.notifications
            },
        },
    )


def test_notifications_come_after_schedules_with_their_prefix() -> None:
    assert KIND_ORDER.index("notification") == KIND_ORDER.index("schedule") + 1
    nightly = ScheduleSpec(name="nightly", path="schedules/nightly.yaml", cron="0 2 * * *", prompt="x")
    d = definition(notification("ops"), notification("alerts"), schedules=(nightly,))
    assert render_text(diff(d, StoreState())) == (
        "+ factory acme (fa_... assigned on apply)\n"
        "+ schedule nightly (sch_... assigned on apply)\n"
        "+ notification alerts (ne_... assigned on apply)\n"
        "+ notification ops (ne_... assigned on apply)\n"
        "\n"
        "Plan: 4 to add, 0 to change, 0 to destroy.\n"
    )


def test_events_and_filter_are_compared_canonical() -> None:
    d = definition(notification("ops", filter={"sources": ["API"]}))
    same = definition(
        notification(
            "ops",
            events=("run.succeeded", "FAILED", "SUCCEEDED"),
            filter={"sources": ["API", "API"]},
        )
    )
    assert not diff(same, applied(d)).has_changes
    everything = definition(notification("ops", events=("SUCCEEDED", "run.*"), filter={"sources": ["API"]}))
    plan = diff(everything, applied(d))
    assert [(c.action, c.fields) for c in plan.changes] == [("update", ("events",))]


def test_updates_list_the_changed_fields_in_order_and_hide_secret_values() -> None:
    d = definition(notification("ops"))
    edited = definition(
        notification(
            "ops",
            url="https://other.example.org/hook",
            secret_name="NEW_HOOK",
            events=("ERROR",),
            filter={"factories": ["*"]},
            enabled=False,
            description="now documented",
        )
    )
    plan = diff(edited, applied(d))
    fields = ("url", "secret_name", "events", "filter", "enabled", "description")
    assert [(c.action, c.kind, c.name, c.uid, c.fields) for c in plan.changes] == [
        ("update", "notification", "ops", "ne_ops", fields)
    ]
    assert render_text(plan).splitlines()[0] == (
        "~ notification ops: url, secret_name (OPS_HOOK -> NEW_HOOK, value hidden), events, filter, enabled,"
        " description"
    )


def test_a_description_is_compared_and_an_edit_in_the_store_is_drift() -> None:
    d = definition(notification("ops", description="v1"))
    state = applied(d)
    plan = diff(definition(notification("ops", description="v2")), state)
    assert [(c.action, c.fields) for c in plan.changes] == [("update", ("description",))]
    row = state.objects("notification")["ops"]
    drifted = StoredObject(row.uid, row.name, row.fields | {"enabled": False}, row.spec_digest)
    plan = diff(d, replace(state, stored=state.stored | {"notification": {"ops": drifted}}))
    assert [(c.action, c.fields) for c in plan.changes] == [("update", ("enabled",))]


def test_rename_is_a_replace_and_removal_a_delete() -> None:
    d = definition(notification("old", events=("ERROR",)), notification("gone"))
    plan = diff(definition(notification("new", events=("ERROR",))), applied(d))
    assert render_text(plan).splitlines() == [
        "-/+ notification old -> new (new UID)",
        "- notification gone (ne_gone)",
        "",
        "Plan: 1 to add, 0 to change, 2 to destroy.",
    ]


def test_json_names_the_kind_and_uids() -> None:
    d = definition(notification("keep"), notification("gone"))
    plan = diff(
        definition(notification("keep", enabled=False), notification("fresh", events=("ERROR",))), applied(d)
    )
    data = json.loads(json.dumps(plan.to_json()))
    assert data["changes"] == [
        {
            "action": "update",
            "kind": "notification",
            "name": "keep",
            "uid": "ne_keep",
            "fields": ["enabled"],
            "values": [{"path": "enabled", "old": True, "new": False}],
        },
        {"action": "create", "kind": "notification", "name": "fresh", "uid": None, "fields": []},
        {"action": "delete", "kind": "notification", "name": "gone", "uid": "ne_gone", "fields": []},
    ]
    assert data["summary"] == {"add": 1, "change": 1, "destroy": 1}
    minted = plan.with_uids({("notification", "fresh"): "ne_new"})
    assert [c.uid for c in minted.changes] == ["ne_keep", "ne_new", "ne_gone"]
