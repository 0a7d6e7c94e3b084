"""A service-hosted worker's artifacts (the in-process path, :class:`StoreChannel`): a command harness writes
a file into ``$FACTORY_OUTPUTS`` and declares a pull request; the run is SUCCEEDED with both listed, and the
file downloads with its bytes. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import shlex
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import create_app
from api.claims.reaper import lease_reaper
from api.context import ServerSettings
from api.runs.claim_signal import wake_claimers
from factoryctl.serve.local_workers import service_workers
from store.crypto import SecretBox

ROUTES = ("api.ops", "api.runs.routes", "api.claims.routes", "api.claims.artifacts", "api.runs.artifacts")
SCRIPT = """printf '%s' "$(cat PROMPT.md)" > "$FACTORY_OUTPUTS/prompt-copy.txt"
echo '{"type": "PULL_REQUEST", "url": "https://git.example.com/pr/1", "branch": "b"}' \
  >> "$FACTORY_ARTIFACTS_FILE"
"""


async def test_a_service_hosted_command_run_lists_its_artifacts(
    aiohttp_client, engine: AsyncEngine, box: SecretBox, tmp_path: Path, make_key, new_run, wait_state
) -> None:
    command = f"bash -c {shlex.quote(SCRIPT)}"  # in the sandbox: only the workspace is there
    lifecycle = service_workers(1, "command", command, tmp_path / "ws", heartbeat_seconds=0.2)
    settings = ServerSettings(data_dir=tmp_path / "data")
    app = create_app(settings, engine, box, lifecycles=[lifecycle, lease_reaper(0.2)], route_modules=ROUTES)
    client = await aiohttp_client(app)
    member = {"Authorization": f"Bearer {await make_key('member')}"}
    run_id = await new_run(prompt="keep this prompt")
    wake_claimers(app)
    done = await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})
    assert done.state == "SUCCEEDED", done.status_message
    run = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=member)).json()
    [file] = [a["data"] for a in run["artifacts"] if a["artifact_type"] == "FILE"]
    [pr] = [a["data"] for a in run["artifacts"] if a["artifact_type"] == "PULL_REQUEST"]
    assert pr == {"branch": "b", "url": "https://git.example.com/pr/1"}
    assert (file["filepath"], file["mime_type"], file["size_bytes"]) == ("prompt-copy.txt", "text/plain", 16)
    got = await client.get(f"/api/v1/agent/runs/{run_id}/artifacts/{file['artifact_uid']}", headers=member)
    assert got.status == 200 and await got.read() == b"keep this prompt"
