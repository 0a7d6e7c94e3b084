"""The exception tree of the :mod:`reconciler` package (drawn in its docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reconciler.diagnostics import Diagnostic


class ReconcileError(Exception):
    """Base class of every error raised by the reconciler package."""


class DefinitionsInvalid(ReconcileError):
    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__(f"{len(diagnostics)} definition error(s)")


class EmptyDefinitions(ReconcileError):
    pass


class SourceError(ReconcileError):
    pass


__all__ = ["DefinitionsInvalid", "EmptyDefinitions", "ReconcileError", "SourceError"]
