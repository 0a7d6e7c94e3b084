"""``factoryctl worker``'s command module: cheap to import, same flags."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from factoryctl.commands import worker as command

HEAVY = ("httpx", "asyncio", "factoryctl.client", "factoryctl.worker", "factoryctl.context")


def test_importing_the_command_loads_neither_the_client_nor_the_worker() -> None:
    probe = (
        "import json, sys; import factoryctl.commands.worker; "
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == []


def test_flags() -> None:
    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["worker", "--host-id", "box", "--harness", "command", "--command", "claude -p", "--concurrency", "3"]
    )
    assert (args.host_id, args.harness, args.harness_command, args.concurrency) == (
        "box",
        "command",
        "claude -p",
        3,
    )
    assert (args.server, args.workspace_root, args.wait_seconds) == (None, None, 20.0)
    assert args.handler is command._worker
