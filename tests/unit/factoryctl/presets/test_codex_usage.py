"""Codex usage on a resumed thread (docs/agents.md, "Usage on a resumed thread"): ``turn.completed`` gives the
thread's running totals, so the parser reports them net of what the previous attempt reached, which travels
in the saved session state as the worker's note. The recorded output is the real CLI's (0.169.0): a run of
three model requests (``tool_call.jsonl``, totals 300/60) and its resume, one more request (``resume.jsonl``,
totals 400/80, the same thread); the scripted server billed 100/20 per request."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from factoryctl.worker.presets import base, sessions
from factoryctl.worker.presets.codex import PRESET, CodexParser

FIXTURES = Path(__file__).parents[3] / "fixtures" / "agents" / "codex"
THREAD = "01a21759-26bd-7a01-8f5b-aaf4a2477f98"


def parse(name: str, carried: dict[str, Any] | None = None) -> tuple[CodexParser, list[dict[str, Any]]]:
    """The parser after ``name``'s lines, given ``carried`` totals first, and the usage events it gave."""
    parser = PRESET.parser()
    if carried is not None:
        parser.carry_usage(carried)
    events: list[base.AgentEvent] = []
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        events += parser.feed(line)
    return parser, [dict(e.data) for e in events if e.kind == "usage"]


def test_a_resume_reports_only_what_it_adds_to_the_totals_the_first_attempt_reached() -> None:
    first, first_usage = parse("tool_call")
    assert first_usage == [{"input_tokens": 300, "output_tokens": 60, "cost_usd": None}]
    carried = first.usage_totals()
    assert carried == {"session_id": THREAD, "input_tokens": 300, "output_tokens": 60}

    second, second_usage = parse("resume", carried)
    assert second_usage == [{"input_tokens": 100, "output_tokens": 20, "cost_usd": None}]
    assert second.usage_totals() == {"session_id": THREAD, "input_tokens": 400, "output_tokens": 80}


def test_without_carried_totals_the_resume_counts_the_whole_thread() -> None:
    """What a run got before the note existed (an archive saved by an older worker): no baseline."""
    _, usage = parse("resume")
    assert usage == [{"input_tokens": 400, "output_tokens": 80, "cost_usd": None}]


@pytest.mark.parametrize(
    "carried",
    [
        {"session_id": "another-thread", "input_tokens": 300, "output_tokens": 60},  # a fresh thread
        {"session_id": THREAD, "input_tokens": 500, "output_tokens": 60},  # above Codex's own count
        {"session_id": THREAD, "input_tokens": "300", "output_tokens": 60},
        {"session_id": THREAD, "input_tokens": True, "output_tokens": 60},
        {"session_id": THREAD, "input_tokens": -1, "output_tokens": 60},
        {"input_tokens": 300, "output_tokens": 60},
    ],
)
def test_totals_of_another_thread_or_that_do_not_fit_are_not_subtracted(carried: dict[str, Any]) -> None:
    _, usage = parse("resume", carried)
    assert usage == [{"input_tokens": 400, "output_tokens": 80, "cost_usd": None}]


def test_a_failed_attempt_keeps_the_carried_totals_for_the_next() -> None:
    """A failed turn reports no usage: its requests count in the next attempt's difference."""
    carried = {"session_id": THREAD, "input_tokens": 300, "output_tokens": 60}
    parser = PRESET.parser()
    parser.carry_usage(carried)
    parser.feed(json.dumps({"type": "thread.started", "thread_id": THREAD}))
    parser.feed('{"type":"turn.failed","error":{"message":"overloaded"}}')
    assert parser.usage_totals() == carried


def test_no_thread_no_totals() -> None:
    assert PRESET.parser().usage_totals() is None
    assert sessions.state_of(PRESET.parser()) == {}


# --- the note in the saved session state ----------------------------------------------------------------


def test_the_note_travels_in_the_archive_and_reaches_the_next_parser(tmp_path: Path) -> None:
    home, restored = tmp_path / "home", tmp_path / "restored"
    (home / ".codex" / "sessions").mkdir(parents=True)
    (home / ".codex" / "sessions" / "rollout.jsonl").write_text("{}\n")
    first, _ = parse("tool_call")
    archive = sessions.pack(home, PRESET.session_paths(), state=sessions.state_of(first))
    assert archive is not None

    restored.mkdir()
    assert sorted(sessions.unpack(archive, restored)) == [
        ".codex/sessions/rollout.jsonl",
        sessions.STATE_NAME,
    ]
    note = sessions.take_state(restored)
    assert note == {"usage_totals": {"session_id": THREAD, "input_tokens": 300, "output_tokens": 60}}
    assert not (restored / sessions.STATE_NAME).exists()  # the CLI never sees it

    parser = PRESET.parser()
    sessions.carry_state(parser, note)
    for line in (FIXTURES / "resume.jsonl").read_text().splitlines():
        usage = [dict(e.data) for e in parser.feed(line) if e.kind == "usage"]
        if usage:
            assert usage == [{"input_tokens": 100, "output_tokens": 20, "cost_usd": None}]
    assert parser.usage_totals() == {"session_id": THREAD, "input_tokens": 400, "output_tokens": 80}


def test_a_note_alone_is_no_session(tmp_path: Path) -> None:
    assert sessions.pack(tmp_path, PRESET.session_paths(), state={"usage_totals": {}}) is None


def note_archive(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(sessions.STATE_NAME)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("data", [b"not json", b"[1, 2]", b'{"a": "' + b"x" * 70_000 + b'"}'])
def test_a_note_that_is_not_a_small_json_object_is_ignored(tmp_path: Path, data: bytes) -> None:
    sessions.unpack(note_archive(data), tmp_path)
    assert sessions.take_state(tmp_path) == {}
    assert not (tmp_path / sessions.STATE_NAME).exists()


def test_no_note_or_a_link_in_its_place_is_no_note(tmp_path: Path) -> None:
    assert sessions.take_state(tmp_path) == {}
    secret = tmp_path / "secret.json"
    secret.write_text('{"usage_totals": {"session_id": "x", "input_tokens": 9, "output_tokens": 9}}')
    os.symlink(secret, tmp_path / sessions.STATE_NAME)
    assert sessions.take_state(tmp_path) == {}
    (tmp_path / sessions.STATE_NAME).unlink()
    (tmp_path / sessions.STATE_NAME).mkdir()
    assert sessions.take_state(tmp_path) == {}
