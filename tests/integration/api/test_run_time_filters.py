"""The time filters of ``GET /agent/runs`` and ``/console/runs`` at the API's precision (docs/api.md, "Runs",
list filters), on SQLite and PostgreSQL.

Storage keeps microseconds; the API shows milliseconds. A bound is compared with the stored time as the API
shows it (truncated to the millisecond): a client polling with the last ``created_at`` it saw never gets
that run again, however many microseconds the stored value has past the millisecond.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import quote

import pytest
from console.support import sign_in

from store.clock import ManualClock

RUNS = "/api/v1/agent/runs"
START = dt.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)  # shown as 12:00:00.123Z


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def runs(seed_run: Any) -> dict[str, str]:
    """Four runs: a and b in one millisecond (.123456, .123900), c just past it (.124100), d (.200000)."""
    clock = ManualClock(START)
    out = {"a": await seed_run(clock=clock)}
    for name, micros in (("b", 444), ("c", 200), ("d", 75_900)):
        clock.advance(micros / 1_000_000)
        out[name] = await seed_run(clock=clock)
    return out


async def test_a_bound_is_compared_at_the_precision_the_api_shows(
    client: Any, member_key: str, runs: dict[str, str]
) -> None:
    names = {v: k for k, v in runs.items()}

    async def listed(query: str) -> set[str]:
        resp = await client.get(f"{RUNS}?{query}&limit=100", headers=h(member_key))
        assert resp.status == 200, await resp.text()
        return {names[r["run_id"]] for r in (await resp.json())["runs"]}

    shown = {}
    for name, run_id in runs.items():
        body = await (await client.get(f"{RUNS}/{run_id}", headers=h(member_key))).json()
        shown[name] = body["created_at"]
        assert body["updated_at"] == body["created_at"]
    assert shown["a"] == shown["b"] == "2026-01-01T12:00:00.123Z" and shown["c"].endswith(".124Z")

    # created_after is exclusive of every run shown at that very time
    assert await listed(f"created_after={shown['a']}") == {"c", "d"}
    assert await listed(f"created_after={shown['c']}") == {"d"}
    assert await listed(f"updated_after={shown['b']}") == {"c", "d"}
    assert await listed("created_after=2026-01-01T12:00:00.1234Z") == {"c", "d"}  # finer than shown
    # created_before: runs shown before the bound, whatever their microseconds
    assert await listed(f"created_before={shown['c']}") == {"a", "b"}
    assert await listed("created_before=2026-01-01T12:00:00.1235Z") == {"a", "b"}
    assert await listed(f"created_after={shown['a']}&created_before={shown['d']}") == {"c"}
    # the ends of the range answer, never a 500
    assert await listed("created_after=9999-12-31T23:59:59.999Z") == set()
    assert await listed("updated_after=9999-12-31T23:59:59.9999Z") == set()
    assert await listed("created_before=0001-01-01T00:00:00.0001Z") == set()


async def test_a_client_polling_with_the_last_created_at_never_sees_a_run_twice(
    client: Any, member_key: str, runs: dict[str, str]
) -> None:
    seen: list[str] = []
    since = "2026-01-01T00:00:00Z"
    for _ in range(len(runs) + 1):
        resp = await client.get(
            f"{RUNS}?created_after={since}&sort_by=created_at&sort_order=asc&limit=1", headers=h(member_key)
        )
        page = (await resp.json())["runs"]
        if not page:
            break
        seen.append(page[0]["run_id"])
        since = page[0]["created_at"]
    assert len(seen) == len(set(seen))  # no run came back (a and b share a millisecond: b is skipped)
    assert seen == [runs["a"], runs["c"], runs["d"]]


async def test_the_console_filters_follow_the_same_rule(
    client: Any, member_key: str, runs: dict[str, str]
) -> None:
    assert (await sign_in(client, member_key)).status == 303

    async def listed(query: str) -> set[str]:
        html = await (await client.get(f"/console/runs?{query}")).text()
        assert "Filter not applied" not in html
        found = set(re.findall(r"/console/runs/(run_[A-Za-z0-9]+)", html))
        return {k for k, v in runs.items() if v in found}

    assert await listed("created_after=" + quote("2026-01-01T12:00:00.123Z")) == {"c", "d"}
    assert await listed("created_before=" + quote("2026-01-01T12:00:00.1235Z")) == {"a", "b"}
