"""Event streams end when their credential does (docs/events.md, "Revocation and sign-out"), on SQLite and
PostgreSQL, across two app instances sharing one database: streams held open on replica B with a key end
within a few seconds of that key's revocation through replica A's console, and a console stream on B ends
when its session is signed out on A.

Each stream is read to its end under a deadline (no fixed sleeps); a reconnect with the revoked key is 401.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from console.support import csrf, sign_in
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sse_support import frames

from api.console.sessions import COOKIE, SessionSettings, open_session
from api.runs import stream_grants
from api.runs.stream_grants import Grant
from store.apikeys import Principal, hash_key, revoke_key
from store.clock import ManualClock
from store.models import ApiKey, ConsoleSession

V1 = "/api/v1/agent"
ENDS_WITHIN = 5.0  # the credential check runs every 2 s (StreamSettings.auth_check_seconds), plus a read

Replicas = tuple[TestClient[Any, Any], TestClient[Any, Any]]


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def key_id(sessions: async_sessionmaker[AsyncSession], key: str) -> str:
    async with sessions() as s:
        found = await s.scalar(select(ApiKey.id).where(ApiKey.key_hash == hash_key(key)))
    assert found is not None
    return found


async def new_run(client: TestClient[Any, Any], key: str) -> str:
    body = {"prompt": "go", "config": {"worker_host": "h"}}
    resp = await client.post(f"{V1}/run", json=body, headers=h(key))
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    return run_id


async def opened(resp: Any) -> Any:
    """An open stream, once its first frame (the ``retry:`` hint) arrived."""
    assert resp.status == 200, await resp.text()
    assert "retry" in await asyncio.wait_for(anext(aiter(frames(resp))), 5)
    return resp


async def ended(resp: Any, within: float = ENDS_WITHIN) -> float:
    """Read ``resp`` to its end; the seconds it took (fails past ``within``)."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        async for _ in frames(resp):
            pass
    return time.monotonic() - started


async def test_streams_on_every_replica_end_when_their_key_is_revoked(
    replicas: Replicas, make_key: Any, sessions: async_sessionmaker[AsyncSession]
) -> None:
    a, b = replicas
    admin, member = await make_key("admin"), await make_key("member", name="dashboard")
    other = await make_key("member", name="still valid")
    run_id = await new_run(a, member)
    run_stream = await opened(await b.get(f"{V1}/runs/{run_id}/events", headers=h(member)))
    team_stream = await opened(await b.get(f"{V1}/events", headers=h(member)))
    assert (await sign_in(b, member)).status == 303  # a console session of the same key, on B
    console_stream = await opened(await b.get(f"/console/runs/{run_id}/events"))
    kept = await opened(await b.get(f"{V1}/runs/{run_id}/events", headers=h(other)))

    assert (await sign_in(a, admin)).status == 303
    revoke = await a.post(
        f"/console/keys/{await key_id(sessions, member)}/revoke",
        data={"csrf_token": await csrf(a)},
        allow_redirects=False,
    )
    assert revoke.status == 303, await revoke.text()
    took = await asyncio.gather(ended(run_stream), ended(team_stream), ended(console_stream))
    assert max(took) < ENDS_WITHIN

    assert (await b.get(f"{V1}/events", headers=h(member))).status == 401  # a reconnect is refused
    assert not kept.content.at_eof()  # another key's stream is untouched: it still gets the run's end
    assert (await a.post(f"{V1}/runs/{run_id}/cancel", headers=h(other))).status == 200
    async with asyncio.timeout(5):
        rest = [f async for f in frames(kept) if "data" in f]
    assert '"CANCELLED"' in rest[-1]["data"]


async def test_a_console_stream_ends_when_its_session_signs_out_on_another_replica(
    replicas: Replicas, make_key: Any
) -> None:
    a, b = replicas
    member = await make_key("member")
    run_id = await new_run(a, member)
    assert (await sign_in(b, member)).status == 303
    token = await csrf(b)
    console_stream = await opened(await b.get(f"/console/runs/{run_id}/events"))
    api_stream = await opened(await b.get(f"{V1}/runs/{run_id}/events", headers=h(member)))

    cookie = b.session.cookie_jar.filter_cookies(b.make_url("/console/"))[COOKIE].value
    out = await a.post(
        "/console/logout",
        data={"csrf_token": token},
        headers={"Cookie": f"{COOKIE}={cookie}"},
        allow_redirects=False,
    )
    assert out.status == 303, await out.text()
    assert await ended(console_stream) < ENDS_WITHIN
    again = await b.get(f"/console/runs/{run_id}/events", allow_redirects=False)
    assert again.status == 303  # signed out: to the sign-in page

    assert not api_stream.content.at_eof()  # the key is not revoked: its API stream goes on
    assert (await a.post(f"{V1}/runs/{run_id}/cancel", headers=h(member))).status == 200
    async with asyncio.timeout(5):
        rest = [f async for f in frames(api_stream) if "data" in f]
    assert '"CANCELLED"' in rest[-1]["data"]


async def test_grants_are_checked_in_batches_by_key_and_session(
    sessions: async_sessionmaker[AsyncSession], monkeypatch: Any
) -> None:
    """:func:`stream_grants.ended` over several IN-list batches (``CHUNK`` lowered to 2): a revoked key, a
    signed-out session, a session past its absolute end and a session of a revoked key end; the rest hold."""
    monkeypatch.setattr(stream_grants, "CHUNK", 2)
    clock = ManualClock(dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        keys = [await builders.api_key(s, clock, team.id, "member", name=f"k{i}") for i in range(5)]
    ids = [await key_id(sessions, k) for k in keys]
    grant_sessions: list[str] = []
    async with sessions() as s, s.begin():
        for i, kid in enumerate(ids):
            who = Principal(kid, team.id, f"k{i}", "member", ())
            _, user = await open_session(s, clock, who, SessionSettings())
            if i == 1:  # past its absolute end at the check below
                await s.execute(
                    update(ConsoleSession)
                    .where(ConsoleSession.id == user.session_id)
                    .values(expires_at=clock.now() + dt.timedelta(seconds=30))
                )
            if i == 2:  # signed out
                await s.execute(delete(ConsoleSession).where(ConsoleSession.id == user.session_id))
            grant_sessions.append(user.session_id)
        await revoke_key(s, clock, team.id, ids[4])
    grants = {Grant(kid) for kid in ids} | {
        Grant(kid, sid) for kid, sid in zip(ids, grant_sessions, strict=True)
    }
    clock.advance(60)
    async with sessions() as s:
        gone = await stream_grants.ended(s, clock.now(), grants)
    assert gone == {
        Grant(ids[4]),
        Grant(ids[1], grant_sessions[1]),
        Grant(ids[2], grant_sessions[2]),
        Grant(ids[4], grant_sessions[4]),
    }
