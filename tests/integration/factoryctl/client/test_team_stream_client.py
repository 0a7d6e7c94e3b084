"""``client.events.stream(...)``, the team stream's iterators (sync and async), against the real server on
SQLite and PostgreSQL (docs/events.md, "Team stream"; docs/client.md): filters, resume by cursor, a
reconnect with ``Last-Event-ID`` after the connection ends (through a proxy that ends the first one, as a
replica going away would), and problems raised as the client's usual errors.

Each test starts from the server's "now" (the position frame a live stream opens with), so what it reads
is only what it did, and the order in which the iterator connects and the test acts does not matter.
"""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest
import sse_support
from aiohttp import web
from live_servers import LiveServer, ThreadedApp, unique

from factoryctl.client import AsyncFactoryClient, BadRequestError, FactoryClient, TeamStreamEvent

EVENTS = "/api/v1/agent/events"


def now_cursor(live: LiveServer) -> str:
    return sse_support.now_cursor(live.url, live.member_key)


def dispatched(admin: FactoryClient) -> tuple[str, str]:
    """A new factory and a run dispatched to it: (factory uid, run id)."""
    factory = admin.factories.create(unique("events"), worker_host=unique("host"))
    return factory.uid, admin.factories.dispatch(factory.uid, "watch this").run_id


def test_sync_stream_filters_and_resumes_after_a_cursor(live: LiveServer) -> None:
    now = now_cursor(live)
    with FactoryClient(live.url, live.admin_key) as admin:
        factory_uid, run_id = dispatched(admin)
        _, other_run = dispatched(admin)
        admin.runs.followup(run_id, "more")
        for rid in (other_run, run_id):
            admin.runs.cancel(rid)
    with FactoryClient(live.url, live.member_key) as client:
        stream = client.events.stream(factory_uid=factory_uid, after=now)
        got = list(itertools.islice(stream, 3))
        stream.close()
        assert all(isinstance(e, TeamStreamEvent) for e in got)
        assert [(e.run_id, e.kind, e.state) for e in got] == [
            (run_id, "state", "QUEUED"),
            (run_id, "followup", None),
            (run_id, "state", "CANCELLED"),
        ]
        assert {e.factory_uid for e in got} == {factory_uid} and got[-1].terminal
        assert all(e.cursor and e.created_at is not None for e in got)
        resumed = client.events.stream(factory_uid=[factory_uid], after=got[0].cursor)
        assert [e.id for e in itertools.islice(resumed, 2)] == [e.id for e in got[1:]]
        resumed.close()
        only_cancelled = client.events.stream(state=["CANCELLED"], factory_uid=[factory_uid], after=now)
        assert [e.id for e in itertools.islice(only_cancelled, 1)] == [got[-1].id]
        only_cancelled.close()


def test_async_stream_follows_what_happens_next(live: LiveServer) -> None:
    with FactoryClient(live.url, live.admin_key) as admin:
        factory = admin.factories.create(unique("events"), worker_host=unique("host"))
    now = now_cursor(live)

    async def scenario() -> TeamStreamEvent:
        async with AsyncFactoryClient(live.url, live.member_key) as client:
            stream = client.events.stream(factory_uid=factory.uid, state="CANCELLED", after=now)
            reader = asyncio.ensure_future(anext(stream))
            with FactoryClient(live.url, live.admin_key) as admin:
                run_id = await asyncio.to_thread(lambda: admin.factories.dispatch(factory.uid, "go").run_id)
                await asyncio.to_thread(admin.runs.cancel, run_id)
            first = await asyncio.wait_for(reader, 10)
            await stream.aclose()
            assert first.run_id == run_id
            return first

    cancelled = asyncio.run(scenario())
    assert cancelled.state == "CANCELLED" and cancelled.factory_uid == factory.uid


class EndsEachConnection(ThreadedApp):
    """Forwards the team stream to ``upstream`` unchanged but for the ``retry:`` hint (50 ms, to keep the
    test short, and proving the client follows it), and ends each connection after its first event, as a
    replica going away would. Keeps the ``Last-Event-ID`` each request carried."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.resumed_from: list[str | None] = []
        super().__init__(self._app)

    async def _app(self, port: int) -> web.Application:
        app = web.Application()
        app.router.add_get(EVENTS, self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.resumed_from.append(request.headers.get("Last-Event-ID"))
        headers = {k: v for k in ("Authorization", "Last-Event-ID") if (v := request.headers.get(k))}
        async with (
            aiohttp.ClientSession() as http,
            http.get(self.upstream + request.path_qs, headers=headers) as up,
        ):
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers["Content-Type"]})
            await resp.prepare(request)
            frame: list[bytes] = []
            async for line in up.content:
                frame.append(b"retry: 50\n" if line.startswith(b"retry:") else line)
                if line == b"\n":
                    await resp.write(b"".join(frame))
                    if any(part.startswith(b"data:") for part in frame):
                        break
                    frame = []
            await resp.write_eof()
        return resp


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_dropped_connection_resumes_with_last_event_id(live: LiveServer, mode: str) -> None:
    now = now_cursor(live)
    with FactoryClient(live.url, live.admin_key) as admin:
        factory_uid, run_id = dispatched(admin)
        admin.runs.cancel(run_id)
    proxy = EndsEachConnection(live.url).start()
    try:
        if mode == "sync":
            with FactoryClient(proxy.url, live.member_key) as client:
                stream = client.events.stream(factory_uid=factory_uid, after=now)
                got = list(itertools.islice(stream, 2))
                stream.close()
        else:

            async def read() -> list[TeamStreamEvent]:
                async with AsyncFactoryClient(proxy.url, live.member_key) as client:
                    stream = client.events.stream(factory_uid=factory_uid, after=now)
                    out = [await anext(stream), await anext(stream)]
                    await stream.aclose()
                    return out

            got = asyncio.run(read())
    finally:
        proxy.stop()
    assert [e.state for e in got] == ["QUEUED", "CANCELLED"]
    assert proxy.resumed_from[:2] == [
        now,
        got[0].cursor,
    ]  # the second connection went on from the first event


def test_problems_raise_the_usual_errors(live: LiveServer) -> None:
    with FactoryClient(live.url, live.member_key) as client:
        with pytest.raises(BadRequestError) as bad:
            next(client.events.stream(state="RUNNING"))
        assert bad.value.status_code == 400 and "RUNNING" in bad.value.detail
        with pytest.raises(BadRequestError):
            next(client.events.stream(after="not-a-cursor"))
