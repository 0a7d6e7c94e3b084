"""The factory-files answer: product codes, 1-based positions, the schema version and deferred resolutions."""

from __future__ import annotations

from pathlib import Path

from factoryctl.serve.factory_files import answer, code_of, deferred_resolutions, schema_version
from reconciler import loader
from reconciler.diagnostics import Diagnostic

EXAMPLE = Path(__file__).resolve().parents[4] / "example-factory"


def test_codes_follow_the_product_where_they_correspond() -> None:
    def code(rule: str, message: str) -> str:
        return code_of(Diagnostic(rule, message, "f.yaml"))

    assert code("FC002", "bad yaml") == "FF_INVALID_YAML"
    assert code("FC004", "duplicate key 'a'") == "FF_DUPLICATE_KEY"
    assert code("FC005", "missing front matter") == "FF_MALFORMED_FRONTMATTER"
    assert code("FC001", "'x' is not a factory: factory.yaml not found") == "FF_MISSING_FACTORY"
    assert code("FC001", "not valid UTF-8 (byte 0xe9)") == "FC001"
    assert code("FC010", "unknown key 'nmae' (did you mean 'name'?)") == "FF_UNKNOWN_FIELD"
    assert code("FC010", "missing required key 'url' in 'repos[0]'") == "FF_MISSING_REQUIRED"
    assert code("FC010", "'enabled' must be a boolean, got string") == "FF_TYPE_MISMATCH"
    assert code("FC010", "'setupTimeoutSeconds' must be at least 1, got 0") == "FF_INVALID_VALUE"
    assert code("FC060", "unknown environment 'x'") == "FF_INVALID_REFERENCE"
    assert code("FC040", "team secret 's' does not exist") == "FC040"  # state-dependent: no product code


def test_schema_version_is_declared_or_the_default() -> None:
    assert schema_version({"factory.yaml": b"schemaVersion: v2\nname: x\n"}) == "v2"
    assert schema_version({"factory.yaml": b"name: x\n"}) == "v1alpha1"
    assert schema_version({"factory.yaml": b"name: [unclosed\n"}) == "v1alpha1"
    assert schema_version({}) == "v1alpha1"


def test_deferred_resolutions_of_the_example_factory() -> None:
    loaded = loader.load(EXAMPLE, follow_symlinks=False)
    assert loaded.definition is not None, loaded.diagnostics
    found = deferred_resolutions(loaded)
    kinds = {(d["path"].rsplit("/", 1)[-1], d["field"], d["kind"]) for d in found}
    assert ("factory.yaml", "agentDefaults.model", "model") in kinds  # the model catalogue is the server's
    assert ("alerts.yaml", "secretName", "secret") in kinds
    # environment_id example-repo is declared in the tree: resolved offline, not deferred
    assert not any(d["kind"] == "environment" for d in found)


def test_answer_positions_are_one_based_and_warnings_do_not_invalidate(tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: x\n")
    loaded = loader.load(tmp_path, follow_symlinks=False)
    found = [Diagnostic("FC001", "stray file", "notes.txt", severity="warning")]
    out = answer({"factory.yaml": b"name: x\n"}, loaded, found, online=False)
    assert out["valid"] is True
    [d] = out["diagnostics"]
    assert (d["line"], d["column"], d["located"], d["severity"]) == (1, 1, False, "warning")
    assert (
        out["validation_scope"]["state_dependent"] == "not_checked" and out["state_dependent_checks_not_run"]
    )
    online = answer({"factory.yaml": b"name: x\n"}, loaded, [], online=True)
    assert (
        online["state_dependent_checks_not_run"] == []
        and online["validation_scope"]["state_dependent"] == "checked"
    )
