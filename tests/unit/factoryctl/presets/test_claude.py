"""The ``claude`` preset: its parser over output recorded from the real Claude Code 2.1.332
(``tests/fixtures/agents/claude/``, re-recorded by ``tests/agents/record_claude.py``), and the invocation
it builds (argv, environment, files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker import WorkspaceError
from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import AgentEvent, Context
from factoryctl.worker.presets.claude import PRESET, ClaudeParser

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "agents" / "claude"


def parse(name: str) -> tuple[ClaudeParser, list[AgentEvent]]:
    parser = PRESET.parser()
    events: list[AgentEvent] = []
    for line in (FIXTURES / name).read_text().splitlines():
        assert parser.is_structured(line)
        events += parser.feed(line)
    return parser, events


def session_of(name: str) -> str:
    first = json.loads((FIXTURES / name).read_text().splitlines()[0])
    assert first["type"] == "system" and first["subtype"] == "init"
    return str(first["session_id"])


def test_version_is_read_from_the_cli_banner() -> None:
    assert PRESET.version("2.1.332 (Claude Code)\n") == (2, 1, 332)
    assert PRESET.version("\n2.3.0 (Claude Code)") == (2, 3, 0)
    assert PRESET.version("command not found") is None
    assert PRESET.minimum_version == (2, 1, 0)
    assert (2, 0, 99) < PRESET.minimum_version


def test_a_tool_run_becomes_session_messages_tool_calls_results_and_usage() -> None:
    parser, events = parse("tool_run.jsonl")
    session_id = session_of("tool_run.jsonl")
    assert [(e.kind, dict(e.data)) for e in events] == [
        ("session", {"session_id": session_id}),
        ("message", {"role": "assistant", "text": "I will write the file."}),
        (
            "tool_call",
            {
                "id": "call_0001",
                "name": "Write",
                "input": {"file_path": "/tmp/record/ws/out/hello.txt", "content": "hello from claude\n"},
            },
        ),
        (
            "tool_result",
            {
                "id": "call_0001",
                "ok": True,
                "output": "File created successfully at: /tmp/record/ws/out/hello.txt (file state is current"
                " in your context — no need to Read it back)",
                "truncated": False,
            },
        ),
        (
            "tool_call",
            {
                "id": "call_0002",
                "name": "Bash",
                "input": {"command": "echo shell-ran && ls out && false", "description": "list"},
            },
        ),
        # the command failed: Claude Code marks the result is_error, with the exit code in front
        (
            "tool_result",
            {
                "id": "call_0002",
                "ok": False,
                "output": "Exit code 1\nshell-ran\nhello.txt",
                "truncated": False,
            },
        ),
        ("message", {"role": "assistant", "text": "All done: wrote hello.txt."}),
        # three model turns of the scripted server's 100 input / 20 output tokens; Claude Code's own price
        ("usage", {"input_tokens": 300, "output_tokens": 60, "cost_usd": pytest.approx(0.0024)}),
    ]
    verdict = parser.verdict()
    assert verdict is not None and verdict.ok and not verdict.blocked
    assert verdict.message == "All done: wrote hello.txt."


def test_a_resumed_session_reports_its_own_tokens_and_no_session_wide_cost() -> None:
    parser, events = parse("resume.jsonl")
    assert session_of("resume.jsonl") == session_of("tool_run.jsonl")  # --resume keeps the session id
    assert [e.kind for e in events] == ["session", "message", "usage"]
    # total_cost_usd (0.0032) is the session's, the first attempt's 0.0024 included: not counted again
    assert dict(events[-1].data) == {"input_tokens": 100, "output_tokens": 20, "cost_usd": None}
    verdict = parser.verdict()
    assert verdict is not None and verdict.ok and verdict.message == "Resumed: I wrote out/hello.txt before."


def test_an_api_error_is_a_failed_verdict_with_the_cli_message() -> None:
    parser, events = parse("api_error.jsonl")
    # The CLI prints its error as a synthetic assistant message: kept, as the system's words
    assert [(e.kind, e.data.get("role")) for e in events] == [
        ("session", None),
        ("message", "system"),
        ("usage", None),
    ]
    assert "400 scripted: the model refused this request" in events[1].data["text"]
    assert dict(events[-1].data) == {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    verdict = parser.verdict()
    assert verdict is not None and not verdict.ok
    assert verdict.message == "API Error: 400 scripted: the model refused this request"


def test_plain_lines_are_not_structured_and_no_result_is_no_verdict() -> None:
    parser = PRESET.parser()
    for line in ("", "Error: something broke", "[1, 2]", '{"no": "type"}', "{not json"):
        assert not parser.is_structured(line)
        assert parser.feed(line) == []
    assert parser.verdict() is None  # the CLI crashed before its result line
    first = (FIXTURES / "tool_run.jsonl").read_text().splitlines()[0]
    assert [e.kind for e in parser.feed(first)] == ["session"]
    assert parser.verdict() is None


def test_error_results_without_text_name_their_subtype_or_errors() -> None:
    parser = PRESET.parser()
    parser.feed(
        json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True, "session_id": "s"})
    )
    verdict = parser.verdict()
    assert verdict is not None and not verdict.ok
    assert verdict.message == "Claude Code ended with error_max_turns"
    parser = PRESET.parser()
    line = {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "errors": ["boom", "bang"],
    }
    parser.feed(json.dumps(line))
    assert parser.verdict() == type(verdict)(ok=False, message="boom; bang")


def test_tool_results_with_content_blocks_are_joined_and_cut() -> None:
    parser = PRESET.parser()
    content = [{"type": "text", "text": "a" * 5000}, {"type": "image", "source": {}}]
    line = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]},
    }
    (event,) = parser.feed(json.dumps(line))
    assert event.kind == "tool_result" and event.data["ok"] is True
    assert event.data["truncated"] is True and len(event.data["output"]) == 4000


def job(**config: Any) -> Job:
    return Job(
        run_id="run_1", prompt="Fix the bug.\n" * 20_000, agent_config=config, model_id="claude-run-model"
    )


def context(tmp_path: Path, **kwargs: Any) -> Context:
    return Context(workspace=tmp_path / "ws", home=tmp_path / "home", **kwargs)


def test_invocation_argv_prompt_on_stdin_and_model(tmp_path: Path) -> None:
    inv = PRESET.invocation(job(), "/opt/claude", context(tmp_path))
    assert inv.argv == [
        "/opt/claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--strict-mcp-config",
        "--model",
        "claude-run-model",
    ]
    assert inv.stdin == "Fix the bug.\n" * 20_000  # 260 kB: more than one argv string may hold
    assert inv.files == {}
    harness = {"type": "claude", "model_id": "claude-harness-model"}
    inv = PRESET.invocation(job(harness=harness), "claude", context(tmp_path, resume="sess-1"))
    assert inv.argv[-4:] == ["--model", "claude-harness-model", "--resume", "sess-1"]
    for default in ("auto", ""):
        bare = Job(run_id="r", prompt="p", agent_config={"harness": {"model_id": default}})
        assert "--model" not in PRESET.invocation(bare, "claude", context(tmp_path)).argv


def test_invocation_environment(tmp_path: Path) -> None:
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "sk-worker", "OTHER": "x"}
    inv = PRESET.invocation(job(), "claude", context(tmp_path, env=env))
    assert inv.env == {
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "home" / ".claude"),
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "ANTHROPIC_API_KEY": "sk-worker",
    }


@pytest.mark.parametrize(
    ("config", "secret", "variable"),
    [
        ({"harness": {"auth": {"source": "managedSecret", "secret_name": "team-claude-key"}}},
         "sk-ant-api03-x", "ANTHROPIC_API_KEY"),
        ({"harness_auth_secrets": {"claude_auth_secret_name": "team-claude-key"}}, "sk-ant-oat01-y",
         "CLAUDE_CODE_OAUTH_TOKEN"),
    ],
)  # fmt: skip
def test_a_managed_secret_becomes_the_cli_credential(
    tmp_path: Path, config: dict[str, Any], secret: str, variable: str
) -> None:
    # the worker injects a run secret as the variable named after it (dashes become underscores)
    env = {"ANTHROPIC_API_KEY": "sk-worker", "team_claude_key": secret}
    inv = PRESET.invocation(job(**config), "claude", context(tmp_path, env=env))
    assert inv.env[variable] == secret
    unset = PRESET.invocation(
        job(**config), "claude", context(tmp_path, env={"ANTHROPIC_API_KEY": "sk-worker"})
    )
    assert unset.env["ANTHROPIC_API_KEY"] == "sk-worker" and "CLAUDE_CODE_OAUTH_TOKEN" not in unset.env


def test_mcp_servers_and_skills_are_files_in_the_agent_home(tmp_path: Path) -> None:
    servers: dict[str, dict[str, Any]] = {
        "docs": {"url": "https://mcp.example/docs", "headers": {"Authorization": "Bearer t"}},
        "local": {"command": "mcp-local", "env": {"A": "1"}, "environment": "env_1"},
        "hosted": {"warp_id": "w1"},
    }
    skills = [
        {"name": "triage", "skill_name": "triage", "description": "Sorts issues", "body": "Label first.",
         "front_matter": {}},
    ]  # fmt: skip
    the_job = Job(run_id="r", prompt="p", mcp_servers=servers, skills=skills)
    inv = PRESET.invocation(the_job, "claude", context(tmp_path))
    assert inv.argv[-2:] == ["--mcp-config", str(tmp_path / "home" / "factory-mcp.json")]
    assert json.loads(inv.files["factory-mcp.json"]) == {
        "mcpServers": {
            "docs": {
                "type": "http",
                "url": "https://mcp.example/docs",
                "headers": {"Authorization": "Bearer t"},
            },
            "local": {"command": "mcp-local", "args": [], "env": {"A": "1"}},
        }
    }
    skill = inv.files[".claude/skills/triage/SKILL.md"]
    assert (
        skill.startswith('---\nname: "triage"\ndescription: "Sorts issues"\n---\n')
        and "Label first." in skill
    )
    refused = Job(
        run_id="r", prompt="p", mcp_servers={"x": {"command": "rm"}}
    )  # not defined by an environment
    with pytest.raises(WorkspaceError):
        PRESET.invocation(refused, "claude", context(tmp_path))
