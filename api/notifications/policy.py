"""When a notification is attempted again (docs/notifications.md, "Retries"): pure, so tests can pin it.

The schedule follows what Standard Webhooks senders do: after the first attempt fails, retry after
5 seconds, 5 minutes, 30 minutes, 2 hours, 5 hours, 10 hours and 10 hours (8 attempts over about 28 hours),
each delay spread by ±20% jitter so that endpoints recovering from an outage are not hit by every message at
once. A ``Retry-After`` on a 429 or 503 answer moves the next attempt later (never earlier), capped at the
schedule's longest step. After the last attempt the message is ``failed``; it can be re-sent by hand.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

RETRY_SCHEDULE: Final = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
RETRY_AFTER_STATUSES: Final = frozenset({429, 503})


@dataclass(frozen=True)
class NotificationSettings:
    """The sender's knobs (docs/notifications.md, "Settings"); tests shorten the schedule and intervals."""

    retry_schedule: tuple[float, ...] = RETRY_SCHEDULE  # delays after attempt 1, 2, ...
    jitter: float = 0.2  # each delay is multiplied by a factor in [1 - jitter, 1 + jitter]
    timeout_seconds: float = 15.0  # one attempt, connect to last byte read
    connect_timeout_seconds: float = 5.0
    poll_seconds: float = 0.25  # how often the fan-out and the claim look for work when idle
    fanout_batch: int = 2000  # run events read per fan-out query
    max_in_flight: int = 64  # concurrent attempts per replica
    failing_after: int = 10  # consecutive failed attempts that mark an endpoint failing
    excerpt_bytes: int = 500  # of a response body kept with the attempt
    allow_loopback: bool = True  # connect-time check: may a connection reach this host's loopback?
    random: Callable[[], float] = field(default=random.random, compare=False)

    @property
    def attempts(self) -> int:
        """Attempts a message gets on its schedule (the first, then one per delay)."""
        return 1 + len(self.retry_schedule)

    @property
    def lease_seconds(self) -> float:
        """How long a claim holds a message: past the attempt's deadline with room to record the result;
        a sender that died mid-attempt leaves the message due again after this."""
        return 2 * self.timeout_seconds + 5.0


def retry_after_seconds(value: str | None, now: dt.datetime) -> float | None:
    """A ``Retry-After`` header as seconds from ``now`` (delta-seconds or an HTTP date); None if absent or
    unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text[:12]))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max((when - now).total_seconds(), 0.0)


def next_delay(
    settings: NotificationSettings, attempts_made: int, *, retry_after: float | None = None
) -> float | None:
    """Seconds until the next attempt after ``attempts_made`` failed ones; None when none is left."""
    if attempts_made < 1 or attempts_made > len(settings.retry_schedule):
        return None
    base = settings.retry_schedule[attempts_made - 1]
    spread = 1.0 + settings.jitter * (2.0 * settings.random() - 1.0)
    delay = base * spread
    if retry_after is not None:
        delay = max(delay, min(retry_after, max(settings.retry_schedule)))
    return delay


__all__ = [
    "RETRY_AFTER_STATUSES",
    "RETRY_SCHEDULE",
    "NotificationSettings",
    "next_delay",
    "retry_after_seconds",
]
