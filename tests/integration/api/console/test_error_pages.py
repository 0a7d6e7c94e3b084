"""The console's error pages (docs/console.md, "Error pages"): refusals and failures under ``/console`` are
pages of the layout with their status, never plain text or an API problem document."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from api.console.error_pages import setup_error_pages
from api.console.rendering import setup_templates
from api.console.security import setup_security
from api.errors import BadRequest

from .support import sign_in

STATIC = Path(__file__).resolve().parents[4] / "api" / "console" / "static"


async def test_refusals_are_pages_of_the_layout(client: TestClient[Any, Any], member_key: str) -> None:
    signed_out = await client.get("/console/nope")
    body = await signed_out.text()
    assert signed_out.status == 404 and signed_out.content_type == "text/html"
    assert "There is no console page at /console/nope." in body and 'href="/console/login"' in body
    assert "console.css" in body and "favicon.svg" in body  # the layout's stylesheet and icon
    static = await client.get("/console/static/nope.css")
    assert (
        static.status == 404
        and "There is no console page at /console/static/nope.css." in await static.text()
    )
    assert (await client.get("/console/static/favicon.svg")).status == 200

    assert (await sign_in(client, member_key)).status == 303
    for path, text in (
        ("/console/factories/fa_nope", "No such factory."),
        ("/console/runs/run_nope", "run run_nope does not exist"),
        ("/console/nope", "There is no console page"),
    ):
        resp = await client.get(path)
        body = await resp.text()
        assert resp.status == 404 and resp.content_type == "text/html", path
        assert "<h1>Not found</h1>" in body and text in body and 'class="mainnav"' in body, path
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")

    stale = await client.post("/console/logout", data={"csrf_token": "stale"})
    assert stale.status == 403 and "CSRF token is missing or stale" in await stale.text()
    assert stale.content_type == "text/html"

    foreign = await client.post("/console/logout", headers={"Origin": "https://evil.example"})
    body = await foreign.text()
    assert foreign.status == 403 and foreign.content_type == "text/html"
    assert "a cross-site request may not change anything here" in body and "<h1>Refused</h1>" in body

    wrong = await client.put("/console/factories")
    assert wrong.status == 405 and "GET" in wrong.headers["Allow"] and wrong.content_type == "text/html"


async def test_the_sign_in_page_keeps_its_own_refusal(client: TestClient[Any, Any]) -> None:
    page = await client.post("/console/login", data={"api_key": "x", "login_token": "stale"})
    body = await page.text()
    assert page.status == 403 and "The sign-in form expired" in body and "errorpage" not in body


@pytest.fixture
async def failing(aiohttp_client: Any) -> TestClient[Any, Any]:
    """A console app whose handlers fail: an unexpected exception and an API error."""

    async def boom(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("SELECT password FROM secret_table")

    async def refused(request: web.Request) -> web.StreamResponse:
        raise BadRequest("that value is not accepted here", headers={"Retry-After": "7", "X-Other": "x"})

    app = web.Application()
    setup_templates(app)
    setup_error_pages(app)
    setup_security(app)
    app.router.add_get("/console/boom", boom)
    app.router.add_get("/console/refused", refused)
    app.router.add_static("/console/static/", STATIC, name="console_static")
    result: TestClient[Any, Any] = await aiohttp_client(app)
    return result


async def test_an_unexpected_error_is_a_500_page_with_a_reference_in_the_log(
    failing: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="factoryctl.console"):
        resp = await failing.get("/console/boom")
        body = await resp.text()
    assert resp.status == 500 and resp.content_type == "text/html"
    assert "Something went wrong" in body and "secret_table" not in body
    ref = body.split('id="error-ref">')[1].split("<")[0]
    assert len(ref) == 12 and any(ref in r.getMessage() for r in caplog.records)

    api = await failing.get("/console/refused")
    assert api.status == 400 and "that value is not accepted here" in await api.text()
    assert api.content_type == "text/html"
    assert api.headers["Retry-After"] == "7" and "X-Other" not in api.headers
