"""Payload filters of webhook triggers (docs/ingress.md, "Payload filters"): validate once, compile once,
match fast.

A filter is a JSON object that mirrors the delivery body. Rules:

- Every key must match (AND). A key names a payload field; a nested object without operator keys
  descends into that field.
- A scalar means equality; a (non-empty) array means "one of", the same as ``in``.
- An operator object has only operator keys: ``in`` (list), ``not_in`` (list), ``exists`` (bool); several
  operators in one object must all hold. Only these three names are operators; mixing them with field keys
  is a definition error. A payload field literally named ``in``/``not_in``/``exists`` cannot be addressed
  through the nested shorthand.
- An empty object ``{}`` matches when the field exists and is an object (it descends into nothing, but
  descending needs something to descend into).
- A missing field fails every condition except ``exists: false`` and ``not_in``. A missing parent, or a
  parent that is present but not an object (arrays included), makes its nested fields missing.
- An array field: equality and ``in`` match when any element matches; ``not_in`` matches when no element
  is in the list; ``exists`` sees the array as present. Elements that are objects or arrays never match.
- Types are strict: ``1`` is not ``"1"`` and ``true`` is not ``1``; numbers compare by value (``1`` equals
  ``1.0``); ``null`` equals ``null``. A field present with value ``null`` exists.
- A non-object payload matches only the empty filter; ``None`` or ``{}`` matches every delivery.

Payloads are JSON-decoded values (dict, list, str, int, float, bool, None). Conditions are checked in the
order they are written, so :meth:`CompiledFilter.explain` names the first failing key in file order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

OPERATORS: Final = frozenset({"in", "not_in", "exists"})
MAX_DEPTH: Final = 32

Test = Callable[[object], bool]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()


@dataclass(frozen=True)
class FilterProblem:
    """A definition error; ``path`` is the key path from the filter root to the offending key."""

    path: tuple[str, ...]
    message: str


class InvalidFilter(ValueError):
    def __init__(self, problems: Sequence[FilterProblem]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0]
        super().__init__(f"{format_path(first.path) or '<filter>'}: {first.message}")


@dataclass(frozen=True)
class FilterResult:
    passed: bool
    failed_path: str | None
    detail: str


# ---------------------------------------------------------------------------------------------- check


def check(filter: object) -> list[FilterProblem]:
    """Every syntax problem of a filter (an empty list when it is valid). ``None`` means no filter."""
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        return [FilterProblem((), f"a payload filter must be an object, not {_type_name(filter)}")]
    problems: list[FilterProblem] = []
    _check_fields(filter, (), problems)
    return problems


def _check_fields(obj: Mapping[object, object], path: tuple[str, ...], out: list[FilterProblem]) -> None:
    for key, value in obj.items():
        if not isinstance(key, str):
            out.append(
                FilterProblem(
                    (*path, str(key)),
                    f"field name {key!r} is not a string (YAML reads unquoted yes/no/on/off and numbers "
                    "as non-strings; quote it)",
                )
            )
            continue
        here = (*path, key)
        if len(here) > MAX_DEPTH:
            out.append(FilterProblem(here, f"filter is nested deeper than {MAX_DEPTH} levels"))
        elif isinstance(value, Mapping):
            keys = [k for k in value if isinstance(k, str)]
            ops = [k for k in keys if k in OPERATORS]
            if ops and len(ops) != len(value):
                fields = [str(k) for k in value if k not in OPERATORS]
                out.append(
                    FilterProblem(
                        here,
                        f"operator keys {ops} cannot be mixed with field keys {fields}; "
                        "use either an operator object or nested fields",
                    )
                )
            elif ops:
                for op in ops:
                    _check_operator(op, value[op], (*here, op), out)
            else:
                _check_fields(value, here, out)
        elif isinstance(value, list):
            _check_list(value, here, out, allow_empty=False)
        else:
            _check_scalar(value, here, out, "value")


def _check_operator(op: str, value: object, path: tuple[str, ...], out: list[FilterProblem]) -> None:
    if op == "exists":
        if not isinstance(value, bool):
            out.append(FilterProblem(path, f"'exists' takes true or false, not {_type_name(value)}"))
    elif isinstance(value, list):
        _check_list(value, path, out, allow_empty=op == "not_in")
    else:
        out.append(FilterProblem(path, f"'{op}' takes a list of values, not {_type_name(value)}"))


def _check_list(
    items: list[object], path: tuple[str, ...], out: list[FilterProblem], *, allow_empty: bool
) -> None:
    if not items and not allow_empty:
        out.append(FilterProblem(path, "an empty list matches nothing; list at least one allowed value"))
    for index, item in enumerate(items):
        _check_scalar(item, path, out, f"list item {index}")


def _check_scalar(value: object, path: tuple[str, ...], out: list[FilterProblem], what: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            out.append(FilterProblem(path, f"{what} must be a finite number, not {value}"))
        return
    if isinstance(value, Mapping | list):
        out.append(
            FilterProblem(
                path, f"{what} is {_type_name(value)}; list values must be strings, numbers, booleans or null"
            )
        )
        return
    out.append(
        FilterProblem(
            path, f"{what} has unsupported type {type(value).__name__}; quote it to compare as a string"
        )
    )


# -------------------------------------------------------------------------------------------- compile


@dataclass(frozen=True, slots=True)
class _Check:
    """One flattened condition. String-only lists (the common case, ``action: opened``) carry a set
    that :func:`_evaluator` tests inline; every other condition carries a field test."""

    path: tuple[str, ...]
    op: str  # "eq" | "in" | "not_in" | "exists" | "object"
    operand: object
    strings: frozenset[str] | None
    negate: bool  # only with ``strings``: the condition is ``not_in``
    test: Test  # the field test (used when ``strings`` is None)

    def spec(self) -> _Spec:
        key, *rest = self.path
        return (key, rest[0] if rest else None, tuple(rest[1:]), self.strings, self.negate, self.test)


# (first key, second key or None, deeper keys, strings or None, negate, test): flat for the hot loop.
_Spec = tuple[str, str | None, tuple[str, ...], frozenset[str] | None, bool, Test]


class CompiledFilter:
    """A validated filter flattened into ordered (path, predicate) checks. Immutable; share freely.

    ``matches(payload) -> bool`` is a per-instance function built at compile time that runs every check
    in one loop without further calls in the common case, because ingress runs it for every automation.
    :meth:`explain` tests one check at a time with single-check evaluators built on its first call and
    kept, because ingress explains every miss when it records a delivery's decisions (docs/ingress.md,
    "Decisions").
    """

    __slots__ = ("_checks", "_each", "matches")
    matches: Test

    def __init__(self, checks: Sequence[_Check]) -> None:
        self._checks = tuple(checks)
        self._each: tuple[Test, ...] | None = None
        self.matches = _evaluator(tuple(c.spec() for c in self._checks))

    @property
    def is_empty(self) -> bool:
        return not self._checks

    def explain(self, payload: object) -> FilterResult:
        """Whether ``payload`` passes and, if not, the first failing key and why (for "Test filter")."""
        if not self._checks:
            return FilterResult(True, None, "no payload filter: every delivery matches")
        if type(payload) is not dict:
            return FilterResult(
                False,
                None,
                f"payload is {_type_name(payload)}, not an object; only an empty filter matches it",
            )
        each = self._each
        if each is None:  # built once per filter; a race builds equal tuples, either is kept
            each = self._each = tuple(_evaluator((c.spec(),)) for c in self._checks)
        for c, test in zip(self._checks, each, strict=True):
            if not test(payload):
                return FilterResult(False, format_path(c.path), _describe_failure(c, payload))
        n = len(self._checks)
        return FilterResult(True, None, f"all {n} condition{'s' if n != 1 else ''} match")


def compile(filter: Mapping[str, object] | None) -> CompiledFilter:
    """Validate and flatten a filter; raises :class:`InvalidFilter` listing every problem."""
    problems = check(filter)
    if problems:
        raise InvalidFilter(problems)
    checks: list[_Check] = []
    if filter:
        _flatten(filter, (), checks)
    return CompiledFilter(checks)


def conditions(filter: Mapping[str, object] | None) -> list[tuple[str, str, object]]:
    """The conditions of a valid filter in check order, as ``(path, op, operand)`` (``op``: ``eq``, ``in``,
    ``not_in``, ``exists`` or ``object``), for showing a filter to people; raises :class:`InvalidFilter`."""
    return [(format_path(c.path), c.op, c.operand) for c in compile(filter)._checks]


def _flatten(obj: Mapping[str, object], path: tuple[str, ...], out: list[_Check]) -> None:
    for key, value in obj.items():
        here = (*path, key)
        if isinstance(value, Mapping):
            if not value:
                out.append(_Check(here, "object", None, None, False, _is_object))
            elif all(k in OPERATORS for k in value):
                for op, operand in value.items():
                    if op == "exists":
                        out.append(_Check(here, op, operand, None, False, _present if operand else _absent))
                    else:
                        assert isinstance(operand, list)
                        out.append(_membership(here, op, operand))
            else:
                _flatten(value, here, out)
        elif isinstance(value, list):
            out.append(_membership(here, "in", value))
        else:
            out.append(_membership(here, "eq", value))


def _membership(path: tuple[str, ...], op: str, operand: object) -> _Check:
    values = operand if isinstance(operand, list) else [operand]
    negate = op == "not_in"
    if all(type(v) is str for v in values):
        strings = frozenset(v for v in values if isinstance(v, str))
        return _Check(path, op, operand, strings, negate, _never)
    test = _one_of(values)
    return _Check(path, op, operand, None, False, (lambda v: not test(v)) if negate else test)


def _evaluator(specs: tuple[_Spec, ...]) -> Test:
    """One function that resolves and tests every check in order; False at the first failing one."""
    if not specs:
        return _always
    if len(specs) == 1:
        key, sub, deep, strs, negate, _ = specs[0]
        if strs is not None and not deep:
            return _single_strings_check(key, sub, strs, negate)

    def matches(p: Any) -> bool:
        if type(p) is not dict:
            return False
        for key, sub, deep, strs, negate, test in specs:
            v = p.get(key, MISSING)
            if sub is not None:
                v = v.get(sub, MISSING) if type(v) is dict else MISSING
                if deep:
                    for k in deep:
                        if type(v) is not dict:
                            v = MISSING
                            break
                        v = v.get(k, MISSING)
            if strs is None:
                if not test(v):
                    return False
            elif type(v) is str:
                if (v in strs) is negate:
                    return False
            elif type(v) is list:
                hit = False
                for e in v:
                    if type(e) is str and e in strs:
                        hit = True
                        break
                if hit is negate:
                    return False
            elif not negate:
                return False
        return True

    return matches


def _single_strings_check(key: str, sub: str | None, strs: frozenset[str], negate: bool) -> Test:
    """The most common filter, one string condition one or two levels deep, as one small function."""
    if sub is None and len(strs) == 1 and not negate:
        (only,) = strs

        def equals(p: Any) -> bool:
            if type(p) is not dict:
                return False
            v = p.get(key)  # only a string equals a string, so None for "missing" is safe here
            return v == only or (type(v) is list and only in v)

        return equals

    def one_check(p: Any) -> bool:
        if type(p) is not dict:
            return False
        v = p.get(key, MISSING)
        if sub is not None:
            v = v.get(sub, MISSING) if type(v) is dict else MISSING
        if type(v) is str:
            return (v in strs) is not negate
        if type(v) is list:
            for e in v:
                if type(e) is str and e in strs:
                    return not negate
        return negate

    return one_check


def _resolve(payload: object, path: Sequence[str]) -> object:
    v = payload
    for key in path:
        if type(v) is not dict:
            return MISSING
        v = v.get(key, MISSING)
    return v


def _always(v: object) -> bool:
    return True


def _never(v: object) -> bool:
    return False


def _present(v: object) -> bool:
    return v is not MISSING


def _absent(v: object) -> bool:
    return v is MISSING


def _is_object(v: object) -> bool:
    return type(v) is dict


def _is_number(v: object) -> bool:
    return type(v) is int or type(v) is float


# Field tests: a scalar field matches by value, an array field when any element does; objects, nested
# arrays and MISSING never match. Equality is strict: only str == str, number == number, and booleans
# and null by identity (json decodes them to the singletons), so True never meets 1.


def _equals(c: object) -> Test:
    if type(c) is str:
        return lambda v: v == c or (type(v) is list and c in v)
    if c is None or type(c) is bool:
        return lambda v: v is c or (type(v) is list and any(e is c for e in v))

    def equals_number(v: object) -> bool:
        if type(v) is int or type(v) is float:
            return v == c
        return type(v) is list and any(_is_number(e) and e == c for e in v)

    return equals_number


def _one_of(values: Sequence[object]) -> Test:
    if len(values) == 1:
        return _equals(values[0])
    member = _member(values)
    return lambda v: any(map(member, v)) if type(v) is list else member(v)


def _member(values: Sequence[object]) -> Test:
    """Strict scalar membership: per-type sets keep ``True``, ``1`` and ``"1"`` apart and stay O(1)."""
    strs = frozenset(v for v in values if type(v) is str)
    nums = frozenset(v for v in values if _is_number(v))
    bools = frozenset(v for v in values if type(v) is bool)
    has_none = any(v is None for v in values)

    def member(x: object) -> bool:
        t = type(x)
        if t is str:
            return x in strs
        if t is int or t is float:
            return x in nums
        if t is bool:
            return x in bools
        return has_none and x is None

    return member


# -------------------------------------------------------------------------------------------- explain


def _describe_failure(c: _Check, payload: dict[str, object]) -> str:
    v = _resolve(payload, c.path)
    if c.op == "exists" and c.operand is False:
        return f"field exists (value {_show(v)}); the filter requires it to be absent"
    if v is MISSING:
        return "field is missing" + _missing_reason(payload, c.path)
    if c.op == "object":
        return f"value {_show(v)} is not an object"
    if c.op == "not_in":
        assert isinstance(c.operand, list)
        member = _member(c.operand)
        if isinstance(v, list):
            hit = next(e for e in v if member(e))
            return f"element {_show(hit)} of {_show(v)} is in {_show(c.operand)}"
        return f"value {_show(v)} is in {_show(c.operand)}"
    target = f"equal to {_show(c.operand)}" if c.op == "eq" else f"one of {_show(c.operand)}"
    if isinstance(v, list):
        return f"no element of {_show(v)} is {target}"
    text = f"value {_show(v)} is not {target}"
    wanted = {_type_name(x) for x in (c.operand if isinstance(c.operand, list) else [c.operand])}
    if _type_name(v) not in wanted:
        text += f" (types are strict: {_type_name(v)} never equals {' or '.join(sorted(wanted))})"
    return text


def _missing_reason(payload: dict[str, object], path: tuple[str, ...]) -> str:
    v: object = payload
    for depth, key in enumerate(path):
        if not isinstance(v, dict):
            return f" ({format_path(path[:depth])} is {_type_name(v)}, not an object)"
        if key not in v:
            return "" if depth == len(path) - 1 else f" ({format_path(path[: depth + 1])} is missing)"
        v = v[key]
    return ""


_PLAIN_KEY = re.compile(r"[^.\[\]\"\s]+")


def format_path(path: Sequence[str]) -> str:
    """Dotted path; keys that are empty or contain dots, brackets, quotes or spaces render as ``["k"]``.

    ``("issue", "labels")`` → ``issue.labels``; ``("a.b", "c")`` → ``["a.b"].c``.
    """
    parts: list[str] = []
    for key in path:
        if _PLAIN_KEY.fullmatch(key):
            parts.append(f".{key}" if parts else key)
        else:
            parts.append(f"[{json.dumps(key, ensure_ascii=False)}]")
    return "".join(parts)


def _type_name(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, Mapping):
        return "an object"
    return f"a {type(v).__name__}"


def _show(v: object, limit: int = 80) -> str:
    text = json.dumps(v, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "MAX_DEPTH",
    "OPERATORS",
    "CompiledFilter",
    "FilterProblem",
    "FilterResult",
    "InvalidFilter",
    "check",
    "compile",
    "conditions",
    "format_path",
]
