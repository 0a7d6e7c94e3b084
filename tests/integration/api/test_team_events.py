"""``GET /agent/events``, the team stream (docs/events.md, "Team stream"), against the real app on SQLite and
PostgreSQL: live start, filters, resume by cursor, id-only frames past filtered-out events, errors, the
per-key cap shared with run streams, team isolation, shutdown, and on PostgreSQL events that commit out of
id order (only the probe can wake the stream for them) and a second replica."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import event, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sse_support import frames

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.runs import events
from api.runs.event_hub import EVENT_HUB
from store.crypto import SecretBox
from store.models import RunEvent

EVENTS = "/api/v1/agent/events"
RUNS = "/api/v1/agent/runs"
WORKERS = "/api/v1/workers"
Event = dict[str, Any]


def h(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


class Stream:
    """One open team stream, read frame by frame (each read bounded by a timeout, never a fixed sleep)."""

    def __init__(self, resp: Any) -> None:
        self.resp, self._frames = resp, frames(resp)

    async def frame(self, within: float = 10) -> dict[str, str]:
        return await asyncio.wait_for(anext(self._frames), within)

    async def until(self, last: Callable[[Event], bool], within: float = 10) -> list[Event]:
        """The events (data decoded, checked against their frame) up to the first one ``last`` accepts."""
        out: list[Event] = []
        deadline = time.monotonic() + within
        while True:
            frame = await self.frame(deadline - time.monotonic())
            if "data" not in frame:
                continue
            event: Event = json.loads(frame["data"])
            assert frame["id"] == event["cursor"] and frame["event"] == event["kind"]
            out.append(event)
            if last(event):
                return out


def state_of(run_id: str, state: str) -> Callable[[Event], bool]:
    return lambda e: e["run_id"] == run_id and e["kind"] == "state" and e["data"]["state"] == state


async def open_stream(client: TestClient[Any, Any], key: str, query: str = "", **headers: str) -> Stream:
    resp = await client.get(f"{EVENTS}{query}", headers=h(key, **headers))
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    stream = Stream(resp)
    assert await stream.frame() == {"retry": "2000"}
    return stream


async def open_live(client: TestClient[Any, Any], key: str, query: str = "") -> tuple[Stream, str]:
    """A stream started now, and the cursor it starts from (its first, id-only frame)."""
    stream = await open_stream(client, key, query)
    first = await stream.frame()
    assert set(first) == {"id"}, first
    return stream, first["id"]


async def settled(engine: AsyncEngine, within: float = 10) -> None:
    """Wait until every committed event is readable (none behind the horizon: on a shared PostgreSQL any
    writing transaction holds it), so a stream opened now starts after all of them (docs/events.md, "Team
    stream": a live start may otherwise still get events that committed just before it)."""
    deadline = time.monotonic() + within
    newest = select(RunEvent.txid, RunEvent.id).order_by(RunEvent.txid.desc(), RunEvent.id.desc()).limit(1)
    while True:
        async with AsyncSession(engine) as session:
            readable = await events.latest_position(session)
            last = (await session.execute(newest)).first()
        if last is None or (last[0], last[1]) == readable:
            return
        assert time.monotonic() < deadline, "events stayed behind the commit horizon"
        await asyncio.sleep(0.02)


async def new_run(client: TestClient[Any, Any], key: str) -> str:
    resp = await client.post(
        "/api/v1/agent/run", json={"prompt": "go", "config": {"worker_host": "host-a"}}, headers=h(key)
    )
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    return run_id


async def call(client: TestClient[Any, Any], key: str, path: str, body: dict[str, Any] | None = None) -> Any:
    resp = await client.post(path, json=body if body is not None else {}, headers=h(key))
    assert resp.status in (200, 201, 204), await resp.text()
    return await resp.json() if resp.status != 204 else None


TOKENS: dict[str, str] = {}  # run id -> the lease token of its claim, presented by every later call


async def worker(client: TestClient[Any, Any], key: str, path: str, body: dict[str, Any]) -> None:
    run_id = path.split("/")[2] if path.startswith("/runs/") else ""
    token = {"lease_token": TOKENS[run_id]} if run_id in TOKENS else {}
    await call(client, key, f"{WORKERS}{path}", {"worker_id": "wk-1", **token, **body})


async def start(client: TestClient[Any, Any], key: str, run_id: str) -> None:
    """Claim (the only queued run of host-a) and start ``run_id``."""
    claimed = await call(client, key, f"{WORKERS}/claim", {"worker_id": "wk-1", "worker_host": "host-a"})
    assert claimed["run"]["run_id"] == run_id
    TOKENS[run_id] = claimed["lease_token"]
    await worker(client, key, f"/runs/{run_id}/heartbeat", {"state": "INPROGRESS"})


def ordered(got: list[Event]) -> bool:
    positions = [events.parse_position(e["cursor"]) for e in got]
    return positions == sorted(positions) and len(set(positions)) == len(positions)


async def test_starts_live_and_sends_state_and_followup_events_in_order(
    client: Any, engine: AsyncEngine, member_key: str, worker_key: str
) -> None:
    earlier = await new_run(client, member_key)
    await call(client, member_key, f"{RUNS}/{earlier}/cancel")  # before the stream: never replayed
    await settled(engine)
    stream, _ = await open_live(client, member_key)
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    await worker(client, worker_key, f"/runs/{run_id}/logs", {"lines": [{"stream": "stdout", "text": "x"}]})
    await call(client, member_key, f"{RUNS}/{run_id}/followups", {"message": "also y"})
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "SUCCEEDED"})
    got = await stream.until(state_of(run_id, "SUCCEEDED"))
    assert [(e["kind"], e["data"].get("state") or e["data"].get("outcome")) for e in got] == [
        ("state", "QUEUED"),
        ("state", "CLAIMED"),
        ("state", "INPROGRESS"),
        ("followup", "delivered"),  # the log line is left out without logs=true
        ("state", "SUCCEEDED"),
    ]
    assert all(e["run_id"] == run_id and e["factory_uid"] is None for e in got)
    assert ordered(got) and all(e["created_at"].endswith("Z") for e in got)
    stream.resp.close()


async def test_filters_by_factory_state_and_logs(
    client: Any, admin_key: str, member_key: str, worker_key: str
) -> None:
    created = [
        await call(client, admin_key, "/api/v1/factory", {"name": name, "worker_host": "host-a"})
        for name in ("fa-one", "fa-two")
    ]
    one, two = (factory["uid"] for factory in created)
    by_factory, _ = await open_live(client, member_key, f"?factory_uid={one}")
    by_state, _ = await open_live(client, member_key, "?state=cancelled&state=FAILED")
    with_logs, _ = await open_live(client, member_key, f"?logs=true&factory_uid={one},{two}")
    everything, _ = await open_live(client, member_key)
    run_one = (await call(client, member_key, f"/api/v1/factory/{one}/runs", {"prompt": "p"}))["run_id"]
    run_two = (await call(client, member_key, f"/api/v1/factory/{two}/runs", {"prompt": "p"}))["run_id"]
    plain = await new_run(client, member_key)  # no factory
    await call(client, member_key, f"{RUNS}/{run_two}/followups", {"message": "m"})
    for run_id in (run_two, plain):
        await call(client, member_key, f"{RUNS}/{run_id}/cancel")
    await start(client, worker_key, run_one)
    await worker(
        client, worker_key, f"/runs/{run_one}/logs", {"lines": [{"stream": "stderr", "text": "a\nb"}]}
    )
    await call(client, member_key, f"{RUNS}/{run_one}/cancel")  # INPROGRESS: a cancel request first
    await worker(client, worker_key, f"/runs/{run_one}/state", {"state": "CANCELLED"})
    done = state_of(run_one, "CANCELLED")

    got = await by_factory.until(done)
    assert {e["run_id"] for e in got} == {run_one} and {e["factory_uid"] for e in got} == {one}
    assert [e["data"]["state"] for e in got] == ["QUEUED", "CLAIMED", "INPROGRESS", "INPROGRESS", "CANCELLED"]
    assert got[3]["data"]["cancel_requested"] is True

    got = await by_state.until(done)
    assert [(e["run_id"], e["data"]["state"]) for e in got] == [
        (run_two, "CANCELLED"),
        (plain, "CANCELLED"),
        (run_one, "CANCELLED"),
    ]

    got = await with_logs.until(done)
    assert {e["run_id"] for e in got} == {run_one, run_two}
    assert [e["data"] for e in got if e["kind"] == "log"] == [{"stream": "stderr", "text": "a\nb"}]
    assert [e["kind"] for e in got].count("followup") == 1 and ordered(got)

    got = await everything.until(done)
    assert {e["run_id"] for e in got} == {run_one, run_two, plain}
    assert "log" not in {e["kind"] for e in got} and ordered(got)
    for stream in (by_factory, by_state, with_logs, everything):
        stream.resp.close()


async def test_resume_by_cursor_without_loss_or_duplicates(client: Any, member_key: str) -> None:
    stream, start_cursor = await open_live(client, member_key)
    first, second = await new_run(client, member_key), await new_run(client, member_key)
    await call(client, member_key, f"{RUNS}/{first}/followups", {"message": "m"})
    for run_id in (first, second):
        await call(client, member_key, f"{RUNS}/{run_id}/cancel")
    done = state_of(second, "CANCELLED")
    everything = await stream.until(done)
    assert len(everything) == 5 and ordered(everything)
    stream.resp.close()

    async def resumed(query: str = "", **headers: str) -> list[Event]:
        again = await open_stream(client, member_key, query, **headers)
        try:
            return await again.until(done)
        finally:
            again.resp.close()

    assert await resumed(f"?after={start_cursor}") == everything
    cut = everything[1]["cursor"]
    assert await resumed(**{"Last-Event-ID": cut}) == everything[2:]
    assert await resumed(f"?after={cut}") == everything[2:]
    header_wins = await resumed(f"?after={start_cursor}", **{"Last-Event-ID": everything[3]["cursor"]})
    assert header_wins == everything[4:]


async def test_an_id_only_frame_moves_the_cursor_past_filtered_out_events(
    client: Any, member_key: str
) -> None:
    stream, start_cursor = await open_live(client, member_key, "?state=CANCELLED")
    run_id = await new_run(client, member_key)  # QUEUED: filtered out
    moved = await stream.frame()
    assert set(moved) == {"id"} and events.parse_position(moved["id"]) > events.parse_position(start_cursor)
    unfiltered = await open_stream(client, member_key, **{"Last-Event-ID": moved["id"]})
    await call(client, member_key, f"{RUNS}/{run_id}/cancel")
    [cancelled] = await stream.until(state_of(run_id, "CANCELLED"))
    assert await unfiltered.until(state_of(run_id, "CANCELLED")) == [cancelled]  # QUEUED is not read again
    for s in (stream, unfiltered):
        s.resp.close()


async def test_errors_are_problems(client: Any, member_key: str, worker_key: str) -> None:
    bad = [
        "?after=abc",
        "?after=12",
        "?after=1-",
        "?after=-1",
        "?after=1-x",
        "?after=%C2%B2-1",  # a Unicode digit
        f"?after={2**63}-1",  # beyond a BIGINT
        "?after=",
        "?state=RUNNING",
        "?state=QUEUED,",
        "?logs=maybe",
        "?state=FAILED&logs=true",
        "?factory_uid=",
    ]
    for query in bad:
        resp = await client.get(f"{EVENTS}{query}", headers=h(member_key))
        assert resp.status == 400 and resp.content_type == "application/problem+json", query
    for header in ("7", "1-2-3", " "):
        resp = await client.get(EVENTS, headers=h(member_key, **{"Last-Event-ID": header}))
        assert resp.status == 400, header
    assert (await client.get(EVENTS)).status == 401
    assert (await client.get(EVENTS, headers=h(worker_key))).status == 403


async def test_the_per_key_cap_is_shared_with_run_streams(
    client: Any, api_app: Any, engine: AsyncEngine, member_key: str, make_key: Any
) -> None:
    hub = api_app[EVENT_HUB]
    hub.settings.heartbeat_seconds, hub.settings.max_streams_per_key = 0.2, 2
    run_id = await new_run(client, member_key)
    await settled(engine)
    team, _ = await open_live(client, member_key)
    run_stream = await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key))
    assert run_stream.status == 200
    for path in (EVENTS, f"{RUNS}/{run_id}/events"):  # either kind is one too many
        resp = await client.get(path, headers=h(member_key))
        assert resp.status == 429 and resp.content_type == "application/problem+json"
    other, _ = await open_live(client, await make_key("member"))  # the cap is per key
    assert await team.frame() == {"comment": "heartbeat"}  # the idle stream stays open
    for resp in (team.resp, run_stream, other.resp):
        resp.close()
    deadline = time.monotonic() + 5
    while hub.open_by_key and time.monotonic() < deadline:  # closed connections release their slots
        await asyncio.sleep(0.05)
        await client.get("/healthz")
    assert not hub.open_by_key and not hub.tasks


async def test_another_teams_events_are_invisible(client: Any, member_key: str, other_team_key: str) -> None:
    mine, _ = await open_live(client, member_key)
    theirs, _ = await open_live(client, other_team_key)
    foreign = await new_run(client, other_team_key)
    await call(client, other_team_key, f"{RUNS}/{foreign}/cancel")
    own = await new_run(client, member_key)
    assert [e["run_id"] for e in await mine.until(state_of(own, "QUEUED"))] == [own]
    assert [e["run_id"] for e in await theirs.until(state_of(foreign, "CANCELLED"))] == [foreign, foreign]
    for s in (mine, theirs):
        s.resp.close()


async def test_shutdown_ends_team_streams_and_leaves_no_task(
    engine: AsyncEngine, box: SecretBox, tmp_path: Path, make_key: Any
) -> None:
    app = create_app(ServerSettings(data_dir=tmp_path), engine, box, route_modules=ROUTE_MODULES)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    key = await make_key("member")
    run_id = await new_run(client, key)
    await settled(engine)
    team, _ = await open_live(client, key)
    run_stream = await client.get(f"{RUNS}/{run_id}/events", headers=h(key))
    hub = app[EVENT_HUB]
    assert len(hub.tasks) == 2
    handlers = set(hub.tasks)
    started = time.monotonic()
    await client.server.close()  # on_shutdown ends the streams; cleanup cancels the probe
    assert time.monotonic() - started < 5
    assert await asyncio.wait_for(team.resp.content.read(), 5) == b""  # ended cleanly, nothing more
    await run_stream.read()
    await client.close()
    assert all(t.done() for t in handlers) and not hub.tasks and not hub.open_by_key
    assert "run-events-probe" not in {t.get_name() for t in asyncio.all_tasks()}


# --- PostgreSQL: commit order is not id order ---------------------------------------------------------


async def _event(conn: AsyncConnection, run_id: str, team_id: str, label: str) -> int:
    """A ``followup`` event written straight into the table, as any writer's transaction would (no
    in-process wake-up: only the probe can find it). Returns its id."""
    row = {
        "run_id": run_id,
        "team_id": team_id,
        "factory_uid": None,
        "kind": "followup",
        "data": {"followup_id": label, "outcome": "queued", "message": label},
        "created_at": dt.datetime.now(dt.UTC),
    }
    result = await conn.execute(insert(RunEvent).values(row).returning(RunEvent.id))
    return int(result.scalar_one())


class TeamReads:
    """When the team stream's reads (``read_ordered`` of one team) started, recorded as each one finishes:
    a read that started after a commit has seen its event, or found it behind the horizon."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine, self.finished = engine.sync_engine, list[float]()

    @staticmethod
    def _is_team_read(statement: str) -> bool:
        return "run_events.team_id" in statement and "ORDER BY run_events.txid, run_events.id" in statement

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._is_team_read(statement):
            conn.info["team_read"] = time.monotonic()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        started = conn.info.pop("team_read", None)  # None: it started before this listened
        if started is not None:
            self.finished.append(started)

    def __enter__(self) -> TeamReads:
        event.listen(self.engine, "before_cursor_execute", self._before)
        event.listen(self.engine, "after_cursor_execute", self._after)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)

    async def one_started_after(self, moment: float, within: float = 5) -> None:
        deadline = time.monotonic() + within
        while not any(started > moment for started in self.finished):
            assert time.monotonic() < deadline, "the stream did not read again"
            await asyncio.sleep(0.01)


def messages(*wanted: str) -> Callable[[Event], bool]:
    """True at the event that completes the set of follow-up messages ``wanted``."""
    seen: set[str] = set()

    def last(e: Event) -> bool:
        seen.add(e["data"].get("message", ""))
        return seen >= set(wanted)

    return last


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("late_txid", ["lower", "higher"])
async def test_an_event_that_commits_after_a_higher_id_is_delivered_once_in_order(
    client: Any, api_app: Any, engine: AsyncEngine, member_key: str, team_id: str, late_txid: str
) -> None:
    """Two transactions; the one whose event has the LOWER id commits LAST, after the stream has read
    again. ``late_txid`` "lower": it also has the lower transaction id, so the other's event waits behind
    the horizon until it commits. "higher": the other transaction took its id first, so its event is
    readable at once and sent, and the late event sorts after it. Either way ``max(id)`` does not move when
    the late one commits (only the readable position does), and nothing in this process calls
    ``notify_events``: the probe alone must wake the stream."""
    run_id = await new_run(client, member_key)
    await settled(engine)
    stream, _ = await open_live(client, member_key)
    with TeamReads(engine) as reads:
        async with engine.connect() as late, engine.connect() as early:
            await late.begin()
            await early.begin()
            if late_txid == "higher":
                await early.execute(text("SELECT pg_current_xact_id()"))
            low = await _event(late, run_id, team_id, "late")
            high = await _event(early, run_id, team_id, "early")
            assert low < high
            await early.commit()
            await reads.one_started_after(time.monotonic())  # the probe saw max(id) grow: read again
            sent = await stream.until(messages("early")) if late_txid == "higher" else []
            await late.commit()
            committed = time.monotonic()
    got = sent + await stream.until(messages("late") if sent else messages("early", "late"))
    assert time.monotonic() - committed < 1.0 + api_app[EVENT_HUB].settings.poll_seconds
    assert [e["id"] for e in got] == ([high, low] if late_txid == "higher" else [low, high])
    assert ordered(got)
    stream.resp.close()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_an_event_written_on_one_replica_reaches_a_team_stream_on_another(
    replicas: tuple[TestClient[Any, Any], TestClient[Any, Any]], make_key: Any
) -> None:
    a, b = replicas
    key = await make_key("member")
    stream, _ = await open_live(b, key)
    run_id = await new_run(a, key)
    # It arrives through B's probe of the event log; how fast is measured by bench/events.py, not here.
    got = await stream.until(state_of(run_id, "QUEUED"), within=5)
    assert [e["run_id"] for e in got] == [run_id]
    stream.resp.close()


def team_reads(statements: list[str]) -> int:
    """How many of ``statements`` read a team's events in stream order (:func:`events.read_ordered`)."""
    return sum(
        "FROM run_events" in s
        and "run_events.team_id" in s
        and "ORDER BY run_events.txid, run_events.id" in s
        for s in statements
    )


async def test_the_streams_of_a_team_share_one_reader(
    client: Any, engine: AsyncEngine, member_key: str
) -> None:
    """Eight dashboards get every event once and in order, while the store reads each batch once for all
    of them (docs/events.md, "Team stream"): before, every stream read every event itself."""
    await settled(engine)
    streams = [(await open_live(client, member_key))[0] for _ in range(8)]
    read: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        read.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        runs = [await new_run(client, member_key) for _ in range(10)]
        for run_id in runs:
            await call(client, member_key, f"{RUNS}/{run_id}/cancel")
        got = [await s.until(state_of(runs[-1], "CANCELLED")) for s in streams]
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    commits = 2 * len(runs)
    assert [(e["run_id"], e["data"]["state"]) for e in got[0]] == [(r, "QUEUED") for r in runs] + [
        (r, "CANCELLED") for r in runs
    ]
    assert all(g == got[0] for g in got) and ordered(got[0])
    # one read per wake-up (a commit, or the probe seeing one), not one per stream: 8 streams read alone
    # made at least 8 reads per commit
    assert team_reads(read) <= 2 * commits + 4, team_reads(read)
    for s in streams:
        s.resp.close()


async def test_a_stream_behind_the_shared_window_reads_alone_and_misses_nothing(
    client: Any, api_app: Any, engine: AsyncEngine, member_key: str
) -> None:
    api_app[EVENT_HUB].settings.batch = 3  # a window of 12 events
    await settled(engine)
    leader, start_cursor = await open_live(client, member_key)
    runs = [await new_run(client, member_key) for _ in range(10)]
    for run_id in runs:
        await call(client, member_key, f"{RUNS}/{run_id}/cancel")
    done = state_of(runs[-1], "CANCELLED")
    everything = await leader.until(done)  # the leader keeps the feed's window at the newest 12 events
    assert len(everything) == 20 and ordered(everything)
    for cut in (start_cursor, everything[3]["cursor"], everything[12]["cursor"]):  # behind, and inside
        again = await open_stream(client, member_key, **{"Last-Event-ID": cut})
        tail = [e for e in everything if events.parse_position(e["cursor"]) > events.parse_position(cut)]
        assert await again.until(done) == tail
        again.resp.close()
    leader.resp.close()


async def test_a_burst_of_commits_costs_a_stream_one_read_per_interval(
    client: Any, api_app: Any, engine: AsyncEngine, member_key: str, worker_key: str
) -> None:
    """Every commit wakes every stream; a stream still reads at most once per ``min_read_interval`` and
    loses nothing of the burst (docs/events.md, "Bounds")."""
    api_app[EVENT_HUB].settings.min_read_interval = 1.0
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    await settled(engine)
    stream, _ = await open_live(client, member_key, "?logs=true")
    read: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        read.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    began = time.monotonic()
    try:
        for n in range(30):  # thirty commits, each waking the stream
            await worker(
                client, worker_key, f"/runs/{run_id}/logs", {"lines": [{"stream": "stdout", "text": f"l{n}"}]}
            )
        got = await stream.until(lambda e: e["kind"] == "log" and e["data"]["text"] == "l29")
        elapsed = time.monotonic() - began
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert [e["data"]["text"] for e in got] == [f"l{n}" for n in range(30)]
    assert team_reads(read) <= elapsed / 1.0 + 2, (team_reads(read), elapsed)
    stream.resp.close()
