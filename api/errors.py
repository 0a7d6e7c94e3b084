"""The API's exceptions: each class is one kind of problem+json answer (status, ``error_code``, title).

Handlers and the parsing helpers raise them; :mod:`api.problems` turns them, and the domain errors of
the store and of pagination, into responses, so no handler builds an error response itself. The tree
is drawn in :mod:`api`, which re-exports every name (``from api import BadRequest`` works).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status = 500
    error_code = "internal_error"
    title = "Internal error"
    retryable = False

    def __init__(
        self,
        detail: str | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        retryable: bool | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors
        self.headers = headers or {}
        # RFC 9457 extension members a client may act on (e.g. the run ``state`` of a worker's 409).
        self.extensions = extensions or {}
        if retryable is not None:
            self.retryable = retryable


class BadRequest(ApiError):
    status, error_code, title = 400, "invalid_request", "Invalid request"


class ValidationFailed(BadRequest):
    status, title = 422, "Validation failed"


class AuthenticationRequired(ApiError):
    status, error_code, title = 401, "authentication_required", "Authentication required"


class NotAuthorized(ApiError):
    status, error_code, title = 403, "not_authorized", "Not authorized"


class ResourceNotFound(ApiError):
    status, error_code, title = 404, "resource_not_found", "Not found"


class MethodNotAllowed(ApiError):
    status, error_code, title = 405, "operation_not_supported", "Method not allowed"


class Conflict(ApiError):
    status, error_code, title = 409, "conflict", "Conflict"


class PayloadTooLarge(ApiError):
    status, error_code, title = 413, "invalid_request", "Payload too large"


class RateLimited(ApiError):
    status, error_code, title, retryable = 429, "budget_exceeded", "Too many requests", True


class FeatureNotAvailable(ApiError):
    status, error_code, title = 501, "feature_not_available", "Feature not available"


class ResourceUnavailable(ApiError):
    status, error_code, title, retryable = 503, "resource_unavailable", "Resource unavailable", True
