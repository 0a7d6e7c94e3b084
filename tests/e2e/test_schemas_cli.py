"""``factoryctl schemas export DIR`` (issue 28, part 7; docs/cli.md, "Editors"): the exported documents
resolve each other offline, as an editor's YAML language server loads them from disk, and the example
factory ships an up-to-date copy with a ``yaml-language-server`` modeline in every YAML file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from serve_support import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example-factory"
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)\n")


def validator_from_disk(directory: Path, name: str) -> Draft202012Validator:
    """A validator that finds sibling documents only in ``directory`` (no network), like an editor."""

    def retrieve(uri: str) -> Resource[Any]:
        return Resource.from_contents(json.loads((directory / uri).read_text()))

    registry: Registry[Any] = Registry(retrieve=retrieve)  # type: ignore[call-arg]
    schema = json.loads((directory / name).read_text())
    return Draft202012Validator(schema, registry=registry)


def test_export_writes_documents_that_resolve_each_other_offline(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    done = run_cli("schemas", "export", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote 14 schemas to {out}\n")
    factory = validator_from_disk(out, "factory.schema.json")
    assert list(factory.iter_errors(yaml.safe_load((EXAMPLE / "factory.yaml").read_text()))) == []
    bad = {"name": "x", "agentDefaults": {"harness": {"type": 3}}}  # harness: a $ref into common.schema.json
    assert [e.json_path for e in factory.iter_errors(bad)] != []
    webhook = validator_from_disk(out, "webhook.schema.json")
    errors = list(webhook.iter_errors({"authMode": "nope", "secretName": "s"}))
    assert [e.json_path for e in errors] == ["$.authMode"]


def test_check_reports_a_stale_directory_and_export_fixes_it(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    shutil.copytree(EXAMPLE / ".schemas", out)
    assert run_cli("schemas", "export", out, "--check").returncode == 0
    (out / "webhook.schema.json").write_text("{}\n")
    (out / "common.schema.json").unlink()
    stale = run_cli("schemas", "export", out, "--check")
    assert (stale.returncode, stale.stdout) == (1, "")
    assert f"stale: {out / 'common.schema.json'}\n" in stale.stderr
    assert f"stale: {out / 'webhook.schema.json'}\n" in stale.stderr
    assert stale.stderr.endswith(f"run: factoryctl schemas export {out}\n")
    assert (out / "webhook.schema.json").read_text() == "{}\n"  # --check wrote nothing
    assert run_cli("schemas", "export", out).returncode == 0
    assert run_cli("schemas", "export", out, "--check").returncode == 0


def test_a_file_in_place_of_dir_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    done = run_cli("schemas", "export", tmp_path / "f")
    assert (done.returncode, done.stderr) == (2, f"error: {tmp_path / 'f'} is not a directory\n")


def test_the_example_ships_current_schemas_and_a_modeline_in_every_yaml_file() -> None:
    assert run_cli("schemas", "export", EXAMPLE / ".schemas", "--check").returncode == 0
    kinds = {"": "factory", "webhooks": "webhook", "environments": "environment", "schedules": "schedule"}
    files = sorted(p for p in EXAMPLE.rglob("*.yaml") if ".schemas" not in p.parts)
    assert len(files) == 7
    for path in files:
        found = MODELINE.match(path.read_text())
        assert found is not None, path
        folder = path.parent.relative_to(EXAMPLE).as_posix().replace(".", "")
        target = (path.parent / found[1]).resolve()
        assert target == (EXAMPLE / ".schemas" / f"{kinds[folder]}.schema.json").resolve(), path
        schema = validator_from_disk(target.parent, target.name)
        assert list(schema.iter_errors(yaml.safe_load(path.read_text()))) == [], path
    done = run_cli("validate", EXAMPLE)
    assert (done.returncode, done.stdout) == (0, f"{EXAMPLE} (example): 13 files, valid\n")
