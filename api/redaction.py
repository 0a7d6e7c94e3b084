"""Credentials never reach the server log (docs/ingress.md, "Observability").

Handlers never log headers or bodies, but text from a request still reaches log records in two ways:
paths (the access log, an unhandled error's "on POST <path>"), where a ``url_token`` webhook's last
segment is its secret; and aiohttp's HTTP parser, whose error messages quote the bytes it choked on -
``Authorization: Bearer <token>\\x7f``, a request line with a 9 KB query, a signature header value.

:class:`RedactingFilter` rewrites each record before any handler formats it:

- a parser error (:class:`aiohttp.http_exceptions.HttpProcessingError`) keeps its type, status and
  reason, never the quoted request bytes (which cannot be told apart from a credential in general:
  ``LineTooLong`` quotes a bare header value) and never its traceback into the parser;
- every message and traceback passes through :func:`redact_text`: ``/webhooks/w/<uid>/<token>`` becomes
  ``/webhooks/w/<uid>/{token}`` and an ingress query string ``?{query}``; ``Bearer``/``Basic``
  credentials, and the values of credential-like header lines (``Authorization:``, ``Cookie:``, names with
  ``signature``, ``token``, ``secret``, ``hmac``, ``key``, ``password``) and ``name=value`` pairs become
  ``[redacted]``;
- a message that is a JSON object (the access log, this project's structured lines) is redacted field by
  field and serialised again (:func:`redact_json_line`), never as text: a request path like
  ``/runs/x-secret:probe`` or one holding ``", "remote": ...`` stays inside its ``path`` value, so every
  such line stays valid JSON with all its fields, whatever the request.

Ingress paths are matched leniently (:func:`redact_path`), erring on the side of hiding: any case of
``webhooks``/``w``, repeated slashes, and a UID slot that does not look like a UID is hidden too.

:func:`install_log_redaction` attaches it where records are made (aiohttp's and this project's loggers)
and to the root logger's handlers (every propagated record); ``factoryctl serve`` calls it once at start.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError, InvalidURLError

REDACTED = "[redacted]"
AIOHTTP_LOGGERS = (
    "aiohttp",
    "aiohttp.access",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
)
PROJECT_PREFIXES = ("factoryctl", "api", "reconciler", "store")

# Case-insensitive and with repeated slashes: aiohttp answers those paths 404, but a sender that typed one
# still sent its token (docs/ingress.md, "Observability").
_INGRESS = re.compile(r"(?i)(/+webhooks/+w/+)([^/\s?#'\"]+)(/[^\s?#'\"]*)?(\?[^\s#'\"]*)?")
# What a webhook UID looks like (store.ids.new_id): anything else in the UID slot is hidden as well.
_UID = re.compile(r"wh_[0-9a-z]{26}")
_SEPARATOR = re.compile(r"([/\\;])")
TOKEN_PLACEHOLDER, UID_PLACEHOLDER = "{token}", "{uid}"
_SCHEME_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s'\",]+")
_SENSITIVE_NAME = (
    r"(?:proxy-)?authorization|cookie|set-cookie"
    r"|[\w-]*(?:signature|token|secret|hmac|api[-_]?key|password|passwd|credential)[\w-]*"
)
_HEADER_LINE = re.compile(rf"(?i)\b({_SENSITIVE_NAME})(['\"]?[ \t]*:[ \t]*)[^\r\n]*")
_ASSIGNMENT = re.compile(rf"(?i)\b({_SENSITIVE_NAME})=[^\s&'\",;]+")
_SENSITIVE_KEY = re.compile(rf"(?i){_SENSITIVE_NAME}")
# Where quoted request bytes start in a parser message: b'..', bytearray(..), or a quote that opens a
# literal (not the apostrophe inside a word, as in "can't").
_LITERAL_START = re.compile(r"bytearray\(|\bb['\"]|(?<!\w)['\"]|['\"](?!\w)")


def redact_path(path: str) -> str:
    """A request path as it may be logged: after a segment holding ``webhooks`` and a later ``w`` segment
    (segments split at ``/``, ``\\`` and ``;``, compared in any case and compatibility form, without
    control or invisible characters, whatever lies between them: ``.``, ``..``, empty segments), the next
    segment stays only if it looks like a webhook UID (else ``{uid}``), everything after it becomes
    ``{token}`` and a query string ``?{query}``; then :func:`redact_text`'s credential shapes. A near miss
    that a router would not take is redacted all the same: the log errs towards hiding."""
    path, mark, query = path.partition("?")
    parts = _SEPARATOR.split(path)  # segment, separator, segment, ...
    words = [(i, _folded(seg)) for i, seg in enumerate(parts) if i % 2 == 0 and _folded(seg)]
    start = next((n for n, (_i, word) in enumerate(words) if "webhooks" in word), None)
    w = (
        next((n for n in range(start + 1, len(words)) if words[n][1] == "w"), None)
        if start is not None
        else None
    )
    if w is not None and w + 1 < len(words):
        slot = words[w + 1][0]
        uid = parts[slot] if _UID.fullmatch(parts[slot]) else UID_PLACEHOLDER
        tail = "".join(parts[slot + 1 :])
        hidden = _folded(_SEPARATOR.sub("", tail))  # anything but separators after the UID
        path = "".join([*parts[:slot], uid]) + (f"/{TOKEN_PLACEHOLDER}" if hidden else tail)
        query = "{query}" if query else query
    return redact_text(path + mark + query)


def _folded(segment: str) -> str:
    """A path segment compared the lenient way: compatibility forms (full-width letters), case, spaces,
    without control or invisible (format) characters."""
    text = unicodedata.normalize("NFKC", segment)
    return "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf")).casefold().strip()


def redact_text(text: str) -> str:
    """``text`` with every credential shape this server can see replaced (see the module docstring)."""
    text = _INGRESS.sub(_ingress, text)
    text = _SCHEME_CREDENTIAL.sub(rf"\1\2{REDACTED}", text)
    text = _HEADER_LINE.sub(rf"\1\2{REDACTED}", text)
    return _ASSIGNMENT.sub(rf"\1={REDACTED}", text)


def _ingress(match: re.Match[str]) -> str:
    prefix, uid, rest, query = match.groups()
    token = f"/{TOKEN_PLACEHOLDER}" if rest and rest.strip("/") else rest or ""
    return prefix + uid + token + ("?{query}" if query else "")


def json_object(message: str) -> dict[str, Any] | None:
    """``message`` decoded when it is a JSON object (a structured log line), else None."""
    if not message.startswith("{"):
        return None
    try:
        decoded = json.loads(message)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def redact_json_line(message: str) -> str | None:
    """A JSON-object message with every string value redacted (:func:`redact_text`; any value under a
    credential-like key hidden), serialised again; ``message`` itself when nothing changed, None when it
    is not a JSON object (then it is redacted as text)."""
    decoded = json_object(message)
    if decoded is None:
        return None
    redacted = _redact_value(decoded)
    return message if redacted == decoded else json.dumps(redacted)


def _redact_value(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v, key) for v in value]
    if isinstance(value, str):
        if value and _SENSITIVE_KEY.fullmatch(key):
            return REDACTED
        return redact_text(value)
    return value


def parser_error_summary(exc: HttpProcessingError) -> str:
    """``<module.Type>: <status>, <reason>`` for a parser error: the reason without the request bytes.

    aiohttp's messages are ``<reason>:\\n\\n  <bytes>`` (C parser), ``<reason>: <bytes>`` or
    ``<reason> <bytes>`` (``LineTooLong``, ``InvalidHeader``, ``BadStatusLine``); an ``InvalidURLError``
    may be the raw target alone. Only the text before the first quoted literal of the first line is kept.
    """
    first = str(exc.message).split("\n", 1)[0]
    reason = _LITERAL_START.split(first, maxsplit=1)[0].rstrip(" :(")
    # A bad URL's message may be the raw target alone (in any form: '*webhooks/w/<uid>/<token>').
    if isinstance(exc, InvalidURLError) or reason.startswith("/") or "://" in reason:
        reason = "invalid request target"
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}: {exc.code}, {redact_text(reason) or 'bad request'}"


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, exception and stack text in place; never drops a record.

    Idempotent, so a record passing the filter on its logger and again on a handler is unchanged the
    second time (its exception is already text by then)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_json_line(message)
        if redacted is None:
            redacted = redact_text(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, ()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if isinstance(exc, HttpProcessingError):
                record.exc_text = parser_error_summary(exc)
            else:
                record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None  # the exception object still holds the unredacted text
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


def install_log_redaction(root: logging.Logger | None = None) -> RedactingFilter:
    """Attach one :class:`RedactingFilter` to aiohttp's loggers, to every existing logger of this project,
    and to each handler of ``root`` (default: the root logger). Idempotent; returns the filter in use.

    Logger filters see records where they are made, before any handler (pytest's capture included);
    handler filters see every record that propagates, including loggers created later.
    """
    root = root or logging.getLogger()
    found = [f for f in root.filters if isinstance(f, RedactingFilter)]
    chosen = found[0] if found else RedactingFilter()
    names = set(AIOHTTP_LOGGERS) | {
        name for name in logging.Logger.manager.loggerDict if name.split(".")[0] in PROJECT_PREFIXES
    }
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in sorted(names)]
    targets += [root, *root.handlers]
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(chosen)
    return chosen


def uninstall_log_redaction(redaction: RedactingFilter, root: logging.Logger | None = None) -> None:
    """Detach ``redaction`` from everything :func:`install_log_redaction` attached it to (tests)."""
    root = root or logging.getLogger()
    for logger in [root, *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            logger.removeFilter(redaction)
            for handler in logger.handlers:
                handler.removeFilter(redaction)
