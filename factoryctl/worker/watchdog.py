"""The watchdog of one run: samples its processes and workspace, stops it over a limit, and kills whatever
of it is left when it ends (docs/workers.md, "Limits").

A run's processes are found on the host's ``/proc``, not through the harness that started them, so one
rule covers setup commands, every harness and the agent presets alike:

- its *roots*: this worker's own children whose working directory is the run's workspace (each
  run-controlled process starts there: bubblewrap itself, or the command on the host), and their
  descendants. In a sandbox that is everything: the sandbox's PID namespace keeps every process of it
  below bubblewrap, and it dies with it;
- without a sandbox, also every process whose environment names the run (``FACTORY_RUN_ID``): a process
  that double-forked or started a session of its own has left the tree, but not its environment. Only a
  process that also clears its environment escapes; the sandbox is the answer to that.

Cost: a sample reads ``/proc/PID/stat`` of every process and ``statm`` of the run's. The workspace walk
(``lstat`` of every file) costs more on a large tree, so the next one waits at least
:data:`DISK_COST_FACTOR` times as long as the last took.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import time
from pathlib import Path

from factoryctl.worker.job import Outcome
from factoryctl.worker.limits import Breach, Limits, Sample, breach
from factoryctl.worker.processes import process_table

log = logging.getLogger("factoryctl.worker")
SAMPLE_SECONDS = 0.5
DISK_COST_FACTOR = 20.0  # a walk that took 50 ms is repeated a second later at the earliest
KILL_ROUNDS = 50
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class RunProcesses:
    """Finds the processes of the run in ``workspace`` (``run_id``: its ``FACTORY_RUN_ID``;
    ``by_environment``: also look for it in every process's environment, for a run without a sandbox)."""

    def __init__(self, workspace: Path, run_id: str, *, by_environment: bool) -> None:
        self.workspace = os.path.realpath(workspace)
        self.marker = f"FACTORY_RUN_ID={run_id}".encode()
        self.by_environment = by_environment
        self.worker = os.getpid()

    def find(self) -> set[int]:
        """The run's live processes (zombies left out)."""
        table = process_table() or {}
        children: dict[int, list[int]] = {}
        for pid, (parent, _group) in table.items():
            children.setdefault(parent, []).append(pid)
        pending = [pid for pid in children.get(self.worker, ()) if self._works_here(pid)]
        if self.by_environment:
            pending += [pid for pid in table if pid != self.worker and self._names_the_run(pid)]
        found: set[int] = set()
        while pending:
            pid = pending.pop()
            if pid not in found:
                found.add(pid)
                pending.extend(children.get(pid, ()))
        found.discard(self.worker)
        return found

    def _works_here(self, pid: int) -> bool:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return False
        return cwd == self.workspace or cwd.startswith(self.workspace + os.sep)

    def _names_the_run(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:
            return False
        return self.marker in variables

    def kill(self) -> int:
        """SIGKILL every process of the run until none is left (a process forking meanwhile is found in
        the next round); how many were killed."""
        killed = 0
        for _ in range(KILL_ROUNDS):
            found = self.find()
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.01)  # a thread of its own (asyncio.to_thread): let the kernel reap them
        return killed


def memory_and_count(pids: set[int]) -> tuple[int, int]:
    """The summed resident memory (bytes) of ``pids`` and how many of them are still there."""
    total = count = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                resident = int(handle.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        total += resident * PAGE_SIZE
        count += 1
    return total, count


def disk_usage(path: Path) -> int:
    """The space the files under ``path`` take (allocated blocks: a sparse file counts what it holds),
    without following symlinks."""
    total = 0
    pending = [os.fspath(path)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return total


def rlimits(limits: Limits, euid: int) -> list[tuple[int, int]]:
    """The kernel limits set on a run's processes besides the watchdog (docs/workers.md, "Limits"):
    ``RLIMIT_CORE`` 0 (no core file in the workspace), ``RLIMIT_FSIZE`` the disk limit (no single file
    larger than the whole workspace may be; one byte over, so the watchdog names the breach), and
    ``RLIMIT_NPROC`` the process limit plus the processes the user already runs, only when not root (root
    ignores it, and it counts every process of the worker's user). Never ``RLIMIT_AS``: node/V8 reserves
    far more address space than it uses."""
    found = [(resource.RLIMIT_CORE, 0)]
    if limits.disk_bytes is not None:
        found.append((resource.RLIMIT_FSIZE, limits.disk_bytes + 1))  # over the limit: the watchdog's
    if limits.processes is not None and euid != 0:
        found.append((resource.RLIMIT_NPROC, limits.processes + user_processes(euid)))
    return found


def user_processes(uid: int) -> int:
    """How many processes ``uid`` runs now (RLIMIT_NPROC counts them all)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
    return count


class Watchdog:
    """Samples the run every :data:`SAMPLE_SECONDS` until :meth:`watch` finds a breach."""

    def __init__(self, processes: RunProcesses, limits: Limits, *, interval: float = SAMPLE_SECONDS) -> None:
        self.processes, self.limits, self.interval = processes, limits, interval
        self.next_disk = 0.0  # monotonic time of the next workspace walk

    def sample(self) -> Sample:
        counted = self.limits.memory_bytes is not None or self.limits.processes is not None
        pids = self.processes.find() if counted else set()
        memory, count = memory_and_count(pids)
        disk = None
        now = time.monotonic()
        if self.limits.disk_bytes is not None and now >= self.next_disk:
            disk = disk_usage(Path(self.processes.workspace))
            took = time.monotonic() - now
            self.next_disk = now + max(self.interval, took * DISK_COST_FACTOR)
        return Sample(memory_bytes=memory, processes=count, disk_bytes=disk)

    async def watch(self) -> Breach:
        """The first breach (waits forever when nothing is limited)."""
        if (self.limits.memory_bytes, self.limits.processes, self.limits.disk_bytes) == (None, None, None):
            await asyncio.Event().wait()
        while True:
            found = breach(self.limits, await asyncio.to_thread(self.sample))
            if found is not None:
                return found
            await asyncio.sleep(self.interval)


class RunGuard:
    """The watchdog and the final sweep around one run's execution: :meth:`start` once its workspace
    exists (a breach sets ``cancel``, which stops whatever runs), :meth:`stop` before the workspace goes
    (one last look at its size, then every process of the run left is killed), :meth:`outcome` turns the
    harness's outcome into the breach's FAILED."""

    def __init__(self, run_id: str, limits: Limits, *, sandboxed: bool) -> None:
        self.run_id, self.limits, self.sandboxed = run_id, limits, sandboxed
        self.breach: Breach | None = None
        self._processes: RunProcesses | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, workspace: Path, cancel: asyncio.Event) -> None:
        self._processes = RunProcesses(workspace, self.run_id, by_environment=not self.sandboxed)
        dog = Watchdog(self._processes, self.limits)

        async def watch() -> None:
            found = await dog.watch()
            log.warning("run %s: %s; stopping it", self.run_id, found.message)
            self.breach = found
            cancel.set()

        self._task = asyncio.create_task(watch())

    async def stop(self) -> int:
        """Stop watching, check the workspace's size once more, kill what is left; how many were."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._processes is None:
            return 0
        return await asyncio.to_thread(self._last_look)  # one thread hop: each waits for the GIL under load

    def _last_look(self) -> int:
        disk = self.limits.disk_bytes
        if self.breach is None and disk is not None:
            used = disk_usage(Path(self.processes.workspace))
            self.breach = breach(Limits(None, None, disk), Sample(0, 0, used))
        return self.processes.kill()

    @property
    def processes(self) -> RunProcesses:
        if self._processes is None:
            raise RuntimeError("the guard was not started")
        return self._processes

    def outcome(self, outcome: Outcome) -> Outcome:
        if self.breach is None:
            return outcome
        return Outcome.failed(self.breach.message, self.breach.error_code)
