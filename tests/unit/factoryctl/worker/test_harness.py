"""Harnesses with real subprocesses: output, exit codes, stdin, env, templates, timeout and cancel."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from factoryctl.worker import HarnessError
from factoryctl.worker.harness import CommandHarness, EchoHarness, harness_for
from factoryctl.worker.job import Job, Outcome
from factoryctl.worker.workspace import PROMPT_FILE, RESULT_FILE

PY = sys.executable


class Recorder:
    """An on_output callback that records (stream, line) and can react to a line."""

    def __init__(self, when: str | None = None, then: object = None) -> None:
        self.lines: list[tuple[str, str]] = []
        self.when = when
        self.then = then

    async def __call__(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))
        if self.when is not None and line == self.when and callable(self.then):
            self.then()

    def of(self, stream: str) -> list[str]:
        return [line for s, line in self.lines if s == stream]


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, possibly between open() and read()
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


async def wait_gone(pid: int, seconds: float = 1.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        await asyncio.sleep(0.02)
    return not pid_alive(pid)


def job(prompt: str = "Fix the bug\nmore detail", **kwargs: object) -> Job:
    return Job(run_id="run_abc", prompt=prompt, **kwargs)  # type: ignore[arg-type]


async def run(
    harness: CommandHarness | EchoHarness,
    j: Job,
    ws: Path,
    cancel: asyncio.Event | None = None,
    rec: Recorder | None = None,
) -> Outcome:
    return await harness.run(j, ws, cancel=cancel or asyncio.Event(), on_output=rec)


# -- echo ------------------------------------------------------------------------------------------


async def test_echo_reports_first_line_and_workspace_files(tmp_path: Path) -> None:
    (tmp_path / "event-payload.json").write_text("{}")
    (tmp_path / "repo").mkdir()
    rec = Recorder()
    outcome = await run(
        EchoHarness(), job("\n  Fix the bug  \nsecond line", model_id="m-1"), tmp_path, rec=rec
    )
    assert outcome == Outcome("SUCCEEDED", None)
    result = (tmp_path / RESULT_FILE).read_text()
    assert "- first line: Fix the bug" in result
    assert "- model: m-1" in result
    assert "- event-payload.json" in result and "- repo/" in result
    assert rec.lines == [
        ("stdout", "echo: Fix the bug"),
        ("stdout", "echo: 2 workspace file(s): event-payload.json, repo/"),
    ]


async def test_echo_fail_marker_fails_the_run(tmp_path: Path) -> None:
    outcome = await run(EchoHarness(), job("please [echo:fail]"), tmp_path)
    assert outcome.state == "FAILED"
    assert outcome.status_message is not None
    assert outcome.status_message["error_code"] == "echo_fail"


async def test_echo_sleep_honours_cancel(tmp_path: Path) -> None:
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, cancel.set)
    started = time.monotonic()
    outcome = await run(EchoHarness(), job("wait [echo:sleep=30]"), tmp_path, cancel)
    assert outcome.state == "CANCELLED"
    assert time.monotonic() - started < 1


async def test_echo_sleep_beyond_job_timeout_fails_with_timeout(tmp_path: Path) -> None:
    outcome = await run(EchoHarness(), job("[echo:sleep=30]", timeout_seconds=0.1), tmp_path)
    assert outcome.state == "FAILED"
    assert outcome.status_message is not None and outcome.status_message["error_code"] == "timeout"


async def test_echo_short_sleep_then_succeeds(tmp_path: Path) -> None:
    outcome = await run(EchoHarness(), job("[echo:sleep=0.05]"), tmp_path)
    assert outcome.state == "SUCCEEDED"


# -- command: exit codes and output ----------------------------------------------------------------


async def test_command_success_streams_stdout_and_stderr(tmp_path: Path) -> None:
    rec = Recorder()
    outcome = await run(CommandHarness("echo hello; echo warn >&2"), job(), tmp_path, rec=rec)
    assert outcome.state == "SUCCEEDED"
    assert rec.of("stdout") == ["hello"]
    assert rec.of("stderr") == ["warn"]


async def test_command_failure_reports_exit_code_and_stderr_tail(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "for i in range(400): print(f'noise line {i:04d}', file=sys.stderr)\n"
        "print('FINAL: the real reason', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    outcome = await run(CommandHarness([PY, "-c", script]), job(), tmp_path)
    assert outcome.state == "FAILED"
    message = outcome.status_message
    assert message is not None
    assert message["error_code"] == "harness_exit_3"
    assert message["retryable"] is False
    assert message["message"].endswith("FINAL: the real reason")
    assert len(message["message"]) <= 1024
    assert "noise line 0000" not in message["message"]


async def test_command_failure_without_stderr_names_the_status(tmp_path: Path) -> None:
    outcome = await run(CommandHarness("exit 5"), job(), tmp_path)
    assert outcome.status_message == {
        "message": "command exited with status 5",
        "error_code": "harness_exit_5",
        "retryable": False,
    }


async def test_command_killed_by_a_signal(tmp_path: Path) -> None:
    outcome = await run(CommandHarness("kill -9 $$"), job(), tmp_path)
    assert outcome.state == "FAILED"
    assert outcome.status_message is not None
    assert outcome.status_message["error_code"] == "harness_signal_9"
    assert "SIGKILL" in outcome.status_message["message"]


async def test_command_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    outcome = await run(CommandHarness([str(tmp_path / "no-such-agent")]), job(), tmp_path)
    assert outcome.state == "ERROR"
    assert outcome.status_message is not None
    assert outcome.status_message["error_code"] == "harness_start_failed"


async def test_prompt_is_fed_on_stdin_even_when_large(tmp_path: Path) -> None:
    prompt = "Fix the bug\n" + "x" * 300_000 + "\nend"
    outcome = await run(CommandHarness("cat > got.txt"), job(prompt), tmp_path)
    assert outcome.state == "SUCCEEDED"
    assert (tmp_path / "got.txt").read_text() == prompt
    assert (tmp_path / PROMPT_FILE).read_text() == prompt


async def test_command_that_ignores_stdin_still_succeeds(tmp_path: Path) -> None:
    outcome = await run(CommandHarness("exit 0"), job("y" * 1_000_000), tmp_path)
    assert outcome.state == "SUCCEEDED"


async def test_environment_variables(tmp_path: Path) -> None:
    names = ["BASE_VAR", "HOME", "GREETING", "API_TOKEN", "FACTORY_RUN_ID", "FACTORY_MODEL_ID"]
    names += ["FACTORY_WORKSPACE", "FACTORY_PROMPT_FILE"]
    script = f"import os, json; json.dump({{k: os.environ.get(k) for k in {names!r}}}, open('env.json', 'w'))"
    environment = {"env": {"GREETING": "hi"}, "secrets": {"API_TOKEN": "s3cr3t-value"}}
    harness = CommandHarness([PY, "-c", script], env={"BASE_VAR": "base", "FACTORY_MODEL_ID": "stale"})
    outcome = await run(harness, job(model_id="claude-x", environment=environment), tmp_path)
    assert outcome.state == "SUCCEEDED"
    assert json.loads((tmp_path / "env.json").read_text()) == {
        "BASE_VAR": "base",
        "HOME": None,  # an explicit base env replaces, not extends, this process's environment
        "GREETING": "hi",
        "API_TOKEN": "s3cr3t-value",
        "FACTORY_RUN_ID": "run_abc",
        "FACTORY_MODEL_ID": "claude-x",
        "FACTORY_WORKSPACE": str(tmp_path),
        "FACTORY_PROMPT_FILE": str(tmp_path / PROMPT_FILE),
    }


async def test_no_model_means_no_model_variable(tmp_path: Path) -> None:
    harness = CommandHarness('test -z "${FACTORY_MODEL_ID+set}"', env={"FACTORY_MODEL_ID": "stale"})
    assert (await run(harness, job(), tmp_path)).state == "SUCCEEDED"


async def test_secrets_are_redacted_from_output_and_messages(tmp_path: Path) -> None:
    rec = Recorder()
    environment = {"secrets": {"API_TOKEN": "s3cr3t-value"}}
    cmd = 'echo "token=$API_TOKEN"; echo "bad $API_TOKEN" >&2; exit 1'
    outcome = await run(CommandHarness(cmd), job(environment=environment), tmp_path, rec=rec)
    assert sorted(rec.lines) == [("stderr", "bad ***"), ("stdout", "token=***")]
    assert outcome.status_message is not None and outcome.status_message["message"] == "bad ***"


# -- command: templates ----------------------------------------------------------------------------


async def test_string_template_placeholders_are_shell_quoted(tmp_path: Path) -> None:
    cmd = "printf '%s\\n' {model} {workspace} {run_id} {prompt_file} > subst.txt"
    outcome = await run(CommandHarness(cmd), job(model_id="it's a $(model)"), tmp_path)
    assert outcome.state == "SUCCEEDED"
    assert (tmp_path / "subst.txt").read_text().splitlines() == [
        "it's a $(model)",
        str(tmp_path),
        "run_abc",
        str(tmp_path / PROMPT_FILE),
    ]


async def test_list_template_substitutes_per_argument(tmp_path: Path) -> None:
    harness = CommandHarness(
        [PY, "-c", "import sys; open('a.txt','w').write(sys.argv[1])", "--model={model}"]
    )
    assert harness.argv(job(model_id="m 1"), tmp_path)[-1] == "--model=m 1"
    assert (await run(harness, job(model_id="m 1"), tmp_path)).state == "SUCCEEDED"
    assert (tmp_path / "a.txt").read_text() == "--model=m 1"


def test_other_braces_are_left_alone(tmp_path: Path) -> None:
    argv = CommandHarness("echo ${HOME} {} {unknown} {run_id}").argv(job(), tmp_path)
    assert argv == ["bash", "-c", "echo ${HOME} {} {unknown} run_abc"]


# -- command: timeout, cancel and the process group ------------------------------------------------


async def test_timeout_fails_the_run_and_kills_the_group(tmp_path: Path) -> None:
    harness = CommandHarness("sleep 1000 & echo $! > child.pid; wait", timeout_seconds=0.3, grace_seconds=0.5)
    started = time.monotonic()
    outcome = await run(harness, job(), tmp_path)
    assert time.monotonic() - started < 1.5
    assert outcome.state == "FAILED"
    assert outcome.status_message is not None
    assert outcome.status_message["error_code"] == "timeout"
    assert await wait_gone(int((tmp_path / "child.pid").read_text()))


async def test_job_timeout_applies_when_shorter(tmp_path: Path) -> None:
    harness = CommandHarness("sleep 30", timeout_seconds=60, grace_seconds=0.5)
    outcome = await run(harness, job(timeout_seconds=0.2), tmp_path)
    assert outcome.status_message is not None and outcome.status_message["error_code"] == "timeout"


async def test_cancel_kills_the_process_group_including_the_grandchild(tmp_path: Path) -> None:
    cancel = asyncio.Event()
    rec = Recorder(when="started", then=cancel.set)
    harness = CommandHarness("sleep 1000 & echo $! > child.pid; echo started; wait", grace_seconds=1)
    started = time.monotonic()
    outcome = await run(harness, job(), tmp_path, cancel, rec)
    assert outcome.state == "CANCELLED"
    assert time.monotonic() - started < 1.5
    assert await wait_gone(int((tmp_path / "child.pid").read_text()))


async def test_cancel_escalates_to_sigkill_for_a_child_ignoring_sigterm(tmp_path: Path) -> None:
    stubborn = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open('child.pid', 'w').write(str(os.getpid())); print('started', flush=True); time.sleep(1000)"
    )
    cancel = asyncio.Event()
    rec = Recorder(when="started", then=cancel.set)
    harness = CommandHarness(f'{PY} -c "{stubborn}" & wait', grace_seconds=0.3)
    started = time.monotonic()
    outcome = await run(harness, job(), tmp_path, cancel, rec)
    assert outcome.state == "CANCELLED"
    assert time.monotonic() - started < 1.8
    assert await wait_gone(int((tmp_path / "child.pid").read_text()))


async def test_background_children_do_not_outlive_a_finished_run(tmp_path: Path) -> None:
    harness = CommandHarness("sleep 1000 & echo $! > child.pid; echo done", grace_seconds=0.5)
    started = time.monotonic()
    outcome = await run(harness, job(), tmp_path)
    assert outcome.state == "SUCCEEDED"
    assert time.monotonic() - started < 1.5
    assert await wait_gone(int((tmp_path / "child.pid").read_text()))


async def test_cancel_set_before_start_runs_nothing(tmp_path: Path) -> None:
    cancel = asyncio.Event()
    cancel.set()
    outcome = await run(CommandHarness("touch ran.txt"), job(), tmp_path, cancel)
    assert outcome.state == "CANCELLED"
    assert not (tmp_path / "ran.txt").exists()


async def test_failing_output_callback_stops_the_agent(tmp_path: Path) -> None:
    async def explode(stream: str, line: str) -> None:
        raise RuntimeError("log sink down")

    with pytest.raises(RuntimeError, match="log sink down"):
        await run(CommandHarness("echo $$ > leader.pid; echo hi; sleep 30"), job(), tmp_path, rec=explode)  # type: ignore[arg-type]
    assert await wait_gone(int((tmp_path / "leader.pid").read_text()))


# -- command: streaming ----------------------------------------------------------------------------


async def test_output_is_streamed_while_the_agent_runs(tmp_path: Path) -> None:
    # The agent waits for a file that only the on_output callback creates: buffered output deadlocks.
    script = (
        "import os, time\n"
        "print('ready', flush=True)\n"
        "deadline = time.time() + 5\n"
        "while not os.path.exists('go') and time.time() < deadline: time.sleep(0.01)\n"
        "print('done' if os.path.exists('go') else 'gave up', flush=True)\n"
    )
    rec = Recorder(when="ready", then=lambda: (tmp_path / "go").touch())
    started = time.monotonic()
    outcome = await run(CommandHarness([PY, "-c", script]), job(), tmp_path, rec=rec)
    assert outcome.state == "SUCCEEDED"
    assert rec.of("stdout") == ["ready", "done"]
    assert time.monotonic() - started < 2


async def test_lines_keep_their_order_per_stream(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "for i in range(200):\n"
        "    print(f'out {i}', flush=True)\n"
        "    if i % 3 == 0: print(f'err {i}', file=sys.stderr, flush=True)\n"
        "sys.stdout.write('no newline at end')\n"
    )
    rec = Recorder()
    outcome = await run(CommandHarness([PY, "-c", script]), job(), tmp_path, rec=rec)
    assert outcome.state == "SUCCEEDED"
    assert rec.of("stdout") == [f"out {i}" for i in range(200)] + ["no newline at end"]
    assert rec.of("stderr") == [f"err {i}" for i in range(0, 200, 3)]


async def test_very_long_lines_are_split_not_lost(tmp_path: Path) -> None:
    rec = Recorder()
    script = "print('a' * 200000); print('short')"
    outcome = await run(CommandHarness([PY, "-c", script]), job(), tmp_path, rec=rec)
    assert outcome.state == "SUCCEEDED"
    out = rec.of("stdout")
    assert "".join(out[:-1]) == "a" * 200000
    assert out[-1] == "short"


# -- choosing a harness ----------------------------------------------------------------------------


def test_harness_for_uses_the_worker_default() -> None:
    assert isinstance(harness_for({}, "echo", None), EchoHarness)
    chosen = harness_for({}, "command", "claude -p --model {model}", timeout_seconds=9, grace_seconds=1)
    assert isinstance(chosen, CommandHarness)
    assert chosen.command == "claude -p --model {model}"
    assert chosen.timeout_seconds == 9 and chosen.grace_seconds == 1


def test_run_config_overrides_the_default() -> None:
    assert isinstance(harness_for({"harness": {"type": "echo"}}, "command", "agent"), EchoHarness)
    assert isinstance(harness_for({"harness": {"type": "command"}}, "echo", "agent"), CommandHarness)


def test_harness_for_refuses_unknown_or_unconfigured_harnesses() -> None:
    with pytest.raises(HarnessError, match="no command"):
        harness_for({"harness": {"type": "command"}}, "echo", None)
    with pytest.raises(HarnessError, match="unknown harness type 'docker'"):
        harness_for({"harness": {"type": "docker"}}, "echo", None)
    with pytest.raises(HarnessError):
        CommandHarness("")
