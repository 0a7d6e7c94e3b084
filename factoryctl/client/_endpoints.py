"""How an endpoint is declared once and served in four modes (the machinery behind every resource).

A resource class (``Runs``, ``Webhooks``...) lists its endpoints as :class:`endpoint` (and
:class:`paginated`) descriptors around pure builders that return a
:class:`~factoryctl.client._transport.RequestSpec`. Each client instantiates the same class with a *mode*:
:class:`Sync` methods return the model, :class:`Async` ones an awaitable of it, and
:class:`SyncRaw`/:class:`AsyncRaw` (``client.with_raw_response``) a
:class:`~factoryctl.client._transport.RawResponse`. The descriptors' overloads give each mode its exact
signature for type checkers; the executors in the client modules do the sending and retrying.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

import httpx

from factoryctl.client._transport import RawResponse, RequestSpec
from factoryctl.client.models import Model, Page, parse_page

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
M = TypeVar("M", bound=Model)
Mode = TypeVar("Mode")
V1 = "/api/v1"


class Sync:
    """Mode marker: methods return models."""


class Async:
    """Mode marker: methods return awaitables of models."""


class SyncRaw:
    """Mode marker: methods return RawResponse."""


class AsyncRaw:
    """Mode marker: methods return awaitables of RawResponse."""


class Pageable(Protocol[T_co]):
    @property
    def items(self) -> Sequence[T_co]: ...

    def next_page_params(self) -> dict[str, Any] | None: ...


class Resource(Generic[Mode]):
    def __init__(self, executor: Any) -> None:
        self._executor = executor


class endpoint(Generic[P, T]):
    """One API call: ``resource.method(*args)`` sends ``builder(*args)`` through the resource's executor."""

    def __init__(self, builder: Callable[P, RequestSpec[T]]) -> None:
        self.builder = builder

    @overload
    def __get__(self, obj: None, owner: Any) -> endpoint[P, T]: ...
    @overload
    def __get__(self, obj: Resource[Sync], owner: Any) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: Any) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, obj: Resource[SyncRaw], owner: Any) -> Callable[P, RawResponse[T]]: ...
    @overload
    def __get__(self, obj: Resource[AsyncRaw], owner: Any) -> Callable[P, Awaitable[RawResponse[T]]]: ...
    def __get__(self, obj: Resource[Any] | None, owner: Any) -> Any:
        if obj is None:
            return self
        builder, executor = self.builder, obj._executor

        @functools.wraps(builder)
        def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            return executor.call(builder(*args, **kwargs))

        return call


class paginated(Generic[P, T]):
    """Every item of every page: follows the page's ``next_page_params`` until the last page."""

    def __init__(self, builder: Callable[P, RequestSpec[Pageable[T]]]) -> None:
        self.builder = builder

    @overload
    def __get__(self, obj: None, owner: Any) -> paginated[P, T]: ...
    @overload
    def __get__(self, obj: Resource[Sync], owner: Any) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: Any) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(self, obj: Resource[Any] | None, owner: Any) -> Any:
        if obj is None:
            return self
        builder, executor = self.builder, obj._executor

        @functools.wraps(builder)
        def iterate(*args: P.args, **kwargs: P.kwargs) -> Any:
            return executor.paginate(builder, args, kwargs)

        return iterate


def parse_model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.from_json(response.json())


def parse_page_of(key: str, cls: type[M]) -> Callable[[httpx.Response], Page[M]]:
    return lambda response: parse_page(response.json(), key, cls)


def parse_list_of(key: str, cls: type[M]) -> Callable[[httpx.Response], list[M]]:
    """Every item of an unpaged list answer ``{<key>: [...]}`` (secrets, schedules, environments...)."""

    def parse(response: httpx.Response) -> list[M]:
        data = response.json()
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise TypeError(f"expected an object with a {key!r} list")
        return [cls.from_json(x) for x in data[key]]

    return parse


def parse_nothing(response: httpx.Response) -> None:
    del response


def json_body(**members: Any) -> dict[str, Any]:
    """A JSON body without the members left as None."""
    return {k: v for k, v in members.items() if v is not None}
