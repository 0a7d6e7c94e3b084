"""The team's GitHub App connection (docs/management.md, "GitHub App connection"): connect, show,
disconnect, and the connection's delivery log and replay."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    parse_list_of,
    parse_model,
    parse_nothing,
)
from factoryctl.client._modelbase import Model
from factoryctl.client._transport import RequestSpec, path, query
from factoryctl.client.models import Delivery, DeliveryReplay

_GITHUB = V1 + "/integrations/github"


@dataclass(frozen=True, kw_only=True)
class GitHubConnection(Model):
    """A team's GitHub App: ``url`` is what the App's webhook settings point at; ``secret_name`` the
    team secret holding the App's webhook secret."""

    uid: str
    url: str | None = None
    secret_name: str | None = None
    created_at: dt.datetime | None = None


def connect_github(secret_name: str) -> RequestSpec[GitHubConnection]:
    """Connect the team's GitHub App (409 when it has one). Not retried on an ambiguous failure: a
    repeat would answer 409."""
    body = json_body(secret_name=secret_name)
    return RequestSpec("POST", _GITHUB, parse_model(GitHubConnection), json=body)


def get_github() -> RequestSpec[GitHubConnection]:
    """The team's connection (404 when none)."""
    return RequestSpec("GET", _GITHUB, parse_model(GitHubConnection))


def disconnect_github() -> RequestSpec[None]:
    """Remove the connection: deliveries to its URL answer 404 at once."""
    return RequestSpec("DELETE", _GITHUB, parse_nothing)


def list_github_deliveries(
    *, status: str | Sequence[str] | None = None, limit: int | None = None
) -> RequestSpec[list[Delivery]]:
    """The newest entries of the connection's delivery log."""
    params = query(status=[status] if isinstance(status, str) else list(status or ()), limit=limit)
    return RequestSpec("GET", _GITHUB + "/deliveries", parse_list_of("deliveries", Delivery), params=params)


def replay_github_delivery(delivery_id: str) -> RequestSpec[DeliveryReplay]:
    """Route an Accepted delivery again against the team's automations as they are now (never
    de-duplicated, so never retried on an ambiguous failure)."""
    return RequestSpec(
        "POST", path(_GITHUB + "/deliveries/{}/replay", delivery_id), parse_model(DeliveryReplay), json={}
    )


class GitHub(Resource[Mode]):
    connect = endpoint(connect_github)
    get = endpoint(get_github)
    disconnect = endpoint(disconnect_github)
    deliveries = endpoint(list_github_deliveries)
    replay = endpoint(replay_github_delivery)
