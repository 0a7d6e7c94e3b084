"""The run vocabulary, defined once: run states, run sources and signature scheme names.

The state machine (``api/runs/states.py``), the queue and the console, notification rules, webhook
definitions and the API's webhook rules, ingress verification and the CLI's choices all derive their
lists from here. Two copies remain, each checked against this module by
``tests/unit/store/test_vocabulary.py``: ``factoryctl.client`` keeps its own (a contract forbids it to
import the store: docs/architecture.md), and the JSON Schemas and the OpenAPI document write the names
out as enums.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class RunState(StrEnum):
    """A run's state (docs/api.md, "Run states"), in the order lists show them: the way a run goes."""

    QUEUED = "QUEUED"
    PENDING = "PENDING"  # reserved: nothing enters it yet; it can be cancelled and followed up
    CLAIMED = "CLAIMED"
    INPROGRESS = "INPROGRESS"
    BLOCKED = "BLOCKED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"


class RunSource(StrEnum):
    """Where a run came from (a run's ``source``)."""

    API = "API"
    CLI = "CLI"
    CUSTOM_WEBHOOK = "CUSTOM_WEBHOOK"
    FACTORY = "FACTORY"
    SCHEDULED_AGENT = "SCHEDULED_AGENT"
    RUN_SCORER = "RUN_SCORER"  # a scorer's judge run (docs/scorers.md); never itself judged


RUN_STATES: Final[tuple[str, ...]] = tuple(state.value for state in RunState)
RUN_SOURCES: Final[tuple[str, ...]] = tuple(source.value for source in RunSource)

# The signature schemes a ``signature`` webhook may name (docs/ingress.md, "Provider signatures"), and
# the other names a definition or the API may give them.
SIGNATURE_SCHEMES: Final[tuple[str, ...]] = (
    "standard_webhooks",
    "stripe",
    "github",
    "sentry",
    "pagerduty",
    "vercel",
    "slack",
    "linear",
    "shopify",
)
SCHEME_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"standard-webhooks": "standard_webhooks", "svix": "standard_webhooks"}
)


def canonical_scheme(name: str) -> str | None:
    """The canonical scheme name for ``name`` (aliases resolved), or None when it names no scheme."""
    name = SCHEME_ALIASES.get(name, name)
    return name if name in SIGNATURE_SCHEMES else None


__all__ = [
    "RUN_SOURCES",
    "RUN_STATES",
    "SCHEME_ALIASES",
    "SIGNATURE_SCHEMES",
    "RunSource",
    "RunState",
    "canonical_scheme",
]
