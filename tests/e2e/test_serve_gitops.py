"""``factoryctl serve`` following a directory and a git branch: the GitOps loop end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import git
import pytest
from serve_support import free_port, reconcile_records, wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
    return base | {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"} | extra


def cli(data: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
        **kw,
    )


class Server:
    def __init__(
        self,
        data: Path,
        *args: str,
        extra_env: dict[str, str] | None = None,
        database: str | None = None,
        key_file: Path | None = None,
        workers: str = "0",
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = data / f"serve-{self.port}.log"
        data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "factoryctl.cli",
                "--data-dir",
                str(data),
                *(["--database", database] if database else []),
                "serve",
                "--port",
                str(self.port),
                "--workers",
                workers,
                *args,
            ],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            env=env(**(extra_env or {})),
        )
        try:
            wait_for(self._healthy, timeout=30, what=f"serve on port {self.port} answering /healthz")
        except BaseException:
            self.stop()
            raise
        self.key = (key_file or data / "admin.key").read_text().strip()

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited: {self.log.read_text()}")
        try:
            with urllib.request.urlopen(self.base + "/healthz", timeout=1):
                return True
        except OSError:
            return False

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.key}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.base + path,
            data=json.dumps(body or {}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def factory(self, name: str) -> dict[str, Any] | None:
        for f in self.get("/api/v1/factory")["factories"]:
            if f["name"] == name:
                return dict(self.get(f"/api/v1/factory/{f['uid']}"))
        return None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


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
    server = Server(data, "--repo", str(root))
    try:
        factory = wait_for(lambda: server.factory("gitops"))
        assert factory["description"] == "first" and ready(factory) == "True"
        hook = factory["webhooks"][0]

        (root / "factory.yaml").write_text("name: gitops\ndescription: second\n")
        wait_for(lambda: (server.factory("gitops") or {}).get("description") == "second")

        # A broken edit: reported with file:line, last good state keeps serving.
        (root / "webhooks" / "alerts.yaml").write_text("secretName: [unclosed\n")
        broken = wait_for(lambda: (f := server.factory("gitops")) and ready(f) == "False" and f)
        message = next(c["message"] for c in broken["conditions"] if c["type"] == "Ready")
        assert "alerts.yaml:" in message
        assert [w["uid"] for w in broken["webhooks"]] == [hook["uid"]]
        assert "alerts.yaml" in server.log.read_text()

        # Fixing the file recovers without a restart.
        (root / "webhooks" / "alerts.yaml").write_text("secretName: hooks\ndescription: fixed\n")
        fixed = wait_for(lambda: (f := server.factory("gitops")) and ready(f) == "True" and f)
        assert fixed["webhooks"][0]["uid"] == hook["uid"]

        status, body = server.post(f"/api/v1/factory/{fixed['uid']}/reconcile")
        assert status == 202 and body["accepted"] is True

        # CI validation against the server: online checks (the secret must exist in the store).
        (root / "webhooks" / "new.yaml").write_text("secretName: not-a-secret\n")
        remote = subprocess.run(
            [
                sys.executable,
                "-m",
                "factoryctl.cli",
                "validate",
                str(root),
                "--server",
                server.base,
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=env(FACTORY_API_KEY=server.key),
        )
        assert remote.returncode == 1, remote.stderr
        errors = json.loads(remote.stdout)["factories"][0]["errors"]
        assert [(e["rule"], e["path"].endswith("webhooks/new.yaml")) for e in errors] == [("FC040", True)]
    finally:
        server.stop()


def commit(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    repo.index.commit(message, author=git.Actor("t", "t@example.com"))
    return str(repo.head.commit.hexsha)


def test_git_source_follows_branch_and_records_failed_revisions(tmp_path: Path, data: Path) -> None:
    src = tmp_path / "src"
    repo = git.Repo.init(src, initial_branch="production")
    write_tree(src)
    first = commit(repo, "first")
    server = Server(data, "--git", str(src), "--branch", "production", "--poll-interval", "0.3")
    try:
        factory = wait_for(
            lambda: (f := server.factory("gitops")) and f.get("last_applied_revision") == first and f
        )
        uid = factory["uid"]

        (src / "webhooks" / "alerts.yaml").write_text("secretName: does-not-exist\n")
        bad = commit(repo, "bad secret")
        failed = wait_for(
            lambda: (f := server.factory("gitops")) and f["last_attempted_revision"] == bad and f
        )
        assert failed["last_applied_revision"] == first
        assert ready(failed) == "False"

        # Force-push over the bad commit (amend): followed, applied.
        (src / "webhooks" / "alerts.yaml").write_text("secretName: hooks\ndescription: amended\n")
        repo.git.add(A=True)
        repo.git.commit("--amend", "-m", "fixed", "--author", "t <t@example.com>")
        fixed = str(repo.head.commit.hexsha)
        done = wait_for(lambda: (f := server.factory("gitops")) and f["last_applied_revision"] == fixed and f)
        assert done["uid"] == uid and ready(done) == "True"

        # Deleting the branch: a clear error in the log, the last good state stays live.
        repo.git.checkout("-b", "other")
        repo.git.branch("-D", "production")
        wait_for(lambda: "branch 'production' does not exist" in server.log.read_text())
        assert server.factory("gitops")["last_applied_revision"] == fixed
    finally:
        server.stop()


def test_unreachable_repository_is_reported_not_fatal(tmp_path: Path, data: Path) -> None:
    server = Server(
        data, "--git", str(tmp_path / "missing"), "--branch", "production", "--poll-interval", "0.3"
    )
    try:
        wait_for(lambda: "cannot fetch" in server.log.read_text())
        assert server.proc.poll() is None
        assert server.get("/api/v1/factory")["factories"] == []
    finally:
        server.stop()


def test_port_in_use_and_database_down(tmp_path: Path, data: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(data, "serve", "--port", str(port), "--workers", "0")
    assert result.returncode == 1
    assert f"port {port}" in result.stderr and "already in use" in result.stderr

    down = subprocess.run(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "--data-dir",
            str(data),
            "--database",
            "postgresql://postgres@127.0.0.1:1/test",
            "serve",
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env(FACTORY_DB_CONNECT_ATTEMPTS="2"),
    )
    assert down.returncode == 1
    assert "database unavailable after 2 attempts" in down.stderr
    assert "Traceback" not in down.stderr


def applied_by_both(a: Server, b: Server, revision: str) -> list[str]:
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
        created = subprocess.run(
            [
                sys.executable,
                "-m",
                "factoryctl.cli",
                "--data-dir",
                str(data_a),
                "--database",
                url,
                "secrets",
                "create",
                "hooks",
                "--generate",
            ],
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert created.returncode == 0, created.stderr
        a = Server(data_a, "--repo", str(root), database=url, workers="1")
        b = Server(data_b, "--repo", str(root), database=url, workers="1", key_file=data_a / "admin.key")
        try:
            factory = wait_for(lambda: a.factory("gitops"))
            assert len(factory["webhooks"]) == 1
            # Each replica watches the directory once its start-up reconcile is done: wait for both.
            outcomes = wait_for(
                lambda: applied_by_both(a, b, factory["last_applied_revision"]), what="start-up reconciles"
            )
            assert sorted(outcomes) == ["noop", "succeeded"]  # applied once, a no-op for the other
            (root / "webhooks" / "second.yaml").write_text("secretName: hooks\n")
            factory = wait_for(lambda: (f := b.factory("gitops")) and len(f["webhooks"]) == 2 and f)
            outcomes = wait_for(
                lambda: applied_by_both(a, b, factory["last_applied_revision"]), what="reconciles of the edit"
            )
            assert sorted(outcomes) == ["noop", "succeeded"]
            names = sorted(w["name"] for w in a.factory("gitops")["webhooks"])
            assert names == ["alerts", "second"]  # applied once: no duplicate rows, no conflicts

            run_ids = [a.post("/api/v1/agent/runs", {"prompt": f"job {i}"})[1]["run_id"] for i in range(16)]

            def all_done() -> bool:
                runs = [b.get(f"/api/v1/agent/runs/{r}") for r in run_ids]
                return all(r["state"] == "SUCCEEDED" for r in runs)

            wait_for(all_done, timeout=60)
            attempts = [b.get(f"/api/v1/agent/runs/{r}")["attempt"] for r in run_ids]
            assert attempts == [1] * len(run_ids)  # each run claimed exactly once across both replicas
        finally:
            a.stop()
            b.stop()
        assert "Traceback" not in a.log.read_text() + b.log.read_text()
    finally:
        pg_template.drop(url)
