"""The worker calls' retry policy, call by call, through a proxy that refuses or loses answers.

Each test proves one row of the table in docs/workers.md against the real server: how often a
call is repeated, and what a repeat after a lost answer does on the server (nothing twice, except
log lines, which are at least once by decision).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import LocalServer, LossyProxy, Store

from factoryctl.client import APIConnectionError, AsyncFactoryClient, ConflictError, InternalServerError
from factoryctl.client.worker_resources import conflict_run_state
from store.crypto import SecretBox

HOST = "myhost"
WID = "wk-1"


@pytest.fixture
async def proxy(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> AsyncIterator[LossyProxy]:
    server = await LocalServer(engine, box, tmp_path / "data", claim_wait_max_seconds=1).start()
    lossy = await LossyProxy(server.url).start()
    yield lossy
    await lossy.stop()
    await server.stop()


@pytest.fixture
async def client(proxy: LossyProxy, store: Store) -> AsyncIterator[AsyncFactoryClient]:
    key = await store.key("worker", [HOST])
    async with AsyncFactoryClient(proxy.url, key) as api:
        yield api


TOKENS: dict[str, str | None] = {}  # run id -> the lease token its claim answered


async def claimed(client: AsyncFactoryClient, store: Store, *, start: bool = True) -> str:
    run_id = await store.new_run(HOST)
    claim = await client.workers.claim(HOST, worker_id=WID)
    assert claim is not None and claim.run.run_id == run_id
    TOKENS[run_id] = claim.lease_token
    if start:
        await client.workers.heartbeat(
            run_id, state="INPROGRESS", worker_id=WID, lease_token=claim.lease_token
        )
    return run_id


async def test_a_lost_claim_answer_strands_one_run_until_its_lease_lapses(
    client: AsyncFactoryClient, proxy: LossyProxy, store: Store
) -> None:
    first = await store.new_run(HOST, prompt="first")
    second = await store.new_run(HOST, prompt="second")
    proxy.lose_answer("/claim")
    claim = await client.workers.claim(HOST, worker_id=WID)
    assert proxy.lost["/claim"] == 1 and proxy.hits["/claim"] == 2  # repeated after the lost answer
    assert claim is not None and claim.run.run_id == second  # the repeat takes the next run, not the same
    stranded = await store.run(first)
    assert (stranded.state, stranded.attempt) == ("CLAIMED", 1)  # ours, but we never heard of it

    assert await store.lapse_lease(first) == 1  # no heartbeat came: the reaper puts it back in place
    assert await store.state(first) == "QUEUED"
    again = await client.workers.claim(HOST, worker_id=WID)
    assert again is not None and (again.run.run_id, again.run.attempt) == (first, 2)


async def test_heartbeats_are_not_repeated_but_a_start_is(
    client: AsyncFactoryClient, proxy: LossyProxy, store: Store
) -> None:
    run_id = await claimed(client, store, start=False)
    proxy.refuse("/heartbeat", 2)
    beat = await client.workers.heartbeat(
        run_id, state="INPROGRESS", worker_id=WID, lease_token=TOKENS[run_id]
    )
    assert beat.state == "INPROGRESS" and proxy.hits["/heartbeat"] == 3

    proxy.refuse("/heartbeat", 1)
    with pytest.raises(InternalServerError):
        await client.workers.heartbeat(run_id, worker_id=WID, lease_token=TOKENS[run_id])
    assert proxy.hits["/heartbeat"] == 1  # the next beat is the retry

    proxy.lose_answer("/heartbeat")
    with pytest.raises(APIConnectionError):
        await client.workers.heartbeat(run_id, worker_id=WID, lease_token=TOKENS[run_id])
    assert proxy.hits["/heartbeat"] == 1
    assert (
        await client.workers.heartbeat(run_id, worker_id=WID, lease_token=TOKENS[run_id])
    ).state == "INPROGRESS"


async def test_a_repeated_start_after_a_lost_answer_is_harmless(
    client: AsyncFactoryClient, proxy: LossyProxy, store: Store
) -> None:
    run_id = await claimed(client, store, start=False)
    proxy.lose_answer("/heartbeat")
    beat = await client.workers.heartbeat(
        run_id, state="INPROGRESS", worker_id=WID, lease_token=TOKENS[run_id]
    )
    assert beat.state == "INPROGRESS" and proxy.hits["/heartbeat"] == 2
    assert (await store.run(run_id)).state == "INPROGRESS"


async def test_a_report_is_repeated_until_it_lands_and_once_only(
    client: AsyncFactoryClient, proxy: LossyProxy, store: Store
) -> None:
    run_id = await claimed(client, store)
    proxy.refuse("/state", 3)
    done = await client.workers.report_state(
        run_id, "SUCCEEDED", status_message="ok", worker_id=WID, lease_token=TOKENS[run_id]
    )
    assert done.state == "SUCCEEDED" and proxy.hits["/state"] == 4

    lost = await claimed(client, store)
    proxy.lose_answer("/state")
    with pytest.raises(ConflictError) as refused:
        await client.workers.report_state(
            lost, "FAILED", status_message="broke", worker_id=WID, lease_token=TOKENS[lost]
        )
    assert proxy.hits["/state"] == 2  # it landed, the answer was lost, the repeat was refused ...
    assert conflict_run_state(refused.value) == "FAILED"  # ... naming the state it recorded
    run = await store.run(lost)
    assert run.state == "FAILED" and run.status_message == {"message": "broke"}


async def test_a_lost_log_answer_stores_the_batch_twice(
    client: AsyncFactoryClient, proxy: LossyProxy, store: Store
) -> None:
    run_id = await claimed(client, store)
    proxy.lose_answer("/logs")
    assert (
        await client.workers.append_logs(
            run_id, [("stdout", "one"), ("stderr", "two")], worker_id=WID, lease_token=TOKENS[run_id]
        )
        == 2
    )
    assert proxy.hits["/logs"] == 2  # at least once, by decision: a duplicate beats a gap
    assert await store.logs(run_id) == [("stdout", "one"), ("stderr", "two")] * 2


async def test_secrets_are_repeated(client: AsyncFactoryClient, proxy: LossyProxy, store: Store) -> None:
    run_id = await claimed(client, store)
    proxy.refuse("/secrets", 2)
    proxy.lose_answer("/secrets")
    assert (
        await client.workers.secrets(run_id, worker_id=WID, lease_token=TOKENS[run_id]) == {}
    )  # read-only: always safe
    assert proxy.hits["/secrets"] == 4
