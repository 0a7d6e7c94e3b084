"""YAML with marks: values like safe_load, plus the line and column of every key and value."""

from __future__ import annotations

import time

import pytest

from reconciler.diagnostics import Diagnostic
from reconciler.yamlmarks import parse_yaml, path_str, split_front_matter


def test_values_and_marks_of_keys_and_values() -> None:
    text = "name: x\nagents:\n  triage:\n    model_id: m\nlist:\n  - a\n  - {b: 1}\n"
    parsed = parse_yaml(text, "f.yaml")
    assert parsed.ok
    assert parsed.data == {"name": "x", "agents": {"triage": {"model_id": "m"}}, "list": ["a", {"b": 1}]}
    assert parsed.marks.key(("agents", "triage", "model_id")) == (4, 5)
    assert parsed.marks.value(("agents", "triage", "model_id")) == (4, 15)
    assert parsed.marks.value(("list", 1, "b")) == (7, 9)
    assert parsed.marks.key(("list", 1)) == (7, 5)  # list items have no key: their value
    assert parsed.marks.value(("list", 1, "nope", "deeper")) == (7, 5)  # nearest known ancestor


def test_line_offset_shifts_every_mark() -> None:
    parsed = parse_yaml("a: 1\nb: oops\n", "f.md", line_offset=1)
    assert parsed.marks.key(("b",)) == (3, 1)
    broken = parse_yaml("a: 1\nb: [\n", "f.md", line_offset=1)
    assert broken.data is None
    assert broken.diagnostics[0].rule == "FC002"
    assert broken.diagnostics[0].line >= 3


def test_scalars_resolve_like_safe_load_but_dates_stay_text() -> None:
    text = "a: yes\nb: '1'\nc: 1_000\nd: 0x1f\ne: 2.5\nf: ~\ng: 2024-01-01\nh: !!str 5\ni:\n"
    assert parse_yaml(text, "f").data == {
        "a": True,
        "b": "1",
        "c": 1000,
        "d": 31,
        "e": 2.5,
        "f": None,
        "g": "2024-01-01",
        "h": "5",
        "i": None,
    }


def test_keys_are_the_text_as_written() -> None:
    assert parse_yaml("on: 1\n1: 2\n", "f").data == {"on": 1, "1": 2}


def test_duplicate_key_points_at_the_second_occurrence_and_last_value_wins() -> None:
    parsed = parse_yaml("a:\n  b: 1\n  c: 2\n  b: 3\n", "f.yaml")
    assert parsed.data == {"a": {"b": 3, "c": 2}}
    assert not parsed.ok
    assert parsed.diagnostics == [
        Diagnostic("FC004", "duplicate key 'a.b' (first defined at line 2)", "f.yaml", 4, 3)
    ]


def test_merge_keys_and_aliases() -> None:
    parsed = parse_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\ncopy: *b\n", "f")
    assert parsed.data == {"base": {"x": 1, "y": 2}, "use": {"x": 1, "y": 3}, "copy": {"x": 1, "y": 2}}
    assert parsed.ok


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ("x: !!python/object:os.system 1\n", "unsupported YAML tag '!!python/object:os.system'", 1, 4),
        ("x: !!binary aGk=\n", "unsupported YAML tag '!!binary'", 1, 4),
        ("x: !custom {}\n", "unsupported YAML tag '!custom'", 1, 4),
        ("&a [*a]\n", "recursive alias '*a' is not supported", 1, 5),
        ("a: *nope\n", "unknown alias '*nope'", 1, 4),
        ("a: 1\n---\nb: 2\n", "expected one YAML document, found several", 2, 1),
        ("? [1]\n: 2\n", "mapping keys must be plain strings, not lists or mappings", 1, 3),
        ("x: !!int abc\n", "'abc' is not a valid int", 1, 4),
    ],
)
def test_unsafe_or_unsupported_yaml_is_refused(text: str, message: str, line: int, column: int) -> None:
    parsed = parse_yaml(text, "f.yaml")
    assert parsed.data is None
    assert parsed.diagnostics == [Diagnostic("FC002", message, "f.yaml", line, column)]


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    started = time.perf_counter()
    parsed = parse_yaml("\n".join(lines) + "\n", "f.yaml")
    assert time.perf_counter() - started < 1
    assert parsed.data is None
    assert "alias bomb" in parsed.diagnostics[0].message


def test_deep_nesting_is_refused_without_crashing() -> None:
    parsed = parse_yaml("[" * 100 + "]" * 100, "f.yaml")
    assert [d.message for d in parsed.diagnostics] == ["YAML nested deeper than 64 levels"]
    assert parsed.data is None


def test_unclosed_deep_nesting_is_refused_quickly() -> None:
    # The scanner reads an unclosed flow collection to its end before the first event; recent PyYAML
    # (6.0.4) stops it at its own depth cap, older releases left it to ours. Either way: one FC002, fast.
    started = time.perf_counter()
    parsed = parse_yaml("[" * 200_000, "f.yaml")
    assert time.perf_counter() - started < 2
    [diag] = parsed.diagnostics
    assert diag.rule == "FC002" and "nest" in diag.message and diag.line == 1


def test_empty_document_is_none_without_problems() -> None:
    parsed = parse_yaml("# only a comment\n", "f")
    assert parsed.data is None
    assert parsed.diagnostics == []


def test_path_str() -> None:
    assert path_str(("triggers", 0, "filter", "webhook_ids", 1)) == "triggers[0].filter.webhook_ids[1]"
    assert path_str(()) == ""
    assert path_str((0, "a")) == "[0].a"


def test_split_front_matter() -> None:
    front, offset, body, body_line = split_front_matter("---\na: 1\nb: 2\n---\n\nHello\n", "x.md")  # type: ignore[misc]
    assert (front, offset, body, body_line) == ("a: 1\nb: 2\n", 1, "\nHello\n", 5)
    crlf = split_front_matter("---\r\na: 1\r\n---\r\nBody\r\n", "x.md")
    assert not isinstance(crlf, Diagnostic)
    assert crlf[0] == "a: 1\r\n" and crlf[2] == "Body\r\n"


def test_front_matter_missing_or_unterminated() -> None:
    missing = split_front_matter("title: x\n---\n", "x.md")
    assert isinstance(missing, Diagnostic)
    assert (missing.rule, missing.line, missing.column) == ("FC005", 1, 1)
    assert "missing front matter" in missing.message
    unterminated = split_front_matter("---\ntitle: x\n", "x.md")
    assert isinstance(unterminated, Diagnostic)
    assert unterminated.rule == "FC005"
    assert "never closed" in unterminated.message
