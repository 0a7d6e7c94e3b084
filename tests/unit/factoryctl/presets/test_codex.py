"""The Codex preset, pure: its command line, environment and ``CODEX_HOME`` files for a job, and its parser
fed with ``codex exec --json`` output recorded from the real CLI (0.169.0) against the scripted Responses
server (tests/fixtures/agents/codex/, recorded through this preset's own invocation)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker.errors import WorkspaceError
from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Verdict
from factoryctl.worker.presets.codex import DEFAULT_BASE_URL, PRESET
from factoryctl.worker.workspace import DEFINED_BY

FIXTURES = Path(__file__).parents[3] / "fixtures" / "agents" / "codex"
HOME = Path("/runs/r1.home")
WORKSPACE = Path("/runs/r1")


def job(**changes: Any) -> Job:
    values: dict[str, Any] = {"run_id": "run_1", "prompt": "Fix the bug."}
    values.update(changes)
    return Job(**values)


def context(**changes: Any) -> Context:
    values: dict[str, Any] = {"workspace": WORKSPACE, "home": HOME, "env": {"OPENAI_API_KEY": "sk-worker"}}
    values.update(changes)
    return Context(**values)


def config(j: Job, c: Context | None = None) -> dict[str, Any]:
    files = PRESET.invocation(j, "/opt/codex", c or context()).files
    return tomllib.loads(files[".codex/config.toml"])


def parse(name: str) -> tuple[list[base.AgentEvent], Verdict | None]:
    parser = PRESET.parser()
    events: list[base.AgentEvent] = []
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        assert parser.is_structured(line)
        events += parser.feed(line)
    return events, parser.verdict()


def of(events: list[base.AgentEvent], kind: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.kind == kind]


# --- version -------------------------------------------------------------------------------------------


def test_version_is_read_from_the_cli_banner() -> None:
    assert PRESET.version("codex-cli 0.169.0\n") == (0, 169, 0)
    assert PRESET.version("codex-cli 1.2.3-alpha.1") == (1, 2, 3)
    assert PRESET.version("claude 2.1.332 (Claude Code)") is None
    assert PRESET.minimum_version == (0, 169, 0)
    assert (PRESET.name, PRESET.executable) == ("codex", "codex")


# --- invocation ----------------------------------------------------------------------------------------


def test_a_new_thread_runs_exec_json_with_the_prompt_after_a_double_dash() -> None:
    harness = {"type": "codex", "model_id": "gpt-5.2-codex"}
    j = job(prompt="-not a flag", agent_config={"harness": harness})
    invocation = PRESET.invocation(j, "/opt/codex", context())
    assert invocation.argv == [
        "/opt/codex", "exec", "--json", "--skip-git-repo-check", "--model", "gpt-5.2-codex",
        "--", "-not a flag",
    ]  # fmt: skip
    assert invocation.stdin is None
    assert invocation.env == {"CODEX_HOME": str(HOME / ".codex"), "OPENAI_API_KEY": "sk-worker"}


def test_a_follow_up_resumes_the_thread() -> None:
    invocation = PRESET.invocation(job(model_id="o4"), "codex", context(resume="01a2-thread"))
    assert invocation.argv == [
        "codex", "exec", "resume", "--json", "--skip-git-repo-check", "--model", "o4", "--", "01a2-thread",
        "Fix the bug.",
    ]  # fmt: skip


def test_no_model_or_auto_leaves_codex_its_default() -> None:
    assert "--model" not in PRESET.invocation(job(), "codex", context()).argv
    for model in ("auto", "Default"):
        assert "--model" not in PRESET.invocation(job(model_id=model), "codex", context()).argv


def test_config_points_a_responses_provider_at_the_endpoint_and_turns_off_prompts_and_telemetry() -> None:
    env = {"OPENAI_API_KEY": "sk-worker", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    harness = {"type": "codex", "reasoning_level": "HIGH"}
    toml = config(job(agent_config={"harness": harness}), context(env=env))
    assert toml["model_provider"] == "factoryctl"
    assert toml["model_providers"]["factoryctl"] == {
        "name": "factoryctl run provider",
        "base_url": "http://127.0.0.1:9/v1",
        "env_key": "OPENAI_API_KEY",
        "wire_api": "responses",
    }
    assert (toml["approval_policy"], toml["sandbox_mode"]) == ("never", "danger-full-access")
    assert toml["model_reasoning_effort"] == "high"
    assert toml["check_for_update_on_startup"] is False
    assert toml["features"] == {"plugins": False}
    assert toml["analytics"] == {"enabled": False} and toml["feedback"] == {"enabled": False}
    assert toml["otel"] == {"exporter": "none"}
    assert "mcp_servers" not in toml


def test_the_default_endpoint_is_openai_and_the_run_environment_wins_over_the_worker() -> None:
    assert config(job())["model_providers"]["factoryctl"]["base_url"] == DEFAULT_BASE_URL
    run_env = {"env": {"OPENAI_BASE_URL": "http://run/v1"}, "secrets": {"OPENAI_API_KEY": "sk-run"}}
    j = job(environment=run_env)
    c = context(env={"OPENAI_BASE_URL": "http://worker/v1", "OPENAI_API_KEY": "sk-worker"})
    assert config(j, c)["model_providers"]["factoryctl"]["base_url"] == "http://run/v1"
    assert PRESET.invocation(j, "codex", c).env["OPENAI_API_KEY"] == "sk-run"


def test_a_managed_secret_auth_becomes_the_api_key() -> None:
    harness = {"type": "codex", "auth": {"source": "managedSecret", "secret_name": "team-openai"}}
    j = job(agent_config={"harness": harness}, run_secrets={"team_openai": "sk-managed"})
    assert PRESET.invocation(j, "codex", context()).env["OPENAI_API_KEY"] == "sk-managed"


def test_no_key_anywhere_sets_none_so_codex_reports_it() -> None:
    assert "OPENAI_API_KEY" not in PRESET.invocation(job(), "codex", context(env={})).env


def test_mcp_servers_become_codex_tables() -> None:
    servers = {
        "docs": {"url": "https://mcp.example/x", "headers": {"Authorization": 'Bearer "q"\n'}},
        "local tools": {"command": "node", "args": ["srv.js"], "env": {"A": "1"}, DEFINED_BY: "dev"},
        "legacy": {"warp_id": "abc"},
    }
    toml = config(job(mcp_servers=servers))
    assert toml["mcp_servers"] == {
        "docs": {"url": "https://mcp.example/x", "http_headers": {"Authorization": 'Bearer "q"\n'}},
        "local tools": {"command": "node", "args": ["srv.js"], "env": {"A": "1"}},
    }


def test_a_command_server_no_environment_defined_is_refused() -> None:
    with pytest.raises(WorkspaceError, match="may not start a command"):
        PRESET.invocation(job(mcp_servers={"x": {"command": "sh"}}), "codex", context())


def test_skills_are_written_where_codex_lists_them_the_agents_own_winning() -> None:
    skills = [
        {"name": "s", "skill_name": "review", "description": "team", "body": "Team way.", "front_matter": {}},
        {"name": "a/s", "skill_name": "review", "description": "own", "body": "Own way.", "front_matter": {}},
    ]
    files = PRESET.invocation(job(skills=skills), "codex", context()).files
    assert set(files) == {".codex/config.toml", ".codex/skills/review/SKILL.md"}
    skill = files[".codex/skills/review/SKILL.md"]
    assert skill.startswith("---\n") and 'description: "own"' in skill and skill.endswith("Own way.\n")


# --- parser (recorded output) --------------------------------------------------------------------------


def test_a_tool_calling_run_becomes_session_calls_results_message_and_usage() -> None:
    events, verdict = parse("tool_call")
    assert events[0].kind == "session"
    assert events[0].data["session_id"] == "01a21759-26bd-7a01-8f5b-aaf4a2477f98"
    calls, results = of(events, "tool_call"), of(events, "tool_result")
    assert [c["name"] for c in calls] == ["exec_command", "exec_command"]
    assert "echo hello > out/greeting.txt" in calls[0]["input"]["command"]
    assert [(r["id"], r["ok"], r["output"]) for r in results] == [
        (calls[0]["id"], True, "hello\n"),
        (calls[1]["id"], False, "oops\n"),  # exit 3
    ]
    assistant = [m["text"] for m in of(events, "message") if m["role"] == "assistant"]
    assert assistant == ["Wrote out/greeting.txt."]
    system = [m["text"] for m in of(events, "message") if m["role"] == "system"]
    assert len(system) == 1 and "Model metadata" in system[0]  # a warning item, not a failure
    assert of(events, "usage") == [{"input_tokens": 300, "output_tokens": 60, "cost_usd": None}]
    assert verdict == Verdict(ok=True, message="Wrote out/greeting.txt.")
    assert [e.kind for e in events].index("tool_call") < [e.kind for e in events].index("tool_result")


def test_a_resumed_thread_keeps_its_id() -> None:
    events, verdict = parse("resume")
    assert of(events, "session") == [{"session_id": "01a21759-26bd-7a01-8f5b-aaf4a2477f98"}]
    assert verdict is not None and verdict.ok
    assert "greeting" in (verdict.message or "")


def test_a_failed_turn_is_a_failed_verdict_with_codexs_message() -> None:
    events, verdict = parse("failed")
    assert verdict == Verdict(
        ok=False, message="stream disconnected before completion: the model is overloaded"
    )
    assert sum("Reconnecting" in m["text"] for m in of(events, "message")) == 5
    assert of(events, "usage") == []


def test_a_missing_key_fails_with_codexs_words() -> None:
    _events, verdict = parse("missing_key")
    assert verdict == Verdict(ok=False, message="Missing environment variable: `OPENAI_API_KEY`.")


def test_a_refused_key_fails_after_codexs_retries_with_the_providers_words() -> None:
    events, verdict = parse("unauthorized")  # a 401 to six requests in a row (Codex retries even that)
    assert verdict is not None and not verdict.ok
    assert "401 Unauthorized: Incorrect API key provided" in (verdict.message or "")
    assert sum("Reconnecting" in m["text"] for m in of(events, "message")) == 5


def test_lines_outside_the_json_stream_are_not_structured_and_no_output_is_no_verdict() -> None:
    parser = PRESET.parser()
    for line in ("Reading additional input from stdin...", "", "[1, 2]", '{"no": "type"}', "{broken"):
        assert not parser.is_structured(line)
        assert parser.feed(line) == []
    assert parser.verdict() is None


def test_an_error_without_a_turn_end_fails() -> None:
    parser = PRESET.parser()
    parser.feed(json.dumps({"type": "error", "message": "config is broken"}))
    assert parser.verdict() == Verdict(ok=False, message="config is broken")


# Items the scripted server cannot make Codex produce offline (an MCP server, apply_patch), in the shape
# of Codex's exec event types (``McpToolCallItem``, ``FileChangeItem``).


def feed_items(*items: tuple[str, dict[str, Any]]) -> list[base.AgentEvent]:
    parser = PRESET.parser()
    events: list[base.AgentEvent] = []
    for kind, item in items:
        events += parser.feed(json.dumps({"type": kind, "item": item}))
    return events


def test_mcp_tool_calls_are_named_server_dot_tool() -> None:
    started = {"id": "item_4", "type": "mcp_tool_call", "server": "docs", "tool": "search",
               "arguments": {"q": "x"}, "result": None, "error": None, "status": "in_progress"}  # fmt: skip
    done = {**started, "status": "completed", "result": {"content": [{"type": "text", "text": "found"}]}}
    failed = {**started, "id": "item_5", "status": "failed", "error": {"message": "boom"}}
    events = feed_items(("item.started", started), ("item.completed", done), ("item.completed", failed))
    assert [(e.kind, dict(e.data)) for e in events] == [
        ("tool_call", {"id": "item_4", "name": "docs.search", "input": {"q": "x"}}),
        ("tool_result", {"id": "item_4", "ok": True, "output": "found", "truncated": False}),
        ("tool_call", {"id": "item_5", "name": "docs.search", "input": {"q": "x"}}),
        ("tool_result", {"id": "item_5", "ok": False, "output": "boom", "truncated": False}),
    ]


def test_file_changes_are_apply_patch_calls_and_reasoning_is_left_out() -> None:
    change = {"id": "item_6", "type": "file_change", "status": "completed",
              "changes": [{"path": "a.py", "kind": "update"}, {"path": "b.py", "kind": "add"}]}  # fmt: skip
    thinking = {"id": "item_7", "type": "reasoning", "text": "**Planning**"}
    events = feed_items(("item.completed", change), ("item.completed", thinking))
    assert [e.kind for e in events] == ["tool_call", "tool_result"]
    assert events[0].data["name"] == "apply_patch"
    assert events[1].data["output"] == "update a.py\nadd b.py"


def test_a_long_command_output_is_cut() -> None:
    item = {"id": "i", "type": "command_execution", "command": "yes", "aggregated_output": "y\n" * 5000,
            "exit_code": 0, "status": "completed"}  # fmt: skip
    result = feed_items(("item.completed", item))[1].data
    assert result["truncated"] is True and len(result["output"]) == base.MAX_OUTPUT_CHARS
