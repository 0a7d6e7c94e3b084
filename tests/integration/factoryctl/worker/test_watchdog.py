"""The watchdog's measurements on this machine's real ``/proc`` and file system (docs/workers.md,
"Limits"): which processes are a run's, what its workspace takes, the kernel limits set on it."""

from __future__ import annotations

import resource
import secrets
import subprocess
import time
from pathlib import Path

from factoryctl.worker.limits import Limits
from factoryctl.worker.watchdog import RunProcesses, Watchdog, disk_usage, memory_and_count, rlimits

MIB = 1024**2


def test_a_runs_processes_are_the_workers_children_in_its_workspace_and_their_descendants(
    tmp_path: Path,
) -> None:
    mine, other = tmp_path / "run-a", tmp_path / "run-b"
    mine.mkdir()
    other.mkdir()
    env = {"PATH": "/usr/bin:/bin"}
    run_id = f"run-{secrets.token_hex(6)}"
    ours = subprocess.Popen(["sh", "-c", "sleep 30 & (cd / && exec sleep 30) & wait"], cwd=mine, env=env)
    theirs = subprocess.Popen(["sleep", "30"], cwd=other, env=env)
    # left the tree, in a session of its own, but still naming the run in its environment
    stray = subprocess.Popen(
        ["sleep", "30"], cwd="/", env={**env, "FACTORY_RUN_ID": run_id}, start_new_session=True
    )
    try:
        finder = RunProcesses(mine, run_id, by_environment=False)
        deadline = time.monotonic() + 10
        while len(found := finder.find()) < 3 and time.monotonic() < deadline:  # the children are starting
            time.sleep(0.02)
        assert ours.pid in found and len(found) == 3  # the shell, and both sleeps (one changed directory)
        assert theirs.pid not in found and stray.pid not in found
        memory, count = memory_and_count(found)
        assert count == 3 and memory > 0

        unsandboxed = RunProcesses(mine, run_id, by_environment=True)
        assert unsandboxed.find() == found | {stray.pid}
        assert unsandboxed.kill() >= 4
        assert unsandboxed.find() == set()
        ours.wait(10)  # ended: killed, or exited as its killed children went first (a race either way)
        assert stray.wait(10) != 0  # killed, not ended
        assert theirs.poll() is None  # another run's process is left alone
    finally:
        for proc in (ours, theirs, stray):
            proc.kill()
            proc.wait(10)


def test_the_workspace_size_counts_allocated_blocks_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * 8 * MIB)
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "two.bin").write_bytes(b"y" * 2 * MIB)
    with open(ws / "sparse.bin", "wb") as handle:
        handle.truncate(64 * MIB)  # holds nothing yet
    (ws / "link").symlink_to(outside)
    (ws / "dirlink").symlink_to(tmp_path)
    used = disk_usage(ws)
    assert 2 * MIB <= used < 3 * MIB


def test_the_watchdog_walks_the_workspace_again_only_after_a_pause(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"z" * MIB)
    dog = Watchdog(RunProcesses(tmp_path, "r", by_environment=False), Limits(None, None, 10 * MIB))
    first, second = dog.sample(), dog.sample()
    assert first.disk_bytes is not None and first.disk_bytes >= MIB
    assert second.disk_bytes is None  # measured half a second at the earliest after the last walk


def test_kernel_limits_never_include_the_address_space() -> None:
    limits = Limits(processes=64, disk_bytes=100 * MIB)
    as_root = dict(rlimits(limits, 0))
    assert as_root == {resource.RLIMIT_CORE: 0, resource.RLIMIT_FSIZE: 100 * MIB + 1}
    as_user = dict(rlimits(limits, 65534))
    assert as_user[resource.RLIMIT_NPROC] >= 64 and resource.RLIMIT_AS not in as_user
    assert dict(rlimits(Limits(None, None, None), 65534)) == {resource.RLIMIT_CORE: 0}
