"""Where definitions come from: a local directory (watched) or a git branch (polled).

A source yields :class:`Snapshot` objects: a directory holding the definitions of one revision,
and the revision's name (a commit SHA for git; None for a directory, where apply records a
content digest instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Snapshot:
    root: Path
    revision: str | None
    forced: bool = False
