"""Stopping a harness process stops what it started in sessions of their own
(:func:`factoryctl.worker.processes.terminate_process_tree`): Gemini CLI starts each shell command so."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from factoryctl.worker.processes import descendant_groups, process_group_alive, terminate_process_tree

# A parent in its own group that starts a child in a new session (setsid: a group of its own), writes the
# child's pid, then waits; both ignore nothing but the child outlives a kill of the parent's group alone.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(300)
"""


async def started(tmp_path: Path) -> tuple[asyncio.subprocess.Process, int]:
    pid_file = tmp_path / "child.pid"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, str(pid_file), start_new_session=True
    )
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text():
            return proc, int(pid_file.read_text())
        await asyncio.sleep(0.01)
    raise AssertionError("the child did not start")


async def test_a_descendant_in_its_own_session_is_stopped_with_the_process(tmp_path: Path) -> None:
    proc, child = await started(tmp_path)
    try:
        assert descendant_groups(proc.pid) == {child}
        await terminate_process_tree(proc.pid, grace_seconds=1.0)
        await asyncio.wait_for(proc.wait(), 5)
        assert not process_group_alive(child) and not process_group_alive(proc.pid)
    finally:
        for group in (proc.pid, child):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def test_the_group_alone_would_leave_it_running(tmp_path: Path) -> None:
    """What the tree walk is for: signalling only the parent's group leaves the child alive."""
    proc, child = await started(tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 5)
        assert process_group_alive(child)
    finally:
        os.killpg(child, signal.SIGKILL)
