"""Two ``factoryctl serve`` processes on one PostgreSQL store: event streams held open on replica B see a
change made through replica A within 1 s (docs/events.md, "Ordering and delivery", "Team stream").

B learns of A's commits only through its probe (``notify_events`` wakes A's own streams): the run's stream,
the team stream over HTTP and ``factoryctl events`` against B all get A's cancel.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.fernet import Fernet
from serve_support import CLI, Served, clean_env, serving
from sse_support import frames

from api.runs.events import parse_position

pytestmark = pytest.mark.slow
V1 = "/api/v1/agent"


class Frames:
    """An open SSE response, frame by frame (``id``/``event``/``data``/``retry`` fields)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp, self._frames = resp, frames(resp)

    async def next(self, within: float = 10) -> dict[str, str]:
        """The next frame, heartbeats and other comments passed over."""
        async with asyncio.timeout(within):
            async for frame in self._frames:
                if "comment" not in frame:
                    return frame
        raise AssertionError("the stream ended")

    async def state(self, wanted: str, within: float = 10) -> dict[str, Any]:
        """The data of the next ``state`` event entering ``wanted`` (events before it are passed over)."""
        deadline = time.monotonic() + within
        while True:
            frame = await self.next(deadline - time.monotonic())
            data = json.loads(frame["data"]) if "data" in frame else {}
            if data.get("kind") == "state" and data["data"]["state"] == wanted:
                return data


async def _scenario(a: Served, b: Served, key: str) -> tuple[str, str]:
    """Returns (run id, the team stream's starting cursor) after asserting both streams' latency."""
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(a.url + f"{V1}/run", json={"prompt": "p", "config": {"worker_host": "x"}}) as r:
            assert r.status == 200, await r.text()
            run_id = (await r.json())["run_id"]
        run_resp = await http.get(b.url + f"{V1}/runs/{run_id}/events")
        team_resp = await http.get(b.url + f"{V1}/events")
        run_stream, team_stream = Frames(run_resp), Frames(team_resp)
        assert (await run_stream.state("QUEUED"))["run_id"] == run_id  # replayed: the stream is open
        assert "retry" in await team_stream.next()
        start = (await team_stream.next())["id"]  # a live stream first says where it starts
        async with http.post(a.url + f"{V1}/runs/{run_id}/cancel") as r:
            assert r.status == 200, await r.text()
        # B's streams learn of A's change through B's probe; its latency is bench/events.py's to measure.
        by_run, by_team = await asyncio.gather(
            run_stream.state("CANCELLED", within=5), team_stream.state("CANCELLED", within=5)
        )
        assert by_run["run_id"] == by_team["run_id"] == run_id and parse_position(
            by_team["cursor"]
        ) > parse_position(start)
        run_resp.close()
        team_resp.close()
    return run_id, start


def _first_line(proc: subprocess.Popen[str], within: float = 15) -> str:
    """The first line ``proc`` prints, waited for at most ``within`` seconds."""
    assert proc.stdout is not None
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(proc.stdout.readline).result(timeout=within)


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:  # the test failed before its Ctrl-C
        proc.kill()
        proc.wait()


def test_streams_on_one_replica_see_changes_made_through_the_other(tmp_path: Path, pg_template: Any) -> None:
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    url = pg_template.new_database()
    env = {"FACTORY_SECRET_KEY": Fernet.generate_key().decode()}
    try:
        with ExitStack() as stack:
            a = stack.enter_context(serving(tmp_path / "a", env=env, database=url))
            # the first server wrote the admin key; the second shares its store
            b = stack.enter_context(serving(tmp_path / "b", env=env, database=url, key_file=a.key_file))
            run_id, start = asyncio.run(_scenario(a, b, a.key))

            # factoryctl events against B, from before the cancel: prints it as one JSON line
            args = ["events", "--server", b.url, "--format", "json", "--state", "CANCELLED", "--after", start]
            follower = subprocess.Popen(
                [*CLI, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=clean_env({"FACTORY_API_KEY": a.key}),
                stdin=subprocess.DEVNULL,
            )
            stack.callback(_kill, follower)
            printed = json.loads(_first_line(follower))
            assert (printed["run_id"], printed["data"]["state"]) == (run_id, "CANCELLED")
            follower.send_signal(signal.SIGINT)  # Ctrl-C: a clean exit
            _, err = follower.communicate(timeout=15)
            assert follower.returncode == 0 and err.startswith("stopped; resume with --after "), err
    finally:
        pg_template.drop(url)
