"""Times and durations as the console shows them (docs/console.md, "Times"): relative ("3 min ago") with
the exact UTC time on hover, rendered here and refreshed by ``static/console.js`` with the same wording.

A page renders ``{{ ui.ago(value) }}`` (``_macros.html``): a ``<time datetime=… title=…>`` whose text is
:func:`relative` against the clock of the request that rendered it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class Moment:
    """One timestamp for a ``<time>`` element: ``iso`` (its ``datetime``), ``exact`` (its ``title``) and
    ``text`` (what it says)."""

    iso: str
    exact: str
    text: str


def parse(value: dt.datetime | str | None) -> dt.datetime | None:
    """A datetime from a store value or an API string (RFC 3339, ``Z`` or an offset); naive means UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def relative(value: dt.datetime, now: dt.datetime) -> str:
    """``just now``, ``4 min ago``, ``3 h ago``, ``2 days ago``, ``in 5 min``; past 30 days, the date."""
    seconds = (now - value).total_seconds()
    ahead, span = seconds < 0, abs(seconds)
    if span < 45:
        return "just now"
    if span < 3600:
        amount = f"{max(1, round(span / 60))} min"
    elif span < 86400:
        amount = f"{round(span / 3600)} h"
    elif span < 30 * 86400:
        days = round(span / 86400)
        amount = f"{days} day{'' if days == 1 else 's'}"
    else:
        return value.strftime("%Y-%m-%d")
    return f"in {amount}" if ahead else f"{amount} ago"


def moment(value: dt.datetime | str | None, now: dt.datetime) -> Moment | None:
    """What ``ui.ago`` renders for ``value`` (None when unset)."""
    at = parse(value)
    if at is None:
        return None
    iso = at.isoformat(timespec="seconds").replace("+00:00", "Z")
    return Moment(iso, at.strftime("%Y-%m-%d %H:%M:%S UTC"), relative(at, parse(now) or now))


def duration(start: dt.datetime | str | None, end: dt.datetime | str | None) -> str | None:
    """How long from ``start`` to ``end``: ``0.4 s``, ``12 s``, ``3 min 4 s``, ``2 h 5 min`` (None when
    either is unset)."""
    begin, finish = parse(start), parse(end)
    if begin is None or finish is None:
        return None
    seconds = max(0.0, (finish - begin).total_seconds())
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


__all__ = ["Moment", "duration", "moment", "parse", "relative"]
