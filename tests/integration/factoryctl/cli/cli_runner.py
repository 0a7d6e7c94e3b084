"""Run ``factoryctl`` against a live server as a person or a script would: a fresh process, its stdout,
stderr and exit code, with only ``FACTORY_API_KEY`` (and the data dir) of this process's ``FACTORY_*``."""

from __future__ import annotations

import os
import subprocess
import sys

from live_servers import LiveServer


def cli_env(live: LiveServer, key: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
    env["FACTORY_CONTEXT"] = "none"  # never a CLI context `make run` left in the checkout
    return env | {
        "FACTORY_API_KEY": key or live.admin_key,
        "NO_COLOR": "1",
        "FACTORY_DATA_DIR": str(live.data_dir),
    }


def cli(live: LiveServer, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    """``factoryctl ARGS --server URL`` with the admin key (or ``key``), to completion."""
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", *args, "--server", live.url],
        capture_output=True,
        text=True,
        env=cli_env(live, key),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def spawn(live: LiveServer, *args: str) -> subprocess.Popen[str]:
    """``factoryctl ARGS --server URL`` in the background (for commands that follow a stream)."""
    return subprocess.Popen(
        [sys.executable, "-m", "factoryctl.cli", *args, "--server", live.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(live),
        stdin=subprocess.DEVNULL,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout
