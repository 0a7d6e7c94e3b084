"""The API and ingress service: REST API (``/api/v1``), webhook ingress (``/webhooks/w``), runs, workers.

Exception tree (defined in :mod:`api.errors`, re-exported here; each maps to one problem+json response
in :mod:`api.problems`)::

    ApiError                      status  error_code
    ├── BadRequest                 400    invalid_request
    │   └── ValidationFailed       422    invalid_request (with per-field errors)
    ├── AuthenticationRequired     401    authentication_required
    ├── NotAuthorized              403    not_authorized
    ├── ResourceNotFound           404    resource_not_found
    ├── MethodNotAllowed           405    operation_not_supported
    ├── Conflict                   409    conflict
    ├── PayloadTooLarge            413    invalid_request
    ├── RateLimited                429    budget_exceeded (with Retry-After)
    ├── FeatureNotAvailable        501    feature_not_available
    └── ResourceUnavailable        503    resource_unavailable

Store errors (:mod:`store`) are translated by the same middleware: NotFound -> 404, WriteRefused -> 409,
InvalidValue -> 422; so is :class:`api.http.pagination.InvalidCursor` -> 400.

Shared HTTP plumbing (request bodies, field errors, keyset pages, the ``/api/v1`` prefix) lives in
:mod:`api.http`; feature packages hold only their own routes and rules.
"""

from __future__ import annotations

from api.errors import (
    ApiError,
    AuthenticationRequired,
    BadRequest,
    Conflict,
    FeatureNotAvailable,
    MethodNotAllowed,
    NotAuthorized,
    PayloadTooLarge,
    RateLimited,
    ResourceNotFound,
    ResourceUnavailable,
    ValidationFailed,
)

__all__ = [
    "ApiError",
    "AuthenticationRequired",
    "BadRequest",
    "Conflict",
    "FeatureNotAvailable",
    "MethodNotAllowed",
    "NotAuthorized",
    "PayloadTooLarge",
    "RateLimited",
    "ResourceNotFound",
    "ResourceUnavailable",
    "ValidationFailed",
]
