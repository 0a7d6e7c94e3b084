"""Cron schedules: parse five-field expressions and compute fire times in a time zone (pure, no I/O).

Syntax is crontab(5) (Vixie cron): ``minute hour day-of-month month day-of-week``, each field a comma list
of ``*``, ``N``, ``N-M``, ``*/S``, ``N-M/S`` or ``N/S`` (from N to the field's maximum); JAN-DEC and SUN-SAT
in values and ranges; day of week 7 is Sunday. Macros (``@daily``) and seconds fields are refused, so an
expression means the same thing in every cron dialect. A step that spans the whole field is refused
(``*/90`` in the minute field would only ever select minute 0).

A field is a *wildcard* when its text starts with ``*`` (``*`` or ``*/S``), as in Vixie cron and cronie.
Days: when neither day of month nor day of week is a wildcard, a day matches if either matches; otherwise
both must (so ``0 0 */2 * MON`` means odd-numbered days that are Mondays, as in Vixie cron).

Daylight saving time. Fire times are wall-clock times in the schedule's zone, converted to UTC instants.

- Fixed-hour schedules (the hour field is not a wildcard, e.g. ``30 2 * * *``): a nightly job is never
  skipped or doubled by a DST change. A wall time that does not exist (the clock jumps forward) fires once,
  at the first instant after the jump; several such times in one gap, and a time exactly at the gap end,
  are that same single fire. A wall time that occurs twice (the clock falls back) fires at its first
  occurrence only.
- Wildcard-hour schedules (``*/15 * * * *``, ``0 */2 * * *``) follow elapsed time: a repeated hour fires
  at both occurrences (they are different instants) and times inside a gap never happen, so never fire.

The minute field plays no part in this choice (``*/15 2 * * *`` is a fixed-hour schedule). Searches reach
10 years (3653 days) ahead or back. At most one UTC offset change per local day is assumed, as in all
real-world DST rules.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import zoneinfo
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

FIELD_NAMES: tuple[str, ...] = ("minute", "hour", "day of month", "month", "day of week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                "October", "November", "December")  # fmt: skip
_NAMES: dict[int, dict[str, int]] = {
    3: {name[:3].upper(): i for i, name in enumerate(_MONTH_NAMES, 1)},
    4: {day: i for i, day in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))},
}
_NAME_HINT = {3: " or month name (JAN-DEC)", 4: " or weekday name (SUN-SAT)"}
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0"}
_MACROS |= {"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_FIVE = "use five fields (minute hour day-of-month month day-of-week)"
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")  # no '.', no leading '/', no NUL
_HORIZON = dt.timedelta(days=3653)
_DAY = dt.timedelta(days=1)
_SECOND = dt.timedelta(seconds=1)


class CronError(ValueError):
    """A cron expression or time zone that cannot be used."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # one of FIELD_NAMES, or None for the whole expression or the time zone
        self.message = message


@dataclass(frozen=True)
class CronExpression:
    """A parsed expression: the values each field selects, and which fields were wildcards."""

    expression: str  # as given, stripped
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0=Sunday..6 (7 is folded into 0)
    day_any: bool  # day-of-month text starts with '*' ('*' or '*/S'): the day rule ANDs instead of ORs
    weekday_any: bool  # the same for day of week
    hour_any: bool  # hour text starts with '*': wildcard-hour DST rule (see the module docstring)


def parse(expression: str) -> CronExpression:
    """Parse a five-field expression; :class:`CronError` names the field and value that are wrong."""
    text = expression.strip()
    if not text:
        raise CronError(f"empty cron expression: {_FIVE}, e.g. '0 3 * * *'")
    fields = text.split()
    if text.startswith("@"):
        macro = fields[0][:20]
        hint = f"; {macro} is '{_MACROS[macro.lower()]}'" if macro.lower() in _MACROS else ""
        raise CronError(f"{macro} is not supported: {_FIVE}{hint}")
    shown = text if len(text) <= 80 else text[:77] + "..."
    if len(fields) != 5:
        extra = "; seconds and years fields are not supported" if len(fields) > 5 else ""
        raise CronError(f"{len(fields)} fields in '{shown}': {_FIVE}{extra}")
    minutes, hours, days, months, weekdays = (_field(i, f, shown) for i, f in enumerate(fields))
    star = [f.startswith("*") for f in fields]
    if star[4] and not any(d <= _MONTH_DAYS[m - 1] for m in months for d in days):
        names = ", ".join(_MONTH_NAMES[m - 1] for m in sorted(months))
        problem = f"{fields[2]} never occurs in the selected months ({names})"
        raise CronError(f"day of month: {problem} (field 3 of 5 in '{shown}')", field="day of month")
    return CronExpression(text, minutes, hours, days, months, weekdays, star[2], star[4], star[1])


def _field(index: int, text: str, shown: str) -> frozenset[int]:
    name, (low, high) = FIELD_NAMES[index], _BOUNDS[index]
    top = 6 if index == 4 else high  # where '*' and 'N/S' end: 7 is Sunday again

    def fail(problem: str) -> NoReturn:
        raise CronError(f"{name}: {problem} (field {index + 1} of 5 in '{shown}')", field=name)

    def value(token: str, item: str) -> int:
        if token.upper() in _NAMES.get(index, {}):
            return _NAMES[index][token.upper()]
        if not token:
            fail(f"'{item}' is incomplete")
        if not (token.isascii() and token.isdigit()):
            fail(f"'{token[:20]}' is not a number{_NAME_HINT.get(index, '')}")
        if not low <= _number(token) <= high:
            fail(f"{token[:20]} is out of range {low}-{high}")
        return int(token)

    values: set[int] = set()
    for item in text.split(","):
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()):
                fail(f"step '{step_text[:20]}' in '{item[:40]}' is not a number")
            step = _number(step_text)
            if step < 1:
                fail(f"step {step} in '{item}' must be at least 1")
            if step > top - low:
                fail(f"step {step_text[:20]} in '{item[:40]}' is too large (at most {top - low})")
        if not base:
            fail("empty list item" if not item else f"'{item}' has no value before '/'")
        if base == "*":
            start, end = low, top
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = value(first, item), value(last, item)
            if start > end:
                sunday = "; Sunday is 0 or 7" if index == 4 else ""
                fail(f"range {base} is reversed ({first} is after {last}){sunday}")
        else:
            start = value(base, item)
            end = top if slash else start
        values.update(range(start, end + 1, step))
    if 7 in values and index == 4:
        values = (values - {7}) | {0}
    return frozenset(values)


def _number(digits: str) -> int:
    return int(digits) if len(digits) < 10 else 10**9  # int() of a huge string is slow or refused


@functools.cache
def _zone_names() -> dict[str, str]:
    # 'localtime' is the host's own zone (a symlink out of the database), never a schedule's.
    names = zoneinfo.available_timezones() - {"localtime", "posixrules"}
    return {name.lower(): name for name in names}


def zone(name: str) -> zoneinfo.ZoneInfo:
    """An IANA zone; the name is hostile input, so only listed names ever reach ZoneInfo's file lookup."""
    known = _zone_names().get(name.lower()) if len(name) <= 100 and _ZONE_NAME.fullmatch(name) else None
    if known == name:
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
    shown = repr(name if len(name) <= 100 else name[:60] + "...")
    hint = f"did you mean '{known}'?" if known else "use an IANA name such as UTC or Europe/Berlin"
    raise CronError(f"unknown time zone {shown} ({hint})")


def next_fire(cron: CronExpression, tz: zoneinfo.ZoneInfo, after: dt.datetime) -> dt.datetime | None:
    """The first fire strictly after ``after`` (aware), in UTC; None if there is none within 10 years."""
    start = _naive_utc(after, "after")
    limit = start + _HORIZON
    for day in _days(cron, _local_date(tz, start) - _DAY, _local_date(tz, limit) + _DAY, forward=True):
        found = _on_day(cron, tz, day, start, forward=True)
        if found is None:
            continue
        if cron.hour_any and _day_ok(cron, day + _DAY):  # a repeated hour could cross midnight
            found = min(found, _on_day(cron, tz, day + _DAY, start, forward=True) or found)
        return found.replace(tzinfo=dt.UTC) if found <= limit else None
    return None


def latest_fire(
    cron: CronExpression, tz: zoneinfo.ZoneInfo, at_or_before: dt.datetime, *, after: dt.datetime
) -> dt.datetime | None:
    """The most recent fire in ``(after, at_or_before]`` (looking back at most 10 years), in UTC, or None.

    For catch-up after downtime, where many missed ticks fire once; scans backwards, so weeks are cheap.
    """
    end = _naive_utc(at_or_before, "at_or_before")
    floor = max(_naive_utc(after, "after"), end - _HORIZON)
    if end <= floor:
        return None
    for day in _days(cron, _local_date(tz, end) + _DAY, _local_date(tz, floor) - _DAY, forward=False):
        found = _on_day(cron, tz, day, end, forward=False)
        if found is None:
            continue
        if cron.hour_any and _day_ok(cron, day - _DAY):
            found = max(found, _on_day(cron, tz, day - _DAY, end, forward=False) or found)
        return found.replace(tzinfo=dt.UTC) if found > floor else None
    return None


def _naive_utc(value: dt.datetime, name: str) -> dt.datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def _local_date(tz: zoneinfo.ZoneInfo, instant: dt.datetime) -> dt.date:
    return tz.fromutc(instant.replace(tzinfo=tz)).date()


def _wall_offset(tz: zoneinfo.ZoneInfo, wall: dt.datetime, fold: int = 0) -> dt.timedelta:
    """The offset for a naive wall time; fold=0 is the earlier reading (in a gap: the offset before it)."""
    return tz.utcoffset(wall.replace(fold=fold)) or dt.timedelta(0)


def _offset_at(tz: zoneinfo.ZoneInfo, instant: dt.datetime) -> dt.timedelta:
    return tz.fromutc(instant.replace(tzinfo=tz)).utcoffset() or dt.timedelta(0)


def _day_ok(cron: CronExpression, day: dt.date) -> bool:
    if day.month not in cron.months:
        return False
    dom, dow = day.day in cron.days, day.isoweekday() % 7 in cron.weekdays
    return (dom and dow) if cron.day_any or cron.weekday_any else (dom or dow)


def _days(cron: CronExpression, first: dt.date, last: dt.date, *, forward: bool) -> Iterator[dt.date]:
    """Matching dates from ``first`` towards ``last`` (inclusive), skipping unselected months whole."""
    day, step = first, (_DAY if forward else -_DAY)
    while day <= last if forward else day >= last:
        if day.month not in cron.months:
            day = (day.replace(day=28) + 4 * _DAY).replace(day=1) if forward else day.replace(day=1) - _DAY
            continue
        if _day_ok(cron, day):
            yield day
        day += step


def _fixed_instant(tz: zoneinfo.ZoneInfo, wall: dt.datetime) -> dt.datetime:
    """Fixed-hour rule: a repeated wall time maps to its first occurrence, a skipped one to the jump."""
    instant = wall - _wall_offset(tz, wall)  # fold=0: first occurrence; in a gap, past the jump
    after_jump = _offset_at(tz, instant)
    if instant + after_jump == wall:
        return instant
    before = wall - _wall_offset(tz, wall, fold=1)  # in a gap, before the jump: bisect to the second
    low, high = 0, int((instant - before).total_seconds())
    while high - low > 1:
        mid = (low + high) // 2
        if _offset_at(tz, before + mid * _SECOND) == after_jump:
            high = mid
        else:
            low = mid
    return before + high * _SECOND


def _on_day(
    cron: CronExpression, tz: zoneinfo.ZoneInfo, day: dt.date, bound: dt.datetime, *, forward: bool
) -> dt.datetime | None:
    """Among the fires whose wall date is ``day``: the first after ``bound`` (forward) or the last at or
    before it, as naive UTC. Bisects over the day's sorted wall times, so no per-minute work."""
    hours, minutes = sorted(cron.hours), sorted(cron.minutes)
    count, per = len(hours) * len(minutes), len(minutes)
    midnight = dt.datetime(day.year, day.month, day.day)

    def wall(i: int) -> dt.datetime:
        return midnight.replace(hour=hours[i // per], minute=minutes[i % per])

    def pick(instant: Callable[[int], dt.datetime], low: int = 0, high: int = count) -> dt.datetime | None:
        i = bisect_right(range(count), bound, low, high, key=instant) - (0 if forward else 1)
        return instant(i) if low <= i < high else None

    before, after = _wall_offset(tz, midnight), _wall_offset(tz, midnight + _DAY)
    if before == after:  # no offset change today
        return pick(lambda i: wall(i) - before)
    if not cron.hour_any:
        return pick(lambda i: _fixed_instant(tz, wall(i)))
    # Wildcard hour on a change day: times read with the old offset (a prefix of the day's walls) and
    # with the new one (a suffix); a repeated time is in both, a skipped one in neither.
    old_end = bisect_left(range(count), True, key=lambda i: _offset_at(tz, wall(i) - before) != before)
    new_start = bisect_left(range(count), True, key=lambda i: _offset_at(tz, wall(i) - after) == after)
    found = [
        f
        for f in (pick(lambda i: wall(i) - before, 0, old_end), pick(lambda i: wall(i) - after, new_start))
        if f is not None
    ]
    return (min if forward else max)(found, default=None)


# --- Inline schedule triggers (schedule/cron_fired ``schedule.cron``) --------------------------------

_EVERY = re.compile(r"(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?")
# Intervals a clock-aligned expression repeats exactly: divisors of an hour, then divisors of a day.
_EVERY_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440)
_EVERY_HINT = ", ".join(f"{m}m" if m < 60 else f"{m // 60}h" for m in _EVERY_MINUTES)


def expression_for_trigger(text: str) -> str:
    """The five-field expression an inline ``schedule.cron`` means, always read in UTC.

    Besides five fields, a trigger may use a descriptor: ``@hourly``, ``@daily``/``@midnight``,
    ``@weekly``, ``@monthly``, ``@yearly``/``@annually``, or ``@every <duration>`` (Go duration units
    ``h``, ``m``, ``s``, e.g. ``15m``, ``2h``). ``@every`` becomes a clock-aligned expression
    (``@every 15m`` fires at :00, :15, :30, :45, not 15 minutes after the schedule was created), so only
    intervals that divide an hour or a day are accepted: a five-field expression cannot repeat every 7
    minutes or every 5 hours. ``CRON_TZ=``/``TZ=`` prefixes and the six-field form with seconds are
    refused. ``schedules/*.yaml`` still takes five fields only (:func:`parse`).
    """
    stripped = text.strip()
    upper = stripped.upper()
    if upper.startswith(("CRON_TZ=", "TZ=")):
        raise CronError(
            f"'{stripped.split()[0][:40]}' is not supported: inline schedules always run in UTC; remove the "
            "prefix, or use a schedules/<name>.yaml file with a timezone"
        )
    if stripped.startswith("@"):
        return _descriptor(stripped)
    fields = stripped.split()
    if len(fields) == 6:
        raise CronError(f"six fields in '{stripped[:80]}': seconds are not supported; {_FIVE}")
    return " ".join(parse(stripped).expression.split())


def _descriptor(text: str) -> str:
    word, _, rest = text.partition(" ")
    word = word.lower()
    if word in _MACROS and not rest.strip():
        return _MACROS[word]
    if word != "@every":
        known = ", ".join(sorted(_MACROS))
        raise CronError(
            f"unknown descriptor '{text[:40]}': use {known} or '@every <duration>', "
            "or five fields (minute hour day-of-month month day-of-week)"
        )
    duration = rest.strip()
    found = _EVERY.fullmatch(duration)
    if not duration or found is None:
        hint = "; days are written in hours (24h)" if duration.endswith("d") else ""
        shown = f"@every {duration[:40]}".strip()
        raise CronError(f"'{shown}' needs a duration such as 15m or 2h{hint}")
    hours, minutes, seconds = (int(part or 0) for part in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total % 60 or total // 60 not in _EVERY_MINUTES:
        raise CronError(
            f"'@every {duration}' cannot be written as a five-field cron expression; "
            f"intervals that work: {_EVERY_HINT}"
        )
    step = total // 60
    if step < 60:
        return "* * * * *" if step == 1 else f"*/{step} * * * *"
    step //= 60
    if step == 24:
        return "0 0 * * *"
    return "0 * * * *" if step == 1 else f"0 */{step} * * *"
