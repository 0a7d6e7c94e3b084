"""Secret masking through a real self-hosted worker (issue 23, item 8): a multi-line secret (a PEM key,
stored with its trailing newline) printed line by line, a token printed base64-, URL- and JSON-encoded,
by the environment's setup and by the harness, on stdout and in the stderr tail that becomes the
outcome's message: none of it reaches the server (docs/workers.md, "Secret masking")."""

from __future__ import annotations

import asyncio
import base64
import json
from urllib.parse import quote

import builders

from api.runs.claim_signal import wake_claimers
from factoryctl.worker.agent import RemoteWorker
from store.clock import SystemClock

PEM_LINES = [
    "-----BEGIN RSA PRIVATE KEY-----",
    "MIIEowIBAAKCAQEAx1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8s9t0u1v2w3x4y5z6",
    "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4y5Z6a7B8c9D0e1F2g3",
    "-----END RSA PRIVATE KEY-----",
]
PEM = "\n".join(PEM_LINES) + "\n"  # as pasted from a file: with its trailing newline
TOKEN = "tok/with+special=chars&more"
COMMAND = (
    "printf '%s' \"$deploy_key\"; echo; "  # the key, line by line
    'echo "token=$api_token"; '
    'echo "$api_token" | base64; '  # base64 of the value and its newline
    "printf '%s' \"$deploy_key\" | base64; "  # wrapped at 76 characters
    "python3 -c 'import os,json,urllib.parse as u; e=os.environ; "
    'print(u.quote(e["api_token"], safe="")); print(json.dumps(e["deploy_key"]))\'; '
    "printf '%s' \"$deploy_key\" >&2; exit 3"  # the stderr tail becomes the outcome's message
)


def leaked(text: str) -> list[str]:
    """The secret forms present in ``text``."""
    forms = [*PEM_LINES, TOKEN, quote(TOKEN, safe=""), json.dumps(PEM)[1:-1]]
    forms += [base64.b64encode(v.encode()).decode()[:40] for v in (TOKEN + "\n", PEM)]
    return [f for f in forms if f in text]


async def test_multi_line_and_encoded_secrets_never_reach_the_server(
    aiohttp_client, worker_app, make_key, new_run, wait_state, sessions, box, tmp_path
) -> None:
    app = worker_app(lease_seconds=3, claim_wait_max_seconds=1)
    client = await aiohttp_client(app)
    key = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        for name, value in {"deploy-key": PEM, "api-token": TOKEN}.items():
            await builders.secret(s, box, SystemClock(), team.id, name, value, scope="run")
        spec = {"secrets": ["deploy-key", "api-token"], "setup": ["printf '%s\\n' \"$deploy_key\""]}
        await builders.environment(s, SystemClock(), team.id, "deploy", spec, managed_by="api")
    worker = RemoteWorker(
        str(client.make_url("")),
        key,
        "myhost",
        harness="command",
        command=COMMAND,
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
        harness_env={"PATH": "/usr/bin:/bin"},
    )
    task = asyncio.create_task(worker.run())
    try:
        run_id = await new_run(worker_host="myhost", agent_config={"environment_id": "deploy"})
        wake_claimers(app)
        run = await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})
    finally:
        worker.stop.set()
        assert await asyncio.wait_for(task, 15) == 0

    assert run.state == "FAILED" and run.status_message is not None
    logs = await (
        await client.get(f"/api/v1/agent/runs/{run_id}/logs", headers={"Authorization": f"Bearer {member}"})
    ).json()
    text = "\n".join(x["text"] for x in logs["logs"])
    assert "token=***" in text and text.count("***") >= 10  # the output is there, masked
    assert leaked(text) == []
    assert leaked(json.dumps(run.status_message)) == []
    assert "***" in run.status_message["message"]
