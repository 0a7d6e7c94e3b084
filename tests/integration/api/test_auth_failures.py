"""The failed-authentication budget per client address (docs/api.md, "Authentication"), against the real app
on SQLite and PostgreSQL: wrong API keys on the API and wrong keys in the console's sign-in form spend one
budget per address; past it every key from that address is answered 429 with Retry-After until the window
slides on; successes spend nothing; two replicas on one PostgreSQL store count together; X-Forwarded-For
names the client only when the peer is a configured trusted proxy."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from console.support import sign_in
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.ops import JsonAccessLogger
from store.clock import ManualClock
from store.crypto import SecretBox
from store.db import create_engine

MakeKey = Any


RUNS = "/api/v1/agent/runs"
LIMIT = 30  # the default: tens of failures per minute per address


def bearer(key: str, forwarded_for: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return headers


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def started(
    engine: AsyncEngine, box: SecretBox, tmp_path: Path, manual_clock: ManualClock
) -> AsyncIterator[Any]:
    """``await started(**settings)``: a client of a real app with those settings (closed afterwards)."""
    clients: list[TestClient[Any, Any]] = []

    async def start(engine_: AsyncEngine = engine, **settings: Any) -> TestClient[Any, Any]:
        app = create_app(
            ServerSettings(data_dir=tmp_path, **settings),
            engine_,
            box,
            clock=manual_clock,
            route_modules=ROUTE_MODULES,
        )
        server = TestServer(app)
        await server.start_server(access_log_class=JsonAccessLogger)  # the access log serve writes
        client: TestClient[Any, Any] = TestClient(server)
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def test_wrong_api_keys_past_the_budget_are_429_until_the_window_slides(
    started: Any, make_key: MakeKey, manual_clock: ManualClock
) -> None:
    client = await started()
    good = await make_key("member")
    for _ in range(3 * LIMIT):  # successes spend nothing
        assert (await client.get(RUNS, headers=bearer(good))).status == 200
    for n in range(LIMIT):
        resp = await client.get(RUNS, headers=bearer(f"fk_wrong_{n}"))
        assert resp.status == 401, (n, await resp.text())
    resp = await client.get(RUNS, headers=bearer("fk_wrong_last"))
    assert resp.status == 429 and resp.content_type == "application/problem+json"
    body = await resp.json()
    assert body["error_code"] == "budget_exceeded" and "failed authentications" in body["detail"]
    retry_after = int(resp.headers["Retry-After"])
    assert 1 <= retry_after <= 120
    # A correct key from the spent address is refused as well: otherwise guessing would go on.
    assert (await client.get(RUNS, headers=bearer(good))).status == 429
    assert (await client.get(RUNS)).status == 401  # no key presented: nothing guessed, nothing refused
    manual_clock.advance(retry_after)
    assert (await client.get(RUNS, headers=bearer(good))).status == 200


async def test_console_sign_in_and_the_api_spend_one_budget_per_address(
    started: Any, make_key: MakeKey, manual_clock: ManualClock
) -> None:
    client = await started()
    good = await make_key("admin")
    for n in range(LIMIT // 2):
        resp = await sign_in(client, f"fk_wrong_{n}")
        assert resp.status == 401 and "not valid" in await resp.text()
    for n in range(LIMIT - LIMIT // 2):
        assert (await client.get(RUNS, headers=bearer(f"fk_api_{n}"))).status == 401
    resp = await sign_in(client, "fk_wrong_again")
    page = await resp.text()
    assert resp.status == 429 and resp.content_type == "text/html"
    assert "Too many failed sign-ins" in page and int(resp.headers["Retry-After"]) >= 1
    assert 'name="api_key"' in page  # the sign-in form, readable, ready for later
    resp = await sign_in(client, good)  # the right key too, until the budget recovers
    assert resp.status == 429
    assert (await client.get(RUNS, headers=bearer(good))).status == 429
    manual_clock.advance(int(resp.headers["Retry-After"]))
    assert (await sign_in(client, good)).status == 303


async def test_trusted_proxy_names_the_client_only_when_configured(started: Any, make_key: MakeKey) -> None:
    good = await make_key("member")
    behind = await started(client_auth_failure_limit=3, trusted_proxies=("127.0.0.1/32", "10.0.0.0/8"))
    for n in range(3):
        assert (await behind.get(RUNS, headers=bearer(f"fk_{n}", "198.51.100.7"))).status == 401
    assert (await behind.get(RUNS, headers=bearer(good, "198.51.100.7"))).status == 429
    # what the client wrote left of the proxies' hops does not move it to another budget
    spoofed = "203.0.113.99, 198.51.100.7, 10.1.2.3"
    assert (await behind.get(RUNS, headers=bearer(good, spoofed))).status == 429
    # another client behind the same proxy is not affected
    assert (await behind.get(RUNS, headers=bearer(good, "198.51.100.8"))).status == 200
    assert (await behind.get(RUNS, headers=bearer("fk_x", "198.51.100.8, 10.0.0.1"))).status == 401

    direct = await started(client_auth_failure_limit=3)  # no trusted proxy: the header means nothing
    for n in range(3):
        assert (await direct.get(RUNS, headers=bearer(f"fk_{n}", f"198.51.100.{n}"))).status == 401
    assert (await direct.get(RUNS, headers=bearer(good, "198.51.100.200"))).status == 429


async def test_the_access_log_names_the_forwarded_client_only_behind_a_trusted_proxy(
    started: Any, make_key: MakeKey, caplog: pytest.LogCaptureFixture
) -> None:
    good = await make_key("member")
    behind = await started(trusted_proxies=("127.0.0.1/32",))
    direct = await started()
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        assert (await behind.get(RUNS, headers=bearer(good, "203.0.113.9, 198.51.100.7"))).status == 200
        assert (await direct.get(RUNS, headers=bearer(good, "198.51.100.7"))).status == 200
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "aiohttp.access"]
    assert [(line["remote"], line.get("client")) for line in lines] == [
        ("127.0.0.1", "198.51.100.7"),  # the hop the trusted proxy appended, not what the client wrote
        ("127.0.0.1", None),  # no trusted proxy: the header is not evidence of anything
    ]


async def test_two_replicas_on_one_postgresql_store_count_together(
    pg_url: str, box: SecretBox, tmp_path: Path, manual_clock: ManualClock
) -> None:
    """Two apps, each with its own engine (replicas share only the database), alternate wrong keys."""
    engines = [create_engine(pg_url), create_engine(pg_url)]
    apps = [
        create_app(ServerSettings(data_dir=tmp_path), e, box, clock=manual_clock, route_modules=ROUTE_MODULES)
        for e in engines
    ]
    replicas: list[TestClient[Any, Any]] = [TestClient(TestServer(app)) for app in apps]
    try:
        for replica in replicas:
            await replica.start_server()
        statuses = []
        for n in range(LIMIT + 4):
            resp = await replicas[n % 2].get(RUNS, headers=bearer(f"fk_{n}"))
            statuses.append(resp.status)
        # Each replica admits only failures leased from the shared row: together at most LIMIT 401s, then
        # 429 on both (a replica may end holding one leased token it did not spend: at most one fewer each).
        assert LIMIT - 2 <= statuses.count(401) <= LIMIT and statuses[-2:] == [429, 429], statuses
        assert statuses == sorted(statuses), statuses  # no 401 after the first 429
    finally:
        for replica in replicas:
            await replica.close()
        for e in engines:
            await e.dispose()


async def test_keys_and_forms_that_are_not_utf8_are_refused_never_a_server_error(started: Any) -> None:
    client = await started(client_auth_failure_limit=2)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    for _ in range(3):  # raw bytes: no HTTP client sends a header that is not UTF-8
        writer.write(
            b"GET " + RUNS.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fk_\xff\xfe\r\n\r\n"
        )
        await writer.drain()
        status = (await reader.readline()).split()[1]
        length = 0
        while (line := await reader.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        assert status in (b"401", b"429")
    writer.close()
    assert status == b"429"  # each was a failed key that spent the budget, not a crash
    body = b'--b\r\nContent-Disposition: form-data; name="api_key"\r\n\r\nfk_\xff\r\n--b--\r\n'
    resp = await client.post(
        "/console/login", data=body, headers={"Content-Type": "multipart/form-data; boundary=b"}
    )
    assert resp.status == 400, await resp.text()
    resp = await client.post("/console/login", data={"login_token": "\u00ff" * 8, "api_key": "fk_x"})
    assert resp.status == 403, await resp.text()  # a stale form, whatever its characters
