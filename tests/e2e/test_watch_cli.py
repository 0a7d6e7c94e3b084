"""``factoryctl watch PATH``: applies on start and on every saved edit; broken edits change nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from serve_support import run_cli, running, stop, wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY}
NO_CHANGES = {"add": 0, "change": 0, "destroy": 0}


def run(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--data-dir", data, *args, env=ENV, timeout=60)


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
    log = tmp_path / "watch.log"
    with running("--data-dir", data, "watch", root, log=log, env=ENV) as proc:
        watched = {"timeout": 20, "alive": [proc], "logs": [log]}
        wait_for(lambda: in_sync(data, root, "a"), what="the start-up apply", **watched)
        (root / "webhooks" / "b.yaml").write_text("secretName: s\n")
        wait_for(lambda: in_sync(data, root, "b"), what="the new webhook applied", **watched)
        (root / "webhooks" / "b.yaml").write_text("secretName: [broken\n")
        wait_for(
            lambda: "b.yaml:2:1: error[FC002]" in log.read_text(), what="the broken edit reported", **watched
        )
        assert proc.poll() is None
        assert stop(proc, timeout=10) == 0
