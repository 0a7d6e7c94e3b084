"""Output formats: text, the documented JSON shape, GitHub workflow commands and SARIF 2.1.0."""

from __future__ import annotations

import json

from reconciler.diagnostics import RULES, Diagnostic
from reconciler.report import (
    FactoryReport,
    escape_data,
    escape_property,
    github,
    json_report,
    render,
    sarif,
    text,
)

BAD = FactoryReport(
    path="repo/factory",
    name="demo",
    files=3,
    diagnostics=(
        Diagnostic(
            "FC010", "unknown key 'authmode' (did you mean 'authMode'?)", "repo/factory/webhooks/a.yaml", 2, 1
        ),
        Diagnostic(
            "FC040", "team secret 's' does not exist", "repo/factory/webhooks/b.yaml", 3, 13, hint="create it"
        ),
        Diagnostic("FC001", "ignored: stray file", "repo/factory/webhooks/x.txt", severity="warning"),
    ),
)
GOOD = FactoryReport(path="other", name="ok", files=2, diagnostics=())


def test_text_lines_hints_and_summary() -> None:
    out = text([BAD, GOOD])
    assert out.splitlines() == [
        "repo/factory/webhooks/a.yaml:2:1: error[FC010]: unknown key 'authmode' (did you mean 'authMode'?)",
        "repo/factory/webhooks/b.yaml:3:13: error[FC040]: team secret 's' does not exist",
        "    hint: create it",
        "repo/factory/webhooks/x.txt: warning[FC001]: ignored: stray file",
        "repo/factory (demo): 3 files, invalid, 2 errors, 1 warning",
        "other (ok): 2 files, valid",
    ]
    assert "\033[" not in out
    assert "\033[31m" in text([BAD], color=True)


def test_json_shape_is_stable() -> None:
    data = json.loads(render("json", [BAD, GOOD]))
    assert data == json_report([BAD, GOOD])
    assert set(data) == {"valid", "factories", "summary"}
    assert data["valid"] is False
    assert data["summary"] == {"files": 5, "errors": 2, "warnings": 1}
    first = data["factories"][0]
    assert set(first) == {"path", "name", "files", "errors"}
    assert (first["path"], first["name"], first["files"]) == ("repo/factory", "demo", 3)
    assert first["errors"][1] == {
        "rule": "FC040",
        "severity": "error",
        "message": "team secret 's' does not exist",
        "path": "repo/factory/webhooks/b.yaml",
        "line": 3,
        "column": 13,
        "hint": "create it",
    }
    assert json_report([GOOD])["valid"] is True


def test_github_escaping() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    weird = FactoryReport(
        "f",
        "x",
        1,
        (Diagnostic("FC010", "50% wrong,\nreally: yes", "f/we,ird:name.yaml", 4, 2, hint="fix: it"),),
    )
    lines = github([weird]).splitlines()
    assert (
        lines[0] == "::error file=f/we%2Cird%3Aname.yaml,line=4,col=2,title=FC010::"
        "50%25 wrong,%0Areally: yes%0Ahint: fix: it"
    )
    assert lines[-1] == "factoryctl validate: 1 file in 1 factory, invalid, 1 error"


def test_github_commands_for_errors_and_warnings() -> None:
    lines = github([BAD, GOOD]).splitlines()
    assert lines[0].startswith(
        "::error file=repo/factory/webhooks/a.yaml,line=2,col=1,title=FC010::unknown key"
    )
    assert lines[2] == "::warning file=repo/factory/webhooks/x.txt,title=FC001::ignored: stray file"
    assert lines[-1] == "factoryctl validate: 5 files in 2 factories, invalid, 2 errors"


def test_sarif_structure() -> None:
    log = sarif([BAD, GOOD], tool_version="1.2.3")
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("factoryctl", "1.2.3")
    ids = [r["id"] for r in driver["rules"]]
    assert set(RULES) <= set(ids)
    assert all(r["shortDescription"]["text"] for r in driver["rules"])
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["FC010", "FC040", "FC001"]
    assert [r["level"] for r in results] == ["error", "error", "warning"]
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in results)
    location = results[1]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "repo/factory/webhooks/b.yaml", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 3, "startColumn": 13}
    assert results[1]["message"]["text"] == "team secret 's' does not exist (hint: create it)"
    assert "region" not in results[2]["locations"][0]["physicalLocation"]


def test_sarif_lists_unknown_rule_ids_and_makes_paths_relative(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    report = FactoryReport(
        "x", "x", 1, (Diagnostic("FC999", "new rule", str(tmp_path / "dir" / "my file.yaml"), 1, 1),)
    )
    run = sarif([report])["runs"][0]
    assert "FC999" in [r["id"] for r in run["tool"]["driver"]["rules"]]
    uri = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "dir/my%20file.yaml"


def test_render_rejects_unknown_format() -> None:
    try:
        render("xml", [GOOD])
    except ValueError as exc:
        assert "text, json, github, sarif" in str(exc)
    else:
        raise AssertionError("expected ValueError")
