"""The worker protocol (``/api/v1/workers``): claim runs, heartbeat, report states, append logs,
read the team secrets a claimed run references (lease holder only; never log the answer).

Retry policy of worker calls (docs/workers.md has the table). Every worker call is safe to repeat,
so each spec is ``idempotent``: the server's lease and state machine, not the client, keep a repeat
from acting twice. What differs per call is how often repeating is worth it (``retries``):

- ``claim``: the client's ``max_retries`` (the worker agent's client has no limit: a worker waits
  for its server as long as it takes). A claim whose answer was lost leaves one run CLAIMED by this
  worker, which never hears of it: no heartbeat comes, its lease lapses and the lease reaper puts it
  back in QUEUED in its old place (CANCELLED if a cancel was pending). Cost: the run starts up to
  ``lease_seconds`` + the reaper interval (about 35 s) later, its ``attempt`` counts the lost claim,
  and follow-ups handed over with that claim miss the next prompt. A repeat cannot add to that: it
  takes another queued run, never the same one twice.
- ``heartbeat``: not repeated (:data:`HEARTBEAT_RETRIES`): the next beat, a third of the lease
  later, is the retry, and the lease outlasts missed beats. Follow-ups in a lost answer are marked
  delivered and not handed over again (they stay stored on the run; the worker only logs them).
- ``heartbeat(state="INPROGRESS")`` (start): :data:`START_RETRIES`, a few seconds, well inside the
  lease. A repeated start finds the run INPROGRESS and only extends the lease; if the first one
  ended a cancelled run, the repeat gets 409 and the run is not executed.
- ``report_state``: :data:`REPORT_RETRIES`, about 50-100 s, so an outcome outlives a server
  restart. The state machine applies a report once: a terminal or BLOCKED report releases the
  lease, so repeating one that landed gets 409. A 409 that names the reported state
  (:func:`conflict_run_state`) counts as "already recorded": the run is in that state, so nothing
  is left to report. The report lands while this worker still holds the lease; once a reaper ended
  the run (ERROR ``resource_unavailable``, retryable) it is refused.
- ``append_logs``: :data:`LOG_RETRIES`; a caller cuts lines with :func:`log_batches` (encoded bytes, not
  lines). ``413`` is final here too: the worker agent splits the batch and retries the halves. A batch
  is stored in one transaction, so repeating one whose
  answer was lost after the commit stores it twice: logs are at least once. Rare duplicated lines
  beat lines missing from a failed run's output.
- ``send_events``: like ``append_logs`` (:data:`LOG_RETRIES`, at least once); a caller cuts events with
  :func:`event_batches`, which also bounds each (:func:`bounded_event`).
- ``secrets``: :data:`SECRETS_RETRIES`: read-only, computed from the stored run.
- ``save_session_state`` / ``load_session_state``: :data:`SECRETS_RETRIES`: a save replaces the run's one
  stored state, so repeating it stores the same bytes again; a load is read-only. 404 on a load means no
  attempt saved any (:func:`load_run_session_state` answers None).

What is retried is the client's policy (:mod:`factoryctl.client._transport`): connection errors,
lost answers, ``408``/``429``/``503`` and other 5xx. ``401``/``403`` (a wrong or revoked key) and
``404``/``409`` (the lease is gone) are final: retrying cannot change them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    parse_model,
)
from factoryctl.client._transport import RequestSpec, json_content, path
from factoryctl.client.errors import ConflictError
from factoryctl.client.models import Claim, Heartbeat, LogLine, StateReport

Line = TypeVar("Line", LogLine, tuple[str, str])
RETRY_FOREVER = sys.maxsize  # the worker agent's max_retries: claims wait for the server without limit
START_RETRIES = 4  # about 4-8 s with the default backoff: well inside a 30 s lease
HEARTBEAT_RETRIES = 0  # the next beat is the retry
REPORT_RETRIES = 16  # about 50-100 s with the default backoff: outlives a server restart
LOG_RETRIES = 2
SECRETS_RETRIES = 4
# Log batches (docs/workers.md, "Log limits"): the server refuses a log request body over 4 MiB (413) and
# at most 1000 lines; a worker sends at most 500 lines and 1 MiB of encoded JSON per request.
LOG_BATCH_LINES = 500
LOG_BATCH_BYTES = 1024 * 1024
LOG_BODY_OVERHEAD = 512  # the body around the lines: worker_id, lease_token, brackets
# Transcript events (docs/events.md, "Transcript events"): the server's per-event bounds and batch size.
MESSAGE_BYTES = 32 * 1024
TOOL_INPUT_BYTES = 16 * 1024
TOOL_OUTPUT_BYTES = 4 * 1024
EVENT_BATCH_SIZE = 500
RUN_STATES = (
    "QUEUED",
    "PENDING",
    "CLAIMED",
    "INPROGRESS",
    "BLOCKED",
    "SUCCEEDED",
    "FAILED",
    "ERROR",
    "CANCELLED",
)
# The server's lease conflicts read "run R is STATE and its lease is not held by this worker" or
# "cannot report X for a run in state STATE".

# --- workers ---------------------------------------------------------------------------------------


def _claim(response: httpx.Response) -> Claim | None:
    return None if response.status_code == 204 else Claim.from_json(response.json())


def claim_run(
    worker_host: str | Sequence[str] = "",
    *,
    wait_seconds: float = 0.0,
    worker_id: str | None = None,
    harnesses: Sequence[str] | None = None,
) -> RequestSpec[Claim | None]:
    """Long-poll for a run of these host IDs; None when none came within ``wait_seconds``. ``harnesses``
    are the harness types this worker offers: a run needing an agent CLI preset (claude, codex, gemini)
    is claimed only by a worker offering it; None claims any run (docs/workers.md, "Harnesses")."""
    hosts = [worker_host] if isinstance(worker_host, str) else list(worker_host)
    offered = sorted(set(harnesses)) if harnesses is not None else None
    return RequestSpec(
        "POST",
        f"{V1}/workers/claim",
        _claim,
        json=json_body(worker_hosts=hosts, wait_seconds=wait_seconds, worker_id=worker_id, harnesses=offered),
        idempotent=True,  # a lost answer strands one run until its lease lapses; a repeat adds nothing
        timeout=wait_seconds + 15.0,
    )


def heartbeat_run(
    run_id: str,
    *,
    state: str | None = None,
    worker_id: str | None = None,
    lease_token: str | None = None,
    sandbox: Mapping[str, str] | None = None,
) -> RequestSpec[Heartbeat]:
    """Extend the lease; ``state="INPROGRESS"`` also starts a CLAIMED run (retried a few times) and
    ``sandbox`` (``{kind, network}``) says where it runs (docs/workers.md, "What the run shows")."""
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/heartbeat", run_id),
        parse_model(Heartbeat),
        json=json_body(
            state=state,
            worker_id=worker_id,
            lease_token=lease_token,
            sandbox=dict(sandbox) if sandbox is not None else None,
        ),
        idempotent=True,
        retries=START_RETRIES if state is not None else HEARTBEAT_RETRIES,
    )


def report_run_state(
    run_id: str,
    state: str,
    *,
    status_message: str | Mapping[str, Any] | None = None,
    worker_id: str | None = None,
    lease_token: str | None = None,
) -> RequestSpec[StateReport]:
    message = {"message": status_message} if isinstance(status_message, str) else status_message
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/state", run_id),
        parse_model(StateReport),
        json=json_body(
            state=state,
            status_message=dict(message) if message else None,
            worker_id=worker_id,
            lease_token=lease_token,
        ),
        idempotent=True,  # the state machine applies it once; a repeat of a landed report gets 409
        retries=REPORT_RETRIES,
    )


def _appended(response: httpx.Response) -> int:
    value = response.json().get("appended")
    if not isinstance(value, int):
        raise TypeError("expected 'appended' to be an integer")
    return value


def log_item(line: LogLine | tuple[str, str]) -> dict[str, str]:
    return (
        {"stream": line.stream, "text": line.text}
        if isinstance(line, LogLine)
        else {"stream": line[0], "text": line[1]}
    )


def encoded_size(value: Any) -> int:
    """Bytes ``value`` takes in a request body as this client encodes it."""
    return len(json_content(value))


def log_batches(
    lines: Sequence[Line], *, max_bytes: int = LOG_BATCH_BYTES, max_lines: int = LOG_BATCH_LINES
) -> list[list[Line]]:
    """``lines`` cut into batches of at most ``max_lines`` whose request bodies stay under ``max_bytes``,
    counted as encoded (a non-ASCII character may take 6 or 12 bytes as ``\\uXXXX``), so a batch never
    meets the server's per-request limit (docs/workers.md, "Log limits"). A line alone over the budget
    gets a batch of its own; the server's 413 then tells the caller to drop it."""
    batches: list[list[Line]] = []
    current: list[Line] = []
    size = LOG_BODY_OVERHEAD
    for line in lines:
        length = encoded_size(log_item(line)) + 1  # the item and its comma
        if current and (size + length > max_bytes or len(current) >= max_lines):
            batches.append(current)
            current, size = [], LOG_BODY_OVERHEAD
        current.append(line)
        size += length
    if current:
        batches.append(current)
    return batches


def append_run_logs(
    run_id: str,
    lines: Sequence[LogLine | tuple[str, str]],
    *,
    worker_id: str | None = None,
    lease_token: str | None = None,
) -> RequestSpec[int]:
    """Append ``(stream, text)`` lines to a run's log (one request: see :func:`log_batches`); answers
    how many were stored."""
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/logs", run_id),
        _appended,
        json=json_body(lines=[log_item(x) for x in lines], worker_id=worker_id, lease_token=lease_token),
        idempotent=True,  # at least once: a lost answer after the commit means a duplicated batch
        retries=LOG_RETRIES,
    )


def _accepted(response: httpx.Response) -> int:
    value = response.json().get("accepted")
    if not isinstance(value, int):
        raise TypeError("expected 'accepted' to be an integer")
    return value


def bounded_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """A transcript event ``{kind, data}`` cut to the server's bounds (docs/events.md, "Transcript events"):
    a message's text to :data:`MESSAGE_BYTES`, a tool result's output to :data:`TOOL_OUTPUT_BYTES`, a tool
    call's input over :data:`TOOL_INPUT_BYTES` (as JSON) replaced by ``{"truncated": <its JSON, cut>}``.
    The server refuses (422) what is over; a worker cuts first so no event of a batch is lost."""
    kind, data = str(event.get("kind")), dict(event.get("data") or {})
    if kind == "message" and isinstance(data.get("text"), str):
        data["text"] = _cut(data["text"], MESSAGE_BYTES)
    elif kind == "tool_result" and isinstance(data.get("output"), str):
        cut = _cut(data["output"], TOOL_OUTPUT_BYTES)
        data["truncated"] = bool(data.get("truncated")) or cut != data["output"]
        data["output"] = cut
    elif kind == "tool_call":
        text = json.dumps(data.get("input"), ensure_ascii=False, default=str)
        budget = TOOL_INPUT_BYTES
        while _json_bytes(data.get("input")) > TOOL_INPUT_BYTES:  # escaping may grow the excerpt: halve
            budget //= 2
            data["input"] = {"truncated": _cut(text, budget)}
    return {"kind": kind, "data": data}


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def _cut(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", "ignore")


def event_batches(
    events: Sequence[Mapping[str, Any]],
    *,
    max_bytes: int = LOG_BATCH_BYTES,
    max_events: int = EVENT_BATCH_SIZE,
) -> list[list[dict[str, Any]]]:
    """``events`` bounded (:func:`bounded_event`) and cut into batches the server takes: at most
    ``max_events`` each, request bodies under ``max_bytes`` as encoded."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = LOG_BODY_OVERHEAD
    for event in events:
        item = bounded_event(event)
        length = encoded_size(item) + 1
        if current and (size + length > max_bytes or len(current) >= max_events):
            batches.append(current)
            current, size = [], LOG_BODY_OVERHEAD
        current.append(item)
        size += length
    if current:
        batches.append(current)
    return batches


def send_run_events(
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    *,
    worker_id: str | None = None,
    lease_token: str | None = None,
) -> RequestSpec[int]:
    """Append the agent's transcript events ``{kind, data}`` to the run's event stream (one request: cut
    with :func:`event_batches`); answers how many were stored (fewer past the run's event cap)."""
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/events", run_id),
        _accepted,
        json=json_body(events=[dict(e) for e in events], worker_id=worker_id, lease_token=lease_token),
        idempotent=True,  # at least once, like log lines
        retries=LOG_RETRIES,
    )


def _secrets(response: httpx.Response) -> dict[str, str]:
    value = response.json().get("secrets")
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("expected 'secrets' to be an object of strings")
    return {str(k): v for k, v in value.items()}


def run_secrets(
    run_id: str, *, worker_id: str | None = None, lease_token: str | None = None
) -> RequestSpec[dict[str, str]]:
    """The values of the team secrets the claimed run references, ``{NAME: value}``."""
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/secrets", run_id),
        _secrets,
        json=json_body(worker_id=worker_id, lease_token=lease_token),
        idempotent=True,  # read-only
        retries=SECRETS_RETRIES,
    )


LEASE_TOKEN_HEADER = "X-Factory-Lease-Token"  # noqa: S105 - a header name
WORKER_ID_HEADER = "X-Factory-Worker-Id"


def _holder_headers(worker_id: str | None, lease_token: str | None) -> dict[str, str]:
    headers = {LEASE_TOKEN_HEADER: lease_token} if lease_token is not None else {}
    if worker_id is not None:
        headers[WORKER_ID_HEADER] = worker_id
    return headers


def _size(response: httpx.Response) -> int:
    value = response.json().get("size")
    if not isinstance(value, int):
        raise TypeError("expected 'size' to be an integer")
    return value


def save_run_session_state(
    run_id: str, archive: bytes, *, worker_id: str | None = None, lease_token: str | None = None
) -> RequestSpec[int]:
    """Keep the agent CLI's session files of this attempt (a ``tar.gz``) on the server, encrypted, for the
    attempt that resumes the conversation (docs/agents.md, "Sessions and follow-ups"); answers the size."""
    return RequestSpec(
        "PUT",
        path(f"{V1}/workers/runs/{{}}/session-state", run_id),
        _size,
        content=archive,
        headers={"Content-Type": "application/gzip", **_holder_headers(worker_id, lease_token)},
        idempotent=True,  # replaces the one stored state
        retries=SECRETS_RETRIES,
    )


def _archive(response: httpx.Response) -> bytes:
    return response.content


def load_run_session_state(
    run_id: str, *, worker_id: str | None = None, lease_token: str | None = None
) -> RequestSpec[bytes]:
    """The session files an earlier attempt saved; :class:`~factoryctl.client.errors.NotFoundError` when
    none was (or the run is gone: the caller's lease tells which)."""
    return RequestSpec(
        "GET",
        path(f"{V1}/workers/runs/{{}}/session-state", run_id),
        _archive,
        headers={"Accept": "application/gzip", **_holder_headers(worker_id, lease_token)},
        idempotent=True,
        retries=SECRETS_RETRIES,
    )


def conflict_run_state(exc: ConflictError) -> str | None:
    """The run's state named by a worker call's 409, if it names one.

    A worker whose report was refused with 409 learns whether the run already is in the reported
    state (a repeat of a report that landed) from the problem's ``state`` extension member.
    """
    state = exc.problem.raw.get("state")
    return state if isinstance(state, str) and state in RUN_STATES else None


def upload_run_artifacts(
    run_id: str,
    *,
    links: Sequence[Mapping[str, Any]] = (),
    files: Sequence[tuple[str, str, bytes]] = (),
    worker_id: str | None = None,
    lease_token: str | None = None,
) -> RequestSpec[int]:
    """Add the run's artifacts (docs/agents.md, "Artifacts"): declared ``links`` and ``files`` as
    ``(filepath, mime_type, data)``, one multipart request; answers how many were added. A file sent
    again under the same path replaces the earlier one, so a repeat is harmless."""
    meta = {
        "worker_id": worker_id,
        "lease_token": lease_token,
        "links": [dict(x) for x in links],
        "files": [{"filepath": p, "mime_type": m} for p, m, _ in files],
    }
    parts: list[tuple[str, tuple[str, bytes, str]]] = [
        ("meta", ("meta.json", json_content(meta), "application/json"))
    ]
    parts += [("file", ("file", data, m)) for _, m, data in files]  # the path travels in meta
    return RequestSpec(
        "POST",
        path(f"{V1}/workers/runs/{{}}/artifacts", run_id),
        _accepted,
        files=parts,
        idempotent=True,
        retries=LOG_RETRIES,
    )


class Workers(Resource[Mode]):
    claim = endpoint(claim_run)
    heartbeat = endpoint(heartbeat_run)
    report_state = endpoint(report_run_state)
    append_logs = endpoint(append_run_logs)
    send_events = endpoint(send_run_events)
    secrets = endpoint(run_secrets)
    upload_artifacts = endpoint(upload_run_artifacts)
    save_session_state = endpoint(save_run_session_state)
    load_session_state = endpoint(load_run_session_state)
