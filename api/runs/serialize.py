"""Run rows as the wire's RunItem (docs/api.md, "Runs"): the same shape from the list and the single GET."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.clock import rfc3339
from store.models import Run, RunFollowup, RunLog

EXECUTION_LOCATION = "REMOTE"


def run_item(run: Run, attachments: Sequence[str] = ()) -> dict[str, Any]:
    """RunItem: identity, prompt, state, timestamps (RFC 3339 UTC), config, origin and factory fields;
    ``schedule`` only for scheduled runs (docs/schedules.md, "Runs started by a schedule")."""
    return {
        "run_id": run.run_id,
        "task_id": run.run_id,
        "title": run.title,
        "prompt": run.prompt,
        "state": run.state,
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
        "started_at": rfc3339(run.started_at),
        "finished_at": rfc3339(run.finished_at),
        "session_id": run.session_id,
        "session_link": run.session_link,
        "agent_config": {k: v for k, v in (run.agent_config or {}).items() if not k.startswith("_")},
        "source": run.source,
        "creator": {
            "type": run.creator_type,
            "uid": run.creator_uid,
            "display_name": run.creator_display_name,
        },
        "status_message": status_message(run.status_message),
        "metadata": run.run_metadata or {},
        "execution_location": EXECUTION_LOCATION,
        "worker_host": run.worker_host or None,
        "attempt": run.attempt,
        "cancel_requested": run.cancel_requested,
        "conversation_id": run.conversation_id,
        "parent_run_id": run.parent_run_id,
        "factory_uid": run.factory_uid,
        "automation_id": run.automation_id,
        "agent": run.agent,
        "webhook_uid": run.webhook_uid,
        "delivery_id": run.delivery_id,
        "schedule": schedule_info(run.schedule),
        "attachments": list(attachments),
    }


def schedule_info(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The SDK's ``RunItem.schedule`` ``{cron_schedule, schedule_id, schedule_name}`` from the snapshot
    stored when the run was created (the schedule may have been renamed or deleted since)."""
    if not value:
        return None
    return {key: value.get(key) for key in ("cron_schedule", "schedule_id", "schedule_name")}


def status_message(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """RunStatusMessage ``{message, error_code?, retryable?}``; other stored keys are not exposed."""
    if not value or not isinstance(value.get("message"), str):
        return None
    out: dict[str, Any] = {"message": value["message"]}
    if isinstance(value.get("error_code"), str):
        out["error_code"] = value["error_code"]
    if isinstance(value.get("retryable"), bool):
        out["retryable"] = value["retryable"]
    return out


def followup_item(followup: RunFollowup) -> dict[str, Any]:
    return {"followup_id": followup.id, "outcome": followup.outcome}


def log_line(line: RunLog) -> dict[str, Any]:
    return {"id": line.id, "stream": line.stream, "text": line.text, "created_at": rfc3339(line.created_at)}
