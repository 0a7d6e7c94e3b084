"""Keyset pagination: cursors (round trip, tamper and replay refusal), ``limit``, ``page_info``; then the
same rules as a client meets them on every list endpoint of the real API."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from multidict import MultiDict
from real_api import Api, start_api
from sqlalchemy.ext.asyncio import AsyncEngine

from api.errors import BadRequest
from api.http.pagination import (
    Cursor,
    InvalidCursor,
    decode_cursor,
    encode_cursor,
    fingerprint,
    page_after,
    page_info,
    page_limit,
    parse_limit,
    parse_timestamp_key,
    single_page_info,
    split_page,
    timestamp_key,
)
from store.crypto import SecretBox


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


def test_page_limit_is_a_400_or_a_field_error_for_a_422() -> None:
    assert page_limit(MultiDict()) == 20
    assert page_limit(MultiDict(limit="7"), default=50, maximum=100) == 7
    with pytest.raises(BadRequest, match=r"^limit must be an integer between 1 and 100$"):
        page_limit(MultiDict(limit="101"), maximum=100)
    errors: list[dict[str, Any]] = []
    assert page_limit(MultiDict(limit="x"), default=50, maximum=200, errors=errors) == 50
    assert errors == [{"field": "limit", "message": "limit must be an integer between 1 and 200"}]


def test_page_after_decodes_the_cursor_parameter_for_this_listing() -> None:
    fp = fingerprint({"list": "things"})
    assert page_after(MultiDict(), fp) is None
    raw = encode_cursor(Cursor("b", "id_2"), fp)
    assert page_after(MultiDict(cursor=raw), fp) == Cursor("b", "id_2")
    with pytest.raises(InvalidCursor):
        page_after(MultiDict(cursor=""), fp)


def test_split_page_and_page_info() -> None:
    fp = fingerprint({"list": "things"})
    assert split_page([1, 2, 3], 3) == ([1, 2, 3], None)
    assert split_page([1, 2, 3, 4], 3) == ([1, 2, 3], 3)
    assert split_page([], 3) == ([], None)
    assert page_info(None, fp) == single_page_info() == {"has_next_page": False, "next_cursor": None}
    info = page_info(Cursor("c", "id_3"), fp)
    assert info["has_next_page"] is True and decode_cursor(info["next_cursor"], fp) == Cursor("c", "id_3")


# --- through the real API ---------------------------------------------------------------------------


@pytest.fixture
async def api(aiohttp_client: Any, engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> Api:
    return await start_api(aiohttp_client, engine, box, tmp_path)


def tampered(cursor: str, **changes: object) -> str:
    """The cursor with some of its JSON members replaced, re-encoded as a client could."""
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw = json.dumps(data | changes).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def walk(api: Api, path: str, key: str, **params: str) -> list[list[str]]:
    """Every page of a listing, following next_cursor; the names (or ids) on each page."""
    pages, cursor = [], None
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        status, _, body = await api.call("GET", path, params=query, headers=api.member)
        assert status == 200, body
        pages.append([item.get("name") or item.get("run_id") or item["delivery_id"] for item in body[key]])
        cursor = body["page_info"]["next_cursor"]
        assert body["page_info"]["has_next_page"] is (cursor is not None)
        if cursor is None:
            return pages


async def test_every_listing_pages_to_the_end(api: Api) -> None:
    for name in ("delta", "alpha", "charlie", "bravo", "echo"):
        assert (await api.call("POST", "/api/v1/factory", json={"name": name}))[0] == 201
    assert await walk(api, "/api/v1/factory", "factories", limit="2") == [
        ["alpha", "bravo"],
        ["charlie", "delta"],
        ["echo"],
    ]
    _, _, listed = await api.call("GET", "/api/v1/factory", params={"search": "alpha"})
    uid = listed["factories"][0]["uid"]
    for name in ("c", "a", "b"):
        assert (await api.call("POST", f"/api/v1/factory/{uid}/webhooks", json={"name": name}))[0] == 201
    assert await walk(api, f"/api/v1/factory/{uid}/webhooks", "webhooks", limit="2") == [["a", "b"], ["c"]]
    for prompt in ("one", "two", "three"):
        assert (await api.call("POST", "/api/v1/agent/runs", json={"prompt": prompt}))[0] == 200
    pages = await walk(api, "/api/v1/agent/runs", "runs", limit="2", sort_by="title", sort_order="asc")
    assert [len(p) for p in pages] == [2, 1] and len({r for p in pages for r in p}) == 3
    # Environments always fit one page; page_info has the same shape as everywhere else.
    _, _, envs = await api.call("GET", "/api/v1/environments")
    assert envs["page_info"] == {"has_next_page": False, "next_cursor": None}


async def first_cursor(api: Api, path: str, **params: str) -> str:
    _, _, body = await api.call("GET", path, params={"limit": "1"} | params)
    cursor: str = body["page_info"]["next_cursor"]
    assert cursor
    return cursor


async def test_a_tampered_or_foreign_cursor_is_a_400_problem(api: Api) -> None:
    for name in ("a", "b", "c"):
        await api.call("POST", "/api/v1/factory", json={"name": name})
        await api.call("POST", "/api/v1/agent/runs", json={"prompt": name})
    factories, runs = "/api/v1/factory", "/api/v1/agent/runs"
    cursor = await first_cursor(api, factories)
    refused = {
        "garbage": "%%%",
        "empty": "",
        "truncated": cursor[:-4],
        "other fingerprint": tampered(cursor, f="0" * 16),
        "numeric sort key": tampered(cursor, v=1),
        "too long": cursor + "A" * 3000,
    }
    for why, raw in refused.items():
        body = await api.problem("GET", factories, 400, params={"cursor": raw})
        assert body["detail"].startswith("cursor: "), why
    # A cursor continues only the listing it came from: same endpoint, filters and sort.
    other = await api.problem("GET", factories, 400, params={"cursor": cursor, "search": "a"})
    assert other["detail"] == "cursor: cursor belongs to a listing with other filters or another sort order"
    await api.problem("GET", runs, 400, params={"cursor": cursor})
    run_cursor = await first_cursor(api, runs, state="QUEUED")
    await api.problem("GET", runs, 400, params={"cursor": run_cursor})
    await api.problem("GET", runs, 400, params={"cursor": run_cursor, "state": "QUEUED", "sort_order": "asc"})
    assert (await api.call("GET", runs, params={"cursor": run_cursor, "state": "QUEUED"}))[0] == 200


async def test_a_cursor_whose_sort_key_does_not_fit_the_sort_is_a_400_problem(api: Api) -> None:
    """Checked by the query itself, not the decoder: the same 400 problem all the same."""
    runs = "/api/v1/agent/runs"
    title_fp = fingerprint({"sort_by": "title", "sort_order": "desc"})
    raw = encode_cursor(Cursor(None, "r"), title_fp)
    body = await api.problem("GET", runs, 400, params={"cursor": raw, "sort_by": "title"})
    assert body["detail"] == "cursor: cursor is not valid for a title sort"
    time_fp = fingerprint({"sort_by": "updated_at", "sort_order": "desc"})
    raw = encode_cursor(Cursor("yesterday", "r"), time_fp)
    body = await api.problem("GET", runs, 400, params={"cursor": raw, "sort_by": "updated_at"})
    assert body["detail"] == "cursor: cursor is not valid for a timestamp sort"


async def test_a_delivery_cursor_must_point_at_a_log_position(api: Api) -> None:
    _, _, factory = await api.call("POST", "/api/v1/factory", json={"name": "shop"})
    _, _, hook = await api.call("POST", f"/api/v1/factory/{factory['uid']}/webhooks", json={"name": "orders"})
    path = f"/api/v1/factory/{factory['uid']}/webhooks/{hook['uid']}/deliveries"
    fp = fingerprint({"list": "deliveries", "webhook": hook["uid"], "status": []})
    body = await api.problem("GET", path, 400, params={"cursor": encode_cursor(Cursor(None, "seven"), fp)})
    assert body["detail"] == "cursor: cursor is not valid; pass next_cursor from a previous page unchanged"
    status, _, page = await api.call("GET", path, params={"cursor": encode_cursor(Cursor(None, "7"), fp)})
    assert status == 200 and page["deliveries"] == []


async def test_a_bad_limit_keeps_each_endpoint_s_status(api: Api) -> None:
    """Runs, factories and logs answer 400; management listings report it as a ``limit`` field in a 422."""
    _, _, factory = await api.call("POST", "/api/v1/factory", json={"name": "shop"})
    _, _, hook = await api.call("POST", f"/api/v1/factory/{factory['uid']}/webhooks", json={"name": "orders"})
    _, _, run = await api.call("POST", "/api/v1/agent/runs", json={"prompt": "hi"})
    webhooks = f"/api/v1/factory/{factory['uid']}/webhooks"
    for path, limit in (
        ("/api/v1/agent/runs", "501"),
        ("/api/v1/factory", "0"),
        (f"/api/v1/agent/runs/{run['run_id']}/logs", "1001"),
    ):
        body = await api.problem("GET", path, 400, params={"limit": limit})
        assert body["detail"].startswith("limit must be an integer between 1 and "), path
    for path, limit, maximum in (
        (webhooks, "101", 100),
        (f"{webhooks}/{hook['uid']}/deliveries", "201", 200),
    ):
        status, _, body = await api.call("GET", path, params={"limit": limit})
        assert status == 422 and body["errors"] == [
            {"field": "limit", "message": f"limit must be an integer between 1 and {maximum}"}
        ], path
