"""``factoryctl watch PATH``: applies on start and on every saved edit; broken edits change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from serve_support import wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
NO_CHANGES = {"add": 0, "change": 0, "destroy": 0}


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


def in_sync(data: Path, root: Path, webhook: str) -> bool:
    """The store holds what the files say (a plan has nothing to do) and ``webhook`` has a UID.

    A plan lists every webhook of the files, stored or not: only a UID shows the watcher applied it.
    """
    result = plan(data, root)
    return result["summary"] == NO_CHANGES and result["factory"]["webhooks"].get(webhook) is not None


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
        wait_for(lambda: in_sync(data, root, "a"), timeout=20, what="the start-up apply")
        (root / "webhooks" / "b.yaml").write_text("secretName: s\n")
        wait_for(lambda: in_sync(data, root, "b"), timeout=20, what="the new webhook applied")
        (root / "webhooks" / "b.yaml").write_text("secretName: [broken\n")
        wait_for(
            lambda: "b.yaml:2:1: error[FC002]" in (tmp_path / "watch.log").read_text(),
            timeout=20,
            what="the broken edit reported",
        )
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert proc.returncode == 0
