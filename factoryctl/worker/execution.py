"""Executing one claimed run, identically for service-hosted and self-hosted workers.

The protocol (direct store calls in ``serve``, HTTP in ``factoryctl worker``) hides behind
:class:`RunChannel`; this module owns the sequence every worker follows: mark the run INPROGRESS,
build its workspace and environment, run the harness while heartbeating and streaming output in
batches, turn ``cancel_requested`` into the harness's cancel event, and report the outcome. A run
whose lease was lost (reaped, or taken over) is abandoned silently: the server already decided
its fate, so reporting would only be refused.

Follow-ups that arrive while a harness runs are written to the run log: a CLI agent reading its
prompt from stdin cannot take input mid-run. (Follow-ups sent before the claim, or to a finished
run, reach the agent in its prompt; see :mod:`api.claims.payload`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from factoryctl.worker.artifacts import Collected, Declared, FileArtifact, collect
from factoryctl.worker.egress_run import run_network
from factoryctl.worker.environment import (
    DEFAULT_SETUP_TIMEOUT_SECONDS,
    prepare_environment,
    run_runner_setup,
    setup_failure_outcome,
)
from factoryctl.worker.errors import (
    EnvironmentSetupFailed,
    HarnessUnavailable,
    InvalidClaim,
    RunnerUnavailable,
    SandboxUnavailable,
    WorkerError,
)
from factoryctl.worker.errors import LeaseLost as LeaseLost  # re-exported: channels raise it from here
from factoryctl.worker.harness import (
    CommandHarness,
    EchoHarness,
    Harness,
    OutputCallback,
    RedactingEmitter,
    harness_for,
    offered_harnesses,
)
from factoryctl.worker.isolation import sandbox_report, unsandboxed_line
from factoryctl.worker.job import Job, Outcome, redact, redact_data
from factoryctl.worker.limits import Limits
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.presets.harness import PresetHarness
from factoryctl.worker.presets.registry import PRESET_TYPES, AgentCli
from factoryctl.worker.resolve import SecretSource, resolve_claim
from factoryctl.worker.runner import check_runner, runner_notes
from factoryctl.worker.sandbox import Sandbox, sandbox_for
from factoryctl.worker.watchdog import RunGuard, rlimits
from factoryctl.worker.workspace import create_workspace, remove_workspace

log = logging.getLogger("factoryctl.worker")

LogLine = tuple[str, str]
"""``(stream, text)``: stream is ``stdout``, ``stderr`` or ``system``."""

MAX_LINE_CHARS = 16_384
MAX_BUFFERED_LINES = 20_000
MAX_BUFFERED_EVENTS = 5_000  # transcript events waiting to be sent (the server takes 500 per call)
EVENT_BATCH = 500
SHUTDOWN_MESSAGE = "the worker shut down before the run finished"
# The terminal run states of the wire protocol (docs/api.md, "States").
FINISHED_STATES = frozenset({"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"})
# Environment variables a worker must never hand to an agent: they are the worker's own credentials.
PRIVATE_VARIABLES = ("FACTORY_API_KEY", "FACTORY_SECRET_KEY", "FACTORY_DATABASE_URL")


@dataclass(frozen=True)
class HeartbeatReply:
    cancel_requested: bool
    followups: list[dict[str, Any]] = field(default_factory=list)
    state: str | None = None  # the run's state after the heartbeat, when the server said

    @property
    def finished(self) -> bool:
        """The run ended on the server (e.g. cancelled before it started): nothing may run."""
        return self.state in FINISHED_STATES


class RunChannel(Protocol):
    """How a worker talks to the control plane about one claimed run."""

    async def heartbeat(self, *, start: bool, sandbox: Mapping[str, str] | None = None) -> HeartbeatReply:
        """Extend the lease (``start``: also mark the run INPROGRESS, ``sandbox``: where it runs,
        :func:`factoryctl.worker.isolation.sandbox_report`); raises :class:`LeaseLost`."""

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        """Append output lines to the run's log; raises :class:`LeaseLost`."""

    async def send_events(self, events: Sequence[AgentEvent]) -> None:
        """Append transcript events (an agent preset's, at most :data:`EVENT_BATCH`) to the run's event
        stream; raises :class:`LeaseLost`."""

    async def report(self, outcome: Outcome) -> None:
        """Report the final state; raises :class:`LeaseLost` when the server refuses it."""

    async def save_session_state(self, archive: bytes) -> None:
        """Keep an agent preset's session files (a ``tar.gz``) for a follow-up; raises :class:`LeaseLost`."""

    async def load_session_state(self) -> bytes | None:
        """The session files an earlier attempt saved (None: none); raises :class:`LeaseLost`."""

    async def send_artifacts(self, artifacts: Collected) -> None:
        """Upload the run's artifacts (:mod:`factoryctl.worker.artifacts`) before its report; raises
        :class:`LeaseLost`."""


@dataclass(frozen=True)
class ExecutionSettings:
    harness: str = "echo"
    command: str | None = None
    workspace_root: Path = Path("workspaces")
    heartbeat_seconds: float = 2.0
    log_flush_seconds: float = 0.5
    harness_env: Mapping[str, str] | None = None  # None: inherit this process's environment
    keep_workspace: bool = False
    # Where run-controlled processes start (docs/workers.md, "Sandbox"); required: refuse a run that
    # needs one when it does not work (service-hosted workers), else fall back to the host.
    sandbox: Sandbox | None = None
    sandbox_required: bool = False
    guarded: tuple[Path, ...] = ()  # no environment repository is cloned from inside these
    # The agent presets' CLIs found at start (docs/workers.md, "Harnesses"): preset name -> its CLI.
    agents: Mapping[str, AgentCli] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)  # per run (docs/workers.md, "Limits")

    @property
    def offered(self) -> tuple[str, ...]:
        """The harness types this worker runs (sent with its claims): ``echo``, its default harness and
        ``command`` when it has a command; a preset only when its CLI was found."""
        return tuple(
            name
            for name in offered_harnesses(self.harness, self.command)
            if name not in PRESET_TYPES or name in self.agents
        )


class MaskingChannel:
    """``channel`` with every line and outcome message masked (:mod:`factoryctl.worker.masking`): the
    one gate between a run's output and the server, whichever harness or step produced it."""

    def __init__(self, channel: RunChannel, secrets: Sequence[str]) -> None:
        self.channel, self.secrets = channel, frozenset(secrets)  # mask()'s cache key, hashed once

    async def heartbeat(self, *, start: bool, sandbox: Mapping[str, str] | None = None) -> HeartbeatReply:
        return await self.channel.heartbeat(start=start, sandbox=sandbox)

    async def send_logs(self, lines: Sequence[LogLine]) -> None:
        await self.channel.send_logs([(stream, redact(text, self.secrets)) for stream, text in lines])

    async def send_events(self, events: Sequence[AgentEvent]) -> None:
        await self.channel.send_events(
            [AgentEvent(e.kind, redact_data(dict(e.data), self.secrets)) for e in events]
        )

    async def report(self, outcome: Outcome) -> None:
        await self.channel.report(_redacted(outcome, self.secrets))

    async def save_session_state(self, archive: bytes) -> None:
        await self.channel.save_session_state(archive)

    async def load_session_state(self) -> bytes | None:
        return await self.channel.load_session_state()

    async def send_artifacts(self, artifacts: Collected) -> None:
        """Declared links masked like lines; a file's bytes masked when they are UTF-8 text (a binary
        file cannot hold a secret's text as such)."""
        await self.channel.send_artifacts(
            Collected(
                files=[_masked_file(f, self.secrets) for f in artifacts.files],
                declared=[
                    Declared({k: redact(v, self.secrets) for k, v in d.fields.items()})
                    for d in artifacts.declared
                ],
                notes=list(artifacts.notes),
            )
        )


def _masked_file(item: FileArtifact, secrets: Iterable[str]) -> FileArtifact:
    try:
        text = item.data.decode("utf-8")
    except UnicodeDecodeError:
        return item
    masked = redact(text, secrets)
    return item if masked == text else FileArtifact(item.filepath, item.mime_type, masked.encode("utf-8"))


def scrubbed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the worker's own credentials, for the agent processes it starts."""
    return {k: v for k, v in env.items() if k not in PRIVATE_VARIABLES}


class LogBuffer:
    """Output and transcript events waiting to be sent; bounded so a stalled server cannot exhaust
    memory. Dropped events are counted like dropped lines (one ``system`` line says how many)."""

    def __init__(self) -> None:
        self.lines: list[LogLine] = []
        self.events: list[AgentEvent] = []
        self.dropped = 0
        self.dropped_events = 0

    async def add_events(self, events: Sequence[AgentEvent]) -> None:
        room = max(0, MAX_BUFFERED_EVENTS - len(self.events))
        self.events.extend(events[:room])
        self.dropped_events += len(events) - min(room, len(events))

    def take_events(self) -> list[AgentEvent]:
        events, self.events = self.events, []
        return events

    def put_back_events(self, events: list[AgentEvent]) -> None:
        self.events = (events + self.events)[:MAX_BUFFERED_EVENTS]

    async def add(self, stream: str, text: str) -> None:
        if len(self.lines) >= MAX_BUFFERED_LINES:
            self.dropped += 1
            return
        self.lines.append((stream, text[:MAX_LINE_CHARS]))

    def take(self) -> list[LogLine]:
        lines, self.lines = self.lines, []
        if self.dropped:
            lines.append(
                ("system", f"{self.dropped} output line(s) dropped: the log could not be sent in time")
            )
            self.dropped = 0
        if self.dropped_events:
            lines.append(
                (
                    "system",
                    f"{self.dropped_events} transcript event(s) dropped: they could not be sent in time",
                )
            )
            self.dropped_events = 0
        return lines

    def put_back(self, lines: list[LogLine]) -> None:
        self.lines = (lines + self.lines)[-MAX_BUFFERED_LINES:]


async def job_for_claim(run: Mapping[str, Any], secrets: SecretSource, channel: RunChannel) -> Job | None:
    """The job of a claimed run, its secret references resolved inside the worker; or None after
    reporting why it cannot run (environment setup failed, or a claim the worker cannot read)."""
    try:
        return Job.from_claim(await resolve_claim(run, secrets))
    except EnvironmentSetupFailed as exc:
        await channel.report(setup_failure_outcome(exc))
    except InvalidClaim as exc:
        await channel.report(Outcome.error(f"invalid claim: {exc}", "internal_error"))
    return None


async def execute(
    job: Job, channel: RunChannel, settings: ExecutionSettings, *, stop: asyncio.Event | None = None
) -> Outcome | None:
    """Run ``job`` to its end and report it; returns the outcome, or None when the lease was lost.

    ``stop`` (worker shutdown) cancels the harness; the run then ends ERROR ``resource_unavailable``
    (retryable) rather than CANCELLED, since no user asked for it.
    """
    channel = MaskingChannel(channel, job.secret_values())  # docs/workers.md, "Secret masking"
    refused: Outcome | None = None
    sandbox: Sandbox | None = None
    limits = settings.limits.for_runner(job.runner)
    try:
        check_runner(job)
        harness = harness_for(
            job.agent_config,
            settings.harness,
            settings.command,
            env=settings.harness_env,
            timeout_seconds=limits.seconds,
            agents=settings.agents,
        )
        # Every harness runs a process, so every run gets the sandbox (docs/workers.md, "Sandbox").
        sandbox = await sandbox_for(
            job, harness=True, sandbox=settings.sandbox, required=settings.sandbox_required
        )
        if isinstance(harness, CommandHarness | PresetHarness | EchoHarness):
            harness.sandbox = sandbox  # decided once the harness type is known
        if isinstance(harness, CommandHarness | EchoHarness | PresetHarness):
            harness.rlimits = await asyncio.to_thread(rlimits, limits, os.geteuid())
    except (SandboxUnavailable, RunnerUnavailable, HarnessUnavailable) as exc:
        refused = Outcome.failed(str(exc), exc.error_code)
    except WorkerError as exc:
        refused = Outcome.error(str(exc), "harness_unavailable")
    try:
        where = sandbox_report(job, sandbox) if refused is None else None  # a refused run ran nowhere
        reply = await channel.heartbeat(start=True, sandbox=where)
    except LeaseLost:
        log.warning("run %s: lease lost before start", job.run_id)
        return None
    if reply.finished:
        log.info("run %s: %s before it started", job.run_id, reply.state)
        return None
    buffer = LogBuffer()
    if refused is not None:
        return await _finish(job, channel, buffer, refused)
    if sandbox is None:
        await buffer.add("system", unsandboxed_line(settings.sandbox))
    cancel = asyncio.Event()
    cancel_asked = reply.cancel_requested  # by a user, as opposed to our own shutdown
    if cancel_asked:
        cancel.set()
    guard = RunGuard(job.run_id, limits, sandboxed=sandbox is not None)
    found = Collected()  # filled from the workspace once the harness ended (docs/workers.md, "Artifacts")
    work = asyncio.create_task(
        _run_in_workspace(job, harness, settings, cancel, buffer, sandbox, found, guard, sessions=channel)
    )
    loop = asyncio.get_running_loop()
    next_heartbeat = loop.time() + settings.heartbeat_seconds
    shutdown = False
    try:
        while not work.done():
            waiters: set[asyncio.Future[Any]] = {work}
            stop_wait = asyncio.ensure_future(stop.wait()) if stop is not None and not shutdown else None
            if stop_wait is not None:
                waiters.add(stop_wait)
            await asyncio.wait(
                waiters, timeout=settings.log_flush_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            if stop_wait is not None:
                stop_wait.cancel()
            if stop is not None and stop.is_set() and not shutdown:
                shutdown = True
                cancel.set()
            await _flush(channel, buffer)
            if loop.time() >= next_heartbeat and not work.done():
                next_heartbeat = loop.time() + settings.heartbeat_seconds
                reply = await _heartbeat(channel, job.run_id)
                if reply.cancel_requested:
                    cancel_asked = True
                    cancel.set()
                for item in reply.followups:
                    await buffer.add("system", f"follow-up received while running: {item.get('message')}")
    except LeaseLost:
        log.warning("run %s: lease lost; abandoning the execution", job.run_id)
        cancel.set()
        with contextlib.suppress(Exception):
            await work
        return None
    finally:
        if not work.done():  # our own task is being cancelled: stop the harness too
            cancel.set()
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
    try:
        outcome = work.result()
    except Exception as exc:
        log.exception("run %s: the harness raised", job.run_id)
        outcome = Outcome.error(
            f"the worker failed while executing the run: {type(exc).__name__}", "internal_error"
        )
    outcome = guard.outcome(outcome)  # a run over a limit was stopped by its watchdog: FAILED
    if shutdown and outcome.state == "CANCELLED" and not cancel_asked:
        outcome = Outcome.error(SHUTDOWN_MESSAGE, "resource_unavailable", retryable=True)
    return await _finish(job, channel, buffer, outcome, found)


async def _finish(
    job: Job, channel: RunChannel, buffer: LogBuffer, outcome: Outcome, artifacts: Collected | None = None
) -> Outcome | None:
    try:
        if artifacts is not None:
            for note in artifacts.notes:
                await buffer.add("system", note)
            if artifacts:
                await _send_artifacts(channel, buffer, artifacts)
        await _flush(channel, buffer)
        await channel.report(outcome)
    except LeaseLost:
        log.warning("run %s: the server refused the final report (%s)", job.run_id, outcome.state)
        return None
    return outcome


async def _flush(channel: RunChannel, buffer: LogBuffer) -> None:
    # Events first: a log line saying events were dropped then follows the events that were sent.
    events = buffer.take_events()
    for start in range(0, len(events), EVENT_BATCH):
        batch = events[start : start + EVENT_BATCH]
        try:
            await channel.send_events(batch)
        except LeaseLost:
            raise
        except Exception as exc:  # the server is unreachable; keep the events for the next flush
            log.warning("cannot send run events (%s); will retry", exc)
            buffer.put_back_events(events[start:])
            break
    lines = buffer.take()
    if not lines:
        return
    try:
        await channel.send_logs(lines)
    except LeaseLost:
        raise
    except Exception as exc:  # the server is unreachable; keep the lines for the next flush
        log.warning("cannot send run output (%s); will retry", exc)
        buffer.put_back(lines)


async def _send_artifacts(channel: RunChannel, buffer: LogBuffer, artifacts: Collected) -> None:
    try:
        await channel.send_artifacts(artifacts)
    except LeaseLost:
        raise
    except Exception as exc:  # the run's outcome still counts: report it without its artifacts
        log.warning("cannot upload the run's artifacts (%s)", exc)
        await buffer.add("system", f"artifacts: the upload failed ({type(exc).__name__}: {exc})")


async def _heartbeat(channel: RunChannel, run_id: str) -> HeartbeatReply:
    try:
        return await channel.heartbeat(start=False)
    except LeaseLost:
        raise
    except Exception as exc:  # transient; the lease covers a few missed beats
        log.warning("run %s: heartbeat failed (%s); will retry", run_id, exc)
        return HeartbeatReply(cancel_requested=False)


async def _run_in_workspace(
    job: Job,
    harness: Harness,
    settings: ExecutionSettings,
    cancel: asyncio.Event,
    buffer: LogBuffer,
    sandbox: Sandbox | None,
    found: Collected,
    guard: RunGuard,
    *,
    sessions: RunChannel | None = None,
) -> Outcome:
    """The run inside its sandbox's network (docs/workers.md, "Network"): the egress proxy lives as long
    as the run's processes."""
    preset = harness.preset.name if isinstance(harness, PresetHarness) else None
    network = run_network(
        job,
        sandbox,
        preset=preset,
        base_env=settings.harness_env,
        on_event=buffer.add_events,
        on_output=buffer.add,
    )
    async with network as sandbox:
        if isinstance(harness, CommandHarness | PresetHarness | EchoHarness):
            harness.sandbox = sandbox
        return await _prepare_and_run(job, harness, settings, cancel, buffer, sandbox, found, guard, sessions)


async def _prepare_and_run(
    job: Job,
    harness: Harness,
    settings: ExecutionSettings,
    cancel: asyncio.Event,
    buffer: LogBuffer,
    sandbox: Sandbox | None,
    found: Collected,
    guard: RunGuard,
    sessions: RunChannel | None,
) -> Outcome:
    on_output: OutputCallback = buffer.add
    try:
        path = await asyncio.to_thread(create_workspace, settings.workspace_root, job)
    except WorkerError as exc:
        return Outcome.error(str(exc), "workspace_unavailable", retryable=True)
    guard.start(path, cancel)  # docs/workers.md, "Limits"
    try:
        # Setup commands can read .mcp.json: its secrets are redacted like the environment's.
        secrets = job.secret_values()
        emit = RedactingEmitter(on_output, secrets)
        base = {**(os.environ if settings.harness_env is None else settings.harness_env), **job.run_secrets}
        if job.environment:
            timeout = job.environment.get("setup_timeout_seconds") or DEFAULT_SETUP_TIMEOUT_SECONDS
            setup = prepare_environment(
                job.environment,
                path,
                base_env=base,
                timeout_seconds=timeout,
                on_output=emit,
                sandbox=sandbox,
                guarded=settings.guarded,
            )
            prepared = await _until_cancelled(setup, cancel)
            if prepared is not None:
                return _redacted(prepared, secrets)
        if job.runner is not None:
            for note in runner_notes(job.runner, guard.limits):
                await emit("system", note)
            commands = job.runner["setup_commands"]
            if commands:
                env = {**base, **job.environment_variables()}
                runner = run_runner_setup(
                    commands, path, env, secrets=secrets, on_output=emit, sandbox=sandbox
                )
                prepared = await _until_cancelled(runner, cancel)
                if prepared is not None:
                    return _redacted(prepared, secrets)
        if isinstance(harness, PresetHarness):  # its CLI's session travels between attempts (the server)
            outcome = await harness.run(
                job, path, cancel=cancel, on_output=on_output, on_event=buffer.add_events, sessions=sessions
            )
        else:
            outcome = await harness.run(
                job, path, cancel=cancel, on_output=on_output, on_event=buffer.add_events
            )
        try:
            collected = await asyncio.to_thread(collect, path)
        except OSError as exc:
            collected = Collected(notes=[f"artifacts: cannot read the run's outputs ({exc})"])
        found.files, found.declared, found.notes = collected.files, collected.declared, collected.notes
        return outcome
    finally:
        left = await guard.stop()  # nothing of the run outlives it (docs/workers.md, "Limits")
        if left:
            await buffer.add("system", f"{left} process(es) the run left behind were killed")
        if not settings.keep_workspace:
            try:
                await asyncio.to_thread(remove_workspace, path)
            except WorkerError as exc:
                log.warning("%s", exc)


def _redacted(outcome: Outcome, secrets: Iterable[str]) -> Outcome:
    message = outcome.status_message
    if not message or not isinstance(message.get("message"), str):
        return outcome
    return Outcome(outcome.state, {**message, "message": redact(message["message"], secrets)})


async def _until_cancelled(setup: Coroutine[Any, Any, object], cancel: asyncio.Event) -> Outcome | None:
    """Run a preparation step (an environment's or a runner's setup); an outcome when the run must end
    here (it failed, or ``cancel`` was set: the running command's process group is killed)."""
    task = asyncio.ensure_future(setup)
    cancelled = asyncio.create_task(cancel.wait())
    try:
        await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled():
        return Outcome.cancelled()
    try:
        task.result()
    except EnvironmentSetupFailed as exc:
        return setup_failure_outcome(exc)
    return None
