"""``factoryctl validate / plan / apply`` on notifications, as subprocesses (the store: SQLite in
--data-dir)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OPS = "url: https://hooks.example.com/factory\nsecretName: OPS_HOOK\nevents: [SUCCEEDED, FAILED, ERROR]\n"


def factoryctl(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``factoryctl ARGS`` to completion, without the caller's own FACTORY_* and GITHUB_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", *map(str, args)],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env | {"NO_COLOR": "1", "FACTORY_SECRET_KEY": KEY},
        timeout=120,
    )


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {"factory.yaml": "name: acme\n", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_validate_prints_each_bad_notification_at_its_line(tmp_path: Path) -> None:
    root = write(
        tmp_path / "f",
        {
            "notifications/ok.yaml": OPS,
            "notifications/metadata.yaml": (
                "# the cloud's metadata service\n"
                "url: https://169.254.169.254/\nsecretName: s\nevents: [FAILED]\n"
            ),
            "notifications/plain.yaml": "secretName: s\nevents: [FAILED]\nurl: http://example.com/hook\n",
            "notifications/events.yaml": (
                "url: https://hooks.example.com/\nsecretName: s\nevents: [FAILED, SUCEEDED]\n"
            ),
            "notifications/shape.yaml": "url: https://hooks.example.com/\nsecretName: s\n",
        },
    )
    proc = factoryctl("validate", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    shown = root.as_posix()
    states = "QUEUED, PENDING, CLAIMED, INPROGRESS, BLOCKED, SUCCEEDED, FAILED, ERROR, CANCELLED"
    assert proc.stdout.splitlines() == [
        f"{shown}/notifications/events.yaml:3:18: error[FC081]: unknown event 'SUCEEDED':"
        f" use a run state ({states}), run.<state> or run.*",
        "    hint: did you mean 'SUCCEEDED'?",
        f"{shown}/notifications/metadata.yaml:2:6: error[FC080]: notification URL refused:"
        " the URL points at a private network: 169.254.169.254 is link-local"
        " (cloud metadata services live there)",
        "    hint: to reach an internal service, run a relay on the server's host and point the URL at it"
        " (http://127.0.0.1:PORT/...)",
        f"{shown}/notifications/plain.yaml:3:6: error[FC080]: notification URL refused:"
        " plain http is allowed only to a loopback host (localhost, 127.0.0.1, ::1); use https",
        f"{shown}/notifications/shape.yaml:1:1: error[FC010]: missing required key 'events'",
        f"{shown} (acme): 6 files, invalid, 4 errors",
    ]
    data = json.loads(factoryctl("validate", root, "--format", "json").stdout)
    assert [(e["rule"], Path(e["path"]).name, e["line"]) for e in data["factories"][0]["errors"]] == [
        ("FC081", "events.yaml", 3),
        ("FC080", "metadata.yaml", 2),
        ("FC080", "plain.yaml", 3),
        ("FC010", "shape.yaml", 1),
    ]
    for name in ("metadata.yaml", "plain.yaml", "events.yaml", "shape.yaml"):
        (root / "notifications" / name).unlink()
    ok = factoryctl("validate", root)
    assert (ok.returncode, ok.stdout.splitlines()[-1]) == (0, f"{shown} (acme): 2 files, valid")


def test_plan_and_apply_show_notifications(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = factoryctl("--data-dir", data, "secrets", "create", "OPS_HOOK", "--from-stdin", stdin=WHSEC)
    assert created.returncode == 0, created.stdout + created.stderr
    root = write(tmp_path / "f", {"notifications/ops-alerts.yaml": OPS})
    planned = factoryctl("--data-dir", data, "plan", root, "--detailed-exitcode")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert planned.stdout.splitlines() == [
        "+ factory acme (fa_... assigned on apply)",
        "+ notification ops-alerts (ne_... assigned on apply)",
        "",
        "Plan: 2 to add, 0 to change, 0 to destroy.",
    ]
    applied = factoryctl("--data-dir", data, "apply", root, "--auto-approve", "--format", "json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    endpoint = json.loads(applied.stdout)["changes"][1]
    assert (endpoint["action"], endpoint["kind"], endpoint["name"]) == (
        "create",
        "notification",
        "ops-alerts",
    )
    assert endpoint["uid"].startswith("ne_")
    # Written another way, the same events and filter are no change at all.
    (root / "notifications" / "ops-alerts.yaml").write_text(OPS.replace("SUCCEEDED", "run.succeeded"))
    same = factoryctl("--data-dir", data, "plan", root, "--detailed-exitcode")
    assert (same.returncode, same.stdout) == (0, "No changes.\n")
    (root / "notifications" / "ops-alerts.yaml").write_text(
        OPS + "filter:\n  factories: ['*']\nenabled: false\n"
    )
    changed = factoryctl("--data-dir", data, "plan", root, "--detailed-exitcode")
    assert (changed.returncode, changed.stdout.splitlines()[0]) == (
        2,
        "~ notification ops-alerts: filter, enabled",
    )
    (root / "notifications" / "ops-alerts.yaml").write_text(
        OPS.replace("https://hooks.example.com", "https://10.0.0.8")
    )
    refused = factoryctl("--data-dir", data, "apply", root, "--auto-approve")
    assert refused.returncode == 1
    assert (
        f"{root.as_posix()}/notifications/ops-alerts.yaml:1:6: error[FC080]: notification URL refused:"
        " the URL points at a private network: 10.0.0.8 is a private or reserved address"
    ) in refused.stdout + refused.stderr
    # Neither the refused apply nor the plans before it wrote anything: the first file is still what is live.
    (root / "notifications" / "ops-alerts.yaml").write_text(OPS)
    assert factoryctl("--data-dir", data, "plan", root).stdout == "No changes.\n"
