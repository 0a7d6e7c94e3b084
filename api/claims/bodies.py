"""Request bodies of the worker protocol over HTTP: each parser checks one field and answers ``422``
(docs/workers.md, "Endpoints"). What the fields then do is :mod:`api.claims.protocol`'s."""

from __future__ import annotations

import re
from typing import Any

from api import ValidationFailed
from api.claims.protocol import Holder
from api.claims.queue import REPORT_EVENTS
from api.claims.run_logs import LOG_STREAMS
from api.http.bodies import field_error
from api.runs.config import worker_host_of
from store.apikeys import Principal

MAX_LOG_LINES = 1000
MAX_LOG_TEXT = 16_384
MAX_LEASE_TOKEN = 64
MAX_MESSAGE = 10_000
_WORKER_ID = re.compile(r"^[A-Za-z0-9._:@/+-]{1,120}$")


def _worker_id(body: dict[str, Any]) -> str:
    value = body.get("worker_id", "")
    if value in ("", None):
        return ""
    if not isinstance(value, str) or not _WORKER_ID.match(value):
        raise ValidationFailed(
            "worker_id must be 1-120 characters of letters, digits and ._:@/+-",
            errors=[field_error("worker_id", "invalid")],
        )
    return value


def owner(who: Principal, body: dict[str, Any]) -> str:
    """The lease owner: the key plus the caller's ``worker_id`` (docs/workers.md, "Leases")."""
    return f"{who.key_id}:{_worker_id(body)}"


def _lease_token(body: dict[str, Any]) -> str | None:
    """The claim's lease token the call presents (absent: None, which holds no tokened lease)."""
    value = body.get("lease_token")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LEASE_TOKEN:
        raise ValidationFailed(
            "lease_token must be the string the claim answered",
            errors=[field_error("lease_token", "invalid")],
        )
    return value


def holder(who: Principal, body: dict[str, Any]) -> Holder:
    """Who calls for a run: owner and token from the body, acting in the key's team."""
    return Holder(owner(who, body), _lease_token(body), who.team_id)


def hosts(body: dict[str, Any]) -> list[str]:
    raw = body.get("worker_hosts", [body.get("worker_host")])
    if not isinstance(raw, list) or not raw or not all(h is None or isinstance(h, str) for h in raw):
        raise ValidationFailed(
            "worker_host must be a string (or worker_hosts a list of strings)",
            errors=[field_error("worker_host", "must be a string")],
        )
    found = sorted({worker_host_of(h) for h in raw})
    if any(len(h) > 200 for h in found):
        raise ValidationFailed(
            "worker_host is too long", errors=[field_error("worker_host", "at most 200 chars")]
        )
    return found


def harnesses(body: dict[str, Any]) -> list[str] | None:
    """The harness types the worker offers (``harnesses``); None when it says nothing (it claims any run,
    as workers did before presets; docs/workers.md, "Harnesses")."""
    raw = body.get("harnesses")
    if raw is None:
        return None
    if (
        not isinstance(raw, list)
        or len(raw) > 20
        or not all(isinstance(h, str) and 0 < len(h) <= 40 for h in raw)
    ):
        raise ValidationFailed(
            "harnesses must be a list of at most 20 harness type names",
            errors=[field_error("harnesses", "invalid")],
        )
    return sorted(set(raw))


def wait_seconds(body: dict[str, Any], maximum: float) -> float:
    value = body.get("wait_seconds", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValidationFailed(
            "wait_seconds must be a non-negative number", errors=[field_error("wait_seconds", "invalid")]
        )
    return min(float(value), maximum)


SANDBOX_KINDS = ("bwrap", "none")
SANDBOX_NETWORKS = ("none", "allowlist", "open")


def sandbox(value: Any) -> dict[str, str] | None:
    """The heartbeat's ``sandbox``: where the worker runs the run (docs/workers.md, "Sandbox"), as
    ``{kind: bwrap|none, network: none|allowlist|open}``; None when the heartbeat does not say."""
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {"kind", "network"}
        or value["kind"] not in SANDBOX_KINDS
        or value["network"] not in SANDBOX_NETWORKS
    ):
        raise ValidationFailed(
            "sandbox must be {kind: bwrap|none, network: none|allowlist|open}",
            errors=[field_error("sandbox", "invalid")],
        )
    return {"kind": str(value["kind"]), "network": str(value["network"])}


def reported_state(body: dict[str, Any]) -> str:
    state = body.get("state")
    if state not in REPORT_EVENTS:
        raise ValidationFailed(
            f"state must be one of {', '.join(REPORT_EVENTS)}", errors=[field_error("state", "invalid")]
        )
    return str(state)


def status_message(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"message": value}
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        raise ValidationFailed(
            "status_message must be {message, error_code?, retryable?}",
            errors=[field_error("status_message", "invalid")],
        )
    out: dict[str, Any] = {"message": value["message"][:MAX_MESSAGE]}
    code = value.get("error_code")
    if code is not None:
        if not isinstance(code, str) or not 0 < len(code) <= 100:
            raise ValidationFailed("status_message.error_code must be a short string")
        out["error_code"] = code
    retryable = value.get("retryable")
    if retryable is not None:
        if not isinstance(retryable, bool):
            raise ValidationFailed("status_message.retryable must be a boolean")
        out["retryable"] = retryable
    return out


def log_lines(body: dict[str, Any]) -> list[tuple[str, str]]:
    raw = body.get("lines")
    if not isinstance(raw, list) or len(raw) > MAX_LOG_LINES:
        raise ValidationFailed(
            f"lines must be a list of at most {MAX_LOG_LINES} {{stream, text}} objects",
            errors=[field_error("lines", "invalid")],
        )
    lines = []
    for i, item in enumerate(raw):
        if (
            not isinstance(item, dict)
            or item.get("stream") not in LOG_STREAMS
            or not isinstance(item.get("text"), str)
        ):
            raise ValidationFailed(
                f"lines[{i}] must be {{stream: stdout|stderr|system, text: string}}",
                errors=[field_error(f"lines[{i}]", "invalid")],
            )
        lines.append((str(item["stream"]), str(item["text"])[:MAX_LOG_TEXT].replace("\x00", "")))
    return lines
