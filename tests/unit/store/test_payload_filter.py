"""Payload filter semantics (docs/ingress.md, "Payload filters"): examples for every rule, definition
errors, explanations, and a property test against a deliberately plain recursive reference evaluator."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.rules.payload_filter import (
    MAX_DEPTH,
    FilterProblem,
    InvalidFilter,
    check,
    compile,
    format_path,
)

GITHUB = json.loads(
    json.dumps(
        {
            "action": "opened",
            "number": 42,
            "issue": {"state": "open", "labels": ["bug", "p1"], "user": {"login": "alice"}, "body": None},
            "repository": {"full_name": "org/repo", "private": False, "topics": []},
            "a.b": "dotted",
        }
    )
)

# (id, filter, payload, expected)
EXAMPLES: list[tuple[str, Any, Any, bool]] = [
    # no filter / empty filter
    ("none filter matches object", None, GITHUB, True),
    ("none filter matches array", None, [1, 2], True),
    ("empty filter matches scalar", {}, "text", True),
    # AND, equality, nesting
    ("scalar equality", {"action": "opened"}, GITHUB, True),
    ("scalar inequality", {"action": "closed"}, GITHUB, False),
    ("all keys must match", {"action": "opened", "number": 43}, GITHUB, False),
    ("all keys match", {"action": "opened", "number": 42}, GITHUB, True),
    ("nested descends", {"issue": {"user": {"login": "alice"}}}, GITHUB, True),
    ("nested mismatch", {"issue": {"user": {"login": "bob"}}}, GITHUB, False),
    ("nested and sibling", {"issue": {"state": "open", "user": {"login": "alice"}}}, GITHUB, True),
    # arrays as values: one of
    ("array value is one of", {"action": ["closed", "opened"]}, GITHUB, True),
    ("array value none match", {"action": ["closed", "edited"]}, GITHUB, False),
    ("in is the same as array", {"action": {"in": ["closed", "opened"]}}, GITHUB, True),
    ("in none match", {"action": {"in": ["closed"]}}, GITHUB, False),
    ("not_in passes", {"action": {"not_in": ["closed"]}}, GITHUB, True),
    ("not_in fails", {"action": {"not_in": ["opened"]}}, GITHUB, False),
    ("empty not_in passes", {"action": {"not_in": []}}, GITHUB, True),
    ("operators combine with AND", {"number": {"in": [41, 42], "not_in": [42]}}, GITHUB, False),
    ("operators combine, pass", {"number": {"in": [41, 42], "not_in": [41]}}, GITHUB, True),
    ("exists true", {"issue": {"state": {"exists": True}}}, GITHUB, True),
    ("exists false on present", {"issue": {"state": {"exists": False}}}, GITHUB, False),
    ("null value exists", {"issue": {"body": {"exists": True}}}, GITHUB, True),
    # missing fields
    ("missing fails equality", {"sender": "x"}, GITHUB, False),
    ("missing fails null equality", {"sender": None}, GITHUB, False),
    ("missing fails in", {"sender": {"in": ["x"]}}, GITHUB, False),
    ("missing fails exists true", {"sender": {"exists": True}}, GITHUB, False),
    ("missing passes exists false", {"sender": {"exists": False}}, GITHUB, True),
    ("missing passes not_in", {"sender": {"not_in": ["x"]}}, GITHUB, True),
    ("missing parent: nested missing", {"sender": {"login": {"exists": False}}}, GITHUB, True),
    ("missing parent: nested eq fails", {"sender": {"login": "alice"}}, GITHUB, False),
    ("missing parent: nested not_in passes", {"sender": {"login": {"not_in": ["x"]}}}, GITHUB, True),
    ("scalar parent: nested missing", {"action": {"x": {"exists": False}}}, GITHUB, True),
    ("scalar parent: nested eq fails", {"action": {"x": "opened"}}, GITHUB, False),
    ("array parent: nested missing", {"issue": {"labels": {"name": {"exists": False}}}}, GITHUB, True),
    ("array of objects is not descended", {"l": {"name": "bug"}}, {"l": [{"name": "bug"}]}, False),
    # array fields
    ("array field equality, any element", {"issue": {"labels": "bug"}}, GITHUB, True),
    ("array field equality, no element", {"issue": {"labels": "docs"}}, GITHUB, False),
    ("array field in, any element", {"issue": {"labels": ["docs", "p1"]}}, GITHUB, True),
    ("array field not_in, one element in", {"issue": {"labels": {"not_in": ["p1"]}}}, GITHUB, False),
    ("array field not_in, none in", {"issue": {"labels": {"not_in": ["docs"]}}}, GITHUB, True),
    ("array field exists", {"issue": {"labels": {"exists": True}}}, GITHUB, True),
    ("empty array field exists", {"repository": {"topics": {"exists": True}}}, GITHUB, True),
    ("empty array field equality fails", {"repository": {"topics": "x"}}, GITHUB, False),
    ("empty array field not_in passes", {"repository": {"topics": {"not_in": ["x"]}}}, GITHUB, True),
    ("object elements never equal", {"v": "x"}, {"v": [{"x": 1}, ["x"]]}, False),
    ("nested array element not flattened", {"v": 1}, {"v": [[1]]}, False),
    ("numbers in array field", {"v": {"in": [3, 4]}}, {"v": [1, 2, 3]}, True),
    # strict types
    ("number is not string", {"number": "42"}, GITHUB, False),
    ("string is not number", {"v": 1}, {"v": "1"}, False),
    ("true is not 1", {"v": True}, {"v": 1}, False),
    ("1 is not true", {"v": 1}, {"v": True}, False),
    ("false is not 0", {"v": 0}, {"v": False}, False),
    ("false equals false", {"repository": {"private": False}}, GITHUB, True),
    ("1 equals 1.0", {"v": 1}, {"v": 1.0}, True),
    ("1.0 equals 1", {"v": 1.0}, {"v": 1}, True),
    ("string 'true' is not true", {"v": "true"}, {"v": True}, False),
    ("null equals null", {"issue": {"body": None}}, GITHUB, True),
    ("null is not false", {"v": None}, {"v": False}, False),
    ("mixed list: bool only by bool", {"v": ["1", 1, None]}, {"v": True}, False),
    ("mixed list: number by value", {"v": ["1", 1, None]}, {"v": 1.0}, True),
    ("mixed list: null", {"v": ["1", 1, None]}, {"v": None}, True),
    ("mixed list: true", {"v": [0, True]}, {"v": True}, True),
    ("mixed list without null", {"v": [1, True]}, {"v": None}, False),
    ("mixed list without string", {"v": [1, True]}, {"v": "1"}, False),
    ("mixed not_in keeps types apart", {"v": {"not_in": [1, "x"]}}, {"v": True}, True),
    ("scalar filter vs object field", {"issue": "open"}, GITHUB, False),
    # empty object
    ("empty object: object field", {"issue": {}}, GITHUB, True),
    ("empty object: scalar field", {"action": {}}, GITHUB, False),
    ("empty object: array field", {"issue": {"labels": {}}}, GITHUB, False),
    ("empty object: missing field", {"sender": {}}, GITHUB, False),
    # non-object payloads
    ("array payload", {"action": "opened"}, [GITHUB], False),
    ("scalar payload", {"action": "opened"}, "opened", False),
    ("null payload", {"action": {"exists": False}}, None, False),
    ("array payload vs exists false", {"a": {"not_in": ["x"]}}, [], False),
    # keys are literal names
    ("dotted key is one field", {"a.b": "dotted"}, GITHUB, True),
    ("dotted key does not descend", {"a.b": 1}, {"a": {"b": 1}}, False),
    ("operator-named payload field via in", {"x": {"in": ["in"]}}, {"x": "in"}, True),
]


@pytest.mark.parametrize(
    ("flt", "payload", "expected"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES]
)
def test_examples(flt: Any, payload: Any, expected: bool) -> None:
    compiled = compile(flt)
    assert compiled.matches(payload) is expected
    assert compiled.explain(payload).passed is expected
    assert reference_matches(flt, payload) is expected  # the reference evaluator agrees with the table


# (id, filter, expected problem paths, a fragment of the first message)
BAD_FILTERS: list[tuple[str, Any, list[tuple[str, ...]], str]] = [
    ("array filter", [{"a": 1}], [()], "must be an object"),
    ("string filter", "action=opened", [()], "must be an object"),
    ("mixing operators and fields", {"a": {"in": [1], "b": 2}}, [("a",)], "cannot be mixed"),
    ("in takes a list", {"a": {"in": "x"}}, [("a", "in")], "'in' takes a list"),
    ("not_in takes a list", {"a": {"not_in": {"x": 1}}}, [("a", "not_in")], "'not_in' takes a list"),
    ("exists takes a bool", {"a": {"exists": "yes"}}, [("a", "exists")], "'exists' takes true or false"),
    ("exists 1 is not a bool", {"a": {"exists": 1}}, [("a", "exists")], "'exists' takes true or false"),
    ("list of objects", {"a": [{"b": 1}]}, [("a",)], "list item 0 is an object"),
    ("in list of lists", {"a": {"in": ["x", [1]]}}, [("a", "in")], "list item 1 is an array"),
    ("empty array value", {"a": []}, [("a",)], "empty list matches nothing"),
    ("empty in", {"a": {"in": []}}, [("a", "in")], "empty list matches nothing"),
    ("non-string key (YAML on/yes)", {True: "push"}, [("True",)], "not a string"),
    ("non-string nested key", {"a": {1: "x"}}, [("a", "1")], "not a string"),
    ("NaN", {"a": float("nan")}, [("a",)], "finite number"),
    ("YAML date", {"a": dt.date(2024, 1, 1)}, [("a",)], "quote it"),
    (
        "every problem is reported",
        {"a": {"exists": "no"}, "b": {"c": {"in": 3}}, "d": []},
        [("a", "exists"), ("b", "c", "in"), ("d",)],
        "'exists'",
    ),
]


@pytest.mark.parametrize(
    ("flt", "paths", "fragment"), [b[1:] for b in BAD_FILTERS], ids=[b[0] for b in BAD_FILTERS]
)
def test_check_reports_definition_errors(flt: Any, paths: list[tuple[str, ...]], fragment: str) -> None:
    problems = check(flt)
    assert [p.path for p in problems] == paths
    assert fragment in problems[0].message
    with pytest.raises(InvalidFilter) as raised:
        compile(flt)
    assert isinstance(raised.value, ValueError)
    assert list(raised.value.problems) == problems


def test_check_accepts_valid_filters() -> None:
    assert check(None) == []
    assert check({}) == []
    assert check({"a": {"not_in": []}, "b": {}, "c": {"d": [1, 2.5, "x", True, None]}}) == []


def test_check_limits_depth() -> None:
    flt: dict[str, Any] = {"leaf": 1}
    for _ in range(MAX_DEPTH + 5):
        flt = {"k": flt}
    problems = check(flt)
    assert problems == [
        FilterProblem(("k",) * (MAX_DEPTH + 1), f"filter is nested deeper than {MAX_DEPTH} levels")
    ]
    shallow: dict[str, Any] = {"leaf": 1}
    for _ in range(MAX_DEPTH - 1):
        shallow = {"k": shallow}
    assert check(shallow) == []
    assert compile(shallow).matches(json.loads(json.dumps(shallow)))


# ----------------------------------------------------------------------------------------- explain


@pytest.mark.parametrize(
    ("flt", "payload", "failed_path", "detail"),
    [
        (
            {"issue": {"labels": {"in": ["x"]}}},
            GITHUB,
            "issue.labels",
            'no element of ["bug", "p1"] is one of ["x"]',
        ),
        ({"action": ["x", "y"]}, GITHUB, "action", 'value "opened" is not one of ["x", "y"]'),
        ({"action": "x"}, GITHUB, "action", 'value "opened" is not equal to "x"'),
        ({"sender": {"login": "a"}}, GITHUB, "sender.login", "field is missing (sender is missing)"),
        ({"sender": "a"}, GITHUB, "sender", "field is missing"),
        ({"action": {"x": 1}}, GITHUB, "action.x", "field is missing (action is a string, not an object)"),
        (
            {"number": "42"},
            GITHUB,
            "number",
            'value 42 is not equal to "42" (types are strict: a number never equals a string)',
        ),
        (
            {"issue": {"labels": {"not_in": ["p1"]}}},
            GITHUB,
            "issue.labels",
            'element "p1" of ["bug", "p1"] is in ["p1"]',
        ),
        ({"action": {"not_in": ["opened"]}}, GITHUB, "action", 'value "opened" is in ["opened"]'),
        (
            {"number": {"exists": False}},
            GITHUB,
            "number",
            "field exists (value 42); the filter requires it to be absent",
        ),
        ({"action": {}}, GITHUB, "action", 'value "opened" is not an object'),
        ({"a.b": "x"}, GITHUB, '["a.b"]', 'value "dotted" is not equal to "x"'),
    ],
)
def test_explain_names_the_failing_key_and_why(flt: Any, payload: Any, failed_path: str, detail: str) -> None:
    result = compile(flt).explain(payload)
    assert (result.passed, result.failed_path, result.detail) == (False, failed_path, detail)


def test_explain_reports_the_first_failing_key_in_written_order() -> None:
    result = compile({"action": "opened", "number": 1, "issue": {"state": "closed"}}).explain(GITHUB)
    assert result.failed_path == "number"


def test_explain_passes_and_non_object_payloads() -> None:
    assert compile({"action": "opened", "number": 42}).explain(GITHUB).detail == "all 2 conditions match"
    assert compile(None).explain([1]).passed
    result = compile({"action": "opened"}).explain([GITHUB])
    assert (result.passed, result.failed_path) == (False, None)
    assert "payload is an array, not an object" in result.detail


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        (("issue", "labels"), "issue.labels"),
        (("a.b", "c"), '["a.b"].c'),
        (("c", "a.b"), 'c["a.b"]'),
        (("",), '[""]'),
        (("x y", 'q"'), '["x y"]["q\\""]'),
        (("ümlaut",), "ümlaut"),
    ],
)
def test_format_path(path: tuple[str, ...], rendered: str) -> None:
    assert format_path(path) == rendered


# ------------------------------------------------------------------------------ property vs reference

_MISSING = object()
_OPS = {"in", "not_in", "exists"}


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def _one_of(values: list[Any], field: Any) -> bool:
    if field is _MISSING:
        return False
    candidates = field if isinstance(field, list) else [field]
    return any(_json_equal(c, v) for c in candidates for v in values)


def _condition(cond: Any, field: Any) -> bool:
    if isinstance(cond, dict):
        if not cond:
            return isinstance(field, dict)
        if set(cond) <= _OPS:
            results = []
            if "in" in cond:
                results.append(_one_of(cond["in"], field))
            if "not_in" in cond:
                results.append(not _one_of(cond["not_in"], field))
            if "exists" in cond:
                results.append((field is not _MISSING) == cond["exists"])
            return all(results)
        return _fields(cond, field)
    if isinstance(cond, list):
        return _one_of(cond, field)
    return _one_of([cond], field)


def _fields(flt: dict[str, Any], node: Any) -> bool:
    for key, cond in flt.items():
        field = node[key] if isinstance(node, dict) and key in node else _MISSING
        if not _condition(cond, field):
            return False
    return True


def reference_matches(flt: dict[str, Any] | None, payload: Any) -> bool:
    if not flt:
        return True
    return isinstance(payload, dict) and _fields(flt, payload)


# Small value pools so that filters and payloads collide often, with look-alikes across types.
_POOL: list[Any] = ["x", "1", "true", "", None, True, False, 0, 1, 1.0, 2.5]
_scalars = st.sampled_from(_POOL)
_strings = st.sampled_from(["", "x", "y", "1", "true", "opened"])
_payload_keys = st.sampled_from(["a", "b", "c", "a.b", "in"])
_payload_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_payload_keys, children, max_size=3),
    max_leaves=12,
)
_payloads = st.one_of(st.dictionaries(_payload_keys, _payload_values, max_size=4), _payload_values)
_filter_keys = st.sampled_from(["a", "b", "c", "a.b"])


def _look_alikes(constant: Any) -> list[Any]:
    """Values a loose comparison would confuse with ``constant`` (``1``/``1.0``/``true``/``"1"``)."""
    return [v for v in _POOL if v == constant or str(v).lower() == str(constant).lower()] + [None]


@st.composite
def _filters(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    keys = draw(st.lists(_filter_keys, min_size=1, max_size=3, unique=True))
    return {key: draw(_conditions(depth)) for key in keys}


@st.composite
def _conditions(draw: st.DrawFn, depth: int) -> Any:
    """Every condition form, weighted toward the string forms that take the fast paths."""
    kinds = ["string", "string-list", "operators", "scalar", "mixed-list", "nested", "empty-object"]
    kind = draw(st.sampled_from(kinds if depth < 3 else kinds[:5]))
    if kind == "string":
        return draw(_strings)
    if kind == "string-list":
        return draw(st.lists(_strings, min_size=1, max_size=3))
    if kind == "scalar":
        return draw(_scalars)
    if kind == "mixed-list":
        return draw(st.lists(_scalars, min_size=1, max_size=3))
    if kind == "nested":
        return draw(_filters(depth + 1))
    if kind == "empty-object":
        return {}
    values = st.lists(_strings, min_size=1, max_size=3) | st.lists(_scalars, min_size=1, max_size=3)
    ops = draw(st.lists(st.sampled_from(["in", "not_in", "exists"]), min_size=1, max_size=3, unique=True))
    return {op: draw(st.booleans() if op == "exists" else values) for op in ops}


@st.composite
def _near_value(draw: st.DrawFn, cond: Any) -> Any:
    """A field value likely to sit on the edge of ``cond``: its constants, their look-alikes, arrays."""
    if isinstance(cond, dict) and cond and not set(cond) <= _OPS:
        return draw(_near_payloads(cond))
    if isinstance(cond, dict):
        constants = [*cond.get("in", []), *cond.get("not_in", [])]
    else:
        constants = cond if isinstance(cond, list) else [cond]
    constant = draw(st.sampled_from(constants or [None]))
    look_alike = st.sampled_from(_look_alikes(constant))
    element = st.one_of(st.just(constant), look_alike, _scalars)
    shape = draw(st.sampled_from(["constant", "array", "look-alike", "other"]))
    if shape == "constant":
        return constant
    if shape == "look-alike":
        return draw(look_alike)
    if shape == "array":
        return draw(st.lists(element, max_size=3))
    return draw(_payload_values | st.just({}))


@st.composite
def _near_payloads(draw: st.DrawFn, flt: dict[str, Any]) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(_payloads)
    payload: dict[str, Any] = draw(st.dictionaries(_payload_keys, _payload_values, max_size=2))
    for key, cond in flt.items():
        if draw(st.integers(0, 9)) < 8:
            payload[key] = draw(_near_value(cond))
    return payload


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), flt=st.one_of(_filters(), st.sampled_from([None, {}])))
def test_compiled_filter_agrees_with_reference(data: st.DataObject, flt: dict[str, Any] | None) -> None:
    payload = data.draw(_near_payloads(flt) if flt else _payloads, label="payload")
    assert check(flt) == []
    compiled = compile(flt)
    expected = reference_matches(flt, payload)
    assert compiled.matches(payload) is expected
    result = compiled.explain(payload)
    assert result.passed is expected
    if not expected and isinstance(payload, dict):
        assert result.failed_path is not None and result.detail


def _every_condition() -> Iterator[Any]:
    lists = [[v] for v in _POOL] + [list(pair) for pair in itertools.combinations(_POOL, 2)]
    yield from _POOL
    for values in lists:
        yield values
        yield {"in": values}
        yield {"not_in": values}
    yield from ({"not_in": []}, {"exists": True}, {"exists": False}, {}, {"in": ["x", 1], "not_in": [1.0]})


def _every_field() -> Iterator[Any]:
    yield _MISSING
    yield from _POOL
    yield []
    yield from ([v] for v in _POOL)
    yield from (list(pair) for pair in itertools.combinations(_POOL, 2))
    yield from ({}, {"v": 1}, [[1]], [{"x": "x"}], [[]])


def _put(key: str, field: Any) -> dict[str, Any]:
    return {} if field is _MISSING else {key: field}


def test_every_condition_against_every_field_value() -> None:
    """Exhaustive over a small pool of look-alike values (``1``/``1.0``/``true``/``"1"``/``null``...):
    every condition form, at every depth the compiler specialises, agrees with the reference."""
    fields = list(_every_field())
    for cond in _every_condition():
        # (filter, payload builders): the field itself, and the field standing where its parent should be
        shapes: list[tuple[dict[str, Any], list[Callable[[Any], Any]]]] = [
            ({"v": cond}, [lambda f: _put("v", f)]),
            ({"p": {"v": cond}}, [lambda f: {"p": _put("v", f)}, lambda f: _put("p", f)]),
            (
                {"p": {"q": {"v": cond}}},
                [lambda f: {"p": {"q": _put("v", f)}}, lambda f: {"p": _put("q", f)}],
            ),
        ]
        for flt, builders in shapes:
            single, looped = compile(flt), compile({**flt, "zz": {"exists": False}})
            for build, field in itertools.product(builders, fields):
                payload = build(field)
                expected = reference_matches(flt, payload)
                assert single.matches(payload) is expected, (flt, payload)
                assert looped.matches(payload) is expected, (flt, payload)
                assert single.explain(payload).passed is expected, (flt, payload)
