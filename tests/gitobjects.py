"""Git repositories written object by object, for tests of the git source.

git's porcelain refuses the malformed trees these tests need (an entry name holding ``/`` or ``..``,
duplicate names, symlinks to anywhere), so trees and commits are written with ``hash-object`` and
``commit-tree``. Importable as ``import gitobjects`` (``tests/`` is on ``sys.path``, as for ``builders``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

Entry = tuple[str, str, str]  # (mode, name, object id)
AUTOMATION = b"---\ntitle: Triage\n---\nTriage the event.\n"


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        input=data,
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip()


class ObjectRepo:
    """A repository on branch ``main`` whose objects are written as given (names unchecked)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "--quiet", "--initial-branch", "main")

    def blob(self, data: bytes) -> str:
        return git(self.path, "hash-object", "-w", "--stdin", data=data)

    def tree(self, *entries: Entry) -> str:
        body = b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)
        return git(self.path, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", data=body)

    def factory_tree(self, description: str, *extra: Entry) -> str:
        """A valid factory ``gitops`` (``factory.yaml`` and one automation) plus ``extra`` root entries."""
        automation = self.tree(("100644", "automation.md", self.blob(AUTOMATION)))
        automations = self.tree(("40000", "triage", automation))
        factory = self.blob(f"name: gitops\ndescription: {description}\n".encode())
        return self.tree(("40000", "automations", automations), ("100644", "factory.yaml", factory), *extra)

    def commit(self, tree: str, message: str) -> str:
        """Commit ``tree`` on top of ``main`` (if it has commits) and move ``main`` to it."""
        head = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", "refs/heads/main"],
            cwd=self.path,
            capture_output=True,
            text=True,
        ).stdout.strip()
        sha = git(self.path, "commit-tree", tree, *(["-p", head] if head else []), "-m", message)
        git(self.path, "update-ref", "refs/heads/main", sha)
        return sha
