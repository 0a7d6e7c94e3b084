"""One reader per team for the team streams of an app (docs/events.md, "Team stream").

Each open team stream (the API's ``/events`` and the console's runs feed) used to read every new event of
its team itself: twenty dashboards read each event twenty times, and under load that was the largest
share of the event loop (docs/benchmarks.md, "Sustained load"). A :class:`TeamFeed` reads the team's new
events once, in the same (txid, id) order below the commit horizon (:func:`api.runs.events.read_ordered`),
keeps the newest of them in a window, and hands them to every stream whose position lies inside the
window. A stream behind the window (resumed from an old cursor, or too slow to keep up) reads the store
itself, as before, until its position reaches the window; a stream ahead of it (one that started live
after the feed last read) moves the window to its position. So every stream still sees each event once and
in order; only who runs the query changes.
"""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs import events
from api.runs.claim_signal import ClaimSignal
from store.models import RunEvent

WINDOW_BATCHES = 4  # the window holds this many batches of the newest events


@dataclass(frozen=True)
class Batch:
    """Events after a stream's position, and whether more may follow at once (read again, do not wait)."""

    rows: list[RunEvent]
    more: bool


class TeamFeed:
    """A team's newest events, read once for every stream of the team in this process.

    The window holds every readable event of the team in ``(base, head]``; ``read_wake`` is the hub's
    wake-up event that was current when the last read began: a stream holding that same event has been
    woken by nothing newer, so when the last read was not cut short by the batch size there is nothing to
    read again.
    """

    def __init__(self, team_id: str, batch: int) -> None:
        self.team_id, self.batch = team_id, batch
        self.capacity = batch * WINDOW_BATCHES
        self.users = 0
        self._positions: list[events.Position] = []
        self._rows: list[RunEvent] = []
        self._base: events.Position = events.START
        self._head: events.Position | None = None  # None: nothing read, no window yet
        self._complete = False
        self._read_wake: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def after(
        self,
        sessions: async_sessionmaker[AsyncSession],
        position: events.Position,
        signal: ClaimSignal,
        wake: asyncio.Event,
    ) -> Batch:
        """Up to a batch of the team's events after ``position``; ``wake`` is the ``signal`` event the
        stream took before this call (and waits on when the answer has no ``more``)."""
        if self._head is None or position > self._head:  # the first stream, or one ahead of the window
            async with self._lock:  # not in the middle of a read, which appends to the window
                if self._head is None or position > self._head:
                    self._reset(position)
        if position < self._base:  # behind the window: read the store itself, as a lone stream does
            async with sessions() as session:
                rows = await events.read_ordered(session, position, self.batch, team_id=self.team_id)
            return Batch(rows, len(rows) == self.batch)
        found = self._from_window(position, wake)
        if found.rows or not self._needs_read(wake):
            return found
        async with self._lock:
            if position < self._base:  # the window moved on while this stream waited
                return Batch([], True)
            found = self._from_window(position, wake)  # another stream may have read meanwhile
            if found.rows or not self._needs_read(wake):
                return found
            await self._read(sessions, signal.current())
            return self._from_window(position, wake)

    def _reset(self, position: events.Position) -> None:
        """An empty window at ``position`` (nothing after it read yet); streams behind it read alone."""
        self._positions, self._rows = [], []
        self._base = self._head = position
        self._complete, self._read_wake = False, None

    def _needs_read(self, wake: asyncio.Event) -> bool:
        """Whether the store may hold events after the window that a stream woken by ``wake`` must see."""
        return not (self._complete and self._read_wake is wake)

    def _from_window(self, position: events.Position, wake: asyncio.Event) -> Batch:
        start = bisect.bisect_right(self._positions, position)
        rows = self._rows[start : start + self.batch]
        at_head = start + len(rows) == len(self._rows)
        return Batch(rows, len(rows) == self.batch or (bool(rows) and at_head and self._needs_read(wake)))

    async def _read(self, sessions: async_sessionmaker[AsyncSession], current: asyncio.Event) -> None:
        assert self._head is not None  # a window exists: after() made one first
        async with sessions() as session:
            rows = await events.read_ordered(session, self._head, self.batch, team_id=self.team_id)
        self._read_wake, self._complete = current, len(rows) < self.batch
        if not rows:
            return
        self._rows.extend(rows)
        self._positions.extend(events.position_of(row) for row in rows)
        self._head = self._positions[-1]
        drop = len(self._rows) - self.capacity
        if drop > 0:
            self._base = self._positions[drop - 1]
            del self._rows[:drop], self._positions[:drop]


__all__ = ["Batch", "TeamFeed"]
