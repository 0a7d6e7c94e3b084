"""What the console's run page shows of a run's network (docs/console.md, "Pages"): the sandbox its worker
reported, the network policy of its environment, and the destinations the worker's egress proxy refused.

The policy is computed the way the claim computes it (:func:`api.runs.network.network_policy`), from the
environment as it is now; the sandbox's ``network`` is the mode the worker applied when the run started.
Refusals are the run's ``egress_refused`` events (docs/events.md, "Egress refusals"); their text comes from
the run's own programs, so the template escapes it like any other run output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api.runs.events import EGRESS_REFUSED
from api.runs.network import network_policy
from api.runs.prepare import find_environment

SANDBOX_KINDS = {"bwrap": "bubblewrap", "none": "none (unsandboxed)"}


async def network_view(
    session: AsyncSession, team_id: str, config: Mapping[str, Any] | None, sandbox: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``{environment, mode, allow, sandbox}`` for the page: ``environment`` the name the run gives (None:
    none), ``mode``/``allow`` its policy now, ``sandbox`` None until a worker reported one."""
    name = (config or {}).get("environment_id")
    row = await find_environment(session, team_id, name) if isinstance(name, str) and name else None
    policy = network_policy(row.spec or {} if row is not None else None)
    shown = None
    if sandbox is not None:
        kind = str(sandbox.get("kind", ""))
        shown = {"kind": SANDBOX_KINDS.get(kind, kind), "network": str(sandbox.get("network", ""))}
    return {
        "environment": row.name if row is not None else (name if isinstance(name, str) and name else None),
        "missing": isinstance(name, str) and bool(name) and row is None,
        "mode": policy["mode"],
        "allow": policy["allow"],
        "sandbox": shown,
    }


def refused_destinations(rows: Iterable[Any]) -> list[dict[str, str]]:
    """The run's ``egress_refused`` events, oldest first, as ``{destination, reason}`` text."""
    out = []
    for row in rows:
        if row.kind != EGRESS_REFUSED:
            continue
        data = row.data if isinstance(row.data, Mapping) else {}
        host, port = str(data.get("host", "")), data.get("port")
        host = f"[{host}]" if ":" in host else host
        out.append({"destination": f"{host}:{port}" if port else host, "reason": str(data.get("reason", ""))})
    return out
