"""tests/fixtures/bad-factory: many distinct problems in many files, all reported in one run."""

from __future__ import annotations

from pathlib import Path

from reconciler import rules
from reconciler.loader import load
from reconciler.report import FactoryReport

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "bad-factory"

EXPECTED = [
    ("automations/bad-types/automation.md", 2, 10, "FC010"),
    ("automations/bad-types/automation.md", 6, 7, "FC010"),
    ("automations/file-name-trigger/automation.md", 8, 11, "FC031"),
    ("automations/file-name-trigger/automation.md", 9, 11, "FC031"),
    ("automations/latin1/automation.md", 2, 11, "FC001"),
    ("automations/mixed-filter/automation.md", 9, 9, "FC030"),
    ("automations/no-front-matter/automation.md", 1, 1, "FC005"),
    ("automations/unknown-agent/automation.md", 2, 1, "FC061"),
    ("automations/unknown-agent/automation.md", 4, 3, "FC060"),
    ("automations/unterminated/automation.md", 1, 1, "FC005"),
    ("environments/broken.yaml", 1, 22, "FC010"),
    ("environments/broken.yaml", 3, 5, "FC010"),
    ("environments/broken.yaml", 3, 11, "FC010"),
    ("factory.yaml", 2, 1, "FC090"),  # the legacy agents map: deprecated, a warning
    ("factory.yaml", 4, 5, "FC060"),
    ("webhooks/a-list.yaml", 1, 1, "FC003"),
    ("webhooks/bad-header.yaml", 2, 19, "FC010"),
    ("webhooks/bad-scheme.yaml", 2, 18, "FC010"),
    ("webhooks/dupkeys.yaml", 3, 1, "FC004"),
    ("webhooks/malformed.yaml", 3, 8, "FC002"),
    ("webhooks/no-scheme.yaml", 1, 1, "FC010"),
    ("webhooks/no-secret.yaml", 1, 1, "FC010"),
    ("webhooks/scheme-without-signature.yaml", 2, 1, "FC010"),
    ("webhooks/twice.yml", 1, 1, "FC020"),
    ("webhooks/unknown-key.yaml", 1, 1, "FC010"),
    ("webhooks/wrong-type.yaml", 2, 10, "FC010"),
]


def test_every_problem_of_every_file_is_reported_at_its_line() -> None:
    result = load(ROOT)
    assert result.definition is not None
    report = FactoryReport.from_load(result, rules.check(result.definition))
    prefix = ROOT.as_posix() + "/"
    found = [(d.path.removeprefix(prefix), d.line, d.column, d.rule) for d in report.diagnostics]
    assert found == EXPECTED
    assert report.errors == len(EXPECTED) - 1  # the FC090 warning
    assert result.files == 22
