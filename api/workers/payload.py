"""The claim answer: what a worker receives with a run, the same in-process and over HTTP.

Shape (read by :meth:`api.worker.job.Job.from_claim` from ``run``)::

    {"run": {run_id, title, prompt, base_prompt?, skill_body?, environment?, agent_config, model_id,
             attachments: [{file_name, mime_type, data (base64)}], followups: [{followup_id, message, mode}],
             attempt, worker_host, lease_expires_at, conversation_id, parent_run_id, metadata},
     "lease_seconds": 30}

Follow-ups still pending at claim time (sent before the run started, or the ones that re-queued
a finished run as a continuation) are appended to the prompt, since a freshly started harness
has no other way to see them, and are marked delivered.

``skill_body`` is the SKILL.md body resolved at run creation; ``environment`` is the run's
environment spec with team secrets as *names* (``secret_refs``), or ``{"error": ...}`` when it was
deleted since. Secret values never travel in the claim: the worker resolves them
(:mod:`api.worker.resolve`).
"""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.prepare import SKILL_KEY, find_environment, public_config
from api.runs.queue import pending_followups
from store.clock import Clock, rfc3339
from store.models import Run, RunAttachment, RunFollowup


def followup_json(row: RunFollowup) -> dict[str, Any]:
    return {"followup_id": row.id, "message": row.message, "mode": row.mode}


def prompt_with_followups(prompt: str, followups: list[RunFollowup]) -> str:
    parts = [prompt.rstrip("\n")] if prompt.strip() else []
    parts.extend(f"## Follow-up\n\n{f.message.strip()}" for f in followups)
    return "\n\n".join(parts)


async def claim_payload(
    session: AsyncSession, clock: Clock, run: Run, lease_seconds: float
) -> dict[str, Any]:
    """Build the claim answer for ``run`` (in the claim's transaction)."""
    attachments = (
        await session.scalars(
            select(RunAttachment).where(RunAttachment.run_id == run.run_id).order_by(RunAttachment.file_name)
        )
    ).all()
    followups = await pending_followups(session, clock, run.run_id)
    config = public_config(run.agent_config)
    body: dict[str, Any] = {
        "run_id": run.run_id,
        "title": run.title,
        "prompt": prompt_with_followups(run.prompt, followups),
        "agent_config": config,
        "model_id": run.model_id,
        "attachments": [
            {
                "file_name": a.file_name,
                "mime_type": a.mime_type,
                "data": base64.b64encode(a.data).decode("ascii"),
            }
            for a in attachments
        ],
        "followups": [followup_json(f) for f in followups],
        "attempt": run.attempt,
        "worker_host": run.worker_host or None,
        "lease_expires_at": rfc3339(run.lease_expires_at),
        "conversation_id": run.conversation_id,
        "parent_run_id": run.parent_run_id,
        "metadata": dict(run.run_metadata or {}),
    }
    base_prompt = config.get("base_prompt")
    if isinstance(base_prompt, str) and base_prompt.strip():
        body["base_prompt"] = base_prompt
    skill = (run.agent_config or {}).get(SKILL_KEY)
    if isinstance(skill, dict) and isinstance(skill.get("body"), str):
        body["skill_body"] = skill["body"]
    env_id = config.get("environment_id")
    if isinstance(env_id, str) and env_id:
        body["environment"] = await environment_payload(session, run.team_id, env_id)
    return {"run": body, "lease_seconds": lease_seconds}


async def environment_payload(session: AsyncSession, team_id: str, environment_id: str) -> dict[str, Any]:
    """The environment as a worker prepares it; secrets by name only (``secret_refs``)."""
    row = await find_environment(session, team_id, environment_id)
    if row is None:
        return {"error": f"environment {environment_id!r} no longer exists"}
    spec = row.spec or {}
    out: dict[str, Any] = {
        "name": row.name,
        "repos": list(spec.get("repos") or []),
        "setup": list(spec.get("setup") or []),
        "env": dict(spec.get("env") or {}),
        "secret_refs": [n for n in spec.get("secrets") or [] if isinstance(n, str)],
    }
    timeout = spec.get("setupTimeoutSeconds", spec.get("setup_timeout_seconds"))
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        out["setup_timeout_seconds"] = timeout
    return out
