"""Loaded by ``bench/soak.py --tracemalloc`` into the serve process (through PYTHONPATH): a daemon thread
dumps a tracemalloc snapshot every ``FACTORY_SOAK_TRACEMALLOC_SECONDS`` into
``FACTORY_SOAK_TRACEMALLOC_DIR`` (started with ``PYTHONTRACEMALLOC``), for the soak to compare the first
snapshot after warm-up with the last. Bench-only: nothing in the product imports it."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

_DIR = os.environ.get("FACTORY_SOAK_TRACEMALLOC_DIR")


def _dump(directory: Path, every: float) -> None:
    n = 0
    while True:
        time.sleep(every)
        if tracemalloc.is_tracing():
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen*")]
            )
            snapshot.dump(str(directory / f"{n:04d}.snap"))
            n += 1


if _DIR:
    _every = float(os.environ.get("FACTORY_SOAK_TRACEMALLOC_SECONDS", "60"))
    threading.Thread(target=_dump, args=(Path(_DIR), _every), name="soak-tracemalloc", daemon=True).start()
