"""``serve --processes N``: the primary's supervision of N-1 secondary server processes, and their channel.

The process the operator started is the *primary*: it migrates, bootstraps the admin key, runs every
background job and serves HTTP. It starts N-1 *secondaries* - ``python -m factoryctl.cli serve
--secondary FD``, each a clean interpreter - that serve HTTP only. Every process listens on host:port with
``SO_REUSEPORT`` and the kernel spreads connections over them (docs/operations.md, "Several processes").

Each secondary holds one end of a socketpair (its ``FD``); only the primary holds the other end.

- primary -> secondary: first the resolved configuration (a length-prefixed pickle: nobody else can write
  to this socket, and no database URL or key ends up on a command line), then JSON lines:
  ``{"reconciler": {...} | null}`` on start and whenever the primary's reconciler state changes, so
  ``/readyz`` and ``POST /api/v1/factory/{uid}/reconcile`` answer alike in every process;
- secondary -> primary: JSON lines, ``{"ready": PID}`` once it listens and ``{"reconcile": true}`` to wake
  the primary's reconciler loop.

End of file on a secondary's end means the primary is gone - ``kill -9`` included, the kernel closes its
sockets - and the secondary drains and exits: none lingers holding the port. The primary restarts a
secondary that exits while the group is not stopping, with a doubling delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("factoryctl.serve")
Message = dict[str, Any]

START_SECONDS = 60.0  # the initial secondaries must listen within this, or the primary gives up (exit 1)
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
STABLE_SECONDS = 30.0  # a secondary that ran this long before exiting restarts after the first delay again


def parse_processes(value: str) -> int:
    """``--processes``: a whole number of at least 1, or ``auto`` (the CPUs this process may run on)."""
    text = value.strip().lower()
    if text == "auto":
        if hasattr(os, "sched_getaffinity"):
            return max(1, len(os.sched_getaffinity(0)))
        return max(1, os.cpu_count() or 1)  # pragma: no cover - platforms without sched_getaffinity
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"--processes must be a whole number of at least 1, or auto (got {value!r})")
    return count


def _line(message: Message) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


async def _next_message(reader: asyncio.StreamReader) -> Message | None:
    """The next JSON object from the other end (other lines are skipped); None at end of file."""
    while True:
        raw = await reader.readline()
        if not raw:
            return None
        with contextlib.suppress(ValueError):
            message = json.loads(raw)
            if isinstance(message, dict):
                return message


# --- the primary's side -----------------------------------------------------------------------------------


class StartFailed(Exception):
    """A secondary could not be started when the group started (the primary exits 1)."""


@dataclass
class Secondary:
    index: int
    proc: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    started: float
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    reader_task: asyncio.Task[None] | None = None


class Supervisor:
    """Starts ``count`` children numbered from ``first``, restarts one that exits unexpectedly, stops them
    all on request. ``label`` names them in log lines (``server process``; the ``workers process`` of
    :mod:`factoryctl.serve.worker_process`).

    ``config(index)`` is what secondary ``index`` receives first (opaque here); ``greeting()`` the first
    JSON message it then gets (the current shared state); ``on_message(index, message)`` handles what
    they send other than ``ready``; :meth:`broadcast` sends a JSON message to every secondary that runs.
    """

    def __init__(
        self,
        count: int,
        config: Callable[[int], bytes],
        *,
        env: Mapping[str, str],
        greeting: Callable[[], Message],
        on_message: Callable[[int, Message], None],
        label: str = "server process",
        first: int = 1,
    ) -> None:
        self.indexes = range(first, first + count)
        self.label = label
        self.config = config
        self.env = dict(env)
        self.greeting = greeting
        self.on_message = on_message
        self.children: dict[int, Secondary] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._started = False

    async def start(self, within: float = START_SECONDS) -> None:
        """Start every secondary and wait until each listens; :class:`StartFailed` names the first that
        exits first or does not listen within ``within`` seconds (the caller then calls :meth:`stop`)."""
        for index in self.indexes:
            try:
                child = await self._spawn(index)
            except OSError as exc:
                raise StartFailed(f"cannot start {self.label} {index}: {exc}") from exc
            self._tasks.append(asyncio.create_task(self._watch(child), name=f"serve-process-{index}"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        for index in self.indexes:
            child = self.children[index]
            ready = asyncio.ensure_future(child.ready.wait())
            exited = asyncio.ensure_future(child.proc.wait())
            try:
                await asyncio.wait(
                    {ready, exited},
                    timeout=max(0.0, deadline - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                ready.cancel()
                exited.cancel()
            if child.ready.is_set():
                continue
            if child.proc.returncode is not None:
                raise StartFailed(
                    f"{self.label} {index} exited (code {child.proc.returncode}) before it was ready"
                )
            raise StartFailed(f"{self.label} {index} was not ready within {within:.0f} s")
        self._started = True

    def broadcast(self, message: Message) -> None:
        data = _line(message)
        for child in self.children.values():
            if child.proc.returncode is None and not child.writer.is_closing():
                child.writer.write(data)

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children.values() if c.proc.returncode is None]

    async def stop(self, within: float) -> None:
        """SIGTERM to every secondary (each drains like a lone ``serve``), no more restarts; SIGKILL to those
        still there after ``within`` seconds. Returns once every one has exited."""
        self._stopping.set()
        for child in self.children.values():
            if child.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(self._tasks, timeout=within)
        if pending:
            for child in self.children.values():
                if child.proc.returncode is None:
                    log.warning(
                        json.dumps(
                            {
                                "msg": f"{self.label} did not stop; killed",
                                "secondary": child.index,
                                "pid": child.proc.pid,
                                "after_seconds": within,
                            }
                        )
                    )
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
            await asyncio.wait(self._tasks)

    async def _spawn(self, index: int) -> Secondary:
        parent_end, child_end = socket.socketpair()
        try:
            fd = child_end.fileno()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "factoryctl.cli",
                "serve",
                "--secondary",
                str(fd),
                stdin=subprocess.DEVNULL,
                env=self.env,
                pass_fds=(fd,),
            )
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()  # only the secondary holds it now: its end of file is the primary's death
        reader, writer = await asyncio.open_connection(sock=parent_end)
        config = self.config(index)
        writer.write(len(config).to_bytes(4, "big") + config + _line(self.greeting()))
        child = Secondary(index, proc, writer, asyncio.get_running_loop().time())
        child.reader_task = asyncio.create_task(self._read(child, reader))
        self.children[index] = child
        log.info(json.dumps({"msg": f"{self.label} started", "secondary": index, "pid": proc.pid}))
        if self._stopping.is_set():  # stop() began while this one was starting
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        return child

    async def _read(self, child: Secondary, reader: asyncio.StreamReader) -> None:
        while (message := await _next_message(reader)) is not None:
            if "ready" in message:
                child.ready.set()
                log.info(
                    json.dumps(
                        {"msg": f"{self.label} ready", "secondary": child.index, "pid": child.proc.pid}
                    )
                )
                continue
            try:
                self.on_message(child.index, message)
            except Exception:
                log.exception("%s %d: cannot handle %r", self.label, child.index, message)

    async def _watch(self, child: Secondary) -> None:
        """Wait for ``child`` to exit and, unless the group is stopping, start it again after a delay."""
        delay = FIRST_RESTART_DELAY
        loop = asyncio.get_running_loop()
        current: Secondary | None = child
        index = child.index
        while True:
            if current is not None:
                code = await current.proc.wait()
                current.writer.close()
                if current.reader_task is not None:  # what it sent after its last words no longer matters
                    current.reader_task.cancel()
                    await asyncio.wait({current.reader_task})
                if self._stopping.is_set():
                    return
                if not self._started and not current.ready.is_set():
                    return  # the group is starting: start() reports it and the primary exits
                if loop.time() - current.started >= STABLE_SECONDS:
                    delay = FIRST_RESTART_DELAY
                log.warning(
                    json.dumps(
                        {
                            "msg": f"{self.label} exited; restarting",
                            "secondary": index,
                            "pid": current.proc.pid,
                            "code": code,
                            "restart_in": delay,
                        }
                    )
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            delay = min(delay * 2, MAX_RESTART_DELAY)
            try:
                current = await self._spawn(index)
            except OSError as exc:
                current = None
                log.error(
                    json.dumps(
                        {
                            "msg": f"cannot start {self.label}",
                            "secondary": index,
                            "error": str(exc),
                            "retry_in": delay,
                        }
                    )
                )


# --- a secondary's side -----------------------------------------------------------------------------------


class PrimaryLink:
    """A secondary's end of the channel to its primary."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, fd: int) -> tuple[PrimaryLink, bytes, Message]:
        """Open the inherited ``fd``; the configuration the primary sent and its first message. Raises
        OSError, or :class:`asyncio.IncompleteReadError` when the primary went away first."""
        os.set_inheritable(fd, False)  # nothing this process starts may keep the primary's death unseen
        reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd))
        size = int.from_bytes(await reader.readexactly(4), "big")
        config = await reader.readexactly(size)
        first = await _next_message(reader)
        if first is None:
            raise asyncio.IncompleteReadError(b"", None)
        return cls(reader, writer), config, first

    def send(self, message: Message) -> None:
        if not self.writer.is_closing():
            self.writer.write(_line(message))

    async def follow(self, on_message: Callable[[Message], None]) -> None:
        """Hand each message to ``on_message``; returns at end of file: the primary is gone."""
        while (message := await _next_message(self.reader)) is not None:
            on_message(message)

    async def follow_until(self, stop: asyncio.Event, on_message: Callable[[Message], None]) -> bool:
        """:meth:`follow` until ``stop`` is set (SIGTERM/SIGINT) or the primary's end of file, which sets
        it too; True when the primary is gone."""
        following = asyncio.create_task(self.follow(on_message))
        following.add_done_callback(lambda _task: stop.set())
        try:
            await stop.wait()
            return following.done()
        finally:
            following.cancel()
            await asyncio.wait({following})

    def close(self) -> None:
        self.writer.close()
