"""The one JSON body reader and the field-error helpers, as a client sees them.

The reader's options are checked on a minimal app with the real problem middleware (exact limits);
the rest through the real API, where each endpoint states its own limit and whether a body is optional.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from real_api import PROBLEM_JSON, Api, start_api
from sqlalchemy.ext.asyncio import AsyncEngine

from api.errors import ValidationFailed
from api.http.bodies import (
    SMALL_BODY_BYTES,
    fail_on,
    field_error,
    optional_string,
    read_json_object,
    unknown_fields,
)
from api.problems import problem_middleware
from store.crypto import SecretBox

JSON = {"Content-Type": "application/json"}
EMPTY = "request body is empty; a JSON object is required"
NOT_OBJECT = "request body must be a JSON object"


def echo_app() -> web.Application:
    """``POST /required`` and ``POST /optional`` echo the body read with a 64-byte limit."""

    async def required(request: web.Request) -> web.Response:
        return web.json_response(await read_json_object(request, max_bytes=64))

    async def optional(request: web.Request) -> web.Response:
        return web.json_response(await read_json_object(request, max_bytes=64, optional=True))

    app = web.Application(middlewares=[problem_middleware])
    app.router.add_post("/required", required)
    app.router.add_post("/optional", optional)
    return app


@pytest.fixture
async def echo(aiohttp_client: Any) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(echo_app())
    return client


async def answer(resp: Any) -> tuple[int, str, Any]:
    return resp.status, resp.content_type, await resp.json(content_type=None)


async def test_an_object_is_returned_as_sent(echo: TestClient[Any, Any]) -> None:
    for path in ("/required", "/optional"):
        resp = await echo.post(path, data=b' {"a": [1, null], "b": "\xc3\xa9"} ', headers=JSON)
        assert await answer(resp) == (200, "application/json", {"a": [1, None], "b": "é"})


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b"", EMPTY),
        (b"  \n\t", EMPTY),
        (b"{", "request body is not valid JSON: "),
        (b"{'a': 1}", "request body is not valid JSON: "),
        (b'"\xff"', "request body is not valid JSON: "),
        (b"[1, 2]", NOT_OBJECT),
        (b'"text"', NOT_OBJECT),
        (b"null", NOT_OBJECT),
        (b"42", NOT_OBJECT),
    ],
)
async def test_a_required_body_must_be_a_json_object(
    echo: TestClient[Any, Any], raw: bytes, detail: str
) -> None:
    status, content_type, body = await answer(await echo.post("/required", data=raw, headers=JSON))
    assert (status, content_type, body["error_code"]) == (400, PROBLEM_JSON, "invalid_request")
    assert body["detail"].startswith(detail) and body["instance"] == "/required"


async def test_an_optional_body_may_be_absent_or_blank_but_not_wrong(echo: TestClient[Any, Any]) -> None:
    assert await answer(await echo.post("/optional")) == (200, "application/json", {})
    assert await answer(await echo.post("/optional", data=b" \r\n", headers=JSON)) == (
        200,
        "application/json",
        {},
    )
    for raw, detail in ((b"{", "request body is not valid JSON: "), (b"[]", NOT_OBJECT)):
        status, _, body = await answer(await echo.post("/optional", data=raw, headers=JSON))
        assert status == 400 and body["detail"].startswith(detail)


async def test_a_body_over_the_limit_is_413_without_being_parsed(echo: TestClient[Any, Any]) -> None:
    at_limit = b'{"k": "' + b"x" * 55 + b'"}'
    assert len(at_limit) == 64
    assert (await echo.post("/required", data=at_limit, headers=JSON)).status == 200
    for path in ("/required", "/optional"):
        status, content_type, body = await answer(await echo.post(path, data=b"{" * 65, headers=JSON))
        assert (status, content_type) == (413, PROBLEM_JSON)
        assert (body["error_code"], body["detail"]) == ("invalid_request", "body exceeds 64 bytes")


def test_fail_on_raises_one_422_naming_the_first_error_and_listing_all() -> None:
    fail_on([])
    errors = [field_error("name", "is required"), field_error("size", "must be a number")]
    with pytest.raises(ValidationFailed) as caught:
        fail_on(errors)
    assert caught.value.status == 422
    assert caught.value.detail == "name: is required"
    assert caught.value.errors == [
        {"field": "name", "message": "is required"},
        {"field": "size", "message": "must be a number"},
    ]


def test_unknown_fields_name_each_one_and_what_is_allowed() -> None:
    assert unknown_fields({"a": 1, "b": 2}, {"a", "b"}) == []
    assert unknown_fields({"zz": 1, "a": 1, "nmae": 2}, {"name", "a"}) == [
        {"field": "nmae", "message": "unknown field; allowed: a, name"},
        {"field": "zz", "message": "unknown field; allowed: a, name"},
    ]


def test_optional_string_strips_and_treats_blank_as_absent() -> None:
    errors: list[dict[str, Any]] = []
    body = {"s": "  x ", "blank": "  ", "null": None, "n": 3, "long": "abcdef"}
    assert optional_string(body, "s", errors) == "x"
    assert optional_string(body, "blank", errors) is None
    assert optional_string(body, "null", errors) is None
    assert optional_string(body, "missing", errors) is None
    assert errors == []
    assert optional_string(body, "n", errors) is None
    assert optional_string(body, "long", errors, max_length=5) == "abcdef"
    assert optional_string(body, "long", errors, max_length=6) == "abcdef"
    assert errors == [
        {"field": "n", "message": "must be a string"},
        {"field": "long", "message": "must be at most 5 characters"},
    ]


# --- through the real API ---------------------------------------------------------------------------


@pytest.fixture
async def api(aiohttp_client: Any, engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> Api:
    return await start_api(aiohttp_client, engine, box, tmp_path)


async def test_endpoints_answer_the_same_400s_for_bad_bodies(api: Api) -> None:
    for method, path in (
        ("POST", "/api/v1/secrets"),  # management, 64 KiB
        ("POST", "/api/v1/factory"),  # factories, 64 KiB
        ("POST", "/api/v1/environments"),  # environments, 1 MiB
        ("POST", "/api/v1/agent/runs"),  # runs, sized by the attachment limit
        ("PATCH", "/api/v1/factory/nope/webhooks/nope"),  # the body is read before the lookup
    ):
        for raw, detail in ((b"", EMPTY), (b"{", "request body is not valid JSON"), (b"[1]", NOT_OBJECT)):
            body = await api.problem(method, path, 400, data=raw, headers={**api.admin, **JSON})
            assert body["detail"].startswith(detail), (path, raw)


async def test_each_endpoint_keeps_its_size_limit(api: Api) -> None:
    padded = b"{}" + b" " * (SMALL_BODY_BYTES - 1)
    body = await api.problem("POST", "/api/v1/secrets", 413, data=padded, headers={**api.admin, **JSON})
    assert body["detail"] == f"body exceeds {SMALL_BODY_BYTES} bytes"
    # The same body is well within the environments limit: it is read, and found to lack a name.
    status, _, body = await api.call(
        "POST", "/api/v1/environments", data=padded, headers={**api.admin, **JSON}
    )
    assert status == 422 and body["errors"][0]["field"] == "name"


async def test_rotating_a_secret_takes_no_body_but_creating_one_needs_one(api: Api) -> None:
    status, _, created = await api.call("POST", "/api/v1/secrets", json={"name": "deploy-key"})
    assert status == 201 and created["value"]
    status, _, rotated = await api.call("PUT", "/api/v1/secrets/deploy-key")
    assert status == 200 and rotated["version"] == 2 and rotated["value"] != created["value"]
    body = await api.problem(
        "PUT", "/api/v1/secrets/deploy-key", 400, data=b"[]", headers={**api.admin, **JSON}
    )
    assert body["detail"] == NOT_OBJECT
    body = await api.problem("POST", "/api/v1/secrets", 400)
    assert body["detail"] == EMPTY


async def test_strict_bodies_list_every_field_problem_in_one_422(api: Api) -> None:
    status, content_type, body = await api.call(
        "POST", "/api/v1/secrets", json={"name": "", "value": 5, "colour": "red"}
    )
    assert (status, content_type) == (422, PROBLEM_JSON)
    assert [e["field"] for e in body["errors"]] == ["colour", "name", "value"]
    assert body["detail"] == "colour: unknown field; allowed: generate, name, scope, value"
