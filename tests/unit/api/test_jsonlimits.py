"""The one bounded JSON parser (:mod:`api.http.jsonlimits`): what it refuses, and that it agrees with
``json.loads`` on everything within the limits."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.jsonlimits import MAX_DEPTH, MAX_NUMBER_LENGTH, InvalidJson, loads_limited


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested more than 64"),
        (b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested more than 64"),
        (b"9" * 5000, "longer than 100"),
        (b"-" + b"1" * MAX_NUMBER_LENGTH, "longer than 100"),
        (b"0." + b"1" * 200, "longer than 100"),
        (b"1e400", "out of range"),
        (b"NaN", "NaN is not valid JSON"),
        (b"[-Infinity]", "-Infinity is not valid JSON"),
        (b'"\\ud800"', "unpaired"),
        (b'{"\\udfff": 1}', "unpaired"),
        (b"\xff", "not valid UTF-8"),
        ('{"a": 1}'.encode("utf-16"), "not valid UTF-8"),
        (b"{", "Expecting"),
        (b"", "Expecting value"),
    ],
)
def test_refused(raw: bytes, why: str) -> None:
    with pytest.raises(InvalidJson, match=why):
        loads_limited(raw)


def test_accepted_at_the_limits() -> None:
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_limited(deepest) == json.loads(deepest)
    assert loads_limited(b"-" + b"9" * (MAX_NUMBER_LENGTH - 1)) == -int("9" * (MAX_NUMBER_LENGTH - 1))
    assert loads_limited(b'"' + b"[" * 1000 + b'"') == "[" * 1000  # brackets in strings do not nest
    assert loads_limited(b'"\\\\ud800"') == "\\ud800"  # an escaped backslash, not a surrogate
    assert loads_limited(b'"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character
    assert loads_limited(b"\xef\xbb\xbf{}") == {}  # a UTF-8 byte order mark is ignored
    assert loads_limited(b"1e-400") == 0.0


def test_lone_surrogates_can_be_allowed_for_payloads_kept_as_bytes() -> None:
    assert loads_limited(b'"\\ud83d"', lone_surrogates=True) == "\ud83d"


def test_a_nul_in_a_string_or_key_is_refused_unless_kept_as_bytes() -> None:
    for raw in (b'{"a": "x\\u0000y"}', b'{"k\\u0000": 1}', b'["\\u0000"]'):
        with pytest.raises(InvalidJson, match="NUL"):
            loads_limited(raw)
    assert loads_limited(b'{"a": "x\\u0000y"}', lone_surrogates=True) == {"a": "x\x00y"}


# Text a store can keep: no U+0000 (refused as text; see the NUL tests) and no lone surrogate.
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(text.filter(lambda t: len(t) <= 8), inner, max_size=4)
    ),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_agrees_with_json_loads_within_the_limits(value: Any) -> None:
    for ensure_ascii in (True, False):  # non-ASCII text as \u escapes (surrogate pairs) and as UTF-8
        raw = json.dumps(value, ensure_ascii=ensure_ascii).encode()
        expected = json.loads(raw)
        assert _depth(expected) <= MAX_DEPTH
        assert loads_limited(raw) == expected
