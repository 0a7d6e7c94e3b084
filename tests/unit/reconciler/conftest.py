"""Helpers to write small factory trees for loader and rules tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from reconciler.diagnostics import Diagnostic

FACTORY = "name: demo\n"


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def _where(root: Path, diagnostics: Iterable[Diagnostic]) -> list[tuple[str, int, int, str]]:
    prefix = root.as_posix() + "/"
    return [(d.path.removeprefix(prefix), d.line, d.column, d.rule) for d in diagnostics]


@pytest.fixture
def where() -> Callable[[Path, Iterable[Diagnostic]], list[tuple[str, int, int, str]]]:
    """``where(root, diagnostics)`` -> ``(relative path, line, column, rule)`` of each diagnostic."""
    return _where


@pytest.fixture
def factory_tree(tmp_path: Path) -> Callable[[dict[str, str | bytes]], Path]:
    """``factory_tree({"webhooks/a.yaml": "..."})`` -> a factory directory (with a ``factory.yaml``
    unless one is given)."""

    def make(files: dict[str, str | bytes]) -> Path:
        return write_tree(tmp_path / "f", {"factory.yaml": FACTORY, **files})

    return make
