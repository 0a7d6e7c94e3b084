"""notifications/<name>.yaml: loading, the schema's messages, and the rules (FC080-FC082, FC020)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler import rules
from reconciler.loadcache import LoadCache
from reconciler.loader import LoadResult, load
from reconciler.specs import FactoryDefinition, NotificationSpec
from store.rules import notification_rules, urlpolicy

OK = "url: https://hooks.example.com/factory\nsecretName: OPS_HOOK\nevents: [SUCCEEDED]\n"


def loaded(root: Path) -> FactoryDefinition:
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    return result.definition


def endpoint(url: str = "https://hooks.example.com/factory", **lines: str) -> str:
    """A notification file: ``url`` quoted as written, then the other keys' YAML lines."""
    body = {"secretName": "OPS_HOOK", "events": "[SUCCEEDED]", **lines}
    return f"url: '{url}'\n" + "".join(f"{key}: {value}\n" for key, value in body.items())


def test_a_full_file_and_a_minimal_one_load(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "notifications/ops-alerts.yaml": (
                "# notifications/ops-alerts.yaml\n"
                "url: https://hooks.example.com/factory\n"
                "secretName: OPS_HOOK_SECRET\n"
                "events: [SUCCEEDED, run.failed, ERROR, FAILED]\n"
                "filter:\n"
                '  factories: ["*"]\n'
                "  automations: [triage, triage]\n"
                "  sources: [CUSTOM_WEBHOOK, SCHEDULED_AGENT]\n"
                "enabled: false\n"
                "description: Tell the ops channel when a run ends\n"
            ),
            "notifications/local.yml": "url: http://127.0.0.1:9000/hook\nsecretName: s\nevents: [run.*]\n",
        }
    )
    definition = loaded(root)
    local, ops = definition.notifications
    assert ops == NotificationSpec(
        name="ops-alerts",
        path="notifications/ops-alerts.yaml",
        url="https://hooks.example.com/factory",
        secret_name="OPS_HOOK_SECRET",
        events=("SUCCEEDED", "run.failed", "ERROR", "FAILED"),
        filter={
            "factories": ["*"],
            "automations": ["triage", "triage"],
            "sources": ["CUSTOM_WEBHOOK", "SCHEDULED_AGENT"],
        },
        enabled=False,
        description="Tell the ops channel when a run ends",
    )
    # The compared fields are what the store holds: events and filter canonical.
    assert ops.fields() == {
        "url": "https://hooks.example.com/factory",
        "secret_name": "OPS_HOOK_SECRET",
        "events": ["SUCCEEDED", "FAILED", "ERROR"],
        "filter": {
            "factories": ["*"],
            "automations": ["triage"],
            "sources": ["CUSTOM_WEBHOOK", "SCHEDULED_AGENT"],
        },
        "enabled": False,
        "description": "Tell the ops channel when a run ends",
    }
    assert local.fields() == {
        "url": "http://127.0.0.1:9000/hook",
        "secret_name": "s",
        "events": ["run.*"],
        "filter": {},
        "enabled": True,
        "description": None,
    }
    assert rules.check(definition) == []


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("secretName: s\nevents: [FAILED]\n", 1, 1, "missing required key 'url'"),
        ("url: https://h.example/\nevents: [FAILED]\n", 1, 1, "missing required key 'secretName'"),
        ("url: https://h.example/\nsecretName: s\n", 1, 1, "missing required key 'events'"),
        (OK.replace("[SUCCEEDED]", "[]"), 3, 9, "'events' must not be empty"),
        (OK.replace("[SUCCEEDED]", "SUCCEEDED"), 3, 9, "'events' must be a list, got string"),
        (OK.replace("[SUCCEEDED]", "[SUCCEEDED, 5]"), 3, 21, "'events[1]' must be a string, got integer"),
        (
            OK + "filter:\n  factory: [acme]\n",
            5,
            3,
            "unknown key 'factory' in 'filter' (did you mean 'factories'?)",
        ),
        (OK + "filter:\n  sources: []\n", 5, 12, "'filter.sources' must not be empty"),
        (OK + "filter: [acme]\n", 4, 9, "'filter' must be a mapping, got list"),
        (OK + "secret: x\n", 4, 1, "unknown key 'secret' (did you mean 'secretName'?)"),
        (OK + "enabled: 'yes'\n", 4, 10, "'enabled' must be a boolean, got string"),
        (
            OK.replace("OPS_HOOK", "'ops hook'"),
            2,
            13,
            "'secretName' secret names use letters, digits, '.', '_' or '-' (1-200, starting with a letter or"
            " digit); got 'ops hook'",
        ),
    ],
)
def test_schema_problems_are_fc010_at_their_place(  # type: ignore[no-untyped-def]
    factory_tree, where, text: str, line: int, column: int, message: str
) -> None:
    root = factory_tree({"notifications/n.yaml": text})
    result = load(root)
    assert where(root, result.diagnostics) == [("notifications/n.yaml", line, column, "FC010")]
    assert result.diagnostics[0].message == message
    assert result.definition is not None and result.definition.notifications == ()


def test_a_bad_file_name_and_a_stray_file(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"notifications/bad name.yaml": OK, "notifications/notes.txt": ""})
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("notifications/bad name.yaml", 0, 0, "FC010"),
        ("notifications/notes.txt", 0, 0, "FC001"),
    ]
    assert result.diagnostics[1].severity == "warning"
    assert result.diagnostics[1].message == "ignored: notification definitions are notifications/<name>.yaml"


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",  # cloud metadata: link-local
        "http://example.com/hook",  # plain http to a host that is not loopback
        "https://10.1.2.3/hook",
        "https://[::ffff:192.168.0.1]/hook",  # IPv4 in IPv6, judged as the IPv4 address
        "https://user:pw@hooks.example.com/",
        "https://2852039166/",  # a number that resolvers read as 169.254.169.254
        "ftp://hooks.example.com/",
        "https:///no-host",
    ],
)
def test_a_refused_url_is_fc080_at_its_value_and_names_the_reason(  # type: ignore[no-untyped-def]
    factory_tree, where, url: str
) -> None:
    root = factory_tree({"notifications/n.yaml": "# the ops channel\n" + endpoint(url)})
    [found] = rules.check(loaded(root))
    assert where(root, [found]) == [("notifications/n.yaml", 2, 6, "FC080")]
    reason = urlpolicy.url_refusal(url)
    assert reason is not None and found.message == f"notification URL refused: {reason}"
    assert str(found).startswith(f"{root.as_posix()}/notifications/n.yaml:2:6: error[FC080]")


def test_the_private_network_refusal_suggests_a_relay(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "notifications/meta.yaml": endpoint("https://169.254.169.254/"),
            "notifications/plain.yaml": endpoint("http://example.com/"),
        }
    )
    meta, plain = rules.check(loaded(root))
    assert meta.message == (
        "notification URL refused: the URL points at a private network:"
        " 169.254.169.254 is link-local (cloud metadata services live there)"
    )
    assert meta.hint is not None and "relay" in meta.hint and "127.0.0.1" in meta.hint
    assert plain.message == (
        "notification URL refused: plain http is allowed only to a loopback host"
        " (localhost, 127.0.0.1, ::1); use https"
    )
    assert plain.hint is None


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/factory?team=ops",
        "http://localhost:8080/hook",
        "http://127.0.0.1/hook",
        "http://[::1]:9000/",
        "https://8.8.8.8/hook",
        "https://internal.corp.example/hook",  # a name: judged by its addresses when each message is sent
    ],
)
def test_allowed_urls(factory_tree, url: str) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"notifications/n.yaml": endpoint(url)})
    assert rules.check(loaded(root)) == []


def test_events_and_filter_problems_are_fc081_at_the_item(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "notifications/events.yaml": endpoint(events="[SUCCEEDED, SUCEEDED, nope]"),
            "notifications/case.yaml": endpoint(events="\n  - run.Failed"),
            "notifications/filter.yaml": endpoint(
                filter='\n  factories: ["*", acme]\n  automations: [anything, goes]\n  sources: [API, WEB]'
            ),
        }
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [
        ("notifications/case.yaml", 4, 5, "FC081"),
        ("notifications/events.yaml", 3, 21, "FC081"),
        ("notifications/filter.yaml", 5, 3, "FC081"),
        ("notifications/filter.yaml", 7, 18, "FC081"),
    ]
    case, events, star, source = found
    states = ", ".join(notification_rules.RUN_STATES)
    assert events.message == f"unknown event 'SUCEEDED': use a run state ({states}), run.<state> or run.*"
    assert events.hint == "did you mean 'SUCCEEDED'?"
    assert case.message.startswith("unknown event 'run.Failed'") and case.hint == "did you mean 'run.failed'?"
    assert star.message == "filter.factories: '*' stands alone" and star.hint is None
    assert source.message == (
        "unknown source 'WEB': use one of API, CLI, CUSTOM_WEBHOOK, FACTORY, SCHEDULED_AGENT, RUN_SCORER"
    )


def test_filter_automations_are_not_checked_against_the_tree(factory_tree) -> None:  # type: ignore[no-untyped-def]
    # They may name automations of other factories once ``factories`` widens the scope.
    root = factory_tree(
        {
            "notifications/own.yaml": endpoint(filter="\n  automations: [not-here]"),
            "notifications/team.yaml": endpoint(filter="\n  factories: ['*']\n  automations: [elsewhere]"),
        }
    )
    assert rules.check(loaded(root)) == []


def test_at_most_20_endpoints_per_factory(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    files = {f"notifications/n{i:02}.yaml": OK for i in range(20)}
    root = factory_tree(files)
    assert rules.check(loaded(root)) == []
    (root / "notifications" / "n20.yaml").write_text(OK)
    (root / "notifications" / "n21.yaml").write_text(OK)
    found = rules.check(loaded(root))
    assert where(root, found) == [("notifications/n20.yaml", 1, 1, "FC082")]
    assert found[0].message == "factory 'demo' defines 22 notification endpoints; the limit is 20 per factory"


def test_duplicate_names_and_broken_files_do_not_hide_the_others(  # type: ignore[no-untyped-def]
    factory_tree, where
) -> None:
    root = factory_tree(
        {
            "notifications/a.yaml": OK,
            "notifications/a.yml": OK,
            "notifications/broken.yaml": "url: [unclosed\n",
            "notifications/private.yaml": endpoint("https://192.168.1.10/"),
        }
    )
    result = load(root)
    assert result.definition is not None
    assert [n.path for n in result.definition.notifications] == [
        "notifications/a.yaml",
        "notifications/a.yml",
        "notifications/private.yaml",
    ]
    found = [*result.diagnostics, *rules.check(result.definition)]
    assert where(root, found) == [
        ("notifications/broken.yaml", 2, 1, "FC002"),
        ("notifications/a.yml", 1, 1, "FC020"),
        ("notifications/private.yaml", 1, 6, "FC080"),
    ]
    assert found[1].message == (
        "notification 'a' is defined twice: notifications/a.yaml and notifications/a.yml"
    )


def test_the_load_cache_sees_edits_in_notifications(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"notifications/n.yaml": OK})
    calls: list[Path] = []

    def counting(path: Path) -> LoadResult:
        calls.append(path)
        return load(path)

    def urls(result: LoadResult) -> list[tuple[str, str]]:
        assert result.definition is not None
        return [(n.name, n.url) for n in result.definition.notifications]

    cache = LoadCache(load=counting, racy_ns=0)
    assert cache.load(root) is cache.load(root) and len(calls) == 1
    (root / "notifications" / "n.yaml").write_text(OK.replace("hooks.example.com", "other.example.org"))
    assert urls(cache.load(root)) == [("n", "https://other.example.org/factory")]
    (root / "notifications" / "m.yaml").write_text(OK)
    assert [name for name, _ in urls(cache.load(root))] == ["m", "n"]
    assert len(calls) == 3
