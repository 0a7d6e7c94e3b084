"""A scripted Gemini API (``generativelanguage`` v1beta), enough for the Gemini CLI to run fully offline.

What Gemini CLI 0.61.0 sends to ``GOOGLE_GEMINI_BASE_URL`` with ``GEMINI_API_KEY`` (measured,
docs/agents.md "Gemini CLI"), the key in the ``x-goog-api-key`` header:

- ``POST /v1beta/models/{model}:generateContent``: the model router's classifier, only when no model is
  chosen (``-m``) — the CLI then routes between its default models from a JSON answer
  ``{complexity_reasoning, complexity_score}`` (:data:`ROUTE_ANSWER`; a low score picks the flash model);
- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: one per model turn, each carrying the
  whole conversation in ``contents`` (``user`` parts, earlier ``model`` parts with ``functionCall``, the
  ``functionResponse`` parts of tool results), so a resumed session's first request shows the earlier
  turns. Answered from the :class:`~agents.scripted.Script` as server-sent events, each a
  ``GenerateContentResponse``: the text parts one per event, then the ``functionCall`` parts, the last
  event with ``finishReason: STOP`` and ``usageMetadata``.

A :class:`~agents.scripted.Failure` reply answers an HTTP error in the API's JSON error shape (the CLI
retries 429 and 5xx with backoff). Every reply reports :data:`INPUT_TOKENS` prompt and
:data:`OUTPUT_TOKENS` candidate tokens. Any other path is answered 404 and listed in
``recorder.unknown``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from agents.scripted import (
    RECORDER_KEY,
    SCRIPT_KEY,
    Recorder,
    Reply,
    Script,
    Text,
    ToolCall,
)

INPUT_TOKENS = 100
OUTPUT_TOKENS = 20
ROUTE_ANSWER = {"complexity_reasoning": "a scripted answer", "complexity_score": 10}
_MODEL_PATH = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


def write_file(file_path: str, content: str, call_id: str = "") -> ToolCall:
    """A call of the CLI's ``write_file`` tool (``file_path`` absolute or relative to the workspace)."""
    return ToolCall("write_file", {"file_path": file_path, "content": content}, call_id)


def shell(command: str, call_id: str = "") -> ToolCall:
    """A call of the CLI's ``run_shell_command`` tool."""
    return ToolCall("run_shell_command", {"command": command}, call_id)


def gemini_app(script: Script, recorder: Recorder | None = None) -> web.Application:
    """The app; its recorder is ``app[RECORDER_KEY]`` (``ScriptedServer`` finds it there). The CLI's
    ``GOOGLE_GEMINI_BASE_URL`` is the server's URL itself."""
    recorder = recorder if recorder is not None else Recorder()

    async def dispatch(request: web.Request) -> web.StreamResponse:
        entry = await recorder.record(request)
        found = _MODEL_PATH.match(request.path)
        if request.method == "POST" and found and found["method"] == "streamGenerateContent":
            return await _stream(request, found["model"], script.take())
        if request.method == "POST" and found and found["method"] == "generateContent":
            return web.json_response(_response(found["model"], [{"text": json.dumps(ROUTE_ANSWER)}], True))
        if request.method == "POST" and found and found["method"] == "countTokens":
            return web.json_response({"totalTokens": INPUT_TOKENS})
        recorder.add_unknown(entry)
        return _error(404, f"not scripted: {request.method} {request.path}")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    app[RECORDER_KEY] = recorder
    app[SCRIPT_KEY] = script
    return app


async def _stream(request: web.Request, model: str, turn: Reply) -> web.StreamResponse:
    if turn.failure is not None:
        return _error(turn.failure.status, turn.failure.message)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for chunk in stream_chunks(model, turn):
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
    await response.write_eof()
    return response


def stream_chunks(model: str, turn: Reply) -> list[dict[str, Any]]:
    """The ``GenerateContentResponse`` events answering one request with ``turn``: one per text part, the
    function calls together in the last one (with the finish reason and the usage)."""
    texts = [{"text": p.text} for p in turn.parts if isinstance(p, Text)]
    calls = [
        {"functionCall": {"id": p.call_id, "name": p.name, "args": p.arguments}}
        for p in turn.parts
        if isinstance(p, ToolCall)
    ]
    parts = [[t] for t in texts[:-1]] + [texts[-1:] + calls]
    return [_response(model, chunk, last == len(parts) - 1) for last, chunk in enumerate(parts)]


def _response(model: str, parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
    if last:
        candidate["finishReason"] = "STOP"
        body["usageMetadata"] = {
            "promptTokenCount": INPUT_TOKENS,
            "candidatesTokenCount": OUTPUT_TOKENS,
            "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS,
        }
    return body


def _error(status: int, message: str) -> web.Response:
    reason = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}.get(status, "INTERNAL")
    return web.json_response({"error": {"code": status, "message": message, "status": reason}}, status=status)


def model_requests(recorder: Recorder) -> list[dict[str, Any]]:
    """The bodies of every ``:streamGenerateContent`` request the CLI sent (its model turns), in order."""
    return [
        r.body if isinstance(r.body, dict) else {}
        for r in recorder.matching(
            lambda r: r.method == "POST" and r.path.split("?")[0].endswith(":streamGenerateContent")
        )
    ]


def content_parts(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every part of a request's ``contents`` with its role (``user`` / ``model``), in order."""
    return [
        (str(content.get("role")), part)
        for content in body.get("contents", [])
        if isinstance(content, dict)
        for part in content.get("parts", [])
        if isinstance(part, dict)
    ]


def texts(body: dict[str, Any]) -> list[str]:
    """The text of every part of a request's ``contents``, in order."""
    return [str(part["text"]) for _, part in content_parts(body) if "text" in part]


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse`` parts of a request (the tool results the model is shown)."""
    return [part["functionResponse"] for _, part in content_parts(body) if "functionResponse" in part]


def tool_names(body: dict[str, Any]) -> list[str]:
    """The function declarations a request offers the model."""
    return [
        str(decl.get("name"))
        for tool in body.get("tools", [])
        if isinstance(tool, dict)
        for decl in tool.get("functionDeclarations", [])
        if isinstance(decl, dict)
    ]
