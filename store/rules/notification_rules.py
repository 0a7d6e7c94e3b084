"""What an outbound notification endpoint subscribes to (docs/notifications.md, "Events and filters").

One place for the rules both writers of endpoints keep — definitions (``notifications/<name>.yaml``) and
the management API — and for the match the fan-out applies to every run state change:

- ``events``: a non-empty list of run states (``QUEUED`` … ``CANCELLED``), ``run.<state>`` in lower case
  (the message type, e.g. ``run.succeeded``), or ``run.*`` for every state change. Stored canonical:
  state names, or ``["run.*"]``.
- ``filter`` (optional, every given key must match):
  ``factories`` — factory names, or ``["*"]`` for every run of the team (API runs without a factory
  included); absent means the runs of the endpoint's own factory only.
  ``automations`` — automation names; a run that no automation started never matches.
  ``sources`` — run sources (``CUSTOM_WEBHOOK``, ``SCHEDULED_AGENT``, ``API``, ``CLI``, ``FACTORY``,
  ``RUN_SCORER``).

Only changes of state notify: a cancel *request* (same state, ``cancel_requested`` set) does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from store.rules.vocabulary import RUN_SOURCES, RUN_STATES

ALL: Final = "run.*"
FILTER_KEYS: Final = ("factories", "automations", "sources")
ANY_FACTORY: Final = "*"


class RuleError(ValueError):
    """An ``events`` or ``filter`` value that cannot be stored; ``field`` names where (``events[1]``)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def event_type(state: str) -> str:
    """The message ``type`` of a change into ``state``: ``run.succeeded``."""
    return f"run.{state.lower()}"


def canonical_events(events: Any) -> list[str]:
    """``events`` as stored (state names, or ``["run.*"]``); RuleError for anything else."""
    if not isinstance(events, list) or not events:
        raise RuleError("events must be a non-empty list of run states or 'run.*'", field="events")
    out: list[str] = []
    for i, item in enumerate(events):
        if not isinstance(item, str):
            raise RuleError("each event must be a string", field=f"events[{i}]")
        if item == ALL:
            return [ALL]
        state = item[4:].upper() if item.startswith("run.") and item[4:].islower() else item
        if state not in RUN_STATES:
            raise RuleError(
                f"unknown event {item!r}: use a run state ({', '.join(RUN_STATES)}), run.<state> or run.*",
                field=f"events[{i}]",
            )
        if state not in out:
            out.append(state)
    return out


def _names(value: Any, key: str, allowed: Sequence[str] | None = None) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise RuleError(f"filter.{key} must be a non-empty list of names", field=f"filter.{key}")
    for i, item in enumerate(value):
        if allowed is not None and item not in allowed:
            raise RuleError(
                f"unknown {key[:-1]} {item!r}: use one of {', '.join(allowed)}",
                field=f"filter.{key}[{i}]",
            )
    return list(dict.fromkeys(value))


def canonical_filter(value: Any) -> dict[str, list[str]]:
    """``filter`` as stored (only the given keys, de-duplicated); RuleError for anything else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RuleError("filter must be an object", field="filter")
    unknown = sorted(set(value) - set(FILTER_KEYS))
    if unknown:
        raise RuleError(
            f"unknown filter key {unknown[0]!r}: use {', '.join(FILTER_KEYS)}", field=f"filter.{unknown[0]}"
        )
    out: dict[str, list[str]] = {}
    if "factories" in value:
        out["factories"] = _names(value["factories"], "factories")
        if ANY_FACTORY in out["factories"] and len(out["factories"]) > 1:
            raise RuleError("filter.factories: '*' stands alone", field="filter.factories")
    if "automations" in value:
        out["automations"] = _names(value["automations"], "automations")
    if "sources" in value:
        out["sources"] = _names(value["sources"], "sources", RUN_SOURCES)
    return out


@dataclass(frozen=True)
class RunFacts:
    """What a match looks at: the run's new state and where the run came from."""

    state: str
    previous_state: str | None
    factory_uid: str | None
    factory_name: str | None
    automation_name: str | None
    source: str | None


def is_change(state: str, previous_state: str | None) -> bool:
    """A state event that notifies: creation, or a move to another state (not a cancel request)."""
    return previous_state is None or state != previous_state


def matches(
    events: Sequence[str], flt: Mapping[str, Sequence[str]], endpoint_factory_uid: str, run: RunFacts
) -> bool:
    """Whether an endpoint (its canonical ``events`` and ``filter``) is told about this change."""
    if not is_change(run.state, run.previous_state):
        return False
    if ALL not in events and run.state not in events:
        return False
    factories = flt.get("factories")
    if factories is None:
        if run.factory_uid != endpoint_factory_uid:
            return False
    elif ANY_FACTORY not in factories and run.factory_name not in factories:
        return False
    automations = flt.get("automations")
    if automations is not None and run.automation_name not in automations:
        return False
    sources = flt.get("sources")
    return sources is None or run.source in sources


__all__ = [
    "ALL",
    "ANY_FACTORY",
    "FILTER_KEYS",
    "RUN_SOURCES",
    "RUN_STATES",
    "RuleError",
    "RunFacts",
    "canonical_events",
    "canonical_filter",
    "event_type",
    "is_change",
    "matches",
]
