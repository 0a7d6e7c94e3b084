"""The Gemini CLI preset, pure: its command line, environment and agent-home files for a job, and its
parser fed with ``--output-format stream-json`` output recorded from the real CLI (0.61.0) against the
scripted Gemini API (tests/fixtures/agents/gemini/, recorded through this preset's own invocation by
tests/agents/record_gemini.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker.errors import WorkspaceError
from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Verdict
from factoryctl.worker.presets.gemini import PRESET
from factoryctl.worker.workspace import DEFINED_BY

FIXTURES = Path(__file__).parents[3] / "fixtures" / "agents" / "gemini"
HOME = Path("/runs/r1.home")
WORKSPACE = Path("/runs/r1")


def job(**changes: Any) -> Job:
    values: dict[str, Any] = {"run_id": "run_1", "prompt": "Fix the bug."}
    values.update(changes)
    return Job(**values)


def context(**changes: Any) -> Context:
    values: dict[str, Any] = {"workspace": WORKSPACE, "home": HOME, "env": {"GEMINI_API_KEY": "worker-key"}}
    values.update(changes)
    return Context(**values)


def settings(j: Job) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        PRESET.invocation(j, "/opt/gemini", context()).files[".gemini/settings.json"]
    )
    return result


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


def test_version_is_read_from_the_cli_output() -> None:
    assert PRESET.version("0.61.0\n") == (0, 61, 0)
    assert PRESET.version("0.62.0-nightly.20261120\n") == (0, 62, 0)
    assert PRESET.version("gemini: command not found") is None
    assert PRESET.minimum_version == (0, 61, 0)
    assert (PRESET.name, PRESET.executable) == ("gemini", "gemini")


# --- invocation ----------------------------------------------------------------------------------------


def test_a_new_session_is_headless_stream_json_yolo_with_the_prompt_on_stdin() -> None:
    invocation = PRESET.invocation(job(), "/opt/gemini", context())
    assert invocation.argv == ["/opt/gemini", "--output-format", "stream-json", "--approval-mode", "yolo"]
    assert invocation.stdin == "Fix the bug."
    assert invocation.env == {
        "HOME": str(HOME),
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_API_KEY": "worker-key",
    }


def test_the_harness_model_wins_over_the_runs_and_auto_leaves_the_choice_to_the_cli() -> None:
    harness = {"harness": {"type": "gemini", "model_id": "gemini-2.5-pro"}}
    chosen = PRESET.invocation(job(agent_config=harness, model_id="gemini-2.5-flash"), "g", context())
    assert chosen.argv[-2:] == ["-m", "gemini-2.5-pro"]
    assert PRESET.invocation(job(model_id="gemini-2.5-flash"), "g", context()).argv[-2:] == [
        "-m",
        "gemini-2.5-flash",
    ]
    assert "-m" not in PRESET.invocation(job(model_id="auto"), "g", context()).argv


def test_a_follow_up_resumes_the_session() -> None:
    argv = PRESET.invocation(job(model_id="m"), "g", context(resume="d1004470-2e83")).argv
    assert argv[-4:] == ["-m", "m", "--resume", "d1004470-2e83"]


def test_the_endpoint_and_key_come_from_the_runs_environment_before_the_workers() -> None:
    run_env = {
        "env": {"GOOGLE_GEMINI_BASE_URL": "http://gw.internal"},
        "secrets": {"GEMINI_API_KEY": "run-key"},
    }
    env = PRESET.invocation(job(environment=run_env), "g", context()).env
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://gw.internal"
    assert env["GEMINI_API_KEY"] == "run-key"
    assert "GEMINI_API_KEY" not in PRESET.invocation(job(), "g", context(env={})).env


@pytest.mark.parametrize(
    "config",
    [
        {"harness": {"type": "gemini", "auth": {"source": "managedSecret", "secret_name": "team-gemini"}}},
        {"harness": {"type": "gemini"}, "harness_auth_secrets": {"gemini_auth_secret_name": "team-gemini"}},
    ],
)
def test_a_managed_secret_becomes_the_api_key(config: dict[str, Any]) -> None:
    # The worker injects a team secret as the variable named after it (team-gemini -> team_gemini).
    env = PRESET.invocation(job(agent_config=config), "g", context(env={"team_gemini": "managed"})).env
    assert env["GEMINI_API_KEY"] == "managed"


def test_settings_pick_api_key_auth_and_turn_off_everything_but_the_model() -> None:
    written = settings(job())
    assert written["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert written["telemetry"]["enabled"] is False
    assert written["privacy"] == {"usageStatisticsEnabled": False}
    assert written["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    assert "mcpServers" not in written


def test_mcp_servers_are_translated_into_settings() -> None:
    servers = {
        "docs": {"url": "https://mcp.example/docs", "headers": {"Authorization": "Bearer t"}},
        "local": {"command": "mcp-local", "env": {"A": "1"}, DEFINED_BY: True},
    }
    assert settings(job(mcp_servers=servers))["mcpServers"] == {
        "docs": {"url": "https://mcp.example/docs", "type": "http", "headers": {"Authorization": "Bearer t"}},
        "local": {"command": "mcp-local", "args": [], "env": {"A": "1"}},
    }


def test_an_mcp_command_from_the_runs_own_config_is_refused() -> None:
    with pytest.raises(WorkspaceError, match="may not start a command"):
        PRESET.invocation(job(mcp_servers={"x": {"command": "sh"}}), "g", context())


def test_skills_are_written_where_the_cli_discovers_them() -> None:
    skill = {
        "name": "triage",
        "skill_name": "triage",
        "description": "Sort issues",
        "body": "Do it.",
        "front_matter": {},
    }
    files = PRESET.invocation(job(skills=[skill]), "g", context()).files
    text = files[".gemini/skills/triage/SKILL.md"]
    assert text.startswith('---\nname: "triage"\ndescription: "Sort issues"\n---\n')
    assert text.rstrip().endswith("Do it.")


# --- parser --------------------------------------------------------------------------------------------


def test_a_tool_run_becomes_session_messages_tool_calls_results_and_usage() -> None:
    events, verdict = parse("tool_run")
    assert [e.kind for e in events] == [
        "session",
        "message",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "message",
        "usage",
    ]
    assert of(events, "session") == [{"session_id": "d1004470-2e83-4a40-9c8d-4aa1dff483c6"}]
    # deltas are joined into one message; the echoed prompt is not an event
    assert of(events, "message") == [
        {"role": "assistant", "text": "I will write the file."},
        {"role": "assistant", "text": "All done: wrote out/hello.txt."},
    ]
    calls = of(events, "tool_call")
    assert [c["name"] for c in calls] == ["write_file", "run_shell_command", "read_file"]
    assert calls[0]["input"] == {"file_path": "/tmp/record/ws/out/hello.txt", "content": "hello\n"}
    assert calls[1]["id"] == "run_shell_command__call_0002"
    results = of(events, "tool_result")
    assert [r["id"] for r in results] == [c["id"] for c in calls]
    assert [r["ok"] for r in results] == [True, True, False]
    assert results[0]["output"] == ""
    assert results[1]["output"] == "shell-ran\nhello.txt"
    assert results[2]["output"] == "File not found: /tmp/record/ws/missing.txt"
    assert of(events, "usage") == [{"input_tokens": 400, "output_tokens": 80, "cost_usd": None}]
    assert verdict == Verdict(ok=True, message="All done: wrote out/hello.txt.")


def test_a_resumed_session_reports_this_invocations_usage() -> None:
    events, verdict = parse("resume")
    assert of(events, "session") == [{"session_id": "d1004470-2e83-4a40-9c8d-4aa1dff483c6"}]
    assert of(events, "usage") == [{"input_tokens": 100, "output_tokens": 20, "cost_usd": None}]
    assert verdict == Verdict(ok=True, message="Resumed: I wrote out/hello.txt before.")


def test_an_api_error_is_a_failed_verdict_with_the_clis_message() -> None:
    events, verdict = parse("api_error")
    assert [e.kind for e in events] == ["session", "usage"]
    assert verdict is not None and not verdict.ok
    assert verdict.message is not None and "scripted: the model refused this request" in verdict.message


def test_lines_outside_the_json_stream_are_not_structured_and_no_result_is_no_verdict() -> None:
    parser = PRESET.parser()
    for line in ("YOLO mode is enabled.", "", "[1, 2]", '{"no": "type"}', "{broken"):
        assert not parser.is_structured(line)
        assert parser.feed(line) == []
    assert parser.verdict() is None


def test_an_error_line_is_a_system_message_and_the_failure_when_the_result_says_none() -> None:
    parser = PRESET.parser()
    events = parser.feed('{"type":"error","severity":"error","message":"Maximum session turns exceeded"}')
    assert events == [base.message("Maximum session turns exceeded", role="system")]
    parser.feed('{"type":"result","status":"error","stats":{}}')
    assert parser.verdict() == Verdict(ok=False, message="Maximum session turns exceeded")


def test_a_whole_assistant_message_and_long_tool_output_are_bounded() -> None:
    parser = PRESET.parser()
    assert parser.feed('{"type":"message","role":"assistant","content":"whole"}') == [base.message("whole")]
    line = json.dumps({"type": "tool_result", "tool_id": "t1", "status": "success", "output": "x" * 10_000})
    (result,) = parser.feed(line)
    assert len(result.data["output"]) == base.MAX_OUTPUT_CHARS and result.data["truncated"] is True
