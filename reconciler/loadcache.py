"""Reuse a factory directory's load result while none of its files changed (for long-running loops).

Loading parses and schema-checks every file, so a no-op plan of a large repository would spend almost
all its time re-reading files that did not change. A :class:`LoadCache` keeps the last
:class:`reconciler.loader.LoadResult` per directory together with a fingerprint: every path the
loader looks at (``factory.yaml`` and the files of every kind of :mod:`reconciler.registry`:
``webhooks/*``, ``automations/*/*``, ...) with its size, mtime, ctime and inode (of a symlink, and of its
target when the loader would follow it). An edited, added, removed or renamed file changes the
fingerprint and the directory is loaded again: the work is proportional to the factory that changed,
not to the repository.

Racy timestamps: file systems stamp times with a coarse clock (a scheduler tick; up to 2 s on some),
so a file rewritten with the same size within one tick of being read would look unchanged. As git does
for its index, a result is reused only when every file is older, by more than :data:`RACY_NS`, than the
moment its load started; fresher trees are simply loaded again until they settle. That comparison is
against the file system's clock, hence ``time.time_ns`` rather than the injected business clock.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reconciler import loader, registry

RACY_NS = 2_000_000_000

Stamp = tuple[str, int, int, int, int]  # path, size, mtime_ns, ctime_ns, inode


def fingerprint(root: Path, *, follow_symlinks: bool = True) -> tuple[Stamp, ...] | None:
    """What the loader would see, cheaply (stat calls only); None if the tree cannot be listed.

    Paths are confined as the loader confines them (:class:`reconciler.loader.Confined`): a directory is
    listed, and a symlink's target stamped, only when its real path is inside the root and may be
    followed; anything else is stamped by its own ``lstat`` (the loader reports it, whatever it points at).
    """
    confined = loader.Confined(root, follow_symlinks)
    stamps: list[Stamp] = []
    base = str(root)

    def add(rel: str) -> str | None:
        """Stamp ``rel`` (and a followed symlink's target); its real path when it may be looked into."""
        path = os.path.join(base, rel)
        info = os.lstat(path)
        stamps.append((path, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
        if not stat.S_ISLNK(info.st_mode):
            return path
        try:
            real = confined.locate(rel)
        except (loader.Refused, FileNotFoundError):
            return None
        info = os.stat(real)
        stamps.append((real, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
        return real

    def listing(real: str | None) -> list[str]:
        if real is None or not os.path.isdir(real):
            return []
        return sorted(os.listdir(real))

    def walk(rel: str, depth: int) -> None:
        real = add(rel)
        for child in listing(real):
            inner = f"{rel}/{child}"
            if depth > 0 and real is not None and os.path.isdir(os.path.join(real, child)):
                walk(inner, depth - 1)
            else:
                add(inner)

    try:
        for name in registry.FACTORY_FILES:
            if os.path.lexists(os.path.join(base, name)):
                add(name)
        for folder, depth in registry.DEPTH.items():
            if os.path.lexists(os.path.join(base, folder)):
                walk(folder, depth)
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
        load: Callable[..., loader.LoadResult] = loader.load,
        racy_ns: int = RACY_NS,
    ) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max = max_entries
        self._load = load
        self._racy_ns = racy_ns
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def load(self, root: Path, *, follow_symlinks: bool = True) -> loader.LoadResult:
        """The directory's load result: the cached one if no file changed since, else a fresh load.

        ``follow_symlinks`` is the loader's (False for git snapshots); the ``load`` given to the
        constructor is called with it only when it is False.
        """
        key = f"{root.resolve()}\0{follow_symlinks}"
        stamps = fingerprint(root, follow_symlinks=follow_symlinks)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fresh_for(stamps, self._racy_ns):
                self._entries.move_to_end(key)
                self.hits += 1
                return entry.result
            self.misses += 1
        started = time.time_ns()
        result = self._load(root) if follow_symlinks else self._load(root, follow_symlinks=False)
        with self._lock:
            if stamps is None:
                self._entries.pop(key, None)
                return result
            self._entries[key] = _Entry(stamps, result, started)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return result
