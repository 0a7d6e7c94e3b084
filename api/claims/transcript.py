"""A run's transcript from its worker: the agent CLI's messages, tool calls, results, usage and session
(docs/events.md, "Transcript events"), and the destinations its egress proxy refused (docs/events.md,
"Egress refusals").

:func:`parse_events` checks a batch the way both paths need it (the HTTP route and the service-hosted
workers' in-process calls), so the bounds hold whatever the path; :func:`append_events` stores the batch as
``run_events`` rows in the run's event stream, within the run's event cap, and folds ``session`` and
``usage`` events into the run's own fields. It locks the run like every other queue write
(:func:`api.claims.queue.locked_run`); the caller owns the session and the transaction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncSession

from api import ValidationFailed
from api.claims.queue import locked_run, require_lease
from api.http.bodies import field_error
from api.runs import events
from store.clock import Clock
from store.models import Run

MESSAGE, TOOL_CALL, TOOL_RESULT, USAGE, SESSION = events.TRANSCRIPT
EVENT_KINDS: Final = (*events.TRANSCRIPT, events.EGRESS_REFUSED)
MAX_EVENTS_PER_CALL: Final = 500
MAX_MESSAGE_BYTES: Final = 32 * 1024  # UTF-8 bytes of a message's text
MAX_TOOL_INPUT_BYTES: Final = 16 * 1024  # UTF-8 bytes of a tool call's input, serialized as JSON
MAX_TOOL_OUTPUT_BYTES: Final = 4 * 1024  # UTF-8 bytes of a tool result's output excerpt
MAX_ID: Final = 200  # a tool call's id and name
MAX_SESSION_ID: Final = 100  # runs.session_id
MAX_HOST: Final = 255  # an egress destination's host, as the client named it
MAX_REASON_BYTES: Final = 1024
ROLES: Final = ("assistant", "user", "system")


@dataclass(frozen=True)
class TranscriptEvent:
    kind: str
    data: dict[str, Any]


def parse_events(raw: Any, *, field: str = "events") -> list[TranscriptEvent]:
    """The events of a batch, each checked and reduced to its kind's documented keys; 422
    (:class:`api.ValidationFailed`) naming the first bad one."""
    if not isinstance(raw, list) or len(raw) > MAX_EVENTS_PER_CALL:
        raise ValidationFailed(
            f"{field} must be a list of at most {MAX_EVENTS_PER_CALL} {{kind, data}} objects",
            errors=[field_error(field, "invalid")],
        )
    return [_event(item, f"{field}[{i}]") for i, item in enumerate(raw)]


def _event(item: Any, where: str) -> TranscriptEvent:
    if not isinstance(item, Mapping) or item.get("kind") not in EVENT_KINDS:
        _refuse(f"{where}.kind", f"must be one of {', '.join(EVENT_KINDS)}")
    data = item.get("data")
    if not isinstance(data, Mapping):
        _refuse(f"{where}.data", "must be an object")
    kind = str(item["kind"])
    return TranscriptEvent(kind, _CHECKS[kind](data, f"{where}.data"))


def _refuse(where: str, why: str) -> Any:
    raise ValidationFailed(f"{where} {why}", errors=[field_error(where, why)])


def _text(value: Any, where: str, max_bytes: int, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str) or (not allow_empty and not value):
        _refuse(where, "must be a string" if allow_empty else "must be a non-empty string")
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        _refuse(where, f"must be at most {max_bytes} bytes (UTF-8)")
    return str(value).replace("\x00", "")


def _message(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = data.get("role", "assistant")
    if role not in ROLES:
        _refuse(f"{where}.role", f"must be one of {', '.join(ROLES)}")
    return {"role": role, "text": _text(data.get("text"), f"{where}.text", MAX_MESSAGE_BYTES)}


def _tool_call(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    try:
        size = len(json.dumps(data.get("input"), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError):
        _refuse(f"{where}.input", "must be JSON")
    if size > MAX_TOOL_INPUT_BYTES:
        _refuse(f"{where}.input", f"must be at most {MAX_TOOL_INPUT_BYTES} bytes serialized as JSON")
    return {
        "id": _text(data.get("id", ""), f"{where}.id", MAX_ID),
        "name": _text(data.get("name"), f"{where}.name", MAX_ID, allow_empty=False),
        "input": _strip_nul(data.get("input")),
    }


def _tool_result(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    ok, truncated = data.get("ok"), data.get("truncated", False)
    if not isinstance(ok, bool):
        _refuse(f"{where}.ok", "must be a boolean")
    if not isinstance(truncated, bool):
        _refuse(f"{where}.truncated", "must be a boolean")
    return {
        "id": _text(data.get("id", ""), f"{where}.id", MAX_ID),
        "ok": ok,
        "output": _text(data.get("output", ""), f"{where}.output", MAX_TOOL_OUTPUT_BYTES),
        "truncated": truncated,
    }


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        _refuse(where, "must be a non-negative integer")
    return int(value)


def _usage(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    cost = data.get("cost_usd")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
    ):
        _refuse(f"{where}.cost_usd", "must be a non-negative number or null")
    return {
        "input_tokens": _count(data.get("input_tokens", 0), f"{where}.input_tokens"),
        "output_tokens": _count(data.get("output_tokens", 0), f"{where}.output_tokens"),
        "cost_usd": None if cost is None else float(cost),
    }


def _session(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {
        "session_id": _text(data.get("session_id"), f"{where}.session_id", MAX_SESSION_ID, allow_empty=False)
    }


def _egress_refused(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    port = _count(data.get("port"), f"{where}.port")
    if not 0 < port < 65536:
        _refuse(f"{where}.port", "must be an integer from 1 to 65535")
    return {
        "host": _text(data.get("host"), f"{where}.host", MAX_HOST, allow_empty=False),
        "port": port,
        "reason": _text(data.get("reason", ""), f"{where}.reason", MAX_REASON_BYTES),
    }


def _strip_nul(value: Any) -> Any:
    """``value`` without NUL characters in its strings (PostgreSQL text refuses them)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_strip_nul(v) for v in value]
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _strip_nul(v) for k, v in value.items()}
    return value


_CHECKS = {
    MESSAGE: _message,
    TOOL_CALL: _tool_call,
    TOOL_RESULT: _tool_result,
    USAGE: _usage,
    SESSION: _session,
    events.EGRESS_REFUSED: _egress_refused,
}


async def append_events(
    session: AsyncSession,
    clock: Clock,
    run_id: str,
    batch: Sequence[TranscriptEvent],
    *,
    owner: str,
    lease_token: str | None,
    team_id: str | None = None,
    event_cap: int = events.MAX_EVENTS_PER_RUN,
) -> int:
    """Store ``batch`` in the run's event stream (only by the lease holder), within ``event_cap`` like log
    lines (docs/events.md, "Bounds"); returns how many events were stored.

    Whatever the cap keeps, ``session`` and ``usage`` events always reach the run: the first ``session`` of
    an attempt sets ``session_id`` and ``conversation_id`` (a later attempt's first one replaces them, so the
    newest session is the one a follow-up resumes), and ``usage`` adds to ``request_usage``.
    """
    run = await locked_run(session, run_id, team_id)
    require_lease(run, owner, lease_token)
    if not batch:
        return 0
    for event in batch:
        if event.kind == SESSION:
            _set_session(run, str(event.data["session_id"]))
        elif event.kind == USAGE:
            run.request_usage = add_usage(run.request_usage, event.data)
    now = clock.now()
    return await events.record_capped(session, run, [(e.kind, e.data) for e in batch], now, cap=event_cap)


def _set_session(run: Run, session_id: str) -> None:
    if run.session_attempt == run.attempt and run.session_id:
        return  # the first session of an attempt wins
    run.session_id = session_id
    run.conversation_id = session_id
    run.session_attempt = run.attempt


def add_usage(total: Mapping[str, Any] | None, usage: Mapping[str, Any]) -> dict[str, Any]:
    """``total`` (``runs.request_usage``) plus one ``usage`` event; the cost stays None until one is known."""
    before = dict(total or {})
    cost, more = before.get("cost_usd"), usage.get("cost_usd")
    return {
        "input_tokens": int(before.get("input_tokens") or 0) + int(usage["input_tokens"]),
        "output_tokens": int(before.get("output_tokens") or 0) + int(usage["output_tokens"]),
        "cost_usd": cost if more is None else float(cost or 0) + float(more),
    }


__all__ = [
    "EVENT_KINDS",
    "MAX_EVENTS_PER_CALL",
    "MAX_MESSAGE_BYTES",
    "MAX_TOOL_INPUT_BYTES",
    "MAX_TOOL_OUTPUT_BYTES",
    "TranscriptEvent",
    "add_usage",
    "append_events",
    "parse_events",
]
