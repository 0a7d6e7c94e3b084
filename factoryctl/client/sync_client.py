"""The blocking client: ``FactoryClient(base_url, api_key)`` with one attribute per API resource.

::

    with FactoryClient("http://127.0.0.1:8080", key) as client:
        run = client.runs.create("Summarise issue 42", title="triage")
        for item in client.runs.iter(state="QUEUED"):
            ...
        raw = client.with_raw_response.runs.get(run.run_id)
        print(raw.status_code, raw.headers["content-type"], raw.parse().state)
        for event in client.events.stream(state=["FAILED", "ERROR"]):  # live, until you stop
            print(event.run_id, event.state, event.cursor)

Endpoints are defined once in :mod:`factoryctl.client.resources`; this module only sends, waits and
retries (policy in :mod:`factoryctl.client._transport`); the event streams' iterators, which reconnect
instead, are :mod:`factoryctl.client.events`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from factoryctl.client._endpoints import Sync, SyncRaw
from factoryctl.client._transport import (
    ClientOptions,
    RawResponse,
    RequestSpec,
    build_request,
    connection_error,
    delay_after_error,
    delay_after_status,
    parse_answer,
)
from factoryctl.client.errors import error_from_response
from factoryctl.client.resources import Resources

T = TypeVar("T")
log = logging.getLogger("factoryctl.client")
USER_AGENT = "factoryctl-client/0.1"


class SyncExecutor:
    """Sends specs with retries over one ``httpx.Client``."""

    def __init__(
        self,
        http: httpx.Client,
        options: ClientOptions,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.http, self.options, self.sleep, self.rng = http, options, sleep, rng

    def send(self, spec: RequestSpec[Any]) -> tuple[httpx.Response, int]:
        """The first 2xx answer and how many retries it took; raises the final error."""
        attempt = 0
        while True:
            request = build_request(self.http, self.options, spec)
            try:
                response = self.http.send(request)
            except httpx.TransportError as exc:
                delay = delay_after_error(self.options, spec, attempt, exc, self.rng)
                if delay is None:
                    raise connection_error(exc, request) from exc
                log.info(
                    "retrying %s %s in %.2fs after %s", spec.method, spec.path, delay, type(exc).__name__
                )
            else:
                if response.status_code < 400:
                    return response, attempt
                delay = delay_after_status(self.options, spec, attempt, response, self.rng)
                if delay is None:
                    raise error_from_response(response)
                log.info(
                    "retrying %s %s in %.2fs after %s", spec.method, spec.path, delay, response.status_code
                )
            self.sleep(delay)
            attempt += 1

    def call(self, spec: RequestSpec[T]) -> T:
        response, _ = self.send(spec)
        return parse_answer(spec, response)

    def paginate(
        self, builder: Callable[..., RequestSpec[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Iterator[Any]:
        params = dict(kwargs)
        while True:
            page = self.call(builder(*args, **params))
            yield from page.items
            following = page.next_page_params()
            if following is None:
                return
            params.update(following)


class RawSyncExecutor:
    """``with_raw_response``: the same sending, answering RawResponse."""

    def __init__(self, inner: SyncExecutor) -> None:
        self.inner = inner

    def call(self, spec: RequestSpec[T]) -> RawResponse[T]:
        response, retries = self.inner.send(spec)
        return RawResponse(response, spec, retries)


class FactoryClient(Resources[Sync]):
    """Blocking client of the factoryctl API.

    ``timeout`` is per attempt in seconds (or an ``httpx.Timeout``); ``max_retries`` extra attempts
    follow the policy of :mod:`factoryctl.client._transport`. Pass ``http_client`` to share a connection
    pool or set proxies/TLS; the client then leaves closing it to you.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float | httpx.Timeout | None = 30.0,
        max_retries: int = 2,
        http_client: httpx.Client | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.options = ClientOptions.build(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            headers=default_headers,
            user_agent=USER_AGENT,
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client()
        self._executor = SyncExecutor(self._http, self.options)
        super().__init__(self._executor)
        self.with_raw_response: Resources[SyncRaw] = Resources(RawSyncExecutor(self._executor))

    @property
    def base_url(self) -> str:
        return self.options.base_url

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> FactoryClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
