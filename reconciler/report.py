"""Render validation results for people (text), programs (json), GitHub Actions and code scanning.

Formats (all stable; documented with samples in docs/ci.md):

- ``text``: ``file:line:col: error[FC010]: message`` (+ an indented hint), then one summary line;
  colour only when the caller says the stream is a terminal.
- ``json``: ``{"valid", "factories": [{"path", "name", "files", "errors": [Diagnostic.to_json()]}],
  "summary": {"files", "errors", "warnings"}}``; ``errors`` lists warnings too (see ``severity``).
- ``github``: workflow commands ``::error file=..,line=..,col=..,title=FC010::message``.
- ``sarif``: SARIF 2.1.0 with every stable rule ID of :data:`reconciler.diagnostics.RULES`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from reconciler.diagnostics import RULES, Diagnostic

if TYPE_CHECKING:  # an annotation only: `validate --server` renders without loading the loader
    from reconciler.loader import LoadResult

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_RED, _GREEN, _YELLOW, _CYAN = "\033[31m", "\033[32m", "\033[33m", "\033[36m"
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


@dataclass(frozen=True)
class FactoryReport:
    """The outcome of validating one factory directory."""

    path: str
    name: str | None
    files: int
    diagnostics: tuple[Diagnostic, ...]

    @classmethod
    def from_load(cls, result: LoadResult, extra: Iterable[Diagnostic] = ()) -> FactoryReport:
        """Combine the loader's diagnostics with later ones (rules, online checks)."""
        name = result.definition.factory.name if result.definition else None
        found = [*result.diagnostics, *extra]
        found.sort(key=lambda d: (d.path, d.line, d.column, d.rule))
        return cls(result.root, name, result.files, tuple(found))

    @property
    def errors(self) -> int:
        return sum(d.severity == "error" for d in self.diagnostics)

    @property
    def warnings(self) -> int:
        return sum(d.severity != "error" for d in self.diagnostics)


def is_valid(reports: Sequence[FactoryReport]) -> bool:
    return all(r.errors == 0 for r in reports)


def render(fmt: str, reports: Sequence[FactoryReport], *, color: bool = False, tool_version: str = "") -> str:
    """The whole output for ``fmt`` (one of :data:`FORMATS`), ending with a newline."""
    if fmt == "text":
        return text(reports, color=color)
    if fmt == "json":
        return json.dumps(json_report(reports), indent=2) + "\n"
    if fmt == "github":
        return github(reports)
    if fmt == "sarif":
        return json.dumps(sarif(reports, tool_version=tool_version), indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _plural(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def text(reports: Sequence[FactoryReport], *, color: bool = False) -> str:
    def paint(code: str, value: str) -> str:
        return f"{code}{value}{_RESET}" if color else value

    lines = []
    for report in reports:
        for d in report.diagnostics:
            level = paint(_RED + _BOLD if d.severity == "error" else _YELLOW + _BOLD, d.severity)
            lines.append(f"{paint(_BOLD, d.location())}: {level}{paint(_DIM, f'[{d.rule}]')}: {d.message}")
            if d.hint:
                lines.append(f"    {paint(_CYAN, 'hint')}: {d.hint}")
    for report in reports:
        label = f"{report.path} ({report.name})" if report.name else report.path
        if report.errors:
            status = paint(_RED, f"invalid, {_plural(report.errors, 'error')}")
        else:
            status = paint(_GREEN, "valid")
        extra = f", {_plural(report.warnings, 'warning')}" if report.warnings else ""
        lines.append(f"{label}: {_plural(report.files, 'file')}, {status}{extra}")
    return "\n".join(lines) + "\n"


def json_report(reports: Sequence[FactoryReport]) -> dict[str, Any]:
    return {
        "valid": is_valid(reports),
        "factories": [
            {
                "path": r.path,
                "name": r.name,
                "files": r.files,
                "errors": [d.to_json() for d in r.diagnostics],
            }
            for r in reports
        ],
        "summary": {
            "files": sum(r.files for r in reports),
            "errors": sum(r.errors for r in reports),
            "warnings": sum(r.warnings for r in reports),
        },
    }


def escape_data(value: str) -> str:
    """Workflow-command message escaping."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """Workflow-command property escaping (``file=``, ``title=``...)."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def github(reports: Sequence[FactoryReport]) -> str:
    lines = []
    for report in reports:
        for d in report.diagnostics:
            props = [f"file={escape_property(d.path)}"]
            if d.line:
                props += [f"line={d.line}", f"col={d.column or 1}"]
            props.append(f"title={escape_property(d.rule)}")
            message = f"{d.message}\nhint: {d.hint}" if d.hint else d.message
            command = "error" if d.severity == "error" else "warning"
            lines.append(f"::{command} {','.join(props)}::{escape_data(message)}")
    errors, files = sum(r.errors for r in reports), sum(r.files for r in reports)
    verdict = "valid" if errors == 0 else f"invalid, {_plural(errors, 'error')}"
    checked = f"{_plural(files, 'file')} in {_plural(len(reports), 'factory', 'factories')}"
    lines.append(f"factoryctl validate: {checked}, {verdict}")
    return "\n".join(lines) + "\n"


def _uri(path: str) -> tuple[str, bool]:
    """A SARIF artifact URI: relative with forward slashes when possible (then ``%SRCROOT%``-based)."""
    posix = path.replace(os.sep, "/")
    if PurePosixPath(posix).is_absolute():
        try:
            posix = PurePosixPath(os.path.relpath(posix)).as_posix()
        except ValueError:
            return "file://" + quote(posix), False
        if posix.startswith("../"):
            return "file://" + quote(path.replace(os.sep, "/")), False
    return quote(posix.removeprefix("./")), True


def _rule_name(rule_id: str, description: str) -> str:
    words = "".join(ch if ch.isalnum() else " " for ch in description.split("(")[0]).split()
    return "".join(w[:1].upper() + w[1:] for w in words) or rule_id


def sarif(reports: Sequence[FactoryReport], *, tool_version: str = "") -> dict[str, Any]:
    catalogue = dict(RULES)
    for report in reports:
        for d in report.diagnostics:
            catalogue.setdefault(d.rule, d.rule)
    rule_ids = sorted(catalogue)
    rules = [
        {
            "id": rule_id,
            "name": _rule_name(rule_id, catalogue[rule_id]),
            "shortDescription": {"text": catalogue[rule_id]},
            "defaultConfiguration": {"level": "error"},
        }
        for rule_id in rule_ids
    ]
    results = []
    for report in reports:
        for d in report.diagnostics:
            uri, relative = _uri(d.path)
            artifact: dict[str, Any] = {"uri": uri}
            if relative:
                artifact["uriBaseId"] = "%SRCROOT%"
            physical: dict[str, Any] = {"artifactLocation": artifact}
            if d.line:
                physical["region"] = {"startLine": d.line, "startColumn": d.column or 1}
            message = f"{d.message} (hint: {d.hint})" if d.hint else d.message
            results.append(
                {
                    "ruleId": d.rule,
                    "ruleIndex": rule_ids.index(d.rule),
                    "level": "error" if d.severity == "error" else "warning",
                    "message": {"text": message},
                    "locations": [{"physicalLocation": physical}],
                }
            )
    driver: dict[str, Any] = {"name": "factoryctl", "rules": rules}
    if tool_version:
        driver["version"] = tool_version
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": driver},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
