"""The preset harness with a real subprocess for a CLI: a small Python script that prints JSON lines as
a made-up preset's structured output (events, a result), garbage, stderr, and exits, hangs or starts a
grandchild as its prompt says. The preset here is this test's own; the real ones have their own tests."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker import HarnessUnavailable
from factoryctl.worker.execution import ExecutionSettings
from factoryctl.worker.harness import EchoHarness, harness_for
from factoryctl.worker.job import Job, Outcome
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import AgentEvent, Context, Invocation, Verdict
from factoryctl.worker.presets.harness import PresetHarness
from factoryctl.worker.presets.registry import (
    AgentCli,
    AgentCliProblem,
    agents_for,
    find_cli,
    parse_agent_cli,
)
from factoryctl.worker.workspace import agent_home, remove_workspace

SECRET = "s3cr3t-token-value"

# The fake CLI: its "prompt" (stdin) is a JSON script of what to do.
CLI = textwrap.dedent(
    """\
    import json, os, subprocess, sys, time
    if sys.argv[1:] == ["--version"]:
        print(os.environ.get("FAKE_VERSION", "fake-agent 1.4"))
        sys.exit(0)
    plan = json.loads(sys.stdin.read())
    home = os.environ["HOME"]
    settings = os.path.join(home, "config", "settings.json")
    print(json.dumps({"type": "env", "home": home, "cwd": os.getcwd(), "argv": sys.argv[1:],
                      "codex_home": os.environ.get("CODEX_HOME"), "mode": os.environ.get("FAKE_MODE"),
                      "settings": open(settings).read(),
                      "settings_mode": oct(os.stat(settings).st_mode & 0o777)}), flush=True)
    for line in plan.get("stdout", []):
        print(line if isinstance(line, str) else json.dumps(line), flush=True)
    for line in plan.get("stderr", []):
        print(line, file=sys.stderr, flush=True)
    if plan.get("grandchild"):
        child = subprocess.Popen(["sleep", "60"])
        print("grandchild", child.pid, flush=True)
    if plan.get("hang"):
        time.sleep(60)
    sys.exit(plan.get("exit", 0))
    """
)


class FakeParser:
    """Lines starting with ``{`` are structured: ``{"type": "message"|"tool"|"result"|"env", ...}``."""

    def __init__(self) -> None:
        self.result: Verdict | None = None
        self.env: dict[str, Any] = {}

    def is_structured(self, line: str) -> bool:
        return line.startswith("{")

    def feed(self, line: str) -> list[AgentEvent]:
        item = json.loads(line)
        if item["type"] == "message":
            return [base.message(item["text"])]
        if item["type"] == "tool":
            return [base.tool_call("t1", "bash", {"cmd": item["cmd"]}), base.tool_result("t1", True, "ok")]
        if item["type"] == "result":
            self.result = Verdict(item["ok"], item.get("message"), item.get("blocked", False))
        if item["type"] == "env":
            self.env = item
        return []

    def verdict(self) -> Verdict | None:
        return self.result


@dataclass
class FakePreset:
    name: str = "fake"
    executable: str = "fake-agent"
    minimum_version: tuple[int, ...] = (1, 2)
    parsers: list[FakeParser] = field(default_factory=list)

    def version(self, output: str) -> tuple[int, ...] | None:
        found = re.search(r"fake-agent (\d+)\.(\d+)", output)
        return (int(found[1]), int(found[2])) if found else None

    def invocation(self, job: Job, executable: str, context: Context) -> Invocation:
        argv = [executable, "--model", job.agent_model_id or "-", "--resume", context.resume or "-"]
        settings = json.dumps({"workspace": str(context.workspace), "key": context.env.get("FAKE_KEY")})
        return Invocation(
            argv, env={"FAKE_MODE": "exec"}, files={"config/settings.json": settings}, stdin=job.prompt
        )

    def parser(self) -> FakeParser:
        self.parsers.append(FakeParser())
        return self.parsers[-1]


@pytest.fixture
def cli(tmp_path: Path) -> str:
    path = tmp_path / "bin" / "fake-agent"
    path.parent.mkdir()
    path.write_text(f"#!{sys.executable}\n{CLI}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces" / "run_1-abc"
    path.mkdir(parents=True)
    return path


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.events: list[AgentEvent] = []
        self.seen: asyncio.Queue[str] = asyncio.Queue()

    async def output(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))
        await self.seen.put(line)

    async def event(self, events: Sequence[AgentEvent]) -> None:
        self.events.extend(events)


def job(plan: dict[str, Any], **kwargs: Any) -> Job:
    return Job(
        run_id="run_1",
        prompt=json.dumps(plan),
        environment={"repos": [], "setup": [], "env": {}, "secrets": {"FAKE_KEY": SECRET}},
        **kwargs,
    )


async def run(
    preset: FakePreset, cli: str, j: Job, ws: Path, rec: Recorder, cancel: asyncio.Event | None = None
) -> Outcome:
    harness = PresetHarness(preset, cli, env={"PATH": os.environ["PATH"]}, grace_seconds=0.5)
    return await harness.run(
        j, ws, cancel=cancel or asyncio.Event(), on_output=rec.output, on_event=rec.event
    )


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] not in "ZX"


async def test_success_turns_structured_lines_into_events_and_the_rest_into_log_lines(
    cli: str, ws: Path
) -> None:
    preset, rec = FakePreset(), Recorder()
    plan = {
        "stdout": [
            {"type": "message", "text": f"working with {SECRET}"},
            "not json at all",
            {"type": "tool", "cmd": "ls"},
            {"type": "result", "ok": True, "message": "done " + "x" * 3000},
        ],
        "stderr": [f"a warning about {SECRET}"],
    }
    j = job(
        plan,
        agent_config={"harness": {"type": "fake", "model_id": "m-h"}},
        model_id="m-run",
        resume_session_id="sess-9",
    )
    outcome = await run(preset, cli, j, ws, rec)
    assert outcome.state == "SUCCEEDED"
    assert outcome.status_message is not None
    message = outcome.status_message["message"]
    assert message.startswith("done xxx") and len(message) <= 1024
    assert [e.kind for e in rec.events] == ["message", "tool_call", "tool_result"]
    assert rec.events[0].data["text"] == "working with ***"
    assert ("stdout", "not json at all") in rec.lines
    assert ("stderr", "a warning about ***") in rec.lines
    env = preset.parsers[0].env
    home = agent_home(ws)
    assert env["home"] == str(home) and env["codex_home"] == str(home / ".codex") and env["cwd"] == str(ws)
    assert not home.is_relative_to(ws)  # outside the checkout
    assert env["argv"] == ["--model", "m-h", "--resume", "sess-9"]  # harness.model_id wins; resume passed
    assert env["mode"] == "exec" and env["settings_mode"] == "0o600"
    assert json.loads(env["settings"])["key"] == SECRET  # the preset saw the run's environment
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    remove_workspace(ws)
    assert sorted(os.listdir(ws.parent)) == []  # the home goes with the workspace


@pytest.mark.parametrize(
    ("plan", "state", "code", "text"),
    [
        (
            {"stdout": [{"type": "result", "ok": False, "message": "rate limited"}], "exit": 1},
            "FAILED",
            "agent_error",
            "rate limited",
        ),
        (
            {"stdout": [{"type": "result", "ok": False, "blocked": True, "message": "Which branch?"}]},
            "BLOCKED",
            None,
            "Which branch?",
        ),
        (
            {"stdout": ["garbage", '{"type": "message", "text": "hi"}']},
            "FAILED",
            "agent_no_result",
            "without reporting a result",
        ),
        ({"stderr": ["boom: cannot reach the model"], "exit": 3}, "FAILED", "harness_exit_3", "boom"),
        (
            {
                "stdout": [{"type": "result", "ok": True, "message": "fine"}],
                "stderr": ["crashed late"],
                "exit": 2,
            },
            "FAILED",
            "harness_exit_2",
            "crashed late",
        ),
    ],
)
async def test_outcomes(
    cli: str, ws: Path, plan: dict[str, Any], state: str, code: str | None, text: str
) -> None:
    outcome = await run(FakePreset(), cli, job(plan), ws, Recorder())
    assert outcome.state == state
    assert outcome.status_message is not None
    assert outcome.status_message.get("error_code") == code
    assert text in outcome.status_message["message"]


async def test_a_hanging_cli_times_out_and_its_grandchild_dies(cli: str, ws: Path) -> None:
    rec = Recorder()
    outcome = await run(
        FakePreset(), cli, job({"grandchild": True, "hang": True}, timeout_seconds=1.0), ws, rec
    )
    assert outcome == Outcome.failed("harness timed out after 1s", "timeout")
    pid = int(next(line for s, line in rec.lines if line.startswith("grandchild")).split()[1])
    assert not pid_alive(pid)


async def test_cancel_stops_the_cli_and_its_grandchild(cli: str, ws: Path) -> None:
    rec, cancel = Recorder(), asyncio.Event()
    task = asyncio.create_task(
        run(FakePreset(), cli, job({"grandchild": True, "hang": True}), ws, rec, cancel)
    )
    while not (line := await asyncio.wait_for(rec.seen.get(), 10)).startswith("grandchild"):
        pass
    pid = int(line.split()[1])
    assert pid_alive(pid)
    started = asyncio.get_running_loop().time()
    cancel.set()
    assert await task == Outcome.cancelled()
    assert asyncio.get_running_loop().time() - started < 2.0
    assert not pid_alive(pid)


async def test_a_cli_that_cannot_start_is_an_error(ws: Path, tmp_path: Path) -> None:
    outcome = await run(FakePreset(), str(tmp_path / "missing"), job({}), ws, Recorder())
    assert outcome.state == "ERROR"
    assert (
        outcome.status_message is not None and outcome.status_message["error_code"] == "harness_start_failed"
    )


def test_harness_for_runs_an_offered_preset_and_refuses_one_not_offered(cli: str) -> None:
    preset = FakePreset(name="claude")
    agents = {"claude": AgentCli(preset, cli, (1, 4))}
    chosen = harness_for({"harness": {"type": "claude"}}, "echo", None, agents=agents)
    assert isinstance(chosen, PresetHarness) and chosen.executable == cli
    assert isinstance(harness_for({"harness": {"type": "oz"}}, "claude", None, agents=agents), PresetHarness)
    assert isinstance(harness_for({}, "echo", None, agents=agents), EchoHarness)
    with pytest.raises(HarnessUnavailable, match=r"'codex'.*it offers echo, claude"):
        harness_for({"harness": {"type": "codex"}}, "claude", None, agents=agents)


def test_offered_harnesses() -> None:
    assert ExecutionSettings().offered == ("echo",)
    assert ExecutionSettings(harness="command", command="agent").offered == ("echo", "command")
    cli = AgentCli(FakePreset(name="codex"), "/bin/codex", (1, 4))
    offered = ExecutionSettings(harness="codex", command="agent", agents={"codex": cli}).offered
    assert offered == ("echo", "codex", "command")
    assert ExecutionSettings(harness="codex").offered == ("echo",)  # its CLI was never found


def test_find_cli_checks_the_version(cli: str, tmp_path: Path) -> None:
    preset = FakePreset()
    found = find_cli(preset, cli)
    assert (found.executable, found.version) == (cli, (1, 4))
    assert find_cli(preset, env={"PATH": str(Path(cli).parent)}).executable == cli
    with pytest.raises(AgentCliProblem, match=r"`fake-agent` 1\.2 or newer.*version 1\.1"):
        find_cli(preset, cli, env={**os.environ, "FAKE_VERSION": "fake-agent 1.1"})
    with pytest.raises(AgentCliProblem, match=r"cannot tell the version.*'who knows'"):
        find_cli(preset, cli, env={**os.environ, "FAKE_VERSION": "who knows"})
    with pytest.raises(AgentCliProblem, match="none is on PATH"):
        find_cli(preset, env={"PATH": str(tmp_path)})


def test_agent_cli_flags() -> None:
    assert parse_agent_cli(["claude=/opt/claude"]) == {"claude": "/opt/claude"}
    with pytest.raises(ValueError, match="NAME=PATH"):
        parse_agent_cli(["claude"])
    with pytest.raises(ValueError, match="not a preset"):
        parse_agent_cli(["cursor=/x"])
    with pytest.raises(AgentCliProblem, match="does not run"):
        agents_for("claude", {"codex": "/x"})
    assert agents_for("echo", {}) == {}


def test_the_worker_refuses_to_start_with_an_old_cli(tmp_path: Path) -> None:
    old = tmp_path / "claude"
    old.write_text("#!/bin/sh\necho '2.0.5 (Claude Code)'\n")
    old.chmod(0o755)
    factoryctl = Path(sys.executable).with_name("factoryctl")
    done = subprocess.run(
        [
            str(factoryctl),
            "worker",
            "--host-id",
            "box",
            "--harness",
            "claude",
            "--agent-cli",
            f"claude={old}",
        ],
        env={**os.environ, "FACTORY_API_KEY": "fk_test"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"needs `claude` 2.1.0 or newer, and {old} is version 2.0.5" in done.stderr
    missing = subprocess.run(
        [str(factoryctl), "worker", "--host-id", "box", "--harness", "claude"],
        env={**os.environ, "FACTORY_API_KEY": "fk_test", "PATH": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2 and "`claude` 2.1.0 or newer, and none is on PATH" in missing.stderr
