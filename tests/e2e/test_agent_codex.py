"""The real Codex CLI (``node_modules/.bin/codex``, 0.169.0) run through the Codex preset against the
scripted OpenAI Responses server on loopback: the preset's own argv, environment and ``CODEX_HOME`` files,
its parser on the CLI's live output, and a follow-up that resumes the thread (the model is shown the earlier
turns). Skipped, saying so, when the CLI is not installed (``npm ci``)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents.openai_server import (
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    input_texts,
    input_types,
    model_requests,
    openai_app,
    shell,
)
from agents.scripted import Script, ScriptedServer, Text
from serve_support import Served, committed, run_cli, running, serving, wait_for

from factoryctl.client import FactoryClient
from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Verdict
from factoryctl.worker.presets.codex import PRESET
from factoryctl.worker.presets.harness import PresetHarness
from store.models import RunEvent

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CODEX = REPO / "node_modules" / ".bin" / "codex"
MODEL = "gpt-5.2-codex"


def codex_cli() -> str:
    found = str(CODEX) if CODEX.exists() else shutil.which("codex")
    if found is None:
        pytest.skip("the Codex CLI is not installed: run `npm ci` (package.json pins @openai/codex 0.169.0)")
    return found


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    events: list[base.AgentEvent]
    verdict: Verdict | None

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

    def run(
        self,
        prompt: str,
        *,
        resume: str | None = None,
        key: str | None = "sk-test",
        strict: bool = False,
        **job: Any,
    ) -> Ran:
        """Start the CLI exactly as the preset says (argv, env, files under the agent home, stdin closed,
        in the workspace) and parse its stdout line by line; ``strict`` adds ``--strict-config``."""
        env = {"OPENAI_BASE_URL": f"{self.server.url}/v1"}
        if key is not None:
            env["OPENAI_API_KEY"] = key
        config = {"harness": {"type": "codex", "model_id": MODEL, "reasoning_level": "high"}}
        the_job = Job(run_id="run_codex_e2e", prompt=prompt, agent_config=config, **job)
        context = Context(self.workspace, self.home, resume=resume, env=env)
        invocation = PRESET.invocation(the_job, self.cli, context)
        argv = invocation.argv
        if strict:
            argv = [*argv[:2], "--strict-config", *argv[2:]]
        for name, text in invocation.files.items():
            path = self.home / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        done = subprocess.run(
            argv,
            cwd=self.workspace,
            env={**base_env, **invocation.env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        parser = PRESET.parser()
        events: list[base.AgentEvent] = []
        for line in done.stdout.splitlines():
            events += parser.feed(line)
        return Ran(done.returncode, done.stdout, done.stderr, events, parser.verdict())


@pytest.fixture
def script() -> Script:
    return Script([])


@pytest.fixture
def agent(tmp_path: Path, script: Script) -> Iterator[Agent]:
    cli = codex_cli()
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace.home").mkdir(mode=0o700)
    with ScriptedServer(openai_app(script)) as server:
        yield Agent(tmp_path, server, cli)


def test_codex_runs_a_tool_then_answers_and_a_follow_up_resumes_the_thread(
    agent: Agent, script: Script
) -> None:
    script.extend([shell("mkdir -p out && echo hello > out/greeting.txt && echo written"), Text("Wrote it.")])
    first = agent.run("Write a greeting into out/greeting.txt.")
    assert first.code == 0, first.stderr
    assert (agent.workspace / "out" / "greeting.txt").read_text() == "hello\n"
    [session] = first.of("session")
    thread = session["session_id"]
    [call] = first.of("tool_call")
    assert call["name"] == "exec_command" and "out/greeting.txt" in call["input"]["command"]
    assert first.of("tool_result") == [
        {"id": call["id"], "ok": True, "output": "written\n", "truncated": False}
    ]
    assert [m["text"] for m in first.of("message") if m["role"] == "assistant"] == ["Wrote it."]
    [usage] = first.of("usage")
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cost_usd"] is None
    assert first.verdict == Verdict(ok=True, message="Wrote it.")

    requests = model_requests(agent.server.recorder)
    assert len(requests) == 2 and agent.server.recorder.unknown == []
    assert requests[0]["model"] == MODEL and requests[0]["reasoning"]["effort"] == "high"
    assert requests[0]["stream"] is True
    [output] = [i for i in requests[1]["input"] if i.get("type") == "function_call_output"]
    assert "written" in output["output"]

    script.extend([Text("You asked for a greeting file.")])
    second = agent.run("What did I ask you to do?", resume=thread)
    assert second.code == 0, second.stderr
    assert second.of("session") == [{"session_id": thread}]
    assert second.verdict == Verdict(ok=True, message="You asked for a greeting file.")
    resumed = model_requests(agent.server.recorder)[2]
    texts = input_texts(resumed)
    assert "Write a greeting into out/greeting.txt." in texts  # the earlier prompt
    assert "Wrote it." in texts  # the earlier answer
    assert texts[-1] == "What did I ask you to do?"
    assert input_types(resumed).count("function_call") == 1  # and the earlier tool call with its output
    assert "function_call_output" in input_types(resumed)


def test_every_config_key_is_one_codex_knows_and_skills_reach_the_model(agent: Agent, script: Script) -> None:
    """``--strict-config`` makes Codex refuse a key it does not recognise: the preset writes none."""
    script.extend([Text("ok")])
    skill = {"name": "greeter", "skill_name": "greeter", "description": "Greets people politely",
             "body": "Say hello.", "front_matter": {}}  # fmt: skip
    servers = {"docs": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "v"}}}
    ran = agent.run("hi", strict=True, skills=[skill], mcp_servers=servers)
    assert ran.code == 0, ran.stderr
    assert ran.verdict == Verdict(ok=True, message="ok")
    [request] = model_requests(agent.server.recorder)
    assert any("greeter: Greets people politely" in t for t in input_texts(request))
    metadata = json.loads(request["client_metadata"]["x-codex-turn-metadata"])
    assert metadata["analytics_enabled"] is False
    assert metadata["sandbox_mode"] == "danger-full-access"


def test_a_missing_key_fails_the_turn_with_codexs_message(agent: Agent) -> None:
    ran = agent.run("hi", key=None)
    assert ran.code == 1
    assert ran.verdict == Verdict(ok=False, message="Missing environment variable: `OPENAI_API_KEY`.")
    assert model_requests(agent.server.recorder) == []


class KeptSession:
    """The run's saved session state, kept in memory between attempts (the server's role)."""

    def __init__(self) -> None:
        self.archive: bytes | None = None

    async def save_session_state(self, archive: bytes) -> None:
        self.archive = archive

    async def load_session_state(self) -> bytes | None:
        return self.archive


async def test_a_resumed_attempts_usage_is_only_what_it_billed(tmp_path: Path, script: Script) -> None:
    """Codex reports the thread's running totals; through the preset harness (its session state saved and
    restored between attempts, fresh agent homes) the run's usage adds up to what the server billed."""
    cli = codex_cli()
    script.extend([shell("echo one"), Text("First."), Text("Second.")])
    kept = KeptSession()
    with ScriptedServer(openai_app(script)) as server:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENAI_BASE_URL": f"{server.url}/v1",
               "OPENAI_API_KEY": "sk-test"}  # fmt: skip
        harness = PresetHarness(PRESET, cli, env=env)
        usage: list[dict[str, Any]] = []
        sessions: list[str] = []

        async def on_event(events: Sequence[base.AgentEvent]) -> None:
            usage.extend(dict(e.data) for e in events if e.kind == "usage")
            sessions.extend(str(e.data["session_id"]) for e in events if e.kind == "session")

        config = {"harness": {"type": "codex", "model_id": MODEL}}
        first = Job(run_id="run_codex_usage", prompt="Say one.", agent_config=config)
        workspace = tmp_path / "attempt-1"
        workspace.mkdir()
        outcome = await harness.run(
            first, workspace, cancel=asyncio.Event(), on_event=on_event, sessions=kept
        )
        assert outcome.state == "SUCCEEDED", outcome.status_message
        assert len(model_requests(server.recorder)) == 2

        second = replace(first, prompt="And again?", resume_session_id=sessions[0])
        workspace = tmp_path / "attempt-2"
        workspace.mkdir()
        outcome = await harness.run(
            second, workspace, cancel=asyncio.Event(), on_event=on_event, sessions=kept
        )
        assert outcome.state == "SUCCEEDED", outcome.status_message
        assert sessions == [sessions[0]] * 2  # resumed, not a fresh thread
        requests = len(model_requests(server.recorder))
        assert requests == 3 and server.recorder.unknown == []

    assert [u["input_tokens"] for u in usage] == [2 * INPUT_TOKENS, INPUT_TOKENS]
    assert sum(u["input_tokens"] for u in usage) == requests * INPUT_TOKENS
    assert sum(u["output_tokens"] for u in usage) == requests * OUTPUT_TOKENS


# --- the whole path: a delivery, factoryctl serve, a self-hosted worker running the preset ------------

HOST = "codex-box"
HOOK_TOKEN = "codex-e2e-hook-token-0123456789"
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED", "BLOCKED"}
PROMPT = "An alert fired: write a note about it."


def write_tree(repo: Path) -> None:
    """Runs go to the self-hosted worker (``agentDefaults.workerHost``); the automation picks Codex with a
    reasoning level in its own front matter."""
    files = {
        "factory.yaml": (
            "schemaVersion: v1alpha1\nname: codex-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
            f"agentDefaults:\n  workerHost: {HOST}\n  harness:\n    type: codex\n    model: {MODEL}\n"
        ),
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "agents/coder/agent.md": "---\ndescription: Codes\n---\nYou write code.\n",
        "webhooks/alerts.yaml": "secretName: alerts-token\n",
        "automations/codex-alert/automation.md": (
            "---\ntitle: Codex alert\nagent: coder\n"
            f"harness:\n  type: codex\n  model: {MODEL}\n  reasoningLevel: high\n"
            "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
            f"---\n{PROMPT}\n"
        ),
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@dataclass
class Stack:
    """``factoryctl serve`` following the tree and a self-hosted ``factoryctl worker --sandbox none
    --harness codex`` whose environment points Codex at the scripted model."""

    served: Served
    model: ScriptedServer
    database: str
    worker_log: Path
    alive: list[subprocess.Popen[bytes]]
    hook: str

    @property
    def logs(self) -> list[Path]:
        return [self.served.log, self.worker_log]

    def deliver(self, delivery: str) -> str:
        sent = httpx.post(
            f"{self.served.url}/webhooks/w/{self.hook}",
            json={"alert": delivery},
            headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": delivery},
            timeout=10,
        )
        assert sent.status_code == 202, sent.text

        def started() -> str | None:
            runs = self.served.get("/api/v1/agent/runs")["runs"]
            return next((str(r["run_id"]) for r in runs if r.get("title") == "Codex alert"), None)

        return wait_for(started, 30, "the delivery's run", alive=self.alive, logs=self.logs)

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.served.get(f"/api/v1/agent/runs/{run_id}")
        return found

    def finished(self, run_id: str) -> dict[str, Any]:
        done = lambda: (run := self.run(run_id))["state"] in FINISHED and run  # noqa: E731
        return wait_for(done, 90, f"run {run_id} to finish", alive=self.alive, logs=self.logs)

    def events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        rows = committed(self.database, RunEvent.run_id, RunEvent.id, RunEvent.kind, RunEvent.data)
        return [(kind, data) for run, _id, kind, data in sorted(rows, key=lambda r: r[1]) if run == run_id]


@pytest.fixture
def stack(tmp_path: Path, script: Script) -> Iterator[Stack]:
    cli = codex_cli()
    data, repo = tmp_path / "data", tmp_path / "repo"
    repo.mkdir()
    write_tree(repo)
    database = f"sqlite+aiosqlite:///{tmp_path / 'factory.db'}"
    admin = ("--data-dir", data, "--database", database)
    made = run_cli(*admin, "secrets", "create", "alerts-token", "--scope", "webhook", "--from-stdin",
                   stdin=HOOK_TOKEN + "\n")  # fmt: skip
    assert made.returncode == 0, made.stderr
    with (
        ScriptedServer(openai_app(script)) as model,
        serving(data, "--repo", repo, database=database, log=tmp_path / "serve.log") as served,
    ):
        key = run_cli(*admin, "keys", "create", "--name", "box", "--role", "worker", "--worker-host", HOST)
        assert key.returncode == 0, key.stderr
        worker_env = {
            "FACTORY_API_KEY": key.stdout.strip().splitlines()[-1],
            "OPENAI_BASE_URL": f"{model.url}/v1",
            "OPENAI_API_KEY": "sk-worker-scripted",
        }
        args = ("worker", "--server", served.url, "--host-id", HOST, "--sandbox", "none", "--harness",
                "codex", "--agent-cli", f"codex={cli}", "--workspace-root", tmp_path / "ws")  # fmt: skip
        worker_log = tmp_path / "worker.log"
        with running(*args, log=worker_log, env=worker_env) as worker:
            alive, logs = [served.proc, worker], [served.log, worker_log]

            def hook() -> str | None:
                with FactoryClient(served.url, served.key) as client:
                    page = client.factories.list(search="codex-e2e")
                    detail = client.factories.get(page.items[0].uid) if page.items else None
                    if detail is None or not detail.webhooks or not detail.automations:
                        return None
                    return str(detail.webhooks[0].uid)

            uid = wait_for(hook, 30, "the tree to apply", alive=alive, logs=logs)
            yield Stack(served, model, database, worker_log, alive, uid)


def test_a_delivery_runs_codex_on_a_self_hosted_worker(stack: Stack, script: Script) -> None:
    script.extend(
        [shell("mkdir -p notes && echo alert-seen > notes/alert.txt && echo noted"), Text("Noted.")]
    )
    run_id = stack.deliver("d-codex-1")
    run = stack.finished(run_id)
    assert run["state"] == "SUCCEEDED", (run["status_message"], stack.worker_log.read_text()[-2000:])
    assert run["session_id"] and run["conversation_id"] == run["session_id"]
    assert run["request_usage"]["total_tokens"] > 0

    events = stack.events(run_id)
    kinds = [kind for kind, _ in events]
    assert (
        kinds.index("session") < kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("usage")
    )
    assert [d for k, d in events if k == "session"] == [{"session_id": run["session_id"]}]
    [call] = [d for k, d in events if k == "tool_call"]
    assert call["name"] == "exec_command" and "notes/alert.txt" in call["input"]["command"]
    [result] = [d for k, d in events if k == "tool_result"]
    assert (result["id"], result["ok"], result["output"]) == (call["id"], True, "noted\n")
    assert {"role": "assistant", "text": "Noted."} in [d for k, d in events if k == "message"]

    requests = model_requests(stack.model.recorder)
    assert len(requests) == 2 and stack.model.recorder.unknown == []
    assert requests[0]["model"] == MODEL and requests[0]["reasoning"]["effort"] == "high"
    assert any(PROMPT in t for t in input_texts(requests[0]))


def test_a_follow_up_resumes_the_codex_thread(stack: Stack, script: Script) -> None:
    script.extend([shell("echo noted"), Text("Noted.")])
    run_id = stack.deliver("d-codex-2")
    first = stack.finished(run_id)
    assert first["state"] == "SUCCEEDED", first["status_message"]
    script.extend([Text("The alert was about the disk.")])
    status, body = stack.served.post(f"/api/v1/agent/runs/{run_id}/followups", {"message": "What was it?"})
    assert status == 200, body
    wait_for(lambda: len(model_requests(stack.model.recorder)) >= 3 or stack.run(run_id)["state"] == "FAILED",
             90, "the follow-up's model request", alive=stack.alive, logs=stack.logs)  # fmt: skip
    second = stack.finished(run_id)
    assert second["state"] == "SUCCEEDED", second["status_message"]
    assert second["session_id"] == first["session_id"]
    resumed = model_requests(stack.model.recorder)[2]
    texts = input_texts(resumed)
    assert any(PROMPT in t for t in texts) and "Noted." in texts  # the first attempt's prompt and answer
    assert "function_call_output" in input_types(resumed)  # and its tool call
    assert texts[-1].endswith("What was it?")
    # Codex reports the thread's running totals; the run counts each billed request once
    billed = len(model_requests(stack.model.recorder)) * (INPUT_TOKENS + OUTPUT_TOKENS)
    assert second["request_usage"]["total_tokens"] == billed


def test_a_cancel_while_a_command_runs_leaves_no_process(
    stack: Stack, script: Script, tmp_path: Path
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    script.extend([shell(f"echo $$ > {pid_file} && exec sleep 300")])
    run_id = stack.deliver("d-codex-cancel")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, "the command",
                       alive=stack.alive, logs=stack.logs))  # fmt: skip
    status, body = stack.served.post(f"/api/v1/agent/runs/{run_id}/cancel")
    assert status == 200, body
    assert stack.finished(run_id)["state"] == "CANCELLED"

    def gone() -> bool:  # an unreaped zombie has ended too
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    # the worker's own tests time the kill (SIGTERM, SIGKILL after 1.5 s); here: nothing outlives the run
    wait_for(gone, 5, "the command's process to end", alive=stack.alive, logs=stack.logs)
    calls = [d for k, d in stack.events(run_id) if k == "tool_call"]
    assert len(calls) == 1 and "sleep 300" in calls[0]["input"]["command"]
