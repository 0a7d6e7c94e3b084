"""YAML to plain JSON-like values, remembering where every key and value sits in the file.

Built on the YAML *event* stream (libyaml's C parser when available) instead of ``yaml.compose``:
the C composer recurses and crashes on deeply nested input, and PyYAML's constructors drop marks.
Building values from events with an explicit stack lets us cap nesting depth and alias expansion,
detect duplicate keys (the second occurrence is an error), refuse every non-JSON tag, and record a
``(line, column)`` for each JSON path. Nothing here executes tags, so it is as safe as ``safe_load``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from reconciler.diagnostics import Diagnostic

JsonPath = tuple[str | int, ...]

MAX_DEPTH = 64
MAX_NODES = 100_000
_TAG = "tag:yaml.org,2002:"
_Parser: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def path_str(path: JsonPath) -> str:
    """``("triggers", 0, "filter")`` -> ``"triggers[0].filter"`` (the key of ``Spec.locations``)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass
class Marks:
    """1-based ``(line, column)`` of every value and mapping key, by JSON path."""

    values: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)

    def value(self, path: JsonPath) -> tuple[int, int]:
        """Where the value at ``path`` starts (or its nearest known ancestor)."""
        while path not in self.values and path:
            path = path[:-1]
        return self.values.get(path, (1, 1))

    def key(self, path: JsonPath) -> tuple[int, int]:
        """Where the key naming ``path`` is written (its value for list items and the root)."""
        return self.keys.get(path) or self.value(path)


@dataclass
class Parsed:
    data: Any
    marks: Marks
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return self.data is not None and not any(d.severity == "error" for d in self.diagnostics)


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag


class _Stop(Exception):
    """A problem that makes the rest of the document meaningless."""

    def __init__(self, rule: str, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.rule, self.message, self.line, self.column = rule, message, line, column


class _Frame:
    """An open mapping or sequence."""

    __slots__ = ("anchor", "is_map", "key", "key_mark", "merges", "path", "seen", "size", "start", "value")

    def __init__(self, value: Any, path: JsonPath, anchor: str | None, start: tuple[int, int]) -> None:
        self.value = value
        self.is_map = isinstance(value, dict)
        self.path = path
        self.anchor = anchor
        self.start = start
        self.size = 1
        self.key: str | None = None  # mappings: the key waiting for its value
        self.key_mark = start
        self.seen: dict[str, tuple[int, int]] = {}
        self.merges: list[dict[str, Any]] = []


_MERGE = "\0<<"  # the pending "key" of a '<<' merge


class _Builder:
    def __init__(self, path: str, line_offset: int) -> None:
        self.file = path
        self.line0 = 1 + line_offset
        self.marks = Marks()
        self.values = self.marks.values
        self.diagnostics: list[Diagnostic] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.nodes = 0
        self.documents = 0
        self.constructor = SafeConstructor()

    def pos(self, mark: Any) -> tuple[int, int]:
        return mark.line + self.line0, mark.column + 1

    def build(self, text: str) -> Any:
        parser = _Parser(text)
        handlers: dict[type, Any] = {
            yaml.ScalarEvent: self.scalar,
            yaml.AliasEvent: self.alias,
            yaml.MappingStartEvent: self.start,
            yaml.SequenceStartEvent: self.start,
            yaml.MappingEndEvent: self.end,
            yaml.SequenceEndEvent: self.end,
            yaml.DocumentStartEvent: self.document,
        }
        try:
            while True:
                event = parser.get_event()
                handler = handlers.get(type(event))
                if handler is not None:
                    handler(event)
                elif type(event) is yaml.StreamEndEvent:
                    return self.root
        finally:
            parser.dispose()

    def document(self, event: yaml.DocumentStartEvent) -> None:
        self.documents += 1
        if self.documents > 1:
            raise _Stop("FC002", "expected one YAML document, found several", *self.pos(event.start_mark))

    def count(self, size: int, mark: Any) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            message = f"document expands to more than {MAX_NODES} values (alias bomb?)"
            raise _Stop("FC002", message, *self.pos(mark))

    def child_path(self, mark: Any) -> JsonPath:
        """The path of the next (non-key) value."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if not top.is_map:
            return (*top.path, len(top.value))
        if top.key is None:
            raise _Stop("FC002", "mapping keys must be plain strings, not lists or mappings", *self.pos(mark))
        return top.path if top.key == _MERGE else (*top.path, top.key)

    def attach(self, value: Any, size: int, path: JsonPath, start: tuple[int, int]) -> None:
        if not self.stack:
            self.values[path] = start
            self.root = value
            return
        top = self.stack[-1]
        top.size += size
        if not top.is_map:
            self.values[path] = start
            top.value.append(value)
            return
        if top.key == _MERGE:
            merged = value if isinstance(value, list) else [value]
            if not all(isinstance(m, dict) for m in merged):
                message = "a merge key ('<<') must refer to a mapping or a list of mappings"
                raise _Stop("FC002", message, *start)
            top.merges.extend(merged)
        else:
            top.value[top.key] = value
            self.values[path] = start
            self.marks.keys[path] = top.key_mark
        top.key = None

    def key(self, top: _Frame, event: yaml.ScalarEvent, mark: tuple[int, int]) -> None:
        if event.tag is None and event.implicit[0] and event.value == "<<":
            top.key, top.key_mark = _MERGE, mark
            return
        name = event.value
        first = top.seen.get(name)
        if first is not None:
            shown = path_str((*top.path, name))
            message = f"duplicate key '{shown}' (first defined at line {first[0]})"
            self.diagnostics.append(Diagnostic("FC004", message, self.file, *mark))
        else:
            top.seen[name] = mark
        top.key, top.key_mark = name, mark

    def scalar(self, event: yaml.ScalarEvent) -> None:
        mark: Any = event.start_mark
        start = (mark.line + self.line0, mark.column + 1)
        if self.stack:
            top = self.stack[-1]
            if top.is_map and top.key is None:
                self.key(top, event, start)
                return
        path = self.child_path(mark)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.count(0, mark)
        value = self.construct(event)
        if event.anchor:
            self.anchors[event.anchor] = (value, 1)
        self.attach(value, 1, path, start)

    def construct(self, event: yaml.ScalarEvent) -> Any:
        tag, text = event.tag, event.value
        if tag is None or tag == "!":
            if tag == "!" or not event.implicit[0]:
                return text  # quoted, or explicitly non-specific: a string
            table = Resolver.yaml_implicit_resolvers
            tag = _TAG + "str"
            for candidate, regexp in table.get(text[:1], ()):
                if regexp.match(text):
                    tag = candidate
                    break
        kind = tag.removeprefix(_TAG)
        if kind in ("str", "timestamp"):  # JSON has no dates: keep the text as written
            return text
        if kind == "null":
            return None
        if kind in ("bool", "int", "float"):
            node = yaml.ScalarNode(tag, text)
            try:
                return getattr(self.constructor, f"construct_yaml_{kind}")(node)
            except (ValueError, KeyError, yaml.YAMLError):
                raise _Stop("FC002", f"'{text}' is not a valid {kind}", *self.pos(event.start_mark)) from None
        raise _Stop("FC002", f"unsupported YAML tag '{_short(tag)}'", *self.pos(event.start_mark))

    def alias(self, event: yaml.AliasEvent) -> None:
        name = str(event.anchor)
        if name in self.open_anchors:
            raise _Stop("FC002", f"recursive alias '*{name}' is not supported", *self.pos(event.start_mark))
        if name not in self.anchors:
            raise _Stop("FC002", f"unknown alias '*{name}'", *self.pos(event.start_mark))
        value, size = self.anchors[name]
        path = self.child_path(event.start_mark)
        self.count(size, event.start_mark)
        self.attach(value, size, path, self.pos(event.start_mark))

    def start(self, event: yaml.MappingStartEvent | yaml.SequenceStartEvent) -> None:
        is_map = type(event) is yaml.MappingStartEvent
        if event.tag not in (None, "!", _TAG + ("map" if is_map else "seq")):
            raise _Stop(
                "FC002", f"unsupported YAML tag '{_short(str(event.tag))}'", *self.pos(event.start_mark)
            )
        if len(self.stack) >= MAX_DEPTH:
            raise _Stop("FC002", f"YAML nested deeper than {MAX_DEPTH} levels", *self.pos(event.start_mark))
        path = self.child_path(event.start_mark)
        self.count(1, event.start_mark)
        if event.anchor:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Frame({} if is_map else [], path, event.anchor, self.pos(event.start_mark)))

    def end(self, event: yaml.Event) -> None:
        frame = self.stack.pop()
        value = frame.value
        if frame.merges:  # explicit keys win over merged ones; earlier merges win over later
            merged: dict[str, Any] = {}
            for source in reversed(frame.merges):
                merged.update(source)
            merged.update(value)
            value = merged
        if frame.anchor:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (value, frame.size)
        self.attach(value, frame.size, frame.path, frame.start)


def parse_yaml(text: str, path: str, *, line_offset: int = 0) -> Parsed:
    """Parse one YAML document. ``line_offset`` shifts lines (front matter starts below ``---``).

    Syntax problems stop the document (``data`` is ``None``); duplicate keys are reported and the
    later value wins, so the rest of the file is still checked.
    """
    builder = _Builder(path, line_offset)
    try:
        data = builder.build(text)
    except _Stop as stop:
        diag = Diagnostic(stop.rule, stop.message, path, stop.line, stop.column)
        return Parsed(None, builder.marks, [*builder.diagnostics, diag])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = builder.pos(mark) if mark is not None else (0, 0)
        message = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context:
            where = f" at line {builder.pos(exc.context_mark)[0]}" if exc.context_mark is not None else ""
            message = f"{exc.problem} ({exc.context}{where})"
        diag = Diagnostic("FC002", f"YAML syntax error: {message}", path, line, column)
        return Parsed(None, builder.marks, [*builder.diagnostics, diag])
    except yaml.YAMLError as exc:
        return Parsed(None, builder.marks, [Diagnostic("FC002", f"YAML syntax error: {exc}", path)])
    return Parsed(data, builder.marks, builder.diagnostics)


def split_front_matter(text: str, path: str) -> tuple[str, int, str, int] | Diagnostic:
    """Split ``---`` front matter from a Markdown body.

    Returns ``(front_matter, front_matter_line_offset, body, body_first_line)``, or an FC005
    diagnostic. The offset is the number of file lines before the front matter's first line.
    """
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return Diagnostic(
            "FC005",
            "missing front matter: the file must start with a '---' line, then YAML, then '---'",
            path,
            1,
            1,
        )
    for index in range(1, len(lines)):
        if lines[index].rstrip() in ("---", "..."):
            return "".join(lines[1:index]), 1, "".join(lines[index + 1 :]), index + 2
    return Diagnostic("FC005", "front matter opened on line 1 is never closed by a '---' line", path, 1, 1)
