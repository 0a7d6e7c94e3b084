"""Service-hosted workers start run-controlled processes only in a sandbox (docs/workers.md, "Sandbox"):
with no working bubblewrap they refuse every run (every harness, echo too, runs a process), and a run
records the sandbox it ran in."""

from __future__ import annotations

from pathlib import Path

import builders
import git
import pytest
from aiohttp import web

from api.claims.reaper import lease_reaper
from api.runs.claim_signal import wake_claimers
from factoryctl.serve.local_workers import service_workers
from factoryctl.worker.sandbox import Sandbox
from store.clock import SystemClock

FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}


async def test_without_a_sandbox_every_run_fails_clearly_and_nothing_runs_on_the_host(
    worker_app, tmp_path: Path, aiohttp_client, sessions, new_run, wait_state
) -> None:
    marker = tmp_path / "ran"
    missing = Sandbox(str(tmp_path / "no-such-bwrap"))
    lifecycle = service_workers(
        1, "echo", f"touch {marker}", tmp_path / "ws", heartbeat_seconds=0.2, sandbox=missing
    )
    app = worker_app(lifecycles=[lifecycle, lease_reaper(0.5)])
    await aiohttp_client(app)
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        await builders.environment(s, SystemClock(), team.id, "build", {"setup": [f"touch {marker}"]})
    setup = await new_run(agent_config={"environment_id": "build"})
    command = await new_run(agent_config={"harness": {"type": "command"}})
    echo = await new_run(prompt="plain echo")
    wake_claimers(app)
    for run_id, needs in (
        (setup, "environment setup commands"),
        (command, "the run's harness"),
        (echo, "the run's harness"),  # every harness runs in the sandbox
    ):
        run = await wait_state(run_id, FINISHED)
        assert run.state == "FAILED", run.status_message
        assert run.status_message is not None
        assert run.status_message["error_code"] == "sandbox_unavailable"
        message = run.status_message["message"]
        assert needs in message and "not installed" in message and "apt-get install bubblewrap" in message
        assert run.sandbox is None  # nothing of it ran anywhere
    assert not marker.exists()  # nothing ran on the host


async def test_with_the_sandbox_the_same_setup_runs_confined(
    worker_app, tmp_path: Path, aiohttp_client, sessions, new_run, wait_state
) -> None:
    lifecycle = service_workers(1, "echo", None, tmp_path / "ws", heartbeat_seconds=0.2, sandbox=Sandbox())
    app = worker_app(lifecycles=[lifecycle, lease_reaper(0.5)])
    await aiohttp_client(app)
    data = tmp_path / "data"
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        spec = {"setup": [f"test ! -e {data} && touch made && test -e made"]}
        await builders.environment(s, SystemClock(), team.id, "build", spec)
    run_id = await new_run(agent_config={"environment_id": "build"})
    wake_claimers(app)
    run = await wait_state(run_id, FINISHED)
    assert run.state == "SUCCEEDED", run.status_message
    assert run.sandbox is not None and run.sandbox["kind"] == "bwrap"


async def test_a_workspace_root_inside_the_data_directory_is_refused_at_start(
    worker_app, tmp_path: Path
) -> None:
    lifecycle = service_workers(1, "echo", None, tmp_path / "data" / "workspaces", sandbox=Sandbox())
    runner = web.AppRunner(worker_app(lifecycles=[lifecycle]))
    try:
        with pytest.raises(ValueError, match=r"overlaps .*data"):
            await runner.setup()
    finally:
        await runner.cleanup()


async def test_an_environment_cannot_clone_a_repository_out_of_the_data_directory(
    worker_app, tmp_path: Path, aiohttp_client, sessions, new_run, wait_state
) -> None:
    """The worker clones environment repositories itself, outside the sandbox: a local path into the data
    directory (a ``serve --git`` mirror, the skills cache) would copy another team's files into the run's
    workspace, so it is refused like the setup commands that read it."""
    data = tmp_path / "data"
    mirror = git.Repo.init(data / "mirror")
    (data / "mirror" / "definitions.yaml").write_text("team A's definitions\n")
    mirror.index.add(["definitions.yaml"])
    actor = git.Actor("t", "t@example.com")
    mirror.index.commit("a", author=actor, committer=actor)
    lifecycle = service_workers(1, "echo", None, tmp_path / "ws", heartbeat_seconds=0.2, sandbox=Sandbox())
    app = worker_app(lifecycles=[lifecycle, lease_reaper(0.5)])
    await aiohttp_client(app)
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        for name, url in (
            ("path", str(data / "mirror")),
            ("url", f"file://{data}/./mirror"),
            ("up", "../../data/mirror"),
        ):
            await builders.environment(
                s, SystemClock(), team.id, name, {"repos": [{"url": url, "path": "m"}]}
            )
    runs = [await new_run(agent_config={"environment_id": name}) for name in ("path", "url", "up")]
    wake_claimers(app)
    for run_id in runs:
        run = await wait_state(run_id, FINISHED)
        assert run.state == "FAILED", run.status_message
        assert run.status_message is not None
        assert run.status_message["error_code"] == "environment_setup_failed"
        assert "data directory" in run.status_message["message"]


async def test_a_repository_that_borrows_objects_from_the_data_directory_is_refused(
    worker_app, tmp_path: Path, aiohttp_client, sessions, new_run, wait_state
) -> None:
    """A repository outside the data directory can still make git read one inside it: alternates, a
    ``.git`` file naming another git directory. Each is refused before git runs."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    mirror = git.Repo.init(data / "mirror")
    (data / "mirror" / "definitions.yaml").write_text("team A's definitions\n")
    mirror.index.add(["definitions.yaml"])
    actor = git.Actor("t", "t@example.com")
    commit = mirror.index.commit("a", author=actor, committer=actor)
    borrower = git.Repo.init(outside / "borrower", bare=True)
    (outside / "borrower" / "objects" / "info" / "alternates").write_text(f"{data}/mirror/.git/objects\n")
    borrower.git.update_ref("refs/heads/main", commit.hexsha)
    borrower.git.symbolic_ref("HEAD", "refs/heads/main")
    (outside / "gitfile").mkdir()
    (outside / "gitfile" / ".git").write_text(f"gitdir: {data}/mirror/.git\n")
    lifecycle = service_workers(1, "echo", None, tmp_path / "ws", heartbeat_seconds=0.2, sandbox=Sandbox())
    app = worker_app(lifecycles=[lifecycle, lease_reaper(0.5)])
    await aiohttp_client(app)
    async with sessions() as s, s.begin():
        team = await builders.team(s, "default")
        for name in ("borrower", "gitfile"):
            spec = {"repos": [{"url": str(outside / name), "path": "m"}]}
            await builders.environment(s, SystemClock(), team.id, name, spec)
    runs = [await new_run(agent_config={"environment_id": name}) for name in ("borrower", "gitfile")]
    wake_claimers(app)
    for run_id in runs:
        run = await wait_state(run_id, FINISHED)
        assert run.state == "FAILED", run.status_message
        assert run.status_message is not None
        assert run.status_message["error_code"] == "environment_setup_failed"
        assert (
            "another repository" in run.status_message["message"]
            or "another git directory" in (run.status_message["message"])
        ), run.status_message
