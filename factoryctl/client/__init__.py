"""Typed Python client of the factoryctl API (sync and async, on httpx).

::

    from factoryctl.client import FactoryClient, NotFoundError

    with FactoryClient("http://127.0.0.1:8080", api_key) as client:
        created = client.runs.create("Summarise issue 42")
        run = client.runs.get(created.run_id)

Resources: ``runs``, ``factories``, ``webhooks``, ``deliveries``, ``automations``, ``secrets``,
``files`` and ``workers``; ``with_raw_response`` mirrors them and answers status, headers and a
``parse()``. Retries, timeouts and the exception tree are described in :mod:`factoryctl.client._transport`
and :mod:`factoryctl.client.errors`; the guide is ``docs/client.md``.
"""

from __future__ import annotations

from factoryctl.client._transport import RawResponse, retry_delay
from factoryctl.client.async_client import AsyncFactoryClient
from factoryctl.client.errors import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FactoryClientError,
    FieldError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    Problem,
    RateLimitError,
    UnprocessableEntityError,
    parse_retry_after,
)
from factoryctl.client.models import (
    ApplyRecord,
    Attachment,
    Automation,
    Check,
    Claim,
    ClaimedRun,
    Delivery,
    Factory,
    FactoryDetail,
    FactoryRun,
    FactoryValidation,
    FilterTestResult,
    Followup,
    Heartbeat,
    LogLine,
    LogPage,
    Page,
    PageInfo,
    PendingFollowup,
    Run,
    RunCreated,
    RunCreator,
    RunPage,
    RunStatusMessage,
    Secret,
    StateReport,
    ValidationDiagnostic,
    ValidationReport,
    Webhook,
    WebhookWithSecret,
)
from factoryctl.client.sync_client import FactoryClient

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "ApplyRecord",
    "AsyncFactoryClient",
    "Attachment",
    "AuthenticationError",
    "Automation",
    "BadRequestError",
    "Check",
    "Claim",
    "ClaimedRun",
    "ConflictError",
    "Delivery",
    "Factory",
    "FactoryClient",
    "FactoryClientError",
    "FactoryDetail",
    "FactoryRun",
    "FactoryValidation",
    "FieldError",
    "FilterTestResult",
    "Followup",
    "Heartbeat",
    "InternalServerError",
    "LogLine",
    "LogPage",
    "NotFoundError",
    "Page",
    "PageInfo",
    "PendingFollowup",
    "PermissionDeniedError",
    "Problem",
    "RateLimitError",
    "RawResponse",
    "Run",
    "RunCreated",
    "RunCreator",
    "RunPage",
    "RunStatusMessage",
    "Secret",
    "StateReport",
    "UnprocessableEntityError",
    "ValidationDiagnostic",
    "ValidationReport",
    "Webhook",
    "WebhookWithSecret",
    "parse_retry_after",
    "retry_delay",
]
