"""JSON Schemas (draft 2020-12) of every definition file, shipped as package data.

Schemas reference each other by ``$id`` (``agent-config.schema.json`` is shared by ``factory.yaml``
agents and automation ``config``); :func:`registry` makes those references resolvable offline.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used: a valid file is checked by fastjsonschema alone
    from jsonschema import Draft202012Validator
    from referencing import Registry

BASE_URI = "https://factoryctl.dev/schemas/"
NAMES = (
    "factory",
    "agent",
    "skill",
    "runner",
    "scorer",
    "benchmark",
    "benchmark-task",
    "webhook",
    "automation",
    "environment",
    "schedule",
    "notification",
    "agent-config",
    "common",
)


def load_schema(name: str) -> dict[str, Any]:
    """The schema called ``name`` (e.g. ``"webhook"``) as a fresh dict."""
    if name not in NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(NAMES)}")
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@lru_cache(maxsize=1)
def registry() -> Registry[Any]:
    """Every definition schema, keyed by its ``$id``, for resolving cross-schema ``$ref``s."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    resources_ = [
        (BASE_URI + f"{name}.schema.json", Resource.from_contents(load_schema(name), DRAFT202012))
        for name in NAMES
    ]
    return Registry().with_resources(resources_)


@lru_cache(maxsize=16)
def validator(name: str) -> Draft202012Validator:
    """The compiled validator of schema ``name`` (built once per process), shared by the reconciler
    and the environments API so both judge a definition by the same schema."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(name), registry=registry())


__all__ = ["BASE_URI", "NAMES", "load_schema", "registry", "validator"]
