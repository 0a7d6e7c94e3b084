"""Opaque keyset cursors: round trip, tamper and replay refusal, limit parsing."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

from api.http.pagination import (
    Cursor,
    InvalidCursor,
    decode_cursor,
    encode_cursor,
    fingerprint,
    parse_limit,
    parse_timestamp_key,
    timestamp_key,
)


def test_cursor_round_trips_and_is_url_safe() -> None:
    fp = fingerprint({"sort_by": "updated_at", "states": ["QUEUED"]})
    raw = encode_cursor(Cursor(value="2026-01-01T00:00:00.123456+00:00", row_id="run_01"), fp)
    assert set(raw) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert decode_cursor(raw, fp) == Cursor(value="2026-01-01T00:00:00.123456+00:00", row_id="run_01")


def test_cursor_with_null_sort_value_round_trips() -> None:
    fp = fingerprint({})
    assert decode_cursor(encode_cursor(Cursor(None, "x"), fp), fp) == Cursor(None, "x")


def test_fingerprint_ignores_key_and_list_order_but_not_values() -> None:
    a = fingerprint({"states": ["QUEUED", "FAILED"], "sort_by": "created_at"})
    b = fingerprint({"sort_by": "created_at", "states": ["FAILED", "QUEUED"]})
    c = fingerprint({"sort_by": "created_at", "states": ["FAILED"]})
    assert a == b
    assert a != c


def test_cursor_from_another_listing_is_refused() -> None:
    raw = encode_cursor(Cursor("v", "run_1"), fingerprint({"states": ["QUEUED"]}))
    with pytest.raises(InvalidCursor, match="other filters"):
        decode_cursor(raw, fingerprint({"states": ["FAILED"]}))


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not base64 at all!",
        "x" * 5000,
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        base64.urlsafe_b64encode(json.dumps({"v": 1, "id": "r", "f": "x"}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps({"v": "a", "f": "x"}).encode()).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_garbage_cursors_are_refused(raw: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(raw, "x")


def test_timestamp_keys_keep_microseconds() -> None:
    when = dt.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    assert parse_timestamp_key(timestamp_key(when)) == when
    with pytest.raises(InvalidCursor):
        parse_timestamp_key("2026-03-01T12:00:00")  # no offset
    with pytest.raises(InvalidCursor):
        parse_timestamp_key("yesterday")
    with pytest.raises(InvalidCursor):
        parse_timestamp_key(None)


@pytest.mark.parametrize(("raw", "value"), [(None, 20), ("1", 1), ("500", 500), ("37", 37)])
def test_limit_accepts_1_to_500(raw: str | None, value: int) -> None:
    assert parse_limit(raw) == value


@pytest.mark.parametrize("raw", ["0", "501", "-1", "abc", "1.5", "", " 5", "5_0", "+5", "\uff11"])
def test_limit_rejects_everything_else(raw: str) -> None:
    with pytest.raises(ValueError, match="between 1 and 500"):
        parse_limit(raw)
