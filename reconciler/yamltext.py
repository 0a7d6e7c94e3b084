"""Writing YAML text that people keep editing: one stable layout, and edits that keep the rest as written.

``factoryctl migrate`` rewrites files that have comments, folded strings and flow lists someone chose.
PyYAML cannot round-trip those, so an edit here works on the text: a document is split into its
top-level blocks (a key line, the lines that continue its value, and the comment lines just above
it), blocks are dropped or replaced, and every other line stays byte for byte. New values are written
by :func:`dump` in one readable layout (block style, list items indented under their key, multi-line
strings as ``|`` literals, keys in the order given).

The caller checks the edited text parses to the data it meant (:func:`reads_as`) and falls back to a
whole :func:`dump` when it does not: the splitter knows plain top-level keys only, and says so by
returning ``None`` rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from reconciler.yamlmarks import parse_yaml

# A top-level mapping key as people write it: plain, or quoted; then ':' and a space or the line end.
_KEY = re.compile(r"""^(?:"([^"\\]*)"|'([^']*)'|([A-Za-z0-9_][A-Za-z0-9_.\-/ ]*?))[ \t]*:(?:[ \t]|$)""")


class _Dumper(yaml.SafeDumper):
    """Block style with sequences indented under their key (``key:\\n  - item``)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data.rstrip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(data: Mapping[str, Any]) -> str:
    """``data`` as block YAML in the order given; empty text for an empty mapping."""
    if not data:
        return ""
    text: str = yaml.dump(
        dict(data), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False
    )
    return text


def reads_as(text: str, expected: Any) -> bool:
    """Whether ``text`` parses, cleanly, to exactly ``expected`` (the check every edit must pass)."""
    parsed = parse_yaml(text, "<edited>")
    return not parsed.diagnostics and parsed.data == expected


@dataclass
class Block:
    key: str
    lines: list[str]  # the comment lines above the key, the key line, its continuation lines


@dataclass
class Document:
    """A YAML mapping's text as top-level blocks; ``preamble`` is everything above the first key."""

    preamble: list[str]
    blocks: list[Block]

    @property
    def keys(self) -> list[str]:
        return [b.key for b in self.blocks]

    def text(self) -> str:
        lines = [*self.preamble, *(line for b in self.blocks for line in b.lines)]
        out = "".join(lines)
        return out if not out or out.endswith("\n") else out + "\n"

    def replace(self, key: str, new_text: str) -> None:
        """Put ``new_text`` (whole top-level entries) where ``key`` was, its comment lines dropped."""
        for index, block in enumerate(self.blocks):
            if block.key == key:
                self.blocks[index] = Block(key, new_text.splitlines(keepends=True))
                return
        raise KeyError(key)

    def drop(self, keys: Sequence[str]) -> None:
        self.blocks = [b for b in self.blocks if b.key not in keys]

    def insert_first(self, new_text: str) -> None:
        """``new_text`` above the first key (below the preamble, the file's leading comment)."""
        self.blocks.insert(0, Block("", new_text.splitlines(keepends=True)))

    def append(self, new_text: str) -> None:
        if self.blocks and self.blocks[-1].lines and not self.blocks[-1].lines[-1].endswith("\n"):
            self.blocks[-1].lines[-1] += "\n"
        self.blocks.append(Block("", new_text.splitlines(keepends=True)))


def split(text: str) -> Document | None:
    """The top-level blocks of a block mapping's text, or ``None`` for anything else (flow style, a
    top-level list, keys it does not recognise). Blank and comment lines at column 0 belong to the
    next key when one follows, else to the value they sit in."""
    preamble: list[str] = []
    blocks: list[Block] = []
    pending: list[str] = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped or (line.startswith("#")):
            pending.append(line)
            continue
        if line[0] in " \t" or line.startswith("- ") or line.rstrip() == "-":
            if not blocks:
                return None  # a value with no key: not a block mapping
            blocks[-1].lines += [*pending, line]
            pending = []
            continue
        match = _KEY.match(line)
        if match is None:
            return None
        key = next(g for g in match.groups() if g is not None).strip()
        if not blocks:
            preamble, pending = pending, []
        blocks.append(Block(key, [*pending, line]))
        pending = []
    if blocks:
        blocks[-1].lines += pending
    else:
        preamble += pending
    return Document(preamble, blocks)


def leading_comment(text: str) -> list[str]:
    """The comment (and blank) lines a document starts with: what survives a whole rewrite."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.startswith("#"):
            break
        out.append(line if line.endswith("\n") else line + "\n")
    while out and not out[-1].strip():
        out.pop()
    return out
