"""JSON Schema validation with messages a person can act on, placed at file:line:column.

jsonschema's own messages dump whole instances and schemas ("{...} is not valid under any of the
given schemas"). Here the common validators are translated into short sentences that name the key
("unknown key 'authmode' (did you mean 'authMode'?)", "'enabled' must be a boolean, got string"),
and each error is placed on the YAML node it is about: the unknown key itself, the bad value, or
the mapping that lacks a required key. A schema may carry ``errorMessage`` (as in ajv-errors) to
explain a ``pattern``, ``oneOf``, ``not`` or conditional ``required`` in its own words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonschema itself is only needed to explain an invalid file (via schemas.validator)
    from jsonschema.exceptions import ValidationError

import fastjsonschema  # the same verdicts as jsonschema, ~15x faster for the files that are valid

import schemas
from reconciler.diagnostics import Diagnostic
from reconciler.yamlmarks import JsonPath, Marks, path_str

_TYPES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "null": "null",
}
_CUSTOM = ("pattern", "oneOf", "anyOf", "not", "required")


validator = schemas.validator


@lru_cache(maxsize=16)
def fast_check(name: str) -> Callable[[Any], Any]:
    """A compiled validity check of schema ``name`` (raises on invalid input); built once per process."""

    def fetch(uri: str) -> Any:
        return schemas.load_schema(uri.rsplit("/", 1)[-1].removesuffix(".schema.json"))

    check: Callable[[Any], Any] = fastjsonschema.compile(
        schemas.load_schema(name), handlers={"https": fetch}, use_default=False
    )
    return check


def is_valid(name: str, data: Any) -> bool:
    """Whether ``data`` satisfies schema ``name`` (the fast path; :func:`check` explains failures)."""
    try:
        fast_check(name)(data)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def kind(value: Any) -> str:
    """The YAML-facing type name of a value, for "got ..." messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return "null"


def shown(value: Any, limit: int = 60) -> str:
    text = f"'{value}'" if isinstance(value, str) else ("null" if value is None else str(value).lower())
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def suggest(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a near miss (case-insensitive first), else ``""``."""
    options = [str(c) for c in choices]
    lowered = {c.lower(): c for c in options}
    match = lowered.get(word.lower()) or next(
        iter(difflib.get_close_matches(word, options, n=1, cutoff=0.6)), None
    )
    return f" (did you mean '{match}'?)" if match else ""


def check(name: str, data: Any, marks: Marks, file: str) -> list[Diagnostic]:
    """Every schema violation of ``data`` against schema ``name``, sorted by position.

    Valid documents take the compiled fast path; jsonschema then explains invalid ones (its verdict
    is the one that counts).
    """
    if is_valid(name, data):
        return []
    errors = list(validator(name).iter_errors(data))
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    out: list[Diagnostic] = []
    for error in errors:
        where = tuple(error.absolute_path)
        if error.validator != "type" and where in typed:
            continue  # "must be a mapping" says it all
        for message, (line, column) in _translate(error, where, marks):
            out.append(Diagnostic("FC010", message, file, line, column))
    unique = {(d.line, d.column, d.message): d for d in out}
    return sorted(unique.values(), key=lambda d: (d.line, d.column, d.message))


def _translate(error: ValidationError, where: JsonPath, marks: Marks) -> list[tuple[str, tuple[int, int]]]:
    validator_name = str(error.validator)
    expected: Any = error.validator_value
    instance: Any = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    custom = schema.get("errorMessage") if validator_name in _CUSTOM else None
    label = path_str(where)
    name = f"'{label}'" if label else "the document"
    inside = f" in '{label}'" if label else ""
    at = marks.value(where)

    if "propertyNames" in error.absolute_schema_path:
        detail = custom or f"must match {expected}"
        return [(f"invalid key '{instance}'{inside}: {detail}", marks.key((*where, str(instance))))]
    if validator_name == "required":
        missing = [key for key in expected if isinstance(instance, dict) and key not in instance]
        place = marks.key(where) if where else at
        return [
            (f"{custom}{inside}" if custom else f"missing required key '{key}'{inside}", place)
            for key in missing
        ]
    if validator_name == "additionalProperties" and isinstance(instance, dict):
        known = schema.get("properties", {})
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        extras = [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]
        return [(f"unknown key '{k}'{inside}{suggest(k, known)}", marks.key((*where, k))) for k in extras]
    if validator_name == "not" and custom:
        keys = schema.get("not", {}).get("required", [])
        return [(custom, marks.key((*where, keys[0])) if keys else at)]
    return [(_simple(validator_name, expected, instance, name, custom, error.message), at)]


def _simple(validator_name: str, expected: Any, instance: Any, name: str, custom: Any, raw: str) -> str:
    got = f"got {kind(instance)}"
    if validator_name == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        return f"{name} must be {' or '.join(_TYPES.get(t, t) for t in wanted)}, {got}"
    if validator_name == "enum":
        hint = suggest(instance, map(str, expected)) if isinstance(instance, str) else ""
        allowed = ", ".join(str(v) for v in expected)
        return f"{name} must be one of: {allowed}; got {shown(instance)}{hint}"
    if validator_name == "const":
        return f"{name} must be {shown(expected)}, got {shown(instance)}"
    if validator_name == "pattern":
        return f"{name} {custom or f'must match the pattern {expected}'}; got {shown(instance)}"
    if validator_name in ("minItems", "minLength") and expected == 1:
        return f"{name} must not be empty"
    bounds = {
        "minItems": f"must have at least {expected} items",
        "maxItems": f"must have at most {expected} items",
        "minLength": f"must be at least {expected} characters long",
        "maxLength": f"must be at most {expected} characters long",
        "minimum": f"must be at least {expected}, got {shown(instance)}",
        "maximum": f"must be at most {expected}, got {shown(instance)}",
        "uniqueItems": "must not contain duplicates",
    }
    if validator_name in bounds:
        return f"{name} {bounds[validator_name]}"
    if custom:
        return f"{name}: {custom}"
    if validator_name in ("oneOf", "anyOf"):
        return f"{name} does not match any of the allowed forms"
    return f"{name}: {raw}"
