"""Per-webhook rate limits (docs/ingress.md, "Limits"): a sliding-window approximation over fixed windows.

Storage keeps one integer per (key, window start) - cheap to upsert in ``rate_counters`` from any
replica - and the policy weighs the previous window by how much of it still overlaps the sliding
window: ``estimate = previous * (1 - elapsed) + current``. That smooths the burst a pure fixed
window allows at a boundary (2x the limit in a few seconds) without storing timestamps.

Only admitted events count: :func:`consume` takes back a rejected hit with ``undo``, so a sender
that ignores ``Retry-After`` still gets its full quota through, and ``Retry-After`` is exactly the
wait after which one more event fits if nothing else arrives. Hit-then-undo (rather than
read-then-hit) never admits more than the limit when replicas race; they only see a count that is
briefly one too high.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

DEFAULT_WINDOW_SECONDS = 60
_EPSILON = 1e-9


@dataclass(frozen=True)
class Decision:
    """``retry_after`` is whole seconds (>= 1) when rejected, None when allowed."""

    allowed: bool
    retry_after: int | None
    estimate: float


def window_position(now_epoch: float, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> tuple[int, float]:
    """(start of the fixed window holding ``now_epoch``, in epoch seconds; elapsed fraction in [0, 1))."""
    start = math.floor(now_epoch / window_seconds) * window_seconds
    return start, (now_epoch - start) / window_seconds


def decide(limit: int, window_seconds: int, current: int, previous: int, elapsed: float) -> Decision:
    """Admit an event or not.

    ``current`` is the current window's count including this event, ``previous`` the previous
    window's count, ``elapsed`` the fraction of the current window gone by. Allowed while the
    weighted estimate is at most ``limit``, so exactly ``limit`` events per window pass.
    ``retry_after`` assumes this event is not counted (see :func:`consume`) and nothing else
    arrives meanwhile.
    """
    if limit < 1 or window_seconds < 1:
        raise ValueError("limit and window_seconds must be at least 1")
    remaining = 1.0 - min(max(elapsed, 0.0), 1.0)
    estimate = previous * remaining + current
    if estimate <= limit + _EPSILON:
        return Decision(True, None, estimate)
    if current <= limit:
        # Only the previous window's tail is in the way: wait until it has slid out far enough.
        wait = window_seconds * (remaining - (limit - current) / previous)
    else:
        # This window is full (``current - 1`` admitted events); in the next one they become the
        # previous window and must decay until one more event fits.
        admitted = current - 1
        wait = window_seconds * (remaining + max(0.0, 1.0 - (limit - 1) / admitted))
    return Decision(False, max(1, math.ceil(wait - _EPSILON)), estimate)


class Counter(Protocol):
    """Fixed-window counters; the store-backed one upserts ``rate_counters`` rows.

    ``hit`` adds one event for ``key`` in the window holding ``now_epoch`` and returns (that
    window's count, the previous window's count); ``undo`` takes one back from the window holding
    ``now_epoch`` (callers pass the same ``now_epoch`` as the matching ``hit``).
    """

    @property
    def window_seconds(self) -> int: ...

    async def hit(self, key: str, now_epoch: float) -> tuple[int, int]: ...

    async def undo(self, key: str, now_epoch: float) -> None: ...


async def consume(counter: Counter, key: str, limit: int, now_epoch: float) -> Decision:
    """Count one event for ``key`` against ``limit`` per window; rejected events are not kept."""
    current, previous = await counter.hit(key, now_epoch)
    _, elapsed = window_position(now_epoch, counter.window_seconds)
    decision = decide(limit, counter.window_seconds, current, previous, elapsed)
    if not decision.allowed:
        await counter.undo(key, now_epoch)
    return decision


class MemoryCounter:
    """In-process :class:`Counter` for tests and single-process runs (not shared across replicas).

    Each key keeps only its current and previous windows.
    """

    def __init__(self, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        if window_seconds < 1:
            raise ValueError("window_seconds must be at least 1")
        self._window = window_seconds
        self._counts: dict[str, dict[int, int]] = {}

    @property
    def window_seconds(self) -> int:
        return self._window

    async def hit(self, key: str, now_epoch: float) -> tuple[int, int]:
        start, _ = window_position(now_epoch, self._window)
        windows = self._counts.setdefault(key, {})
        for old in [w for w in windows if w < start - self._window]:
            del windows[old]
        windows[start] = windows.get(start, 0) + 1
        return windows[start], windows.get(start - self._window, 0)

    async def undo(self, key: str, now_epoch: float) -> None:
        start, _ = window_position(now_epoch, self._window)
        windows = self._counts.get(key, {})
        if windows.get(start, 0) > 0:
            windows[start] -= 1

    async def peek(self, key: str, now_epoch: float) -> tuple[int, int]:
        """(current, previous) counts without counting an event."""
        start, _ = window_position(now_epoch, self._window)
        windows = self._counts.get(key, {})
        return windows.get(start, 0), windows.get(start - self._window, 0)
