# ruff: noqa: RUF001 - the look-alike characters are the point of these tests
"""``factoryctl validate`` on notification URLs whose host only becomes an address (or a broken name) once
the HTTP client maps it (docs/notifications.md, "Where a notification may be sent"): FC080 at the value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HOSTILE = {
    "fullwidth": ("https://０.０.０.０:8443/hook", "0.0.0.0 is the unspecified address"),
    "ideographic": ("https://169。254。169。254/latest/meta-data/", "169.254.169.254 is link-local"),
    "circled": ("https://①⑥⑨.②⑤④.①⑥⑨.②⑤④/", "169.254.169.254 is link-local"),
    "emptylabel": ("https://a..localhost/hook", "has an empty label"),
    "longlabel": ("https://" + "a" * 64 + ".example.com/", "longer than 63 characters"),
    "nat64": ("https://[64:ff9b:1::a9fe:a9fe]/", "169.254.169.254 is link-local"),
    "sixtofour": ("https://[2002:a9fe:a9fe::1]/", "169.254.169.254 is link-local"),
}


def test_validate_refuses_hosts_that_map_to_addresses_at_their_line(tmp_path: Path) -> None:
    root = tmp_path / "f"
    (root / "notifications").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    for name, (url, _) in HOSTILE.items():
        text = f"# {name}\nsecretName: s\nevents: [FAILED]\nurl: {url}\n"
        (root / "notifications" / f"{name}.yaml").write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", "validate", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        env=env | {"NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = json.loads(proc.stdout)["factories"][0]["errors"]
    found = {Path(e["path"]).stem: (e["rule"], e["line"], e["column"], e["message"]) for e in errors}
    assert set(found) == set(HOSTILE)
    for name, (_, needle) in HOSTILE.items():
        rule, line, column, message = found[name]
        assert (rule, line, column) == ("FC080", 4, 6), found[name]
        assert message.startswith("notification URL refused: ") and needle in message, message
    text = subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", "validate", str(root)],
        capture_output=True,
        text=True,
        env=env | {"NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        timeout=120,
    ).stdout
    shown = f"{root.as_posix()}/notifications/ideographic.yaml:4:6: error[FC080]: notification URL refused:"
    assert shown in text, text
