"""``factoryctl serve`` following a directory and a git branch: the GitOps loop end to end."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import git
import pytest
from serve_support import Served, reconcile_records, run_cli, serving, wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}


def cli(data: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("--data-dir", data, *args, env=ENV | (env or {}), timeout=60)


def factory_named(server: Served, name: str) -> dict[str, Any] | None:
    for f in server.get("/api/v1/factory")["factories"]:
        if f["name"] == name:
            return dict(server.get(f"/api/v1/factory/{f['uid']}"))
    return None


def ready(factory: dict[str, Any] | None) -> str | None:
    if not factory:
        return None
    for c in factory.get("conditions", []):
        if c["type"] == "Ready":
            return str(c["status"])
    return None


def write_tree(root: Path, description: str = "first") -> None:
    (root / "webhooks").mkdir(parents=True, exist_ok=True)
    (root / "factory.yaml").write_text(f"name: gitops\ndescription: {description}\n")
    (root / "webhooks" / "alerts.yaml").write_text("secretName: hooks\n")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    assert cli(data, "secrets", "create", "hooks", "--generate").returncode == 0
    return data


def test_directory_source_applies_edits_and_survives_broken_ones(tmp_path: Path, data: Path) -> None:
    root = tmp_path / "factory"
    write_tree(root)
    with serving(data, "--repo", root, env=ENV) as server:
        factory = wait_for(lambda: factory_named(server, "gitops"))
        assert factory["description"] == "first" and ready(factory) == "True"
        hook = factory["webhooks"][0]

        (root / "factory.yaml").write_text("name: gitops\ndescription: second\n")
        wait_for(lambda: (factory_named(server, "gitops") or {}).get("description") == "second")

        # A broken edit: reported with file:line, last good state keeps serving.
        (root / "webhooks" / "alerts.yaml").write_text("secretName: [unclosed\n")
        broken = wait_for(lambda: (f := factory_named(server, "gitops")) and ready(f) == "False" and f)
        message = next(c["message"] for c in broken["conditions"] if c["type"] == "Ready")
        assert "alerts.yaml:" in message
        assert [w["uid"] for w in broken["webhooks"]] == [hook["uid"]]
        assert "alerts.yaml" in server.log.read_text()

        # Fixing the file recovers without a restart.
        (root / "webhooks" / "alerts.yaml").write_text("secretName: hooks\ndescription: fixed\n")
        fixed = wait_for(lambda: (f := factory_named(server, "gitops")) and ready(f) == "True" and f)
        assert fixed["webhooks"][0]["uid"] == hook["uid"]

        status, body = server.post(f"/api/v1/factory/{fixed['uid']}/reconcile")
        assert status == 202 and body["accepted"] is True

        # CI validation against the server: online checks (the secret must exist in the store).
        (root / "webhooks" / "new.yaml").write_text("secretName: not-a-secret\n")
        remote = run_cli(
            "validate",
            root,
            "--server",
            server.url,
            "--format",
            "json",
            env=ENV | {"FACTORY_API_KEY": server.key},
            timeout=60,
        )
        assert remote.returncode == 1, remote.stderr
        errors = json.loads(remote.stdout)["factories"][0]["errors"]
        assert [(e["rule"], e["path"].endswith("webhooks/new.yaml")) for e in errors] == [("FC040", True)]


def commit(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    repo.index.commit(message, author=git.Actor("t", "t@example.com"))
    return str(repo.head.commit.hexsha)


def test_git_source_follows_branch_and_records_failed_revisions(tmp_path: Path, data: Path) -> None:
    src = tmp_path / "src"
    repo = git.Repo.init(src, initial_branch="production")
    write_tree(src)
    first = commit(repo, "first")
    with serving(data, "--git", src, "--branch", "production", "--poll-interval", "0.3", env=ENV) as server:
        factory = wait_for(
            lambda: (f := factory_named(server, "gitops")) and f.get("last_applied_revision") == first and f
        )
        uid = factory["uid"]

        (src / "webhooks" / "alerts.yaml").write_text("secretName: does-not-exist\n")
        bad = commit(repo, "bad secret")
        failed = wait_for(
            lambda: (f := factory_named(server, "gitops")) and f["last_attempted_revision"] == bad and f
        )
        assert failed["last_applied_revision"] == first
        assert ready(failed) == "False"

        # Force-push over the bad commit (amend): followed, applied.
        (src / "webhooks" / "alerts.yaml").write_text("secretName: hooks\ndescription: amended\n")
        repo.git.add(A=True)
        repo.git.commit("--amend", "-m", "fixed", "--author", "t <t@example.com>")
        fixed = str(repo.head.commit.hexsha)
        done = wait_for(
            lambda: (f := factory_named(server, "gitops")) and f["last_applied_revision"] == fixed and f
        )
        assert done["uid"] == uid and ready(done) == "True"

        # Deleting the branch: a clear error in the log, the last good state stays live.
        repo.git.checkout("-b", "other")
        repo.git.branch("-D", "production")
        wait_for(lambda: "branch 'production' does not exist" in server.log.read_text())
        assert factory_named(server, "gitops")["last_applied_revision"] == fixed


def test_unreachable_repository_is_reported_not_fatal(tmp_path: Path, data: Path) -> None:
    missing = tmp_path / "missing"
    with serving(
        data, "--git", missing, "--branch", "production", "--poll-interval", "0.3", env=ENV
    ) as server:
        wait_for(lambda: "cannot fetch" in server.log.read_text())
        assert server.proc.poll() is None
        assert server.get("/api/v1/factory")["factories"] == []


def test_port_in_use_and_database_down(tmp_path: Path, data: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(data, "serve", "--port", str(port), "--workers", "0")
    assert result.returncode == 1
    assert f"port {port}" in result.stderr and "already in use" in result.stderr

    down = cli(
        data,
        "--database",
        "postgresql://postgres@127.0.0.1:1/test",
        "serve",
        "--workers",
        "0",
        env={"FACTORY_DB_CONNECT_ATTEMPTS": "2"},
    )
    assert down.returncode == 1
    assert "database unavailable after 2 attempts" in down.stderr
    assert "Traceback" not in down.stderr


def applied_by_both(a: Served, b: Served, revision: str) -> list[str]:
    """The outcomes of ``a``'s and ``b``'s first reconcile of ``revision`` that went through (from their
    logs), once both have one; empty until then."""
    first = []
    for server in (a, b):
        seen = [
            r["outcome"]
            for r in reconcile_records(server.log)
            if r["revision"] == revision and r["outcome"] in ("succeeded", "noop")
        ]
        if not seen:
            return []
        first.append(seen[0])
    return first


def test_two_replicas_on_postgresql_apply_once_and_never_double_claim(
    tmp_path: Path, pg_template: Any
) -> None:
    """Two ``serve`` processes, one PostgreSQL store, one definitions directory."""
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    url = pg_template.new_database()
    try:
        root = tmp_path / "factory"
        write_tree(root)
        data_a, data_b = tmp_path / "a", tmp_path / "b"
        created = cli(data_a, "--database", url, "secrets", "create", "hooks", "--generate")
        assert created.returncode == 0, created.stderr
        replica = ("--repo", root)
        with (
            serving(data_a, *replica, env=ENV, database=url, workers=1) as a,
            serving(data_b, *replica, env=ENV, database=url, workers=1, key_file=a.key_file) as b,
        ):
            factory = wait_for(lambda: factory_named(a, "gitops"))
            assert len(factory["webhooks"]) == 1
            # Each replica watches the directory once its start-up reconcile is done: wait for both.
            outcomes = wait_for(
                lambda: applied_by_both(a, b, factory["last_applied_revision"]), what="start-up reconciles"
            )
            assert sorted(outcomes) == ["noop", "succeeded"]  # applied once, a no-op for the other
            (root / "webhooks" / "second.yaml").write_text("secretName: hooks\n")
            factory = wait_for(lambda: (f := factory_named(b, "gitops")) and len(f["webhooks"]) == 2 and f)
            outcomes = wait_for(
                lambda: applied_by_both(a, b, factory["last_applied_revision"]), what="reconciles of the edit"
            )
            assert sorted(outcomes) == ["noop", "succeeded"]
            names = sorted(w["name"] for w in factory_named(a, "gitops")["webhooks"])
            assert names == ["alerts", "second"]  # applied once: no duplicate rows, no conflicts

            run_ids = [a.post("/api/v1/agent/runs", {"prompt": f"job {i}"})[1]["run_id"] for i in range(16)]

            def all_done() -> bool:
                runs = [b.get(f"/api/v1/agent/runs/{r}") for r in run_ids]
                return all(r["state"] == "SUCCEEDED" for r in runs)

            wait_for(all_done, timeout=60)
            attempts = [b.get(f"/api/v1/agent/runs/{r}")["attempt"] for r in run_ids]
            assert attempts == [1] * len(run_ids)  # each run claimed exactly once across both replicas
        assert "Traceback" not in a.log.read_text() + b.log.read_text()
    finally:
        pg_template.drop(url)
