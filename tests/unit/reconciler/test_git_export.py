"""Exporting a commit of a git source: only what the loader reads, nothing outside the snapshot, trees git
would refuse to check out refused with a message (not a crash), symlinks reported and never followed.

Repositories are real; malformed trees are written with ``git hash-object --literally``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import git
import pytest
from gitobjects import Entry
from gitobjects import ObjectRepo as Repo

import safegit
from reconciler import SourceError
from reconciler.diagnostics import Diagnostic
from reconciler.loader import MAX_FILE_BYTES, load
from reconciler.sources.git import GitSource

NOT_FOLLOWED = "symlink not followed: definitions from a git source are read from the commit's tree"
Where = Callable[[Path, Iterable[Diagnostic]], list[tuple[str, int, int, str]]]


def commit_root(repo: Repo, *entries: Entry) -> str:
    """A commit whose root holds ``factory.yaml`` (``name: demo``) and ``entries``."""
    factory = ("100644", "factory.yaml", repo.blob(b"name: demo\n"))
    return repo.commit(repo.tree(factory, *entries), "c")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "src")


@pytest.fixture
def source(repo: Repo, tmp_path: Path) -> GitSource:
    return GitSource(str(repo.path), "main", tmp_path / "data")


def exported(source: GitSource) -> tuple[Path, list[str]]:
    root = source.export(source.fetch())
    return root, sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_only_what_the_loader_reads_is_exported(repo: Repo, source: GitSource) -> None:
    hook = repo.blob(b"secretName: s\n")
    deep = repo.tree(("100644", "x.yaml", hook))
    automation = repo.tree(
        ("100644", "automation.md", repo.blob(b"---\n---\nDo it.\n")),
        ("40000", "deeper", repo.tree(("40000", "z", deep))),
    )
    commit_root(
        repo,
        ("40000", "automations", repo.tree(("40000", "triage", automation))),
        ("100644", "README.md", repo.blob(b"not a definition")),
        ("40000", "src", deep),
        ("40000", "webhooks", repo.tree(("100644", "a.yaml", hook), ("40000", "sub", deep))),
    )
    root, paths = exported(source)
    assert paths == [
        "automations",
        "automations/triage",
        "automations/triage/automation.md",
        "automations/triage/deeper",  # a directory the loader never enters: left empty
        "factory.yaml",
        "webhooks",
        "webhooks/a.yaml",
        "webhooks/sub",
    ]
    assert load(root, follow_symlinks=False).ok
    assert oct(os.stat(root / "webhooks" / "a.yaml").st_mode & 0o777) == "0o600"


def test_schedules_are_exported_and_load(repo: Repo, source: GitSource) -> None:
    schedule = repo.blob(b'cron: "0 2 * * *"\nprompt: Report.\n')
    commit_root(repo, ("40000", "schedules", repo.tree(("100644", "nightly.yaml", schedule))))
    root, paths = exported(source)
    assert paths == ["factory.yaml", "schedules", "schedules/nightly.yaml"]
    result = load(root, follow_symlinks=False)
    assert result.ok and result.definition is not None
    assert [(s.name, s.cron) for s in result.definition.schedules] == [("nightly", "0 2 * * *")]


def test_notifications_are_exported_and_load(repo: Repo, source: GitSource) -> None:
    endpoint = repo.blob(b"url: https://hooks.example.com/\nsecretName: s\nevents: [FAILED]\n")
    commit_root(repo, ("40000", "notifications", repo.tree(("100644", "ops.yaml", endpoint))))
    root, paths = exported(source)
    assert paths == ["factory.yaml", "notifications", "notifications/ops.yaml"]
    result = load(root, follow_symlinks=False)
    assert result.ok and result.definition is not None
    assert [(n.name, n.url) for n in result.definition.notifications] == [
        ("ops", "https://hooks.example.com/")
    ]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("webhooks/x.yaml", "'webhooks/x.yaml' in the root is not a valid file name"),
        ("..", "'..' in the root is not a valid file name"),
    ],
)
def test_a_malformed_root_entry_is_refused(repo: Repo, source: GitSource, name: str, problem: str) -> None:
    commit_root(repo, ("100644", name, repo.blob(b"secretName: s\n")))
    with pytest.raises(SourceError, match=problem):
        exported(source)
    assert list(source.snapshot_dir.iterdir()) == []  # nothing half-written is left


def test_dot_dot_trees_cannot_write_outside_the_snapshot(
    repo: Repo, source: GitSource, tmp_path: Path
) -> None:
    evil = repo.tree(("100644", "escaped.yaml", repo.blob(b"x")))
    up = repo.tree(("40000", "..", repo.tree(("40000", "..", evil))))
    commit_root(repo, ("40000", "webhooks", up))
    with pytest.raises(SourceError, match=r"tree entry '\.\.' in 'webhooks/' is not a valid file name"):
        exported(source)
    assert not list(tmp_path.rglob("escaped.yaml"))


def test_a_duplicate_entry_is_refused(repo: Repo, source: GitSource) -> None:
    hook = repo.blob(b"secretName: s\n")
    commit_root(
        repo, ("40000", "webhooks", repo.tree(("100644", "a.yaml", hook), ("120000", "a.yaml", hook)))
    )
    with pytest.raises(SourceError, match=r"'a\.yaml' in 'webhooks/' appears twice"):
        exported(source)


def test_symlinks_are_exported_inert_and_reported(repo: Repo, source: GitSource, where: Where) -> None:
    target = repo.blob(b"/etc/passwd")
    commit_root(
        repo,
        ("40000", "webhooks", repo.tree(("120000", "x.yaml", target))),
        ("120000", "environments", repo.blob(b"/etc")),
    )
    root, _ = exported(source)
    assert os.readlink(root / "webhooks" / "x.yaml") == "symlink-not-followed"
    result = load(root, follow_symlinks=False)
    assert sorted(where(root, result.diagnostics)) == [
        ("environments", 0, 0, "FC001"),
        ("webhooks/x.yaml", 0, 0, "FC001"),
    ]
    assert {d.message for d in result.diagnostics} == {NOT_FOLLOWED}


def test_an_oversized_file_is_refused_by_size_without_being_read(
    repo: Repo, source: GitSource, where: Where
) -> None:
    big = repo.blob(b"x" * (MAX_FILE_BYTES + 10))
    commit_root(repo, ("40000", "webhooks", repo.tree(("100644", "big.yaml", big))))
    root, _ = exported(source)
    result = load(root, follow_symlinks=False)
    assert where(root, result.diagnostics) == [("webhooks/big.yaml", 0, 0, "FC001")]
    assert result.diagnostics[0].message.startswith(f"file is {MAX_FILE_BYTES + 10} bytes")


def test_unsafe_urls_and_branches_never_make_a_source(tmp_path: Path) -> None:
    for url in ("--upload-pack=touch /tmp/x", "ext::sh -c touch% /tmp/x"):
        with pytest.raises(safegit.UnsafeLocation):
            GitSource(url, "main", tmp_path)
    with pytest.raises(safegit.UnsafeLocation):
        GitSource(str(tmp_path), "main:refs/heads/other", tmp_path)


def test_fetch_errors_name_the_problem(repo: Repo, source: GitSource, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="branch 'main' does not exist"):
        source.fetch()  # an empty repository: no branch yet
    missing = GitSource(str(tmp_path / "nope"), "main", tmp_path / "data2")
    with pytest.raises(SourceError, match="cannot fetch"):
        missing.fetch()


def test_a_snapshot_describes_its_commit(tmp_path: Path) -> None:
    """SHA, subject, author and commit time come from git; a remote that is no forge is not linked."""
    src = tmp_path / "described"
    repo = git.Repo.init(src, initial_branch="main")
    (src / "factory.yaml").write_text("name: demo\n")
    repo.git.add(A=True)
    author = git.Actor("Ada Lovelace", "ada@example.com")
    repo.index.commit("Add the factory\n\nA body that is not the subject.", author=author, committer=author)
    source = GitSource(str(src), "main", tmp_path / "data")
    sha = source.fetch()
    snapshot = source._snapshot(sha, forced=False)
    assert snapshot.commit is not None
    assert snapshot.commit["sha"] == sha and snapshot.commit["subject"] == "Add the factory"
    assert (snapshot.commit["author"], snapshot.commit["author_email"]) == ("Ada Lovelace", "ada@example.com")
    assert snapshot.commit["committed_at"] == repo.head.commit.committed_datetime.isoformat()
    assert snapshot.commit["remote"] == str(src) and snapshot.commit["url"] is None  # not a forge
