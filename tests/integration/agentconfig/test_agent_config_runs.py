"""Agent configuration end to end (docs/agent-config.md): every key changes what the harness receives, and
a bad value is a 422 at creation or a FAILED run with a precise message. Runs go through the HTTP API and an
in-process service worker whose ``command`` harness dumps what it received."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import builders
import pytest

from store.clock import SystemClock

if TYPE_CHECKING:
    from conftest import Ctx


def fields(problem: dict[str, Any]) -> set[str]:
    return {e["field"] for e in problem.get("errors", [])}


async def test_done_when_the_harness_receives_exactly_the_documented_workspace(ctx: Ctx) -> None:
    await ctx.secret("GH_TOKEN", "ghp_supersecret123", scope="run")
    await ctx.secret("db-password", "pw_hunter2_long", scope="run")
    await ctx.environment(
        "backend",
        {
            "repos": [{"url": str(ctx.repos / "acme" / "app"), "path": "app"}],
            "setup": ["echo prepared > setup.txt"],
            "env": {"APP_MODE": "test"},
            "secrets": ["db-password"],
            "mcpServers": {  # an admin's definition: the only place a command comes from
                "github": {
                    "command": "gh-mcp",
                    "args": ["--stdio"],
                    "env": {"GITHUB_TOKEN": "secret:GH_TOKEN"},
                }
            },
        },
    )
    config = {
        "base_prompt": "BASE RULES",
        "model_id": "claude-test-1",
        "environment_id": "backend",
        "mcp_servers": {
            "github": {"warp_id": "github"},
            "docs": {"url": "https://docs.example/mcp", "headers": {"X-Team": "core"}},
        },
    }
    created = await ctx.create({"prompt": "Fix the bug", "skill": "acme/skills:triage", "config": config})
    run = await ctx.finished(created["run_id"])
    assert run["state"] == "SUCCEEDED", run["status_message"]

    shown = run["agent_config"]
    assert shown["name"] == "triage-bot" and shown["skill_spec"] == "acme/skills:triage"
    assert shown["model_id"] == "claude-test-1" and shown["environment_id"] == "backend"
    assert shown["mcp_servers"]["github"] == {"warp_id": "github"}  # the reference, never a secret value
    assert "ghp_supersecret123" not in json.dumps(run) and "You are the triage skill" not in json.dumps(run)

    dump = ctx.dumps / created["run_id"]
    prompt = (dump / "PROMPT.md").read_text()
    assert prompt == "BASE RULES\n\nYou are the triage skill.\n\nFix the bug"
    mcp = json.loads((dump / ".mcp.json").read_text())["mcpServers"]
    assert mcp["github"] == {
        "command": "gh-mcp",
        "args": ["--stdio"],
        "env": {"GITHUB_TOKEN": "ghp_supersecret123"},
    }
    assert mcp["docs"] == {"url": "https://docs.example/mcp", "headers": {"X-Team": "core"}, "type": "http"}
    env = dict(line.split("=", 1) for line in (dump / "env.txt").read_text().splitlines() if "=" in line)
    assert env["FACTORY_MODEL_ID"] == "claude-test-1"
    assert env["APP_MODE"] == "test" and env["db_password"] == "pw_hunter2_long"
    assert (dump / "model.txt").read_text().strip() == "claude-test-1"
    listing = set((dump / "ls.txt").read_text().split())
    assert {"PROMPT.md", ".mcp.json", "app", "setup.txt"} <= listing
    assert {"README.md", "src", ".git"} <= set((dump / "app.txt").read_text().split())

    named = await ctx.client.get("/api/v1/agent/runs", params={"name": "triage-bot"}, headers=ctx.member)
    assert [r["run_id"] for r in (await named.json())["runs"]] == [created["run_id"]]


async def test_skill_by_path_and_explicit_name_wins(ctx: Ctx) -> None:
    created = await ctx.create(
        {"prompt": "go", "config": {"skill_spec": "acme/skills:x/SKILL.md", "name": "mine"}}
    )
    run = await ctx.finished(created["run_id"])
    assert run["agent_config"]["name"] == "mine"
    assert (ctx.dumps / created["run_id"] / "PROMPT.md").read_text() == "tool body\n\ngo"


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ({"skill": "acme/nope:triage"}, "skill", "unknown repository acme/nope"),
        ({"skill": "acme/skills:missing"}, "skill", "no skill 'missing'"),
        ({"config": {"skill_spec": "acme/skills:../../etc/passwd"}}, "config.skill_spec", "'..'"),
        ({"config": {"skill_spec": "acme/skills:/etc/passwd"}}, "config.skill_spec", "absolute"),
        (
            {"skill": "acme/skills:triage", "config": {"skill_spec": "acme/skills:triage"}},
            "skill",
            "not both",
        ),
        ({"prompt": "p", "config": {"model_id": 3}}, "config.model_id", "must be a string"),
        ({"prompt": "p", "config": {"model": "x"}}, "config.model", "unknown config key"),
        (
            {"prompt": "p", "config": {"mcp_servers": {"a": {"warp_id": "x", "url": "https://x"}}}},
            "config.mcp_servers.a",
            "exactly one transport",
        ),
        ({"prompt": "p", "config": {"mcp_servers": {"a": {}}}}, "config.mcp_servers.a", "found: none"),
        (
            {"prompt": "p", "config": {"mcp_servers": {"a": {"url": "ftp://x"}}}},
            "config.mcp_servers.a.url",
            "http",
        ),
        (
            {"prompt": "p", "config": {"environment_id": "nowhere"}},
            "config.environment_id",
            "unknown environment",
        ),
        (
            {
                "prompt": "p",
                "config": {
                    "mcp_servers": {"a": {"url": "https://x.example", "headers": {"T": "secret:MISSING"}}}
                },
            },
            "config.mcp_servers.a.headers.T",
            "team secret 'MISSING' does not exist",
        ),
    ],
)
async def test_bad_values_are_refused_at_creation(
    ctx: Ctx, body: dict[str, Any], field: str, needle: str
) -> None:
    problem = await ctx.create(body, status=422)
    assert field in fields(problem), problem
    assert needle in json.dumps(problem), problem
    runs = await (await ctx.client.get("/api/v1/agent/runs", headers=ctx.member)).json()
    assert runs["runs"] == []


async def test_oversize_skill_is_refused(ctx: Ctx) -> None:
    big = ctx.repos / "acme" / "skills" / "skills" / "big"
    big.mkdir(parents=True)
    (big / "SKILL.md").write_text("x" * (256 * 1024 + 1))
    problem = await ctx.create({"skill": "acme/skills:big"}, status=422)
    assert "at most 262144 bytes" in problem["detail"]


async def test_environment_secret_that_does_not_exist_is_refused(ctx: Ctx) -> None:
    await ctx.environment("needs-secret", {"secrets": ["NOT_THERE"]})
    problem = await ctx.create({"prompt": "p", "config": {"environment_id": "needs-secret"}}, status=422)
    assert "team secret 'NOT_THERE' does not exist" in problem["detail"]


async def test_failing_setup_fails_the_run_with_the_output_tail(ctx: Ctx) -> None:
    await ctx.secret("TOKEN", "tok_value_12345", scope="run")
    await ctx.environment(
        "broken", {"setup": ['echo "using $TOKEN"; echo boom >&2; exit 3'], "secrets": ["TOKEN"]}
    )
    created = await ctx.create({"prompt": "p", "config": {"environment_id": "broken"}})
    run = await ctx.finished(created["run_id"])
    assert run["state"] == "FAILED"
    status = run["status_message"]
    assert status["error_code"] == "environment_setup_failed"
    assert "setup command 1 exited with status 3" in status["message"] and "boom" in status["message"]
    assert "tok_value_12345" not in status["message"] and "using ***" in status["message"]
    assert not (ctx.dumps / created["run_id"]).exists()  # the harness never started


async def test_setup_command_that_hangs_times_out(ctx: Ctx) -> None:
    await ctx.environment("slow", {"setup": ["echo starting; sleep 60"], "setupTimeoutSeconds": 1})
    created = await ctx.create({"prompt": "p", "config": {"environment_id": "slow"}})
    run = await ctx.finished(created["run_id"], within=20)
    assert run["state"] == "FAILED"
    assert run["status_message"]["error_code"] == "environment_setup_failed"
    assert "timed out after 1s" in run["status_message"]["message"]


async def test_environment_deleted_after_creation_fails_the_run(ctx: Ctx) -> None:
    resp = await ctx.client.post("/api/v1/environments", json={"name": "temp"}, headers=ctx.admin)
    assert resp.status == 201
    # Keep the worker from claiming between creation and deletion: create and delete in one go.
    created = await ctx.create({"prompt": "p", "config": {"environment_id": "temp"}})
    await ctx.client.delete("/api/v1/environments/temp", headers=ctx.admin)
    run = await ctx.finished(created["run_id"])
    # Either the worker prepared it before the delete (SUCCEEDED) or it reports precisely why not.
    if run["state"] != "SUCCEEDED":
        assert run["status_message"]["error_code"] == "environment_setup_failed"
        assert "no longer exists" in run["status_message"]["message"]


async def test_factory_dispatch_uses_the_foreman_defaults(ctx: Ctx) -> None:
    foreman = {"skill_spec": "acme/skills:triage", "model_id": "m-foreman"}
    async with ctx.sessions() as s, s.begin():
        factory = await builders.factory(s, SystemClock(), ctx.team_id, "shop", agents={"foreman": foreman})
    resp = await ctx.client.post(
        f"/api/v1/factory/{factory.uid}/runs", json={"prompt": "ship it"}, headers=ctx.member
    )
    assert resp.status == 200, await resp.text()
    run_id = (await resp.json())["run_id"]
    run = await ctx.finished(run_id)
    assert run["agent_config"]["name"] == "triage-bot" and run["agent_config"]["model_id"] == "m-foreman"
    assert (ctx.dumps / run_id / "PROMPT.md").read_text().startswith("You are the triage skill.\n\nship it")
