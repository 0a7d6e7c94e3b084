"""A scripted OpenAI Responses API, enough for the Codex CLI (``codex exec``) to run fully offline.

What Codex 0.169.0 sends to its model provider's ``base_url`` (measured, docs/agents.md "Codex"): only
``POST /v1/responses`` with ``"stream": true``, one per model turn, each carrying the whole conversation in
``input`` (developer and user messages, earlier assistant messages, ``function_call`` and
``function_call_output`` items), so a resumed thread's first request shows the earlier turns. Each turn is
answered from the :class:`~agents.scripted.Script` as server-sent events: ``response.created``, per output
item ``response.output_item.added`` / ``response.output_item.done`` (a ``message`` with ``output_text``
for :class:`~agents.scripted.Text`, a ``function_call`` for :class:`~agents.scripted.ToolCall` — Codex's
shell tool is ``exec_command`` with ``{"cmd": ...}``), then ``response.completed`` with the usage. A reply
holding a :class:`StreamFailure` ends with ``response.failed`` instead (Codex retries such a stream 5
times, then reports ``turn.failed``); a :class:`~agents.scripted.Failure` is answered with its HTTP status
and an OpenAI error body.

Every reply reports :data:`INPUT_TOKENS` input and :data:`OUTPUT_TOKENS` output tokens, so a test can
assert the usage the CLI adds up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agents.scripted import (
    RECORDER_KEY,
    SCRIPT_KEY,
    Failure,
    Recorder,
    Reply,
    Request,
    Script,
    Text,
    ToolCall,
    recording_app,
)

INPUT_TOKENS = 100
OUTPUT_TOKENS = 20
RESPONSES_PATH = "/v1/responses"


@dataclass(frozen=True)
class StreamFailure(Text):
    """The model's stream fails with ``text`` as the error message (``response.failed``)."""


def shell(cmd: str, call_id: str = "") -> ToolCall:
    """A call of Codex's shell tool: the CLI runs ``cmd`` and sends its output back in the next request."""
    return ToolCall("exec_command", {"cmd": cmd}, call_id)


def openai_app(script: Script, recorder: Recorder | None = None) -> web.Application:
    """The app; its recorder is ``app[RECORDER_KEY]`` (``ScriptedServer`` finds it there). The CLI's
    ``base_url`` (``OPENAI_BASE_URL``) is the server's URL followed by ``/v1``."""
    recorder = recorder if recorder is not None else Recorder()
    replies = 0

    async def responses(request: web.Request, entry: Request) -> web.StreamResponse:
        nonlocal replies
        body = entry.body if isinstance(entry.body, dict) else {}
        turn = script.take()
        replies += 1
        if turn.failure is not None:
            error = {"message": turn.failure.message, "type": "invalid_request_error", "code": None}
            return web.json_response({"error": error}, status=turn.failure.status)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event in stream_events(f"resp_scripted_{replies:04d}", str(body.get("model") or ""), turn):
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response

    app = recording_app(recorder, [("POST", RESPONSES_PATH, responses)])
    app[RECORDER_KEY] = recorder
    app[SCRIPT_KEY] = script
    return app


def output_items(response_id: str, turn: Reply) -> list[dict[str, Any]]:
    """The reply's output items in the Responses format (a failure has none)."""
    items: list[dict[str, Any]] = []
    for index, part in enumerate(turn.parts):
        if isinstance(part, StreamFailure | Failure):
            continue
        if isinstance(part, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{response_id}_{index}",
                    "status": "completed",
                    "call_id": part.call_id,
                    "name": part.name,
                    "arguments": json.dumps(part.arguments),
                }
            )
        else:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{response_id}_{index}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                }
            )
    return items


def stream_events(response_id: str, model: str, turn: Reply) -> list[dict[str, Any]]:
    """The server-sent events answering one request with ``turn``."""
    envelope = {
        "id": response_id,
        "object": "response",
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    events: list[dict[str, Any]] = [{"type": "response.created", "response": envelope}]
    failure = next((p for p in turn.parts if isinstance(p, StreamFailure)), None)
    if failure is not None:
        error = {"code": "server_error", "message": failure.text}
        return [
            *events,
            {"type": "response.failed", "response": {**envelope, "status": "failed", "error": error}},
        ]
    items = output_items(response_id, turn)
    for index, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    }
    completed = {**envelope, "status": "completed", "output": items, "usage": usage}
    return [*events, {"type": "response.completed", "response": completed}]


def model_requests(recorder: Recorder) -> list[dict[str, Any]]:
    """The bodies of every ``POST /v1/responses`` the CLI sent, in order."""
    return [
        r.body if isinstance(r.body, dict) else {}
        for r in recorder.matching(lambda r: r.method == "POST" and r.path.split("?")[0] == RESPONSES_PATH)
    ]


def input_texts(body: dict[str, Any]) -> list[str]:
    """The text of every message in a request's ``input`` (developer, user and assistant), in order."""
    texts: list[str] = []
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("type") == "message":
            texts.extend(
                str(part.get("text", "")) for part in item.get("content", []) if isinstance(part, dict)
            )
    return texts


def input_types(body: dict[str, Any]) -> list[str]:
    """The ``type`` of every item in a request's ``input`` (``message``, ``function_call``, ...)."""
    return [str(item.get("type")) for item in body.get("input", []) if isinstance(item, dict)]
