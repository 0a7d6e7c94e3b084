"""RFC 9457 problem+json: the one place where errors become HTTP responses.

Every error leaves the service through :func:`problem_middleware`: API errors (:mod:`api.errors`),
domain errors (the store's, and a refused pagination cursor), aiohttp's own HTTP errors (unknown
route, wrong method) and unexpected exceptions (logged with a reference, answered as a bare 500
without a stack trace). Domain code raises its own errors and never needs to know their status.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

import store
from api.errors import ApiError, BadRequest, Conflict, ResourceNotFound, ValidationFailed
from api.http.pagination import InvalidCursor

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
        return Conflict(str(exc))
    if isinstance(exc, store.InvalidValue):
        return ValidationFailed(str(exc))
    return ApiError("internal error")


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
    except Exception:
        ref = uuid.uuid4().hex[:12]
        log.exception("unhandled error (ref %s) on %s %s", ref, request.method, request.path)
        body = problem_body(
            500,
            "Internal error",
            f"internal error (reference {ref})",
            "internal_error",
            instance,
            retryable=True,
        )
        return problem_response(body)
