"""Run rows as the wire's RunItem (docs/api.md, "Runs"): the same shape from the list and the single GET."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from api.context import CLOCK, SETTINGS
from api.runs.states import LEASED, RunState
from store.clock import rfc3339
from store.models import Run, RunFollowup, RunLog

EXECUTION_LOCATION = "REMOTE"
CONSOLE_RUNS = "/console/runs/"


def run_item(
    run: Run,
    attachments: Sequence[str] = (),
    *,
    base_url: str | None = None,
    now: dt.datetime | None = None,
    artifacts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """RunItem: identity, prompt, state, timestamps (RFC 3339 UTC), config, origin and factory fields;
    ``schedule`` only for scheduled runs (docs/schedules.md, "Runs started by a schedule"); the agent's
    session, usage, run time and sandbox (docs/api.md, "Agent session and usage").

    ``base_url`` is the server's public URL (``session_link`` is its console page for the run; None: the
    stored link); ``now`` ends the ``run_time`` of a run still going (None: the run time so far is unknown
    and only a finished run has one). ``artifacts``: the run's ``ArtifactItem`` list
    (:func:`api.runs.artifacts.artifacts_of`, one query per page)."""
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
        "session_link": session_link(run, base_url),
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
        "request_usage": request_usage(run.request_usage),
        "run_time": run_time(run.started_at, run.finished_at or now),
        "sandbox": sandbox_info(run.sandbox),
        "is_sandbox_running": is_sandbox_running(run),
        "artifacts": [dict(a) for a in artifacts],
        "scores": list(run.scores or []),  # factoryctl: the scorers' judgements (docs/scorers.md)
    }


def sandbox_info(value: Mapping[str, Any] | None) -> dict[str, str] | None:
    """``{kind, network}`` as the worker reported when the run started (docs/workers.md, "Sandbox");
    None before a worker said."""
    if not value or not isinstance(value.get("kind"), str) or not isinstance(value.get("network"), str):
        return None
    return {"kind": value["kind"], "network": value["network"]}


def is_sandbox_running(run: Run) -> bool:
    """A worker holds the run and runs it in a bubblewrap sandbox (a run executing unsandboxed,
    ``--sandbox none``, is not)."""
    info = sandbox_info(run.sandbox)
    return RunState(run.state) in LEASED and info is not None and info["kind"] == "bwrap"


def item_context(request: web.Request) -> dict[str, Any]:
    """What :func:`run_item` takes from the app: its public URL and its clock's now."""
    return {"base_url": request.app[SETTINGS].base_url, "now": request.app[CLOCK].now()}


def session_link(run: Run, base_url: str | None) -> str | None:
    """The console's page for the run's transcript, absolute under the public URL."""
    if base_url is None:
        return run.session_link
    return f"{base_url.rstrip('/')}{CONSOLE_RUNS}{run.run_id}"


def request_usage(total: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The SDK's ``RunItem.RequestUsage`` from ``runs.request_usage``: ``total_tokens`` (input + output) and,
    once a CLI reported a cost, ``inference_cost_usd`` and ``inference_cost`` (the same US dollars: this
    server has no credits). None before the first ``usage`` event. Only keys the SDK knows, so a strict
    client parses it; the split by direction is in the run's ``usage`` events."""
    if not total:
        return None
    out: dict[str, Any] = {
        "total_tokens": int(total.get("input_tokens") or 0) + int(total.get("output_tokens") or 0)
    }
    cost = total.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        out["inference_cost_usd"] = float(cost)
        out["inference_cost"] = float(cost)
    return out


def run_time(started: dt.datetime | None, ended: dt.datetime | None) -> str | None:
    """ISO 8601 duration (``PT2M30S``) from the start to the end (or to now, for a run still going); None
    for a run that never started."""
    if started is None or ended is None:
        return None
    total = max(0.0, (ended - started).total_seconds())
    hours, rest = divmod(int(total), 3600)
    minutes, seconds = divmod(rest, 60)
    fraction = total - int(total)
    text = "PT"
    if hours:
        text += f"{hours}H"
    if minutes:
        text += f"{minutes}M"
    if seconds or fraction or text == "PT":
        text += f"{seconds + fraction:.3f}".rstrip("0").rstrip(".") + "S"
    return text


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
