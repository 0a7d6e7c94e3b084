"""``factoryctl secrets`` as a subprocess: values go in once, come out at most once, are never listed."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from serve_support import run_cli

from store import secrets as secret_store
from store.crypto import SecretBox
from store.db import create_engine, session_factory
from store.teams import ensure_team

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def cli(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}
    return run_cli("--data-dir", data_dir, *args, env=env, stdin=stdin)


def reveal(data_dir: Path, name: str) -> tuple[str, int]:
    async def go() -> tuple[str, int]:
        engine = create_engine(f"sqlite+aiosqlite:///{data_dir / 'factory.db'}")
        try:
            async with session_factory(engine)() as s:
                team = await ensure_team(s)
                return await secret_store.reveal(s, SecretBox.from_setting(KEY), team.id, name)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_generated_value_is_printed_once_and_never_listed(tmp_path: Path) -> None:
    created = cli(tmp_path, "secrets", "create", "gh-secret", "--generate")
    assert created.returncode == 0, created.stderr
    value = created.stdout.strip().splitlines()[-1]
    assert len(value) >= 32 and reveal(tmp_path, "gh-secret") == (value, 1)
    listed = cli(tmp_path, "secrets", "list")
    assert listed.returncode == 0 and "gh-secret" in listed.stdout and "v1" in listed.stdout
    assert value not in listed.stdout
    doc = json.loads(cli(tmp_path, "secrets", "list", "--format", "json").stdout)
    assert [sorted(s) for s in doc["secrets"]] == [["created_at", "name", "scope", "updated_at", "version"]]
    assert value not in json.dumps(doc)


def test_supplied_value_is_never_printed_and_set_adds_a_version(tmp_path: Path) -> None:
    created = cli(tmp_path, "secrets", "create", "s", "--from-stdin", stdin="hunter2-first\n")
    assert created.returncode == 0 and "hunter2" not in created.stdout + created.stderr
    assert reveal(tmp_path, "s") == ("hunter2-first", 1)  # exactly one trailing newline stripped
    updated = cli(tmp_path, "secrets", "set", "s", "--from-stdin", stdin="hunter2-second")
    assert updated.returncode == 0 and "version 2" in updated.stdout and "hunter2" not in updated.stdout
    assert reveal(tmp_path, "s") == ("hunter2-second", 2)
    doc = json.loads(cli(tmp_path, "secrets", "list", "--format", "json").stdout)
    assert [(s["name"], s["version"]) for s in doc["secrets"]] == [("s", 2)]


def test_errors_are_clear_and_exit_1(tmp_path: Path) -> None:
    no_value = cli(tmp_path, "secrets", "create", "s")  # stdin is not a terminal, no flag
    assert no_value.returncode == 1 and "--from-stdin" in no_value.stderr
    assert cli(tmp_path, "secrets", "create", "s", "--generate").returncode == 0
    dup = cli(tmp_path, "secrets", "create", "s", "--generate")
    assert dup.returncode == 1 and "already exists" in dup.stderr
    missing = cli(tmp_path, "secrets", "set", "nope", "--generate")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    empty = cli(tmp_path, "secrets", "create", "e", "--from-stdin", stdin="\n")
    assert empty.returncode == 1 and "empty" in empty.stderr
    assert cli(tmp_path, "secrets", "delete", "nope").returncode == 1


def test_delete_refuses_while_a_live_webhook_uses_the_secret(tmp_path: Path) -> None:
    data = tmp_path / "data"
    root = tmp_path / "factory"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    (root / "webhooks" / "alerts.yaml").write_text(yaml.safe_dump({"secretName": "used"}))
    assert cli(data, "secrets", "create", "used", "--generate").returncode == 0
    applied = cli(data, "apply", str(root), "--auto-approve")
    assert applied.returncode == 0, applied.stderr
    rotated = cli(data, "secrets", "set", "used", "--generate")
    assert rotated.returncode == 0 and "acme/alerts" in rotated.stdout
    refused = cli(data, "secrets", "delete", "used")
    assert refused.returncode == 1 and "acme/alerts" in refused.stderr
    assert "used" in cli(data, "secrets", "list").stdout
    forced = cli(data, "secrets", "delete", "used", "--force")
    assert forced.returncode == 0 and "used" not in cli(data, "secrets", "list").stdout


def test_scope_round_trip(tmp_path: Path) -> None:
    """``--scope`` on create and set (docs/management.md, "Team secrets"): ``webhook`` unless ``run`` is
    asked for; ``set --scope`` alone changes only the scope; a live webhook's secret stays ``webhook``."""
    from factoryctl.commands import secrets as secrets_command

    assert secrets_command.SCOPES == (secret_store.DEFAULT_SCOPE, secret_store.RUN)  # the CLI's default too
    data, root = tmp_path / "data", tmp_path / "factory"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    (root / "webhooks" / "alerts.yaml").write_text(yaml.safe_dump({"secretName": "hook"}))
    created = cli(data, "secrets", "create", "hook", "--generate")
    assert created.returncode == 0 and "scope webhook" in created.stdout
    created = cli(data, "secrets", "create", "GH_TOKEN", "--scope", "run", "--from-stdin", stdin="ghp-1234\n")
    assert created.returncode == 0 and "scope run" in created.stdout and "ghp-1234" not in created.stdout

    def listed() -> dict[str, tuple[str, int]]:
        doc = json.loads(cli(data, "secrets", "list", "--format", "json").stdout)
        return {s["name"]: (s["scope"], s["version"]) for s in doc["secrets"]}

    assert listed() == {"GH_TOKEN": ("run", 1), "hook": ("webhook", 1)}
    text = cli(data, "secrets", "list").stdout
    assert "GH_TOKEN  run  v1" in text and "hook  webhook  v1" in text

    rescoped = cli(data, "secrets", "set", "GH_TOKEN", "--scope", "webhook")  # no value read, no prompt
    assert rescoped.returncode == 0 and "version 1, scope webhook" in rescoped.stdout
    both = cli(data, "secrets", "set", "GH_TOKEN", "--scope", "run", "--from-stdin", stdin="ghp-5678")
    assert both.returncode == 0 and listed()["GH_TOKEN"] == ("run", 2)
    assert reveal(data, "GH_TOKEN") == ("ghp-5678", 2)
    bad = cli(data, "secrets", "create", "x", "--scope", "everything", "--generate")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr

    assert cli(data, "apply", str(root), "--auto-approve").returncode == 0
    refused = cli(data, "secrets", "set", "hook", "--scope", "run")
    assert refused.returncode == 1 and "acme/alerts" in refused.stderr
    assert listed()["hook"] == ("webhook", 1)
