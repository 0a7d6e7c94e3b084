"""``factoryctl watch PATH``: applies on start and on every saved edit; broken edits change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def run(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")} | {"FACTORY_SECRET_KEY": KEY}
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def plan(data: Path, root: Path) -> dict:  # type: ignore[type-arg]
    result = run(data, "plan", str(root), "--format", "json")
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def wait_until(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_watch_applies_edits(tmp_path: Path) -> None:
    data, root = tmp_path / "data", tmp_path / "factory"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: watched\n")
    (root / "webhooks" / "a.yaml").write_text("secretName: s\n")
    assert run(data, "secrets", "create", "s", "--generate").returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")} | {"FACTORY_SECRET_KEY": KEY}
    log = (tmp_path / "watch.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data), "watch", str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        wait_until(lambda: plan(data, root)["summary"] == {"add": 0, "change": 0, "destroy": 0})
        (root / "webhooks" / "b.yaml").write_text("secretName: s\n")
        wait_until(lambda: "b" in plan(data, root)["factory"]["webhooks"])
        (root / "webhooks" / "b.yaml").write_text("secretName: [broken\n")
        wait_until(lambda: "b.yaml:2:1: error[FC002]" in (tmp_path / "watch.log").read_text())
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
