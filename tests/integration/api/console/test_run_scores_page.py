"""The run page shows what the factory's scorers said about the run (docs/scorers.md, docs/console.md):
label, score, pass/fail and a link to the judge run, or why there is no label; a scorer's name and a judge's
label are text, escaped."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.models import Run

from .support import sign_in

HOSTILE = "<script>alert(1)</script>"


async def test_the_run_page_lists_the_scores_escaped(
    client: TestClient[Any, Any], member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    resp = await client.post(
        "/api/v1/agent/run", json={"prompt": "go"}, headers={"Authorization": f"Bearer {member_key}"}
    )
    run_id: str = (await resp.json())["run_id"]
    scores = [
        {"scorer": "quality", "label": "good", "score": 1.0, "passed": True, "judge_run_id": "run_judge1"},
        {
            "scorer": f"strict{HOSTILE}",
            "label": None,
            "score": None,
            "passed": None,
            "judge_run_id": "run_judge2",
            "error": "no valid label",
        },
    ]
    async with sessions() as s, s.begin():
        run = await s.get(Run, run_id)
        assert run is not None
        run.scores = scores  # as api/scorers/judging.py records them

    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    card = page[page.index('id="run-scores"') :]
    card = card[: card.index("</dd>")]
    assert "quality: <strong>good</strong> 1.0" in card and "passed" in card
    assert '<a href="/console/runs/run_judge1">judge run</a>' in card
    assert "no valid label" in card and '<a href="/console/runs/run_judge2">' in card
    assert "<script>alert" not in page and "strict&lt;script&gt;" in card
