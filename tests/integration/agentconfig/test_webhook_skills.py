"""Webhook-started runs get their skill (docs/agent-config.md): ingress stores only the spec, the claim
resolves the body, and the harness receives base prompt, skill, prompt and envelope in that order. A skill
that cannot be resolved at claim time ends the run FAILED ``skill_unavailable`` instead of hanging."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import builders
from sqlalchemy import select

from store.clock import SystemClock
from store.models import Automation, Run

if TYPE_CHECKING:
    from conftest import Ctx

HOOK_SECRET = "hook-token-0123456789"


async def webhook_with_automations(ctx: Ctx, configs: dict[str, dict[str, Any]]) -> str:
    """A factory, a token-auth webhook and one automation per ``configs`` entry; the webhook's path."""
    clock = SystemClock()
    async with ctx.sessions() as s, s.begin():
        info = await builders.secret(s, ctx.box, clock, ctx.team_id, "hook-secret", HOOK_SECRET)
        factory = await builders.factory(s, clock, ctx.team_id, "acme")
        hook = await builders.webhook(
            s,
            clock,
            ctx.team_id,
            factory.uid,
            "issues",
            secret_name="hook-secret",
            secret_version=info.version,
        )
        for name, config in configs.items():
            await builders.automation(
                s,
                clock,
                ctx.team_id,
                factory.uid,
                name,
                [builders.webhook_trigger([hook.uid])],
                config=config,
            )
    return f"/webhooks/w/{hook.uid}"


async def deliver(ctx: Ctx, path: str, body: dict[str, Any]) -> dict[str, str]:
    """Send one delivery; wait for its runs to exist; automation name → run ID."""
    resp = await ctx.client.post(
        path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {HOOK_SECRET}", "Content-Type": "application/json"},
    )
    assert resp.status == 202, await resp.text()
    for _ in range(200):
        async with ctx.sessions() as s:
            rows = (await s.execute(select(Run.run_id, Run.automation_id))).all()
            names = {
                uid: name for uid, name in (await s.execute(select(Automation.uid, Automation.name))).all()
            }
        if rows:
            return {names[automation]: run_id for run_id, automation in rows if automation}
        await asyncio.sleep(0.05)
    raise AssertionError("the delivery started no run")


async def test_webhook_run_receives_its_skill_in_the_documented_order(ctx: Ctx) -> None:
    path = await webhook_with_automations(
        ctx, {"triage": {"skill_spec": "acme/skills:triage", "base_prompt": "BASE RULES"}}
    )
    async with ctx.sessions() as s:  # ingress itself never reads the skill repository
        assert not (await s.execute(select(Run))).first()
    run_id = (await deliver(ctx, path, {"issue": 42}))["triage"]
    run = await ctx.finished(run_id)
    assert run["state"] == "SUCCEEDED", run["status_message"]

    prompt = (ctx.dumps / run_id / "PROMPT.md").read_text()
    assert prompt.startswith("BASE RULES\n\nYou are the triage skill.\n\nTriage the event.\n\n---\n\n")
    assert "## Webhook delivery" in prompt.split("Triage the event.", 1)[1]  # the envelope comes last
    assert "event-payload.json" in (ctx.dumps / run_id / "ls.txt").read_text().split()

    shown = run["agent_config"]
    assert shown["name"] == "triage-bot" and shown["skill_spec"] == "acme/skills:triage"
    assert "You are the triage skill" not in json.dumps(run) and "_skill" not in shown
    named = await ctx.client.get("/api/v1/agent/runs", params={"name": "triage-bot"}, headers=ctx.member)
    assert [r["run_id"] for r in (await named.json())["runs"]] == [run_id]

    # the body is stored with the run: a later change to the repository does not change it
    async with ctx.sessions() as s:
        stored = await s.get(Run, run_id)
        assert stored is not None
        assert stored.agent_config["_skill"]["body"] == "You are the triage skill."


async def test_an_unresolvable_skill_fails_the_run_at_claim_and_others_still_run(ctx: Ctx) -> None:
    path = await webhook_with_automations(
        ctx,
        {
            "broken": {"skill_spec": "acme/skills:nope"},
            "missing-repo": {"skill_spec": "acme/ghost:triage"},
            "fine": {"skill_spec": "acme/skills:triage"},
        },
    )
    runs = await deliver(ctx, path, {"issue": 7})
    assert set(runs) == {"broken", "missing-repo", "fine"}

    for name in ("broken", "missing-repo"):
        run = await ctx.finished(runs[name])
        assert run["state"] == "FAILED"
        message = run["status_message"]
        assert message["error_code"] == "skill_unavailable" and message["retryable"] is False
        spec = "acme/skills:nope" if name == "broken" else "acme/ghost:triage"
        assert spec in message["message"] and "claimed" in message["message"]
        assert not (ctx.dumps / runs[name]).exists()  # the harness never started

    fine = await ctx.finished(runs["fine"])
    assert fine["state"] == "SUCCEEDED", fine["status_message"]
    assert (ctx.dumps / runs["fine"] / "PROMPT.md").read_text().startswith("You are the triage skill.\n\n")
