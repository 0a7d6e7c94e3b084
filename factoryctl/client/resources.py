"""The API's resources for runs, factories, secrets and files, and :class:`Resources`, all of them.

Each function builds the :class:`~factoryctl.client._transport.RequestSpec` of one call; the resource
classes expose them as methods in every mode (see :mod:`factoryctl.client._endpoints`). Webhooks, their
deliveries and automations live in :mod:`factoryctl.client.webhook_resources`, scheduled agents and the
SDK's ``/agent`` listings in :mod:`factoryctl.client.agent_resources`, the worker protocol in
:mod:`factoryctl.client.worker_resources`, notification endpoints and their messages in
:mod:`factoryctl.client.notification_resources`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Generic

import httpx

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    paginated,
    parse_list_of,
    parse_model,
    parse_nothing,
    parse_page_of,
)
from factoryctl.client._transport import RequestSpec, path, query
from factoryctl.client.agent_resources import Agents, Schedules
from factoryctl.client.events import Events, streamed
from factoryctl.client.github_resources import GitHub
from factoryctl.client.models import (
    Attachment,
    Factory,
    FactoryDetail,
    FactoryFilesValidation,
    FactoryRun,
    Followup,
    LogPage,
    Page,
    Run,
    RunCreated,
    Secret,
)
from factoryctl.client.notification_resources import Notifications
from factoryctl.client.webhook_resources import Automations, Deliveries, Webhooks
from factoryctl.client.worker_resources import Workers

# --- runs ------------------------------------------------------------------------------------------


def create_run(
    prompt: str | None = None,
    *,
    title: str | None = None,
    config: Mapping[str, Any] | None = None,
    skill: str | None = None,
    metadata: Mapping[str, str] | None = None,
    attachments: Sequence[Attachment] = (),
    conversation_id: str | None = None,
    parent_run_id: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> RequestSpec[RunCreated]:
    """Start a run (``POST /agent/runs``); give a prompt, a skill, or both."""
    body = json_body(
        prompt=prompt,
        title=title,
        config=dict(config) if config else None,
        skill=skill,
        metadata=dict(metadata) if metadata else None,
        attachments=[a.to_json() for a in attachments] or None,
        conversation_id=conversation_id,
        parent_run_id=parent_run_id,
    )
    return RequestSpec(
        "POST", f"{V1}/agent/runs", parse_model(RunCreated), json={**body, **(extra_body or {})}
    )


def list_runs(
    *,
    limit: int | None = None,
    cursor: str | None = None,
    sort_by: str | None = None,
    sort_order: str | None = None,
    state: str | Sequence[str] | None = None,
    name: str | None = None,
    model_id: str | None = None,
    creator: str | None = None,
    source: str | None = None,
    created_after: str | None = None,
    created_before: str | None = None,
    updated_after: str | None = None,
    factory_uid: str | None = None,
    automation_id: str | None = None,
    schedule_id: str | None = None,
    q: str | None = None,
) -> RequestSpec[Page[Run]]:
    """One page of runs (``GET /agent/runs``); timestamps are RFC 3339 strings; ``schedule_id``: the runs
    a scheduled agent started (``Run.schedule``)."""
    params = query(
        limit=limit,
        cursor=cursor,
        sort_by=sort_by,
        sort_order=sort_order,
        state=[state] if isinstance(state, str) else list(state or ()),
        name=name,
        model_id=model_id,
        creator=creator,
        source=source,
        created_after=created_after,
        created_before=created_before,
        updated_after=updated_after,
        factory_uid=factory_uid,
        automation_id=automation_id,
        schedule_id=schedule_id,
        q=q,
    )
    return RequestSpec("GET", f"{V1}/agent/runs", parse_page_of("runs", Run), params=params)


def get_run(run_id: str) -> RequestSpec[Run]:
    return RequestSpec("GET", path(f"{V1}/agent/runs/{{}}", run_id), parse_model(Run))


def followup_run(run_id: str, message: str, *, mode: str | None = None) -> RequestSpec[Followup]:
    body = json_body(message=message, mode=mode)
    return RequestSpec(
        "POST", path(f"{V1}/agent/runs/{{}}/followups", run_id), parse_model(Followup), json=body
    )


def _run_id(response: httpx.Response) -> str:
    value = response.json()
    if not isinstance(value, str):
        raise TypeError("expected the run ID as a JSON string")
    return value


def cancel_run(run_id: str) -> RequestSpec[str]:
    """Cancel a run; answers its ID. Not retried on ambiguous failures: a repeat of a cancel
    that took effect would answer 400 (the run is already terminal)."""
    return RequestSpec("POST", path(f"{V1}/agent/runs/{{}}/cancel", run_id), _run_id)


def run_logs(run_id: str, *, after: int = 0, limit: int | None = None) -> RequestSpec[LogPage]:
    params = query(after=after, limit=limit)
    return RequestSpec("GET", path(f"{V1}/agent/runs/{{}}/logs", run_id), parse_model(LogPage), params=params)


class Runs(Resource[Mode]):
    create = endpoint(create_run)
    list = endpoint(list_runs)
    iter = paginated(list_runs)
    get = endpoint(get_run)
    followup = endpoint(followup_run)
    cancel = endpoint(cancel_run)
    logs = endpoint(run_logs)
    iter_logs = paginated(run_logs)
    events = streamed()  # the live event stream (docs/events.md)


# --- factories -------------------------------------------------------------------------------------


def list_factories(
    *, search: str | None = None, limit: int | None = None, cursor: str | None = None
) -> RequestSpec[Page[Factory]]:
    params = query(search=search, limit=limit, cursor=cursor)
    return RequestSpec("GET", f"{V1}/factory", parse_page_of("factories", Factory), params=params)


def get_factory(factory_uid: str) -> RequestSpec[FactoryDetail]:
    return RequestSpec("GET", path(f"{V1}/factory/{{}}", factory_uid), parse_model(FactoryDetail))


def create_factory(
    name: str, *, worker_host: str | None = None, description: str | None = None
) -> RequestSpec[Factory]:
    """Create an API-managed factory (admin)."""
    body = json_body(name=name, worker_host=worker_host, description=description)
    return RequestSpec("POST", f"{V1}/factory", parse_model(Factory), json=body)


def dispatch_factory(
    factory_uid: str,
    prompt: str,
    *,
    title: str | None = None,
    ticket_ref: str | None = None,
    ticket_url: str | None = None,
) -> RequestSpec[FactoryRun]:
    """Start a run of the factory's foreman on its worker host."""
    body = json_body(prompt=prompt, title=title, ticket_ref=ticket_ref, ticket_url=ticket_url)
    return RequestSpec(
        "POST", path(f"{V1}/factory/{{}}/runs", factory_uid), parse_model(FactoryRun), json=body
    )


def _json_object(response: httpx.Response) -> dict[str, Any]:
    if response.status_code == 204 or not response.content:
        return {}
    value = response.json()
    if not isinstance(value, dict):
        raise TypeError("expected a JSON object")
    return value


def reconcile_factory(factory_uid: str) -> RequestSpec[dict[str, Any]]:
    """Ask the server's reconciler to re-apply the factory now (``POST /factory/{uid}/reconcile``)."""
    return RequestSpec("POST", path(f"{V1}/factory/{{}}/reconcile", factory_uid), _json_object)


class Factories(Resource[Mode]):
    list = endpoint(list_factories)
    iter = paginated(list_factories)
    get = endpoint(get_factory)
    create = endpoint(create_factory)
    dispatch = endpoint(dispatch_factory)
    reconcile = endpoint(reconcile_factory)


# --- secrets and files -----------------------------------------------------------------------------


def list_secrets() -> RequestSpec[list[Secret]]:
    """Names, versions and users of the team's secrets (never values)."""
    return RequestSpec("GET", f"{V1}/secrets", parse_list_of("secrets", Secret))


def create_secret(name: str, value: str | None = None, *, scope: str | None = None) -> RequestSpec[Secret]:
    """Create a secret; without ``value`` one is generated and returned once in ``Secret.value``.

    ``scope``: ``webhook`` (the server's default) or ``run`` (docs/management.md, "Team secrets")."""
    body = json_body(name=name, value=value, scope=scope)
    return RequestSpec("POST", f"{V1}/secrets", parse_model(Secret), json=body)


def set_secret(name: str, value: str | None = None, *, scope: str | None = None) -> RequestSpec[Secret]:
    """Give a secret a new version (generated when ``value`` is None), or, with ``scope`` alone, change
    only its scope."""
    return RequestSpec(
        "PUT", path(f"{V1}/secrets/{{}}", name), parse_model(Secret), json=json_body(value=value, scope=scope)
    )


def delete_secret(name: str) -> RequestSpec[None]:
    return RequestSpec("DELETE", path(f"{V1}/secrets/{{}}", name), parse_nothing)


class Secrets(Resource[Mode]):
    list = endpoint(list_secrets)
    create = endpoint(create_secret)
    set = endpoint(set_secret)
    delete = endpoint(delete_secret)


def _file_entry(name: str, data: bytes | str) -> dict[str, str]:
    """One ``{path, content}``; bytes that are not UTF-8 go as base64 (``"encoding": "base64"``, a
    factoryctl extension) so the server reports them as a local run does."""
    if isinstance(data, str):
        return {"path": name, "content": data}
    try:
        return {"path": name, "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"path": name, "content": base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def validate_files(files: Mapping[str, bytes | str]) -> RequestSpec[FactoryFilesValidation]:
    """Validate one factory's files (path inside the factory -> content) in the product's
    ``{"files": [{path, content}]}``; a key adds the server's online checks."""
    return RequestSpec(
        "POST",
        f"{V1}/factory-files/validate",
        parse_model(FactoryFilesValidation),
        json={"files": [_file_entry(name, data) for name, data in files.items()]},
        idempotent=True,
    )


class Files(Resource[Mode]):
    validate = endpoint(validate_files)


class Resources(Generic[Mode]):
    """Every resource of the API, in one mode."""

    def __init__(self, executor: Any) -> None:
        self.runs: Runs[Mode] = Runs(executor)
        self.factories: Factories[Mode] = Factories(executor)
        self.webhooks: Webhooks[Mode] = Webhooks(executor)
        self.deliveries: Deliveries[Mode] = Deliveries(executor)
        self.automations: Automations[Mode] = Automations(executor)
        self.notifications: Notifications[Mode] = Notifications(executor)
        self.secrets: Secrets[Mode] = Secrets(executor)
        self.files: Files[Mode] = Files(executor)
        self.workers: Workers[Mode] = Workers(executor)
        self.schedules: Schedules[Mode] = Schedules(executor)
        self.agents: Agents[Mode] = Agents(executor)
        self.events: Events[Mode] = Events(executor)  # the team stream (docs/events.md)
        self.github: GitHub[Mode] = GitHub(executor)  # the team's GitHub App connection
