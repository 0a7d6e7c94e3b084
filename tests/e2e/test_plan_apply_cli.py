"""``factoryctl plan``/``apply`` as subprocesses: output, exit codes, UIDs, confirmation, atomicity."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pty
import re
import shutil
import subprocess
from pathlib import Path

import builders
import pytest
import yaml
from serve_support import CLI, clean_env, run_cli

from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, session_factory

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
EXAMPLE = Path(__file__).resolve().parents[2] / "example-factory"


ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}


def cli(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("--data-dir", data_dir, *args, env=ENV, stdin=stdin)


def write_automation(root: Path, name: str, webhook_uids: list[str]) -> None:
    front = {
        "title": f"Handle {name}",
        "triggers": [{"provider": "webhook", "event": "received", "filter": {"webhook_ids": webhook_uids}}],
    }
    (root / "automations" / name).mkdir(parents=True, exist_ok=True)
    text = f"---\n{yaml.safe_dump(front)}---\nTriage the event.\n"
    (root / "automations" / name / "automation.md").write_text(text)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "factory"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\ndescription: Demo factory\n")
    for name in ("github-issues", "alerts"):
        (root / "webhooks" / f"{name}.yaml").write_text(
            f"authMode: token\nsecretName: hooks\ndescription: {name}\n"
        )
    return root


def test_plan_apply_cycle(tmp_path: Path, tree: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "secrets", "create", "hooks", "--generate").returncode == 0

    planned = cli(data, "plan", str(tree), "--detailed-exitcode")
    assert planned.returncode == 2, planned.stderr
    assert planned.stdout.splitlines() == [
        "+ factory acme (fa_... assigned on apply)",
        "+ webhook alerts (wh_... assigned on apply)",
        "+ webhook github-issues (wh_... assigned on apply)",
        "",
        "Plan: 3 to add, 0 to change, 0 to destroy.",
    ]
    refused = cli(data, "apply", str(tree))  # stdin is not a terminal and no --auto-approve
    assert refused.returncode == 1 and "--auto-approve" in refused.stderr
    assert cli(data, "plan", str(tree), "--detailed-exitcode").returncode == 2  # nothing was applied

    applied = cli(data, "apply", str(tree), "--auto-approve", "--format", "json", "--git-revision", "c0ffee")
    assert applied.returncode == 0, applied.stderr
    doc = json.loads(applied.stdout)
    assert doc["outcome"] == "succeeded" and doc["revision"] == "c0ffee" and doc["summary"]["add"] == 3
    uids = {c["name"]: c["uid"] for c in doc["changes"] if c["kind"] == "webhook"}
    assert all(uid.startswith("wh_") for uid in uids.values())
    assert doc["factory"]["uid"].startswith("fa_")

    same = cli(data, "plan", str(tree), "--detailed-exitcode")
    assert (same.returncode, same.stdout) == (0, "No changes.\n")

    write_automation(tree, "triage", [uids["github-issues"]])
    (tree / "webhooks" / "alerts.yaml").write_text("authMode: token\nsecretName: hooks\nenabled: false\n")
    doc = json.loads(cli(data, "plan", str(tree), "--format", "json").stdout)
    assert doc["factory"]["webhooks"] == uids  # where scripts read UIDs without applying
    assert [(c["action"], c["kind"], c["name"], c["fields"]) for c in doc["changes"]] == [
        ("update", "webhook", "alerts", ["enabled", "description"]),
        ("create", "automation", "triage", []),
    ]
    assert doc["changes"][0]["values"] == [
        {"path": "enabled", "old": True, "new": False},
        {"path": "description", "old": "alerts", "new": None},
    ]
    text = cli(data, "apply", str(tree), "--auto-approve")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[:3] == [
        "~ webhook alerts: enabled, description",
        "    enabled: true -> false",
        '    description: "alerts" -> (none)',
    ]
    assert lines[3].startswith("+ automation triage (au_")
    assert "Apply complete! Resources: 1 added, 1 changed, 0 destroyed." in lines

    (tree / "webhooks" / "github-issues.yaml").rename(tree / "webhooks" / "gh.yaml")
    (tree / "webhooks" / "broken.yaml").write_text("authMode: token\nsecretName: [oops\n")
    bad = cli(data, "plan", str(tree), "--detailed-exitcode")
    assert bad.returncode == 1 and "broken.yaml:" in bad.stderr
    assert bad.stderr.splitlines()[-1].startswith("error: the plan failed: ")
    bad_apply = cli(data, "apply", str(tree), "--auto-approve", "--format", "json")
    assert bad_apply.returncode == 1
    assert any("broken.yaml" in d["path"] for d in json.loads(bad_apply.stdout)["diagnostics"])
    (tree / "webhooks" / "broken.yaml").unlink()
    # The automation still selects the renamed webhook's old UID: that webhook does not survive the apply.
    stale = cli(data, "plan", str(tree))
    assert stale.returncode == 1 and "automation.md" in stale.stderr
    write_automation(tree, "triage", [uids["alerts"]])
    renamed = cli(data, "plan", str(tree), "--detailed-exitcode")
    assert renamed.returncode == 2
    assert "-/+ webhook github-issues -> gh (new UID, new URL)" in renamed.stdout.splitlines()


def test_empty_and_missing_trees_are_refused(tmp_path: Path, tree: Path) -> None:
    data = tmp_path / "data"
    shutil.rmtree(tree / "webhooks")
    empty = cli(data, "apply", str(tree), "--auto-approve")
    assert empty.returncode == 1 and "--allow-empty" in empty.stderr
    allowed = cli(data, "apply", str(tree), "--auto-approve", "--allow-empty")
    assert allowed.returncode == 0 and "Apply complete! Resources: 1 added" in allowed.stdout
    missing = cli(data, "plan", str(tmp_path / "nope"), "--allow-empty")
    assert missing.returncode == 1


def test_apply_on_a_terminal_asks_for_yes(tmp_path: Path, tree: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "secrets", "create", "hooks", "--generate").returncode == 0

    def on_tty(answer: bytes) -> tuple[int, str]:
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [*CLI, "--data-dir", str(data), "apply", str(tree)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=clean_env(ENV),
        )
        os.close(slave)
        os.write(master, answer)
        out, _ = proc.communicate(timeout=120)
        os.close(master)
        return proc.returncode, out.decode()

    code, out = on_tty(b"no\n")
    assert code == 1 and "Plan: 3 to add" in out and "cancelled" in out
    code, out = on_tty(b"yes\n")
    assert code == 0 and "Apply complete! Resources: 3 added" in out
    assert re.search(r"^\+ webhook alerts \(wh_[0-9a-z]{26}\)", out, re.MULTILINE)  # the minted UID


def create_secrets(data_dir: Path, root: Path) -> None:
    """The example's team secrets, in the shape each webhook needs (in-process: the CLI is tested above)."""

    async def go() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{data_dir / 'factory.db'}")
        await migrate(engine)
        box, clock = SecretBox.from_setting(KEY), SystemClock()
        async with session_factory(engine)() as s, s.begin():
            team = await builders.team(s)
            for path in sorted((root / "webhooks").glob("*.yaml")):
                spec = yaml.safe_load(path.read_text())
                standard = spec.get("signatureScheme") in ("standard_webhooks", "standard-webhooks", "svix")
                # Standard Webhooks secrets have their own shape; None lets the builder generate one.
                value = "whsec_" + base64.b64encode(os.urandom(32)).decode() if standard else None
                if await secret_store.get(s, team.id, spec["secretName"]) is None:
                    await builders.secret(s, box, clock, team.id, spec["secretName"], value)
        await engine.dispose()

    asyncio.run(go())


def test_example_factory_plans_and_applies_in_one_step_on_an_empty_store(tmp_path: Path) -> None:
    """Webhooks and the automations that name them, in one commit: UIDs are resolved at apply."""
    data = tmp_path / "data"
    data.mkdir()
    root = shutil.copytree(EXAMPLE, tmp_path / "example")
    create_secrets(data, root)
    plan = cli(data, "plan", str(root), "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "webhook github-issues (known after apply)" in plan.stdout
    applied = cli(data, "apply", str(root), "--auto-approve", "--format", "json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    changes = json.loads(applied.stdout)["changes"]
    uids = {c["name"]: c["uid"] for c in changes if c["kind"] == "webhook"}
    triage = next(c for c in changes if c["kind"] == "automation" and c["name"] == "triage-github-issues")
    assert triage["webhooks"] == {"github-issues": uids["github-issues"]}  # resolved in the same apply
    again = cli(data, "plan", str(root), "--detailed-exitcode")
    assert (again.returncode, again.stdout) == (0, "No changes.\n")
