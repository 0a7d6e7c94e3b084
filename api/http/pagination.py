"""Keyset pagination for every list endpoint: the ``limit`` parameter, opaque cursors and ``page_info``.

A list handler reads :func:`page_limit` and :func:`page_after`, fetches ``limit + 1`` rows after that
position, and answers :func:`page_info` for the position after the page's last row (:func:`split_page`).

A cursor is base64url (no padding) of a compact JSON object ``{"v": <sort key of the last row>,
"id": <its id>, "f": <fingerprint>}``. The fingerprint is a short hash of the sort and the filters
the page was listed with: a cursor replayed with other filters or another sort would skip or repeat
rows, so it is refused (400) instead. Cursors are not signed: they only narrow a query that is
always scoped to the caller's team, so a forged cursor can reveal nothing a caller could not list.
A refused cursor raises :class:`InvalidCursor`, which :mod:`api.problems` answers as a 400 whose detail
starts with ``cursor:``, wherever it was raised (parsing here, or a sort key checked by a query).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from api.errors import BadRequest
from api.http.bodies import field_error
from api.http.jsonlimits import loads_limited

MAX_CURSOR_LENGTH = 2048
DEFAULT_LIMIT, MAX_LIMIT = 20, 500
NOT_VALID = "cursor is not valid; pass next_cursor from a previous page unchanged"
Row = TypeVar("Row")


class InvalidCursor(ValueError):
    """The cursor is malformed, or belongs to a listing with other filters or another sort."""

    def __init__(self, message: str = NOT_VALID) -> None:
        super().__init__(message)


@dataclass(frozen=True)
class Cursor:
    """Position after the last row of a page: its sort key value (None allowed) and its id."""

    value: str | None
    row_id: str


def fingerprint(params: Mapping[str, Any]) -> str:
    """A stable 16-hex digest of the listing parameters (order of keys and of lists is ignored)."""
    canonical = {k: sorted(v) if isinstance(v, list | tuple | set) else v for k, v in params.items()}
    data = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def encode_cursor(cursor: Cursor, fp: str) -> str:
    data = json.dumps({"v": cursor.value, "id": cursor.row_id, "f": fp}, separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(raw: str, fp: str) -> Cursor:
    """Parse a cursor made by :func:`encode_cursor` for the same fingerprint, or raise InvalidCursor.

    Cursors come from clients, so anything a forged one can hold is refused here rather than reaching a
    query: undecodable base64 or JSON (through the request-body parser's limits), other shapes, and
    strings a database cannot take (NUL, unpaired surrogates).
    """
    if not raw or len(raw) > MAX_CURSOR_LENGTH:
        raise InvalidCursor("cursor is empty or too long")
    try:
        data = loads_limited(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError, TypeError):  # InvalidJson is a ValueError
        raise InvalidCursor() from None
    if (
        not isinstance(data, dict)
        or not _storable(data.get("id"))
        or not isinstance(data.get("f"), str)
        or not (data.get("v") is None or _storable(data.get("v")))
    ):
        raise InvalidCursor()
    if data["f"] != fp:
        raise InvalidCursor("cursor belongs to a listing with other filters or another sort order")
    return Cursor(value=data["v"], row_id=data["id"])


def timestamp_key(value: dt.datetime) -> str:
    """Exact (microsecond) UTC form of a timestamp sort key; RFC 3339 output is only milliseconds."""
    return value.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _storable(value: object) -> bool:
    """A string a store can compare against: PostgreSQL refuses NUL (:func:`loads_limited` already
    refused unpaired surrogates, which UTF-8 cannot encode)."""
    return isinstance(value, str) and "\x00" not in value


def parse_timestamp_key(value: str | None) -> dt.datetime:
    """The UTC timestamp of a timestamp sort key; InvalidCursor for anything else, including a date that
    leaves the representable range once moved to UTC (``0001-01-01T00:00:00+01:00``)."""
    if value is None:
        raise InvalidCursor("cursor is not valid for a timestamp sort")
    try:
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("naive timestamp")
        return parsed.astimezone(dt.UTC)
    except (ValueError, OverflowError, TypeError):
        raise InvalidCursor("cursor is not valid for a timestamp sort") from None


def parse_limit(raw: str | None, *, default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> int:
    """``limit`` query parameter: an integer 1..maximum; ValueError with a message otherwise."""
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6 or not 1 <= int(raw) <= maximum:
        raise ValueError(f"limit must be an integer between 1 and {maximum}")
    return int(raw)


def page_limit(
    query: Mapping[str, str],
    *,
    default: int = DEFAULT_LIMIT,
    maximum: int = MAX_LIMIT,
    errors: list[dict[str, Any]] | None = None,
) -> int:
    """The ``limit`` query parameter; an invalid one is a 400.

    An endpoint that reports all its bad parameters in one 422 passes ``errors`` instead: an invalid
    limit is then a ``limit`` field error there, and ``default`` is returned so checking goes on.
    """
    try:
        return parse_limit(query.get("limit"), default=default, maximum=maximum)
    except ValueError as exc:
        if errors is None:
            raise BadRequest(str(exc)) from None
        errors.append(field_error("limit", str(exc)))
        return default


def page_after(query: Mapping[str, str], fp: str) -> Cursor | None:
    """Where the ``cursor`` query parameter continues this listing; None on a first page."""
    raw = query.get("cursor")
    return None if raw is None else decode_cursor(raw, fp)


def split_page(rows: Sequence[Row], limit: int) -> tuple[list[Row], Row | None]:
    """Rows fetched with ``LIMIT limit + 1``: the page, and its last row when another page follows."""
    page = list(rows[:limit])
    return page, (page[-1] if len(rows) > limit and page else None)


def page_info(next_position: Cursor | None, fp: str) -> dict[str, Any]:
    """A response's ``page_info``: whether another page follows, and the cursor that fetches it."""
    next_cursor = encode_cursor(next_position, fp) if next_position is not None else None
    return {"has_next_page": next_cursor is not None, "next_cursor": next_cursor}


def single_page_info() -> dict[str, Any]:
    """``page_info`` of a listing that always fits one page (same shape, so clients page uniformly)."""
    return {"has_next_page": False, "next_cursor": None}
