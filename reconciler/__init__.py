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

from reconciler.errors import DefinitionsInvalid, EmptyDefinitions, ReconcileError, SourceError

__all__ = ["DefinitionsInvalid", "EmptyDefinitions", "ReconcileError", "SourceError"]
