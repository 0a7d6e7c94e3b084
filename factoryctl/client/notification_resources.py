"""Notification resources: a factory's outbound notification endpoints, their messages and attempts, and
resending a message (docs/management.md, "Notification endpoints").

An endpoint is addressed by its ID (``ne_...``) or its name; the server resolves either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from factoryctl.client.models import (
    NotificationEndpoint,
    NotificationMessage,
    NotificationMessageDetail,
    Page,
)

_ENDPOINTS = V1 + "/factory/{}/notifications"
_ENDPOINT = _ENDPOINTS + "/{}"
_MESSAGES = _ENDPOINT + "/messages"
_MESSAGE = _MESSAGES + "/{}"


def list_notification_endpoints(factory_uid: str) -> RequestSpec[list[NotificationEndpoint]]:
    """Every endpoint of the factory, by name (a factory has at most 20: one answer)."""
    return RequestSpec("GET", path(_ENDPOINTS, factory_uid), parse_list_of("endpoints", NotificationEndpoint))


def get_notification_endpoint(factory_uid: str, endpoint_ref: str) -> RequestSpec[NotificationEndpoint]:
    return RequestSpec("GET", path(_ENDPOINT, factory_uid, endpoint_ref), parse_model(NotificationEndpoint))


def create_notification_endpoint(
    factory_uid: str,
    name: str,
    *,
    url: str,
    secret_name: str,
    events: Sequence[str],
    filter: Mapping[str, Sequence[str]] | None = None,
    enabled: bool | None = None,
    description: str | None = None,
) -> RequestSpec[NotificationEndpoint]:
    """Create an endpoint on an API-managed factory (admin). ``secret_name`` names a webhook-scoped team
    secret holding a Standard Webhooks ``whsec_`` secret; ``events`` are run states or ``run.*``."""
    body = json_body(
        name=name,
        url=url,
        secretName=secret_name,
        events=list(events),
        filter=_filter(filter),
        enabled=enabled,
        description=description,
    )
    return RequestSpec("POST", path(_ENDPOINTS, factory_uid), parse_model(NotificationEndpoint), json=body)


def _filter(value: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]] | None:
    return None if value is None else {k: list(v) for k, v in value.items()}


def update_notification_endpoint(
    factory_uid: str,
    endpoint_ref: str,
    *,
    url: str | None = None,
    secret_name: str | None = None,
    events: Sequence[str] | None = None,
    filter: Mapping[str, Sequence[str]] | None = None,
    enabled: bool | None = None,
    description: str | None = None,
) -> RequestSpec[NotificationEndpoint]:
    """PATCH the given fields (None: unchanged; ``filter={}`` and ``description=""`` clear them). Absolute
    values, so repeating it is harmless (retried as idempotent)."""
    body = json_body(
        url=url,
        secretName=secret_name,
        events=None if events is None else list(events),
        filter=_filter(filter),
        enabled=enabled,
        description=description,
    )
    return RequestSpec(
        "PATCH",
        path(_ENDPOINT, factory_uid, endpoint_ref),
        parse_model(NotificationEndpoint),
        json=body,
        idempotent=True,
    )


def enable_notification_endpoint(factory_uid: str, endpoint_ref: str) -> RequestSpec[NotificationEndpoint]:
    return update_notification_endpoint(factory_uid, endpoint_ref, enabled=True)


def disable_notification_endpoint(factory_uid: str, endpoint_ref: str) -> RequestSpec[NotificationEndpoint]:
    return update_notification_endpoint(factory_uid, endpoint_ref, enabled=False)


def delete_notification_endpoint(factory_uid: str, endpoint_ref: str) -> RequestSpec[None]:
    """Delete the endpoint with its messages. Not retried on ambiguous failures: a repeat would answer 404."""
    return RequestSpec("DELETE", path(_ENDPOINT, factory_uid, endpoint_ref), parse_nothing)


def list_notification_messages(
    factory_uid: str,
    endpoint_ref: str,
    *,
    status: str | Sequence[str] | None = None,
    run_id: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> RequestSpec[Page[NotificationMessage]]:
    """One page of the endpoint's messages, newest first; ``status``: pending, delivered, failed."""
    statuses = [status] if isinstance(status, str) else list(status or ())
    params = query(status=statuses, run_id=run_id, limit=limit, cursor=cursor)
    return RequestSpec(
        "GET",
        path(_MESSAGES, factory_uid, endpoint_ref),
        parse_page_of("messages", NotificationMessage),
        params=params,
    )


def get_notification_message(
    factory_uid: str, endpoint_ref: str, message_id: str
) -> RequestSpec[NotificationMessageDetail]:
    """One message with its ``payload`` and its attempts (``attempt_log``), oldest first."""
    return RequestSpec(
        "GET",
        path(_MESSAGE, factory_uid, endpoint_ref, message_id),
        parse_model(NotificationMessageDetail),
    )


def resend_notification_message(
    factory_uid: str, endpoint_ref: str, message_id: str
) -> RequestSpec[NotificationMessage]:
    """One more attempt of a delivered or failed message, at once, with the same webhook-id (admin). Not
    retried on an ambiguous failure: a repeat of a resend that took effect answers 409 (already queued)."""
    return RequestSpec(
        "POST",
        path(_MESSAGE + "/resend", factory_uid, endpoint_ref, message_id),
        parse_model(NotificationMessage),
    )


class Notifications(Resource[Mode]):
    list = endpoint(list_notification_endpoints)
    get = endpoint(get_notification_endpoint)
    create = endpoint(create_notification_endpoint)
    update = endpoint(update_notification_endpoint)
    enable = endpoint(enable_notification_endpoint)
    disable = endpoint(disable_notification_endpoint)
    delete = endpoint(delete_notification_endpoint)
    messages = paginated(list_notification_messages)  # every message, page after page
    messages_page = endpoint(list_notification_messages)
    message = endpoint(get_notification_message)
    resend = endpoint(resend_notification_message)
