"""Strict, bounded JSON: the one parser behind every request body and every ingress payload.

``json.loads`` alone lets a small body cost a 500: nesting past the interpreter's recursion limit raises
``RecursionError`` (in the parser, or later in any code that walks the value), an integer over 4,300
digits raises a bare ``ValueError``, ``1e400`` becomes ``inf`` (which no JSON column can store) and a
``\\ud800`` escape becomes a string UTF-8 cannot encode. :func:`loads_limited` turns each of these into
:class:`InvalidJson` (a ``ValueError``), which callers answer as a 400 (docs/api.md, "Request bodies";
docs/ingress.md, "Responses").

Depth is measured before parsing, without recursion, so a 100,000-deep body is refused unparsed; the
length of each number is checked by the decoder's number hooks before it is converted.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
MAX_NUMBER_LENGTH = 100

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class InvalidJson(ValueError):
    """The bytes are not JSON this server accepts; the message says why and never quotes the input."""


def loads_limited(
    raw: bytes,
    *,
    max_depth: int = MAX_DEPTH,
    max_number_length: int = MAX_NUMBER_LENGTH,
    lone_surrogates: bool = False,
) -> Any:
    """Parse ``raw`` as strict JSON within limits, or raise :class:`InvalidJson`.

    Strict: UTF-8 only (a leading byte order mark is ignored, as RFC 8259 allows), no ``NaN`` or
    ``Infinity``, no number that overflows a float. Limits: arrays and objects nested at most
    ``max_depth`` deep, every number written in at most ``max_number_length`` characters.
    ``lone_surrogates``: accept strings holding an unpaired ``\\uD800``-``\\uDFFF`` escape or a ``\\u0000``
    (the ingress keeps payloads as raw bytes and only matches filters on them; anything stored as text
    refuses both).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidJson("body is not valid UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if _deeper_than(text, max_depth):
        raise InvalidJson(f"JSON nested more than {max_depth} levels deep")
    try:
        value = _decoder(max_number_length).decode(text)
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"{exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:  # unreachable after the depth check; kept so a parser change cannot 500
        raise InvalidJson(f"JSON nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # from the hooks below, or Python's own integer-size limit
        raise InvalidJson(str(exc)) from None
    if not lone_surrogates and _SURROGATE_ESCAPE.search(text) and not _all_encodable(value):
        raise InvalidJson("a JSON string holds an unpaired UTF-16 surrogate escape")
    if not lone_surrogates and "\\u0000" in text and any("\x00" in s for s in _strings(value)):
        # Text columns (PostgreSQL's in particular) cannot hold U+0000.
        raise InvalidJson("a JSON string holds a NUL character (\\u0000)")
    return value


def _deeper_than(text: str, max_depth: int) -> bool:
    """Whether arrays/objects nest deeper than ``max_depth`` (brackets inside strings ignored). Counting
    the brackets of the whole text settles it for almost every body; only a body that could be too deep
    gets its strings blanked out and its bracket depth measured."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0) > max_depth


def _no_constant(name: str) -> object:
    raise InvalidJson(f"{name} is not valid JSON")


@functools.cache
def _decoder(max_number_length: int) -> json.JSONDecoder:
    """One decoder per limit (building one per call costs as much as parsing a small body)."""

    def number(literal: str) -> None:
        if len(literal) > max_number_length:
            raise InvalidJson(f"a JSON number is longer than {max_number_length} characters")

    def parse_int(literal: str) -> int:
        number(literal)
        return int(literal)

    def parse_float(literal: str) -> float:
        number(literal)
        value = float(literal)
        if not math.isfinite(value):
            raise InvalidJson("a JSON number is out of range")
        return value

    return json.JSONDecoder(parse_constant=_no_constant, parse_int=parse_int, parse_float=parse_float)


def _strings(value: Any) -> Iterator[str]:
    """Every string (keys included) in a parsed value; iterative, depth is already bounded."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _all_encodable(value: Any) -> bool:
    try:
        for text in _strings(value):
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
