"""``factoryctl runs watch`` and ``runs logs --follow`` as real subprocesses against the real server, and the
typed client's event iterators (sync and async) (docs/events.md, docs/cli.md "runs").

The server is the real app on a real socket (``live_servers.LiveServer``, SQLite); the "worker" is the
typed client speaking the worker protocol with the admin key (service-hosted runs, ``worker_host ""``).
A watcher started before the run moves proves the live part; one started after the end proves the replay.
"""

from __future__ import annotations

import asyncio

import pytest
from cli_runner import spawn
from live_servers import LiveServer

from factoryctl.client import AsyncFactoryClient, FactoryClient

WORKER = "wk-watch"
TOKENS: dict[str, str | None] = {}  # run id -> the lease token its claim answered


def start_run(api: FactoryClient) -> str:
    """A service-hosted run, claimed and started by the test's "worker"."""
    run_id = api.runs.create("watch me").run_id
    claim = api.workers.claim("", worker_id=WORKER)
    assert claim is not None and claim.run.run_id == run_id
    TOKENS[run_id] = claim.lease_token
    api.workers.heartbeat(run_id, state="INPROGRESS", worker_id=WORKER, lease_token=claim.lease_token)
    return run_id


def finish(api: FactoryClient, run_id: str, state: str) -> None:
    token = TOKENS[run_id]
    lines = [("stdout", "building"), ("stderr", "warning: x")]
    api.workers.append_logs(run_id, lines, worker_id=WORKER, lease_token=token)
    api.workers.report_state(run_id, state, status_message="all done", worker_id=WORKER, lease_token=token)


@pytest.mark.parametrize(("state", "code"), [("SUCCEEDED", 0), ("FAILED", 1)])
def test_watch_follows_until_terminal_and_exits_by_outcome(
    live: LiveServer, api: FactoryClient, state: str, code: int
) -> None:
    run_id = start_run(api)
    watcher = spawn(live, "runs", "watch", run_id)
    first = watcher.stderr.readline() if watcher.stderr else ""  # the replay is on screen: it is live now
    assert first.startswith("[QUEUED]")
    finish(api, run_id, state)
    watcher.wait(timeout=30)  # a few lines: the pipes cannot fill up
    # read on from the same text streams: communicate() would skip what readline() buffered already
    out = watcher.stdout.read() if watcher.stdout else ""
    err = first + (watcher.stderr.read() if watcher.stderr else "")
    assert watcher.returncode == code, err
    assert out.splitlines() == ["building"]
    assert "warning: x" in err and f"[{state}] all done" in err
    assert "[CLAIMED]" in err and "[INPROGRESS]" in err


def test_watch_of_a_finished_run_replays_and_logs_follow_prints_lines(
    live: LiveServer, api: FactoryClient
) -> None:
    run_id = start_run(api)
    finish(api, run_id, "SUCCEEDED")
    watched = spawn(live, "runs", "watch", run_id)
    assert watched.wait(timeout=30) == 0
    followed = spawn(live, "runs", "logs", run_id, "--follow")
    out, err = followed.communicate(timeout=30)
    assert followed.returncode == 0, err
    assert out.splitlines() == ["building"] and err.splitlines() == ["warning: x"]
    cancelled = api.runs.create("never runs").run_id
    api.runs.cancel(cancelled)
    assert spawn(live, "runs", "watch", cancelled).wait(timeout=30) == 1
    missing = spawn(live, "runs", "watch", "run_missing")
    assert missing.wait(timeout=30) == 1  # a 404 problem: the CLI's usual refusal


def test_client_iterators_sync_and_async_resume_after(live: LiveServer, api: FactoryClient) -> None:
    run_id = start_run(api)
    finish(api, run_id, "ERROR")
    events = list(api.runs.events(run_id))
    assert [e.state or e.text for e in events] == [
        "QUEUED",
        "CLAIMED",
        "INPROGRESS",
        "building",
        "warning: x",
        "ERROR",
    ]
    assert events[-1].terminal and events[-1].data["status_message"] == {"message": "all done"}
    resumed = list(api.runs.events(run_id, after=events[2].id))
    assert [e.id for e in resumed] == [e.id for e in events[3:]]

    async def read() -> list[int]:
        async with AsyncFactoryClient(live.url, live.admin_key) as client:
            return [e.id async for e in client.runs.events(run_id)]

    assert asyncio.run(read()) == [e.id for e in events]
