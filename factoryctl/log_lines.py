"""One log format for every process factoryctl runs (serve and its secondaries, ``factoryctl worker``): a
JSON object per line with ``ts``, ``level``, ``logger`` and ``msg`` first, then the record's structured
fields, or plain text with ``--log-format text`` (docs/operations.md, "Metrics and logs").

A message that already is a JSON object (the access log, reconcile outcomes) is merged into the line, not
quoted inside it; fields passed with ``extra=`` become keys of the line. Redaction
(:class:`api.redaction.RedactingFilter`) runs on the handler before this formatter, and the formatter
redacts the ``extra`` fields and the exception text again, so no credential reaches a line either way.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

from api.redaction import install_log_redaction, json_object, redact_json_line, redact_text

LOG_FORMATS = ("json", "text")
# Attributes every LogRecord has: anything else on a record came from ``extra=`` and is a field of the line.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_QUIET = ("alembic", "watchfiles", "httpx")  # INFO lines at every start or request: noise


def _timestamp(record: logging.LogRecord) -> str:
    moment = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonLineFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}`` on one line; ``process``, right after ``msg``, tells
    the processes of ``serve`` apart (0 is the primary; its secondaries and its workers' process follow)."""

    def __init__(self, process: int | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = json_object(message)  # redacted already by the filter
        line["msg"] = redact_text(message) if fields is None else fields.pop("msg", "")
        if self.process is not None:  # after msg: the first four keys are the same in every line
            line["process"] = self.process
        if fields is not None:
            line.update((k, v) for k, v in fields.items() if k not in line)
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        if extra:
            redacted = redact_json_line(json.dumps(extra, default=str))
            line.update((k, v) for k, v in json.loads(redacted or "{}").items() if k not in line)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = redact_text(record.exc_text)
        if record.stack_info:
            line["stack"] = redact_text(record.stack_info)
        return json.dumps(line, default=str)  # ASCII: no U+2028 or other line break a reader could split on


class TextLineFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: message`` for people reading a terminal; ``[process N]`` first with several."""

    def __init__(self, process: int | None = None) -> None:
        prefix = f"[process {process}] " if process is not None else ""
        super().__init__(f"{prefix}%(asctime)s %(levelname)s %(name)s: %(message)s")


def configure(log_format: str = "json", *, process: int | None = None, stream: TextIO | None = None) -> None:
    """Send INFO and above to ``stream`` (stderr) in ``log_format``, redacted; replaces earlier handlers, so a
    second call (a secondary learning its index) only changes the format."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter(process) if log_format == "json" else TextLineFormatter(process))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    install_log_redaction(root)  # no credential in any log line, aiohttp's parser errors included
