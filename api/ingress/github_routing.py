"""What a GitHub App delivery is checked and routed against (docs/ingress.md, "GitHub App deliveries").

The connection is read per request (one primary-key SELECT joined to its secret, whose *current* version
verifies: a connection has no captured version, so setting the team secret takes effect on the next
delivery). It is described as a :class:`~api.ingress.lookup.WebhookRow` of scheme ``github`` so that
the failed-request budget, the secret cache, the rate limit and the delivery log treat it exactly like a
webhook.

Routing reads every enabled automation of the connection's team with its factory's repositories - one
SELECT per batch, on the ``automations.team_id`` index - and keeps those with a ``github`` trigger for one
of the delivery's trigger events (:func:`store.rules.github_events.github_events`) whose repository is
one of the factory's (``owner/name``, case-insensitive) and whose normalized filter the event's facts
satisfy (:func:`store.rules.triggers.evaluate`). An automation matches a delivery once, however many of
its triggers match: it starts at most one run per delivery.

Every automation of the team with a ``github`` trigger, disabled ones included, gets a decision
(docs/ingress.md, "Decisions"): matched, or why not - disabled, an event none of its triggers is for, a
repository that is not one of its factory's, or the first failing filter condition as
:func:`~store.rules.triggers.evaluate` words it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.ingress.decisions import DISABLED, Routed, decision
from api.ingress.lookup import WebhookRow
from store.models import Automation, Factory, GitHubConnection, Secret
from store.rules.github_events import GitHubEvent, github_events
from store.rules.triggers import FilterVerdict, evaluate

PROVIDER = "github"
SCHEME = "github"
DELIVERY_HEADER = "X-GitHub-Delivery"
EVENT_HEADER = "X-GitHub-Event"
CONNECTION_NAME = "GitHub App"  # the name the delivery log and the runs' creator show

_CONNECTION = (
    select(
        GitHubConnection.uid,
        GitHubConnection.team_id,
        GitHubConnection.secret_name,
        Secret.id,
        Secret.current_version,
    )
    .outerjoin(
        Secret, and_(Secret.team_id == GitHubConnection.team_id, Secret.name == GitHubConnection.secret_name)
    )
    .where(GitHubConnection.uid == bindparam("uid"))
)

# Automations of the teams involved (enabled or not: disabled ones get a decision too), with their
# factories' repositories.
_CANDIDATES = (
    select(
        Automation.uid,
        Automation.team_id,
        Automation.triggers,
        Factory.repositories,
        Automation.name,
        Automation.enabled,
    )
    .join(Factory, Factory.uid == Automation.factory_uid)
    .where(Automation.team_id.in_(bindparam("teams", expanding=True)))
    .order_by(Automation.uid)
)


@dataclass(frozen=True, slots=True)
class _Candidate:
    uid: str
    name: str
    enabled: bool
    triggers: list[Mapping[str, Any]]  # its github triggers
    repositories: set[str]


async def find_connection(session: AsyncSession, uid: str) -> WebhookRow | None:
    """The connection with this UID as ingress sees it, or None (unknown or disconnected: one 404)."""
    row = (await session.execute(_CONNECTION, {"uid": uid})).first()
    if row is None:
        return None
    return connection_row(row[0], row[1], row[2], row[3], row[4])


def connection_row(
    uid: str, team_id: str, secret_name: str, secret_id: str | None, secret_version: int | None
) -> WebhookRow:
    """A connection in the shape the shared ingress parts take; it belongs to no factory."""
    return WebhookRow(
        uid=uid,
        team_id=team_id,
        factory_uid="",
        name=CONNECTION_NAME,
        auth_mode="signature",
        signature_scheme=SCHEME,
        secret_name=secret_name,
        secret_version=secret_version if secret_id is not None else None,
        delivery_id_header=DELIVERY_HEADER,
        secret_id=secret_id,
    )


def match_in(conn: Connection, deliveries: Sequence[tuple[str, str, object]]) -> list[Routed]:
    """For each (team ID, GitHub event name, payload): the UIDs of the automations it starts a run for, in
    UID order, and a decision for each automation of the team with a github trigger. One SELECT for all
    the teams involved."""
    if not deliveries:
        return []
    teams = sorted({team for team, _, _ in deliveries})
    candidates: dict[str, list[_Candidate]] = {}
    for uid, team, triggers, repositories, name, enabled in conn.execute(_CANDIDATES, {"teams": teams}).all():
        wanted = [t for t in triggers or () if isinstance(t, Mapping) and t.get("provider") == PROVIDER]
        if wanted:
            candidates.setdefault(team, []).append(
                _Candidate(uid, name, bool(enabled), wanted, _repositories(repositories))
            )
    return [_decide(candidates.get(team, ()), event, payload) for team, event, payload in deliveries]


def _decide(candidates: Sequence[_Candidate], event: str, payload: object) -> Routed:
    events = github_events(event, payload) if isinstance(payload, Mapping) else []
    matched: list[str] = []
    decisions: list[dict[str, Any]] = []
    for c in candidates:
        if not c.enabled:
            decisions.append(decision(c.uid, c.name, enabled=False, reason=DISABLED))
            continue
        reason, path = _miss(c, event, events)
        if reason is None:
            matched.append(c.uid)
        decisions.append(decision(c.uid, c.name, reason=reason, failed_path=path))
    return Routed(matched, decisions)


def _miss(c: _Candidate, event: str, events: Sequence[GitHubEvent]) -> tuple[str | None, str | None]:
    """(None, None) when a trigger of ``c`` matches one of the delivery's trigger events; else why not,
    and the filter key that failed (when a filter did)."""
    if not events:
        return f"GitHub event {event!r} is not one that github triggers handle (or names no repository)", None
    names = sorted({found.event for found in events})
    for_event = [(t, found) for t in c.triggers for found in events if t.get("event") == found.event]
    if not for_event:
        have = sorted({str(t.get("event")) for t in c.triggers})
        return f"no github trigger for {', '.join(names)} (its triggers are for {', '.join(have)})", None
    in_repo = [(t, found) for t, found in for_event if found.repo.casefold() in c.repositories]
    if not in_repo:
        repos = sorted({found.repo for _, found in for_event})
        return f"repository {', '.join(repos)} is not one of its factory's repositories", None
    first: FilterVerdict | None = None
    for trigger, found in in_repo:
        verdict = evaluate(trigger.get("filter") or {}, found.facts)
        if verdict.matched:
            return None, None
        first = first or verdict
    assert first is not None and first.reason is not None
    return first.reason, first.reason.split(":", 1)[0]


def _repositories(value: object) -> set[str]:
    """A factory's ``repositories`` ({owner, name} entries) as case-folded ``owner/name``."""
    found: set[str] = set()
    for entry in value if isinstance(value, list) else ():
        if not isinstance(entry, Mapping):
            continue
        owner, name = entry.get("owner"), entry.get("name")
        if isinstance(owner, str) and isinstance(name, str):
            found.add(f"{owner}/{name}".casefold())
    return found
