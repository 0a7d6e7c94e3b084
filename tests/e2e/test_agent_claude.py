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
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents.anthropic_server import (
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    anthropic_app,
    model_requests,
    transcript_text,
)
from agents.scripted import Failure, Script, ScriptedServer, Text, ToolCall
from serve_support import Served, run_cli, run_events, running, serving, stop, wait_for

from factoryctl.client import FactoryClient
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


# --- Through factoryctl: serve, a self-hosted claude worker, a webhook automation --------------------------

HOST = "claude-box"
HOOK_TOKEN = "claude-e2e-hook-token-0123456789"
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED", "BLOCKED"}


def write_tree(repo: Path) -> None:
    files = {
        "factory.yaml": (
            "schemaVersion: v1alpha1\nname: claude-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
            "agentDefaults:\n  harness:\n    type: oz\n    model: default-model\n"
        ),
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "webhooks/alerts.yaml": "secretName: alerts-token\n",
        "automations/claude-alert/automation.md": (
            f"---\ntitle: Claude alert\nworkerHost: {HOST}\nharness:\n  type: claude\n  model: {MODEL}\n"
            "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
            "---\nAn alert fired: write a report.\n"
        ),
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@dataclass
class Stack:
    """``factoryctl serve`` following the tree, a self-hosted ``factoryctl worker --sandbox none --harness
    claude`` whose environment points Claude Code at the scripted model, and what the test waits on."""

    served: Served
    model: ScriptedServer
    worker_log: Path
    alive: list[subprocess.Popen[bytes]]
    hook: str
    seen: set[str]
    workers: contextlib.ExitStack | None = None
    worker_args: tuple[Any, ...] = ()
    worker_env: dict[str, str] | None = None

    @property
    def logs(self) -> list[Path]:
        return [self.served.log, self.worker_log]

    def restart_worker(self, workspace_root: Path) -> None:
        """Stop the worker process and start another one (its own worker ID) with ``workspace_root``."""
        assert self.workers is not None
        old = self.alive.pop()
        assert stop(old) == 0
        new = self.workers.enter_context(
            running(
                "worker", *self.worker_args, "--workspace-root", workspace_root,
                log=self.worker_log, env=self.worker_env,
            )
        )  # fmt: skip
        self.alive.append(new)

    def deliver(self, delivery: str) -> str:
        """Deliver an alert; the id of the run it started."""
        resp = httpx.post(
            f"{self.served.url}/webhooks/w/{self.hook}",
            json={"alert": delivery},
            headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": delivery},
            timeout=10,
        )
        assert resp.status_code == 202, resp.text

        def started() -> str | None:
            fresh = {r["run_id"] for r in self.served.get("/api/v1/agent/runs")["runs"]} - self.seen
            return fresh.pop() if fresh else None

        run_id: str = wait_for(started, 30, f"the run of {delivery}", alive=self.alive, logs=self.logs)
        self.seen.add(run_id)
        return run_id

    def finished(self, run_id: str, requests: int) -> dict[str, Any]:
        """The run once it is final and the model has answered ``requests`` requests in all (a run that
        ended otherwise than SUCCEEDED is returned at once, for the caller's assertion to show)."""

        def done() -> dict[str, Any] | None:
            run: dict[str, Any] = self.served.get(f"/api/v1/agent/runs/{run_id}")
            if run["state"] not in FINISHED:
                return None
            answered = len(model_requests(self.model.recorder)) >= requests
            return run if answered or run["state"] != "SUCCEEDED" else None

        return wait_for(done, 90, f"run {run_id} to finish", alive=self.alive, logs=self.logs)

    def logs_of(self, run_id: str) -> list[str]:
        return [line["text"] for line in self.served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"]]


@pytest.fixture
def stack(tmp_path: Path, script: Script) -> Iterator[Stack]:
    cli = claude_cli()
    data, repo = tmp_path / "data", tmp_path / "repo"
    repo.mkdir()
    write_tree(repo)
    made = run_cli(
        "--data-dir", data, "secrets", "create", "alerts-token", "--scope", "webhook", "--from-stdin",
        stdin=HOOK_TOKEN + "\n",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with (
        ScriptedServer(anthropic_app(script)) as model,
        serving(data, "--repo", repo, log=tmp_path / "serve.log") as served,
    ):
        key = run_cli(
            "--data-dir", data, "keys", "create", "--name", "box", "--role", "worker", "--worker-host", HOST
        )  # fmt: skip
        assert key.returncode == 0, key.stderr
        worker_env = {
            "FACTORY_API_KEY": key.stdout.strip().splitlines()[-1],
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-api-scripted",
        }
        worker_log = tmp_path / "worker.log"
        args = ("--server", served.url, "--host-id", HOST, "--sandbox", "none", "--harness", "claude",
                "--agent-cli", f"claude={cli}")  # fmt: skip
        with contextlib.ExitStack() as workers:
            worker = workers.enter_context(running("worker", *args, log=worker_log, env=worker_env))
            alive = [served.proc, worker]

            def hook_uid() -> str | None:
                with FactoryClient(served.url, served.key) as client:
                    page = client.factories.list(search="claude-e2e")
                    detail = client.factories.get(page.items[0].uid) if page.items else None
                if detail is None or not detail.webhooks or not detail.automations:
                    return None
                return str(detail.webhooks[0].uid)

            hook = wait_for(hook_uid, 30, "the tree to apply", alive=alive, logs=[served.log, worker_log])
            yield Stack(served, model, worker_log, alive, hook, set(), workers, args, worker_env)


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
    run = stack.finished(run_id, 2)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    return run_id, str(run["session_id"])


def test_a_webhook_run_through_serve_and_a_claude_worker_has_a_transcript(
    stack: Stack, script: Script
) -> None:
    run_id, session_id = first_run(stack, script)
    run = stack.served.get(f"/api/v1/agent/runs/{run_id}")
    assert run["agent_config"]["harness"]["type"] == "claude", run
    events = run_events(stack.served, run_id)
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
    run = stack.finished(run_id, 3)
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
    run = stack.finished(run_id, 3)
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
    run = stack.finished(run_id, 3)
    assert run["state"] == "SUCCEEDED", (run, stack.logs_of(run_id))
    assert run["session_id"] != session_id  # a new session
    shown = transcript_text(model_requests(stack.model.recorder)[2])
    assert "## Earlier conversation" in shown and "assistant: Report written." in shown, shown[-2000:]
    assert "tool call Bash:" in shown and shown.rstrip().endswith("What now?")
    said = [e["data"] for e in run_events(stack.served, run_id) if e["kind"] == "message"]
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
    run = stack.finished(run_id, 1)
    assert run["state"] == "CANCELLED", run

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, 5, "the tool's process to end", alive=stack.alive, logs=stack.logs)
    events = run_events(stack.served, run_id)
    assert [e["data"]["name"] for e in events if e["kind"] == "tool_call"] == ["Bash"]
