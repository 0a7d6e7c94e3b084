"""Inputs the API fuzzer turned into 500s (docs/api.md, "Fuzzing"), now 400 problems on SQLite and
PostgreSQL: a NUL character in a URL or a JSON string (PostgreSQL text cannot hold U+0000). (A multipart
body aiohttp cannot split: tests/integration/api/management/test_validate_api.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

PROBLEM_JSON = "application/problem+json"


def h(key: str, content_type: str = "application/json") -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": content_type}


async def bad_request(resp: Any) -> dict[str, Any]:
    body: dict[str, Any] = await resp.json(content_type=None)
    assert (resp.status, resp.content_type) == (400, PROBLEM_JSON), body
    assert body["error_code"] == "invalid_request"
    return body


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/agent/runs/run%00x",
        "/api/v1/agent/runs?q=a%00b",
        "/api/v1/agent/runs?name=a%00b",
        "/api/v1/factory/fa%00",
        "/api/v1/factory?search=%00",
        "/api/v1/environments/e%00",
    ],
)
async def test_a_nul_in_the_url_is_400(client: TestClient[Any, Any], member_key: str, url: str) -> None:
    body = await bad_request(await client.get(url, headers=h(member_key)))
    assert "NUL" in body["detail"]


@pytest.mark.parametrize(
    "raw",
    [b'{"prompt": "a\\u0000b"}', b'{"prompt": "p", "metadata": {"k\\u0000": "v"}}'],
    ids=["value", "key"],
)
async def test_a_nul_in_a_json_string_is_400(
    client: TestClient[Any, Any], member_key: str, raw: bytes
) -> None:
    body = await bad_request(await client.post("/api/v1/agent/run", data=raw, headers=h(member_key)))
    assert "NUL" in body["detail"]
