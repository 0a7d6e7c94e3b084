"""Validate local factory directories through a server (``factoryctl validate --server URL``).

:func:`collect_files` gathers what the definition loader reads from a factory directory —
``factory.yaml``, ``webhooks/*``, ``automations/*/automation.md`` (and stray files there, which the
loader warns about), ``environments/*``, ``schedules/*``, ``notifications/*`` — skipping dot files, as
the loader does. Each directory is sent to ``POST /api/v1/factory-files/validate``; the answers (the
product's shape, read back by :func:`as_report`) are merged into one report of the ``factoryctl validate
--format json`` shape, with paths rewritten from "relative to the uploaded factory" to the local paths the
caller gave, so CI annotations point at the checkout.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from factoryctl.client.models import FactoryFilesValidation
from factoryctl.client.sync_client import FactoryClient

# The registry's <folder>/<name>.yaml kinds: the client may not import it, a test compares the two
# (docs/architecture.md, "Adding a definition kind").
FOLDERS = ("runners", "webhooks", "environments", "schedules", "notifications")
# The registry's kinds whose objects are directories, with how deep their files lie (agents/<a>/agent.md,
# agents/<a>/skills/<s>/SKILL.md, benchmarks/<suite>/tasks/<task>.yaml); a test compares them too.
NESTED = {"agents": 3, "skills": 1, "automations": 1, "scorers": 1, "benchmarks": 2}
SUFFIXES = (".md", ".yaml", ".yml")
MAX_FILE_BYTES = 1024 * 1024


def _visible_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file())


def _walk(folder: Path, rel: str, depth: int, found: dict[str, Path], *, top: bool = False) -> None:
    """Definition files below ``folder`` down to ``depth`` directory levels (stray files at the top are
    sent too: the loader warns about them)."""
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and depth > 0:
            _walk(entry, f"{rel}/{entry.name}", depth - 1, found)
        elif entry.is_file() and (top or entry.name.endswith(SUFFIXES)):
            found[f"{rel}/{entry.name}"] = entry


def collect_files(root: Path) -> dict[str, bytes]:
    """Definition files of one factory directory: relative POSIX path -> bytes.

    Files over 1 MiB are sent as they are: the server reports them exactly as a local run would.
    """
    found: dict[str, Path] = {}
    if (root / "factory.yaml").is_file():
        found["factory.yaml"] = root / "factory.yaml"
    for name in FOLDERS:
        for item in _visible_files(root / name):
            found[f"{name}/{item.name}"] = item
    for name, depth in NESTED.items():
        _walk(root / name, name, depth, found, top=True)
    return {rel: path.read_bytes() for rel, path in found.items()}


def _local(root: str, remote: str) -> str:
    remote = remote.removeprefix("./")
    if remote in ("", "."):
        return root
    return f"{root.rstrip('/')}/{remote}" if root not in ("", ".") else remote


def relocate(report: dict[str, Any], root: str) -> list[dict[str, Any]]:
    """The report's factories with the server's relative paths turned into paths under ``root``."""
    out = []
    for factory in report.get("factories") or []:
        errors = [{**e, "path": _local(root, str(e.get("path", "")))} for e in factory.get("errors") or []]
        out.append({**factory, "path": root, "errors": errors})
    return out


def merge(reports: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One ``validate --format json`` report from per-directory answers ``(local root, report)``."""
    factories: list[dict[str, Any]] = []
    for root, report in reports:
        factories += relocate(report, root)
    errors = [e for f in factories for e in f["errors"]]
    return {
        "valid": not any(e.get("severity", "error") == "error" for e in errors),
        "factories": factories,
        "summary": {
            "files": sum(int(f.get("files") or 0) for f in factories),
            "errors": sum(e.get("severity", "error") == "error" for e in errors),
            "warnings": sum(e.get("severity", "error") != "error" for e in errors),
        },
    }


def as_report(answer: FactoryFilesValidation) -> dict[str, Any]:
    """The server's answer as one factory of the ``validate --format json`` report (paths still relative).

    The rule ID, severity and hint are factoryctl's extensions of the answer; a diagnostic without a
    position (``located`` false) gets line and column 0 back, so the text output matches a local run."""
    errors = []
    for d in answer.diagnostics:
        located = d.located
        errors.append(
            {
                "rule": d.rule or d.code,
                "severity": d.severity,
                "message": d.message,
                "path": d.path,
                "line": d.line if located else 0,
                "column": d.column if located else 0,
                "hint": d.hint,
            }
        )
    factory = answer.factory
    return {
        "factories": [
            {"path": ".", "name": factory.get("name"), "files": factory.get("files") or 0, "errors": errors}
        ]
    }


def _not_a_factory(root: str) -> dict[str, Any]:
    problem = {
        "rule": "FC001",
        "severity": "error",
        "message": f"'{root}' is not a factory: factory.yaml not found",
        "path": "factory.yaml",
        "line": 0,
        "column": 0,
        "hint": None,
    }
    return {"factories": [{"path": ".", "name": None, "files": 0, "errors": [problem]}]}


def validate_remote(
    server: str, api_key: str, paths: Iterable[str | os.PathLike[str]], *, timeout: float = 60.0
) -> dict[str, Any]:
    """Validate each factory directory in ``paths`` on ``server``; the merged JSON report.

    Raises :class:`~factoryctl.client.errors.APIError` subclasses when the server cannot be reached or
    refuses (401 bad key, 501 a server started without definition validation...).
    """
    answers: list[tuple[str, dict[str, Any]]] = []
    with FactoryClient(server, api_key, timeout=timeout) as client:
        for given in paths:
            root = os.fspath(given)
            files = collect_files(Path(root))
            if not files:  # the server refuses an empty upload: answer as a local run would
                answers.append((root, _not_a_factory(root)))
                continue
            answers.append((root, as_report(client.files.validate(files))))
    return merge(answers)
