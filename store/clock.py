"""The clock boundary: production uses the system clock; tests inject a fixed or manual one."""

from __future__ import annotations

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
