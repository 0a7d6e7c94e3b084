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
  ``[redacted]``.

:func:`install_log_redaction` attaches it where records are made (aiohttp's and this project's loggers)
and to the root logger's handlers (every propagated record); ``factoryctl serve`` calls it once at start.
"""

from __future__ import annotations

import logging
import re

from aiohttp.http_exceptions import HttpProcessingError

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

_INGRESS = re.compile(r"(/webhooks/w/)([^/\s?#'\"]+)(/[^\s?#'\"]*)?(\?[^\s#'\"]*)?")
_SCHEME_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s'\",]+")
_SENSITIVE_NAME = (
    r"(?:proxy-)?authorization|cookie|set-cookie"
    r"|[\w-]*(?:signature|token|secret|hmac|api[-_]?key|password|passwd|credential)[\w-]*"
)
_HEADER_LINE = re.compile(rf"(?i)\b({_SENSITIVE_NAME})(['\"]?[ \t]*:[ \t]*)[^\r\n]*")
_ASSIGNMENT = re.compile(rf"(?i)\b({_SENSITIVE_NAME})=[^\s&'\",;]+")
# Where quoted request bytes start in a parser message: b'..', bytearray(..), or a quote that opens a
# literal (not the apostrophe inside a word, as in "can't").
_LITERAL_START = re.compile(r"bytearray\(|\bb['\"]|(?<!\w)['\"]|['\"](?!\w)")


def redact_path(path: str) -> str:
    """A request path as it may be logged: an ingress URL's token segment and query string hidden."""
    return _INGRESS.sub(_ingress, path)


def redact_text(text: str) -> str:
    """``text`` with every credential shape this server can see replaced (see the module docstring)."""
    text = _INGRESS.sub(_ingress, text)
    text = _SCHEME_CREDENTIAL.sub(rf"\1\2{REDACTED}", text)
    text = _HEADER_LINE.sub(rf"\1\2{REDACTED}", text)
    return _ASSIGNMENT.sub(rf"\1={REDACTED}", text)


def _ingress(match: re.Match[str]) -> str:
    prefix, uid, rest, query = match.groups()
    return prefix + uid + ("/{token}" if rest and rest != "/" else rest or "") + ("?{query}" if query else "")


def parser_error_summary(exc: HttpProcessingError) -> str:
    """``<module.Type>: <status>, <reason>`` for a parser error: the reason without the request bytes.

    aiohttp's messages are ``<reason>:\\n\\n  <bytes>`` (C parser), ``<reason>: <bytes>`` or
    ``<reason> <bytes>`` (``LineTooLong``, ``InvalidHeader``, ``BadStatusLine``); an ``InvalidURLError``
    may be the raw target alone. Only the text before the first quoted literal of the first line is kept.
    """
    first = str(exc.message).split("\n", 1)[0]
    reason = _LITERAL_START.split(first, maxsplit=1)[0].rstrip(" :(")
    if reason.startswith("/") or "://" in reason:  # a bare request target is not a reason
        reason = "invalid request target"
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}: {exc.code}, {redact_text(reason) or 'bad request'}"


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, exception and stack text in place; never drops a record.

    Idempotent, so a record passing the filter on its logger and again on a handler is unchanged the
    second time (its exception is already text by then)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
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
