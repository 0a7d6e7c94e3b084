"""A run's resource limits and the one decision a watchdog makes: is this sample over one of them?

Pure: no process table, no clock. The worker's watchdog (:mod:`factoryctl.worker.watchdog`) measures the
run's processes and workspace and asks :func:`breach`; a run over a limit ends FAILED with the limit's
error code (docs/workers.md, "Limits"). cgroups would enforce these in the kernel, but a worker cannot
count on them being delegated to it (containers, cgroup v1), so the worker samples instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

GIB = 1024**3
DEFAULT_MEMORY_BYTES = 4 * GIB
DEFAULT_PROCESSES = 512
DEFAULT_DISK_BYTES = 10 * GIB
MEMORY_CODE = "memory_limit_exceeded"
PROCESS_CODE = "process_limit_exceeded"
DISK_CODE = "disk_limit_exceeded"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": GIB, "t": 1024**4}


@dataclass(frozen=True)
class Limits:
    """Per run; None: not limited. ``memory_bytes``: the sum of the resident memory of the run's processes;
    ``processes``: how many of them at once (the sandbox's own bubblewrap processes included);
    ``disk_bytes``: the space the workspace's files take; ``seconds``: the harness's wall-clock time (the
    harness stops it: FAILED ``timeout``, like the run's own ``timeout_seconds``)."""

    memory_bytes: int | None = DEFAULT_MEMORY_BYTES
    processes: int | None = DEFAULT_PROCESSES
    disk_bytes: int | None = DEFAULT_DISK_BYTES
    seconds: float | None = None  # wall-clock time of the harness; the run's own timeout applies too

    def for_runner(self, runner: Mapping[str, Any] | None) -> Limits:
        """These limits with the memory of the runner's ``instance_shape`` (``memory_gb``) when it is lower
        (docs/workers.md, "Runners and skills")."""
        shape = (runner or {}).get("instance_shape") or {}
        memory_gb = shape.get("memory_gb")
        if isinstance(memory_gb, bool) or not isinstance(memory_gb, int | float) or memory_gb <= 0:
            return self
        wanted = int(memory_gb * GIB)
        if self.memory_bytes is not None and self.memory_bytes <= wanted:
            return self
        return replace(self, memory_bytes=wanted)


@dataclass(frozen=True)
class Sample:
    """One look at a run: its processes' resident memory and count; ``disk_bytes`` None when the workspace
    was not measured this time (it is measured less often than processes: walking it costs more)."""

    memory_bytes: int
    processes: int
    disk_bytes: int | None = None


@dataclass(frozen=True)
class Breach:
    """A limit the run went over: the status message's error code and a message naming limit and value."""

    error_code: str
    message: str


def breach(limits: Limits, sample: Sample) -> Breach | None:
    """The first limit ``sample`` is over (memory, processes, disk), None when it is within all."""
    if limits.memory_bytes is not None and sample.memory_bytes > limits.memory_bytes:
        return Breach(
            MEMORY_CODE,
            f"the run's processes used {format_size(sample.memory_bytes)} of memory, over its memory limit "
            f"of {format_size(limits.memory_bytes)}",
        )
    if limits.processes is not None and sample.processes > limits.processes:
        return Breach(
            PROCESS_CODE,
            f"the run had {sample.processes} processes, over its process limit of {limits.processes}",
        )
    if (
        limits.disk_bytes is not None
        and sample.disk_bytes is not None
        and sample.disk_bytes > limits.disk_bytes
    ):
        return Breach(
            DISK_CODE,
            f"the run's workspace took {format_size(sample.disk_bytes)} of disk, over its disk limit of "
            f"{format_size(limits.disk_bytes)}",
        )
    return None


def limits_from(
    memory: str | None, processes: str | None, disk: str | None, seconds: str | None = None
) -> Limits:
    """The limits the operator set (flags or ``FACTORY_*`` variables, None: the default of each)."""
    defaults = Limits()
    return Limits(
        memory_bytes=parse_size(memory) if memory is not None else defaults.memory_bytes,
        processes=parse_count(processes) if processes is not None else defaults.processes,
        disk_bytes=parse_size(disk) if disk is not None else defaults.disk_bytes,
        seconds=parse_seconds(seconds) if seconds is not None else defaults.seconds,
    )


def parse_seconds(text: str) -> float | None:
    """A wall-clock limit in seconds; ``0`` or ``none`` -> None."""
    if text.strip().lower() in ("0", "none", "unlimited"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds (or 0 for no limit)") from None
    if not value > 0:
        raise ValueError(f"{text!r}: the time limit must be positive (or 0 for no limit)")
    return value


def parse_size(text: str) -> int | None:
    """``512M``, ``4G``, ``4GiB``, ``1.5g``, ``1048576`` (bytes) -> bytes; ``0`` or ``none`` -> None (no
    limit). Raises ValueError naming what is accepted."""
    if text.strip().lower() in ("0", "none", "unlimited"):
        return None
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size: use bytes or a number with K, M, G or T (e.g. 4G), or 0")
    value = int(float(match[1]) * _UNITS[match[2].lower()])
    if value < 1:
        raise ValueError(f"{text!r} is not a size of at least one byte")
    return value


def parse_count(text: str) -> int | None:
    """A process count; ``0`` or ``none`` -> None (no limit)."""
    if text.strip().lower() in ("0", "none", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of processes (or 0 for no limit)") from None
    if value < 1:
        raise ValueError(f"{text!r}: the process limit must be at least 1 (or 0 for no limit)")
    return value


def format_size(value: int) -> str:
    """Bytes for people: ``4 GiB``, ``1.5 MiB``, ``512 B``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, index = float(value), 0
    while size >= 1024 and index < len(units) - 1:
        size, index = size / 1024, index + 1
    return f"{size:.1f}".rstrip("0").rstrip(".") + f" {units[index]}"


def describe(limits: Limits) -> str:
    """One line for the worker's start and the run log: ``memory 4 GiB, 512 processes, disk 10 GiB``."""
    memory = format_size(limits.memory_bytes) if limits.memory_bytes is not None else "unlimited"
    processes = f"{limits.processes} processes" if limits.processes is not None else "unlimited processes"
    disk = format_size(limits.disk_bytes) if limits.disk_bytes is not None else "unlimited"
    time = f"{limits.seconds:g}s" if limits.seconds is not None else "the run's own timeout"
    return f"memory {memory}, {processes}, disk {disk}, time {time}"
