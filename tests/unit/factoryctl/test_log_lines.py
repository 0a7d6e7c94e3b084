"""The one log format (docs/operations.md, "Metrics and logs"): JSON lines with ts, level, logger and msg
first, structured messages and ``extra`` fields merged, credentials redacted in every part; text on
request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from api.redaction import RedactingFilter, uninstall_log_redaction
from factoryctl import log_lines

TOKEN_PATH = "/webhooks/w/wh_01hzzzzzzzzzzzzzzzzzzzzzzz/s3cr3t-token-value"


@pytest.fixture
def configured() -> Iterator[io.StringIO]:
    """A buffer for ``log_lines.configure`` on the real root logger, which is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for found in [f for f in root.filters if isinstance(f, RedactingFilter)]:
        uninstall_log_redaction(found)


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_plain_and_structured_messages_become_one_object_each(configured) -> None:
    buffer = configured
    log_lines.configure("json", stream=buffer)
    log = logging.getLogger("factoryctl.test")
    log.info("run %s: %s", "run_1", "SUCCEEDED", extra={"run_id": "run_1"})
    log.info(json.dumps({"msg": "reconcile", "outcome": "failed", "errors": ["a.yaml:3:1: bad"]}))
    log.warning("two\nlines")
    first, second, third = lines(buffer)
    assert list(first)[:4] == ["ts", "level", "logger", "msg"]
    assert first["msg"] == "run run_1: SUCCEEDED" and first["run_id"] == "run_1" and first["level"] == "info"
    assert str(first["ts"]).endswith("Z") and first["logger"] == "factoryctl.test"
    assert second["msg"] == "reconcile" and second["errors"] == ["a.yaml:3:1: bad"]
    assert third["msg"] == "two\nlines" and third["level"] == "warning"  # still one line
    assert len(buffer.getvalue().splitlines()) == 3


def test_credentials_are_redacted_in_message_fields_and_tracebacks(configured) -> None:
    buffer = configured
    log_lines.configure("json", stream=buffer)
    log = logging.getLogger("factoryctl.test")
    log.info("posted to %s", TOKEN_PATH, extra={"url": TOKEN_PATH, "authorization": "Bearer abc.def"})
    try:
        raise RuntimeError(f"failed on POST {TOKEN_PATH}")
    except RuntimeError:
        log.exception("it broke")
    text = buffer.getvalue()
    assert "s3cr3t-token-value" not in text and "abc.def" not in text
    info, error = lines(buffer)
    assert str(info["url"]).endswith("/{token}") and info["authorization"] == "[redacted]"
    assert "RuntimeError" in str(error["exc"]) and str(error["msg"]) == "it broke"


def test_a_field_never_overrides_the_fixed_keys(configured) -> None:
    buffer = configured
    log_lines.configure("json", process=2, stream=buffer)
    logging.getLogger("factoryctl.test").info(json.dumps({"msg": "x", "level": "forged", "process": 9}))
    (line,) = lines(buffer)
    assert (line["level"], line["process"], line["msg"]) == ("info", 2, "x")
    assert list(line)[:5] == ["ts", "level", "logger", "msg", "process"]  # the same first four as without


def test_text_format(configured) -> None:
    buffer = configured
    log_lines.configure("text", process=1, stream=buffer)
    logging.getLogger("factoryctl.test").info("posted to %s", TOKEN_PATH)
    (line,) = buffer.getvalue().splitlines()
    assert line.startswith("[process 1] ") and " INFO factoryctl.test: posted to /webhooks/w/" in line
    assert "s3cr3t-token-value" not in line


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one of json, text"):
        log_lines.configure("xml")
