"""A run's artifacts (issue 26, item 4): ``POST /workers/runs/{id}/artifacts`` (multipart; lease, URL and
path checks, caps, replacement), ``RunItem.artifacts`` in the SDK's shape from the single GET and the list
(parsed by the official Python SDK with strict validation), the downloads (API and console: team members
only, attachment headers) and the SDK's ``getArtifact``. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from oz_agent_sdk import AsyncOzAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api import PayloadTooLarge
from api.app import create_app
from api.claims import artifacts as claims_artifacts
from api.claims.errors import LeaseRefused
from api.claims.protocol import Holder, WorkerProtocol
from api.console.artifact_pages import artifact_views
from api.context import ServerSettings
from store.crypto import SecretBox
from store.db import session_factory
from store.models import Run, RunArtifact

HOST = "myhost"
ROUTES = ("api.ops", "api.runs.routes", "api.claims.routes", "api.claims.artifacts", "api.runs.artifacts")
PR = {"type": "PULL_REQUEST", "url": "https://github.com/acme/app/pull/7", "branch": "fix/flaky"}
REF = {
    "type": "EXTERNAL_REFERENCE",
    "url": "https://linear.app/acme/issue/ENG-1",
    "reference_type": "linear_issue",
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(meta: dict[str, Any], files: list[tuple[str, bytes, str]] = ()) -> aiohttp.FormData:  # type: ignore[assignment]
    form = aiohttp.FormData()
    form.add_field("meta", json.dumps(meta), content_type="application/json", filename="meta.json")
    for name, data, mime in files:
        form.add_field("file", data, content_type=mime, filename=name)
    return form


class Worker:
    """A claimed, started run and the calls its worker makes over HTTP."""

    def __init__(self, client: Any, key: str, run_id: str, token: str) -> None:
        self.client, self.key, self.run_id, self.token = client, key, run_id, token

    async def upload(
        self,
        links: list[Any] = (),
        files: list[tuple[str, bytes, str]] = (),
        token: str | None = "",
        **meta: Any,  # type: ignore[assignment]
    ) -> Any:
        entries = [{"filepath": p, "mime_type": m} for p, _, m in files]
        fields = {
            "worker_id": "wk-1",
            "lease_token": self.token if token == "" else token,
            "links": list(links),
        }
        fields |= {"files": entries, **meta}
        parts = [("file", d, m) for _, d, m in files]  # the path is the meta's: part names are plain
        return await self.client.post(
            f"/api/v1/workers/runs/{self.run_id}/artifacts", data=body(fields, parts), headers=auth(self.key)
        )

    async def finish(self, state: str = "SUCCEEDED") -> None:
        resp = await self.client.post(
            f"/api/v1/workers/runs/{self.run_id}/state",
            json={"worker_id": "wk-1", "lease_token": self.token, "state": state},
            headers=auth(self.key),
        )
        assert resp.status == 200


@pytest.fixture
async def started(
    aiohttp_client, engine: AsyncEngine, box: SecretBox, tmp_path: Path, make_key, new_run
) -> Any:
    async def start() -> tuple[Any, Worker]:
        app = create_app(ServerSettings(data_dir=tmp_path / "data"), engine, box, route_modules=ROUTES)
        client = await aiohttp_client(app)
        key = await make_key("worker", worker_hosts=[HOST])
        run_id = await new_run(worker_host=HOST)
        resp = await client.post(
            "/api/v1/workers/claim", json={"worker_host": HOST, "worker_id": "wk-1"}, headers=auth(key)
        )
        token = (await resp.json())["lease_token"]
        beat = await client.post(
            f"/api/v1/workers/runs/{run_id}/heartbeat",
            json={"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS"},
            headers=auth(key),
        )
        assert beat.status == 200
        return client, Worker(client, key, run_id, token)

    return start


async def test_uploaded_artifacts_are_listed_in_the_sdk_shape_and_download(started, make_key) -> None:
    client, worker = await started()
    report = b"# Report\n\xe2\x9c\x93 done\n"
    resp = await worker.upload([PR, REF], [("reports/report.md", report, "text/markdown")])
    assert resp.status == 200 and (await resp.json())["accepted"] == 3
    png = bytes(range(256))
    assert (await worker.upload([PR], [("shot.png", png, "image/png")])).status == 200  # PR kept once
    await worker.finish()

    member = await make_key("member")
    run = await (await client.get(f"/api/v1/agent/runs/{worker.run_id}", headers=auth(member))).json()
    kinds = [a["artifact_type"] for a in run["artifacts"]]
    assert sorted(kinds) == ["EXTERNAL_REFERENCE", "FILE", "FILE", "PULL_REQUEST"]
    by_path = {a["data"].get("filepath"): a for a in run["artifacts"] if a["artifact_type"] == "FILE"}
    md = by_path["reports/report.md"]
    assert md["data"]["filename"] == "report.md" and md["data"]["mime_type"] == "text/markdown"
    assert md["data"]["size_bytes"] == len(report) and md["data"]["artifact_uid"].startswith("art_")
    assert set(md) == {"artifact_type", "created_at", "data"}
    [pr] = [a for a in run["artifacts"] if a["artifact_type"] == "PULL_REQUEST"]
    assert pr["data"] == {"branch": "fix/flaky", "url": PR["url"]}
    [ref] = [a for a in run["artifacts"] if a["artifact_type"] == "EXTERNAL_REFERENCE"]
    assert ref["data"] == {"reference_type": "linear_issue", "url": REF["url"]}
    listed = await (await client.get("/api/v1/agent/runs", headers=auth(member))).json()
    assert listed["runs"][0]["artifacts"] == run["artifacts"]

    for path, data, uid in (
        (p, d, by_path[p]["data"]["artifact_uid"])
        for p, d in (("reports/report.md", report), ("shot.png", png))
    ):
        got = await client.get(f"/api/v1/agent/runs/{worker.run_id}/artifacts/{uid}", headers=auth(member))
        assert got.status == 200 and await got.read() == data
        assert got.headers["Content-Disposition"].startswith("attachment;")
        assert got.headers["X-Content-Type-Options"] == "nosniff"
        assert "sandbox" in got.headers["Content-Security-Policy"]
        assert got.headers["Content-Type"].startswith(by_path[path]["data"]["mime_type"])
    uid = md["data"]["artifact_uid"]
    answer = await (await client.get(f"/api/v1/agent/artifacts/{uid}", headers=auth(member))).json()
    assert answer["artifact_type"] == "FILE" and answer["artifact_uid"] == uid
    assert answer["data"]["download_url"].endswith(f"/api/v1/agent/runs/{worker.run_id}/artifacts/{uid}")

    stranger = await make_key("member", team="other")
    for path in (f"/api/v1/agent/runs/{worker.run_id}/artifacts/{uid}", f"/api/v1/agent/artifacts/{uid}"):
        assert (await client.get(path, headers=auth(stranger))).status == 404
    assert (await client.get(path, headers=auth(worker.key))).status == 403  # a worker key reads no files
    assert (await client.get(path)).status == 401
    wrong_run = await client.get(f"/api/v1/agent/runs/run_nope/artifacts/{uid}", headers=auth(member))
    assert wrong_run.status == 404


async def test_the_sdk_parses_artifacts_strictly(started, make_key, aiohttp_server) -> None:
    client, worker = await started()
    await worker.upload([PR, REF | {"title": "ENG-1"}], [("out.txt", b"hi", "text/plain")])
    await worker.finish()
    member = await make_key("member")
    async with AsyncOzAPI(
        api_key=member,
        base_url=str(client.make_url("/api/v1")),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        run = await sdk.agent.runs.retrieve(worker.run_id)
        assert run.artifacts is not None and len(run.artifacts) == 3
        kinds = {a.artifact_type: a for a in run.artifacts}
        assert kinds["PULL_REQUEST"].data.branch == "fix/flaky"  # type: ignore[union-attr]
        assert kinds["FILE"].data.filename == "out.txt" and kinds["FILE"].data.size_bytes == 2  # type: ignore[union-attr]
        assert kinds["EXTERNAL_REFERENCE"].data.title == "ENG-1"  # type: ignore[union-attr]
        uid = kinds["FILE"].data.artifact_uid  # type: ignore[union-attr]
        got = await sdk.agent.get_artifact(uid)
        assert got.artifact_type == "FILE" and got.data.filename == "out.txt"  # type: ignore[union-attr]


async def test_only_the_lease_holder_uploads(started) -> None:
    client, worker = await started()
    assert (await worker.upload([PR], token="not-the-token")).status == 409
    assert (await worker.upload([PR], token=None)).status == 409
    await worker.finish()
    assert (await worker.upload([PR])).status == 409  # the lease ended with the report
    other = await client.post(
        "/api/v1/workers/runs/run_nope/artifacts",
        data=body({"lease_token": worker.token}),
        headers=auth(worker.key),
    )
    assert other.status == 404


@pytest.mark.parametrize(
    "link",
    [
        {"type": "PULL_REQUEST", "url": "javascript:alert(1)", "branch": "x"},
        {"type": "PULL_REQUEST", "url": "ftp://example.com/x", "branch": "x"},
        {"type": "EXTERNAL_REFERENCE", "url": "https://"},
        {"type": "EXTERNAL_REFERENCE", "url": "https://example.com/a b"},
        {"type": "PULL_REQUEST", "url": "https://example.com/pr/1"},  # no branch
        {"type": "SCREENSHOT", "url": "https://example.com/s.png"},
    ],
)
async def test_bad_links_are_refused(started, link) -> None:
    _, worker = await started()
    resp = await worker.upload([link])
    assert resp.status == 422 and resp.content_type == "application/problem+json"


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a//b", "a/./b", "a\\b", "x\x00y"])
async def test_bad_file_paths_are_refused(started, path) -> None:
    _, worker = await started()
    assert (await worker.upload([], [(path, b"x", "text/plain")])).status == 422


async def test_body_shape_is_checked(started) -> None:
    client, worker = await started()
    url = f"/api/v1/workers/runs/{worker.run_id}/artifacts"
    assert (
        await client.post(url, json={"lease_token": worker.token}, headers=auth(worker.key))
    ).status == 422
    more = body(
        {"lease_token": worker.token, "worker_id": "wk-1", "files": []}, [("a.txt", b"a", "text/plain")]
    )
    assert (await client.post(url, data=more, headers=auth(worker.key))).status == 422
    fewer = body({"lease_token": worker.token, "worker_id": "wk-1", "files": [{"filepath": "a.txt"}]})
    assert (await client.post(url, data=fewer, headers=auth(worker.key))).status == 422
    odd = await worker.upload([], [("a.bin", b"a", "not a mime type")])
    assert odd.status == 200


async def test_caps_and_replacement(started, engine: AsyncEngine) -> None:
    _, worker = await started()
    big = b"x" * (claims_artifacts.MAX_FILE_BYTES + 1)
    assert (await worker.upload([], [("big.bin", big, "application/octet-stream")])).status == 413
    many = [(f"f{i:02}.txt", b"v1", "text/plain") for i in range(claims_artifacts.MAX_FILES)]
    assert (await worker.upload([], many)).status == 200
    assert (
        await worker.upload([], [("f00.txt", b"v2!", "text/plain")])
    ).status == 200  # replaces, no new row
    assert (await worker.upload([], [("one-more.txt", b"x", "text/plain")])).status == 413
    links = [{"type": "PULL_REQUEST", "url": f"https://example.com/pr/{i}", "branch": "b"} for i in range(50)]
    assert (await worker.upload(links)).status == 200
    extra = [{"type": "PULL_REQUEST", "url": "https://example.com/pr/extra", "branch": "b"}]
    assert (await worker.upload(extra)).status == 413
    async with session_factory(engine)() as s:
        count = await s.scalar(
            select(func.count()).select_from(RunArtifact).where(RunArtifact.run_id == worker.run_id)
        )
        sizes = await s.scalar(select(RunArtifact.size_bytes).where(RunArtifact.filepath == "f00.txt"))
    assert count == claims_artifacts.MAX_FILES + 50 and sizes == 3


async def test_total_bytes_cap_in_process(
    engine: AsyncEngine, box: SecretBox, tmp_path: Path, new_run
) -> None:
    """The in-process path (service-hosted workers) keeps the same caps: five 10 MiB files fill 50 MiB."""
    app = create_app(ServerSettings(data_dir=tmp_path / "data"), engine, box, route_modules=ROUTES)
    protocol = WorkerProtocol.of(app)
    run_id = await new_run()
    answer = await protocol.claim(("",), "svc:1")
    assert answer is not None and answer["run"]["run_id"] == run_id
    holder = Holder("svc:1", answer["lease_token"])
    chunk = b"y" * claims_artifacts.MAX_FILE_BYTES
    files = [claims_artifacts.NewFile(f"part{i}.bin", "application/octet-stream", chunk) for i in range(5)]
    assert await claims_artifacts.add_artifacts(protocol, run_id, holder, files, []) == 5
    one_more = [claims_artifacts.NewFile("last.bin", "application/octet-stream", b"z")]
    with pytest.raises(PayloadTooLarge):
        await claims_artifacts.add_artifacts(protocol, run_id, holder, one_more, [])
    with pytest.raises(LeaseRefused):
        await claims_artifacts.add_artifacts(protocol, run_id, Holder("svc:2", "x"), one_more, [])
    async with session_factory(engine)() as s, s.begin():  # deleted with the run
        await s.delete(await s.get(Run, run_id))
    async with session_factory(engine)() as s:
        assert await s.scalar(select(func.count()).select_from(RunArtifact)) == 0


def test_console_shows_only_http_links_as_links() -> None:
    items = [
        {"artifact_type": "PULL_REQUEST", "data": {"url": "https://github.com/a/b/pull/1", "branch": "x"}},
        {
            "artifact_type": "EXTERNAL_REFERENCE",
            "data": {"url": "javascript:alert(1)", "reference_type": "x"},
        },
        {
            "artifact_type": "FILE",
            "data": {
                "artifact_uid": "art_1",
                "filepath": "a/b.md",
                "mime_type": "text/markdown",
                "size_bytes": 3,
            },
        },
    ]
    views = artifact_views("run_1", items)
    assert views[0]["href"] == "https://github.com/a/b/pull/1"
    assert views[1]["href"] is None and views[1]["label"] == "javascript:alert(1)"
    assert views[2]["href"] == "/console/runs/run_1/artifacts/art_1"
