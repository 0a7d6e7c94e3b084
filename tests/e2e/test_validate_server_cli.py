"""``factoryctl validate --server URL`` against a running ``factoryctl serve``: the same output as a local run
with the same store, in every format, and the same exit codes (docs/cli.md, "validate")."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import Served, run_cli, serving

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
BAD = "tests/fixtures/bad-factory"
GOOD = "example-factory"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("serve")
    made = run_cli("--data-dir", data_dir, "secrets", "create", "alerts-token", "--from-stdin", stdin="tok\n")
    assert made.returncode == 0, made.stderr
    with serving(data_dir) as server:
        yield server


def validate(served: Served, *args: str, remote: bool) -> subprocess.CompletedProcess[str]:
    """``validate ARGS`` through the server, or locally with the server's store (the same online checks)."""
    where = ("--server", served.url) if remote else ()
    database = f"sqlite+aiosqlite:///{served.data_dir / 'factory.db'}"
    prefix = () if remote else ("--data-dir", str(served.data_dir), "--database", database)
    env = {"NO_COLOR": "1", "FACTORY_API_KEY": served.key} if remote else {"NO_COLOR": "1"}
    return run_cli(*prefix, "validate", *args, *where, env=env, cwd=REPO, drop=("FACTORY_", "GITHUB_"))


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
@pytest.mark.parametrize("paths", [(BAD,), (GOOD, BAD), (GOOD,)], ids=["bad", "both", "good"])
def test_server_and_local_runs_print_the_same(served: Served, fmt: str, paths: tuple[str, ...]) -> None:
    local = validate(served, *paths, "--format", fmt, remote=False)
    remote = validate(served, *paths, "--format", fmt, remote=True)
    assert (remote.returncode, remote.stdout) == (local.returncode, local.stdout), remote.stderr
    assert local.returncode == 1  # the example needs secrets this store lacks; the fixture is broken
    if fmt == "json":
        report = json.loads(remote.stdout)
        rules = {e["rule"] for f in report["factories"] for e in f["errors"]}
        assert "FC040" in rules  # a missing secret: the state-dependent tier ran on the server
        assert "/tmp" not in remote.stdout and "factory-validate" not in remote.stdout


def test_a_refused_key_exits_1_and_no_server_exits_3(served: Served) -> None:
    refused = run_cli(
        "validate",
        GOOD,
        "--server",
        served.url,
        env={"FACTORY_API_KEY": "fk_wrong"},
        cwd=REPO,
        drop=("FACTORY_", "GITHUB_"),
    )
    assert refused.returncode == 1 and "invalid or revoked API key" in refused.stderr


def test_without_a_key_the_server_runs_the_public_tiers(served: Served) -> None:
    """CI without a key still gets file:line diagnostics; only the team's state is left unchecked."""
    keyless = run_cli(
        "validate", GOOD, BAD, "--server", served.url, "--format", "json",
        env={"NO_COLOR": "1"}, cwd=REPO, drop=("FACTORY_", "GITHUB_"),
    )  # fmt: skip
    assert keyless.returncode == 1, keyless.stderr  # the broken fixture
    assert "no FACTORY_API_KEY" in keyless.stderr
    report = json.loads(keyless.stdout)
    rules = {e["rule"] for f in report["factories"] for e in f["errors"]}
    assert "FC010" in rules and "FC040" not in rules  # schema errors yes, the missing secret not checked
    assert report["factories"][0]["errors"] == [] or all(
        e["severity"] == "warning" for e in report["factories"][0]["errors"]
    )
