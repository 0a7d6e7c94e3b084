"""Where definitions come from: a local directory (watched) or a git branch (polled).

A source yields :class:`Snapshot` objects: a directory holding the definitions of one revision,
and the revision's name (a commit SHA for git; None for a directory, where apply records a
content digest instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Snapshot:
    """One revision to reconcile.

    ``follow_symlinks`` is the loader's rule for the tree (False for a git commit: symlinks in it are
    reported, never followed). ``problem`` is set when the revision itself could not be read (a
    malformed git tree): it is then recorded as a failed reconcile of ``revision`` without loading
    ``root``, and the source goes on to later revisions (docs/reconcile.md, "A failing revision").
    ``commit`` describes a git revision (:meth:`reconciler.sources.git.GitSource.commit_info`).
    """

    root: Path
    revision: str | None
    forced: bool = False
    follow_symlinks: bool = True
    problem: str | None = None
    commit: dict[str, Any] | None = None
