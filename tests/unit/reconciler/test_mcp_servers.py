"""MCP servers in definitions (docs/definitions.md): an environment's ``mcpServers`` are the only commands,
a run's config references them (``{warp_id: NAME}``), and every URL obeys the outbound address rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler import rules
from reconciler.loader import load
from reconciler.specs import FactoryDefinition
from store.rules import urlpolicy

ENV = "mcpServers:\n  github:\n    command: gh-mcp\n    args: [--stdio]\n    env: {TOKEN: 'secret:GH'}\n"


def loaded(root: Path) -> FactoryDefinition:
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    return result.definition


def test_an_environment_defines_a_command_and_an_automation_references_it(  # type: ignore[no-untyped-def]
    factory_tree,
) -> None:
    root = factory_tree(
        {
            "environments/backend.yaml": ENV,
            "automations/a/automation.md": (
                "---\nconfig:\n  environment_id: backend\n  mcp_servers:\n"
                "    gh: {warp_id: github}\n---\nGo.\n"
            ),
        }
    )
    definition = loaded(root)
    assert rules.check(definition) == []
    [environment] = definition.environments
    assert environment.spec["mcpServers"]["github"]["command"] == "gh-mcp"


@pytest.mark.parametrize(
    ("path", "text", "line", "column"),
    [
        (
            "automations/a/automation.md",
            "---\nconfig:\n  mcp_servers:\n    x:\n      command: id\n---\nGo.\n",
            5,
            7,
        ),
        (
            "factory.yaml",
            "name: demo\nagents:\n  foreman:\n    mcp_servers:\n      x: {command: id}\n",
            5,
            11,
        ),
        (
            "schedules/s.yaml",
            "cron: '0 6 * * *'\nprompt: p\nconfig:\n  mcp_servers:\n    x: {command: id}\n",
            5,
            9,
        ),
    ],
)
def test_a_command_in_a_run_config_is_fc010_at_its_line(  # type: ignore[no-untyped-def]
    factory_tree, where, path: str, text: str, line: int, column: int
) -> None:
    root = factory_tree({path: text})
    result = load(root)
    assert where(root, result.diagnostics) == [(path, line, column, "FC010")]
    assert "a run may not start a command" in result.diagnostics[0].message
    assert "{warp_id: NAME}" in result.diagnostics[0].message


@pytest.mark.parametrize(
    "url",
    ["https://169.254.169.254/latest/meta-data/", "http://mcp.example/", "https://10.0.0.7/mcp"],
)
def test_a_refused_mcp_url_is_fc080_at_its_line(factory_tree, where, url: str) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "environments/meta.yaml": f"mcpServers:\n  m:\n    url: '{url}'\n    headers: {{A: b}}\n",
            "automations/a/automation.md": f"---\nconfig:\n  mcp_servers:\n    m: {{url: '{url}'}}\n---\nA\n",
        }
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [
        ("automations/a/automation.md", 4, 9, "FC080"),
        ("environments/meta.yaml", 3, 5, "FC080"),
    ]
    reason = urlpolicy.url_refusal(url)
    assert {d.message for d in found} == {f"MCP server URL refused: {reason}"}


def test_a_reference_to_no_server_of_the_environment_is_fc062_at_its_line(  # type: ignore[no-untyped-def]
    factory_tree, where
) -> None:
    root = factory_tree(
        {
            "factory.yaml": "name: demo\nagents:\n  triage:\n    environment_id: backend\n",
            "environments/backend.yaml": ENV,
            "automations/a/automation.md": (
                "---\nagent: triage\nconfig:\n  mcp_servers:\n    gl: {warp_id: gitlab}\n"
                "    gh: {warp_id: github}\n---\nGo.\n"
            ),
            "schedules/s.yaml": "cron: '0 6 * * *'\nprompt: p\nconfig:\n  mcp_servers: {x: {warp_id: gh}}\n",
        }
    )
    found = [d for d in rules.check(loaded(root)) if d.rule != "FC090"]  # the legacy agents map
    assert where(root, found) == [("automations/a/automation.md", 5, 10, "FC062")]
    assert found[0].message == "environment 'backend' defines no MCP server 'gitlab' (defined: github)"
    # the schedule names no environment: judged when a fire creates the run
