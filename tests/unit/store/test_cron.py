"""Cron policy (store/rules/cron.py): parsing, its error messages, fire times across month, year and leap-day
boundaries, the day-of-month/day-of-week rule, DST gaps and folds for fixed-hour and wildcard-hour
schedules in real zones, catch-up after downtime, and a property test against a minute-by-minute
reference built straight from the rules in the module docstring."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from store.rules.cron import FIELD_NAMES, CronError, CronExpression, latest_fire, next_fire, parse, zone

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expression: str, zone_name: str, start: str, count: int) -> list[str]:
    """The next ``count`` fires after ``start`` (UTC), as local ISO times with their offsets."""
    cron, tz, t = parse(expression), zone(zone_name), utc(start)
    out = []
    for _ in range(count):
        found = next_fire(cron, tz, t)
        assert found is not None
        out.append(found.astimezone(tz).isoformat(timespec="minutes"))
        t = found
    return out


def fires_between(
    expression: str, zone_name: str, start: dt.datetime, stop: dt.datetime
) -> list[dt.datetime]:
    cron, tz, t = parse(expression), zone(zone_name), start
    out = []
    while (found := next_fire(cron, tz, t)) is not None and found <= stop:
        out.append(found)
        t = found
    return out


# ---------------------------------------------------------------------------------------------- parsing

PARSED = [
    ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
    ("5,10-12,50-59/3 * * * *", "minutes", {5, 10, 11, 12, 50, 53, 56, 59}),
    ("10/20 * * * *", "minutes", {10, 30, 50}),
    ("0 9-17/4 * * *", "hours", {9, 13, 17}),
    ("0 */6 * * *", "hours", {0, 6, 12, 18}),
    ("0 0 */10 * *", "days", {1, 11, 21, 31}),
    ("0 0 1 JAN,jul *", "months", {1, 7}),
    ("0 0 1 Mar-May *", "months", {3, 4, 5}),
    ("0 0 1 */3 *", "months", {1, 4, 7, 10}),
    ("0 0 1 NOV/1 *", "months", {11, 12}),
    ("0 0 * * MON-FRI", "weekdays", {1, 2, 3, 4, 5}),
    ("0 0 * * sun", "weekdays", {0}),
    ("0 0 * * 7", "weekdays", {0}),
    ("0 0 * * 5-7", "weekdays", {5, 6, 0}),
    ("0 0 * * FRI-7", "weekdays", {5, 6, 0}),
    ("0 0 * * 1/2", "weekdays", {1, 3, 5}),
    ("0 0 * * */2", "weekdays", {0, 2, 4, 6}),
    ("0 0 * * *", "weekdays", {0, 1, 2, 3, 4, 5, 6}),
    ("* * * * *", "minutes", set(range(60))),
    ("* * * * *", "days", set(range(1, 32))),
]


@pytest.mark.parametrize(("expression", "attribute", "expected"), PARSED)
def test_parse_values(expression: str, attribute: str, expected: set[int]) -> None:
    assert getattr(parse(expression), attribute) == frozenset(expected)


def test_parse_keeps_the_stripped_expression_and_accepts_any_whitespace() -> None:
    parsed = parse("  0   3 * *\t1 \n")
    assert parsed.expression == "0   3 * *\t1"
    assert (parsed.minutes, parsed.hours, parsed.weekdays) == (frozenset({0}), frozenset({3}), frozenset({1}))


@pytest.mark.parametrize(
    ("expression", "hour_any", "day_any", "weekday_any"),
    [
        ("* * * * *", True, True, True),
        ("0 */2 */3 * */2", True, True, True),
        ("*/5 0-23 1 * 1", False, False, False),
        ("0 3 1-31 * 0-7", False, False, False),
    ],
)
def test_wildcard_flags_are_fields_starting_with_a_star(
    expression: str, hour_any: bool, day_any: bool, weekday_any: bool
) -> None:
    parsed = parse(expression)
    assert (parsed.hour_any, parsed.day_any, parsed.weekday_any) == (hour_any, day_any, weekday_any)


FIELD_ERRORS = [
    ("0 24 * * *", "hour", "24 is out of range 0-23"),
    ("60 * * * *", "minute", "60 is out of range 0-59"),
    ("* * 0 * *", "day of month", "0 is out of range 1-31"),
    ("* * 32 * *", "day of month", "32 is out of range 1-31"),
    ("* * * 13 *", "month", "13 is out of range 1-12"),
    ("* * * * 8", "day of week", "8 is out of range 0-7"),
    ("0 0-30 * * *", "hour", "30 is out of range 0-23"),
    ("5-1 * * * *", "minute", "range 5-1 is reversed"),
    ("* * * * FRI-MON", "day of week", "Sunday is 0 or 7"),
    ("*/0 * * * *", "minute", "step 0 in '*/0' must be at least 1"),
    ("*/90 * * * *", "minute", "step 90 in '*/90' is too large (at most 59)"),
    ("0 */24 * * *", "hour", "step 24"),
    ("0 0 * * */7", "day of week", "step 7"),
    ("*/x * * * *", "minute", "step 'x' in '*/x' is not a number"),
    ("/5 * * * *", "minute", "'/5' has no value before '/'"),
    ("1,,2 * * * *", "minute", "empty list item"),
    ("5- * * * *", "minute", "'5-' is incomplete"),
    ("? * * * *", "minute", "'?' is not a number"),
    ("* MON * * *", "hour", "'MON' is not a number"),
    ("* * * FOO *", "month", "'FOO' is not a number or month name (JAN-DEC)"),
    ("* * * * MONDAY", "day of week", "'MONDAY' is not a number or weekday name (SUN-SAT)"),
    ("* * * * JAN", "day of week", "'JAN' is not a number or weekday name"),
    ("* * L * *", "day of month", "'L' is not a number"),
    ("* * * * 5#3", "day of week", "'5#3' is not a number"),
    ("0 0 30 2 *", "day of month", "30 never occurs in the selected months (February)"),
    ("0 0 31 4,6,9,11 *", "day of month", "31 never occurs in the selected months (April, June, September"),
    ("0 0 30,31 FEB *", "day of month", "30,31 never occurs"),
    ("0 0 30 2 */6", "day of month", "never occurs"),
]


@pytest.mark.parametrize(("expression", "field", "fragment"), FIELD_ERRORS)
def test_field_errors_name_the_field_and_the_value(expression: str, field: str, fragment: str) -> None:
    with pytest.raises(CronError) as raised:
        parse(expression)
    error = raised.value
    position = FIELD_NAMES.index(field) + 1
    assert error.field == field
    assert error.message == str(error)
    assert error.message.startswith(f"{field}: ")
    assert fragment in error.message
    assert error.message.endswith(f"(field {position} of 5 in '{expression}')")


def test_field_error_message_is_exactly_readable() -> None:
    with pytest.raises(
        CronError, match=r"^hour: 24 is out of range 0-23 \(field 2 of 5 in '0 24 \* \* \*'\)$"
    ):
        parse("0 24 * * *")


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("", "empty cron expression"),
        ("  \t ", "empty cron expression"),
        ("@daily", "@daily is not supported: use five fields (minute hour day-of-month month day-of-week)"),
        ("@daily", "@daily is '0 0 * * *'"),
        ("@HOURLY", "@HOURLY is '0 * * * *'"),
        ("@weekly", "'0 0 * * 0'"),
        ("@reboot", "@reboot is not supported"),
        ("0 0 * * * *", "6 fields in '0 0 * * * *'"),
        ("0 0 * * * *", "seconds and years fields are not supported"),
        ("0 0 12 * * ? 2026", "7 fields"),
        ("0 0 * *", "4 fields in '0 0 * *': use five fields"),
        ("daily", "1 fields"),
    ],
)
def test_whole_expression_errors_have_no_field(expression: str, fragment: str) -> None:
    with pytest.raises(CronError) as raised:
        parse(expression)
    assert raised.value.field is None
    assert fragment in raised.value.message


def test_huge_values_are_refused_readably() -> None:
    for expression, fragment in [
        ("9" * 5000 + " * * * *", "is out of range 0-59"),
        ("*/" + "9" * 5000 + " * * * *", "too large"),
    ]:
        with pytest.raises(CronError) as raised:
            parse(expression)
        assert raised.value.field == "minute"
        assert fragment in raised.value.message
        assert len(raised.value.message) < 250


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(CronError, ValueError)


@pytest.mark.parametrize(
    "expression", ["0 0 30 2 1", "0 0 31 * *", "0 0 29 2 *", "0 0 31 1-2 *", "0 0 30 2 MON"]
)
def test_possible_or_weekday_rescued_day_combinations_parse(expression: str) -> None:
    assert isinstance(parse(expression), CronExpression)


# ------------------------------------------------------------------------------------------- time zones


def test_zone_returns_zoneinfo() -> None:
    assert zone("Europe/Berlin") == zoneinfo.ZoneInfo("Europe/Berlin")
    assert zone("UTC").key == "UTC"
    assert zone("America/Argentina/Buenos_Aires").key == "America/Argentina/Buenos_Aires"
    assert zone("Etc/GMT+5").key == "Etc/GMT+5"


def test_unknown_zone_message() -> None:
    with pytest.raises(CronError) as raised:
        zone("Mars/Base")
    assert raised.value.field is None
    assert (
        raised.value.message
        == "unknown time zone 'Mars/Base' (use an IANA name such as UTC or Europe/Berlin)"
    )


def test_wrong_case_zone_suggests_the_name() -> None:
    with pytest.raises(CronError, match=r"did you mean 'Europe/Berlin'\?"):
        zone("europe/berlin")


@pytest.mark.parametrize(
    "name",
    [
        "../../../etc/passwd",
        "Europe/../Europe/Berlin",
        "/usr/share/zoneinfo/UTC",
        "/etc/localtime",
        "Europe/Berlin\x00",
        "UTC\x00../x",
        "A" * 101,
        "Europe/" + "B" * 100,
        "",
        "Europe/Berlin/",
        "Europe//Berlin",
        "Europe\\Berlin",
        "localtime",
    ],
)
def test_hostile_zone_names_never_reach_the_filesystem(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(key: str) -> zoneinfo.ZoneInfo:
        raise AssertionError(f"ZoneInfo was asked for {key!r}")

    monkeypatch.setattr(zoneinfo, "ZoneInfo", refuse)
    with pytest.raises(CronError, match=r"^unknown time zone ") as raised:
        zone(name)
    assert raised.value.field is None
    assert len(raised.value.message) < 200


# ------------------------------------------------------------------------------------- basic fire times


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("* * * * *", "2026-05-05T12:00:30", "2026-05-05T12:01"),
        ("* * * * *", "2026-05-05T12:00:00", "2026-05-05T12:01"),
        ("* * * * *", "2026-12-31T23:59:59.999999", "2027-01-01T00:00"),
        ("0 0 1 1 *", "2026-12-31T23:59:59", "2027-01-01T00:00"),
        ("0 0 1 1 *", "2027-01-01T00:00", "2028-01-01T00:00"),
        ("59 23 31 12 *", "2026-01-01T00:00", "2026-12-31T23:59"),
        ("0 0 31 * *", "2026-04-15T00:00", "2026-05-31T00:00"),
        ("30 6 * 2 *", "2026-03-01T00:00", "2027-02-01T06:30"),
        ("0 0 29 2 *", "2026-01-01T00:00", "2028-02-29T00:00"),
        ("0 0 29 2 *", "2028-02-29T00:00", "2032-02-29T00:00"),
        ("0 0 29 2 *", "2099-03-01T00:00", "2104-02-29T00:00"),
        ("0 12 * * 7", "2026-07-01T00:00", "2026-07-05T12:00"),
        ("0 12 * * SUN", "2026-07-05T12:00", "2026-07-12T12:00"),
        ("15 10 * * MON-FRI", "2026-07-03T10:15", "2026-07-06T10:15"),
        ("0 0 29 2 */6", "2023-01-01T00:00", "2032-02-29T00:00"),
    ],
)
def test_next_fire_in_utc(expression: str, after: str, expected: str) -> None:
    found = next_fire(parse(expression), zone("UTC"), utc(after))
    assert found == utc(expected)
    assert found.tzinfo is UTC


def test_next_fire_is_none_beyond_ten_years() -> None:
    # February 29th that is a Saturday or Sunday: 2020, then 2032.
    assert next_fire(parse("0 0 29 2 */6"), zone("UTC"), utc("2020-03-01T00:00")) is None


def test_next_fire_accepts_any_aware_datetime() -> None:
    plus_five = dt.datetime(2026, 5, 5, 17, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert next_fire(parse("* * * * *"), zone("UTC"), plus_five) == utc("2026-05-05T12:01")


def test_naive_datetimes_are_refused() -> None:
    cron, tz = parse("* * * * *"), zone("UTC")
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        next_fire(cron, tz, dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="at_or_before must be a timezone-aware datetime"):
        latest_fire(cron, tz, dt.datetime(2026, 1, 1), after=utc("2025-01-01T00:00"))


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # July 2026: Mondays are 6, 13, 20, 27; the 15th is a Wednesday.
    assert fires("0 0 15 * MON", "UTC", "2026-07-01T00:00", 6) == [
        "2026-07-06T00:00+00:00",
        "2026-07-13T00:00+00:00",
        "2026-07-15T00:00+00:00",
        "2026-07-20T00:00+00:00",
        "2026-07-27T00:00+00:00",
        "2026-08-03T00:00+00:00",
    ]


def test_day_of_month_and_day_of_week_when_one_is_a_star() -> None:
    # '*/2' counts as a wildcard (Vixie cron), so both must match: odd days that are Mondays.
    assert fires("0 0 */2 * MON", "UTC", "2026-07-01T00:00", 4) == [
        "2026-07-13T00:00+00:00",
        "2026-07-27T00:00+00:00",
        "2026-08-03T00:00+00:00",
        "2026-08-17T00:00+00:00",
    ]
    assert fires("0 0 13 * *", "UTC", "2026-07-01T00:00", 2) == [
        "2026-07-13T00:00+00:00",
        "2026-08-13T00:00+00:00",
    ]
    assert fires("0 0 * * FRI", "UTC", "2026-07-01T00:00", 2) == [
        "2026-07-03T00:00+00:00",
        "2026-07-10T00:00+00:00",
    ]


def test_latest_fire_basics() -> None:
    cron, tz = parse("0 3 * * *"), zone("UTC")
    assert latest_fire(cron, tz, utc("2026-05-10T12:00"), after=utc("2026-04-01T00:00")) == utc(
        "2026-05-10T03:00"
    )
    assert latest_fire(cron, tz, utc("2026-05-10T03:00"), after=utc("2026-05-09T00:00")) == utc(
        "2026-05-10T03:00"
    )
    assert latest_fire(cron, tz, utc("2026-05-10T02:59"), after=utc("2026-05-09T00:00")) == utc(
        "2026-05-09T03:00"
    )
    # The window is open at ``after``.
    assert latest_fire(cron, tz, utc("2026-05-10T12:00"), after=utc("2026-05-10T03:00")) is None
    assert latest_fire(cron, tz, utc("2026-05-10T12:00"), after=utc("2026-05-10T12:00")) is None
    assert latest_fire(cron, tz, utc("2026-05-10T12:00"), after=utc("2026-06-01T00:00")) is None
    yearly = parse("0 0 1 1 *")
    assert latest_fire(yearly, tz, utc("2027-06-01T00:00"), after=utc("2020-01-01T00:00")) == utc(
        "2027-01-01T00:00"
    )
    assert latest_fire(yearly, tz, utc("2026-12-31T23:59"), after=utc("2026-01-01T00:00")) is None


def test_latest_fire_leap_day() -> None:
    cron, tz = parse("0 0 29 2 *"), zone("UTC")
    assert latest_fire(cron, tz, utc("2031-01-01T00:00"), after=utc("2021-01-01T00:00")) == utc(
        "2028-02-29T00:00"
    )
    assert latest_fire(cron, tz, utc("2031-01-01T00:00"), after=utc("2028-02-29T00:00")) is None


def test_catch_up_after_weeks_of_downtime_fires_the_most_recent_tick_only() -> None:
    every_minute, tz = parse("* * * * *"), zone("UTC")
    now = utc("2026-05-05T12:34:56")
    assert latest_fire(every_minute, tz, now, after=now - dt.timedelta(weeks=6)) == utc("2026-05-05T12:34")
    quarter = parse("*/15 * * * *")
    berlin = zone("Europe/Berlin")
    assert latest_fire(quarter, berlin, now, after=now - dt.timedelta(days=3000)) == utc("2026-05-05T12:30")
    nightly = parse("30 2 * * *")
    assert latest_fire(nightly, berlin, now, after=now - dt.timedelta(weeks=6)) == utc("2026-05-05T00:30")


# ----------------------------------------------------------------------------------- daylight saving time

DST_CASES = [
    # Europe/Berlin spring forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-27T12:00",
        ["2026-03-28T02:30+01:00", "2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"],
    ),
    ("* 2 * * *", "Europe/Berlin", "2026-03-29T00:50", ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"]),
    (
        "0 2,3 * * *",
        "Europe/Berlin",
        "2026-03-29T00:00",
        ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"],
    ),
    (
        "*/20 2 * * *",
        "Europe/Berlin",
        "2026-03-28T23:00",
        ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"],
    ),
    (
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-03-28T23:50",
        [
            "2026-03-29T01:00+01:00",
            "2026-03-29T01:30+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-29T03:30+02:00",
        ],
    ),
    (
        "0 */2 * * *",
        "Europe/Berlin",
        "2026-03-28T22:50",
        ["2026-03-29T00:00+01:00", "2026-03-29T04:00+02:00"],
    ),
    # Europe/Berlin fall back 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"]),
    (
        "*/20 2 * * *",
        "Europe/Berlin",
        "2026-10-24T23:50",
        [
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:20+02:00",
            "2026-10-25T02:40+02:00",
            "2026-10-26T02:00+01:00",
        ],
    ),
    (
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:50",
        [
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:30+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T02:30+01:00",
            "2026-10-25T03:00+01:00",
        ],
    ),
    # America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
    (
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00",
        ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00",
        ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2026-11-01T03:30",
        [
            "2026-11-01T00:00-04:00",
            "2026-11-01T01:00-04:00",
            "2026-11-01T01:00-05:00",
            "2026-11-01T02:00-05:00",
        ],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:30",
        ["2026-03-08T01:00-05:00", "2026-03-08T03:00-04:00"],
    ),
    # Australia/Lord_Howe, a 30-minute shift: 2026-10-04 02:00 -> 02:30; 2026-04-05 02:00 -> 01:30.
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-02T12:00",
        ["2026-10-03T02:15+10:30", "2026-10-04T02:30+11:00", "2026-10-05T02:15+11:00"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-03T12:00",
        ["2026-04-04T01:45+11:00", "2026-04-05T01:45+11:00", "2026-04-06T01:45+10:30"],
    ),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-04-04T14:20",
        [
            "2026-04-05T01:30+11:00",
            "2026-04-05T01:45+11:00",
            "2026-04-05T01:30+10:30",
            "2026-04-05T01:45+10:30",
            "2026-04-05T02:00+10:30",
        ],
    ),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-10-03T15:00",
        ["2026-10-04T01:45+10:30", "2026-10-04T02:30+11:00"],
    ),
    # Pacific/Chatham falls back 03:45 -> 02:45: the change instant is a single fire.
    (
        "*/15 * * * *",
        "Pacific/Chatham",
        "2026-04-04T13:20",
        [
            "2026-04-05T03:15+13:45",
            "2026-04-05T03:30+13:45",
            "2026-04-05T02:45+12:45",
            "2026-04-05T03:00+12:45",
        ],
    ),
    # America/Santiago springs forward at midnight (2026-09-06 00:00 -> 01:00).
    (
        "0 0 * * *",
        "America/Santiago",
        "2026-09-05T12:00",
        ["2026-09-06T01:00-03:00", "2026-09-07T00:00-03:00"],
    ),
    # Pacific/Apia skipped 2011-12-30 entirely: the daily job still runs once, at the jump.
    (
        "0 12 * * *",
        "Pacific/Apia",
        "2011-12-29T00:00",
        ["2011-12-29T12:00-10:00", "2011-12-31T00:00+14:00", "2011-12-31T12:00+14:00"],
    ),
    (
        "0 */6 * * *",
        "Pacific/Apia",
        "2011-12-30T00:00",
        ["2011-12-29T18:00-10:00", "2011-12-31T00:00+14:00", "2011-12-31T06:00+14:00"],
    ),
]


@pytest.mark.parametrize(("expression", "zone_name", "after", "expected"), DST_CASES)
def test_dst_next_fires(expression: str, zone_name: str, after: str, expected: list[str]) -> None:
    assert fires(expression, zone_name, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expression", "day", "count"),
    [
        ("0 * * * *", "2026-03-29", 23),  # wildcard hour: the skipped hour never happens
        ("0 * * * *", "2026-10-25", 25),  # ... and the repeated hour happens twice
        ("*/15 * * * *", "2026-03-29", 92),
        ("*/15 * * * *", "2026-10-25", 100),
        ("*/15 0-23 * * *", "2026-03-29", 92),  # fixed hours: 02:00-02:45 fire once, at 03:00 (merged)
        ("*/15 0-23 * * *", "2026-10-25", 96),  # fixed hours: each wall time once
        ("30 2 * * *", "2026-03-29", 1),
        ("30 2 * * *", "2026-10-25", 1),
    ],
)
def test_fires_per_local_day_in_berlin(expression: str, day: str, count: int) -> None:
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    start = dt.datetime.fromisoformat(day).replace(tzinfo=berlin)
    end = start + dt.timedelta(days=1)
    found = fires_between(
        expression, "Europe/Berlin", start - dt.timedelta(hours=3), end + dt.timedelta(hours=3)
    )
    on_day = [t for t in found if t.astimezone(berlin).date().isoformat() == day]
    assert len(on_day) == count
    assert len(set(on_day)) == count


def test_latest_fire_across_dst() -> None:
    nightly, quarter, berlin = parse("30 2 * * *"), parse("*/30 * * * *"), zone("Europe/Berlin")
    day_before = utc("2026-03-28T12:00")
    assert latest_fire(nightly, berlin, utc("2026-03-29T01:00"), after=day_before) == utc("2026-03-29T01:00")
    assert latest_fire(nightly, berlin, utc("2026-03-29T00:59"), after=day_before) is None
    fall_eve = utc("2026-10-24T12:00")
    # 02:45 CET, after both readings of 02:30: the nightly job ran at the first one.
    assert latest_fire(nightly, berlin, utc("2026-10-25T01:45"), after=fall_eve) == utc("2026-10-25T00:30")
    assert latest_fire(quarter, berlin, utc("2026-10-25T01:45"), after=fall_eve) == utc("2026-10-25T01:30")
    assert latest_fire(quarter, berlin, utc("2026-10-25T00:59"), after=fall_eve) == utc("2026-10-25T00:30")
    assert latest_fire(quarter, berlin, utc("2026-03-29T01:29"), after=day_before) == utc("2026-03-29T01:00")
    assert latest_fire(quarter, berlin, utc("2026-03-29T00:59"), after=day_before) == utc("2026-03-29T00:30")


# ------------------------------------------------------------------------------------- property testing

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Apia",
]
CHANGES = [  # UTC instants of offset changes in the zones above
    "2026-03-29T01:00", "2026-10-25T01:00", "2026-03-08T07:00", "2026-11-01T06:00", "2026-04-04T15:00",
    "2026-10-03T15:30", "2026-04-04T14:00", "2026-09-26T14:00", "2026-04-05T03:00", "2026-09-06T04:00",
    "2011-12-30T10:00",
]  # fmt: skip
WINDOW = dt.timedelta(hours=36)


def _matches(cron: CronExpression, wall: dt.datetime) -> bool:
    dom, dow = wall.day in cron.days, wall.isoweekday() % 7 in cron.weekdays
    day = (dom and dow) if cron.day_any or cron.weekday_any else (dom or dow)
    return wall.minute in cron.minutes and wall.hour in cron.hours and wall.month in cron.months and day


def reference_fires(
    cron: CronExpression, tz: zoneinfo.ZoneInfo, start: dt.datetime, end: dt.datetime
) -> list[dt.datetime]:
    """Every fire in (start, end], minute by minute, straight from the documented rules."""
    out = []
    instant = start.replace(second=0, microsecond=0) + MINUTE
    previous = (instant - MINUTE).astimezone(tz).replace(tzinfo=None)
    while instant <= end:
        local = instant.astimezone(tz)
        wall = local.replace(tzinfo=None)
        if cron.hour_any:
            fire = _matches(cron, wall)
        else:
            skipped = (previous + k * MINUTE for k in range(1, (wall - previous) // MINUTE))
            fire = (local.fold == 0 and _matches(cron, wall)) or any(_matches(cron, w) for w in skipped)
        if fire:
            out.append(instant)
        previous, instant = wall, instant + MINUTE
    return out


def _int_list(low: int, high: int) -> st.SearchStrategy[str]:
    return st.lists(st.integers(low, high), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v)))


EXPRESSIONS = st.tuples(
    st.one_of(
        st.sampled_from(["*", "*/5", "*/15", "*/7", "0", "0,30", "15-45/10", "45", "59"]), _int_list(0, 59)
    ),
    st.one_of(
        st.sampled_from(["*", "*/2", "*/5", "0-23", "0-23/3", "1", "2", "2,3", "1-3", "23"]), _int_list(0, 23)
    ),
    st.sampled_from(["*", "*", "*", "1", "15", "*/2", "1-7", "28-31", "29", "31", "4,5,6"]),
    st.sampled_from(["*", "*", "*", "3", "4", "9,10", "10-12", "*/2", "2"]),
    st.sampled_from(["*", "*", "*", "0", "7", "1-5", "SAT,SUN", "*/2", "5"]),
).map(" ".join)

INSTANTS = st.one_of(
    st.builds(
        lambda change, minutes, seconds: utc(change) + dt.timedelta(minutes=minutes, seconds=seconds),
        st.sampled_from(CHANGES),
        st.integers(-2 * 1440, 1440),
        st.floats(0, 59.999),
    ),
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(expression=EXPRESSIONS, zone_name=st.sampled_from(ZONES), after=INSTANTS)
def test_fires_agree_with_a_minute_by_minute_reference(
    expression: str, zone_name: str, after: dt.datetime
) -> None:
    try:
        cron = parse(expression)
    except CronError:
        assume(False)
        raise
    tz = zone(zone_name)
    expected = reference_fires(cron, tz, after, after + WINDOW)
    found = next_fire(cron, tz, after)
    if expected:
        assert found == expected[0]
    else:
        assert found is None or found > after + WINDOW
    assert latest_fire(cron, tz, after + WINDOW, after=after) == (expected[-1] if expected else None)
    if found is not None:
        assert found > after
        assert found.tzinfo is UTC and found.second == 0 and found.microsecond == 0
        assert latest_fire(cron, tz, found, after=after) == found
        assert latest_fire(cron, tz, found - dt.timedelta(microseconds=1), after=after) is None
