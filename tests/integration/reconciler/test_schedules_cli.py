"""``factoryctl validate / plan / apply`` on schedules, as subprocesses (the store: SQLite in --data-dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def factoryctl(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``factoryctl ARGS`` to completion, without the caller's own FACTORY_* and GITHUB_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", *map(str, args)],
        stdin=subprocess.DEVNULL,
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


def test_validate_prints_each_bad_schedule_at_its_line(tmp_path: Path) -> None:
    root = write(
        tmp_path / "f",
        {
            "automations/report/automation.md": "---\ntitle: Report\n---\nReport.\n",
            "schedules/ok.yaml": 'cron: "0 6 * * *"\ntimezone: Europe/Berlin\nautomation: report\n',
            "schedules/hour.yaml": '# runs nightly\ncron: "0 24 * * *"\nprompt: Report.\n',
            "schedules/zone.yaml": 'cron: "0 2 * * *"\nprompt: Report.\ntimezone: Mars/Olympus\n',
            "schedules/missing.yaml": 'cron: "0 2 * * *"\nautomation: reprot\n',
        },
    )
    proc = factoryctl("validate", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    shown = root.as_posix()
    assert proc.stdout.splitlines() == [
        f"{shown}/schedules/hour.yaml:2:7: error[FC070]: invalid cron expression:"
        " hour: 24 is out of range 0-23 (field 2 of 5 in '0 24 * * *')",
        "    hint: the fields are minute, hour, day of month, month, day of week",
        f"{shown}/schedules/missing.yaml:2:13: error[FC072]:"
        " automation 'reprot' is not defined in this factory (automations: report)",
        "    hint: add automations/reprot/automation.md or name one of the factory's automations",
        f"{shown}/schedules/zone.yaml:3:11: error[FC071]: unknown time zone 'Mars/Olympus'"
        " (use an IANA name such as UTC or Europe/Berlin)",
        f"{shown} (acme): 6 files, invalid, 3 errors",
    ]
    data = json.loads(factoryctl("validate", root, "--format", "json").stdout)
    assert [(e["rule"], Path(e["path"]).name, e["line"]) for e in data["factories"][0]["errors"]] == [
        ("FC070", "hour.yaml", 2),
        ("FC072", "missing.yaml", 2),
        ("FC071", "zone.yaml", 3),
    ]


def test_plan_and_apply_show_schedules(tmp_path: Path) -> None:
    data = tmp_path / "data"
    root = write(tmp_path / "f", {"schedules/nightly.yaml": 'cron: "0 2 * * *"\nprompt: Write the report.\n'})
    planned = factoryctl("--data-dir", data, "plan", root, "--detailed-exitcode")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert planned.stdout.splitlines() == [
        "+ factory acme (fa_... assigned on apply)",
        "+ schedule nightly (sch_... assigned on apply)",
        "",
        "Plan: 2 to add, 0 to change, 0 to destroy.",
    ]
    applied = factoryctl("--data-dir", data, "apply", root, "--auto-approve", "--format", "json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    schedule = json.loads(applied.stdout)["changes"][1]
    assert (schedule["action"], schedule["kind"], schedule["name"]) == ("create", "schedule", "nightly")
    assert schedule["uid"].startswith("sch_")
    (root / "schedules" / "nightly.yaml").write_text('cron: "0 2 * * *"\nprompt: Write it.\nenabled: false\n')
    changed = factoryctl("--data-dir", data, "plan", root, "--detailed-exitcode")
    assert (changed.returncode, changed.stdout.splitlines()[0]) == (2, "~ schedule nightly: prompt, enabled")
    (root / "schedules" / "nightly.yaml").write_text('cron: "0 2 * *"\nprompt: Write it.\n')
    refused = factoryctl("--data-dir", data, "apply", root, "--auto-approve")
    assert refused.returncode == 1
    assert f"{root.as_posix()}/schedules/nightly.yaml:1:7: error[FC070]" in refused.stdout + refused.stderr
    # Neither the refused apply nor the plans before it wrote anything: the first file is still what is live.
    (root / "schedules" / "nightly.yaml").write_text('cron: "0 2 * * *"\nprompt: Write the report.\n')
    assert factoryctl("--data-dir", data, "plan", root).stdout == "No changes.\n"
