"""``factoryctl version`` (docs/deployment.md, "Upgrading"): the version pyproject.toml builds, the schema
head the shipped migrations reach."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from factoryctl import __version__
from factoryctl.cli import main
from store.db import MIGRATIONS

ROOT = Path(__file__).resolve().parents[4]


def test_the_package_constant_is_the_version_pyproject_builds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__


def test_short_prints_the_version_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--short"]) == 0
    assert capsys.readouterr().out == f"{__version__}\n"


def test_json_names_the_newest_shipped_migration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    revisions = [
        m.group(1)
        for path in (MIGRATIONS / "versions").glob("*.py")
        if (m := re.search(r"^revision\s*=\s*['\"](\w+)['\"]", path.read_text(), re.M))
    ]
    assert info["version"] == __version__
    assert info["schema"] == max(revisions)


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"factoryctl {__version__}"
    assert lines[1].startswith("python 3.") and lines[2].startswith("database schema ")
