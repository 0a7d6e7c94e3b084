"""deploy/: the systemd unit parses and keeps bubblewrap working; the environment file names only settings
that exist (docs/deployment.md; docs/operations.md, "Configuration reference")."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "deploy" / "factoryctl.service"
ENV_FILE = ROOT / "deploy" / "factoryctl.env"
# Each breaks the bwrap sandbox of service-hosted workers (the unit's header says why).
BREAK_BWRAP = (
    "RestrictNamespaces",
    "PrivateUsers",
    "ProtectKernelTunables",
    "ProtectKernelLogs",
    "ProtectProc",
    "ProcSubset",
    "SystemCallFilter",
    "MemoryDenyWriteExecute",
)


def directives(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            name, _, value = line.partition("=")
            found[name.strip()] = value.strip()
    return found


def test_the_unit_leaves_out_what_breaks_the_sandbox() -> None:
    set_ = directives(UNIT.read_text())
    assert not [name for name in BREAK_BWRAP if name in set_]
    assert set_["NoNewPrivileges"] == "yes" and set_["ProtectSystem"] == "strict"
    assert "AF_NETLINK" in set_["RestrictAddressFamilies"]  # bwrap --unshare-net brings up loopback
    header = UNIT.read_text().split("[Unit]")[0]
    assert not [name for name in BREAK_BWRAP if f"{name}=" not in header]  # says why, for whoever adds it


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on the unit, its ExecStart pointed at an executable that exists here."""
    text = UNIT.read_text()
    exec_start = directives(text)["ExecStart"]
    unit = tmp_path / "factoryctl.service"
    unit.write_text(text.replace(exec_start.split()[0], "/bin/true"))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in (done.stdout + done.stderr).splitlines() if "factoryctl.service" in line]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr


def test_the_environment_file_names_documented_settings() -> None:
    names = set(re.findall(r"^#?(FACTORY_[A-Z_]+)=", ENV_FILE.read_text(), re.M))
    assert {"FACTORY_DATABASE_URL", "FACTORY_PUBLIC_URL", "FACTORY_TRUSTED_PROXIES"} <= names
    unit_only = {"FACTORY_GIT_URL", "FACTORY_GIT_BRANCH"}  # passed to --git/--branch by ExecStart
    assert all(f"${{{name}}}" in directives(UNIT.read_text())["ExecStart"] for name in unit_only)
    documented = (ROOT / "docs" / "operations.md").read_text()
    assert not [name for name in names - unit_only if f"`{name}`" not in documented]
