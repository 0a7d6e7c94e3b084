"""Session files between attempts (:mod:`factoryctl.worker.presets.sessions`): packing takes only the
preset's regular files and directories; unpacking refuses anything that could leave the agent home; each
preset's restore mapping files the sessions under the new workspace's name."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from factoryctl.worker.presets import sessions
from factoryctl.worker.presets.base import Context
from factoryctl.worker.presets.claude import PRESET as CLAUDE
from factoryctl.worker.presets.claude import project_dir
from factoryctl.worker.presets.codex import PRESET as CODEX
from factoryctl.worker.presets.gemini import PRESET as GEMINI
from factoryctl.worker.presets.gemini import project_slug


def tar_gz(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def regular(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    """A member that is no regular file: a link (symbolic or hard) or, with ``kind``, a device."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def test_pack_takes_the_preset_paths_files_and_leaves_links_and_the_rest_out(tmp_path: Path) -> None:
    home, outside = tmp_path / "home", tmp_path / "secret.txt"
    outside.write_text("not a session file")
    chats = home / ".gemini" / "tmp" / "run-a" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-1.jsonl").write_text('{"turn": 1}\n')
    (chats / "escape.jsonl").symlink_to(outside)
    os.mkfifo(chats / "pipe")
    (home / ".gemini" / "settings.json").write_text("{}")  # not a session path

    archive = sessions.pack(home, GEMINI.session_paths())
    assert archive is not None
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as opened:
        names = {m.name: m for m in opened.getmembers()}
    assert [n for n, m in names.items() if m.isreg()] == [".gemini/tmp/run-a/chats/session-1.jsonl"]
    assert all(m.isreg() or m.isdir() for m in names.values())

    restored = tmp_path / "fresh"
    restored.mkdir()
    assert sessions.unpack(archive, restored) == [".gemini/tmp/run-a/chats/session-1.jsonl"]
    assert (restored / ".gemini/tmp/run-a/chats/session-1.jsonl").read_text() == '{"turn": 1}\n'
    assert not (restored / ".gemini/settings.json").exists()


def test_pack_answers_none_without_session_files_and_refuses_over_the_cap(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex" / "sessions").mkdir(parents=True)
    assert sessions.pack(home, CODEX.session_paths()) is None
    (home / ".codex" / "sessions" / "rollout.jsonl").write_bytes(os.urandom(64 * 1024))
    with pytest.raises(sessions.SessionStateError, match="exceed"):
        sessions.pack(home, CODEX.session_paths(), limit=16 * 1024)


@pytest.mark.parametrize(
    "member",
    [
        regular("../outside.txt"),
        regular("/etc/evil"),
        regular(".claude/projects/../../outside.txt"),
        link(".claude/projects/p/link.jsonl", "/etc/passwd"),
        link(".claude/projects/p/hard.jsonl", "/etc/passwd", tarfile.LNKTYPE),
        link("dev", "", tarfile.CHRTYPE),
    ],
    ids=["dotdot", "absolute", "inner-dotdot", "symlink", "hardlink", "device"],
)
def test_unpack_refuses_an_archive_that_could_leave_the_home(
    tmp_path: Path, member: tuple[tarfile.TarInfo, bytes | None]
) -> None:
    home = tmp_path / "deep" / "home"
    home.mkdir(parents=True)
    with pytest.raises(sessions.SessionStateError):
        sessions.unpack(tar_gz(regular("ok.txt"), member), home)
    assert not (tmp_path / "deep" / "outside.txt").exists() and not (tmp_path / "outside.txt").exists()
    assert not any(p.is_symlink() for p in home.rglob("*"))


def test_unpack_never_follows_a_link_already_in_the_home(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / ".claude").symlink_to(elsewhere)
    with pytest.raises(sessions.SessionStateError):
        sessions.unpack(tar_gz(regular(".claude/projects/p/s.jsonl")), home)
    assert list(elsewhere.iterdir()) == []


def test_unpack_refuses_garbage_and_bombs(tmp_path: Path) -> None:
    with pytest.raises(sessions.SessionStateError):
        sessions.unpack(b"not a tar.gz", tmp_path)
    with pytest.raises(sessions.SessionStateError, match="more than"):
        sessions.unpack(tar_gz(regular("a", b"\0" * 2048)), tmp_path, limit=1024)


def context(workspace: Path) -> Context:
    return Context(workspace=workspace, home=workspace.with_name(workspace.name + ".home"), resume="s-1")


def test_claude_moves_the_sessions_into_the_new_workspaces_project() -> None:
    new = context(Path("/var/ws/run_B-42"))
    assert project_dir("/var/ws/run_B-42") == "-var-ws-run-B-42"
    assert project_dir("/" + "a" * 250) is None
    files = [".claude/projects/-var-ws-run-A-1/s-1.jsonl", ".claude/projects/-var-ws-run-A-1/s-1/tool.txt"]
    assert CLAUDE.session_moves(files, new) == {
        ".claude/projects/-var-ws-run-A-1/s-1.jsonl": ".claude/projects/-var-ws-run-B-42/s-1.jsonl",
        ".claude/projects/-var-ws-run-A-1/s-1/tool.txt": ".claude/projects/-var-ws-run-B-42/s-1/tool.txt",
    }
    assert CLAUDE.session_moves([".claude/projects/-var-ws-run-B-42/s-1.jsonl"], new) == {}
    assert CLAUDE.session_paths() == (".claude/projects",)


def test_gemini_moves_the_chats_into_the_new_workspaces_project() -> None:
    assert project_slug("Run_B--42.") == "run-b-42" and project_slug("__") == "project"
    files = [".gemini/tmp/run-a-1/chats/session-x.jsonl", ".gemini/tmp/run-a-1/.project_root"]
    assert GEMINI.session_moves(files, context(Path("/var/ws/Run_B-42"))) == {
        ".gemini/tmp/run-a-1/chats/session-x.jsonl": ".gemini/tmp/run-b-42/chats/session-x.jsonl"
    }


def test_codex_finds_its_rollout_by_thread_id_wherever_it_runs() -> None:
    files = [".codex/sessions/2026/11/26/rollout-2026-11-26T10-00-00-t-1.jsonl"]
    assert CODEX.session_moves(files, context(Path("/var/ws/b"))) == {}
    assert CODEX.session_paths() == (".codex/sessions",)


def test_move_stays_in_the_home(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    with pytest.raises(sessions.SessionStateError):
        sessions.move(tmp_path, {"a": "../b"})
    sessions.move(tmp_path, {"a": "d/e/a"})
    assert (tmp_path / "d/e/a").read_text() == "x"
