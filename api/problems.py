"""RFC 9457 problem+json: the one place where errors become HTTP responses.

Every error leaves the service through :func:`problem_middleware`: API errors (:mod:`api.errors`),
domain errors (the store's, and a refused pagination cursor), aiohttp's own HTTP errors (unknown
route, wrong method), a store that is down or full (:func:`store_unavailable`: 503 with
``Retry-After``, docs/operations.md "Faults and recovery") and unexpected exceptions (logged with a
reference, answered as a bare 500 without a stack trace). Domain code raises its own errors and never
needs to know their status.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy.exc
from aiohttp import web

import store
from api.errors import ApiError, BadRequest, Conflict, ResourceNotFound, ResourceUnavailable, ValidationFailed
from api.http.pagination import InvalidCursor
from api.ops import route_label

log = logging.getLogger("factoryctl.api")
PROBLEM_JSON = "application/problem+json"

_HTTP_CODES = {
    400: "invalid_request",
    401: "authentication_required",
    403: "not_authorized",
    404: "resource_not_found",
    405: "operation_not_supported",
    409: "conflict",
    413: "invalid_request",
    415: "invalid_request",
    422: "invalid_request",
    429: "budget_exceeded",
    501: "feature_not_available",
    503: "resource_unavailable",
}


def problem_body(
    status: int,
    title: str,
    detail: str,
    error_code: str,
    instance: str,
    *,
    retryable: bool = False,
    errors: list[dict[str, Any]] | None = None,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        **(extensions or {}),
        "type": f"urn:factoryctl:problem:{error_code}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        "error": detail,
        "error_code": error_code,
        "retryable": retryable,
    }
    if errors:
        body["errors"] = errors
    return body


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=int(body["status"]),
        text=json.dumps(body),
        content_type=PROBLEM_JSON,
        headers=headers,
    )


def from_api_error(exc: ApiError, instance: str) -> web.Response:
    body = problem_body(
        exc.status,
        exc.title,
        exc.detail,
        exc.error_code,
        instance,
        retryable=exc.retryable,
        errors=exc.errors,
        extensions=exc.extensions,
    )
    return problem_response(body, exc.headers)


def _translate(exc: store.StoreError | InvalidCursor) -> ApiError:
    """The API error a domain error means to a client."""
    if isinstance(exc, InvalidCursor):
        return BadRequest(f"cursor: {exc}")
    if isinstance(exc, store.NotFound):
        return ResourceNotFound(str(exc))
    if isinstance(exc, store.WriteRefused):
        return Conflict(str(exc), extensions=dict(exc.extensions))
    if isinstance(exc, store.InvalidValue):
        return ValidationFailed(str(exc))
    return ApiError("internal error")


# A store outage is short or needs an operator; either way a sender should come back soon, not hammer.
RETRY_AFTER_SECONDS = 5
# SQLSTATEs meaning "the database cannot serve anyone right now" (any driver that reports them):
# connection exceptions (class 08), insufficient resources (class 53: disk full, out of memory, too many
# connections) and the server shutting down, crashed or starting (57P01, 57P02, 57P03).
_UNAVAILABLE_SQLSTATES = ("08", "53", "57P01", "57P02", "57P03")
# SQLite primary result codes that say the same about a database file: BUSY, LOCKED, IOERR, FULL,
# CANTOPEN; and their messages, for errors raised without a code.
_SQLITE_CODES = {
    5: "SQLITE_BUSY",
    6: "SQLITE_LOCKED",
    10: "SQLITE_IOERR",
    13: "SQLITE_FULL",
    14: "SQLITE_CANTOPEN",
}
_SQLITE_MESSAGES = {
    "database is locked": "SQLITE_BUSY",
    "disk i/o error": "SQLITE_IOERR",
    "database or disk is full": "SQLITE_FULL",
    "unable to open database file": "SQLITE_CANTOPEN",
}
_DRIVER_PACKAGES = frozenset({"sqlalchemy", "asyncpg", "aiosqlite", "sqlite3"})
_OUTAGE_ERRNOS = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
     errno.ENETUNREACH, errno.EPIPE, errno.ENOSPC}
)  # fmt: skip


def store_unavailable(exc: BaseException) -> str | None:
    """Why ``exc`` means the database is unreachable, shutting down or out of space (a short reason that
    is safe to log: a code or a class name, never a message carrying SQL, parameters or a URL), or None.

    Such a failure says nothing about the request: the same request succeeds once the database is back,
    so it is a 503 the sender retries, not a 500. The exception chain is walked because drivers and
    SQLAlchemy wrap each other's errors; the most specific reason in it wins.
    """
    fallback: str | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES):
            return f"SQLSTATE {sqlstate}"
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if isinstance(code, int) and code & 0xFF in _SQLITE_CODES:
                return _SQLITE_CODES[code & 0xFF]
            message = str(current).lower()
            for text, name in _SQLITE_MESSAGES.items():
                if text in message:
                    return name
        if _network_error(current) and _raised_in_driver(current):
            return type(current).__name__
        if isinstance(current, sqlalchemy.exc.DBAPIError) and current.connection_invalidated:
            fallback = fallback or "connection lost"
        elif isinstance(current, sqlalchemy.exc.TimeoutError):  # the pool: every connection busy or hung
            fallback = fallback or "connection pool timeout"
        orig = current.orig if isinstance(current, sqlalchemy.exc.DBAPIError) else None
        current = (
            current.__cause__ or (orig if isinstance(orig, BaseException) else None) or current.__context__
        )
    return fallback


def _network_error(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror)) or (
        isinstance(exc, OSError) and exc.errno in _OUTAGE_ERRNOS
    )


def _raised_in_driver(exc: BaseException) -> bool:
    """Whether ``exc`` came out of the database stack: the same ``ConnectionResetError`` raised while
    reading a request body means the client left, which is no outage."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0] in _DRIVER_PACKAGES:
            return True
        tb = tb.tb_next
    return False


def _unavailable(request: web.Request, reason: str) -> web.Response:
    """The 503 for a store failure, logged as one line (no traceback: it is an outage, not a bug)."""
    log.warning("store unavailable on %s %s: %s; answered 503", request.method, route_label(request), reason)
    exc = ResourceUnavailable(
        "the database is unavailable; retry later",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
    return from_api_error(exc, request.path)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    instance = request.path
    try:
        return await handler(request)
    except ApiError as exc:
        return from_api_error(exc, instance)
    except (store.StoreError, InvalidCursor) as exc:
        return from_api_error(_translate(exc), instance)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "internal_error" if exc.status >= 500 else "invalid_request")
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        detail = exc.reason if exc.text is None or exc.text.startswith(f"{exc.status}:") else exc.text
        body = problem_body(exc.status, exc.reason, detail, code, instance)
        return problem_response(body, headers)
    except Exception as exc:
        reason = store_unavailable(exc)
        if reason is not None:
            return _unavailable(request, reason)
        ref = uuid.uuid4().hex[:12]
        log.exception("unhandled error (ref %s) on %s %s", ref, request.method, route_label(request))
        body = problem_body(
            500,
            "Internal error",
            f"internal error (reference {ref})",
            "internal_error",
            instance,
            retryable=True,
        )
        return problem_response(body)
