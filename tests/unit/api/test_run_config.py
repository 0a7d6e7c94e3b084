"""AmbientAgentConfig resolution order and validation (docs/agent-config.md)."""

from __future__ import annotations

import pytest

from api.runs.config import resolve_config, validate_config, validate_mcp_servers, worker_host_of


def fields(errors: list[dict[str, str]]) -> list[str]:
    return [e["field"] for e in errors]


def test_each_key_comes_from_the_highest_layer_that_sets_it() -> None:
    resolved = resolve_config(
        {"model_id": "request-model"},
        {"model_id": "automation-model", "name": "automation-name"},
        {"name": "agent-name", "base_prompt": "agent prompt", "environment_id": "agent-env"},
        {"environment_id": "server-env", "worker_host": "server-host"},
    )
    assert resolved == {
        "model_id": "request-model",
        "name": "automation-name",
        "base_prompt": "agent prompt",
        "environment_id": "agent-env",
        "worker_host": "server-host",
    }


def test_null_in_a_higher_layer_does_not_clear_a_lower_one() -> None:
    assert resolve_config({"model_id": None}, None, {"model_id": "m1"}, None) == {"model_id": "m1"}


def test_nested_maps_are_replaced_whole_not_merged() -> None:
    resolved = resolve_config(
        {"mcp_servers": {"a": {"url": "https://a.example"}}},
        None,
        {"mcp_servers": {"b": {"command": "b-server"}}, "harness": {"type": "command"}},
        {"harness": {"type": "echo"}},
    )
    assert resolved["mcp_servers"] == {"a": {"url": "https://a.example"}}
    assert resolved["harness"] == {"type": "command"}


def test_resolution_drops_unknown_keys_and_copies_values() -> None:
    agent = {"mcp_servers": {"b": {"command": "x", "args": ["1"]}}, "legacy_flag": True}
    resolved = resolve_config(None, None, agent, None)
    assert "legacy_flag" not in resolved
    resolved["mcp_servers"]["b"]["args"].append("2")
    assert agent["mcp_servers"]["b"]["args"] == ["1"]  # type: ignore[index]


def test_empty_layers_give_an_empty_config() -> None:
    assert resolve_config(None, {}, None, {}) == {}


def test_a_full_valid_config_has_no_errors() -> None:
    config = {
        "name": "triage",
        "model_id": "claude-sonnet",
        "base_prompt": "Be brief.",
        "environment_id": "env-1",
        "worker_host": "warp",
        "skill_spec": "acme/skills:triage",
        "mcp_servers": {
            "files": {"warp_id": "files"},
            "search": {"url": "https://mcp.example/sse", "headers": {"X-Key": "k"}},
            "hosted": {"warp_id": "w-123"},
        },
        "harness": {"type": "command"},
    }
    assert validate_config(config) == []
    assert validate_config(None) == []


def test_unknown_config_keys_are_rejected_with_the_allowed_list() -> None:
    errors = validate_config({"model": "x"})
    assert fields(errors) == ["config.model"]
    assert "model_id" in errors[0]["message"]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"name": 3}, "config.name"),
        ({"model_id": ""}, "config.model_id"),
        ({"worker_host": ["a"]}, "config.worker_host"),
        ({"name": "x" * 201}, "config.name"),
        ({"skill_spec": "no-colon"}, "config.skill_spec"),
        ({"skill_spec": "owner/repo:"}, "config.skill_spec"),
        ({"harness": {"type": "shell"}}, "config.harness.type"),
        ({"harness": {"type": "command", "command": "rm -rf /"}}, "config.harness.command"),
        ({"harness": "echo"}, "config.harness"),
        ({"mcp_servers": []}, "config.mcp_servers"),
    ],
)
def test_invalid_values_name_the_field(config: dict[str, object], field: str) -> None:
    assert field in fields(validate_config(config))


def test_config_must_be_an_object() -> None:
    assert fields(validate_config("model=x")) == ["config"]


def test_skill_spec_accepts_both_forms() -> None:
    assert validate_config({"skill_spec": "owner/repo:skill-name"}) == []
    assert validate_config({"skill_spec": "owner/repo:.agents/skills/x/SKILL.md"}) == []
    assert validate_config({"skill_spec": "owner/repo:.git/config"})  # docs/agent-config.md, "Skills"


@pytest.mark.parametrize(
    "server",
    [
        {},
        {"url": "https://x", "warp_id": "w"},
    ],
)
def test_mcp_server_needs_exactly_one_transport(server: dict[str, object]) -> None:
    errors = validate_mcp_servers({"s": server})
    assert fields(errors) == ["mcp_servers.s"]
    assert "exactly one transport" in errors[0]["message"]


def test_mcp_server_fields_are_checked_per_transport() -> None:
    errors = validate_mcp_servers(
        {
            "a": {"warp_id": "x", "headers": {"k": "v"}},
            "b": {"url": "ftp://x"},
            "c": {"url": "https://x", "args": ["--flag"]},
            "d": {"url": "https://x", "headers": {"n": 1}},
            "bad name!": {"warp_id": "w"},
        }
    )
    assert set(fields(errors)) == {
        "mcp_servers.a.headers",
        "mcp_servers.b.url",
        "mcp_servers.c.args",
        "mcp_servers.d.headers",
        "mcp_servers.bad name!",
    }


@pytest.mark.parametrize(
    "server",
    [
        {"command": "id"},
        {"command": "sh", "args": ["-c", "cat /data/secret.key"], "env": {"A": "b"}},
        {"command": "x", "url": "https://x"},
    ],
)
def test_a_command_is_never_a_runs_to_choose(server: dict[str, object]) -> None:
    """The one check every config a caller sends goes through (docs/agent-config.md, "MCP servers")."""
    errors = validate_mcp_servers({"s": server})
    assert fields(errors) == ["mcp_servers.s.command"]
    assert "{warp_id: NAME}" in errors[0]["message"] and "mcpServers" in errors[0]["message"]


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://10.1.2.3/mcp",
        "https://[fe80::1]/mcp",
        "http://mcp.example/",
        "https://u:p@mcp.example/",
        "https://2852039166/",
    ],
)
def test_a_url_server_obeys_the_notification_address_rules(url: str) -> None:
    errors = validate_mcp_servers({"s": {"url": url, "headers": {"Authorization": "secret:TOKEN"}}})
    assert fields(errors) == ["mcp_servers.s.url"]
    assert errors[0]["message"].startswith("MCP server URL refused: ")


def test_public_and_loopback_urls_are_accepted() -> None:
    servers = {"a": {"url": "https://mcp.example/x"}, "b": {"url": "http://127.0.0.1:9000/mcp"}}
    assert validate_mcp_servers(servers) == []


@pytest.mark.parametrize(
    ("given", "stored"), [(None, ""), ("", ""), ("warp", ""), (" warp ", ""), ("host-a", "host-a")]
)
def test_worker_host_unset_or_warp_means_service_hosted(given: str | None, stored: str) -> None:
    assert worker_host_of(given) == stored


def test_the_sdks_unsupported_keys_are_known_not_unknown() -> None:
    errors = validate_config({"idle_timeout_minutes": 5, "memory_stores": [], "modle_id": "x"})
    by_field = {e["field"]: e["message"] for e in errors}
    assert "does not support" in by_field["config.idle_timeout_minutes"]
    assert "does not support" in by_field["config.memory_stores"]
    assert by_field["config.modle_id"].startswith("unknown config key")


def test_harness_auth_secrets_become_the_presets_auth() -> None:
    request = {
        "harness": {"type": "claude", "model_id": "opus"},
        "harness_auth_secrets": {"claude_auth_secret_name": "CLAUDE_KEY", "codex_auth_secret_name": "X"},
    }
    assert validate_config(request) == []
    resolved = resolve_config(request, None, None, None)
    assert resolved["harness"] == {
        "type": "claude",
        "model_id": "opus",
        "auth": {"source": "managedSecret", "secret_name": "CLAUDE_KEY"},
    }
    # an auth the harness already names wins; a harness without a secret for its type gets none
    given = {"harness": {"type": "codex", "auth": {"source": "workerEnvironment"}}, **request}
    given["harness"] = {"type": "codex", "auth": {"source": "workerEnvironment"}}
    assert resolve_config(given, None, None, None)["harness"]["auth"] == {"source": "workerEnvironment"}
    gemini = {"harness": {"type": "gemini"}, "harness_auth_secrets": {"claude_auth_secret_name": "C"}}
    assert "auth" not in resolve_config(gemini, None, None, None)["harness"]
    bad = validate_config({"harness_auth_secrets": {"claude_auth_secret_name": 3, "other": "x"}})
    assert {e["field"] for e in bad} == {
        "config.harness_auth_secrets.claude_auth_secret_name",
        "config.harness_auth_secrets.other",
    }
