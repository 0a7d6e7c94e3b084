"""The run page lists the run's artifacts (docs/agents.md, "Artifacts"): declared links as links only when
they are http(s) (``rel="noopener noreferrer"``), escaped; files as download links that answer the bytes
as an attachment to a signed-in member of the run's team, and 404 to another team."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import ids
from store.clock import SystemClock
from store.models import RunArtifact

from .support import sign_in

HOSTILE = "<script>alert(1)</script>"


async def test_the_run_page_lists_artifacts_escaped_and_files_download(
    client: TestClient[Any, Any], member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    resp = await client.post(
        "/api/v1/agent/run", json={"prompt": "go"}, headers={"Authorization": f"Bearer {member_key}"}
    )
    run_id: str = (await resp.json())["run_id"]
    now = SystemClock().now()
    file_uid = ids.new_id(ids.ARTIFACT)
    async with sessions() as s, s.begin():
        s.add_all(
            [
                RunArtifact(
                    uid=file_uid, run_id=run_id, artifact_type="FILE", created_at=now, filename="x.html",
                    filepath=f"out/{HOSTILE}.html", mime_type="text/html", size_bytes=len(HOSTILE),
                    data=HOSTILE.encode(),
                ),
                RunArtifact(
                    uid=ids.new_id(ids.ARTIFACT), run_id=run_id, artifact_type="PULL_REQUEST", created_at=now,
                    url="https://github.com/acme/app/pull/9?a=1&b=2", branch=f"fix{HOSTILE}",
                ),
                RunArtifact(  # stored by an older server or by hand: still never a link
                    uid=ids.new_id(ids.ARTIFACT), run_id=run_id, artifact_type="EXTERNAL_REFERENCE",
                    created_at=now, url="javascript:alert(1)", title=HOSTILE,
                ),
            ]
        )  # fmt: skip

    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    card = page[page.index('id="artifacts-card"') :]
    card = card[: card.index("</section>")]
    assert "<script>alert" not in page
    assert (
        '<a href="https://github.com/acme/app/pull/9?a=1&amp;b=2" rel="noopener noreferrer" target="_blank">'
        in card
    )
    assert 'href="javascript:' not in card and "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in card
    assert (
        f'<a href="/console/runs/{run_id}/artifacts/{file_uid}" download rel="noopener noreferrer">' in card
    )
    assert "fix&lt;script&gt;" in card

    got = await client.get(f"/console/runs/{run_id}/artifacts/{file_uid}")
    assert got.status == 200 and await got.read() == HOSTILE.encode()
    assert got.headers["Content-Disposition"].startswith("attachment;")
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert (await client.get(f"/console/runs/{run_id}/artifacts/art_nope")).status == 404
    assert (await client.get(f"/console/runs/run_nope/artifacts/{file_uid}")).status == 404
