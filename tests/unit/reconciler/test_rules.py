"""Cross-file rules: limits, duplicates, payload filters, UIDs not file names, agent and environment refs."""

from __future__ import annotations

from pathlib import Path

from reconciler import rules
from reconciler.loader import load
from reconciler.specs import FactoryDefinition

REPO = Path(__file__).resolve().parents[3]
UID = "wh_0123456789abcdefghjkmnpqrs"


def automation(webhook_ids: str = f"[{UID}]", payload: str = "", extra: str = "") -> str:
    return (
        f"---\n{extra}triggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        f"      webhook_ids: {webhook_ids}\n{payload}---\nDo the thing.\n"
    )


def loaded(root: Path) -> FactoryDefinition:
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    return result.definition


def test_example_factory_passes_every_rule() -> None:
    assert rules.check(loaded(REPO / "example-factory")) == []


def test_twenty_webhooks_pass_twenty_one_fail(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    files = {f"webhooks/hook{i:02d}.yaml": "secretName: s\n" for i in range(20)}
    root = factory_tree(files)
    assert rules.check(loaded(root)) == []
    (root / "webhooks" / "hook20.yaml").write_text("secretName: s\n")
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("webhooks/hook20.yaml", 1, 1, "FC021")]
    assert found[0].message == "factory 'demo' defines 21 webhooks; the limit is 20 per factory"


def test_duplicate_names_yaml_and_yml(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/a.yaml": "secretName: s\n",
            "webhooks/a.yml": "secretName: t\n",
            "environments/e.yaml": "setup: [make]\n",
            "environments/e.yml": "setup: [make]\n",
        }
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("environments/e.yml", 1, 1, "FC020"), ("webhooks/a.yml", 1, 1, "FC020")]
    assert found[1].message == "webhook 'a' is defined twice: webhooks/a.yaml and webhooks/a.yml"


def test_filter_mixing_operators_and_fields(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    payload = "      payload:\n        action:\n          in: [opened]\n          label: bug\n"
    root = factory_tree({"automations/mixed/automation.md": automation(payload=payload)})
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("automations/mixed/automation.md", 8, 9, "FC030")]
    assert found[0].message.startswith(
        "invalid payload filter at 'action': operator keys ['in'] cannot be mixed"
    )


def test_filter_problem_deep_inside_points_at_its_key(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    payload = (
        "      payload:\n        issue:\n          labels:\n            name:\n              exists: maybe\n"
    )
    root = factory_tree({"automations/deep/automation.md": automation(payload=payload)})
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("automations/deep/automation.md", 11, 15, "FC030")]
    assert "'exists' takes true or false" in found[0].message


def test_webhook_ids_naming_a_file(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/github.yaml": "secretName: s\n",
            "automations/a/automation.md": automation("\n        - github\n        - webhooks/github.yaml"),
        }
    )
    definition = loaded(root)
    found = [d for d in rules.check(definition) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [
        ("automations/a/automation.md", 7, 11, "FC031"),
        ("automations/a/automation.md", 8, 11, "FC031"),
    ]
    assert found[0].message == "webhook_ids names the webhook file 'github' instead of its UID"
    assert found[0].hint == "reference it by name: webhooks: [github]"
    with_store = rules.check(definition, {"github": UID})
    assert [d.hint for d in with_store] == [
        f"reference it by name: webhooks: [github] (or use its UID: {UID})"
    ] * 2


def named(webhooks: str, webhook_ids: str | None = None) -> str:
    ids = f"      webhook_ids: {webhook_ids}\n" if webhook_ids else ""
    return (
        "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        f"{ids}      webhooks: {webhooks}\n---\nDo the thing.\n"
    )


def test_webhooks_by_name_pass_with_or_without_uids(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/github.yaml": "secretName: s\n",
            "webhooks/sentry.yml": "secretName: s\n",
            "automations/a/automation.md": named("[github, sentry]", f"[{UID}]"),
            "automations/b/automation.md": named("[github]"),
        }
    )
    definition = loaded(root)
    assert rules.check(definition) == []
    triggers = {a.name: a.triggers[0] for a in definition.automations}
    assert triggers["a"].webhooks == ("github", "sentry") and triggers["a"].webhook_ids == (UID,)
    assert triggers["b"].webhooks == ("github",) and triggers["b"].webhook_ids == ()


def test_webhooks_naming_a_missing_file(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/github.yaml": "secretName: s\n",
            "webhooks/sentry.yaml": "secretName: s\n",
            "automations/a/automation.md": named(
                f"\n        - github\n        - gitlab\n        - github.yaml\n        - {UID}"
            ),
        }
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [
        ("automations/a/automation.md", 8, 11, "FC032"),
        ("automations/a/automation.md", 9, 11, "FC032"),
        ("automations/a/automation.md", 10, 11, "FC032"),
    ]
    assert found[0].message == "webhook 'gitlab' is not defined in this factory (webhooks: github, sentry)"
    assert found[0].hint == "add webhooks/gitlab.yaml or name one of the factory's webhooks"
    assert found[1].hint == "use the file stem: github"
    assert found[2].hint == f"'webhooks' takes file names; a UID goes in webhook_ids: [{UID}]"
    assert str(found[0]).startswith(f"{root}/automations/a/automation.md:8:11: error[FC032]")


def test_webhook_trigger_needs_uids_or_names(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    text = (
        "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        "      payload: {a: 1}\n---\nDo.\n"
    )
    root = factory_tree({"automations/a/automation.md": text})
    result = load(root)
    assert [(d.rule, d.line) for d in result.diagnostics] == [("FC010", 6)]
    assert (
        "needs 'webhook_ids' (webhook UIDs), 'webhooks' (webhook file names) or both"
        in result.diagnostics[0].message
    )


def test_webhook_ids_that_are_not_uids(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {"automations/a/automation.md": automation("[wh_short, WH_0123456789ABCDEFGHJKMNPQRS]")}
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert [(d.rule, d.line) for d in found] == [("FC010", 6), ("FC010", 6)]
    assert found[0].message.startswith("'wh_short' is not a webhook UID")


def test_unknown_agent(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "factory.yaml": "name: demo\nagents:\n  triage: {}\n",
            "automations/a/automation.md": automation(extra="agent: nobody\n"),
            "automations/b/automation.md": automation(extra="agent: triage\n"),
            "automations/c/automation.md": automation(extra="agent: foreman\n"),
        }
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("automations/a/automation.md", 2, 1, "FC061")]
    assert found[0].message == "unknown agent 'nobody'"


def test_unknown_environment(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "factory.yaml": "name: demo\nagents:\n  triage:\n    environment_id: ci\n",
            "automations/a/automation.md": automation(extra="config:\n  environment_id: staging\n"),
            "environments/ci.yaml": "setup: [make]\n",
        }
    )
    definition = loaded(root)
    found = [d for d in rules.check(definition) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("automations/a/automation.md", 3, 3, "FC060")]
    assert found[0].message == "unknown environment 'staging'"
    assert found[0].hint == "add environments/staging.yaml (defined: ci)"
    assert [d.rule for d in rules.check(definition, known_environments={"staging"})] == ["FC090"]


def test_is_webhook_uid() -> None:
    assert rules.is_webhook_uid(UID)
    assert not rules.is_webhook_uid(UID + "x")
    assert not rules.is_webhook_uid("github-issues")
