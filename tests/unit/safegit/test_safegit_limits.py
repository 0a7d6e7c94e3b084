"""The runner's size cap and partial-clone filters, against real git: a clone that grows past its cap is
killed (:class:`safegit.GitTooLarge`), a filter is one git defines and never an option."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import safegit


@pytest.fixture
def big_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "big"
    repo.mkdir()
    (repo / "blob").write_bytes(os.urandom(3 << 20))
    (repo / "SKILL.md").write_text("small\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "big"], cwd=repo, check=True)
    return repo


def test_a_clone_past_its_cap_is_killed(tmp_path: Path, big_repo: Path) -> None:
    with pytest.raises(safegit.GitTooLarge, match="larger than 1048576 bytes"):
        safegit.clone(f"file://{big_repo}", tmp_path / "out", policy=safegit.SKILLS_SOURCE, max_bytes=1 << 20)
    safegit.clone(f"file://{big_repo}", tmp_path / "ok", policy=safegit.SKILLS_SOURCE, max_bytes=8 << 20)
    assert (tmp_path / "ok" / "SKILL.md").read_text() == "small\n"


def test_a_partial_clone_leaves_the_contents_on_the_server(tmp_path: Path, big_repo: Path) -> None:
    subprocess.run(["git", "config", "uploadpack.allowFilter", "true"], cwd=big_repo, check=True)
    dest = tmp_path / "partial"
    safegit.clone(
        str(big_repo),
        dest,
        policy=safegit.SKILLS_SOURCE,
        depth=1,
        filter="blob:none",
        no_checkout=True,
        no_local=True,
        max_bytes=1 << 20,
    )
    assert safegit.tree_bytes(dest) < 1 << 20 and not (dest / "blob").exists()


@pytest.mark.parametrize("spec", ["blob:none --upload-pack=x", "--upload-pack=x", "sparse:oid=HEAD", ""])
def test_only_plain_filters_are_accepted(spec: str) -> None:
    with pytest.raises(safegit.UnsafeLocation):
        safegit.check_filter(spec)
    assert safegit.check_filter("blob:limit=256k") == "blob:limit=256k"
