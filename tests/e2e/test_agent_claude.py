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

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import Agent, Ran, Stack, agent_stack, installed_cli, scripted_agent
from agents.anthropic_server import (
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    anthropic_app,
    model_requests,
    transcript_text,
)
from agents.scripted import Failure, Script, Text, ToolCall
from serve_support import wait_for

from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import Verdict
from factoryctl.worker.presets.claude import PRESET

pytestmark = pytest.mark.slow

MODEL = "claude-sonnet-4-5"


def claude_cli() -> str:
    return installed_cli("claude", "@anthropic-ai/claude-code")


class ClaudeAgent(Agent):
    def run(self, prompt: str, *, resume: str | None = None, **job: Any) -> Ran:
        """Start the CLI exactly as the preset says (the prompt on stdin, ``FACTORY_OUTPUTS`` set) and
        parse its stdout line by line."""
        env = {"ANTHROPIC_BASE_URL": self.server.url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}
        config = {"harness": {"type": "claude", "model_id": MODEL}}
        the_job = Job(run_id="run_claude_e2e", prompt=prompt, agent_config=config, **job)
        outputs = {"FACTORY_OUTPUTS": str(self.workspace / "outputs")}
        return self.invoke(PRESET, the_job, resume=resume, env=env, process_env=outputs)


@pytest.fixture
def script() -> Script:
    return Script([])


@pytest.fixture
def agent(tmp_path: Path, script: Script) -> Iterator[ClaudeAgent]:
    with scripted_agent(ClaudeAgent, tmp_path, anthropic_app(script), claude_cli()) as agent:
        yield agent


def test_claude_runs_tools_then_answers_and_a_resume_shows_the_model_the_earlier_turns(
    agent: ClaudeAgent, script: Script
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
    agent: ClaudeAgent, script: Script
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


def test_an_api_error_ends_with_a_failed_verdict_and_exit_status_1(
    agent: ClaudeAgent, script: Script
) -> None:
    script.extend([Failure(400, "scripted: this request is refused", times=10)])
    ran = agent.run("hi")
    assert ran.code == 1
    assert ran.verdict == Verdict(ok=False, message="API Error: 400 scripted: this request is refused")
    assert len(model_requests(agent.server.recorder)) == 6  # Claude Code's own retries of a 400


def test_a_missing_key_is_an_error_result(agent: ClaudeAgent, script: Script) -> None:
    job = Job(run_id="r", prompt="hi", agent_config={"harness": {"type": "claude"}})
    ran = agent.invoke(PRESET, job, process_env={"ANTHROPIC_BASE_URL": agent.server.url})
    assert ran.code != 0
    assert ran.verdict is not None and not ran.verdict.ok, ran.stdout
    assert "login" in (ran.verdict.message or "").lower(), ran.stdout
    assert model_requests(agent.server.recorder) == []


# --- Through factoryctl: serve, a self-hosted claude worker, a webhook automation --------------------------

HOST = "claude-box"
TREE = {
    "factory.yaml": (
        "schemaVersion: v1alpha1\nname: claude-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
        "agentDefaults:\n  harness:\n    type: oz\n    model: default-model\n"
    ),
    "automations/claude-alert/automation.md": (
        f"---\ntitle: Claude alert\nworkerHost: {HOST}\nharness:\n  type: claude\n  model: {MODEL}\n"
        "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
        "---\nAn alert fired: write a report.\n"
    ),
}


@pytest.fixture
def stack(tmp_path: Path, script: Script) -> Iterator[Stack]:
    """``factoryctl serve`` and a self-hosted ``factoryctl worker --sandbox none --harness claude`` whose
    environment points Claude Code at the scripted model."""
    cli, app = claude_cli(), anthropic_app(script)

    def model_env(url: str) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}

    with agent_stack(tmp_path, factory="claude-e2e", files=TREE, app=app, harness="claude", cli=cli,
                     host=HOST, model_env=model_env) as stack:  # fmt: skip
        yield stack


def first_run(stack: Stack, script: Script) -> tuple[str, str]:
    """A delivery whose run calls one shell tool then answers; its run id and Claude Code session id."""
    script.extend(
        [
            [
                Text("Writing the report."),
                ToolCall("Bash", {"command": "mkdir -p out && echo ok > out/report.md && echo wrote"}),
            ],
            Text("Report written."),
        ]
    )
    run_id = stack.deliver("d-1")
    run = stack.finished(run_id)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    return run_id, str(run["session_id"])


def test_a_webhook_run_through_serve_and_a_claude_worker_has_a_transcript(
    stack: Stack, script: Script
) -> None:
    run_id, session_id = first_run(stack, script)
    run = stack.served.get(f"/api/v1/agent/runs/{run_id}")
    assert run["agent_config"]["harness"]["type"] == "claude", run
    events = stack.events(run_id)
    kinds = [e["kind"] for e in events]
    by_kind = {k: [e["data"] for e in events if e["kind"] == k] for k in kinds}
    assert by_kind["session"] == [{"session_id": session_id}] and session_id
    assert [m["text"] for m in by_kind["message"]] == ["Writing the report.", "Report written."]
    [call] = by_kind["tool_call"]
    assert call["name"] == "Bash" and "out/report.md" in call["input"]["command"]
    [result] = by_kind["tool_result"]
    assert result == {"id": call["id"], "ok": True, "output": "wrote", "truncated": False}
    [usage] = by_kind["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (2 * INPUT_TOKENS, 2 * OUTPUT_TOKENS)
    assert usage["cost_usd"] == pytest.approx(0.0012)  # Sonnet's list price, as Claude Code computes it
    assert (
        kinds.index("session") < kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("usage")
    )
    assert events[-1]["kind"] == "state" and events[-1]["data"]["state"] == "SUCCEEDED"
    first_request = model_requests(stack.model.recorder)[0]
    assert first_request["model"] == MODEL
    assert "An alert fired: write a report." in transcript_text(first_request)
    assert stack.model.recorder.unknown == []


def test_a_follow_up_resumes_the_claude_session(stack: Stack, script: Script) -> None:
    run_id, session_id = first_run(stack, script)
    script.extend([Text("Earlier I wrote out/report.md.")])
    status, body = stack.served.post(
        f"/api/v1/agent/runs/{run_id}/followups", {"message": "What did you do?"}
    )
    assert status == 200, body
    run = stack.finished(run_id, 2)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    assert run["session_id"] == session_id
    shown = transcript_text(model_requests(stack.model.recorder)[2])
    for earlier in ("An alert fired: write a report.", "Writing the report.", "wrote", "Report written."):
        assert earlier in shown, shown[-2000:]
    assert shown.rstrip().endswith("What did you do?")


def test_a_follow_up_claimed_by_another_worker_process_resumes_the_session(
    stack: Stack, script: Script, tmp_path: Path
) -> None:
    """The session files travel through the server: the first attempt's worker process is gone, and the
    follow-up runs in another process, in another workspace path, from a fresh agent home."""
    run_id, session_id = first_run(stack, script)
    database = stack.served.data_dir / "factory.db"
    with contextlib.closing(sqlite3.connect(database)) as db:
        [(ciphertext, size)] = db.execute(
            "SELECT ciphertext, size FROM run_session_states WHERE run_id = ?", (run_id,)
        ).fetchall()
    assert 0 < size < len(ciphertext) and b"Writing the report." not in ciphertext  # sealed at rest
    stack.restart_worker(tmp_path / "other-workspaces")
    script.extend([Text("Earlier I wrote out/report.md.")])
    status, body = stack.served.post(f"/api/v1/agent/runs/{run_id}/followups", {"message": "What now?"})
    assert status == 200, body
    run = stack.finished(run_id, 2)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    assert run["session_id"] == session_id  # the same Claude Code session, resumed
    shown = transcript_text(model_requests(stack.model.recorder)[2])
    for earlier in ("An alert fired: write a report.", "Writing the report.", "Report written."):
        assert earlier in shown, shown[-2000:]
    assert "could not be restored" not in stack.worker_log.read_text()


def test_a_follow_up_whose_session_is_lost_starts_fresh_with_a_summary(stack: Stack, script: Script) -> None:
    run_id, session_id = first_run(stack, script)
    with contextlib.closing(sqlite3.connect(stack.served.data_dir / "factory.db")) as db, db:
        db.execute("DELETE FROM run_session_states WHERE run_id = ?", (run_id,))
    script.extend([Text("Starting over from the summary.")])
    status, body = stack.served.post(f"/api/v1/agent/runs/{run_id}/followups", {"message": "What now?"})
    assert status == 200, body
    run = stack.finished(run_id, 2)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    assert run["session_id"] != session_id  # a new session
    shown = transcript_text(model_requests(stack.model.recorder)[2])
    assert "## Earlier conversation" in shown and "assistant: Report written." in shown, shown[-2000:]
    assert "tool call Bash:" in shown and shown.rstrip().endswith("What now?")
    said = [e["data"] for e in stack.events(run_id) if e["kind"] == "message"]
    assert any(
        m["role"] == "system" and "could not be restored (no saved session state)" in m["text"] for m in said
    ), said
    assert "session could not be restored" in stack.worker_log.read_text()


def test_a_cancel_while_a_tool_runs_leaves_no_process(stack: Stack, script: Script, tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    script.extend([ToolCall("Bash", {"command": f"echo $$ > {pid_file} && exec sleep 300"})])
    run_id = stack.deliver("d-cancel")
    found = wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(),
        60,
        "the tool",
        alive=stack.alive,
        logs=stack.logs,
    )
    pid = int(found)
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

    wait_for(gone, 5, "the tool's process to end", alive=stack.alive, logs=stack.logs)
    events = stack.events(run_id)
    assert [e["data"]["name"] for e in events if e["kind"] == "tool_call"] == ["Bash"]
