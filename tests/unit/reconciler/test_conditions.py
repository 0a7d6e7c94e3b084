"""Factory conditions after an apply: Ready/Reconciling/Stalled, with stable transition times."""

from __future__ import annotations

import datetime as dt

from reconciler.service import conditions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def by_type(items: list[dict]) -> dict[str, dict]:
    return {c["type"]: c for c in items}


def test_success_then_failure_then_success() -> None:
    ok = by_type(conditions([], ready=True, reason="Applied", message="applied revision abc", now=T0))
    assert {k: v["status"] for k, v in ok.items()} == {
        "Ready": "True",
        "Reconciling": "False",
        "Stalled": "False",
    }
    failed = by_type(
        conditions(
            list(ok.values()), ready=False, reason="DefinitionsInvalid", message="x.yaml:1:1: bad", now=T1
        )
    )
    assert failed["Ready"]["status"] == "False" and failed["Stalled"]["status"] == "True"
    assert (
        failed["Stalled"]["message"] == "x.yaml:1:1: bad"
        and failed["Ready"]["reason"] == "DefinitionsInvalid"
    )
    assert failed["Ready"]["last_transition_time"] == "2026-01-01T00:05:00.000Z"
    assert failed["Reconciling"]["last_transition_time"] == "2026-01-01T00:00:00.000Z"  # status did not move


def test_transition_time_only_moves_when_the_status_does() -> None:
    first = conditions([], ready=True, reason="Applied", message="a", now=T0)
    again = by_type(conditions(first, ready=True, reason="Applied", message="b", now=T1))
    assert again["Ready"]["last_transition_time"] == "2026-01-01T00:00:00.000Z"
    assert again["Ready"]["message"] == "b"
