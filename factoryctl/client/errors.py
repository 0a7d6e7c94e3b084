"""What a failed call raises: one exception class per HTTP status, each carrying the problem+json body.

Exception tree (catch the narrowest class you can act on)::

    FactoryClientError
    └── APIError                         any failed API call
        ├── APIConnectionError           no HTTP answer: refused, reset, DNS, TLS...
        │   └── APITimeoutError          the timeout elapsed (connect, read, write or pool)
        ├── APIResponseValidationError   a 2xx answer that is not the documented shape
        └── APIStatusError               an HTTP answer with status >= 400
            ├── BadRequestError           400  invalid_request
            ├── AuthenticationError       401  authentication_required
            ├── PermissionDeniedError     403  not_authorized
            ├── NotFoundError             404  resource_not_found
            ├── ConflictError             409  conflict
            ├── UnprocessableEntityError  422  invalid_request (``errors`` lists each field)
            ├── RateLimitError            429  budget_exceeded (``retry_after`` seconds)
            └── InternalServerError       5xx

Other statuses (405, 413, 415...) raise :class:`APIStatusError` itself. :data:`STATUS_ERRORS` is the
one place that maps a status to its class.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class FieldError:
    """One invalid field of a 422 answer."""

    field: str
    message: str


@dataclass(frozen=True)
class Problem:
    """An RFC 9457 problem+json body (``raw`` keeps every member, including unknown ones)."""

    status: int
    title: str = ""
    detail: str = ""
    error_code: str = ""
    type: str = ""
    instance: str = ""
    retryable: bool = False
    errors: tuple[FieldError, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_body(cls, status: int, body: object) -> Problem:
        """The problem in ``body``; a non-problem body (HTML from a proxy, text) still gives one."""
        if not isinstance(body, dict):
            snippet = body.strip()[:500] if isinstance(body, str) else ""
            return cls(status=status, detail=snippet or f"HTTP {status}")

        def text(key: str) -> str:
            value = body.get(key)
            return value if isinstance(value, str) else ""

        errors = tuple(
            FieldError(str(e.get("field", "")), str(e.get("message", "")))
            for e in body.get("errors") or ()
            if isinstance(e, dict)
        )
        return cls(
            status=status,
            title=text("title"),
            detail=text("detail") or text("error") or text("title") or f"HTTP {status}",
            error_code=text("error_code"),
            type=text("type"),
            instance=text("instance"),
            retryable=body.get("retryable") is True,
            errors=errors,
            raw=dict(body),
        )


class FactoryClientError(Exception):
    """Root of everything this client raises on purpose."""


class APIError(FactoryClientError):
    """A call to the API failed; ``request`` is the last request sent (None if none was built)."""

    def __init__(self, message: str, *, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request = request


class APIConnectionError(APIError):
    """No HTTP answer arrived (after any retries)."""


class APITimeoutError(APIConnectionError):
    """The configured timeout elapsed (after any retries)."""


class APIResponseValidationError(APIError):
    """The server answered 2xx with a body this client cannot read as the documented model."""

    def __init__(self, message: str, *, response: httpx.Response | None = None) -> None:
        super().__init__(message, request=response.request if response is not None else None)
        self.response = response


class APIStatusError(APIError):
    """The server answered with an error status; ``problem`` is its problem+json body."""

    def __init__(self, response: httpx.Response, problem: Problem, body: object) -> None:
        code = f" {problem.error_code}" if problem.error_code else ""
        super().__init__(f"{problem.status}{code}: {problem.detail}", request=response.request)
        self.response = response
        self.problem = problem
        self.body = body  # the decoded JSON body (a dict for problem+json), else the text

    @property
    def status_code(self) -> int:
        return self.problem.status

    @property
    def headers(self) -> httpx.Headers:
        return self.response.headers

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def error_code(self) -> str:
        return self.problem.error_code

    @property
    def retryable(self) -> bool:
        return self.problem.retryable

    @property
    def errors(self) -> tuple[FieldError, ...]:
        return self.problem.errors


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class ConflictError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait (``Retry-After``), when it said."""
        return parse_retry_after(self.response.headers.get("Retry-After"))


class InternalServerError(APIStatusError):
    pass


STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def error_class(status: int) -> type[APIStatusError]:
    """The exception class for an error status (the one status -> exception map)."""
    if status >= 500:
        return InternalServerError
    return STATUS_ERRORS.get(status, APIStatusError)


def decode_body(response: httpx.Response) -> object:
    """The JSON body if it is JSON, else the text (never raises)."""
    try:
        return response.json()
    except ValueError:
        try:
            return response.text
        except UnicodeDecodeError:
            return ""


def error_from_response(response: httpx.Response) -> APIStatusError:
    """The exception for an error answer."""
    body = decode_body(response)
    problem = Problem.from_body(response.status_code, body)  # the status line wins over a body's "status"
    return error_class(response.status_code)(response, problem, body)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
