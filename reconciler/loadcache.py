"""Reuse a factory directory's load result while none of its files changed (for long-running loops).

Loading parses and schema-checks every file, so a no-op plan of a large repository would spend almost
all its time re-reading files that did not change. A :class:`LoadCache` keeps the last
:class:`reconciler.loader.LoadResult` per directory together with a fingerprint: every path the
loader looks at (``factory.yaml``, ``webhooks/*``, ``automations/*/*``, ``environments/*``) with its
size, mtime, ctime and inode. An edited, added, removed or renamed file changes the fingerprint and the
directory is loaded again: the work is proportional to the factory that changed, not to the repository.

Racy timestamps: file systems stamp times with a coarse clock (a scheduler tick; up to 2 s on some),
so a file rewritten with the same size within one tick of being read would look unchanged. As git does
for its index, a result is reused only when every file is older, by more than :data:`RACY_NS`, than the
moment its load started; fresher trees are simply loaded again until they settle. That comparison is
against the file system's clock, hence ``time.time_ns`` rather than the injected business clock.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reconciler import loader

RACY_NS = 2_000_000_000
_TOP = ("factory.yaml", "factory.yml")
_DIRS = ("webhooks", "automations", "environments")

Stamp = tuple[str, int, int, int, int]  # path, size, mtime_ns, ctime_ns, inode


def fingerprint(root: Path) -> tuple[Stamp, ...] | None:
    """What the loader would see, cheaply (stat calls only); None if the tree cannot be listed."""
    stamps: list[Stamp] = []

    def add(path: str) -> None:
        info = os.stat(path)  # follows symlinks, as the loader's reads do
        stamps.append((path, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))

    def listing(path: str) -> list[str]:
        with os.scandir(path) as entries:
            return sorted(e.path for e in entries)

    base = str(root)
    try:
        for name in _TOP:
            path = os.path.join(base, name)
            if os.path.lexists(path):
                add(path)
        for folder in _DIRS:
            path = os.path.join(base, folder)
            if not os.path.lexists(path):
                continue
            add(path)
            for child in listing(path):
                add(child)
                if folder == "automations" and os.path.isdir(child):
                    for inner in listing(child):
                        add(inner)
    except OSError:
        return None
    return tuple(stamps)


@dataclass(frozen=True)
class _Entry:
    stamps: tuple[Stamp, ...]
    result: loader.LoadResult
    started_ns: int

    def fresh_for(self, stamps: tuple[Stamp, ...] | None, racy_ns: int) -> bool:
        if stamps != self.stamps:
            return False
        newest = max((max(s[2], s[3]) for s in self.stamps), default=0)
        return newest < self.started_ns - racy_ns


class LoadCache:
    """A bounded LRU cache of load results by directory; thread-safe (loads run in threads)."""

    def __init__(
        self,
        max_entries: int = 1024,
        *,
        load: Callable[[Path], loader.LoadResult] = loader.load,
        racy_ns: int = RACY_NS,
    ) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max = max_entries
        self._load = load
        self._racy_ns = racy_ns
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def load(self, root: Path) -> loader.LoadResult:
        """The directory's load result: the cached one if no file changed since, else a fresh load."""
        key = str(root.resolve())
        stamps = fingerprint(root)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fresh_for(stamps, self._racy_ns):
                self._entries.move_to_end(key)
                self.hits += 1
                return entry.result
            self.misses += 1
        started = time.time_ns()
        result = self._load(root)
        with self._lock:
            if stamps is None:
                self._entries.pop(key, None)
                return result
            self._entries[key] = _Entry(stamps, result, started)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return result
