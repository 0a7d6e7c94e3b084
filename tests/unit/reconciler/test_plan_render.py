"""Plan diff and rendering (pure): the text and JSON users and scripts read."""

from __future__ import annotations

import json

from reconciler.plan import Change, Plan, StoredObject, StoreState, diff, render_text
from reconciler.specs import (
    AutomationSpec,
    FactoryDefinition,
    FactorySpec,
    TriggerSpec,
    WebhookSpec,
)


def hook(name: str, **kw) -> WebhookSpec:
    return WebhookSpec(name=name, path=f"webhooks/{name}.yaml", secret_name=kw.pop("secret_name", "s1"), **kw)


def auto(name: str, uid: str = "wh_1", **kw) -> AutomationSpec:
    trig = TriggerSpec("webhook", "received", (uid,), kw.pop("payload", None))
    kw.setdefault("prompt", "do it")
    return AutomationSpec(name=name, path=f"automations/{name}/automation.md", triggers=(trig,), **kw)


def definition(*hooks: WebhookSpec, autos: tuple[AutomationSpec, ...] = (), **factory) -> FactoryDefinition:
    return FactoryDefinition(
        root="/x",
        factory=FactorySpec(name="acme", path="factory.yaml", **factory),
        webhooks=hooks,
        automations=autos,
    )


def stored(spec: WebhookSpec | AutomationSpec, uid: str, version: int | None = 1) -> StoredObject:
    from reconciler.specs import digest

    return StoredObject(uid, spec.name, spec.fields(), digest(spec.fields()), version)


def state_for(d: FactoryDefinition, *, secrets=None, **over) -> StoreState:
    fields = d.factory.fields()
    fields.pop("name")
    objects = {
        "webhooks": {w.name: stored(w, f"wh_{w.name}") for w in d.webhooks},
        "automations": {a.name: stored(a, f"au_{a.name}", None) for a in d.automations},
    } | over
    return StoreState(
        factory=StoredObject("fa_1", "acme", fields),
        managed_by="definitions",
        stored={folder.removesuffix("s"): objs for folder, objs in objects.items()},
        secret_versions=secrets or {"s1": 1},
    )


def test_first_plan_creates_everything_with_uids_assigned_on_apply() -> None:
    d = definition(hook("github-issues"), autos=(auto("triage"),))
    plan = diff(d, StoreState())
    assert render_text(plan) == (
        "+ factory acme (fa_... assigned on apply)\n"
        "+ webhook github-issues (wh_... assigned on apply)\n"
        "+ automation triage (au_... assigned on apply)\n"
        "\n"
        "Plan: 3 to add, 0 to change, 0 to destroy.\n"
    )


def test_identical_store_is_no_changes() -> None:
    d = definition(hook("a"), hook("b"), autos=(auto("t"),), description="x")
    plan = diff(d, state_for(d))
    assert not plan.has_changes
    assert plan.to_json()["factory"]["webhooks"] == {"a": "wh_a", "b": "wh_b"}  # scripts read UIDs here
    assert render_text(plan) == "No changes.\n"
    assert plan.to_json()["summary"] == {"add": 0, "change": 0, "destroy": 0}


def test_update_lists_changed_fields_in_order() -> None:
    old = definition(hook("alerts"))
    new = definition(hook("alerts", enabled=False, description="pager"))
    plan = diff(new, state_for(old))
    assert render_text(plan).splitlines()[0] == "~ webhook alerts: enabled, description"
    assert plan.summary() == {"add": 0, "change": 1, "destroy": 0}


def test_delete_shows_the_uid() -> None:
    old = definition(hook("a"), autos=(auto("old-one"),))
    new = definition(hook("a"))
    lines = render_text(diff(new, state_for(old))).splitlines()
    assert lines == ["- automation old-one (au_old-one)", "", "Plan: 0 to add, 0 to change, 1 to destroy."]


def test_rename_with_identical_spec_is_a_replace() -> None:
    old = definition(hook("old-name", description="same"))
    new = definition(hook("new-name", description="same"))
    plan = diff(new, state_for(old))
    assert render_text(plan).splitlines() == [
        "-/+ webhook old-name -> new-name (new UID, new URL)",
        "",
        "Plan: 1 to add, 0 to change, 1 to destroy.",
    ]
    change = plan.to_json()["changes"][0]
    assert change == {
        "action": "replace",
        "kind": "webhook",
        "name": "new-name",
        "uid": None,
        "fields": [],
        "old_name": "old-name",
        "old_uid": "wh_old-name",
    }


def test_removed_and_added_with_different_specs_are_delete_and_create() -> None:
    old = definition(hook("a", description="one"))
    new = definition(hook("b", description="two"))
    lines = render_text(diff(new, state_for(old))).splitlines()
    assert lines[:2] == ["+ webhook b (wh_... assigned on apply)", "- webhook a (wh_a)"]


def test_secrets_show_names_and_versions_never_values() -> None:
    old = definition(hook("a"), hook("b"))
    new = definition(hook("a", secret_name="s2"), hook("b"))
    plan = diff(new, state_for(old, secrets={"s1": 3, "s2": 1}))
    assert render_text(plan).splitlines()[:2] == [
        "~ webhook a: secret_name (s1 -> s2, value hidden)",
        "~ webhook b: secret_version (1 -> 3, value hidden)",
    ]


def test_unchanged_webhook_with_rotated_secret_is_a_change() -> None:
    d = definition(hook("a"))
    plan = diff(d, state_for(d, secrets={"s1": 2}))
    assert [(c.action, c.fields) for c in plan.changes] == [("update", ("secret_version",))]


def test_types_are_compared_strictly() -> None:
    old = definition(autos=(auto("t", payload={"n": 1}),))
    new = definition(autos=(auto("t", payload={"n": True}),))
    plan = diff(new, state_for(old))
    assert [(c.name, c.fields) for c in plan.changes] == [("t", ("triggers",))]


def test_drift_in_the_store_is_detected_even_with_the_same_digest() -> None:
    d = definition(hook("a"))
    st = state_for(d)
    drifted = StoredObject(
        "wh_a", "a", d.webhooks[0].fields() | {"enabled": False}, st.objects("webhook")["a"].spec_digest, 1
    )
    plan = diff(d, state_for(d, webhooks={"a": drifted}))
    assert [c.fields for c in plan.changes] == [("enabled",)]


def test_factory_fields_update() -> None:
    old = definition(hook("a"), description="one")
    new = definition(hook("a"), description="two", worker_host="box-1")
    assert (
        render_text(diff(new, state_for(old))).splitlines()[0] == "~ factory acme: description, worker_host"
    )


def test_json_is_stable_and_with_uids_fills_in_created() -> None:
    d = definition(hook("a"))
    plan = diff(d, StoreState()).with_uids({("factory", "acme"): "fa_9", ("webhook", "a"): "wh_9"})
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["factory"] == {
        "name": "acme",
        "uid": "fa_9",
        "managed_by": "definitions",
        "webhooks": {"a": "wh_9"},
    }
    assert doc["changes"][1] == {
        "action": "create",
        "kind": "webhook",
        "name": "a",
        "uid": "wh_9",
        "fields": [],
    }
    assert render_text(plan).splitlines()[1] == "+ webhook a (wh_9)"


def test_plan_digest_changes_with_the_plan() -> None:
    a = Plan("acme", None, (Change("create", "webhook", "x"),))
    b = Plan("acme", None, (Change("create", "webhook", "y"),))
    assert a.digest() != b.digest()
    assert a.digest() == Plan("acme", None, (Change("create", "webhook", "x"),)).digest()


def test_color_only_when_asked() -> None:
    plan = Plan("acme", None, (Change("delete", "webhook", "x", "wh_1"),))
    assert "\x1b[" not in render_text(plan)
    assert render_text(plan, color=True).startswith("\x1b[31m- webhook x (wh_1)\x1b[0m")


def named(name: str, *webhooks: str, uids: tuple[str, ...] = ()) -> AutomationSpec:
    trig = TriggerSpec("webhook", "received", uids, None, webhooks=webhooks)
    return AutomationSpec(name=name, path=f"automations/{name}/automation.md", prompt="do", triggers=(trig,))


def test_a_name_of_a_new_webhook_is_known_after_apply() -> None:
    d = definition(hook("gh"), autos=(named("triage", "gh", uids=("wh_1",)),))
    plan = diff(d, StoreState())
    assert render_text(plan).splitlines()[:3] == [
        "+ factory acme (fa_... assigned on apply)",
        "+ webhook gh (wh_... assigned on apply)",
        "+ automation triage (au_... assigned on apply): webhook gh (known after apply)",
    ]
    change = plan.changes[-1]
    assert change.to_json()["webhooks"] == {"gh": None}
    after = plan.with_uids({("webhook", "gh"): "wh_new", ("automation", "triage"): "au_new"})
    assert render_text(after).splitlines()[2] == "+ automation triage (au_new): webhook gh (wh_new)"


def test_a_name_of_a_kept_webhook_resolves_to_its_uid_and_is_a_no_op() -> None:
    from reconciler.specs import digest

    auto_spec = named("triage", "gh")
    d = definition(hook("gh"), autos=(auto_spec,))
    fields = auto_spec.fields({"gh": "wh_gh"})
    assert fields["triggers"][0]["filter"] == {
        "webhook_ids": [],
        "webhooks": ["gh"],
        "resolved_webhook_ids": ["wh_gh"],
    }
    state = state_for(d, automations={"triage": StoredObject("au_1", "triage", fields, digest(fields))})
    assert diff(d, state).changes == ()


def test_renaming_a_named_webhook_re_points_the_automation() -> None:
    from reconciler.specs import digest

    old = named("triage", "gh")
    fields = old.fields({"gh": "wh_gh"})
    d = definition(hook("github"), autos=(named("triage", "github"),))
    state = state_for(
        definition(hook("gh")), automations={"triage": StoredObject("au_1", "triage", fields, digest(fields))}
    )
    plan = diff(d, state)
    assert render_text(plan).splitlines()[:2] == [
        "-/+ webhook gh -> github (new UID, new URL)",
        "~ automation triage: triggers; re-points to webhook github (known after apply)",
    ]
    # a webhook recreated under the same name (deleted over the API) re-points unchanged automations
    same = definition(hook("gh"), autos=(old,))
    plan = diff(same, state_for(same, webhooks={}, automations=state.objects("automation")))
    assert [render_text(plan).splitlines()[i] for i in (0, 1)] == [
        "+ webhook gh (wh_... assigned on apply)",
        "~ automation triage: triggers; re-points to webhook gh (known after apply)",
    ]


def test_an_update_shows_each_changed_value_old_to_new_in_text_and_json() -> None:
    old = definition(hook("alerts", description="Alerts"), autos=(auto("t", payload={"severity": ["high"]}),))
    new = definition(
        hook("alerts", enabled=False, description="Pager alerts"),
        autos=(auto("t", payload={"severity": ["high", "critical"]}, title="Triage"),),
        description="ops",
    )
    plan = diff(new, state_for(old))
    assert render_text(plan).splitlines()[:8] == [
        "~ factory acme: description",
        '    description: (none) -> "ops"',
        "~ webhook alerts: enabled, description",
        "    enabled: true -> false",
        '    description: "Alerts" -> "Pager alerts"',
        "~ automation t: title, triggers",
        '    title: (none) -> "Triage"',
        '    triggers[0].filter.payload.severity: ["high"] -> ["high", "critical"]',
    ]
    hooks = [c for c in plan.to_json()["changes"] if c["kind"] == "webhook"]
    assert hooks[0]["values"] == [
        {"path": "enabled", "old": True, "new": False},
        {"path": "description", "old": "Alerts", "new": "Pager alerts"},
    ]


def test_long_values_are_cut_in_text_and_whole_in_json() -> None:
    old = definition(autos=(auto("t"),))
    long_prompt = "x" * 200
    new = definition(autos=(auto("t", prompt=long_prompt),))
    plan = diff(new, state_for(old))
    line = render_text(plan).splitlines()[1]
    assert line.startswith('    prompt: "do it" -> "xxx') and line.endswith("…") and len(line) < 100
    assert plan.to_json()["changes"][0]["values"] == [{"path": "prompt", "old": "do it", "new": long_prompt}]


def test_credential_values_are_hidden_and_secret_names_are_not() -> None:
    config = {"mcp_servers": {"docs": {"url": "https://m", "headers": {"Authorization": "Bearer old"}}}}
    changed = {"mcp_servers": {"docs": {"url": "https://m", "headers": {"Authorization": "Bearer new"}}}}
    old = definition(hook("a"), autos=(auto("t", config=config),))
    new = definition(hook("a", secret_name="s2"), autos=(auto("t", config=changed),))
    plan = diff(new, state_for(old, secrets={"s1": 1, "s2": 1}))
    text = render_text(plan)
    assert "Bearer" not in text and "Bearer" not in json.dumps(plan.to_json())
    assert "    config.mcp_servers.docs.headers.Authorization: (hidden) -> (hidden)" in text.splitlines()
    assert "~ webhook a: secret_name (s1 -> s2, value hidden)" in text.splitlines()
    hook_change = next(c for c in plan.to_json()["changes"] if c["kind"] == "webhook")
    assert hook_change["values"] == [{"path": "secret_name", "old": "s1", "new": "s2"}]
