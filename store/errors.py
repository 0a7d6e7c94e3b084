"""The exception tree of the :mod:`store` package (drawn in its docstring)."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by the store package."""


class NotFound(StoreError):
    pass


class WriteRefused(StoreError):
    """``extensions``: facts a client may act on (e.g. a run's ``state``), sent as problem members."""

    extensions: dict[str, str] = {}


class InvalidValue(StoreError):
    pass


class SecretKeyError(StoreError):
    pass


__all__ = ["InvalidValue", "NotFound", "SecretKeyError", "StoreError", "WriteRefused"]
