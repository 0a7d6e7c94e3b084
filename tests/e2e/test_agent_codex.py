"""The real Codex CLI (``node_modules/.bin/codex``, 0.169.0) run through the Codex preset against the
scripted OpenAI Responses server on loopback: the preset's own argv, environment and ``CODEX_HOME`` files,
its parser on the CLI's live output, and a follow-up that resumes the thread (the model is shown the earlier
turns). Through the preset harness, a resumed attempt's usage is only what it added to the thread's running
totals; through ``factoryctl serve`` and a self-hosted ``factoryctl worker --harness codex``, a delivery's
run, its follow-up (the run's usage is what the server billed) and a cancel. Skipped, saying so, when the
CLI is not installed (``npm ci``)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from agent_support import Agent, Ran, Stack, agent_stack, installed_cli, scripted_agent
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
from serve_support import wait_for

from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Verdict
from factoryctl.worker.presets.codex import PRESET
from factoryctl.worker.presets.harness import PresetHarness

pytestmark = pytest.mark.slow

MODEL = "gpt-5.2-codex"


def codex_cli() -> str:
    return installed_cli("codex", "@openai/codex 0.169.0")


class CodexAgent(Agent):
    def run(
        self,
        prompt: str,
        *,
        resume: str | None = None,
        key: str | None = "sk-test",
        strict: bool = False,
        **job: Any,
    ) -> Ran:
        """Start the CLI exactly as the preset says (stdin closed, ``HOME`` the agent home) and parse its
        stdout line by line; ``strict`` adds ``--strict-config``."""
        env = {"OPENAI_BASE_URL": f"{self.server.url}/v1"}
        if key is not None:
            env["OPENAI_API_KEY"] = key
        config = {"harness": {"type": "codex", "model_id": MODEL, "reasoning_level": "high"}}
        the_job = Job(run_id="run_codex_e2e", prompt=prompt, agent_config=config, **job)
        edit = (lambda argv: [*argv[:2], "--strict-config", *argv[2:]]) if strict else None
        return self.invoke(PRESET, the_job, resume=resume, env=env, process_env={"HOME": str(self.home)},
                           edit=edit)  # fmt: skip


@pytest.fixture
def script() -> Script:
    return Script([])


@pytest.fixture
def agent(tmp_path: Path, script: Script) -> Iterator[CodexAgent]:
    with scripted_agent(CodexAgent, tmp_path, openai_app(script), codex_cli()) as agent:
        yield agent


def test_codex_runs_a_tool_then_answers_and_a_follow_up_resumes_the_thread(
    agent: CodexAgent, script: Script
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


def test_every_config_key_is_one_codex_knows_and_skills_reach_the_model(
    agent: CodexAgent, script: Script
) -> None:
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


def test_a_missing_key_fails_the_turn_with_codexs_message(agent: CodexAgent) -> None:
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
PROMPT = "An alert fired: write a note about it."
TREE = {  # runs go to the worker (agentDefaults.workerHost); the automation sets a reasoning level
    "factory.yaml": (
        "schemaVersion: v1alpha1\nname: codex-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
        f"agentDefaults:\n  workerHost: {HOST}\n  harness:\n    type: codex\n    model: {MODEL}\n"
    ),
    "agents/coder/agent.md": "---\ndescription: Codes\n---\nYou write code.\n",
    "automations/codex-alert/automation.md": (
        "---\ntitle: Codex alert\nagent: coder\n"
        f"harness:\n  type: codex\n  model: {MODEL}\n  reasoningLevel: high\n"
        "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
        f"---\n{PROMPT}\n"
    ),
}


@pytest.fixture
def stack(tmp_path: Path, script: Script) -> Iterator[Stack]:
    """``factoryctl serve`` and a self-hosted ``factoryctl worker --sandbox none --harness codex`` whose
    environment points Codex at the scripted model."""
    cli, app = codex_cli(), openai_app(script)

    def model_env(url: str) -> dict[str, str]:
        return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-worker-scripted"}

    workspaces = ("--workspace-root", tmp_path / "ws")
    with agent_stack(tmp_path, factory="codex-e2e", files=TREE, app=app, harness="codex", cli=cli, host=HOST,
                     model_env=model_env, worker_args=workspaces) as stack:  # fmt: skip
        yield stack


def events(stack: Stack, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e["kind"], e["data"]) for e in stack.events(run_id)]


def test_a_delivery_runs_codex_on_a_self_hosted_worker(stack: Stack, script: Script) -> None:
    script.extend(
        [shell("mkdir -p notes && echo alert-seen > notes/alert.txt && echo noted"), Text("Noted.")]
    )
    run_id = stack.deliver("d-codex-1")
    run = stack.finished(run_id)
    assert run["state"] == "SUCCEEDED", (run["status_message"], stack.worker_log.read_text()[-2000:])
    assert run["session_id"] and run["conversation_id"] == run["session_id"]
    assert run["request_usage"]["total_tokens"] > 0

    run_events = events(stack, run_id)
    kinds = [kind for kind, _ in run_events]
    assert (
        kinds.index("session") < kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("usage")
    )
    assert [d for k, d in run_events if k == "session"] == [{"session_id": run["session_id"]}]
    [call] = [d for k, d in run_events if k == "tool_call"]
    assert call["name"] == "exec_command" and "notes/alert.txt" in call["input"]["command"]
    [result] = [d for k, d in run_events if k == "tool_result"]
    assert (result["id"], result["ok"], result["output"]) == (call["id"], True, "noted\n")
    assert {"role": "assistant", "text": "Noted."} in [d for k, d in run_events if k == "message"]

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
    second = stack.finished(run_id, 2)
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
    calls = [d for k, d in events(stack, run_id) if k == "tool_call"]
    assert len(calls) == 1 and "sleep 300" in calls[0]["input"]["command"]
