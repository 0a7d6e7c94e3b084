"""``X-Forwarded-Proto`` from a trusted proxy (docs/operations.md, "Behind a reverse proxy"), against the real
app: behind a proxy that says https every cookie is ``Secure``; the header from any other peer, or without
``--trusted-proxy``, changes nothing; ``--public-url https://`` keeps making them ``Secure`` on its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import create_app
from api.auth_failures import parse_networks
from api.context import ServerSettings
from api.ops import peer_is_trusted
from store.crypto import SecretBox

LOGIN = "/console/login"  # sets the sign-in form's cookie


@pytest.fixture
async def started(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[Any]:
    clients: list[TestClient[Any, Any]] = []

    async def start(**settings: Any) -> TestClient[Any, Any]:
        client: TestClient[Any, Any] = TestClient(
            TestServer(create_app(ServerSettings(data_dir=tmp_path, **settings), engine, box))
        )
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def cookies(client: TestClient[Any, Any], proto: str | None) -> list[str]:
    headers = {} if proto is None else {"X-Forwarded-Proto": proto}
    resp = await client.get(LOGIN, headers=headers, allow_redirects=False)
    assert resp.status == 200
    found = resp.headers.getall("Set-Cookie", [])
    assert found, "the sign-in form sets a cookie"
    return found


def secure(cookie: str) -> int:
    return [part.strip().lower() for part in cookie.split(";")].count("secure")


async def test_a_trusted_proxy_saying_https_makes_cookies_secure(started: Any) -> None:
    behind = await started(trusted_proxies=("127.0.0.1/32",))  # the test client's peer address
    assert all(secure(c) == 1 for c in await cookies(behind, "https"))
    assert all(secure(c) == 1 for c in await cookies(behind, "http, https"))  # the nearest proxy's word
    for proto in (None, "http", "https, http", "HTTPS-ish"):
        assert not any(secure(c) for c in await cookies(behind, proto)), proto


async def test_the_header_from_anyone_else_changes_nothing(started: Any) -> None:
    elsewhere = await started(trusted_proxies=("10.0.0.0/8",))  # the peer is not a trusted proxy
    assert not any(secure(c) for c in await cookies(elsewhere, "https"))
    untrusting = await started()
    assert not any(secure(c) for c in await cookies(untrusting, "https"))


async def test_an_https_public_url_alone_makes_them_secure_once(started: Any) -> None:
    public = await started(public_url="https://factory.example.com")
    assert all(secure(c) == 1 for c in await cookies(public, None))
    both = await started(public_url="https://factory.example.com", trusted_proxies=("127.0.0.1",))
    assert all(secure(c) == 1 for c in await cookies(both, "https"))  # not "Secure; Secure"


@pytest.mark.parametrize(
    ("remote", "trusted"),
    [("127.0.0.1", True), ("::ffff:127.0.0.1", True), ("127.0.0.2", False), ("::1", False), (None, False)],
)
def test_peer_is_trusted(remote: str | None, trusted: bool) -> None:
    assert peer_is_trusted(remote, parse_networks(["127.0.0.1/32"])) is trusted
