"""The reconciler: definition files -> typed specs -> validation -> plan -> apply.

Exception tree::

    ReconcileError
    ├── DefinitionsInvalid   one or more definitions failed validation (carries the diagnostics)
    ├── EmptyDefinitions     the tree has no definitions and ``allow_empty`` was not given
    └── SourceError          the source (directory, git repository, branch) cannot be read

Validation problems are data (:class:`reconciler.diagnostics.Diagnostic`), not exceptions: a run
collects every problem of every file. Exceptions are for "stop here" outcomes only.
"""

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
