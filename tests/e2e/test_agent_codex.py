"""The real Codex CLI (``node_modules/.bin/codex``, 0.169.0) run through the Codex preset against the
scripted OpenAI Responses server on loopback: the preset's own argv, environment and ``CODEX_HOME`` files,
its parser on the CLI's live output, and a follow-up that resumes the thread (the model is shown the earlier
turns). Skipped, saying so, when the CLI is not installed (``npm ci``)."""

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
from agents.openai_server import input_texts, input_types, model_requests, openai_app, shell
from agents.scripted import Script, ScriptedServer, Text

from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Verdict
from factoryctl.worker.presets.codex import PRESET

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
