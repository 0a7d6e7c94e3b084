"""JSON limits and forged cursors on the real API (docs/api.md, "Errors"): every body over the limits of
:mod:`api.http.jsonlimits` and every undecodable cursor is a 400 problem, never a 500."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from api.http.jsonlimits import MAX_DEPTH

RUN = "/api/v1/agent/run"
RUNS = "/api/v1/agent/runs"
PROBLEM_JSON = "application/problem+json"

BODIES = {
    "deep-100k": b'{"prompt": "p", "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "deep-900": b'{"prompt": "p", "config": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}",
    "over-max-depth": b'{"prompt": "p", "m": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}",
    "5000-digit-int": b'{"prompt": "p", "metadata": {"n": ' + b"9" * 5000 + b"}}",
    "101-digit-int": b'{"prompt": "p", "metadata": {"n": ' + b"9" * 101 + b"}}",
    "float-overflow": b'{"prompt": "p", "metadata": {"n": 1e400}}',
    "nan": b'{"prompt": NaN}',
    "lone-surrogate": b'{"prompt": "p\\ud800"}',
    "utf16": '{"prompt": "p"}'.encode("utf-16"),
}


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


async def problem(resp: Any, status: int = 400) -> dict[str, Any]:
    body: dict[str, Any] = await resp.json(content_type=None)
    assert (resp.status, resp.content_type) == (status, PROBLEM_JSON), body
    assert body["error_code"] == "invalid_request"
    return body


@pytest.mark.parametrize("raw", BODIES.values(), ids=BODIES.keys())
async def test_run_create_bodies_over_the_json_limits_are_400(
    client: TestClient[Any, Any], member_key: str, raw: bytes
) -> None:
    body = await problem(await client.post(RUN, data=raw, headers=h(member_key)))
    assert body["detail"].startswith("request body is not valid JSON: ")


@pytest.mark.parametrize("raw", BODIES.values(), ids=BODIES.keys())
async def test_follow_up_bodies_over_the_json_limits_are_400(
    client: TestClient[Any, Any], member_key: str, raw: bytes
) -> None:
    resp = await client.post(RUN, json={"prompt": "p"}, headers=h(member_key))
    assert resp.status == 200, await resp.text()
    run_id = (await resp.json())["run_id"]
    followup = raw.replace(b'"prompt"', b'"message"')
    body = await problem(
        await client.post(f"{RUNS}/{run_id}/followups", data=followup, headers=h(member_key))
    )
    assert body["detail"].startswith("request body is not valid JSON: ")


async def test_bodies_within_the_limits_still_work(client: TestClient[Any, Any], member_key: str) -> None:
    raw = b'{"prompt": "p \\ud83d\\ude00 [[[[", "metadata": {"n": "' + b"9" * 200 + b'"}}'
    resp = await client.post(RUN, data=raw, headers=h(member_key))
    assert resp.status == 200, await resp.text()
    run = await (await client.get(f"{RUNS}/{(await resp.json())['run_id']}", headers=h(member_key))).json()
    assert run["prompt"] == "p \U0001f600 [[[["


def forged(value: Any, row_id: Any = "run_1", fp: str = "x") -> str:
    raw = json.dumps({"v": value, "id": row_id, "f": fp}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def raw_cursor(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


async def first_page_fingerprint(client: TestClient[Any, Any], key: str, query: str) -> str:
    """The fingerprint of a real listing, read back from a real next_cursor."""
    for n in range(2):
        resp = await client.post(RUN, json={"prompt": f"p{n}"}, headers=h(key))
        assert resp.status == 200
    page = await (await client.get(f"{RUNS}?limit=1&{query}", headers=h(key))).json()
    cursor = page["page_info"]["next_cursor"]
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    return str(data["f"])


@pytest.mark.parametrize(
    "value",
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-01-01T00:00:00", "not a date", None, 5],
    ids=["underflow", "overflow", "naive", "text", "null", "number"],
)
async def test_forged_timestamp_cursors_are_400(
    client: TestClient[Any, Any], member_key: str, value: Any
) -> None:
    """The finding: a cursor whose date leaves the datetime range once moved to UTC was an OverflowError."""
    fp = await first_page_fingerprint(client, member_key, "sort_by=created_at")
    resp = await client.get(
        f"{RUNS}?limit=1&sort_by=created_at&cursor={forged(value, fp=fp)}", headers=h(member_key)
    )
    assert (await problem(resp))["detail"].startswith("cursor:")


@pytest.mark.parametrize(
    "cursor",
    [
        raw_cursor(b"[" * 1500 + b"]" * 1500),
        raw_cursor(b'{"v": null, "id": "r", "f": "x", "n": ' + b"9" * 1400 + b"}"),
        raw_cursor(b'{"v": "\\ud800", "id": "r", "f": "x"}'),
        raw_cursor(b"\xff\xfe"),
        "%%%%",
        "A",
    ],
    ids=["deep", "long-number", "surrogate", "not-utf8", "not-base64", "one-char"],
)
async def test_undecodable_cursors_are_400(
    client: TestClient[Any, Any], member_key: str, cursor: str
) -> None:
    resp = await client.get(f"{RUNS}?cursor={cursor}", headers=h(member_key))
    assert (await problem(resp))["detail"].startswith("cursor:")


async def test_cursor_strings_a_database_cannot_compare_are_400(
    client: TestClient[Any, Any], member_key: str
) -> None:
    fp = await first_page_fingerprint(client, member_key, "sort_by=title")
    for value, row_id in (("a\x00b", "run_1"), ("title", "run\x00")):
        cursor = forged(value, row_id, fp)
        resp = await client.get(f"{RUNS}?limit=1&sort_by=title&cursor={cursor}", headers=h(member_key))
        assert (await problem(resp))["detail"].startswith("cursor:")
