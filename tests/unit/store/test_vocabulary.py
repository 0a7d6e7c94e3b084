"""The run vocabulary (``store/rules/vocabulary.py``) is the one definition: every copy agrees with it.

Copies that cannot import it - the typed client and the worker agent (contracts forbid them the store),
the JSON Schemas and the OpenAPI document - are compared with it here, so a state, a source or a scheme
added in one place and forgotten in another fails this test.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
import yaml

import schemas
from api.runs.states import TERMINAL, WORKER_REPORTS
from factoryctl.client import events as client_events
from factoryctl.client import models as client_models
from factoryctl.client import worker_resources
from factoryctl.worker import execution
from store.rules.vocabulary import (
    RUN_SOURCES,
    RUN_STATES,
    SCHEME_ALIASES,
    SIGNATURE_SCHEMES,
    RunSource,
    RunState,
    canonical_scheme,
)

OPENAPI: dict[str, Any] = yaml.safe_load(resources.files(schemas).joinpath("openapi.yaml").read_text("utf-8"))
COMPONENTS: dict[str, Any] = OPENAPI["components"]["schemas"]


def enums(node: Any) -> Iterator[list[Any]]:
    """Every ``enum`` list anywhere in a document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum" and isinstance(value, list):
                yield value
            else:
                yield from enums(value)
    elif isinstance(node, list):
        for item in node:
            yield from enums(item)


def test_the_lists_are_the_enums_in_their_order() -> None:
    assert RUN_STATES == tuple(RunState.__members__) == tuple(s.value for s in RunState)
    assert RUN_SOURCES == tuple(RunSource.__members__) == tuple(s.value for s in RunSource)


def test_canonical_scheme_resolves_aliases_and_refuses_unknown_names() -> None:
    assert [canonical_scheme(s) for s in SIGNATURE_SCHEMES] == list(SIGNATURE_SCHEMES)
    assert {canonical_scheme(a) for a in SCHEME_ALIASES} == {"standard_webhooks"}
    assert canonical_scheme("gitlab") is None


def test_the_client_and_the_worker_copies_agree() -> None:
    assert worker_resources.RUN_STATES == RUN_STATES
    assert client_events.TERMINAL_STATES == client_models.Run.TERMINAL == TERMINAL
    assert execution.FINISHED_STATES == TERMINAL


def test_openapi_names_the_vocabulary() -> None:
    assert set(COMPONENTS["RunState"]["enum"]) == set(RUN_STATES)
    assert COMPONENTS["RunSourceType"]["enum"] == list(RUN_SOURCES)
    assert COMPONENTS["Webhook"]["properties"]["signature_scheme"]["enum"] == [*SIGNATURE_SCHEMES, None]
    report = OPENAPI["paths"]["/api/v1/workers/runs/{runId}/state"]["post"]["requestBody"]
    state = report["content"]["application/json"]["schema"]["properties"]["state"]
    assert set(state["enum"]) == set(WORKER_REPORTS)


@pytest.mark.parametrize(
    "vocabulary", [RUN_STATES, RUN_SOURCES, SIGNATURE_SCHEMES], ids=["states", "sources", "schemes"]
)
def test_no_enum_of_openapi_holds_a_name_outside_the_vocabulary(vocabulary: tuple[str, ...]) -> None:
    """An enum that names one state (source, scheme) names only states: a typo or a forgotten rename fails."""
    for values in enums(OPENAPI):
        if set(values) & set(vocabulary):
            assert set(values) - {None} <= set(vocabulary), values


def test_the_definition_schemas_name_the_vocabulary() -> None:
    webhook = schemas.load_schema("webhook")["properties"]["signatureScheme"]
    assert webhook["enum"] == [*SIGNATURE_SCHEMES[:1], *SCHEME_ALIASES, *SIGNATURE_SCHEMES[1:]]
    notification = schemas.load_schema("notification")["properties"]
    assert f"({', '.join(RUN_STATES)})" in notification["events"]["description"]
    sources = notification["filter"]["properties"]["sources"]["description"]
    assert f"Run sources: {', '.join(RUN_SOURCES)} " in sources
