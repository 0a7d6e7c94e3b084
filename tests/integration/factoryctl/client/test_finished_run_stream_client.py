"""``client.runs.events`` on a finished run it has read to the end (docs/events.md, "Ordering and delivery":
nothing left is a 204): the iterator ends after one request, sync and async, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
from live_servers import LiveServer

from factoryctl.client import AsyncFactoryClient, FactoryClient


def finished_run(live: LiveServer) -> tuple[str, int]:
    """A cancelled run and the id of its last event."""
    with FactoryClient(live.url, live.member_key) as client:
        run_id = client.runs.create("go", config={"worker_host": "nowhere"}).run_id
        client.runs.cancel(run_id)
        events = list(client.runs.events(run_id))
    assert [e.state for e in events] == ["QUEUED", "CANCELLED"]
    return run_id, events[-1].id


def test_sync_iterator_ends_at_once_on_a_204(live: LiveServer) -> None:
    run_id, last = finished_run(live)
    sent: list[httpx.Request] = []
    with httpx.Client(event_hooks={"request": [sent.append]}) as http:
        client = FactoryClient(live.url, live.member_key, http_client=http)
        assert list(client.runs.events(run_id, after=last)) == []
    assert [r.url.path for r in sent] == [f"/api/v1/agent/runs/{run_id}/events"]


async def test_async_iterator_ends_at_once_on_a_204(live: LiveServer) -> None:
    run_id, last = finished_run(live)
    sent: list[httpx.Request] = []

    async def note(request: httpx.Request) -> None:
        sent.append(request)

    async with httpx.AsyncClient(event_hooks={"request": [note]}) as http:
        client = AsyncFactoryClient(live.url, live.member_key, http_client=http)
        assert [e async for e in client.runs.events(run_id, after=last)] == []
    assert [r.url.path for r in sent] == [f"/api/v1/agent/runs/{run_id}/events"]
