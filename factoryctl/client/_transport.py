"""Request specs and the retry policy shared by the sync and the async client (pure: no I/O here).

A :class:`RequestSpec` says what one API call sends and how its answer is read; the executors in
:mod:`factoryctl.client.sync_client` and :mod:`factoryctl.client.async_client` only send it, wait and retry.

Retry policy (``max_retries`` extra attempts, default 2; a spec's ``retries`` overrides it for that
call, which the worker protocol does per call: :mod:`factoryctl.client.worker_resources`):

- no connection was made (refused, DNS, connect or pool timeout): retried for every request, since
  the server never saw it;
- the request may have reached the server but no answer came (read/write errors and timeouts, a
  dropped connection): retried only for idempotent requests, because a create may have happened;
- ``408``, ``429`` and ``503``: the server refused before acting; retried for every request;
- ``409``: retried only when the problem says ``retryable: true`` (a real conflict stays a conflict);
- ``500``, ``502``, ``504`` and other 5xx but ``501``/``505``: the outcome is unknown; retried only
  for idempotent requests (GET, PATCH with absolute values, read-only POSTs such as test-filter,
  and the worker calls, which the server's leases make safe to repeat);
- everything else is final. A ``Retry-After`` answer (seconds or an HTTP date) is waited exactly;
  one longer than ``max_retry_after`` (60 s) is not waited at all: the error is raised at once.

Backoff without ``Retry-After``: ``min(cap, base * 2**attempt)`` scaled by a jitter in [0.5, 1).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from factoryctl.client.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    decode_body,
    parse_retry_after,
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
NO_BODY: Any = object()
ALWAYS_RETRIED = frozenset({408, 429, 503})
NEVER_RETRIED_5XX = frozenset({501, 505})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Transport errors raised before any byte of the request left: safe to retry for any method.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Errors that retrying cannot fix (a bad URL, a request httpx refuses to send).
HOPELESS = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL)


@dataclass(frozen=True)
class RequestSpec(Generic[T_co]):
    """One API call: what to send, whether repeating it is harmless, and how to read the answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T_co]
    params: Sequence[tuple[str, str]] = ()
    json: Any = NO_BODY
    files: Sequence[tuple[str, tuple[str, bytes, str]]] = ()  # multipart parts: (field, (name, data, type))
    content: bytes | None = None  # a binary body (with its Content-Type in ``headers``)
    headers: Mapping[str, str] = field(default_factory=dict)  # this call's own headers
    idempotent: bool | None = None  # None: by method (GET/HEAD/OPTIONS)
    timeout: float | None = None  # read timeout for this call (long polls), else the client's
    retries: int | None = None  # extra attempts for this call; None: the client's max_retries

    @property
    def safe_to_repeat(self) -> bool:
        return self.method in IDEMPOTENT_METHODS if self.idempotent is None else self.idempotent

    def retry_budget(self, options: ClientOptions) -> int:
        """How many extra attempts this call may make."""
        return options.max_retries if self.retries is None else self.retries


@dataclass(frozen=True)
class ClientOptions:
    """Resolved settings of one client."""

    base_url: str
    api_key: (
        str | None
    )  # None: no Authorization header (the public endpoints: factory-file schemas, validate)
    timeout: httpx.Timeout
    max_retries: int = 2
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_base: float = 0.5
    retry_cap: float = 8.0
    max_retry_after: float = 60.0

    @classmethod
    def build(
        cls,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float | httpx.Timeout | None,
        max_retries: int,
        headers: Mapping[str, str] | None,
        user_agent: str,
    ) -> ClientOptions:
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        merged = {"User-Agent": user_agent, "Accept": "application/json", **(headers or {})}
        if api_key is not None:
            merged["Authorization"] = f"Bearer {api_key}"
        return cls(base_url.rstrip("/"), api_key, as_timeout(timeout), max_retries, merged)


def as_timeout(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    """A total per-attempt timeout in seconds (connect capped at 10 s), or an httpx.Timeout as given."""
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if timeout is None:
        return httpx.Timeout(None)
    return httpx.Timeout(timeout, connect=min(timeout, 10.0))


def path(template: str, *segments: str) -> str:
    """``template`` with each ``{}`` replaced by a percent-encoded path segment."""
    return template.format(*(quote(s, safe="") for s in segments))


def query(**params: object) -> list[tuple[str, str]]:
    """Query pairs: None is left out, sequences repeat the key, booleans are ``true``/``false``."""
    out: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, dt.datetime):
                item = item.isoformat()
            out.append((key, str(item)))
    return out


def json_content(value: Any) -> bytes:
    """A request body as this client sends it: compact JSON, non-ASCII escaped as ``\\uXXXX`` (so a
    lone surrogate in harness output still encodes); callers that size batches measure with it."""
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def build_request(
    http: httpx.Client | httpx.AsyncClient, options: ClientOptions, spec: RequestSpec[Any]
) -> httpx.Request:
    timeout = options.timeout
    if spec.timeout is not None:
        timeout = httpx.Timeout(
            connect=timeout.connect, read=spec.timeout, write=timeout.write, pool=timeout.pool
        )
    headers = {**options.headers, **spec.headers}
    content = spec.content
    if spec.json is not NO_BODY:
        content = json_content(spec.json)
        headers["Content-Type"] = "application/json"
    return http.build_request(
        spec.method,
        options.base_url + spec.path,
        params=list(spec.params) or None,
        content=content,
        files=list(spec.files) or None,
        headers=headers,
        timeout=timeout,
    )


# --- retry policy --------------------------------------------------------------------------------


def retry_delay(
    attempt: int,
    retry_after_header: str | None,
    base: float = 0.5,
    cap: float = 8.0,
    jitter_rng: Callable[[], float] = random.random,
    now: float | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

    A parseable ``Retry-After`` wins (waited exactly); otherwise capped exponential backoff
    ``min(cap, base * 2**attempt)`` times a jitter factor in [0.5, 1) drawn from ``jitter_rng``.
    """
    told = parse_retry_after(retry_after_header, now)
    if told is not None:
        return told
    ceiling = min(cap, base * 2.0 ** min(attempt, 32))
    return ceiling * (0.5 + 0.5 * jitter_rng())


def status_is_retryable(status: int, *, idempotent: bool, problem_retryable: bool) -> bool:
    """Whether an error status may be retried (see the module docstring)."""
    if status in ALWAYS_RETRIED:
        return True
    if status == 409:
        return problem_retryable
    if status >= 500 and status not in NEVER_RETRIED_5XX:
        return idempotent
    return False


def error_is_retryable(exc: httpx.TransportError, *, idempotent: bool) -> bool:
    """Whether a transport error may be retried: always if nothing was sent, else only if idempotent."""
    if isinstance(exc, HOPELESS):
        return False
    if isinstance(exc, NOT_SENT):
        return True
    return idempotent


def delay_after_status(
    options: ClientOptions,
    spec: RequestSpec[Any],
    attempt: int,
    response: httpx.Response,
    rng: Callable[[], float],
) -> float | None:
    """Seconds to wait before retrying an error answer, or None when it is final."""
    if attempt >= spec.retry_budget(options):
        return None
    problem_retryable = False
    if response.status_code == 409:
        body = decode_body(response)
        problem_retryable = isinstance(body, dict) and body.get("retryable") is True
    if not status_is_retryable(
        response.status_code, idempotent=spec.safe_to_repeat, problem_retryable=problem_retryable
    ):
        return None
    delay = retry_delay(
        attempt, response.headers.get("Retry-After"), options.retry_base, options.retry_cap, rng
    )
    return None if delay > options.max_retry_after else delay


def delay_after_error(
    options: ClientOptions,
    spec: RequestSpec[Any],
    attempt: int,
    exc: httpx.TransportError,
    rng: Callable[[], float],
) -> float | None:
    """Seconds to wait before retrying after a transport error, or None when it is final."""
    if attempt >= spec.retry_budget(options) or not error_is_retryable(exc, idempotent=spec.safe_to_repeat):
        return None
    return retry_delay(attempt, None, options.retry_base, options.retry_cap, rng)


def connection_error(exc: httpx.TransportError, request: httpx.Request) -> APIConnectionError:
    where = f"{request.method} {request.url.copy_with(query=None)}"
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"request timed out: {where} ({type(exc).__name__})", request=request)
    reason = str(exc) or type(exc).__name__
    return APIConnectionError(f"connection error: {where}: {reason}", request=request)


class RawResponse(Generic[T]):
    """An answer before parsing (``client.with_raw_response``): status, headers, then ``parse()``."""

    def __init__(self, response: httpx.Response, spec: RequestSpec[T], retries_taken: int) -> None:
        self.http_response = response
        self.retries_taken = retries_taken
        self._spec = spec

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def content(self) -> bytes:
        return self.http_response.content

    def parse(self) -> T:
        """The typed model the plain client would have returned."""
        return parse_answer(self._spec, self.http_response)


def parse_answer(spec: RequestSpec[T], response: httpx.Response) -> T:
    """Read a 2xx answer as the spec's model; a malformed one raises APIResponseValidationError."""
    try:
        return spec.parse(response)
    except (ValueError, TypeError, KeyError) as exc:
        raise APIResponseValidationError(
            f"unexpected answer to {spec.method} {spec.path}: {exc}", response=response
        ) from exc
