"""A webhook's secret never reaches a run (docs/management.md, "Team secrets"; docs/agent-config.md,
"Secrets and self-hosted workers").

The finding: a member key created a run whose MCP ``env`` named ``secret:<a webhook's signing secret>`` and
routed it to a self-hosted ``worker_host``; a worker key claimed it and ``POST /workers/runs/{id}/secrets``
answered the value. Now creation refuses it (422, for every role), and the secrets endpoint and the
service-hosted workers' store source hand out only ``run``-scoped secrets, whatever the stored run says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import builders
import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from factoryctl.serve.local_workers import StoreSecrets
from factoryctl.worker import EnvironmentSetupFailed
from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.teams import ensure_team

if TYPE_CHECKING:
    from conftest import MakeKey, NewRun

RUNS = "/api/v1/agent/runs"
CLAIM = "/api/v1/workers/claim"
HOOK_SECRET = "github-webhook-secret"
HOOK_VALUE = "gh_signing_value_0123456789"
RUN_VALUE = "ghp_run_value_0123456789"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def webhook_and_run_secrets(sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
    """The GitHub webhook's signing secret (created as an apply or the webhooks API leaves it, without
    naming a scope) and a secret meant for runs; an environment naming each."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        info = await builders.secret(s, box, clock, team.id, HOOK_SECRET, HOOK_VALUE)
        fa = await builders.factory(s, clock, team.id, "shop", managed_by="definitions")
        await builders.webhook(
            s, clock, team.id, fa.uid, "github", secret_name=HOOK_SECRET, secret_version=info.version
        )
        await builders.secret(s, box, clock, team.id, "GH_TOKEN", RUN_VALUE, scope=secret_store.RUN)
        await builders.environment(s, clock, team.id, "leaky", {"secrets": [HOOK_SECRET]})
        await builders.environment(s, clock, team.id, "backend", {"secrets": ["GH_TOKEN"]})


def mcp(secret: str) -> dict[str, Any]:
    return {"x": {"url": "https://x.example/mcp", "headers": {"A": f"secret:{secret}"}}}


async def claim_and_read(client: Any, worker: str, run_id: str) -> dict[str, Any]:
    resp = await client.post(
        CLAIM, json={"worker_host": "myhost", "wait_seconds": 0, "worker_id": "wk"}, headers=auth(worker)
    )
    assert resp.status == 200, await resp.text()
    claimed = await resp.json()
    assert claimed["run"]["run_id"] == run_id
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/secrets",
        json={"worker_id": "wk", "lease_token": claimed["lease_token"]},
        headers=auth(worker),
    )
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body


async def test_a_member_cannot_pipe_a_webhook_secret_to_a_worker_it_picks(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    client = await aiohttp_client(worker_app())
    member, admin = await make_key("member"), await make_key("admin")
    worker = await make_key("worker", worker_hosts=["myhost"])
    await webhook_and_run_secrets(sessions, box)

    # The exact attack: MCP env names the webhook's signing secret, routed to a self-hosted worker.
    attack = {"prompt": "p", "config": {"mcp_servers": mcp(HOOK_SECRET), "worker_host": "myhost"}}
    message = f"team secret '{HOOK_SECRET}' may not be used by runs (scope: webhook)"
    for key in (member, admin):  # nobody may: the rule is about the secret, not the caller
        resp = await client.post(RUNS, json=attack, headers=auth(key))
        problem = await resp.json()
        assert resp.status == 422, problem
        assert problem["errors"] == [{"field": "config.mcp_servers.x.headers.A", "message": message}]
        assert HOOK_VALUE not in json.dumps(problem)
    # Through an environment too.
    leaky = {"prompt": "p", "config": {"environment_id": "leaky", "worker_host": "myhost"}}
    resp = await client.post(RUNS, json=leaky, headers=auth(member))
    assert resp.status == 422
    assert (await resp.json())["errors"] == [{"field": "config.environment_id", "message": message}]
    assert (await (await client.get(RUNS, headers=auth(member))).json())["runs"] == []  # nothing queued

    # A run secret still works the same way, end to end.
    fine = {"prompt": "p", "config": {"mcp_servers": mcp("GH_TOKEN"), "worker_host": "myhost"}}
    resp = await client.post(RUNS, json=fine, headers=auth(member))
    assert resp.status == 200, await resp.text()
    run_id = (await resp.json())["run_id"]
    assert await claim_and_read(client, worker, run_id) == {"secrets": {"GH_TOKEN": RUN_VALUE}}


async def test_a_stored_run_naming_a_webhook_secret_gets_no_value(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    new_run: NewRun,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    """Defence in depth: a run stored before the rule existed (inserted directly here) names the webhook
    secret in its MCP env and through its environment; the lease holder still gets only run secrets."""
    client = await aiohttp_client(worker_app())
    worker = await make_key("worker", worker_hosts=["myhost"])
    await webhook_and_run_secrets(sessions, box)
    servers = {**mcp(HOOK_SECRET), "ok": {"url": "https://y.example", "headers": {"B": "secret:GH_TOKEN"}}}
    run_id = await new_run(
        worker_host="myhost", agent_config={"mcp_servers": servers, "environment_id": "leaky"}
    )
    body = await claim_and_read(client, worker, run_id)
    assert body == {"secrets": {"GH_TOKEN": RUN_VALUE}}
    assert HOOK_VALUE not in json.dumps(body)


async def test_a_secret_rescoped_to_webhook_after_the_run_was_created_is_withheld(
    aiohttp_client: Any,
    worker_app: Callable[..., web.Application],
    make_key: MakeKey,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
) -> None:
    client = await aiohttp_client(worker_app())
    member, worker = await make_key("member"), await make_key("worker", worker_hosts=["myhost"])
    await webhook_and_run_secrets(sessions, box)
    body = {"prompt": "p", "config": {"environment_id": "backend", "worker_host": "myhost"}}
    resp = await client.post(RUNS, json=body, headers=auth(member))
    assert resp.status == 200, await resp.text()
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.set_scope(s, SystemClock(), team.id, "GH_TOKEN", secret_store.WEBHOOK)
    assert await claim_and_read(client, worker, (await resp.json())["run_id"]) == {"secrets": {}}


async def test_service_hosted_workers_read_only_run_secrets(
    new_run: NewRun, sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> None:
    await webhook_and_run_secrets(sessions, box)
    run_id = await new_run(agent_config={"mcp_servers": mcp(HOOK_SECRET)})
    source = StoreSecrets(sessions, box)
    assert await source.fetch(run_id, ["GH_TOKEN"]) == {"GH_TOKEN": RUN_VALUE}
    with pytest.raises(EnvironmentSetupFailed) as refused:
        await source.fetch(run_id, ["GH_TOKEN", HOOK_SECRET])
    assert str(refused.value) == f"team secret '{HOOK_SECRET}' may not be used by runs (scope: webhook)"
    with pytest.raises(EnvironmentSetupFailed, match="'gone' does not exist"):
        await source.fetch(run_id, ["gone"])
