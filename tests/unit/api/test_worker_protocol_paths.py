"""The worker protocol has one path per call (docs/architecture.md, "Packages and arrows"): the HTTP routes
and the service-hosted workers both call :class:`api.claims.protocol.WorkerProtocol`, and neither reaches
past it to the queue's SQL, the claim answer or the event wake-ups."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CALLERS = ("api/claims/routes.py", "factoryctl/serve/local_workers.py")
# What only api.claims.protocol may combine: a caller importing one of these wrote a second path.
BEHIND_THE_PROTOCOL = ("api.claims.queue", "api.claims.payload", "api.runs.event_hub", "store.secrets")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("caller", CALLERS)
def test_callers_go_through_the_protocol(caller: str) -> None:
    imports = _imports(ROOT / caller)
    assert "api.claims.protocol.WorkerProtocol" in imports
    assert not {
        m for m in imports for hidden in BEHIND_THE_PROTOCOL if m == hidden or m.startswith(hidden + ".")
    }


def test_lease_errors_are_one_type() -> None:
    from api.claims.errors import LeaseRefused, NotLeaseHolder
    from api.claims.queue import NotLeaseHolder as raised_by_the_queue
    from store import WriteRefused

    assert raised_by_the_queue is NotLeaseHolder
    assert issubclass(NotLeaseHolder, LeaseRefused) and issubclass(LeaseRefused, WriteRefused)
    assert LeaseRefused("refused", "SUCCEEDED").extensions == {"state": "SUCCEEDED"}
