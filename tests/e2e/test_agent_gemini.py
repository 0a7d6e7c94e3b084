"""The real Gemini CLI (``node_modules/.bin/gemini``, 0.61.0) against the scripted Gemini API on loopback.

Direct: the ``gemini`` preset's own argv, environment, stdin and agent-home files, its parser on the CLI's
live output; a tool run (``write_file`` into ``$FACTORY_OUTPUTS``, ``run_shell_command``), a resume that
shows the model the earlier turns, what the CLI calls offline (only the model; the router's classifier
when no model is chosen), skills and MCP servers from the settings, an API error and a missing key.

Through factoryctl (:func:`test_a_webhook_run_through_serve_and_a_gemini_worker`): ``factoryctl serve`` and
a self-hosted ``factoryctl worker --sandbox none --harness gemini`` with the model endpoint in the worker's
environment; a webhook delivery starts an automation whose front matter picks ``harness: {type: gemini}``.

Skipped, saying so, when the CLI is not installed (``npm ci``).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import Agent, Ran, Stack, agent_stack, parsed, scripted_agent
from agents.gemini_cli import API_KEY, find_gemini, run_gemini
from agents.gemini_server import (
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    function_responses,
    gemini_app,
    model_requests,
    shell,
    texts,
    tool_names,
    write_file,
)
from agents.scripted import Failure, Script, Text
from serve_support import wait_for

from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import Verdict
from factoryctl.worker.presets.gemini import PRESET

pytestmark = pytest.mark.slow

MODEL = "gemini-2.5-flash"
STREAM_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"


def gemini_cli() -> str:
    found = find_gemini()
    if found is None:
        pytest.skip("the Gemini CLI is not installed: run `npm ci` (package.json pins @google/gemini-cli)")
    return found


class GeminiAgent(Agent):
    def run(
        self, prompt: str, *, resume: str | None = None, env: dict[str, str] | None = None, **job: Any
    ) -> Ran:
        """Start the CLI exactly as the preset says (:func:`agents.gemini_cli.run_gemini`, which the
        fixture recorder shares) and parse its stdout line by line."""
        job.setdefault("agent_config", {"harness": {"type": "gemini", "model_id": MODEL}})
        the_job = Job(run_id="run_gemini_e2e", prompt=prompt, **job)
        outputs = {"FACTORY_OUTPUTS": str(self.workspace / "outputs"), **(env or {})}
        done = run_gemini(self.cli, self.server.url, self.workspace, self.home, the_job, resume, outputs)
        return parsed(PRESET, done)


@pytest.fixture
def script() -> Script:
    return Script([])


@pytest.fixture
def agent(tmp_path: Path, script: Script) -> Iterator[GeminiAgent]:
    with scripted_agent(GeminiAgent, tmp_path, gemini_app(script), gemini_cli()) as agent:
        yield agent


def test_gemini_runs_tools_then_answers_and_a_resume_shows_the_model_the_earlier_turns(
    agent: GeminiAgent, script: Script
) -> None:
    report = agent.workspace / "outputs" / "report.md"
    command = 'echo "from $FACTORY_OUTPUTS" && ls "$FACTORY_OUTPUTS"'
    script.extend(
        [
            [Text("Writing the report."), write_file(str(report), "# Report\n")],
            shell(command),
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
        ("write_file", {"file_path": str(report), "content": "# Report\n"}),
        ("run_shell_command", {"command": command}),
    ]
    results = first.of("tool_result")
    assert [(r["id"], r["ok"]) for r in results] == [(calls[0]["id"], True), (calls[1]["id"], True)]
    assert results[1]["output"] == f"from {agent.workspace / 'outputs'}\nreport.md"
    assert [m["text"] for m in first.of("message")] == ["Writing the report.", "Report written."]
    assert first.of("usage") == [
        {"input_tokens": 3 * INPUT_TOKENS, "output_tokens": 3 * OUTPUT_TOKENS, "cost_usd": None}
    ]
    assert first.verdict == Verdict(ok=True, message="Report written.")

    requests = model_requests(agent.server.recorder)
    assert len(requests) == 3
    assert "Write a report into $FACTORY_OUTPUTS." in texts(requests[0])
    assert {"write_file", "run_shell_command"} <= set(tool_names(requests[0]))
    shown = function_responses(requests[2])  # the shell's output went back to the model
    assert [r["name"] for r in shown] == ["write_file", "run_shell_command"]
    assert "report.md" in json.dumps(shown[1])
    headers = agent.server.recorder.requests[0].headers
    assert headers["x-goog-api-key"] == API_KEY

    script.extend([Text("You asked for a report.")])
    second = agent.run("What did I ask for?", resume=session_id)
    assert second.code == 0, second.stderr
    assert second.of("session") == [{"session_id": session_id}]
    assert second.verdict == Verdict(ok=True, message="You asked for a report.")
    assert second.of("usage") == [
        {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "cost_usd": None}
    ]
    resumed = model_requests(agent.server.recorder)[3]
    said = texts(resumed)
    for earlier in ("Write a report into $FACTORY_OUTPUTS.", "Writing the report.", "Report written."):
        assert earlier in said, said
    # 0.61.0 restores each tool result of the session twice (its own quirk; the model sees the same result)
    names = [r["name"] for r in function_responses(resumed)]
    assert names in (["write_file", "run_shell_command"], ["write_file"] * 2 + ["run_shell_command"] * 2)
    assert said[-1].rstrip() == "What did I ask for?"


def test_offline_the_cli_calls_only_the_model_and_reads_skills_and_mcp_servers(
    agent: GeminiAgent, script: Script
) -> None:
    script.extend([Text("ok")])
    skill = {"name": "greeter", "skill_name": "greeter", "description": "Greets people politely",
             "body": "Say hello.", "front_matter": {}}  # fmt: skip
    # the MCP server is the scripted server's /mcp, which answers 404: the CLI tries it, says so, runs on
    servers = {"docs": {"url": f"{agent.server.url}/mcp", "headers": {"X-Key": "v"}}}
    ran = agent.run("hi", skills=[skill], mcp_servers=servers)
    assert ran.code == 0, ran.stderr
    assert ran.verdict == Verdict(ok=True, message="ok")
    assert "MCP issues detected" in ran.stderr
    mcp = [r for r in agent.server.recorder.requests if r.path == "/mcp"]
    assert mcp and {r.method for r in mcp} <= {"GET", "POST"}
    assert all(r.headers.get("X-Key") == "v" for r in mcp)
    # with a model chosen, no router classifier, telemetry or update check: one streamed model request
    others = [p for p in agent.server.recorder.paths() if not p.endswith(" /mcp")]
    assert others == [f"POST {STREAM_PATH}"]
    assert agent.server.recorder.unknown == mcp
    [request] = model_requests(agent.server.recorder)
    assert "Greets people politely" in json.dumps(request["systemInstruction"])  # the skill is listed
    assert "activate_skill" in tool_names(request)
    # the CLI's settings and sessions are the run's agent home's, not the worker's HOME
    assert list((agent.home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl"))


def test_without_a_model_the_cli_asks_its_router_first(agent: GeminiAgent, script: Script) -> None:
    script.extend([Text("routed")])
    ran = agent.run("hi", agent_config={"harness": {"type": "gemini"}})
    assert ran.verdict == Verdict(ok=True, message="routed"), ran.stderr
    paths = agent.server.recorder.paths()
    assert len(paths) == 2 and paths[0].endswith(":generateContent"), paths
    assert paths[1].endswith(":streamGenerateContent?alt=sse")
    assert agent.server.recorder.unknown == []


def test_an_api_error_ends_with_a_failed_verdict_and_a_non_zero_exit(
    agent: GeminiAgent, script: Script
) -> None:
    script.extend([Failure(400, "scripted: this request is refused", times=10)])
    ran = agent.run("hi")
    assert ran.code != 0
    assert ran.verdict is not None and not ran.verdict.ok
    assert "scripted: this request is refused" in (ran.verdict.message or "")
    assert len(model_requests(agent.server.recorder)) == 1  # a 400 is not retried


def test_a_missing_key_prints_no_result_and_exits_41(agent: GeminiAgent) -> None:
    ran = agent.run("hi", env={"GEMINI_API_KEY": ""})
    assert ran.code == 41
    assert ran.verdict is None  # the harness reports the exit status and stderr
    assert "GEMINI_API_KEY" in ran.stderr
    assert model_requests(agent.server.recorder) == []


# --- Through factoryctl: serve, a self-hosted gemini worker, a webhook automation --------------------------

HOST = "gemini-box"
TREE = {
    "factory.yaml": (
        "schemaVersion: v1alpha1\nname: gemini-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
        "agentDefaults:\n  harness:\n    type: oz\n    model: default-model\n"
    ),
    "automations/gemini-alert/automation.md": (
        f"---\ntitle: Gemini alert\nworkerHost: {HOST}\nharness:\n  type: gemini\n  model: {MODEL}\n"
        "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
        "---\nAn alert fired: write a report.\n"
    ),
}


@pytest.fixture
def stack(tmp_path: Path, script: Script) -> Iterator[Stack]:
    """``factoryctl serve`` and a self-hosted ``factoryctl worker --sandbox none --harness gemini`` whose
    environment points the CLI at the scripted model."""
    cli, app = gemini_cli(), gemini_app(script)

    def model_env(url: str) -> dict[str, str]:
        return {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": API_KEY}

    with agent_stack(tmp_path, factory="gemini-e2e", files=TREE, app=app, harness="gemini", cli=cli,
                     host=HOST, model_env=model_env) as stack:  # fmt: skip
        yield stack


def test_a_webhook_run_through_serve_and_a_gemini_worker(stack: Stack, script: Script) -> None:
    command = "mkdir -p out && echo ok > out/report.md && echo wrote"
    script.extend([[Text("Writing the report."), shell(command)], Text("Report written.")])
    run_id = stack.deliver("d-1")
    run = stack.finished(run_id)
    assert run["state"] == "SUCCEEDED", (run, stack.worker_log.read_text()[-3000:])
    assert run["agent_config"]["harness"]["type"] == "gemini", run
    events = stack.events(run_id)
    kinds = [e["kind"] for e in events]
    for kind in ("session", "message", "tool_call", "tool_result", "usage"):
        assert kind in kinds, kinds
    by_kind = {k: [e["data"] for e in events if e["kind"] == k] for k in kinds}
    assert [m["text"] for m in by_kind["message"]] == ["Writing the report.", "Report written."]
    [call] = by_kind["tool_call"]
    assert call["name"] == "run_shell_command" and call["input"] == {"command": command}
    [result] = by_kind["tool_result"]
    assert result == {"id": call["id"], "ok": True, "output": "wrote", "truncated": False}
    [usage] = by_kind["usage"]
    assert usage == {"input_tokens": 2 * INPUT_TOKENS, "output_tokens": 2 * OUTPUT_TOKENS, "cost_usd": None}
    [session] = by_kind["session"]
    assert run["session_id"] == session["session_id"]
    assert stack.model.recorder.paths() == [f"POST {STREAM_PATH}"] * 2
    assert any("An alert fired: write a report." in t for t in texts(model_requests(stack.model.recorder)[0]))
    assert stack.model.recorder.unknown == []


def test_a_follow_up_through_the_worker_resumes_the_gemini_session(stack: Stack, script: Script) -> None:
    script.extend([[Text("Writing the report."), shell("echo wrote")], Text("Report written.")])
    run_id = stack.deliver("d-1")
    run = stack.finished(run_id)
    assert run["state"] == "SUCCEEDED", (run, stack.worker_log.read_text()[-3000:])
    session_id = run["session_id"]

    script.extend([Text("Earlier I wrote the report.")])
    status, body = stack.served.post(
        f"/api/v1/agent/runs/{run_id}/followups", {"message": "What did you do?"}
    )
    assert status == 200, body
    run = stack.finished(run_id, 2)
    assert run["state"] == "SUCCEEDED", run["status_message"]
    resumed = model_requests(stack.model.recorder)[2]
    said = texts(resumed)
    assert any("An alert fired: write a report." in t for t in said), said
    for earlier in ("Writing the report.", "Report written."):
        assert earlier in said, said
    assert "wrote" in json.dumps(function_responses(resumed))
    assert any("What did you do?" in t for t in said), said
    assert run["session_id"] == session_id


def test_a_cancel_while_a_shell_command_runs_kills_the_cli_and_its_command(
    stack: Stack, script: Script, tmp_path: Path
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    script.extend([shell(f"echo $$ > {pid_file} && exec sleep 300")])
    run_id = stack.deliver("d-cancel")
    started = wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(),
        60,
        "the tool",
        alive=stack.alive,
        logs=stack.logs,
    )
    pid = int(started)
    status, body = stack.served.post(f"/api/v1/agent/runs/{run_id}/cancel")
    assert status == 200, body
    run = stack.finished(run_id)
    assert run["state"] == "CANCELLED", run

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    # the CLI runs its shell commands in a session of their own: the harness must reach them too
    try:
        wait_for(gone, 10, "the shell command's process to end", alive=stack.alive, logs=stack.logs)
    finally:
        if not gone():
            os.kill(pid, signal.SIGKILL)  # the test's own leftover (the command it had the CLI start)
