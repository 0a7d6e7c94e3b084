"""Self-hosted workers and a run's team secrets and skill (docs/agent-config.md).

``POST /workers/runs/{id}/secrets`` hands the lease holder exactly the secrets its run references;
the self-hosted worker (:class:`factoryctl.worker.agent.RemoteWorker`) uses it so environment and MCP
secrets reach the harness, redacted from the run log. Runs created without a resolved skill get it
when claimed over HTTP too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import builders
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs.claim_signal import wake_claimers
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import Run

if TYPE_CHECKING:
    from conftest import MakeKey, NewRun

CLAIM = "/api/v1/workers/claim"
MCP = {"github": {"warp_id": "github"}}  # a reference to the environment's server (docs/agent-config.md)
SERVERS = {"github": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "secret:GH_TOKEN"}}}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def add_secrets(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, values: dict[str, str], team: str = "default"
) -> None:
    """Run-scoped team secrets: the only ones a run may reference (docs/security.md)."""
    async with sessions() as s, s.begin():
        row = await builders.team(s, team)
        for name, value in values.items():
            await builders.secret(s, box, SystemClock(), row.id, name, value, scope="run")


async def add_environment(
    sessions: async_sessionmaker[AsyncSession], name: str, spec: dict[str, Any], team: str = "default"
) -> None:
    async with sessions() as s, s.begin():
        row = await builders.team(s, team)
        await builders.environment(s, SystemClock(), row.id, name, spec, managed_by="api")


async def claim(client: Any, key: str, worker_id: str = "wk-1") -> dict[str, Any] | None:
    resp = await client.post(
        CLAIM, json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": worker_id}, headers=auth(key)
    )
    if resp.status == 204:
        return None
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def secrets(client: Any, key: str, run_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    resp = await client.post(f"/api/v1/workers/runs/{run_id}/secrets", json=body, headers=auth(key))
    return resp.status, await resp.json()


async def test_secrets_endpoint_answers_the_lease_holder_only_the_runs_own_secrets(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=["myhost"])
    twin = await make_key("worker", worker_hosts=["myhost"])
    stranger = await make_key("worker", worker_hosts=["otherhost"])
    foreign = await make_key("worker", worker_hosts=["myhost"], team="other-team")
    await add_secrets(
        sessions,
        box,
        {
            "GH_TOKEN": "ghp_value_1234",
            "db-password": "pw_value_5678",
            "OTHER": "other_9999",
            "UNUSED": "x" * 8,
        },
    )
    await add_secrets(sessions, box, {"GH_TOKEN": "foreign_team_value"}, team="other-team")
    await add_environment(
        sessions, "backend", {"env": {"A": "1"}, "secrets": ["db-password"], "mcpServers": SERVERS}
    )
    mine = await new_run(worker_host="myhost", agent_config={"mcp_servers": MCP, "environment_id": "backend"})
    other = await new_run(
        worker_host="myhost",
        agent_config={"mcp_servers": {"x": {"url": "https://x.example", "headers": {"A": "secret:OTHER"}}}},
    )

    status, _ = await secrets(client, key, mine, {"worker_id": "wk-1"})
    assert status == 409  # queued: nobody holds the lease yet
    claimed = await claim(client, key)
    assert claimed is not None and claimed["run"]["run_id"] == mine
    token = claimed["lease_token"]
    assert "ghp_value_1234" not in json.dumps(claimed)  # the claim never carries values

    # the answer is computed from the run; names in the request are ignored
    status, body = await secrets(
        client, key, mine, {"worker_id": "wk-1", "lease_token": token, "names": ["OTHER", "UNUSED"]}
    )
    assert status == 200
    assert body == {"secrets": {"GH_TOKEN": "ghp_value_1234", "db-password": "pw_value_5678"}}

    assert (await secrets(client, key, mine, {"worker_id": "wk-2", "lease_token": token}))[
        0
    ] == 409  # same key, other process
    assert (await secrets(client, twin, mine, {"worker_id": "wk-1", "lease_token": token}))[
        0
    ] == 409  # another key
    assert (await secrets(client, stranger, mine, {"worker_id": "wk-1", "lease_token": token}))[
        0
    ] == 403  # another host
    status, body = await secrets(client, foreign, mine, {"worker_id": "wk-1", "lease_token": token})
    assert status == 404 and "foreign_team_value" not in json.dumps(body)
    assert (await secrets(client, key, other, {"worker_id": "wk-1", "lease_token": token}))[
        0
    ] == 409  # not claimed by us

    # the other run's holder gets only the other run's secret
    nine = await claim(client, key, worker_id="wk-9")
    assert nine is not None and nine["run"]["run_id"] == other
    status, body = await secrets(
        client, key, other, {"worker_id": "wk-9", "lease_token": nine["lease_token"]}
    )
    assert (status, body) == (200, {"secrets": {"OTHER": "other_9999"}})

    # a secret deleted since creation is left out; a finished run answers 409
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        await secret_store.delete_secret(s, team.id, "db-password")
    status, body = await secrets(client, key, mine, {"worker_id": "wk-1", "lease_token": token})
    assert (status, body) == (200, {"secrets": {"GH_TOKEN": "ghp_value_1234"}})
    report = {"state": "FAILED", "worker_id": "wk-1", "lease_token": token}
    resp = await client.post(f"/api/v1/workers/runs/{mine}/state", json=report, headers=auth(key))
    assert resp.status == 200
    assert (await secrets(client, key, mine, {"worker_id": "wk-1", "lease_token": token}))[0] == 409


async def test_http_claim_resolves_a_skill_the_run_was_created_without(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    get_run: Callable[[str], Awaitable[Run]],
    tmp_path: Path,
) -> None:
    repo = tmp_path / "git" / "acme" / "skills"
    repo.mkdir(parents=True)
    (repo / "skills" / "triage").mkdir(parents=True)
    (repo / "skills" / "triage" / "SKILL.md").write_text("---\nname: triage-bot\n---\n\nSkill body.\n")
    client = await aiohttp_client(worker_app(skills_source=str(tmp_path / "git" / "{owner}" / "{repo}")))
    key = await make_key("worker", worker_hosts=["myhost"])
    bad = await new_run(worker_host="myhost", agent_config={"skill_spec": "acme/skills:missing"})
    good = await new_run(worker_host="myhost", agent_config={"skill_spec": "acme/skills:triage"})

    claimed = await claim(client, key)  # the broken run fails; the same claim hands out the next
    assert claimed is not None and claimed["run"]["run_id"] == good
    assert claimed["run"]["skill_body"] == "Skill body."
    assert claimed["run"]["agent_config"]["name"] == "triage-bot"
    failed = await get_run(bad)
    assert failed.state == "FAILED" and failed.status_message is not None
    assert failed.status_message["error_code"] == "skill_unavailable"
    assert "acme/skills:missing" in failed.status_message["message"]


async def test_remote_worker_injects_environment_and_mcp_secrets_and_redacts_them(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    wait_state: Callable[..., Awaitable[Run]],
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> None:
    from factoryctl.worker.agent import RemoteWorker

    app = worker_app(lease_seconds=3, claim_wait_max_seconds=1)
    client = await aiohttp_client(app)
    key = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    await add_secrets(sessions, box, {"GH_TOKEN": "ghp_mcp_value_77", "db-password": "pw_env_value_88"})
    await add_environment(
        sessions,
        "backend",
        {
            "env": {"APP_MODE": "test"},
            "secrets": ["db-password"],
            "setup": ["cat .mcp.json"],
            "mcpServers": SERVERS,
        },
    )
    dump = tmp_path / "dump"
    command = f"env > {dump}.env; cp .mcp.json {dump}.mcp; echo db=$db_password; cat .mcp.json"
    worker = RemoteWorker(
        str(client.make_url("")),
        key,
        "myhost",
        harness="command",
        command=command,
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
        harness_env={"PATH": "/usr/bin:/bin"},
    )
    task = asyncio.create_task(worker.run())
    try:
        run_id = await new_run(
            worker_host="myhost", agent_config={"environment_id": "backend", "mcp_servers": MCP}
        )
        wake_claimers(app)
        run = await wait_state(run_id, {"SUCCEEDED", "FAILED", "ERROR"})
        assert run.state == "SUCCEEDED", run.status_message
    finally:
        worker.stop.set()
        assert await asyncio.wait_for(task, 15) == 0

    env_text, mcp_text = await asyncio.to_thread(
        lambda: (Path(f"{dump}.env").read_text(), Path(f"{dump}.mcp").read_text())
    )
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    assert env["db_password"] == "pw_env_value_88" and env["APP_MODE"] == "test"
    mcp = json.loads(mcp_text)["mcpServers"]
    assert mcp["github"]["env"] == {"GITHUB_TOKEN": "ghp_mcp_value_77"}

    logs = await (await client.get(f"/api/v1/agent/runs/{run_id}/logs", headers=auth(member))).json()
    text = "\n".join(x["text"] for x in logs["logs"])
    assert "db=***" in text and '"GITHUB_TOKEN": "***"' in text  # harness output, setup output
    assert "ghp_mcp_value_77" not in text and "pw_env_value_88" not in text
