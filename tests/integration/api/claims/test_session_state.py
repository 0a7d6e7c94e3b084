"""``PUT``/``GET /api/v1/workers/runs/{id}/session-state``: an agent CLI's session files between attempts
(docs/agents.md, "Sessions and follow-ups"), lease holder only, capped, encrypted at rest, gone with the
run; and the in-process path service-hosted workers take (:class:`api.claims.protocol.WorkerProtocol`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims.errors import LeaseRefused
from api.claims.protocol import Holder, WorkerProtocol
from api.claims.session_state import MAX_SESSION_STATE_BYTES, SessionStateTooLarge
from store.models import Run, RunSessionState

if TYPE_CHECKING:
    from conftest import MakeKey, NewRun

CLAIM = "/api/v1/workers/claim"
ARCHIVE = b"\x1f\x8b" + b"session-file: the earlier conversation " * 50 + os.urandom(64)


def headers(key: str, worker_id: str | None = "wk-1", token: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {key}"}
    if worker_id is not None:
        out["X-Factory-Worker-Id"] = worker_id
    if token is not None:
        out["X-Factory-Lease-Token"] = token
    return out


def path(run_id: str) -> str:
    return f"/api/v1/workers/runs/{run_id}/session-state"


async def test_session_state_is_the_lease_holders_capped_and_sealed_at_rest(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    stranger = await make_key("worker", worker_hosts=["otherhost"])
    foreign = await make_key("worker", worker_hosts=["myhost"], team="other-team")
    member = await make_key("member")
    run_id = await new_run(worker_host="myhost")

    resp = await client.put(path(run_id), data=ARCHIVE, headers=headers(key))
    assert resp.status == 409  # queued: nobody holds the lease
    resp = await client.post(
        CLAIM, json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": "wk-1"}, headers=headers(key)
    )
    assert resp.status == 200
    token = (await resp.json())["lease_token"]

    resp = await client.get(path(run_id), headers=headers(key, token=token))
    assert resp.status == 404  # no attempt saved any
    resp = await client.put(path(run_id), data=ARCHIVE, headers=headers(key, token=token))
    assert resp.status == 200 and await resp.json() == {"run_id": run_id, "size": len(ARCHIVE)}
    resp = await client.get(path(run_id), headers=headers(key, token=token))
    assert resp.status == 200 and await resp.read() == ARCHIVE
    assert resp.headers["Cache-Control"] == "no-store"

    for who, status in (
        (headers(key, worker_id="wk-2", token=token), 409),  # same key, another process
        (headers(key, token="not-the-token"), 409),  # a stale or guessed token
        (headers(key, token=None), 409),
        (headers(stranger, token=token), 403),  # another host's key
        (headers(foreign, token=token), 404),  # another team's
        (headers(member, token=token), 403),  # members never read it
    ):
        assert (await client.get(path(run_id), headers=who)).status == status, who
        assert (await client.put(path(run_id), data=b"x", headers=who)).status == status, who

    too_big = b"\0" * (MAX_SESSION_STATE_BYTES + 1)
    resp = await client.put(path(run_id), data=too_big, headers=headers(key, token=token))
    assert resp.status == 413
    resp = await client.put(path(run_id), data=b"", headers=headers(key, token=token))
    assert resp.status == 422

    async with sessions() as s:
        row = await s.get(RunSessionState, run_id)
        assert row is not None and row.size == len(ARCHIVE) and row.attempt == 1
        assert ARCHIVE not in row.ciphertext and b"the earlier conversation" not in row.ciphertext

    resp = await client.get(f"/api/v1/agent/runs/{run_id}", headers=headers(member))
    assert resp.status == 200 and "session-file" not in json.dumps(await resp.json())

    async with sessions() as s, s.begin():
        await s.execute(delete(Run).where(Run.run_id == run_id))
    async with sessions() as s:
        assert (await s.scalar(select(RunSessionState).where(RunSessionState.run_id == run_id))) is None


async def test_the_in_process_path_keeps_the_same_rules(
    worker_app: Callable[..., web.Application],
    new_run: NewRun,
) -> None:
    protocol = WorkerProtocol.of(worker_app())  # the path service-hosted workers take
    run_id = await new_run()
    claimed = await protocol.claim(("",), "service:a/0")
    assert claimed is not None and claimed["run"]["run_id"] == run_id
    holder = Holder("service:a/0", claimed["lease_token"])
    assert await protocol.load_session_state(run_id, holder) is None
    assert await protocol.save_session_state(run_id, holder, ARCHIVE) == len(ARCHIVE)
    assert await protocol.save_session_state(run_id, holder, ARCHIVE[::-1]) == len(ARCHIVE)  # replaced
    assert await protocol.load_session_state(run_id, holder) == ARCHIVE[::-1]
    with pytest.raises(LeaseRefused):
        await protocol.load_session_state(run_id, Holder("service:b/0", claimed["lease_token"]))
    with pytest.raises(SessionStateTooLarge):
        await protocol.save_session_state(run_id, holder, b"\0" * (MAX_SESSION_STATE_BYTES + 1))
