"""A scripted Anthropic Messages API, enough for Claude Code (``claude -p``) to run fully offline.

What Claude Code 2.1.332 sends to ``ANTHROPIC_BASE_URL`` (measured, docs/agents.md "Claude Code"):
``HEAD /api/hello`` (a reachability probe, answered 200) then ``POST /v1/messages?beta=true`` with
``"stream": true`` for every model turn. Each turn is answered from the :class:`~agents.scripted.Script` as
Anthropic's server-sent events: ``message_start``, per content block ``content_block_start`` /
``content_block_delta`` (``text_delta`` or ``input_json_delta``) / ``content_block_stop``, then
``message_delta`` (``stop_reason``: ``tool_use`` when the reply calls a tool, else ``end_turn``; the output
token count) and ``message_stop``. A request without ``"stream": true`` gets the same reply as one JSON
message; ``POST /v1/messages/count_tokens`` is served too. Anything else is a 404 listed in
``recorder.unknown``.

Every reply reports :data:`INPUT_TOKENS` input and :data:`OUTPUT_TOKENS` output tokens, so a test can
assert the usage the CLI adds up.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from agents.scripted import (
    RECORDER_KEY,
    SCRIPT_KEY,
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
MESSAGES_PATH = "/v1/messages"


def anthropic_app(script: Script, recorder: Recorder | None = None) -> web.Application:
    """The app; its recorder is ``app[RECORDER_KEY]`` (``ScriptedServer`` finds it there)."""
    recorder = recorder if recorder is not None else Recorder()
    replies = 0

    async def hello(request: web.Request, entry: Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def messages(request: web.Request, entry: Request) -> web.StreamResponse:
        nonlocal replies
        body = entry.body if isinstance(entry.body, dict) else {}
        model = str(body.get("model") or "claude-scripted")
        turn = script.take()
        replies += 1
        message_id = f"msg_scripted_{replies:04d}"
        if turn.failure is not None:
            kind = "invalid_request_error" if turn.failure.status < 500 else "api_error"
            error = {"type": "error", "error": {"type": kind, "message": turn.failure.message}}
            return web.json_response(error, status=turn.failure.status)
        if not body.get("stream"):
            return web.json_response(_message(message_id, model, turn))
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "request-id": message_id,
            }
        )
        await response.prepare(request)
        for event in stream_events(message_id, model, turn):
            data = json.dumps(event, separators=(",", ":"))
            await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
        await response.write_eof()
        return response

    async def count_tokens(request: web.Request, entry: Request) -> web.StreamResponse:
        return web.json_response({"input_tokens": INPUT_TOKENS})

    app = recording_app(
        recorder,
        [
            ("HEAD", "/", hello),
            ("GET", "/", hello),
            ("HEAD", "/api/hello", hello),
            ("GET", "/api/hello", hello),
            ("POST", MESSAGES_PATH, messages),
            ("POST", f"{MESSAGES_PATH}/count_tokens", count_tokens),
        ],
    )
    app[RECORDER_KEY] = recorder
    app[SCRIPT_KEY] = script
    return app


def _stop_reason(turn: Reply) -> str:
    return "tool_use" if turn.tool_calls else "end_turn"


def _blocks(turn: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in turn.parts:
        if isinstance(part, Text):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall):
            blocks.append(
                {"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.arguments}
            )
    return blocks


def _message(message_id: str, model: str, turn: Reply) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(turn),
        "stop_reason": _stop_reason(turn),
        "stop_sequence": None,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
    }


def stream_events(message_id: str, model: str, turn: Reply) -> list[dict[str, Any]]:
    """The server-sent events of one streamed reply, in order (text in two deltas, tool input as JSON
    split in two ``input_json_delta`` chunks, as the real API streams them)."""
    start = _message(message_id, model, Reply(()))
    start["stop_reason"] = None
    start["usage"] = {"input_tokens": INPUT_TOKENS, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(_blocks(turn)):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            text = block["text"]
            half = len(text) // 2
            deltas = [{"type": "text_delta", "text": chunk} for chunk in (text[:half], text[half:]) if chunk]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": chunk} for chunk in (raw[:half], raw[half:])
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
            "usage": {"output_tokens": OUTPUT_TOKENS},
        }
    )
    events.append({"type": "message_stop"})
    return events


def model_requests(recorder: Recorder) -> list[dict[str, Any]]:
    """The bodies of the ``POST /v1/messages`` requests, in order (what the model was shown each turn)."""
    return [
        r.body
        for r in recorder.matching(
            lambda r: (
                r.method == "POST" and r.path.split("?")[0] == MESSAGES_PATH and isinstance(r.body, dict)
            )
        )
    ]


def transcript_text(body: dict[str, Any]) -> str:
    """All text the model was shown in one request's ``messages`` (text blocks, tool inputs and tool
    results), joined: what a test searches for an earlier turn."""
    out: list[str] = []

    def walk(content: Any) -> None:
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    out.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    out.append(json.dumps(block.get("input")))
                elif block.get("type") == "tool_result":
                    walk(block.get("content"))

    for message in body.get("messages") or []:
        if isinstance(message, dict):
            walk(message.get("content"))
    return "\n".join(out)
