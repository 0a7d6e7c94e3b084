"""The worker protocol (``/api/v1/workers``): claim runs, heartbeat, report states, append logs,
read the team secrets a claimed run references (lease holder only; never log the answer).

Worker calls are never repeated after an ambiguous failure: a repeated claim would strand a run until
its lease lapses, a repeated heartbeat could swallow follow-ups, a repeated log append duplicates lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    parse_model,
)
from factoryctl.client._transport import RequestSpec, path
from factoryctl.client.models import Claim, Heartbeat, LogLine, StateReport

# --- workers ---------------------------------------------------------------------------------------


def _claim(response: httpx.Response) -> Claim | None:
    return None if response.status_code == 204 else Claim.from_json(response.json())


def claim_run(
    worker_host: str | Sequence[str] = "", *, wait_seconds: float = 0.0, worker_id: str | None = None
) -> RequestSpec[Claim | None]:
    """Long-poll for a run of these host IDs; None when none came within ``wait_seconds``."""
    hosts = [worker_host] if isinstance(worker_host, str) else list(worker_host)
    return RequestSpec(
        "POST",
        f"{V1}/workers/claim",
        _claim,
        json=json_body(worker_hosts=hosts, wait_seconds=wait_seconds, worker_id=worker_id),
        timeout=wait_seconds + 15.0,
    )


def heartbeat_run(
    run_id: str, *, state: str | None = None, worker_id: str | None = None
) -> RequestSpec[Heartbeat]:
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/heartbeat", run_id),
        parse_model(Heartbeat),
        json=json_body(state=state, worker_id=worker_id),
    )


def report_run_state(
    run_id: str,
    state: str,
    *,
    status_message: str | Mapping[str, Any] | None = None,
    worker_id: str | None = None,
) -> RequestSpec[StateReport]:
    message = {"message": status_message} if isinstance(status_message, str) else status_message
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/state", run_id),
        parse_model(StateReport),
        json=json_body(state=state, status_message=dict(message) if message else None, worker_id=worker_id),
    )


def _appended(response: httpx.Response) -> int:
    value = response.json().get("appended")
    if not isinstance(value, int):
        raise TypeError("expected 'appended' to be an integer")
    return value


def append_run_logs(
    run_id: str, lines: Sequence[LogLine | tuple[str, str]], *, worker_id: str | None = None
) -> RequestSpec[int]:
    """Append ``(stream, text)`` lines to a run's log; answers how many were stored."""
    items = [
        {"stream": x.stream, "text": x.text} if isinstance(x, LogLine) else {"stream": x[0], "text": x[1]}
        for x in lines
    ]
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/logs", run_id),
        _appended,
        json=json_body(lines=items, worker_id=worker_id),
    )


def _secrets(response: httpx.Response) -> dict[str, str]:
    value = response.json().get("secrets")
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("expected 'secrets' to be an object of strings")
    return {str(k): v for k, v in value.items()}


def run_secrets(run_id: str, *, worker_id: str | None = None) -> RequestSpec[dict[str, str]]:
    """The values of the team secrets the claimed run references, ``{NAME: value}``."""
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/secrets", run_id),
        _secrets,
        json=json_body(worker_id=worker_id),
    )


class Workers(Resource[Mode]):
    claim = endpoint(claim_run)
    heartbeat = endpoint(heartbeat_run)
    report_state = endpoint(report_run_state)
    append_logs = endpoint(append_run_logs)
    secrets = endpoint(run_secrets)
