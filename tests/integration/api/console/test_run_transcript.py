"""The run page's transcript (issue 26, docs/console.md "Run page"): messages as text, each tool call folded
under a ``<details>`` with its input and result, usage and cost; every piece of the agent's text escaped."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from .support import sign_in

WORKERS = "/api/v1/workers"
HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def claimed_run(client: TestClient[Any, Any], member: str, worker: str) -> tuple[str, str]:
    config = {"worker_host": "host-a", "harness": {"type": "claude"}}
    resp = await client.post("/api/v1/agent/run", json={"prompt": "go", "config": config}, headers=h(member))
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    claim = await client.post(
        f"{WORKERS}/claim",
        json={"worker_host": "host-a", "worker_id": "wk-1", "harnesses": ["claude"]},
        headers=h(worker),
    )
    assert claim.status == 200
    token: str = (await claim.json())["lease_token"]
    body = {"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS"}
    beat = await client.post(f"{WORKERS}/runs/{run_id}/heartbeat", json=body, headers=h(worker))
    assert beat.status == 200
    return run_id, token


async def test_the_transcript_is_shown_folded_and_escaped(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    run_id, token = await claimed_run(client, member_key, worker_key)
    events = [
        {"kind": "session", "data": {"session_id": f"s-{HOSTILE}"[:100]}},
        {"kind": "message", "data": {"role": "assistant", "text": f"I will look. {HOSTILE}"}},
        {"kind": "tool_call", "data": {"id": "c1", "name": f"Bash{HOSTILE}", "input": {"command": HOSTILE}}},
        {"kind": "tool_result", "data": {"id": "c1", "ok": False, "output": f"denied {HOSTILE}"}},
        {"kind": "usage", "data": {"input_tokens": 1000, "output_tokens": 234, "cost_usd": 0.0421}},
    ]
    resp = await client.post(
        f"{WORKERS}/runs/{run_id}/events",
        json={"worker_id": "wk-1", "lease_token": token, "events": events},
        headers=h(worker_key),
    )
    assert resp.status == 200 and (await resp.json())["accepted"] == len(events)

    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    assert "<script>alert" not in page and "<img src=x" not in page and 'onerror="alert' not in page
    card = page[page.index('id="transcript-card"') : page.index('id="log-count"')]
    assert "hidden" not in card.split(">", 1)[0]
    assert "I will look. &lt;img src=x onerror=&#34;alert(1)&#34;&gt;&lt;script&gt;" in card
    (fold,) = re.findall(r'<details class="tool" data-tool-id="c1">.*?</details>', card, re.S)
    assert "Bash&lt;img" in fold and "pill warn" in fold  # the failed result, folded under its call
    assert "&#34;command&#34;: &#34;&lt;img src=x" in fold  # the input, as JSON, escaped
    assert "denied &lt;img" in fold
    assert "1,234 tokens · $0.0421" in page
    assert 'data-tokens="1234"' in page
    assert "/console/static/run.js" in page and "<script>" not in page  # no inline script


async def test_a_run_without_a_transcript_hides_the_card(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    run_id, _ = await claimed_run(client, member_key, worker_key)
    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    assert '<section class="card" id="transcript-card" hidden>' in page
    assert 'id="run-usage" data-tokens="0" data-cost="">—</dd>' in page
