"""Helpers every console test uses: signing in through the login form, and reading a page's form tokens."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

TOKEN = re.compile(r'name="(login_token|csrf_token)" value="([^"]+)"')


def token(html: str, name: str) -> str:
    """The value of the page's hidden ``login_token`` or ``csrf_token`` field."""
    return next(v for n, v in TOKEN.findall(html) if n == name)


async def csrf(client: TestClient[Any, Any], path: str = "/console/factories") -> str:
    """The session's CSRF token, read from the page at ``path``."""
    return token(await (await client.get(path)).text(), "csrf_token")


async def sign_in(client: TestClient[Any, Any], key: str, next_path: str = "") -> Any:
    """Signs in with ``key`` through the login form (going on to ``next_path``); the form POST's response."""
    page = await client.get("/console/login" + (f"?next={next_path}" if next_path else ""))
    form = {"api_key": key, "login_token": token(await page.text(), "login_token")}
    if next_path:
        form["next"] = next_path
    return await client.post("/console/login", data=form, allow_redirects=False)


async def signed_in_csrf(client: TestClient[Any, Any], key: str) -> str:
    """Signs in with ``key`` (which must succeed); the session's CSRF token."""
    resp = await sign_in(client, key)
    assert resp.status == 303
    return await csrf(client)
