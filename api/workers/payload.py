"""The claim answer: what a worker receives with a run, the same in-process and over HTTP.

Shape (read by :meth:`api.worker.job.Job.from_claim` from ``run``)::

    {"run": {run_id, title, prompt, base_prompt?, agent_config, model_id, attachments:
             [{file_name, mime_type, data (base64)}], followups: [{followup_id, message, mode}],
             attempt, worker_host, lease_expires_at, conversation_id, parent_run_id, metadata},
     "lease_seconds": 30}

Follow-ups still pending at claim time (sent before the run started, or the ones that re-queued
a finished run as a continuation) are appended to the prompt, since a freshly started harness
has no other way to see them, and are marked delivered.
"""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

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
    config = dict(run.agent_config or {})
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
    return {"run": body, "lease_seconds": lease_seconds}
