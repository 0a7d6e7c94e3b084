"""The shipped JSON Schemas, and the human messages their violations produce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import schemas
from reconciler import schema_errors
from reconciler.yamlmarks import parse_yaml

REPO = Path(__file__).resolve().parents[3]


def messages(name: str, text: str) -> list[str]:
    parsed = parse_yaml(text, "f.yaml")
    assert parsed.data is not None
    return [d.message for d in schema_errors.check(name, parsed.data, parsed.marks, "f.yaml")]


# A SKILL.md's front matter is the open Agent Skills format (unknown keys are kept); common holds $defs only.
OPEN = ("skill", "common")


@pytest.mark.parametrize("name", [n for n in schemas.NAMES if n not in OPEN])
def test_schemas_are_valid_2020_12_and_closed(name: str) -> None:
    schema = schemas.load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"{schemas.BASE_URI}{name}.schema.json"
    assert schema["additionalProperties"] is False


def test_unknown_schema_name() -> None:
    with pytest.raises(KeyError):
        schemas.load_schema("nope")


def test_agent_config_is_shared_by_factory_agents_and_automation_config() -> None:
    agent = (
        "model_id: m\nmcp_servers:\n  gh: {url: 'https://x/mcp', headers: {A: b}}\n  local: {warp_id: srv}\n"
    )
    assert (
        messages(
            "factory",
            "name: f\nagents:\n  a:\n" + "".join("    " + line + "\n" for line in agent.splitlines()),
        )
        == []
    )
    # The command a harness runs is the worker's (``--command``), never a definition's.
    assert messages("automation", "config:\n  harness: {type: command}\n") == []
    [refused] = messages("automation", "config:\n  harness: {type: command, command: 'rm -rf /'}\n")
    assert "command" in refused


@pytest.mark.parametrize(
    ("schema", "text", "expected"),
    [
        ("webhook", "secretName: s\nenabled: 'no'\n", "'enabled' must be a boolean, got string"),
        (
            "webhook",
            "secretName: s\nauthMode: bearer\n",
            "'authMode' must be one of: token, url_token, signature; got 'bearer'",
        ),
        (
            "webhook",
            "secretName: 'bad name'\n",
            "'secretName' secret names use letters, digits, '.', '_' or '-' "
            "(1-200, starting with a letter or digit); got 'bad name'",
        ),
        (
            "automation",
            "triggers:\n  - provider: gitlub\n    event: received\n",
            "'triggers[0].provider' must be one of: github, gitlab, linear, jira, slack, schedule, webhook,"
            " factory; got 'gitlub' (did you mean 'gitlab'?)",
        ),
        (
            "automation",
            "triggers:\n  - provider: webhook\n    event: received\n    filter: {webhook_ids: []}\n",
            "'triggers[0].filter.webhook_ids' must not be empty",
        ),
        (
            "automation",
            "triggers:\n  - provider: webhook\n    event: received\n",
            "missing required key 'filter' in 'triggers[0]'",
        ),
        ("automation", "triggers: {}\n", "'triggers' must be a list, got mapping"),
        (
            "automation",
            "config:\n  mcp_servers:\n    x: {url: 'https://x', warp_id: b}\n",
            "'config.mcp_servers.x': an MCP server needs exactly one transport: {url, headers?} or {warp_id}",
        ),
        (
            "automation",
            "config:\n  mcp_servers:\n    x: {command: id}\n",
            "a run may not start a command: define the stdio MCP server under mcpServers in "
            "environments/<name>.yaml and reference it here as {warp_id: NAME} (with that environment_id)",
        ),
        (
            "environment",
            "mcpServers:\n  gh: {command: gh-mcp, url: 'https://x'}\n",
            "'mcpServers.gh': an MCP server needs exactly one transport: {command, args?, env?} or "
            "{url, headers?}",
        ),
        (
            "automation",
            "config:\n  mcp_servers:\n    x: 5\n",
            "'config.mcp_servers.x' must be a mapping, got integer",
        ),
        (
            "automation",
            "config:\n  skill_spec: nope\n",
            "'config.skill_spec' must look like 'owner/repo:skill-name' or "
            "'owner/repo:path/to/SKILL.md'; got 'nope'",
        ),
        (
            "factory",
            "name: f\nagents:\n  'bad name': {}\n",
            "invalid key 'bad name' in 'agents': agent names use letters, digits, '.', '_' or '-' "
            "(1-100, starting with a letter or digit)",
        ),
        (
            "environment",
            "env:\n  1BAD: x\n",
            "invalid key '1BAD' in 'env': environment variable names use letters, digits and '_' "
            "and do not start with a digit",
        ),
        ("environment", "secrets: [a, a]\n", "'secrets' must not contain duplicates"),
        (
            "environment",
            "setupTimeoutSeconds: 100000\n",
            "'setupTimeoutSeconds' must be at most 86400, got 100000",
        ),
    ],
)
def test_messages_name_the_key_and_the_problem(schema: str, text: str, expected: str) -> None:
    assert messages(schema, text) == [expected]


def _documents() -> list[tuple[str, Any]]:
    """Every definition document in the example and the bad fixture, plus hand-made edge cases."""
    out: list[tuple[str, Any]] = []
    for base in (REPO / "example-factory", REPO / "tests" / "fixtures" / "bad-factory"):
        for path in sorted(base.rglob("*")):
            schema = {"webhooks": "webhook", "environments": "environment"}.get(path.parent.name)
            if path.name == "factory.yaml":
                schema = "factory"
            if path.suffix not in (".yaml", ".yml") or schema is None:
                continue
            parsed = parse_yaml(path.read_text(errors="replace"), str(path))
            if parsed.data is not None:
                out.append((schema, parsed.data))
    out += [
        ("webhook", {"secretName": "s", "authMode": "signature", "signatureScheme": "svix"}),
        ("webhook", {"secretName": "s", "deliveryIdHeader": "X-Id$"}),
        ("webhook", {"secretName": "s", "enabled": 1}),
        (
            "automation",
            {
                "triggers": [
                    {
                        "provider": "webhook",
                        "event": "received",
                        "filter": {"webhook_ids": ["a"], "payload": []},
                    }
                ]
            },
        ),
        ("automation", {"config": {"harness": {"type": "echo"}}, "enabled": True}),
        ("environment", {"repos": [{"url": "u", "path": "a/../../x"}]}),
        ("environment", {"setupTimeoutSeconds": 1.0}),
        ("factory", {"name": "x", "agents": {"a": {"worker_host": ""}}}),
    ]
    return out


def test_fast_path_agrees_with_jsonschema() -> None:
    """The compiled fast path may only ever say "valid" when jsonschema says so too."""
    for schema, data in _documents():
        assert schema_errors.is_valid(schema, data) == schema_errors.validator(schema).is_valid(data), (
            schema,
            data,
        )
