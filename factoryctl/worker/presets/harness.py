"""The one place an agent preset's CLI runs: :class:`PresetHarness` (docs/workers.md, "Harnesses").

For each run it makes the run's agent home (:func:`~factoryctl.worker.workspace.agent_home`, a
directory beside the workspace, mode 0700: ``HOME``, ``XDG_*``, ``CODEX_HOME`` and ``CLAUDE_CONFIG_DIR``
point into it, so the CLI's settings and session files are the run's, never the worker's), writes the
invocation's files there (mode 0600), and runs the CLI with the same process plumbing as the command
harness (:func:`~factoryctl.worker.processes.run_process`: in the sandbox when given, its own process
group, SIGTERM then SIGKILL on cancel or timeout). Each stdout line the preset's parser recognises
becomes transcript events (``on_event``); any other line, and all of stderr, is a plain log line.

Outcomes (``status_message.error_code``):

===================================  =========  =============================================
situation                            state      error_code / message
===================================  =========  =============================================
the CLI's result is a success        SUCCEEDED  message: its final answer (first ~1 KB)
the agent stopped to ask for input   BLOCKED    message: its question (first ~1 KB)
the CLI's result is an error         FAILED     ``agent_error``; the CLI's message
no result, exit status N > 0         FAILED     ``harness_exit_N``; the last ~1 KB of stderr
no result, killed by signal S        FAILED     ``harness_signal_S``
no result, exit status 0             FAILED     ``agent_no_result``
timeout                              FAILED     ``timeout``
cancel                               CANCELLED  ``run cancelled``
the CLI cannot be started            ERROR      ``harness_start_failed``
===================================  =========  =============================================

A success result with a non-zero exit status is a failure (``harness_exit_N``): the exit status wins.
Secret values are masked in every line, event and message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Protocol

from factoryctl.worker.errors import LeaseLost, WorkspaceError
from factoryctl.worker.job import Job, Outcome, redact, redact_data
from factoryctl.worker.presets import sessions as session_files
from factoryctl.worker.presets.base import (
    AgentEvent,
    Context,
    Invocation,
    Preset,
    StreamParser,
    Verdict,
    message,
)
from factoryctl.worker.processes import (
    STDERR_TAIL_CHARS,
    OutputCallback,
    OutputTail,
    run_process,
    signal_name,
)
from factoryctl.worker.sandbox import Sandbox
from factoryctl.worker.workspace import SKILLS_DIR, agent_home, run_environment

log = logging.getLogger("factoryctl.worker")

PRESET_GRACE_SECONDS = 1.5  # SIGTERM to SIGKILL: a cancel stops the CLI and its tools within 2 s
MESSAGE_CHARS = 1024  # of the verdict's message in the run's status message
LINE_LIMIT = 8 * 1024 * 1024  # one structured stdout line (a tool result) may be long; never split it

EventSink = Callable[[Sequence[AgentEvent]], Awaitable[None]]


def home_environment(home: Path) -> dict[str, str]:
    """The variables that put a CLI's settings, caches and sessions under the run's agent home."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "CODEX_HOME": str(home / ".codex"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "FACTORY_AGENT_HOME": str(home),
    }


class PresetHarness:
    """Run ``preset``'s CLI (``executable``, found at worker start) for one run.

    ``env`` is the base environment (None: this process's), then the run's (the job environment's
    variables and secrets, ``FACTORY_*``), then the agent home's variables, then the invocation's own.
    ``read_only``: directories the sandbox must show for the CLI to run (its installation). The effective
    timeout is the smaller of ``timeout_seconds`` and the job's.
    """

    def __init__(
        self,
        preset: Preset,
        executable: str,
        *,
        sandbox: Sandbox | None = None,
        env: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
        grace_seconds: float = PRESET_GRACE_SECONDS,
        read_only: Sequence[Path] = (),
    ) -> None:
        self.preset = preset
        self.executable = executable
        self.sandbox = sandbox
        self.env = dict(env) if env is not None else None
        self.timeout_seconds = timeout_seconds
        self.grace_seconds = grace_seconds
        self.read_only = tuple(read_only)
        self.rlimits: Sequence[tuple[int, int]] = ()  # set on its process (factoryctl.worker.watchdog)

    def __repr__(self) -> str:
        return f"PresetHarness({self.preset.name!r}, {self.executable!r})"

    def environment(self, job: Job, workspace: Path, home: Path) -> dict[str, str]:
        """The run's environment before the invocation's own variables (the preset reads it)."""
        base = os.environ if self.env is None else self.env
        env = run_environment(base, job, workspace, job.agent_model_id)
        env.update(home_environment(home))
        return env

    async def run(
        self,
        job: Job,
        workspace: Path,
        *,
        cancel: asyncio.Event,
        on_output: OutputCallback | None = None,
        on_event: EventSink | None = None,
        sessions: SessionStore | None = None,
    ) -> Outcome:
        """Run the CLI for ``job`` in ``workspace``. ``sessions``: where the CLI's session files are kept
        between attempts (the run's channel): restored before a follow-up resumes, saved after the CLI
        ends (docs/agents.md, "Sessions and follow-ups"); None leaves the agent home's sessions to the
        caller (the resume is attempted as it is)."""
        if cancel.is_set():
            return Outcome.cancelled()
        secrets = frozenset(job.secret_values())
        home = agent_home(workspace)
        env = self.environment(job, workspace, home)
        skills = workspace.joinpath(*SKILLS_DIR.split("/")) if job.skills else None
        context = Context(workspace, home, resume=job.resume_session_id, skills_dir=skills, env=env)
        parser = self.preset.parser()
        try:
            restoring = bool(context.resume) and sessions is not None
            archive = await self._saved_state(job, sessions) if restoring else None
            invocation = self.preset.invocation(job, self.executable, context)
            await asyncio.to_thread(prepare_home, home, invocation.files)
            if restoring:
                problem = await asyncio.to_thread(self._restore, archive, context, parser)
                if problem is not None:
                    job = replace(job, resume_session_id=None, prompt=fresh_prompt(job))
                    context = replace(context, resume=None)
                    invocation = self.preset.invocation(job, self.executable, context)
                    await asyncio.to_thread(prepare_home, home, invocation.files)
                    await self._announce(job, problem, on_event)
        except (ValueError, OSError, WorkspaceError) as exc:
            message = redact(f"cannot prepare the {self.preset.name} agent: {exc}", secrets)
            return Outcome.error(message, "harness_start_failed")
        try:
            return await self._run_cli(
                job, workspace, home, env, invocation, parser, cancel, on_output, on_event
            )
        finally:
            if sessions is not None:
                await self._save_state(job, home, sessions, parser)

    async def _run_cli(
        self,
        job: Job,
        workspace: Path,
        home: Path,
        env: Mapping[str, str],
        invocation: Invocation,
        parser: StreamParser,
        cancel: asyncio.Event,
        on_output: OutputCallback | None,
        on_event: EventSink | None,
    ) -> Outcome:
        secrets = frozenset(job.secret_values())
        tail = OutputTail(STDERR_TAIL_CHARS, secrets)
        router = _Router(parser, secrets, on_output, on_event)
        timeout = min((t for t in (self.timeout_seconds, job.timeout_seconds) if t is not None), default=None)
        try:
            end = await run_process(
                invocation.argv,
                cwd=workspace,
                env={**env, **invocation.env},
                sandbox=self.sandbox,
                stdin=None if invocation.stdin is None else invocation.stdin.encode(),
                emit=router,
                cancel=cancel,
                timeout_seconds=timeout,
                grace_seconds=self.grace_seconds,
                tail=tail,
                home=home,
                read_only=self.read_only,
                rlimits=self.rlimits,
                line_limit=LINE_LIMIT,
            )
        except OSError as exc:
            message = redact(f"cannot start {self.preset.name} ({self.executable}): {exc}", secrets)
            return Outcome.error(message, "harness_start_failed")
        if end.how == "cancelled":
            return Outcome.cancelled()
        if end.how == "timeout":
            return Outcome.failed(f"harness timed out after {timeout:g}s", "timeout")
        return verdict_outcome(_verdict(parser), end.returncode or 0, tail, secrets)

    async def _saved_state(self, job: Job, sessions: SessionStore | None) -> bytes | None:
        """The session files an earlier attempt saved (None: none, or the server could not say)."""
        if sessions is None:
            return None
        try:
            return await sessions.load_session_state()
        except LeaseLost:
            raise
        except Exception as exc:  # the conversation still goes on, from its summary
            log.warning("run %s: cannot read the saved agent session: %s", job.run_id, exc)
            return None

    def _restore(self, archive: bytes | None, context: Context, parser: StreamParser) -> str | None:
        """Unpack ``archive`` into the fresh agent home, rename what the CLI files under the workspace's
        name and give ``parser`` the worker's note on the session (its usage totals); why the session
        cannot be restored, or None when it was."""
        if archive is None:
            return "no saved session state"
        try:
            files = session_files.unpack(archive, context.home)
            session_files.move(context.home, self.preset.session_moves(files, context))
            session_files.carry_state(parser, session_files.take_state(context.home))
        except (session_files.SessionStateError, OSError) as exc:
            return str(exc)
        return None

    async def _announce(self, job: Job, problem: str, on_event: EventSink | None) -> None:
        text = f"The {self.preset.name} session could not be restored ({problem}); a new session starts "
        text += "with a summary of the earlier conversation."
        log.warning("run %s: %s", job.run_id, text)
        if on_event is not None:
            await on_event([message(text, role="system")])

    async def _save_state(self, job: Job, home: Path, sessions: SessionStore, parser: StreamParser) -> None:
        """Pack and send the CLI's session files with the parser's note on them (usage totals); a failure
        only costs the follow-up its restore."""
        try:
            state = session_files.state_of(parser)
            archive = await asyncio.to_thread(
                session_files.pack, home, self.preset.session_paths(), state=state
            )
            if archive is not None:
                await sessions.save_session_state(archive)
        except LeaseLost:
            log.info("run %s: the agent session was not saved: the lease is gone", job.run_id)
        except Exception as exc:
            log.warning("run %s: cannot save the agent session: %s", job.run_id, exc)


def fresh_prompt(job: Job) -> str:
    """A follow-up's prompt for a new session: the earlier conversation's summary, then the prompt."""
    summary = (job.resume_transcript or "").strip()
    if not summary:
        return job.prompt
    return (
        "## Earlier conversation\n\nThis continues an earlier conversation whose session could not be "
        f"restored. What was said and done so far:\n\n{summary}\n\n## Now\n\n{job.prompt}"
    )


class SessionStore(Protocol):
    """Where a run's agent session files are kept between attempts (its channel)."""

    async def save_session_state(self, archive: bytes) -> None: ...

    async def load_session_state(self) -> bytes | None: ...


def verdict_outcome(verdict: Verdict | None, code: int, tail: OutputTail, secrets: Iterable[str]) -> Outcome:
    """The outcome of a CLI that exited with ``code`` after reporting ``verdict`` (module table)."""
    message = redact(_cut(verdict.message or ""), secrets) if verdict is not None else ""
    if verdict is not None and verdict.blocked:
        return Outcome.blocked(message or "the agent is waiting for input: send a follow-up")
    if verdict is not None and not verdict.ok:
        return Outcome.failed(message or tail.text() or "the agent reported an error", "agent_error")
    if code < 0:
        return Outcome.failed(
            tail.text() or f"the agent was killed by {signal_name(-code)}", f"harness_signal_{-code}"
        )
    if code > 0:
        return Outcome.failed(
            tail.text() or message or f"the agent exited with status {code}", f"harness_exit_{code}"
        )
    if verdict is None:
        return Outcome.failed(
            "the agent ended without reporting a result" + (f": {tail.text()}" if tail.text() else ""),
            "agent_no_result",
        )
    return Outcome.succeeded(message or None)


def prepare_home(home: Path, files: Mapping[str, str]) -> None:
    """Make the run's agent home (mode 0700, fresh) and write ``files`` into it (mode 0600); a path that
    is absolute or leaves the home is refused (ValueError)."""
    if os.path.lexists(home):
        if home.is_symlink() or not home.is_dir():
            home.unlink()
        else:
            shutil.rmtree(home)
    home.mkdir(mode=0o700)
    for name, content in files.items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or not relative.parts or ".." in relative.parts:
            raise ValueError(f"agent home file {name!r} must be a relative path inside the home")
        target = home.joinpath(*relative.parts)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)


class _Router:
    """Sends each stdout line to the parser (structured: events) or the log, and stderr to the log;
    one call at a time, secrets masked."""

    def __init__(
        self,
        parser: StreamParser,
        secrets: frozenset[str],
        on_output: OutputCallback | None,
        on_event: EventSink | None,
    ) -> None:
        self.parser, self.secrets = parser, secrets
        self.on_output, self.on_event = on_output, on_event
        self.lock = asyncio.Lock()

    async def __call__(self, stream: str, line: str) -> None:
        async with self.lock:
            if stream == "stdout" and self._structured(line):
                try:
                    events = self.parser.feed(line)
                except Exception:  # a preset bug must not end the run: keep the line as output
                    log.exception("the preset's parser failed on a line; logged as plain output")
                    events = None
                if events is not None:
                    if events and self.on_event is not None:
                        await self.on_event([_masked(e, self.secrets) for e in events])
                    return
            if self.on_output is not None:
                await self.on_output(stream, redact(line, self.secrets))

    def _structured(self, line: str) -> bool:
        try:
            return self.parser.is_structured(line)
        except Exception:
            log.exception("the preset's parser failed on a line; logged as plain output")
            return False


def _masked(event: AgentEvent, secrets: frozenset[str]) -> AgentEvent:
    return AgentEvent(event.kind, redact_data(dict(event.data), secrets))


def _verdict(parser: StreamParser) -> Verdict | None:
    try:
        return parser.verdict()
    except Exception:
        log.exception("the preset's parser failed to give a verdict")
        return None


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1].rstrip() + "…"
