"""``factoryctl validate`` as a subprocess, as CI runs it: exit codes and all four formats."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import builders
import pytest
from serve_support import free_port, run_cli

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
BAD = "tests/fixtures/bad-factory"
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def validate(
    *args: str, env: dict[str, str] | None = None, data_dir: Path | None = None, database: str | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = ["--data-dir", str(data_dir)] if data_dir else []
    prefix += ["--database", database] if database else []
    return run_cli(
        *prefix,
        "validate",
        *args,
        env={"NO_COLOR": "1", "FACTORY_SECRET_KEY": KEY} | (env or {}),
        cwd=REPO,
        drop=("FACTORY_", "GITHUB_"),
    )


def test_example_factory_is_valid_in_every_format() -> None:
    text = validate("example-factory")
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout == "example-factory (example): 13 files, valid\n"
    data = json.loads(validate("example-factory", "--format", "json").stdout)
    assert data["valid"] is True
    assert data["factories"] == [{"path": "example-factory", "name": "example", "files": 13, "errors": []}]
    gh = validate("example-factory", "--format", "github")
    assert (gh.returncode, gh.stdout) == (0, "factoryctl validate: 13 files in 1 factory, valid\n")
    sarif = json.loads(validate("example-factory", "--format", "sarif").stdout)
    assert sarif["runs"][0]["results"] == []


def test_bad_factory_text_points_at_file_and_line() -> None:
    proc = validate(BAD)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert (
        f"{BAD}/webhooks/dupkeys.yaml:3:1: error[FC004]: duplicate key 'secretName' (first defined at line 1)"
        in lines
    )
    assert (
        f"{BAD}/webhooks/unknown-key.yaml:1:1: error[FC010]: "
        "unknown key 'authmode' (did you mean 'authMode'?)" in lines
    )
    assert f"{BAD}/automations/no-front-matter/automation.md:1:1: error[FC005]: " in proc.stdout
    assert (
        lines[-1] == f"{BAD} (bad): 22 files, invalid, 25 errors, 1 warning"
    )  # FC090: its legacy agents map
    assert "\033[" not in proc.stdout


def test_bad_factory_json_github_and_sarif() -> None:
    data = json.loads(validate(BAD, "--format", "json").stdout)
    assert data["valid"] is False
    assert data["summary"] == {"files": 22, "errors": 25, "warnings": 1}
    rules = {e["rule"] for e in data["factories"][0]["errors"]}
    assert rules >= {"FC001", "FC002", "FC003", "FC004", "FC005", "FC010", "FC020", "FC030", "FC031", "FC060"}

    gh = validate(BAD, "--format", "github")
    assert gh.returncode == 1
    assert (
        f"::error file={BAD}/webhooks/malformed.yaml,line=3,col=8,title=FC002::YAML syntax error" in gh.stdout
    )
    assert sum(line.startswith("::error ") for line in gh.stdout.splitlines()) == 25

    sarif = validate(BAD, "--format", "sarif")
    assert sarif.returncode == 1
    run = json.loads(sarif.stdout)["runs"][0]
    assert len(run["results"]) == 26  # the 25 errors and the FC090 warning
    assert sum(r["level"] == "warning" for r in run["results"]) == 1
    first = run["results"][0]
    assert first["ruleId"] == "FC010"
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        f"{BAD}/automations/bad-types/automation.md"
    )
    assert first["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 10}


def test_github_format_is_the_default_on_github_actions() -> None:
    proc = validate(BAD, env={"GITHUB_ACTIONS": "true"})
    assert proc.returncode == 1
    assert proc.stdout.startswith("::error file=")


def test_several_paths_one_verdict() -> None:
    proc = validate("example-factory", BAD, "--format", "json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert [f["name"] for f in data["factories"]] == ["example", "bad"]
    assert data["factories"][0]["errors"] == []


def test_usage_errors_exit_2() -> None:
    assert validate().returncode == 2
    assert validate("example-factory", "--format", "xml").returncode == 2
    keyless = validate("example-factory", "--server", f"http://127.0.0.1:{free_port()}")
    assert keyless.returncode == 3  # no key is no usage error (the public tiers), but nobody answers
    assert (
        "no FACTORY_API_KEY: the server runs the parser and state-independent checks only" in keyless.stderr
    )


def test_an_unreachable_server_exits_3_not_1() -> None:
    """Invalid definitions (1) and a server that cannot be reached (3) must not look alike to CI."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    proc = validate("example-factory", "--server", nowhere, env={"FACTORY_API_KEY": "fk_x"})
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr.startswith(f"error: cannot reach {nowhere}: ")
    assert proc.stderr.endswith(" (connection_failed)\n")


def test_missing_directory_is_a_usage_error_not_a_crash(tmp_path: Path) -> None:
    """A path that is not a directory is a mistake on the command line (2), not invalid definitions (1)."""
    proc = validate("no-such-dir", "example-factory")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: no-such-dir does not exist (validate takes factory directories)\n"
    (tmp_path / "file.yaml").write_text("name: x\n")
    proc = validate(str(tmp_path / "file.yaml"), "--format", "sarif")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.endswith("file.yaml is not a directory (validate takes factory directories)\n")


async def _store(url: str, secrets: dict[str, str]) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
        clock, box = SystemClock(), SecretBox.from_setting(KEY)
        async with session_factory(engine)() as session, session.begin():
            team = await builders.team(session)
            for name, value in secrets.items():
                await builders.secret(session, box, clock, team.id, name, value)
    finally:
        await engine.dispose()


def test_online_checks_with_a_store(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'factory.db'}"
    asyncio.run(_store(url, {"github-webhook-secret": "gh"}))
    proc = validate("example-factory", "--format", "json", data_dir=tmp_path, database=url)
    assert proc.returncode == 1, proc.stderr
    found = [(e["rule"], e["path"], e["line"]) for e in json.loads(proc.stdout)["factories"][0]["errors"]]
    assert ("FC040", "example-factory/webhooks/stripe-payments.yaml", 6) in found  # below the modeline
    assert ("FC040", "example-factory/webhooks/alerts.yaml", 3) in found
    assert not any(rule == "FC043" for rule, _, _ in found)  # names, not UIDs: nothing to look up

    asyncio.run(_store(url, {"stripe-signing-secret": "whsec_x", "alerts-token": "tok"}))
    ok = validate("example-factory", data_dir=tmp_path, env={"FACTORY_DATABASE_URL": url})
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_online_checks_report_an_unreachable_store(tmp_path: Path) -> None:
    proc = validate(
        "example-factory", data_dir=tmp_path, database=f"sqlite+aiosqlite:///{tmp_path}/nope/x.db"
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: no store at {tmp_path}/nope/x.db (the file does not exist)")
    assert not (tmp_path / "nope").exists()  # never created to be checked against
    postgres = validate("example-factory", database="postgresql+asyncpg://nobody@127.0.0.1:9/none")
    assert postgres.returncode == 1
    assert "cannot run the online checks" in postgres.stderr
    assert "Traceback" not in proc.stderr + postgres.stderr
