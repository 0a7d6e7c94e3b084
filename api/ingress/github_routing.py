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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.ingress.lookup import WebhookRow
from store.models import Automation, Factory, GitHubConnection, Secret
from store.rules.github_events import github_events
from store.rules.triggers import evaluate

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

# Enabled automations of the teams involved, with their factories' repositories.
_CANDIDATES = (
    select(Automation.uid, Automation.team_id, Automation.triggers, Factory.repositories)
    .join(Factory, Factory.uid == Automation.factory_uid)
    .where(Automation.team_id.in_(bindparam("teams", expanding=True)), Automation.enabled.is_(True))
    .order_by(Automation.uid)
)


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


def match_in(conn: Connection, deliveries: Sequence[tuple[str, str, object]]) -> list[list[str]]:
    """For each (team ID, GitHub event name, payload): the UIDs of the automations it starts a run for,
    in UID order. One SELECT for all the teams involved."""
    if not deliveries:
        return []
    teams = sorted({team for team, _, _ in deliveries})
    candidates: dict[str, list[tuple[str, list[Any], set[str]]]] = {}
    for uid, team, triggers, repositories in conn.execute(_CANDIDATES, {"teams": teams}).all():
        wanted = [t for t in triggers or () if isinstance(t, Mapping) and t.get("provider") == PROVIDER]
        if wanted:
            candidates.setdefault(team, []).append((uid, wanted, _repositories(repositories)))
    return [_matching(candidates.get(team, ()), event, payload) for team, event, payload in deliveries]


def _matching(
    candidates: Sequence[tuple[str, list[Any], set[str]]], event: str, payload: object
) -> list[str]:
    events = github_events(event, payload) if isinstance(payload, Mapping) else []
    if not events:
        return []
    matched: list[str] = []
    for uid, triggers, repositories in candidates:
        if any(
            trigger.get("event") == found.event
            and found.repo.casefold() in repositories
            and evaluate(trigger.get("filter") or {}, found.facts).matched
            for trigger in triggers
            for found in events
        ):
            matched.append(uid)
    return matched


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
