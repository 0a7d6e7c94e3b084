"""Who chooses the programs a worker starts (docs/agent-config.md, "MCP servers").

A run's caller never names a command: stdio MCP servers are defined by admins in an environment
(``mcpServers``, over the admin API or in ``environments/<name>.yaml``) and a run references one by name
(``{warp_id: NAME}``). URL servers obey the outbound address rules of notifications
(:func:`store.rules.urlpolicy.url_refusal`). Checked at run creation (422, nothing queued), where a worker
claims it (a stored run from before the rule gets no command) and where the worker writes ``.mcp.json``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import builders
import pytest

from api.runs.claim_signal import wake_claimers
from store.clock import SystemClock

if TYPE_CHECKING:
    from conftest import Ctx

ENVIRONMENTS = "/api/v1/environments"
SCHEDULES = "/api/v1/agent/schedules"
GITHUB = {"command": "gh-mcp", "args": ["--stdio"], "env": {"GITHUB_TOKEN": "secret:GH_TOKEN"}}


async def runs_of(ctx: Ctx) -> list[dict[str, Any]]:
    listed: dict[str, Any] = await (await ctx.client.get("/api/v1/agent/runs", headers=ctx.member)).json()
    runs: list[dict[str, Any]] = listed["runs"]
    return runs


async def define_backend(ctx: Ctx, servers: dict[str, Any]) -> None:
    """The admin defines the environment ``backend`` and its MCP servers over the API (and the run
    secret ``GH_TOKEN`` they may use)."""
    await ctx.secret("GH_TOKEN", "ghp_supersecret123", scope="run")
    body = {"name": "backend", "setup": ["true"], "mcpServers": servers}
    resp = await ctx.client.post(ENVIRONMENTS, json=body, headers=ctx.admin)
    assert resp.status == 201, await resp.text()


@pytest.mark.parametrize("role", ["member", "admin"])
async def test_a_command_in_a_run_request_is_refused_and_nothing_is_queued(ctx: Ctx, role: str) -> None:
    """The attack: ``config.mcp_servers.x.command = "id"`` (run by an MCP-capable agent CLI)."""
    await define_backend(ctx, {"github": GITHUB})
    attack = {"prompt": "p", "config": {"environment_id": "backend", "mcp_servers": {"x": {"command": "id"}}}}
    resp = await ctx.client.post("/api/v1/agent/run", json=attack, headers=getattr(ctx, role))
    problem = await resp.json()
    assert resp.status == 422, problem
    [error] = problem["errors"]
    assert error["field"] == "config.mcp_servers.x.command"
    assert "{warp_id: NAME}" in error["message"] and "mcpServers" in error["message"], error
    assert await runs_of(ctx) == []
    assert not any(ctx.dumps.glob("*"))  # no harness ran


async def test_args_or_env_without_a_command_are_refused_too(ctx: Ctx) -> None:
    body = {"prompt": "p", "config": {"mcp_servers": {"x": {"warp_id": "github", "env": {"A": "b"}}}}}
    problem = await ctx.create(body, status=422)
    assert "config.mcp_servers.x.env" in {e["field"] for e in problem["errors"]}


async def test_a_schedule_cannot_carry_a_command_either(ctx: Ctx) -> None:
    body = {
        "name": "nightly",
        "cron_schedule": "0 6 * * *",
        "prompt": "p",
        "agent_config": {"mcp_servers": {"x": {"command": "id"}}},
    }
    resp = await ctx.client.post(SCHEDULES, json=body, headers=ctx.member)
    problem = await resp.json()
    assert resp.status == 422, problem
    assert "agent_config.mcp_servers.x.command" in {e["field"] for e in problem["errors"]}


async def test_a_member_references_an_admin_defined_server_and_the_worker_writes_it(ctx: Ctx) -> None:
    await define_backend(ctx, {"github": GITHUB, "docs": {"url": "https://docs.example/mcp"}})
    config = {
        "environment_id": "backend",
        "mcp_servers": {"gh": {"warp_id": "github"}, "search": {"url": "https://search.example/mcp"}},
    }
    created = await ctx.create({"prompt": "go", "config": config})
    run = await ctx.finished(created["run_id"])
    assert run["state"] == "SUCCEEDED", run["status_message"]
    assert run["agent_config"]["mcp_servers"] == config["mcp_servers"]  # the reference, not the command

    written = json.loads((ctx.dumps / created["run_id"] / ".mcp.json").read_text())["mcpServers"]
    assert written == {
        "gh": {"command": "gh-mcp", "args": ["--stdio"], "env": {"GITHUB_TOKEN": "ghp_supersecret123"}},
        "search": {"url": "https://search.example/mcp", "type": "http"},
    }


@pytest.mark.parametrize(
    ("config", "field", "needle"),
    [
        ({"mcp_servers": {"gh": {"warp_id": "github"}}}, "config.mcp_servers.gh.warp_id", "no environment"),
        (
            {"environment_id": "backend", "mcp_servers": {"gh": {"warp_id": "gitlab"}}},
            "config.mcp_servers.gh.warp_id",
            "environment 'backend' defines no MCP server 'gitlab' (defined: github)",
        ),
    ],
)
async def test_a_reference_to_no_admin_defined_server_is_refused(
    ctx: Ctx, config: dict[str, Any], field: str, needle: str
) -> None:
    await define_backend(ctx, {"github": GITHUB})
    problem = await ctx.create({"prompt": "p", "config": config}, status=422)
    assert [(e["field"], needle in e["message"]) for e in problem["errors"]] == [(field, True)], problem
    assert await runs_of(ctx) == []


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://mcp.example:8080/mcp", "plain http is allowed only to a loopback host"),
        ("https://[::ffff:192.168.1.1]/mcp", "private"),
        ("https://user:pw@mcp.example/", "user name or password"),
    ],
)
async def test_a_url_server_obeys_the_outbound_address_rules(ctx: Ctx, url: str, needle: str) -> None:
    await ctx.secret("GH_TOKEN", "ghp_supersecret123", scope="run")
    server = {"url": url, "headers": {"Authorization": "secret:GH_TOKEN"}}
    problem = await ctx.create({"prompt": "p", "config": {"mcp_servers": {"x": server}}}, status=422)
    [error] = problem["errors"]
    assert error["field"] == "config.mcp_servers.x.url" and needle in error["message"], error
    assert await runs_of(ctx) == []


async def test_an_environment_server_url_obeys_the_same_rules(ctx: Ctx) -> None:
    body = {"name": "meta", "mcpServers": {"m": {"url": "https://169.254.169.254/", "headers": {"A": "b"}}}}
    resp = await ctx.client.post(ENVIRONMENTS, json=body, headers=ctx.admin)
    problem = await resp.json()
    assert resp.status == 422, problem
    assert [e["field"] for e in problem["errors"]] == ["mcpServers.m.url"]
    assert "link-local" in problem["errors"][0]["message"]


async def test_an_environment_server_secret_must_be_run_scoped(ctx: Ctx) -> None:
    await ctx.secret("HOOK", "hook_secret_value", scope="webhook")
    server = {"command": "x", "env": {"T": "secret:HOOK"}}
    resp = await ctx.client.post(
        ENVIRONMENTS, json={"name": "e", "mcpServers": {"x": server}}, headers=ctx.admin
    )
    problem = await resp.json()
    assert resp.status == 422, problem
    assert [e["field"] for e in problem["errors"]] == ["mcpServers.x.env.T"]


async def test_a_stored_run_with_a_command_gets_no_command_when_claimed(ctx: Ctx) -> None:
    """A run stored before the rule (or by any path that skipped it) still starts no member's program."""
    async with ctx.sessions() as s, s.begin():
        run = await builders.run(
            s, SystemClock(), ctx.team_id, agent_config={"mcp_servers": {"x": {"command": "id"}}}
        )
    wake_claimers(ctx.client.app)
    finished = await ctx.finished(run.run_id)
    assert finished["state"] == "FAILED", finished
    assert finished["status_message"]["error_code"] == "mcp_server_unavailable"
    assert finished["status_message"]["retryable"] is False
    assert "may not start a command" in finished["status_message"]["message"], finished
    assert not (ctx.dumps / run.run_id).exists()  # the harness never started


async def test_a_reference_the_environment_no_longer_defines_fails_the_run_when_claimed(ctx: Ctx) -> None:
    """The environment as it is at the claim counts: an admin who removes a server stops its use."""
    await define_backend(ctx, {"github": GITHUB})
    config = {"environment_id": "backend", "mcp_servers": {"gh": {"warp_id": "github"}}}
    async with ctx.sessions() as s, s.begin():  # queued while the server was defined...
        run = await builders.run(s, SystemClock(), ctx.team_id, agent_config=config)
    resp = await ctx.client.put(f"{ENVIRONMENTS}/backend", json={"setup": ["true"]}, headers=ctx.admin)
    assert resp.status == 200, await resp.text()  # ...then the admin removed it
    wake_claimers(ctx.client.app)
    finished = await ctx.finished(run.run_id)
    assert finished["state"] == "FAILED", finished
    message = finished["status_message"]["message"]
    assert "environment 'backend' defines no MCP server 'github' (defined: none)" in message, message
    assert not (ctx.dumps / run.run_id).exists()
