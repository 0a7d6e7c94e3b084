"""The reading machinery of every model: tolerant JSON -> frozen dataclass, and cursor pages.

:meth:`Model.from_json` walks the dataclass fields: unknown members are ignored (kept in ``raw``),
absent or null members take the field's default, members without a default are required; nested
models, lists of models and RFC 3339 timestamps are converted, primitives are type-checked (a bool
is not an int). Errors are ``TypeError``/``KeyError``, which the executors report as
:class:`~factoryctl.client.errors.APIResponseValidationError`.
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Generic, TypeVar

M = TypeVar("M", bound="Model")
T = TypeVar("T")
_PRIMITIVES: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


@dataclass(frozen=True, kw_only=True)
class Model:
    """Base of every model; ``raw`` is the JSON object as received."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls: type[M], data: object) -> M:
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {"raw": data}
        for f in fields(cls):
            if f.name == "raw":
                continue
            if data.get(f.name) is None and (f.default is not MISSING or f.default_factory is not MISSING):
                continue  # absent or null: the default
            if f.name not in data:
                raise KeyError(f"{cls.__name__}: missing member {f.name!r}")
            values[f.name] = _convert(_hints(cls)[f.name], data[f.name], f"{cls.__name__}.{f.name}")
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Resolved field types of a model (cached: resolving string annotations is slow)."""
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if isinstance(hint, type) and issubclass(hint, Model):
        return hint.from_json(value)
    if hint is dt.datetime:
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected an RFC 3339 timestamp")
        return dt.datetime.fromisoformat(value)
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected a list")
        return [_convert(args[0], v, where) for v in value] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object")
        return value
    accepted = _PRIMITIVES.get(hint)
    if accepted is not None and (
        not isinstance(value, accepted) or (isinstance(value, bool) and hint is not bool)
    ):
        raise TypeError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
    return value


# --- pages -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageInfo(Model):
    has_next_page: bool = False
    next_cursor: str | None = None


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a cursor list; iterate it for its items."""

    items: list[T]
    page_info: PageInfo

    def __iter__(self) -> typing.Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def has_next_page(self) -> bool:
        return self.page_info.has_next_page and self.page_info.next_cursor is not None

    @property
    def next_cursor(self) -> str | None:
        return self.page_info.next_cursor

    def next_page_params(self) -> dict[str, Any] | None:
        """Arguments that fetch the next page, or None on the last one."""
        return {"cursor": self.page_info.next_cursor} if self.has_next_page else None


def parse_page(data: object, key: str, item: type[M]) -> Page[M]:
    """A page from ``{<key>: [...], page_info: {...}}``."""
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise TypeError(f"expected an object with a {key!r} list")
    info = PageInfo.from_json(data.get("page_info") or {})
    return Page([item.from_json(x) for x in data[key]], info)
