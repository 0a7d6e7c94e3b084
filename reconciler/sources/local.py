"""A local factory directory, re-read whenever a file under it changes (watchfiles, debounced)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
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
    """Yields the directory once at start, then after every debounced batch of relevant edits."""

    def __init__(self, root: Path, *, debounce_ms: int = 300, step_ms: int = 50) -> None:
        self.root = root.resolve()
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.force = asyncio.Event()

    async def snapshots(self, stop: asyncio.Event) -> AsyncIterator[Snapshot]:
        yield Snapshot(self.root, None)
        while not stop.is_set():
            if not self.root.exists():
                # watchfiles cannot watch a missing path: wait for it to (re)appear.
                await self._sleep_or_wake(stop, 1.0)
                if self.root.exists() or self.force.is_set():
                    self.force.clear()
                    yield Snapshot(self.root, None, forced=True)
                continue
            watch_stop = asyncio.Event()
            relay = asyncio.create_task(self._relay(stop, watch_stop))
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
                        yield Snapshot(self.root, None)
                    if not self.root.exists():
                        break
            except FileNotFoundError:
                log.warning('{"msg": "definitions directory vanished", "path": "%s"}', self.root)
            finally:
                watch_stop.set()
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay
            if stop.is_set():
                return
            if self.force.is_set():
                self.force.clear()
                yield Snapshot(self.root, None, forced=True)
            elif not self.root.exists():
                yield Snapshot(self.root, None)  # report the vanished tree (apply refuses it)

    async def _relay(self, stop: asyncio.Event, watch_stop: asyncio.Event) -> None:
        """Stop the watcher on shutdown, and wake it on a forced reconcile."""
        stop_wait = asyncio.create_task(stop.wait())
        force_wait = asyncio.create_task(self.force.wait())
        try:
            await asyncio.wait({stop_wait, force_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            force_wait.cancel()
        watch_stop.set()  # shutdown, or a forced reconcile: end this watch round either way

    async def _sleep_or_wake(self, stop: asyncio.Event, seconds: float) -> None:
        waits = {asyncio.create_task(stop.wait()), asyncio.create_task(self.force.wait())}
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
