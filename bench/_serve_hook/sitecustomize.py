"""Loaded by ``bench/soak.py`` into the serve process (through PYTHONPATH), bench-only: nothing in the
product imports it. A daemon thread writes, every ``FACTORY_SOAK_MEMORY_SECONDS``, one JSON line to
``FACTORY_SOAK_DIR/memory.jsonl`` saying where the process's memory is: Python's allocated blocks,
SQLite's own allocator (page caches, statements), and glibc malloc's bytes in use and held free. RSS alone
cannot tell a leak from caches filling or from a fragmented heap; these three can, and cost microseconds.

With ``PYTHONTRACEMALLOC`` set it also dumps a tracemalloc snapshot every ``FACTORY_SOAK_TRACEMALLOC_SECONDS``
into ``FACTORY_SOAK_DIR/tracemalloc/``, for the soak to compare one after warm-up with the last.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

_DIR = os.environ.get("FACTORY_SOAK_DIR")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
            *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
        )
    ]


def _native() -> tuple[Any, Any]:
    """SQLite's ``sqlite3_memory_used`` (the library the sqlite3 module loaded) and glibc's ``mallinfo2``."""
    sqlite_used = malloc_info = None
    try:
        import _sqlite3

        sqlite_used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
        sqlite_used.restype = ctypes.c_int64
    except (ImportError, OSError, AttributeError):
        pass
    try:
        malloc_info = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
        malloc_info.restype = _MallInfo2
    except (OSError, AttributeError):
        pass
    return sqlite_used, malloc_info


def _memory(directory: Path, every: float) -> None:
    sqlite_used, malloc_info = _native()
    with (directory / "memory.jsonl").open("a") as out:
        while True:
            line: dict[str, float] = {"t": time.time(), "pid": os.getpid()}
            line["py_blocks"] = sys.getallocatedblocks()
            if sqlite_used is not None:
                line["sqlite"] = sqlite_used()
            if malloc_info is not None:
                info = malloc_info()
                line["malloc_used"] = info.uordblks + info.hblkhd
                line["malloc_free"] = info.fordblks
            out.write(json.dumps(line) + "\n")
            out.flush()
            time.sleep(every)


def _snapshots(directory: Path, every: float) -> None:
    directory.mkdir(exist_ok=True)
    n = 0
    while True:
        time.sleep(every)
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen*")]
        )
        snapshot.dump(str(directory / f"{n:04d}.snap"))
        n += 1


if _DIR:
    _every = float(os.environ.get("FACTORY_SOAK_MEMORY_SECONDS", "30"))
    threading.Thread(target=_memory, args=(Path(_DIR), _every), name="soak-memory", daemon=True).start()
    if tracemalloc.is_tracing():
        _trace = float(os.environ.get("FACTORY_SOAK_TRACEMALLOC_SECONDS", "60"))
        threading.Thread(
            target=_snapshots, args=(Path(_DIR) / "tracemalloc", _trace), name="soak-tracemalloc", daemon=True
        ).start()
