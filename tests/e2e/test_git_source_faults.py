"""``factoryctl`` facing hostile or broken definitions sources, as a subprocess:

- a ``--git`` URL or ``--skills-source`` template git must not be given is refused at start (exit 2);
- ``validate`` never prints what a symlink outside the factory directory points at;
- ``serve --git`` survives a malformed commit (recorded as a failed revision), applies the next one, answers
  reports the reason in ``/readyz`` while it cannot read its source, and keeps its data directory private.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gitobjects import ObjectRepo as Repo
from serve_support import free_port, reconcile_records, run_cli, running, wait_for

pytestmark = pytest.mark.slow
MARKER = "pwned"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--git=--upload-pack=touch {marker}"], "git source URL '--upload-pack=touch"),
        (["--git", "ext::sh -c touch% {marker}"], "remote helper syntax 'ext::'"),
        (["--git", "https://git.example/f.git", "--branch=--orphan"], "must not start with '-'"),
        (["--skills-source", "ext::sh -c touch% {marker}/{{owner}}"], "skills source 'ext::sh"),
        (["--skills-source=--upload-pack=touch {marker}"], "must not start with '-'"),
    ],
)
def test_unsafe_git_locations_are_refused_at_start(tmp_path: Path, args: list[str], why: str) -> None:
    marker = tmp_path / MARKER
    data = tmp_path / "data"
    done = run_cli(
        "--data-dir", data, "serve", "--workers", "0", "--port", str(free_port()),
        *(a.format(marker=marker) for a in args), timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and why in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists() and not (data / "factory.db").exists()


def test_validate_never_prints_what_a_symlink_points_at(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:TOP-SECRET-HASH:19000:0:99999:7:::\n")
    root = tmp_path / "f"
    (root / "webhooks").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: f\n")
    (root / "webhooks" / "ok.yaml").write_text("secretName: s\n")
    os.symlink(secret, root / "webhooks" / "x.yaml")
    os.symlink(tmp_path, root / "environments")
    for fmt in ("text", "json", "sarif"):
        done = run_cli("validate", root, "--format", fmt)
        output = done.stdout + done.stderr
        assert done.returncode == 1, output
        assert "symlink points outside the factory directory" in output
        assert "TOP-SECRET" not in output and "shadow" not in output


# --- serve --git ------------------------------------------------------------------------------------


class Server:
    def __init__(self, url: str, data: Path, log: Path, proc: subprocess.Popen[bytes]) -> None:
        self.url, self.data, self.log, self.proc = url, data, log, proc

    @property
    def key(self) -> str:
        return (self.data / "admin.key").read_text().strip()

    def factory(self) -> dict[str, Any] | None:
        headers = {"Authorization": f"Bearer {self.key}"}
        listed = httpx.get(f"{self.url}/api/v1/factory", headers=headers, timeout=5).json()["factories"]
        if not listed:
            return None
        found: dict[str, Any] = httpx.get(
            f"{self.url}/api/v1/factory/{listed[0]['uid']}", headers=headers, timeout=5
        ).json()
        return found

    def readyz(self) -> tuple[int, dict[str, Any]]:
        resp = httpx.get(f"{self.url}/readyz", timeout=5)
        return resp.status_code, resp.json()

    def wait(self, predicate: Any, what: str) -> Any:
        return wait_for(predicate, 30, what, alive=[self.proc], logs=[self.log])


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual 022 for the server's parent: whatever is private, the server makes private itself."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def ready(factory: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in factory["conditions"] if c["type"] == "Ready")


def test_serve_survives_a_malformed_commit_reports_its_health_and_keeps_its_files_private(
    tmp_path: Path, loose_umask: None
) -> None:
    repo = Repo(tmp_path / "src")
    first = repo.commit(repo.factory_tree("first"), "first")
    data, log, port = tmp_path / "data", tmp_path / "serve.log", free_port()
    args = ["--git", str(repo.path), "--branch", "main", "--poll-interval", "0.2"]
    with running(
        "--data-dir", data, "serve", "--port", str(port), "--workers", "0", *args, log=log
    ) as proc:  # fmt: skip
        server = Server(f"http://127.0.0.1:{port}", data, log, proc)
        server.wait(lambda: healthy(server.url), "serve answering /healthz")

        def at(field: str, revision: str) -> dict[str, Any] | None:
            found = server.factory()
            return found if found and found[field] == revision else None

        server.wait(lambda: at("last_applied_revision", first), "the first commit applied")

        # GitPython raised ValueError on this tree and the loop died without a word.
        bad = repo.commit(
            repo.factory_tree("bad", ("100644", "webhooks/x.yaml", repo.blob(b"secretName: s\n"))), "bad"
        )
        failed = server.wait(lambda: at("last_attempted_revision", bad), "the malformed commit recorded")
        assert (ready(failed)["status"], ready(failed)["reason"]) == ("False", "RevisionUnreadable")
        assert "is not a valid file name" in ready(failed)["message"]
        assert [r["outcome"] for r in reconcile_records(log) if r["revision"] == bad] == ["failed"]
        assert server.readyz()[0] == 200

        good = repo.commit(repo.factory_tree("third"), "third")
        done = server.wait(lambda: at("last_applied_revision", good), "the next commit applied")
        assert ready(done)["status"] == "True" and done["description"] == "third"

        repo.path.rename(tmp_path / "moved")
        status, body = server.wait(
            lambda: (answer := server.readyz())[1].get("reconciler") == "failing" and answer,
            "/readyz reporting the source as failing while it is gone",
        )
        assert status == 200 and "cannot fetch" in body["reason"]  # ingress keeps serving meanwhile
        (tmp_path / "moved").rename(repo.path)
        server.wait(lambda: server.readyz()[1].get("reconciler") == "ok", "the source back to ok")

        private = _modes(data)
        assert private["factory.db"] == 0o600 and private["."] == 0o700
        loose = {name: oct(mode) for name, mode in private.items() if mode & 0o077}
        assert loose == {}, loose
        assert any(name.startswith("git/") and "/snapshots/" in name for name in private)
    assert "Traceback" not in log.read_text()
    assert any(
        json.loads(line).get("msg") == "source error"
        for line in log.read_text().splitlines()
        if line[:1] == "{"
    )


def _modes(data: Path) -> dict[str, int]:
    """Permission bits of the data directory and everything in it (symlinks excepted)."""
    out = {".": stat.S_IMODE(data.stat().st_mode)}
    for path in data.rglob("*"):
        if not path.is_symlink():
            out[str(path.relative_to(data))] = stat.S_IMODE(path.stat().st_mode)
    return out
