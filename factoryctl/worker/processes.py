"""Process plumbing shared by every harness and setup step: process groups, stopping them, streaming
their output line by line with secrets masked.

A run-controlled process starts in its own process group (:func:`factoryctl.worker.sandbox.start_process`);
on cancel or timeout the whole group is stopped (SIGTERM, then SIGKILL after a grace period), so no tool
the agent started outlives the run. Some agents start their tools in a session (and so a process group) of
their own (Gemini CLI's shell commands): the groups of every descendant of the process, collected from
``/proc`` before the first signal while they are still its descendants, are stopped with it
(:func:`terminate_process_tree`; docs/workers.md, "Harnesses").
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import resource
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from factoryctl.worker.job import redact
from factoryctl.worker.sandbox import Sandbox, start_process

OutputCallback = Callable[[str, str], Awaitable[None]]
"""``on_output(stream, line)``: stream is ``stdout``, ``stderr`` or ``system``; line has no newline."""

DEFAULT_GRACE_SECONDS = 5.0
STDERR_TAIL_CHARS = 1024


@dataclass(frozen=True)
class ProcessEnd:
    """How a process run by :func:`run_process` ended: it ``exited`` (``returncode``: its status, negative
    for a signal), or it was stopped because ``cancelled`` was set or its time limit passed (``timeout``)."""

    how: Literal["exited", "cancelled", "timeout"]
    returncode: int | None


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    sandbox: Sandbox | None,
    stdin: bytes | None,
    emit: Callable[[str, str], Awaitable[None]],
    cancel: asyncio.Event,
    timeout_seconds: float | None,
    grace_seconds: float,
    tail: OutputTail | None = None,
    home: Path | None = None,
    read_only: Sequence[Path] = (),
    line_limit: int | None = None,
    rlimits: Sequence[tuple[int, int]] = (),
) -> ProcessEnd:
    """Run one harness process to its end in its own process group (in ``sandbox`` when given), feeding
    it ``stdin`` (None: ``/dev/null``) and calling ``emit(stream, line)`` for each line of its stdout and
    stderr (stderr's also go to ``tail``). Whatever ends it, the whole group is stopped before this returns
    (SIGTERM, SIGKILL after ``grace_seconds``), so nothing it started survives. ``home``/``read_only``:
    :func:`~factoryctl.worker.sandbox.start_process`; ``line_limit``: the longest line read whole (longer
    ones are emitted in pieces; default 64 KiB); ``rlimits``: ``(resource, value)`` set on the process
    before it starts (inherited by the sandbox and all inside it; :func:`factoryctl.worker.limits.rlimits`).
    Raises OSError when it cannot start."""
    limit: dict[str, Any] = {"limit": line_limit} if line_limit else {}
    if rlimits:
        limit["preexec_fn"] = _set_rlimits(tuple(rlimits))
    proc = await start_process(
        argv,
        cwd=cwd,
        env=env,
        sandbox=sandbox,
        home=home,
        read_only=read_only,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **limit,
    )
    assert proc.stdout and proc.stderr
    pumps = [
        asyncio.create_task(pump_lines(proc.stdout, "stdout", emit)),
        asyncio.create_task(pump_lines(proc.stderr, "stderr", emit, tail)),
    ]
    tasks = list(pumps)
    if stdin is not None:
        assert proc.stdin
        tasks.append(asyncio.create_task(feed_stdin(proc.stdin, stdin)))
    stopped = False
    try:
        ended = await first_event(proc, cancel, timeout_seconds, pumps)
        if proc.returncode is None:
            await terminate_process_tree(proc.pid, grace_seconds=grace_seconds)
        else:  # reaped: its children were re-parented and its PID may be reused, so only its group is its
            await terminate_process_group(proc.pid, grace_seconds=grace_seconds)
        stopped = True
        done, _ = await asyncio.wait(pumps, timeout=grace_seconds)
        for task in done:
            task.result()
    finally:
        if not stopped:
            for group in {proc.pid, *descendant_groups(proc.pid)}:
                signal_process_group(group, signal.SIGKILL)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return ProcessEnd(ended, proc.returncode)


def _set_rlimits(rlimits: tuple[tuple[int, int], ...]) -> Callable[[], None]:
    """What the child runs between fork and exec: only ``setrlimit`` calls (no lock, no allocation that
    another thread of the worker could hold)."""

    def apply() -> None:
        for which, value in rlimits:
            resource.setrlimit(which, (value, value))

    return apply


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
    table = process_table()
    return table is None or any(pgrp == pgid for _ppid, pgrp in table.values())


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


def process_table() -> dict[int, tuple[int, int]] | None:
    """``pid -> (ppid, pgrp)`` of every live process (zombies left out); None when /proc cannot be read.

    Raw ``os.open``/``os.read`` on each ``stat`` file: three system calls a process instead of the seven of
    a text-mode ``open``. The scan runs in a thread beside a busy event loop, and each system call gives up
    the GIL and waits to get it back, so the count is what the scan costs under load."""
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        fields = stat[stat.rfind(b")") + 2 :].split(None, 3)  # state ppid pgrp ...
        if len(fields) > 2 and fields[0] not in (b"Z", b"X"):
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def descendant_groups(pid: int) -> set[int]:
    """The process groups of ``pid``'s descendants (children, their children ...), its own left out when
    they share it: the groups a tool started in a session of its own lives in."""
    table = process_table() or {}
    children: dict[int, list[int]] = {}
    for child, (parent, _group) in table.items():
        children.setdefault(parent, []).append(child)
    groups: set[int] = set()
    pending = list(children.get(pid, ()))
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        groups.add(table[current][1])
        pending.extend(children.get(current, ()))
    groups.discard(pid)
    groups.discard(os.getpgrp())  # never this worker's own group
    return groups


async def terminate_process_tree(pid: int, *, grace_seconds: float, poll_seconds: float = 0.02) -> None:
    """:func:`terminate_process_group` for ``pid``'s group and every group its descendants run in, found
    before the first signal (once the process ends, its children are re-parented and cannot be told from
    anyone else's)."""
    groups = {pid, *descendant_groups(pid)}
    await asyncio.gather(
        *(terminate_process_group(g, grace_seconds=grace_seconds, poll_seconds=poll_seconds) for g in groups)
    )


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


async def feed_stdin(stdin: asyncio.StreamWriter, data: bytes) -> None:
    # The agent may exit (or close stdin) without reading everything: that is not an error here.
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
        await stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass


async def first_event(
    proc: asyncio.subprocess.Process,
    cancel: asyncio.Event,
    limit_seconds: float | None,
    pumps: list[asyncio.Task[None]],
) -> Literal["exited", "cancelled", "timeout"]:
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


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
