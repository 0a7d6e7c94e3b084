"""A local factory directory, re-read whenever a file under it changes (watchfiles, debounced)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from pathlib import Path

from watchfiles import Change, awatch

from reconciler.sources import Snapshot

log = logging.getLogger("factoryctl.reconciler")
_IGNORED_PARTS = {".git", "__pycache__", ".factory"}


def _relevant(change: tuple[Change, str], root: Path) -> bool:
    try:
        rel = Path(change[1]).resolve().relative_to(root)
    except ValueError:
        return True  # the root itself (deleted, replaced): always relevant
    parts = rel.parts
    if any(p in _IGNORED_PARTS for p in parts):
        return False
    name = parts[-1] if parts else ""
    return not (name.endswith(("~", ".swp", ".swx", ".tmp")) or name.startswith(".#"))


class DirectorySource:
    """Yields the directory once at start, then after every debounced batch of relevant edits.

    The watcher starts *before* the first snapshot is handed out and runs while the consumer applies
    it, so an edit saved during any apply (the start-up one included) marks the tree dirty and is
    yielded next; batches that arrive while a snapshot is being applied coalesce into one.
    """

    def __init__(self, root: Path, *, debounce_ms: int = 300, step_ms: int = 50) -> None:
        self.root = root.resolve()
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.force = asyncio.Event()

    async def snapshots(self, stop: asyncio.Event) -> AsyncGenerator[Snapshot, None]:
        dirty, watch_stop = asyncio.Event(), asyncio.Event()
        watcher = asyncio.create_task(self._watch(dirty, watch_stop), name="definitions-watcher")
        # One loop turn runs the watcher task up to its first wait: by then watchfiles has registered
        # the directory (it does so synchronously when iteration starts), so no edit can slip between.
        await asyncio.sleep(0)
        try:
            yield Snapshot(self.root, None)
            while not stop.is_set():
                await _first_of(stop, dirty, self.force)
                if stop.is_set():
                    return
                forced = self.force.is_set()
                self.force.clear()
                dirty.clear()
                yield Snapshot(self.root, None, forced=forced)
        finally:
            watch_stop.set()  # ends the watch thread within one step
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self, dirty: asyncio.Event, watch_stop: asyncio.Event) -> None:
        """Set ``dirty`` after every relevant batch of edits, and when the root vanishes or reappears."""
        while not watch_stop.is_set():
            if not self.root.exists():
                # watchfiles cannot watch a missing path: poll for it to (re)appear.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watch_stop.wait(), 1.0)
                if self.root.exists():
                    dirty.set()
                continue
            try:
                async for changes in awatch(
                    self.root,
                    debounce=self.debounce_ms,
                    step=self.step_ms,
                    stop_event=watch_stop,
                    recursive=True,
                    ignore_permission_denied=True,
                ):
                    if any(_relevant(c, self.root) for c in changes):
                        dirty.set()
                    if not self.root.exists():
                        break
            except FileNotFoundError:
                log.warning('{"msg": "definitions directory vanished", "path": "%s"}', self.root)
            if not self.root.exists():
                dirty.set()  # report the vanished tree (apply refuses it)


async def _first_of(*events: asyncio.Event) -> None:
    waits = {asyncio.create_task(e.wait()) for e in events}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
