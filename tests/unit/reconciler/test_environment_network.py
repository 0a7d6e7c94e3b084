"""An environment's ``network`` policy is judged when the definition loads, at the line of the value:
its shape by the schema (FC010), its host patterns and mode/allow pairing by FC012 (docs/definitions.md,
"Network policy"), in the legacy and the v1alpha1 layout alike; ``factoryctl migrate`` leaves it as
written."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from reconciler import migrate, rules
from reconciler.diagnostics import RULES, Diagnostic
from reconciler.loader import load

Tree = Callable[[dict[str, str | bytes]], Path]
Where = Callable[[Path, Iterable[Diagnostic]], list[tuple[str, int, int, str]]]
V1 = "schemaVersion: v1alpha1\nname: d\nrepositories: [{owner: a, name: b}]\nagentDefaults: {model: m}\n"
FOREMAN = "---\nagentType: FOREMAN\n---\nYou lead.\n"


def test_a_valid_policy_loads_and_passes_the_rules(factory_tree: Tree) -> None:
    body = "network:\n  mode: allowlist\n  allow:\n    - github.com\n    - '*.npmjs.org:443'\n"
    root = factory_tree({"environments/e.yaml": body})
    result = load(root)
    assert result.ok and result.definition is not None
    assert result.definition.environments[0].spec["network"]["allow"] == ["github.com", "*.npmjs.org:443"]
    assert rules.check(result.definition) == []


def test_malformed_patterns_are_fc012_at_their_line(factory_tree: Tree, where: Where) -> None:
    body = (
        "repos:\n  - url: https://git.example/a.git\n"
        "network:\n  mode: allowlist\n  allow:\n    - github.com\n    - https://evil.example/x\n"
        "    - 'host:99999'\n"
    )
    root = factory_tree({"environments/e.yaml": body})
    result = load(root)
    assert result.ok and result.definition is not None
    found = rules.check(result.definition)
    assert where(root, found) == [
        ("environments/e.yaml", 7, 7, "FC012"),
        ("environments/e.yaml", 8, 7, "FC012"),
    ]
    assert "write a host, not a URL" in found[0].message and "from 1 to 65535" in found[1].message
    assert "FC012" in RULES


def test_allow_with_mode_none_or_open_is_an_error_at_allow(factory_tree: Tree, where: Where) -> None:
    root = factory_tree({"environments/e.yaml": "network:\n  mode: open\n  allow: [github.com]\n"})
    result = load(root)
    assert result.definition is not None
    found = rules.check(result.definition)
    assert where(root, found) == [("environments/e.yaml", 3, 3, "FC012")]
    assert "read only with mode: allowlist" in found[0].message


def test_the_shape_is_the_schema_s_fc010(factory_tree: Tree, where: Where) -> None:
    for body, line in (
        ("network:\n  mode: sometimes\n", 2),
        ("network:\n  allow: [github.com]\n", 1),
        ("network:\n  mode: allowlist\n  hosts: [github.com]\n", 3),
        ("network:\n  mode: allowlist\n  allow:\n" + "    - h.example\n" * 101, 4),
    ):
        root = factory_tree({"environments/e.yaml": body})
        result = load(root)
        assert not result.ok
        assert [(d[0], d[1], d[3]) for d in where(root, result.diagnostics)] == [
            ("environments/e.yaml", line, "FC010")
        ], body
    root = factory_tree({"environments/e.yaml": "network:\n  mode: sometimes\n"})
    assert "'network.mode' must be one of: none, allowlist, open" in load(root).diagnostics[0].message


def test_the_v1alpha1_layout_reads_the_same_key(factory_tree: Tree, where: Where) -> None:
    files: dict[str, str | bytes] = {
        "factory.yaml": V1,
        "agents/lead/agent.md": FOREMAN,
        "environments/e.yaml": "network:\n  mode: allowlist\n  allow: ['*.com']\n",
    }
    root = factory_tree(files)
    result = load(root)
    assert result.ok and result.definition is not None
    found = rules.check(result.definition)
    assert where(root, found) == [("environments/e.yaml", 3, 11, "FC012")]
    assert "too broad" in found[0].message


def test_migrate_leaves_a_policy_as_written() -> None:
    env = "repos:\n  - url: https://github.com/acme/app.git\nnetwork:\n  mode: none\n"
    plan = migrate.plan({"factory.yaml": "name: d\n", "environments/e.yaml": env})
    assert "factory.yaml" in {w.path for w in plan.writes}  # the tree was migrated...
    assert "environments/e.yaml" not in {w.path for w in plan.writes}  # ...and the environment left alone
