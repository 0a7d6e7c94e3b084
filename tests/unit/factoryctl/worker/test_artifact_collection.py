"""Collecting a run's artifacts from its workspace (docs/workers.md, "Artifacts"): files under
``.factory/outputs`` (caps, symlinks never followed, MIME types) and ``.factory/artifacts.jsonl`` (bad lines
and bad URLs skipped with a note), on real directories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from factoryctl.worker.artifacts import Limits, artifacts_file, collect, outputs_dir, valid_url


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    outputs_dir(ws).mkdir(parents=True)
    return ws


def test_regular_files_in_path_order_with_mime_types(workspace: Path) -> None:
    out = outputs_dir(workspace)
    (out / "reports").mkdir()
    (out / "reports" / "summary.md").write_text("# done\n")
    (out / "data.json").write_bytes(b"{}")
    (out / "blob").write_bytes(b"\x00\x01")
    found = collect(workspace)
    assert [(f.filepath, f.filename, f.mime_type, f.data) for f in found.files] == [
        ("blob", "blob", "application/octet-stream", b"\x00\x01"),
        ("data.json", "data.json", "application/json", b"{}"),
        ("reports/summary.md", "summary.md", "text/markdown", b"# done\n"),
    ]
    assert found.notes == [] and found.declared == []


def test_symlinks_are_never_followed(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "inner.txt").write_text("inner")
    out = outputs_dir(workspace)
    os.symlink(secret, out / "link.txt")
    os.symlink(elsewhere, out / "linked-dir")
    os.symlink(secret, artifacts_file(workspace))
    (out / "real.txt").write_text("mine")
    found = collect(workspace)
    assert [f.filepath for f in found.files] == ["real.txt"]
    assert all(b"host data" not in f.data and b"inner" not in f.data for f in found.files)
    assert any("link.txt: a symlink" in n for n in found.notes)
    assert any("linked-dir: a symlink" in n for n in found.notes)
    assert any("artifacts.jsonl is not a readable regular file" in n for n in found.notes)


def test_outputs_replaced_by_a_symlink_yields_nothing(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".factory").mkdir(parents=True)
    target = tmp_path / "host"
    target.mkdir()
    (target / "passwd").write_text("root")
    os.symlink(target, outputs_dir(ws))
    found = collect(ws)
    assert found.files == [] and "not a directory" in found.notes[0]


def test_fifo_is_skipped(workspace: Path) -> None:
    os.mkfifo(outputs_dir(workspace) / "pipe")
    found = collect(workspace)
    assert found.files == [] and "pipe: not a regular file" in found.notes[0]


def test_caps_on_count_file_size_and_total(workspace: Path) -> None:
    out = outputs_dir(workspace)
    for name, size in (("a", 4), ("b", 11), ("c", 4), ("d", 4), ("e", 1), ("f", 1)):
        (out / name).write_bytes(b"x" * size)
    found = collect(workspace, Limits(files=3, file_bytes=10, total_bytes=9, declared=5))
    assert [f.filepath for f in found.files] == ["a", "c", "e"]
    assert any("b: over 10 bytes" in n for n in found.notes)
    assert any("d: the run's files would exceed 9 bytes" in n for n in found.notes)
    assert any("f: at most 3 files" in n for n in found.notes)


def test_declared_links(workspace: Path) -> None:
    lines = [
        {"type": "PULL_REQUEST", "url": "https://github.com/acme/app/pull/7", "branch": "fix/x"},
        {
            "type": "EXTERNAL_REFERENCE",
            "url": "https://linear.app/acme/ENG-1",
            "reference_type": "linear_issue",
            "title": "ENG-1",
        },
        {
            "type": "PULL_REQUEST",
            "url": "https://github.com/acme/app/pull/7",
            "branch": "fix/x",
        },  # again: once
        {"type": "PULL_REQUEST", "url": "javascript:alert(1)", "branch": "x"},
        {"type": "EXTERNAL_REFERENCE", "url": "file:///etc/passwd"},
        {"type": "PULL_REQUEST", "url": "https://github.com/acme/app/pull/8"},
        {"type": "PLAN", "url": "https://example.com"},
        ["not", "an", "object"],
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\nnot json\n\n"
    artifacts_file(workspace).write_text(text)
    found = collect(workspace)
    assert [d.fields for d in found.declared] == [lines[0], lines[1]]
    assert len(found.notes) == 6
    assert any("line 4 skipped: url must be" in n for n in found.notes)
    assert any("line 9 skipped: not JSON" in n for n in found.notes)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://example.com/a", True),
        ("http://127.0.0.1:8080/x?y=1", True),
        ("javascript:alert(1)", False),
        ("data:text/html,<script>", False),
        ("https://", False),
        ("//example.com", False),
        ("https://exa mple.com", False),
        ("https://example.com/\n", False),
        ("ftp://example.com", False),
    ],
)
def test_url_rule(url: str, ok: bool) -> None:
    assert valid_url(url) is ok
