"""The clock boundary: production uses the system clock; tests inject a fixed or manual one."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """Current time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (for durations and deadlines)."""


class SystemClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to: for tests of windows and leases, and to stamp work with a time
    decided earlier (a schedule's run is created at its fire's ``now``)."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        self._mono = 1000.0

    def now(self) -> dt.datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)
        self._mono += seconds


def rfc3339(value: dt.datetime | None) -> str | None:
    """RFC 3339 UTC with a ``Z`` suffix and millisecond precision, or None."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SHOWN = dt.timedelta(milliseconds=1)  # the precision of rfc3339(), what the API shows


def _shown(value: dt.datetime) -> dt.datetime:
    """``value`` as :func:`rfc3339` shows it: truncated to the millisecond."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def first_shown_after(bound: dt.datetime) -> dt.datetime | None:
    """The earliest stored time that the API shows after ``bound`` (``stored >= this``), or None when no
    time is: a time filter compares what the API shows (docs/api.md, "Runs"), so a client passing back a
    ``created_at`` it was shown never gets that run again, whatever its stored sub-millisecond part."""
    try:
        return _shown(bound) + _SHOWN
    except OverflowError:  # the bound is in the last millisecond of year 9999
        return None


def first_shown_at_or_after(bound: dt.datetime) -> dt.datetime | None:
    """The earliest stored time the API does *not* show before ``bound`` (``stored < this`` is "shown
    before"), or None when every time is shown before it."""
    floor = _shown(bound)
    if floor == bound:
        return bound
    try:
        return floor + _SHOWN
    except OverflowError:
        return None


async def stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set, whichever comes first; whether it is set. The sleep of every
    background loop that must end promptly on shutdown."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
