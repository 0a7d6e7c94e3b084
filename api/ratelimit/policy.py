"""Per-webhook rate limits (docs/ingress.md, "Limits"): a sliding-window approximation over fixed windows.

Storage keeps one integer per (key, window start) and the policy weighs the previous window by how
much of it still overlaps the sliding window: ``estimate = previous * (1 - elapsed) + current``. That
smooths the burst a pure fixed window allows at a boundary (2x the limit in a few seconds) without
storing timestamps. On SQLite the integers are this process's (:class:`MemoryCounter`); on PostgreSQL
they are ``rate_counters`` rows counting the capacity that replicas have leased in chunks
(:mod:`api.ratelimit.leases`, :mod:`api.ratelimit.counters`), under the same estimate.

Only admitted events count: :func:`consume` takes back a rejected hit with ``undo``, so a sender
that ignores ``Retry-After`` still gets its full quota through, and ``Retry-After`` is exactly the
wait after which one more event fits if nothing else arrives (:func:`wait_seconds`, rounded up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

DEFAULT_WINDOW_SECONDS = 60
EPSILON = 1e-9  # an estimate this close above the limit still fits (float noise of the weighting)


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


def previous_weight(elapsed: float) -> float:
    """How much of the previous window still overlaps the sliding one when ``elapsed`` of this one is gone."""
    return 1.0 - min(max(elapsed, 0.0), 1.0)


def retry_after(wait: float) -> int:
    """``Retry-After`` for an exact wait in seconds: whole seconds, at least 1."""
    return max(1, math.ceil(wait - EPSILON))


def decide(limit: int, window_seconds: int, current: int, previous: int, elapsed: float) -> Decision:
    """Admit an event or not.

    ``current`` is the current window's count including this event, ``previous`` the previous
    window's count, ``elapsed`` the fraction of the current window gone by. Allowed while the
    weighted estimate is at most ``limit``, so exactly ``limit`` events per window pass.
    ``retry_after`` assumes this event is not counted (see :func:`consume`) and nothing else
    arrives meanwhile.
    """
    estimate = previous * previous_weight(elapsed) + current
    wait = wait_seconds(limit, window_seconds, current, previous, elapsed)
    if wait <= 0.0:
        return Decision(True, None, estimate)
    return Decision(False, retry_after(wait), estimate)


def wait_seconds(limit: int, window_seconds: int, current: int, previous: int, elapsed: float) -> float:
    """Exact seconds until :func:`decide` would admit the same event (0.0 when it admits it now).

    :func:`decide`'s ``retry_after`` is this, rounded up to whole seconds. Where counts never go down
    (leased counts), nothing can fit sooner: the process-local refusals of :mod:`api.ratelimit.leases`
    rely on that.
    """
    if limit < 1 or window_seconds < 1:
        raise ValueError("limit and window_seconds must be at least 1")
    remaining = previous_weight(elapsed)
    if previous * remaining + current <= limit + EPSILON:
        return 0.0
    if current <= limit:
        # Only the previous window's tail is in the way: wait until it has slid out far enough.
        return window_seconds * (remaining - (limit - current) / previous)
    # This window is full (``current - 1`` counted events); in the next one they become the previous
    # window and must decay until one more event fits.
    admitted = current - 1
    return window_seconds * (remaining + max(0.0, 1.0 - (limit - 1) / admitted))


class Counter(Protocol):
    """Fixed-window counters (:class:`MemoryCounter`).

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


class Limiter(Protocol):
    """What the ingress asks of its limits: :class:`MemoryCounter` on SQLite, ``LeasedCounter`` on
    PostgreSQL (:mod:`api.ratelimit.counters`).

    ``consume`` counts one event for ``key`` unless that would exceed ``limit`` per sliding window;
    ``check`` answers whether one more event would still fit, without counting it (the failed-request
    budget is checked on every request but spent only by failures).
    """

    async def consume(self, key: str, limit: int, now_epoch: float) -> Decision: ...

    async def check(self, key: str, limit: int, now_epoch: float) -> Decision: ...


class MemoryCounter:
    """In-process :class:`Counter` and :class:`Limiter` for single-process runs (SQLite) and tests: exact,
    not shared across replicas.

    Each key keeps only its current and previous windows, and a key with neither is forgotten (swept once
    per window): keys are client addresses too (:mod:`api.auth_failures`), which a sender can vary.
    """

    def __init__(self, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        if window_seconds < 1:
            raise ValueError("window_seconds must be at least 1")
        self._window = window_seconds
        self._counts: dict[str, dict[int, int]] = {}
        self._swept: int | None = None

    def __len__(self) -> int:
        return len(self._counts)

    @property
    def window_seconds(self) -> int:
        return self._window

    async def hit(self, key: str, now_epoch: float) -> tuple[int, int]:
        start, _ = window_position(now_epoch, self._window)
        self._sweep(start)
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

    def _sweep(self, start: int) -> None:
        """Once per window: forget keys whose newest count is older than the previous window."""
        if start == self._swept:
            return
        self._swept = start
        oldest = start - self._window
        for key in [k for k, windows in self._counts.items() if max(windows, default=oldest - 1) < oldest]:
            del self._counts[key]

    async def peek(self, key: str, now_epoch: float) -> tuple[int, int]:
        """(current, previous) counts without counting an event."""
        start, _ = window_position(now_epoch, self._window)
        windows = self._counts.get(key, {})
        return windows.get(start, 0), windows.get(start - self._window, 0)

    async def consume(self, key: str, limit: int, now_epoch: float) -> Decision:
        """:class:`Limiter`: :func:`consume` on this counter."""
        return await consume(self, key, limit, now_epoch)

    async def check(self, key: str, limit: int, now_epoch: float) -> Decision:
        """:class:`Limiter`: whether one more event would fit, from the exact counts."""
        current, previous = await self.peek(key, now_epoch)
        _, elapsed = window_position(now_epoch, self._window)
        return decide(limit, self._window, current + 1, previous, elapsed)
