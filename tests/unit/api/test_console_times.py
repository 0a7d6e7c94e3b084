"""The console's relative times and durations (docs/console.md, "Times"); ``static/console.js`` words them
the same way."""

from __future__ import annotations

import datetime as dt

import pytest

from api.console.times import duration, moment, relative

NOW = dt.datetime(2026, 11, 26, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (dt.timedelta(seconds=10), "just now"),
        (dt.timedelta(seconds=50), "1 min ago"),
        (dt.timedelta(minutes=3, seconds=10), "3 min ago"),
        (dt.timedelta(hours=5), "5 h ago"),
        (dt.timedelta(days=1), "1 day ago"),
        (dt.timedelta(days=3), "3 days ago"),
        (dt.timedelta(days=40), "2026-10-17"),
        (-dt.timedelta(minutes=5), "in 5 min"),
        (-dt.timedelta(hours=2), "in 2 h"),
    ],
)
def test_relative(delta: dt.timedelta, words: str) -> None:
    assert relative(NOW - delta, NOW) == words


def test_moment_reads_store_values_and_api_strings_as_utc() -> None:
    naive = moment(dt.datetime(2026, 11, 26, 11, 57, 0), NOW)  # SQLite hands back naive UTC
    assert naive is not None and (naive.iso, naive.exact, naive.text) == (
        "2026-11-26T11:57:00Z",
        "2026-11-26 11:57:00 UTC",
        "3 min ago",
    )
    offset = moment("2026-11-26T13:57:00+02:00", NOW)
    assert offset is not None and offset.iso == "2026-11-26T11:57:00Z"
    assert moment(None, NOW) is None and moment("", NOW) is None and moment("not a time", NOW) is None


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(0.4, "0.4 s"), (12, "12 s"), (60, "1 min"), (184, "3 min 4 s"), (7500, "2 h 5 min"), (7200, "2 h")],
)
def test_duration(seconds: float, words: str) -> None:
    assert duration(NOW, NOW + dt.timedelta(seconds=seconds)) == words


def test_duration_needs_both_ends() -> None:
    assert duration(NOW, None) is None and duration(None, NOW) is None
    assert duration("2026-11-26T12:00:00Z", "2026-11-26T12:00:01.500000Z") == "1.5 s"
