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
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from factoryctl.worker import HarnessError, HarnessUnavailable
from factoryctl.worker.job import Job, Outcome, redact
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.presets.harness import PRESET_GRACE_SECONDS, PresetHarness
from factoryctl.worker.presets.registry import PRESET_TYPES, AgentCli

# Re-exported (``X as X``): environment setup and the run loop share this plumbing.
from factoryctl.worker.processes import DEFAULT_GRACE_SECONDS as DEFAULT_GRACE_SECONDS
from factoryctl.worker.processes import STDERR_TAIL_CHARS as STDERR_TAIL_CHARS
from factoryctl.worker.processes import OutputCallback as OutputCallback
from factoryctl.worker.processes import OutputTail as OutputTail
from factoryctl.worker.processes import RedactingEmitter as RedactingEmitter
from factoryctl.worker.processes import pump_lines as pump_lines
from factoryctl.worker.processes import run_process, signal_name
from factoryctl.worker.processes import signal_process_group as signal_process_group
from factoryctl.worker.processes import terminate_process_group as terminate_process_group
from factoryctl.worker.processes import wait_for_exit as wait_for_exit
from factoryctl.worker.sandbox import Sandbox
from factoryctl.worker.workspace import PROMPT_FILE, RESULT_FILE, replace_file, run_environment, write_missing

EventCallback = Callable[[Sequence[AgentEvent]], Awaitable[None]]
"""``on_event(events)``: transcript events a preset harness read from its CLI (secrets masked)."""

HARNESS_TYPES = ("echo", "command", *PRESET_TYPES)
DEFAULT_TYPE = "oz"  # the definitions' and SDKs' default: this worker's own harness (--harness)

ECHO_FAIL_MARKER = "[echo:fail]"
_ECHO_SLEEP = re.compile(r"\[echo:sleep=(\d+(?:\.\d+)?)\]")
# The echo harness's work in its sandbox: the report (stdin) replaces RESULT.md by a rename, never
# through a link the run left at that name.
ECHO_TEMP = ".RESULT.md.echo-tmp"
ECHO_SCRIPT = f"cat > {ECHO_TEMP} && mv -fT {ECHO_TEMP} {RESULT_FILE}"
_PLACEHOLDER = re.compile(r"\{(model|workspace|run_id|prompt_file)\}")


class Harness(Protocol):
    async def run(
        self,
        job: Job,
        workspace: Path,
        *,
        cancel: asyncio.Event,
        on_output: OutputCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> Outcome: ...


class EchoHarness:
    """A harness that runs no agent: it reports what it was given.

    Writes ``RESULT.md`` (run ID, model, the prompt's first non-empty line, the workspace's
    top-level entries) and emits two ``stdout`` lines. Markers in the prompt:

    - ``[echo:sleep=N]`` waits N seconds first (fractions allowed); setting ``cancel`` meanwhile
      returns CANCELLED, and a job ``timeout_seconds`` below N returns FAILED ``timeout``;
    - ``[echo:fail]`` returns FAILED with error_code ``echo_fail``.

    With a ``sandbox`` its work happens inside one like every harness's (docs/workers.md, "Sandbox"): a
    shell there writes ``RESULT.md`` (the worker never writes into a workspace a run had its hands on)
    and does the waiting, so the limits' watchdog, cancel and ``is_sandbox_running`` see a real process.
    Without one the worker writes the file itself and waits in-process.
    """

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox
        self.rlimits: Sequence[tuple[int, int]] = ()  # set on its process (factoryctl.worker.watchdog)

    async def run(
        self,
        job: Job,
        workspace: Path,
        *,
        cancel: asyncio.Event,
        on_output: OutputCallback | None = None,
        on_event: EventCallback | None = None,  # no transcript: plain output lines only
    ) -> Outcome:
        if cancel.is_set():
            return Outcome.cancelled()
        emit = RedactingEmitter(on_output, job.secret_values())
        first_line = next((line.strip() for line in job.prompt.splitlines() if line.strip()), "")
        files = _echo_listing(workspace)
        report = _echo_report(job, first_line, files)
        if self.sandbox is None:
            replace_file(workspace / RESULT_FILE, report)
        await emit("stdout", f"echo: {first_line}")
        await emit("stdout", f"echo: {len(files)} workspace file(s): {', '.join(files)}")
        sleep = _ECHO_SLEEP.search(job.prompt)
        if self.sandbox is not None:
            failed = await self._in_sandbox(job, workspace, report, sleep[1] if sleep else None, cancel, emit)
            if failed is not None:
                return failed
        elif sleep:
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

    async def _in_sandbox(
        self,
        job: Job,
        workspace: Path,
        report: bytes,
        sleep: str | None,
        cancel: asyncio.Event,
        emit: RedactingEmitter,
    ) -> Outcome | None:
        """Write ``report`` as ``RESULT.md`` and wait ``sleep`` seconds inside the sandbox; the run's
        outcome when that did not simply succeed."""
        script = ECHO_SCRIPT + (f" && exec sleep {sleep}" if sleep else "")
        tail = OutputTail(STDERR_TAIL_CHARS, job.secret_values())
        try:
            end = await run_process(
                ["sh", "-c", script],
                cwd=workspace,
                env={"PATH": "/usr/bin:/bin", "FACTORY_RUN_ID": job.run_id},
                sandbox=self.sandbox,
                stdin=report,
                emit=emit,
                cancel=cancel,
                timeout_seconds=job.timeout_seconds,
                grace_seconds=DEFAULT_GRACE_SECONDS,
                tail=tail,
                rlimits=self.rlimits,
            )
        except OSError as exc:
            return Outcome.error(
                f"cannot start the echo harness in its sandbox: {exc}", "harness_start_failed"
            )
        if end.how == "cancelled":
            return Outcome.cancelled()
        if end.how == "timeout":
            return Outcome.failed(f"harness timed out after {job.timeout_seconds:g}s", "timeout")
        return exit_outcome(end.returncode or 0, tail)


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
        self.rlimits: Sequence[tuple[int, int]] = ()  # set on its process (factoryctl.worker.watchdog)

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
        return run_environment(os.environ if self.env is None else self.env, job, workspace, job.model_id)

    async def run(
        self,
        job: Job,
        workspace: Path,
        *,
        cancel: asyncio.Event,
        on_output: OutputCallback | None = None,
        on_event: EventCallback | None = None,  # no transcript: plain output lines only
    ) -> Outcome:
        if cancel.is_set():
            return Outcome.cancelled()
        # Setup ran before: never write through a symlink it left at this name (docs/workers.md, "Sandbox").
        write_missing(workspace / PROMPT_FILE, job.prompt.encode())
        secrets = job.secret_values()
        tail = OutputTail(STDERR_TAIL_CHARS, secrets)
        timeout = min((t for t in (self.timeout_seconds, job.timeout_seconds) if t is not None), default=None)
        try:
            end = await run_process(
                self.argv(job, workspace),
                cwd=workspace,
                env=self.environment(job, workspace),
                sandbox=self.sandbox,
                stdin=job.prompt.encode(),
                emit=RedactingEmitter(on_output, secrets),
                cancel=cancel,
                timeout_seconds=timeout,
                grace_seconds=self.grace_seconds,
                tail=tail,
                rlimits=self.rlimits,
            )
        except OSError as exc:
            return Outcome.error(
                redact(f"cannot start the harness command: {exc}", secrets), "harness_start_failed"
            )
        if end.how == "cancelled":
            return Outcome.cancelled()
        if end.how == "timeout":
            return Outcome.failed(f"harness timed out after {timeout:g}s", "timeout")
        return exit_outcome(end.returncode or 0, tail) or Outcome.succeeded()


def exit_outcome(code: int, tail: OutputTail) -> Outcome | None:
    """FAILED ``harness_exit_N`` / ``harness_signal_S`` (message: the stderr tail) for a process that
    failed, None for exit status 0."""
    if code == 0:
        return None
    if code < 0:
        name = signal_name(-code)
        return Outcome.failed(tail.text() or f"command killed by {name}", f"harness_signal_{-code}")
    return Outcome.failed(tail.text() or f"command exited with status {code}", f"harness_exit_{code}")


def offered_harnesses(default: str, command: str | Sequence[str] | None) -> tuple[str, ...]:
    """The harness types a worker runs (docs/workers.md, "Harnesses"): ``echo``, its default
    (``--harness``) and ``command`` when it has a command."""
    offered = ["echo"]
    for name in (default, "command" if command else None):
        if name and name not in offered:
            offered.append(name)
    return tuple(offered)


def harness_for(
    config: Mapping[str, Any],
    default: str,
    command: str | Sequence[str] | None,
    *,
    env: Mapping[str, str] | None = None,
    timeout_seconds: float | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    sandbox: Sandbox | None = None,
    agents: Mapping[str, AgentCli] | None = None,
) -> Harness:
    """The harness for a run: ``config["harness"]["type"]`` (``oz`` or none: ``default``, the worker's).

    A run may choose the type, never the command or the CLI: the command is the worker's own
    (``--command``), an agent preset runs the CLI the worker found at start (``agents``: preset name to
    :class:`~factoryctl.worker.presets.registry.AgentCli`), each inside ``sandbox`` when given.
    Raises :class:`HarnessUnavailable` for a preset this worker does not offer, :class:`HarnessError` for
    an unknown type or ``command`` chosen with no command configured.
    """
    chosen = default
    wanted = config.get("harness")
    if isinstance(wanted, Mapping) and wanted.get("type") and wanted["type"] != DEFAULT_TYPE:
        chosen = str(wanted["type"])
    agents = agents or {}
    if chosen in PRESET_TYPES:
        cli = agents.get(chosen)
        if cli is None:
            offered = [name for name in offered_harnesses(default, command) if name not in PRESET_TYPES]
            offered += [name for name in agents if name not in offered]
            raise HarnessUnavailable(
                f"the run asks for the {chosen!r} harness, which this worker does not offer: it offers "
                f"{', '.join(offered)} (harness type 'oz' is its default, {default!r})"
            )
        return PresetHarness(
            cli.preset,
            cli.executable,
            sandbox=sandbox,
            env=env,
            timeout_seconds=timeout_seconds,
            grace_seconds=min(grace_seconds, PRESET_GRACE_SECONDS),
            read_only=cli.install_dirs,
        )
    if chosen == "echo":
        return EchoHarness()
    if chosen == "command":
        if not command:
            raise HarnessError("the command harness was chosen but this worker has no command configured")
        return CommandHarness(command, timeout_seconds, env, grace_seconds=grace_seconds, sandbox=sandbox)
    raise HarnessError(f"unknown harness type {chosen!r}; expected one of {', '.join(HARNESS_TYPES)}")


def _echo_listing(workspace: Path) -> list[str]:
    with os.scandir(workspace) as entries:  # never follows a symlink: it may point anywhere on the host
        return sorted(
            f"{e.name}/" if e.is_dir(follow_symlinks=False) else e.name
            for e in entries
            if e.name != RESULT_FILE
        )


def _echo_report(job: Job, first_line: str, files: Sequence[str]) -> bytes:
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
    return redact("\n".join(report) + "\n", job.secret_values()).encode()
