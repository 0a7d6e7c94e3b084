"""Harnesses: how a worker executes one run in its workspace.

- :class:`EchoHarness` is deterministic, for demos and tests (markers in the prompt steer it).
- :class:`CommandHarness` runs a CLI agent (``claude -p``, ``codex exec`` ...) as a subprocess in
  its own process group, prompt on stdin, output streamed line by line; on cancel or timeout the
  whole group is stopped (SIGTERM, then SIGKILL after a grace period), so no tool the agent
  started outlives the run. Given a :class:`~factoryctl.worker.sandbox.Sandbox`, the agent and
  everything it starts (MCP servers, tools) run inside it, confined to the workspace; stopping the
  group then kills the whole sandbox at once, and a command killed by signal S inside it ends with
  bwrap's status 128+S (``harness_exit_<128+S>``).

Outcomes of the command harness (``status_message.error_code``):

============================  =========  ==================================================
situation                     state      error_code / message
============================  =========  ==================================================
exit status 0                 SUCCEEDED  (no status message)
exit status N > 0             FAILED     ``harness_exit_N``; message = last ~1 KB of stderr
killed by signal S (not us)   FAILED     ``harness_signal_S``
timeout                       FAILED     ``timeout``
cancel event set              CANCELLED  message ``run cancelled``
command cannot be started     ERROR      ``harness_start_failed``
============================  =========  ==================================================

Secret values of the job's environment are replaced by ``***`` in streamed output and messages.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import shlex
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from factoryctl.worker import HarnessError, HarnessUnavailable
from factoryctl.worker.job import Job, Outcome, redact
from factoryctl.worker.sandbox import Sandbox, start_process
from factoryctl.worker.workspace import PROMPT_FILE, RESULT_FILE, SKILLS_DIR, replace_file, write_missing

OutputCallback = Callable[[str, str], Awaitable[None]]
"""``on_output(stream, line)``: stream is ``stdout``, ``stderr`` or ``system``; line has no newline."""

DEFAULT_GRACE_SECONDS = 5.0
STDERR_TAIL_CHARS = 1024
HARNESS_TYPES = ("echo", "command")
DEFAULT_TYPE = "oz"  # the definitions' and SDKs' default: this worker's own harness (--harness)
NOT_OFFERED = ("claude", "codex", "gemini")  # valid harness types this worker does not run (yet)

ECHO_FAIL_MARKER = "[echo:fail]"
_ECHO_SLEEP = re.compile(r"\[echo:sleep=(\d+(?:\.\d+)?)\]")
_PLACEHOLDER = re.compile(r"\{(model|workspace|run_id|prompt_file)\}")


class Harness(Protocol):
    async def run(
        self, job: Job, workspace: Path, *, cancel: asyncio.Event, on_output: OutputCallback | None = None
    ) -> Outcome: ...


class EchoHarness:
    """A harness that runs no agent: it reports what it was given.

    Writes ``RESULT.md`` (run ID, model, the prompt's first non-empty line, the workspace's
    top-level entries) and emits two ``stdout`` lines. Markers in the prompt:

    - ``[echo:sleep=N]`` waits N seconds first (fractions allowed); setting ``cancel`` meanwhile
      returns CANCELLED, and a job ``timeout_seconds`` below N returns FAILED ``timeout``;
    - ``[echo:fail]`` returns FAILED with error_code ``echo_fail``.
    """

    async def run(
        self, job: Job, workspace: Path, *, cancel: asyncio.Event, on_output: OutputCallback | None = None
    ) -> Outcome:
        if cancel.is_set():
            return Outcome.cancelled()
        emit = RedactingEmitter(on_output, job.secret_values())
        first_line = next((line.strip() for line in job.prompt.splitlines() if line.strip()), "")
        files = _write_echo_result(job, workspace, first_line)
        await emit("stdout", f"echo: {first_line}")
        await emit("stdout", f"echo: {len(files)} workspace file(s): {', '.join(files)}")
        sleep = _ECHO_SLEEP.search(job.prompt)
        if sleep:
            seconds, limit = float(sleep[1]), job.timeout_seconds
            try:
                await asyncio.wait_for(cancel.wait(), seconds if limit is None else min(seconds, limit))
                return Outcome.cancelled()
            except TimeoutError:
                if limit is not None and limit < seconds:
                    return Outcome.failed(f"harness timed out after {limit:g}s", "timeout")
        if ECHO_FAIL_MARKER in job.prompt:
            return Outcome.failed(f"echo harness failed as asked by {ECHO_FAIL_MARKER}", "echo_fail")
        return Outcome.succeeded()


class CommandHarness:
    """Run a CLI agent in the workspace.

    ``command`` as a string runs through ``bash -c`` after substituting ``{model}``,
    ``{workspace}``, ``{run_id}`` and ``{prompt_file}`` shell-quoted (``{model}`` is ``''`` when the
    run has none); as a list it is executed directly, placeholders substituted per argument
    without quoting. The process gets ``env`` (None inherits this process's environment), then the
    job environment's env and secrets, then ``FACTORY_RUN_ID``, ``FACTORY_MODEL_ID`` (when a model is
    set), ``FACTORY_WORKSPACE`` and ``FACTORY_PROMPT_FILE``. The effective timeout is the smaller
    of ``timeout_seconds`` and the job's. ``sandbox`` confines the process (None: the worker's host).
    """

    def __init__(
        self,
        command: str | Sequence[str],
        timeout_seconds: float | None = None,
        env: Mapping[str, str] | None = None,
        *,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        sandbox: Sandbox | None = None,
    ) -> None:
        if not command or (not isinstance(command, str) and not all(command)):
            raise HarnessError("the command harness needs a non-empty command")
        self.command: str | tuple[str, ...] = command if isinstance(command, str) else tuple(command)
        self.timeout_seconds = timeout_seconds
        self.env = dict(env) if env is not None else None
        self.grace_seconds = grace_seconds
        self.sandbox = sandbox

    def argv(self, job: Job, workspace: Path) -> list[str]:
        """The argument vector for ``job`` (placeholders substituted)."""
        values = {
            "model": job.model_id or "",
            "workspace": str(workspace),
            "run_id": job.run_id,
            "prompt_file": str(workspace / PROMPT_FILE),
        }
        if isinstance(self.command, str):
            return ["bash", "-c", _PLACEHOLDER.sub(lambda m: shlex.quote(values[m[1]]), self.command)]
        return [_PLACEHOLDER.sub(lambda m: values[m[1]], arg) for arg in self.command]

    def environment(self, job: Job, workspace: Path) -> dict[str, str]:
        """The process environment for ``job``."""
        env = dict(os.environ if self.env is None else self.env)
        env.update(job.environment_variables())
        env.pop("FACTORY_MODEL_ID", None)
        env["FACTORY_RUN_ID"] = job.run_id
        if job.model_id:
            env["FACTORY_MODEL_ID"] = job.model_id
        env["FACTORY_WORKSPACE"] = str(workspace)
        env["FACTORY_PROMPT_FILE"] = str(workspace / PROMPT_FILE)
        env.pop("FACTORY_SKILLS_DIR", None)
        if job.skills:
            env["FACTORY_SKILLS_DIR"] = str(workspace.joinpath(*SKILLS_DIR.split("/")))
        return env

    async def run(
        self, job: Job, workspace: Path, *, cancel: asyncio.Event, on_output: OutputCallback | None = None
    ) -> Outcome:
        if cancel.is_set():
            return Outcome.cancelled()
        # Setup ran before: never write through a symlink it left at this name (docs/workers.md, "Sandbox").
        write_missing(workspace / PROMPT_FILE, job.prompt.encode())
        secrets = job.secret_values()
        emit = RedactingEmitter(on_output, secrets)
        timeout = min((t for t in (self.timeout_seconds, job.timeout_seconds) if t is not None), default=None)
        try:
            proc = await start_process(
                self.argv(job, workspace),
                cwd=workspace,
                env=self.environment(job, workspace),
                sandbox=self.sandbox,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return Outcome.error(
                redact(f"cannot start the harness command: {exc}", secrets), "harness_start_failed"
            )
        assert proc.stdin and proc.stdout and proc.stderr
        tail = OutputTail(STDERR_TAIL_CHARS, secrets)
        pumps = [
            asyncio.create_task(pump_lines(proc.stdout, "stdout", emit)),
            asyncio.create_task(pump_lines(proc.stderr, "stderr", emit, tail)),
        ]
        feeder = asyncio.create_task(_feed(proc.stdin, job.prompt.encode()))
        stopped = False
        try:
            ended = await _first_event(proc, cancel, timeout, pumps)
            await terminate_process_group(proc.pid, grace_seconds=self.grace_seconds)
            stopped = True
            done, _ = await asyncio.wait(pumps, timeout=self.grace_seconds)
            for task in done:
                task.result()
        finally:
            if not stopped:
                signal_process_group(proc.pid, signal.SIGKILL)
            for task in (*pumps, feeder):
                task.cancel()
            await asyncio.gather(*pumps, feeder, return_exceptions=True)
        if ended == "cancelled":
            return Outcome.cancelled()
        if ended == "timeout":
            return Outcome.failed(f"harness timed out after {timeout:g}s", "timeout")
        code = proc.returncode or 0
        if code == 0:
            return Outcome.succeeded()
        if code < 0:
            name = _signal_name(-code)
            return Outcome.failed(tail.text() or f"command killed by {name}", f"harness_signal_{-code}")
        return Outcome.failed(tail.text() or f"command exited with status {code}", f"harness_exit_{code}")


def harness_for(
    config: Mapping[str, Any],
    default: str,
    command: str | Sequence[str] | None,
    *,
    env: Mapping[str, str] | None = None,
    timeout_seconds: float | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    sandbox: Sandbox | None = None,
) -> Harness:
    """The harness for a run: ``config["harness"]["type"]`` (echo|command; ``oz`` is ``default``) over
    the worker's default.

    A run may choose the type, never the command: the command is the worker's own (``--command``),
    run inside ``sandbox`` when given.
    Raises :class:`HarnessUnavailable` for ``claude``, ``codex`` or ``gemini``, :class:`HarnessError` for
    an unknown type or ``command`` chosen with no command configured.
    """
    chosen = default
    wanted = config.get("harness")
    if isinstance(wanted, Mapping) and wanted.get("type") and wanted["type"] != DEFAULT_TYPE:
        chosen = str(wanted["type"])
    if chosen in NOT_OFFERED:
        raise HarnessUnavailable(
            f"the run asks for the {chosen!r} harness, which this worker does not offer: it offers "
            f"{' and '.join(HARNESS_TYPES)} (harness type 'oz' is its default, {default!r})"
        )
    if chosen == "echo":
        return EchoHarness()
    if chosen == "command":
        if not command:
            raise HarnessError("the command harness was chosen but this worker has no command configured")
        return CommandHarness(command, timeout_seconds, env, grace_seconds=grace_seconds, sandbox=sandbox)
    raise HarnessError(f"unknown harness type {chosen!r}; expected one of {', '.join(HARNESS_TYPES)}")


# -- process groups and output streaming (shared with factoryctl.worker.environment) ----------------------


def signal_process_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of the group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting a reaper do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


async def wait_for_exit(proc: asyncio.subprocess.Process, *, poll_seconds: float = 0.02) -> int:
    """The exit status of ``proc`` as soon as it exits.

    ``Process.wait()`` also waits until every process holding its stdout/stderr has closed them,
    so a background child left by the agent would block it forever; the return code is set as soon
    as the process itself is reaped.
    """
    while proc.returncode is None:  # noqa: ASYNC110 - asyncio offers no exit event but wait() itself
        await asyncio.sleep(poll_seconds)
    return proc.returncode


async def terminate_process_group(pgid: int, *, grace_seconds: float, poll_seconds: float = 0.02) -> None:
    """SIGTERM the group, wait up to ``grace_seconds`` for it to go, then SIGKILL what remains."""
    loop = asyncio.get_running_loop()
    if not process_group_alive(pgid):
        return
    signal_process_group(pgid, signal.SIGTERM)
    deadline = loop.time() + grace_seconds
    while loop.time() < deadline:
        if not process_group_alive(pgid):
            return
        await asyncio.sleep(poll_seconds)
    signal_process_group(pgid, signal.SIGKILL)
    for _ in range(100):
        if not process_group_alive(pgid):
            return
        await asyncio.sleep(poll_seconds)


async def pump_lines(
    reader: asyncio.StreamReader,
    stream: str,
    emit: Callable[[str, str], Awaitable[None]],
    tail: OutputTail | None = None,
) -> None:
    """Emit each line read from ``reader`` (UTF-8, invalid bytes replaced) until end of file.

    A line longer than the reader's buffer limit is emitted in pieces rather than failing.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        try:
            chunk = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            chunk = exc.partial
            if not chunk:
                return
        except asyncio.LimitOverrunError as exc:
            chunk = await reader.readexactly(exc.consumed)
        text = decoder.decode(chunk, final=reader.at_eof())
        line = text[:-1] if text.endswith("\n") else text
        line = line[:-1] if line.endswith("\r") else line
        if tail is not None:
            tail.add(line)
        await emit(stream, line)


class RedactingEmitter:
    """Redacts secrets and serialises calls to ``on_output`` across streams."""

    def __init__(self, on_output: OutputCallback | None, secrets: Iterable[str]) -> None:
        self.on_output = on_output
        self.secrets = frozenset(secrets)  # mask()'s cache key, hashed once
        self.lock = asyncio.Lock()

    async def __call__(self, stream: str, line: str) -> None:
        if self.on_output is None:
            return
        async with self.lock:
            await self.on_output(stream, redact(line, self.secrets))


class OutputTail:
    """The last ``limit`` characters of the lines added, secrets redacted."""

    def __init__(self, limit: int, secrets: Iterable[str] = ()) -> None:
        self.limit = limit
        self.secrets = list(secrets)
        self.buffer = ""

    def add(self, line: str) -> None:
        self.buffer = (self.buffer + line + "\n")[-4 * self.limit :]

    def text(self) -> str:
        return redact(self.buffer, self.secrets).strip()[-self.limit :]


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    # The agent may exit (or close stdin) without reading everything: that is not an error here.
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
        await stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass


async def _first_event(
    proc: asyncio.subprocess.Process,
    cancel: asyncio.Event,
    limit_seconds: float | None,
    pumps: list[asyncio.Task[None]],
) -> str:
    """Wait for the process to exit (``exited``), ``cancelled`` or ``timeout``; re-raise pump errors."""
    loop = asyncio.get_running_loop()
    deadline = None if limit_seconds is None else loop.time() + limit_seconds
    exited = asyncio.create_task(wait_for_exit(proc))
    cancelled = asyncio.create_task(cancel.wait())
    watched: set[asyncio.Future[Any]] = {exited, cancelled, *pumps}
    try:
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(watched, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                return "exited"
            if cancelled.done():
                return "cancelled"
            if not done:
                return "timeout"
            for task in done:  # a pump finished: end of file, or on_output raised
                watched.discard(task)
                task.result()
    finally:
        exited.cancel()
        cancelled.cancel()


def _write_echo_result(job: Job, workspace: Path, first_line: str) -> list[str]:
    with os.scandir(workspace) as entries:  # never follows a symlink: it may point anywhere on the host
        files = sorted(
            f"{e.name}/" if e.is_dir(follow_symlinks=False) else e.name
            for e in entries
            if e.name != RESULT_FILE
        )
    report = [
        "# Echo harness result",
        "",
        f"- run: {job.run_id}",
        f"- model: {job.model_id or '(default)'}",
        f"- first line: {first_line}",
        "",
        "## Workspace files",
        "",
        *(f"- {name}" for name in files),
    ]
    replace_file(workspace / RESULT_FILE, redact("\n".join(report) + "\n", job.secret_values()).encode())
    return files


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
