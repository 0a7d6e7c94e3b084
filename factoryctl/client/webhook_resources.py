"""Webhook resources: webhooks of a factory, their delivery logs, and "Test filter" of automations."""

from __future__ import annotations

from collections.abc import Sequence

from factoryctl.client._endpoints import (
    V1,
    Mode,
    Resource,
    endpoint,
    json_body,
    paginated,
    parse_model,
    parse_nothing,
    parse_page_of,
)
from factoryctl.client._transport import RequestSpec, path, query
from factoryctl.client.models import (
    Delivery,
    DeliveryReplay,
    FilterTestResult,
    Page,
    Webhook,
    WebhookWithSecret,
)

# --- webhooks --------------------------------------------------------------------------------------

_WEBHOOKS = V1 + "/factory/{}/webhooks"
_WEBHOOK = _WEBHOOKS + "/{}"


def create_webhook(
    factory_uid: str,
    name: str,
    *,
    auth_mode: str | None = None,
    signature_scheme: str | None = None,
    secret: str | None = None,
    secret_name: str | None = None,
    delivery_id_header: str | None = None,
) -> RequestSpec[WebhookWithSecret]:
    """Create a webhook on an API-managed factory; the answer shows its secret once."""
    body = json_body(
        name=name,
        auth_mode=auth_mode,
        signature_scheme=signature_scheme,
        secret=secret,
        secret_name=secret_name,
        delivery_id_header=delivery_id_header,
    )
    return RequestSpec("POST", path(_WEBHOOKS, factory_uid), parse_model(WebhookWithSecret), json=body)


def list_webhooks(
    factory_uid: str, *, limit: int | None = None, cursor: str | None = None
) -> RequestSpec[Page[Webhook]]:
    params = query(limit=limit, cursor=cursor)
    return RequestSpec("GET", path(_WEBHOOKS, factory_uid), parse_page_of("webhooks", Webhook), params=params)


def get_webhook(factory_uid: str, webhook_uid: str) -> RequestSpec[Webhook]:
    return RequestSpec("GET", path(_WEBHOOK, factory_uid, webhook_uid), parse_model(Webhook))


def update_webhook(
    factory_uid: str, webhook_uid: str, *, enabled: bool | None = None, name: str | None = None
) -> RequestSpec[Webhook]:
    """PATCH ``{enabled?, name?}``: absolute values, so repeating it is harmless (retried as idempotent)."""
    body = json_body(enabled=enabled, name=name)
    return RequestSpec(
        "PATCH", path(_WEBHOOK, factory_uid, webhook_uid), parse_model(Webhook), json=body, idempotent=True
    )


def enable_webhook(factory_uid: str, webhook_uid: str) -> RequestSpec[Webhook]:
    return update_webhook(factory_uid, webhook_uid, enabled=True)


def disable_webhook(factory_uid: str, webhook_uid: str) -> RequestSpec[Webhook]:
    return update_webhook(factory_uid, webhook_uid, enabled=False)


def rename_webhook(factory_uid: str, webhook_uid: str, name: str) -> RequestSpec[Webhook]:
    return update_webhook(factory_uid, webhook_uid, name=name)


def rotate_webhook_secret(
    factory_uid: str, webhook_uid: str, *, secret: str | None = None
) -> RequestSpec[WebhookWithSecret]:
    """A new secret, shown once (generated, or the provider's new signing secret)."""
    return RequestSpec(
        "POST",
        path(_WEBHOOK + "/rotate-secret", factory_uid, webhook_uid),
        parse_model(WebhookWithSecret),
        json=json_body(secret=secret),
    )


def set_webhook_secret(factory_uid: str, webhook_uid: str, secret: str) -> RequestSpec[Webhook]:
    """Supply a provider-issued signing secret to a signature webhook created without one."""
    return RequestSpec(
        "POST",
        path(_WEBHOOK + "/secret", factory_uid, webhook_uid),
        parse_model(Webhook),
        json={"secret": secret},
    )


def delete_webhook(factory_uid: str, webhook_uid: str) -> RequestSpec[None]:
    """Delete (senders get 404 at once). Not retried on ambiguous failures: a repeat would answer 404."""
    return RequestSpec("DELETE", path(_WEBHOOK, factory_uid, webhook_uid), parse_nothing)


class Webhooks(Resource[Mode]):
    create = endpoint(create_webhook)
    list = endpoint(list_webhooks)
    iter = paginated(list_webhooks)
    get = endpoint(get_webhook)
    update = endpoint(update_webhook)
    enable = endpoint(enable_webhook)
    disable = endpoint(disable_webhook)
    rename = endpoint(rename_webhook)
    rotate_secret = endpoint(rotate_webhook_secret)
    set_secret = endpoint(set_webhook_secret)
    delete = endpoint(delete_webhook)


# --- deliveries and automations --------------------------------------------------------------------


def list_deliveries(
    factory_uid: str,
    webhook_uid: str,
    *,
    status: str | Sequence[str] | None = None,
    outcome: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> RequestSpec[Page[Delivery]]:
    """One page of a webhook's delivery log, newest first; ``status`` filters (e.g. ``Accepted``),
    ``outcome`` too: ``runs`` (started at least one run) or ``no_runs`` (accepted, started nothing)."""
    params = query(
        status=[status] if isinstance(status, str) else list(status or ()),
        outcome=outcome,
        limit=limit,
        cursor=cursor,
    )
    return RequestSpec(
        "GET",
        path(_WEBHOOK + "/deliveries", factory_uid, webhook_uid),
        parse_page_of("deliveries", Delivery),
        params=params,
    )


def get_delivery(factory_uid: str, webhook_uid: str, delivery_id: str) -> RequestSpec[Delivery]:
    """One entry (with ``payload`` when it was Accepted)."""
    return RequestSpec(
        "GET", path(_WEBHOOK + "/deliveries/{}", factory_uid, webhook_uid, delivery_id), parse_model(Delivery)
    )


def replay_delivery(
    factory_uid: str, webhook_uid: str, delivery_id: str, *, automation_id: str | None = None
) -> RequestSpec[DeliveryReplay]:
    """Re-evaluate an Accepted delivery against the automations as they are now, starting a run per match
    (only ``automation_id`` when given). Never de-duplicated, so never retried on an ambiguous failure."""
    return RequestSpec(
        "POST",
        path(_WEBHOOK + "/deliveries/{}/replay", factory_uid, webhook_uid, delivery_id),
        parse_model(DeliveryReplay),
        json=json_body(automation_id=automation_id),
    )


class Deliveries(Resource[Mode]):
    list = endpoint(list_deliveries)
    iter = paginated(list_deliveries)
    get = endpoint(get_delivery)
    replay = endpoint(replay_delivery)


def test_filter(
    factory_uid: str, automation_uid: str, delivery_id: str, *, webhook_uid: str | None = None
) -> RequestSpec[FilterTestResult]:
    """Would this stored delivery start a run of the automation? (Read-only, so retried freely.)"""
    return RequestSpec(
        "POST",
        path(f"{V1}/factory/{{}}/automations/{{}}/test-filter", factory_uid, automation_uid),
        parse_model(FilterTestResult),
        json=json_body(delivery_id=delivery_id, webhook_uid=webhook_uid),
        idempotent=True,
    )


class Automations(Resource[Mode]):
    test_filter = endpoint(test_filter)
