"""Diagnostics: one validation problem, with a stable rule ID and a file:line:column location."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Stable rule IDs (used by SARIF and --format json; never renumber, only add).
RULES: dict[str, str] = {
    "FC001": "File cannot be read (missing, not UTF-8, too large, symlink loop)",
    "FC002": "YAML syntax error",
    "FC003": "Document is not a mapping",
    "FC004": "Duplicate YAML key",
    "FC005": "Missing or malformed front matter",
    "FC010": "Schema violation",
    "FC011": "Repository URL or ref git must not be given",
    "FC012": "Invalid environment network policy",
    "FC020": "Duplicate name",
    "FC021": "Too many webhooks in one factory",
    "FC030": "Invalid payload filter",
    "FC031": "Trigger names a webhook file instead of a UID",
    "FC032": "Trigger names a webhook file that does not exist",
    "FC040": "Secret does not exist",
    "FC041": "url_token secret is not URL-safe",
    "FC042": "Standard Webhooks secret does not decode",
    "FC043": "Webhook UID does not exist in this factory",
    "FC044": "Secret scope does not fit its use",
    "FC050": "Empty definitions tree",
    "FC060": "Unknown environment",
    "FC061": "Unknown agent",
    "FC062": "MCP server reference names no server of the environment",
    "FC070": "Invalid cron expression",
    "FC071": "Unknown time zone",
    "FC072": "Schedule names an automation that does not exist",
    "FC080": "Notification or MCP server URL refused (scheme, credentials or a private-network address)",
    "FC081": "Invalid notification events or filter",
    "FC082": "Too many notification endpoints in one factory",
    "FC045": "Invalid trigger",
    "FC046": "Alias already taken",
    "FC063": "Not exactly one foreman",
    "FC064": "Invalid harness",
    "FC065": "Unknown runner",
    "FC066": "Runner, scorer or benchmark is inconsistent",
    "FC073": "Invalid inline schedule",
    "FC090": "Legacy format (deprecated)",
    "FC091": "Not supported by factoryctl yet",
    "FC092": "Provider not connected",
    "FC093": "Legacy key in a v1alpha1 factory.yaml",
}


@dataclass(frozen=True)
class Diagnostic:
    rule: str
    message: str
    path: str
    line: int = 0
    column: int = 0
    hint: str | None = None
    severity: str = "error"

    def location(self) -> str:
        if self.line:
            return f"{self.path}:{self.line}:{self.column or 1}"
        return self.path

    def __str__(self) -> str:
        text = f"{self.location()}: {self.severity}[{self.rule}]: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "hint": self.hint,
        }
