"""The real Claude Code CLI (``node_modules/.bin/claude``, 2.1.332) against the scripted Anthropic Messages
server on loopback.

Direct: the ``claude`` preset's own argv, environment, stdin and agent-home files, its parser on the CLI's
live output; a tool run (``Write`` into ``$FACTORY_OUTPUTS``, ``Bash``), a resume that shows the model the
earlier turns, and the quiet offline switches (the CLI calls nothing but ``POST /v1/messages``).

Through factoryctl (:func:`test_a_webhook_run_through_serve_and_a_claude_worker`): ``factoryctl serve`` and
a self-hosted ``factoryctl worker --sandbox none --harness claude`` with the model endpoint in the worker's
environment; a webhook delivery starts an automation whose front matter picks ``harness: {type: claude}``.

Skipped, saying so, when the CLI is not installed (``npm ci``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents.anthropic_server import (
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    anthropic_app,
    model_requests,
    transcript_text,
)
from agents.scripted import Failure, Script, ScriptedServer, Text, ToolCall

from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Verdict
from factoryctl.worker.presets.claude import PRESET

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CLAUDE = REPO / "node_modules" / ".bin" / "claude"
MODEL = "claude-sonnet-4-5"


def claude_cli() -> str:
    found = str(CLAUDE) if CLAUDE.exists() else shutil.which("claude")
    if found is None:
        pytest.skip(
            "the Claude Code CLI is not installed: run `npm ci` (package.json pins @anthropic-ai/claude-code)"
        )
    return found


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    events: list[base.AgentEvent]
    verdict: Verdict | None
    plain: list[str]  # stdout lines the parser did not recognise

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [dict(e.data) for e in self.events if e.kind == kind]


@dataclass
class Agent:
    """One run's workspace and agent home, and the scripted model the CLI talks to."""

    root: Path
    server: ScriptedServer
    cli: str

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def home(self) -> Path:
        return self.root / "workspace.home"

    def run(self, prompt: str, *, resume: str | None = None, **job: Any) -> Ran:
        """Start the CLI exactly as the preset says (argv, env, files under the agent home, the prompt on
        stdin, in the workspace) and parse its stdout line by line."""
        env = {"ANTHROPIC_BASE_URL": self.server.url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}
        config = {"harness": {"type": "claude", "model_id": MODEL}}
        the_job = Job(run_id="run_claude_e2e", prompt=prompt, agent_config=config, **job)
        invocation = PRESET.invocation(
            the_job, self.cli, Context(self.workspace, self.home, resume=resume, env=env)
        )
        for name, text in invocation.files.items():
            path = self.home / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        outputs = self.workspace / "outputs"
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FACTORY_OUTPUTS": str(outputs)}
        done = subprocess.run(
            invocation.argv,
            cwd=self.workspace,
            env={**base_env, **invocation.env},
            input=invocation.stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        parser = PRESET.parser()
        events: list[base.AgentEvent] = []
        plain = []
        for line in done.stdout.splitlines():
            if parser.is_structured(line):
                events += parser.feed(line)
            else:
                plain.append(line)
        return Ran(done.returncode, done.stdout, done.stderr, events, parser.verdict(), plain)


@pytest.fixture
def script() -> Script:
    return Script([])


@pytest.fixture
def agent(tmp_path: Path, script: Script) -> Iterator[Agent]:
    cli = claude_cli()
    (tmp_path / "workspace" / "outputs").mkdir(parents=True)
    (tmp_path / "workspace.home").mkdir(mode=0o700)
    with ScriptedServer(anthropic_app(script)) as server:
        yield Agent(tmp_path, server, cli)


def test_claude_runs_tools_then_answers_and_a_resume_shows_the_model_the_earlier_turns(
    agent: Agent, script: Script
) -> None:
    report = agent.workspace / "outputs" / "report.md"
    script.extend(
        [
            [
                Text("Writing the report."),
                ToolCall("Write", {"file_path": str(report), "content": "# Report\n"}),
            ],
            ToolCall("Bash", {"command": 'echo "from $FACTORY_OUTPUTS" && ls "$FACTORY_OUTPUTS"'}),
            Text("Report written."),
        ]
    )
    first = agent.run("Write a report into $FACTORY_OUTPUTS.")
    assert first.code == 0, first.stderr
    assert report.read_text() == "# Report\n"
    assert first.plain == []
    [session] = first.of("session")
    session_id = session["session_id"]
    calls = first.of("tool_call")
    assert [(c["name"], c["input"]) for c in calls] == [
        ("Write", {"file_path": str(report), "content": "# Report\n"}),
        ("Bash", {"command": 'echo "from $FACTORY_OUTPUTS" && ls "$FACTORY_OUTPUTS"'}),
    ]
    results = first.of("tool_result")
    assert [(r["id"], r["ok"]) for r in results] == [(calls[0]["id"], True), (calls[1]["id"], True)]
    assert results[1]["output"] == f"from {agent.workspace / 'outputs'}\nreport.md"
    assert [m["text"] for m in first.of("message")] == ["Writing the report.", "Report written."]
    assert first.of("usage") == [
        # Claude Code prices them itself: Sonnet's list price, $3 / $15 per million input / output tokens
        {
            "input_tokens": 3 * INPUT_TOKENS,
            "output_tokens": 3 * OUTPUT_TOKENS,
            "cost_usd": pytest.approx(0.0018),
        }
    ]
    assert first.verdict == Verdict(ok=True, message="Report written.")

    requests = model_requests(agent.server.recorder)
    assert len(requests) == 3
    assert {r["model"] for r in requests} == {MODEL} and all(r["stream"] is True for r in requests)
    assert "Write a report into $FACTORY_OUTPUTS." in transcript_text(requests[0])
    assert "report.md" in transcript_text(requests[2])  # the Bash result went back to the model

    script.extend([Text("You asked for a report.")])
    second = agent.run("What did I ask for?", resume=session_id)
    assert second.code == 0, second.stderr
    assert second.of("session") == [{"session_id": session_id}]
    assert second.verdict == Verdict(ok=True, message="You asked for a report.")
    assert second.of("usage") == [
        {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "cost_usd": None}
    ]
    resumed = model_requests(agent.server.recorder)[3]
    shown = transcript_text(resumed)
    for earlier in (
        "Write a report into $FACTORY_OUTPUTS.",
        "Writing the report.",
        "# Report",
        "Report written.",
    ):
        assert earlier in shown
    assert shown.rstrip().endswith("What did I ask for?")
    roles = [m["role"] for m in resumed["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]


def test_offline_the_cli_calls_nothing_but_the_model_and_reads_skills_and_mcp_servers(
    agent: Agent, script: Script
) -> None:
    script.extend([Text("ok")])
    skill = {"name": "greeter", "skill_name": "greeter", "description": "Greets people politely",
             "body": "Say hello.", "front_matter": {}}  # fmt: skip
    servers = {"docs": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "v"}}}
    ran = agent.run("hi", skills=[skill], mcp_servers=servers)
    assert ran.code == 0, ran.stderr
    assert ran.verdict == Verdict(ok=True, message="ok")
    # no reachability probe (HEAD /api/hello), telemetry, update check or error report: one model request
    assert agent.server.recorder.paths() == ["POST /v1/messages?beta=true"]
    assert agent.server.recorder.unknown == []
    init = json.loads(ran.stdout.splitlines()[0])
    assert "greeter" in init["skills"]
    assert [s["name"] for s in init["mcp_servers"]] == ["docs"]  # nothing listens there: "failed", not fatal
    [request] = model_requests(agent.server.recorder)
    assert "Greets people politely" in json.dumps(request)
    # the CLI's settings and sessions are the run's agent home's, not the worker's HOME
    assert list((agent.home / ".claude" / "projects").iterdir())


def test_an_api_error_ends_with_a_failed_verdict_and_exit_status_1(agent: Agent, script: Script) -> None:
    script.extend([Failure(400, "scripted: this request is refused", times=10)])
    ran = agent.run("hi")
    assert ran.code == 1
    assert ran.verdict == Verdict(ok=False, message="API Error: 400 scripted: this request is refused")
    assert len(model_requests(agent.server.recorder)) == 6  # Claude Code's own retries of a 400


def test_a_missing_key_is_an_error_result(agent: Agent, script: Script) -> None:
    env = {k: v for k, v in os.environ.items() if k in ("PATH",)}
    job = Job(run_id="r", prompt="hi", agent_config={"harness": {"type": "claude"}})
    invocation = PRESET.invocation(job, agent.cli, Context(agent.workspace, agent.home, env={}))
    done = subprocess.run(
        invocation.argv,
        cwd=agent.workspace,
        env={**env, **invocation.env, "ANTHROPIC_BASE_URL": agent.server.url},
        input=invocation.stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    parser = PRESET.parser()
    for line in done.stdout.splitlines():
        parser.feed(line)
    verdict = parser.verdict()
    assert done.returncode != 0
    assert verdict is not None and not verdict.ok and "login" in (verdict.message or "").lower(), done.stdout
    assert model_requests(agent.server.recorder) == []
