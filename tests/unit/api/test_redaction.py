"""Log redaction (:mod:`api.redaction`): the rules on text, the filter on records, and the real app
behind aiohttp's own parser and access logger, captured with ``caplog``."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.http_exceptions import BadHttpMessage, InvalidHeader, InvalidURLError, LineTooLong
from real_api import start_api
from sqlalchemy.ext.asyncio import AsyncEngine

from api.redaction import (
    REDACTED,
    RedactingFilter,
    install_log_redaction,
    parser_error_summary,
    redact_json_line,
    redact_path,
    redact_text,
    uninstall_log_redaction,
)
from store.crypto import SecretBox

SECRET = "s3cr3t-VALUE-9f8e7d"
UID = "wh_01m8b8a1c59jhcjbrsnpyxv83p"  # the shape of store.ids.new_id("wh")


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (f"/webhooks/w/{UID}", f"/webhooks/w/{UID}"),
        (f"/webhooks/w/{UID}/{SECRET}", f"/webhooks/w/{UID}/{{token}}"),
        (f"/webhooks/w/{UID}/{SECRET}/more", f"/webhooks/w/{UID}/{{token}}"),
        (f"/webhooks/w/{UID}?token={SECRET}", f"/webhooks/w/{UID}?{{query}}"),
        (f"/webhooks/w/{UID}/{SECRET}?q={SECRET}", f"/webhooks/w/{UID}/{{token}}?{{query}}"),
        (f"/webhooks/w/{UID}/", f"/webhooks/w/{UID}/"),
        # near misses (404s that still carry a token): any case, repeated slashes, a non-UID in the UID slot
        (f"/webhooks/w//{UID}/{SECRET}", f"/webhooks/w//{UID}/{{token}}"),
        (f"/Webhooks/w/{UID}/{SECRET}", f"/Webhooks/w/{UID}/{{token}}"),
        (f"//WEBHOOKS//W//{UID}//{SECRET}/", f"//WEBHOOKS//W//{UID}/{{token}}"),
        (f"/webhooks/w//{SECRET}", "/webhooks/w//{uid}"),
        (f"/webhooks/w/{UID} /{SECRET}", "/webhooks/w/{uid}/{token}"),
        # dot segments, other separators, invisible and control characters a router would not take
        (f"/webhooks/./w/{UID}/{SECRET}", f"/webhooks/./w/{UID}/{{token}}"),
        (f"/webhooks/x/../w/{UID}/{SECRET}", f"/webhooks/x/../w/{UID}/{{token}}"),
        (f"/webhooks;x/w/{UID}/{SECRET}", f"/webhooks;x/w/{UID}/{{token}}"),
        (f"/webhooks/w;/{UID}/{SECRET}", f"/webhooks/w;/{UID}/{{token}}"),
        (f"/webhooks\\w\\{UID}\\{SECRET}", f"/webhooks\\w\\{UID}/{{token}}"),
        (f"/webhooks\x00/w/{UID}/{SECRET}", f"/webhooks\x00/w/{UID}/{{token}}"),
        (f"/webhooks/w\u200b/{UID}/{SECRET}", f"/webhooks/w\u200b/{UID}/{{token}}"),
        ("/api/v1/agent/runs", "/api/v1/agent/runs"),
        ("/console/factories/fa_1/webhooks/wh_1/enabled", "/console/factories/fa_1/webhooks/wh_1/enabled"),
        # credential shapes in a path are hidden like anywhere else
        (f"/api/v1/agent/runs/x-secret:{SECRET}", f"/api/v1/agent/runs/x-secret:{REDACTED}"),
    ],
)
def test_paths(path: str, shown: str) -> None:
    assert redact_path(path) == shown
    assert redact_path(shown) == shown  # idempotent


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/agent/runs/x-secret:probe",
        '/runs/x", "remote": "6.6.6.6", "status": 200, "x": "',
        '/a"}\n{"msg": "request", "path": "/forged"}',
        f"/x/token={SECRET}/Authorization: Bearer {SECRET}",
    ],
)
def test_a_json_line_keeps_its_fields_whatever_the_path(path: str) -> None:
    line = json.dumps({"msg": "request", "path": path, "status": 404, "remote": "127.0.0.1"})
    record = logging.LogRecord("aiohttp.access", logging.INFO, __file__, 1, line, None, None)
    RedactingFilter().filter(record)
    out = json.loads(record.getMessage())
    assert (out["msg"], out["status"], out["remote"]) == ("request", 404, "127.0.0.1")
    assert set(out) == {"msg", "path", "status", "remote"} and SECRET not in out["path"]


def test_json_lines_are_redacted_field_by_field() -> None:
    line = json.dumps({"msg": "x", "k": {"api_key": SECRET, "n": [f"Bearer {SECRET}", 1]}, "ok": "plain"})
    assert json.loads(redact_json_line(line) or "") == {
        "msg": "x",
        "k": {"api_key": REDACTED, "n": [f"Bearer {REDACTED}", 1]},
        "ok": "plain",
    }
    unchanged = '{"msg":"request","path":"/api/v1/agent/runs"}'
    assert redact_json_line(unchanged) is unchanged  # a clean line keeps its exact text
    assert redact_json_line("[1, 2]") is None and redact_json_line("{not json") is None


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {SECRET}",
        f"b'authorization: basic {SECRET}\\x7f'",
        f"Got more than 8190 bytes when reading: b'Bearer {SECRET}aaaa...'.",
        f"X-Hub-Signature-256: sha256={SECRET}",
        f"{{'Stripe-Signature': 't=1,v1={SECRET}', 'Host': 'x'}}",
        f"webhook-signature: v1,{SECRET}",
        f"Cookie: session={SECRET}",
        f"X-Api-Key: {SECRET}",
        f"calling with api_key={SECRET}&page=2",
        f'{{"path": "/webhooks/w/wh_1/{SECRET}"}}',
        f"unhandled error on POST /webhooks/w/wh_1/{SECRET}",
    ],
)
def test_credentials_are_redacted_wherever_they_appear(text: str) -> None:
    redacted = redact_text(text)
    assert SECRET not in redacted and SECRET[:8] not in redacted
    assert redact_text(redacted) == redacted


def test_ordinary_text_is_left_alone() -> None:
    # Redaction errs on the side of hiding: "bearer <word>" always loses the word, even in prose.
    for text in (
        "webhook wh_1: its secret does not exist; deliveries fail authentication",
        '{"msg": "request", "method": "GET", "path": "/api/v1/secrets/my-token", "status": 200}',
        "delivery retention pruned 3 entries",
    ):
        assert redact_text(text) == text


def test_parser_errors_keep_their_reason_and_lose_the_request_bytes() -> None:
    cases = [
        (
            BadHttpMessage(f"Invalid header value char:\n\n  b'Authorization: Bearer {SECRET}'\n  ^"),
            "Invalid header value char",
        ),
        (
            LineTooLong(f"/webhooks/w/wh_1/{SECRET}?qqq...".encode(), 8190),
            "Got more than 8190 bytes when reading",
        ),
        (LineTooLong(f"sha256={SECRET}...".encode(), 8190), "Got more than 8190 bytes when reading"),
        (InvalidHeader(f"Bearer {SECRET}\x7f".encode()), "Invalid HTTP header"),
        (InvalidURLError(f"/webhooks/w/wh_1/{SECRET}\x01"), "invalid request target"),
        (InvalidURLError(f"*webhooks/w/wh_1/{SECRET}"), "invalid request target"),  # not a '/' target
        (
            BadHttpMessage("Transfer-Encoding can't be present with Content-Length:\n\n  b'x'"),
            "can't be present",
        ),
    ]
    for exc, reason in cases:
        summary = parser_error_summary(exc)
        assert SECRET not in summary and reason in summary and ": 400, " in summary, summary


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, msg, args, exc_info)


def test_filter_rewrites_message_arguments_and_tracebacks() -> None:
    redaction = RedactingFilter()
    record = _record("request to %s with %s", f"/webhooks/w/wh_1/{SECRET}", f"Bearer {SECRET}")
    assert redaction.filter(record)
    assert record.getMessage() == f"request to /webhooks/w/wh_1/{{token}} with Bearer {REDACTED}"
    try:
        raise KeyError(f"token={SECRET}")
    except KeyError as exc:
        record = _record("Unhandled exception", exc=exc)
    redaction.filter(record)
    formatted = logging.Formatter().format(record)
    assert record.exc_info is None and "KeyError" in formatted and "Traceback" in formatted
    assert SECRET not in formatted
    record = _record("Error handling request", exc=LineTooLong(f"Bearer {SECRET}".encode(), 8190))
    redaction.filter(record)
    assert (
        logging.Formatter().format(record).endswith("LineTooLong: 400, Got more than 8190 bytes when reading")
    )
    redaction.filter(record)  # a second pass (logger, then handler) changes nothing
    assert logging.Formatter().format(record).endswith("when reading")


def test_install_is_idempotent_and_reaches_loggers_and_root_handlers() -> None:
    root = logging.getLogger("redaction-test-root")
    handler = logging.StreamHandler(sys.stderr)
    root.addHandler(handler)
    try:
        first = install_log_redaction(root)
        assert install_log_redaction(root) is first
        for target in (handler, logging.getLogger("aiohttp.server"), logging.getLogger("factoryctl.api")):
            assert [f for f in target.filters if isinstance(f, RedactingFilter)] == [first]
    finally:
        uninstall_log_redaction(first, root)
        root.removeHandler(handler)
    assert not any(isinstance(f, RedactingFilter) for f in logging.getLogger("aiohttp.server").filters)


@pytest.fixture
def redaction() -> Iterator[RedactingFilter]:
    installed = install_log_redaction()
    yield installed
    uninstall_log_redaction(installed)


def _send(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        answer = b""
        while b"\r\n" not in answer and (chunk := conn.recv(4096)):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


async def test_real_app_behind_aiohttps_parser_and_default_access_log(
    aiohttp_client: Any,
    engine: AsyncEngine,
    box: SecretBox,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    redaction: RedactingFilter,
) -> None:
    """The test server uses aiohttp's default access log (``%r``: the request line, query included)."""
    api = await start_api(aiohttp_client, engine, box, tmp_path)
    port = api.client.server.port
    assert port is not None
    caplog.set_level(logging.DEBUG)
    host = b"Host: x\r\n"
    requests = [
        b"POST /webhooks/w/wh_1 HTTP/1.1\r\n"
        + host
        + b"Authorization: Bearer "
        + SECRET.encode()
        + b"\x7f\r\n\r\n",
        b"POST /webhooks/w/wh_1/" + SECRET.encode() + b"?" + b"q" * 9000 + b" HTTP/1.1\r\n" + host + b"\r\n",
        b"POST /webhooks/w/wh_1/"
        + SECRET.encode()
        + b"?k="
        + SECRET.encode()
        + b" HTTP/1.1\r\n"
        + host
        + b"Content-Length: 0\r\n\r\n",
    ]
    statuses = [await asyncio.to_thread(_send, port, data) for data in requests]
    assert statuses[:2] == [b"HTTP/1.0 400 Bad Request"] * 2 and statuses[2].startswith(b"HTTP/1.1 404")
    text = caplog.text + "\n".join(logging.Formatter().format(r) for r in caplog.records)
    assert "Error handling request" in text and "POST /webhooks/w/wh_1/{token}?{query}" in text
    assert SECRET not in text and SECRET[:8] not in text
