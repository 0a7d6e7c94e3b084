"""A delivery's decisions (docs/ingress.md, "Decisions"): one per automation selecting the webhook, worded
as Test filter words the same filter and payload (docs/management.md, "Test filter")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.ingress.decisions import DISABLED, MAX_EXPLAINED, NOT_EXPLAINED, decide, only
from api.ingress.lookup import FilterCache, Route
from store.rules import payload_filter


def route(uid: str, *filters: tuple[int, dict[str, Any] | None], enabled: bool = True) -> list[Route]:
    """The routing rows of one automation on webhook ``wh_1``, one per trigger, as routing reads them."""
    return [
        ("wh_1", uid, None if f is None else json.dumps(f), index, f"name-{uid}", enabled)
        for index, f in filters
    ]


def test_matched_missed_and_disabled_automations_each_get_one_decision() -> None:
    routes = [
        *route("au_a", (0, {"action": "opened"})),
        *route("au_b", (0, {"action": "closed", "sender": {"login": "x"}})),
        *route("au_c", (0, None), enabled=False),
        *route("au_d", (1, None)),
    ]
    routed = decide(routes, {"action": "opened"}, FilterCache())
    assert routed.matched == ["au_a", "au_d"]
    assert routed.decisions == [
        {
            "automation_uid": "au_a",
            "automation_name": "name-au_a",
            "enabled": True,
            "matched": True,
            "reason": None,
            "failed_path": None,
        },
        {
            "automation_uid": "au_b",
            "automation_name": "name-au_b",
            "enabled": True,
            "matched": False,
            "reason": 'value "opened" is not equal to "closed"',
            "failed_path": "action",
        },
        {
            "automation_uid": "au_c",
            "automation_name": "name-au_c",
            "enabled": False,
            "matched": False,
            "reason": DISABLED,
            "failed_path": None,
        },
        {
            "automation_uid": "au_d",
            "automation_name": "name-au_d",
            "enabled": True,
            "matched": True,
            "reason": None,
            "failed_path": None,
        },
    ]


@pytest.mark.parametrize(
    ("flt", "payload"),
    [
        ({"labels": ["bug"]}, {"labels": ["docs", "ui"]}),
        ({"count": 1}, {"count": "1"}),
        ({"a": {"b": {"c": "x"}}}, {"a": {"b": "flat"}}),
        ({"gone": {"exists": False}}, {"gone": None}),
        ({"kind": {"not_in": ["spam"]}}, {"kind": ["ham", "spam"]}),
        ({"action": "opened"}, ["not", "an", "object"]),
    ],
)
def test_a_miss_is_worded_as_the_compiled_filter_explains_it(flt: dict[str, Any], payload: object) -> None:
    routed = decide(route("au_x", (0, flt)), payload, FilterCache())
    expected = payload_filter.compile(flt).explain(payload)
    [d] = routed.decisions or []
    assert (d["matched"], d["reason"], d["failed_path"]) == (False, expected.detail, expected.failed_path)


def test_several_triggers_report_the_first_ones_failure_numbered_as_in_the_definition() -> None:
    routed = decide(route("au_x", (2, {"a": 1}), (4, {"b": 2})), {"a": 2, "b": 3}, FilterCache())
    [d] = routed.decisions or []
    assert d["reason"] == "trigger #3: value 2 is not equal to 1" and d["failed_path"] == "a"
    assert decide(route("au_x", (2, {"a": 1}), (4, {"b": 2})), {"b": 2}, FilterCache()).matched == ["au_x"]


def test_an_invalid_stored_filter_never_fires_and_says_why() -> None:
    broken: Route = ("wh_1", "au_x", json.dumps({"a": []}), 0, "broken", True)
    routed = decide([broken], {"a": 1}, FilterCache())
    [d] = routed.decisions or []
    assert routed.matched == [] and d["failed_path"] is None
    assert d["reason"] == (
        "the payload filter is invalid: a: an empty list matches nothing; list at least one allowed value"
    )


def test_a_replay_into_one_automation_decides_the_others_not_part_of_it() -> None:
    routed = decide([*route("au_a", (0, None)), *route("au_b", (0, None))], {}, FilterCache())
    narrowed = only(routed, "au_b")
    assert narrowed.matched == ["au_b"]
    assert [d["matched"] for d in narrowed.decisions or []] == [False, True]
    assert (narrowed.decisions or [])[0]["reason"] == (
        "not part of this replay: it was replayed into automation au_b only"
    )


def test_explain_keeps_its_single_check_evaluators() -> None:
    """Explaining a miss twice builds the per-check evaluators once (the hot path's bounded cost)."""
    compiled = payload_filter.compile({"a": 1, "b": {"c": ["x", "y"]}})
    first = compiled.explain({"a": 1, "b": {"c": "z"}})
    built = compiled._each
    again = compiled.explain({"a": 1, "b": {"c": "q"}})
    assert built is not None and compiled._each is built
    assert (first.failed_path, again.failed_path) == ("b.c", "b.c")
    assert again.detail == 'value "q" is not one of ["x", "y"]'


def test_misses_past_the_bound_are_recorded_without_a_reason() -> None:
    """A webhook with very many automations costs a bounded number of explanations per delivery."""
    routes = [row for n in range(MAX_EXPLAINED + 5) for row in route(f"au_{n:04d}", (0, {"a": n}))]
    routed = decide([*routes, *route("au_zzzz", (0, None))], {"a": -1}, FilterCache())
    decisions = routed.decisions or []
    assert routed.matched == ["au_zzzz"] and len(decisions) == MAX_EXPLAINED + 6
    assert [d["reason"] for d in decisions[MAX_EXPLAINED - 1 : MAX_EXPLAINED + 1]] == [
        f"value -1 is not equal to {MAX_EXPLAINED - 1}",
        NOT_EXPLAINED,
    ]
    assert decisions[-1]["matched"] is True
