"""Online checks: what only the store can tell (docs/definitions.md, "Online checks").

- ``secretName`` names an existing team secret (FC040);
- a ``url_token`` secret's current value is URL-safe, ``[A-Za-z0-9._~-]+`` (FC041);
- a Standard Webhooks secret decodes: ``whsec_`` + base64 of 24-64 bytes (FC042);
- webhook UIDs referenced by triggers exist in this factory (FC043);
- every secret fits its use (FC044; docs/management.md, "Team secrets"): a webhook's ``secretName`` is a
  ``webhook`` secret, and what runs reference (an environment's ``secrets``, ``secret:NAME`` values in the
  ``mcp_servers`` of ``factory.yaml`` agents, automations and schedules) are ``run`` secrets
  (:func:`store.secrets.webhook_problem` and :func:`store.secrets.run_problem`, the rules the API keeps).
  A run reference to a missing secret is left to run creation (422), as before, except the secrets a
  v1alpha1 tree names (``secrets`` lists, ``harness.auth.secretName``): those must exist (FC040).
- a v1alpha1 ``alias`` is no other factory's in the team, compared case-insensitively (FC046);
- a notification endpoint's ``secretName`` exists (FC040), is a ``webhook`` secret (FC044: it signs
  messages, so no run may read it) and is a Standard Webhooks secret (FC042), since every message is
  signed with it (docs/notifications.md, "Signatures").

Each problem points at the line of the key it is about. Secret values are read to check their
shape and never appear in a message.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.diagnostics import Diagnostic
from reconciler.rules import is_webhook_uid
from reconciler.specs import FactoryDefinition, Location, NotificationSpec, WebhookSpec
from store import secrets
from store.crypto import SecretBox
from store.models import Factory

SCOPE_RULE = "FC044"  # secret scope does not fit its use
WHSEC_PREFIX = "whsec_"
WHSEC_MIN_BYTES, WHSEC_MAX_BYTES = 24, 64
WHSEC_COMMAND = 'echo "whsec_$(openssl rand -base64 32)"'  # prints a new Standard Webhooks secret


def standard_webhooks_secret_ok(value: str) -> bool:
    """``whsec_`` followed by standard base64 (padding optional) of 24 to 64 bytes."""
    if not value.startswith(WHSEC_PREFIX):
        return False
    encoded = value[len(WHSEC_PREFIX) :]
    try:
        raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return WHSEC_MIN_BYTES <= len(raw) <= WHSEC_MAX_BYTES


def _diag(rule: str, message: str, where: Location | None, fallback: str, hint: str | None) -> Diagnostic:
    if where is None:
        return Diagnostic(rule, message, fallback, hint=hint)
    return Diagnostic(rule, message, where.path, where.line, where.column, hint=hint)


async def check(
    session: AsyncSession,
    box: SecretBox,
    team_id: str,
    definition: FactoryDefinition,
    known_webhooks: Mapping[str, str] | None,
) -> list[Diagnostic]:
    """Every online problem of ``definition`` for team ``team_id``.

    ``known_webhooks`` maps UID -> name of the factory's live webhooks in the store plus the UIDs
    the same apply keeps; ``None`` skips the UID check (no factory context, e.g. a dry run).
    """
    out: list[Diagnostic] = []
    values: dict[str, str] = {}
    for webhook in definition.webhooks:
        out += await _webhook(session, box, team_id, definition.root, webhook, values)
    for notification in definition.notifications:
        out += await _notification(session, box, team_id, definition.root, notification, values)
    out += await _run_references(session, team_id, definition)
    out += await _missing_named(session, team_id, definition)
    out += await _alias(session, team_id, definition)
    if known_webhooks is not None:
        out += _uids(definition, known_webhooks)
    return sorted(out, key=lambda d: (d.path, d.line, d.column, d.rule))


async def _webhook(
    session: AsyncSession,
    box: SecretBox,
    team_id: str,
    root: str,
    webhook: WebhookSpec,
    values: dict[str, str],
) -> list[Diagnostic]:
    name = webhook.secret_name
    where = webhook.locations.get("secretName")
    fallback = f"{root}/{webhook.path}"
    row = await secrets.get(session, team_id, name)
    if row is None:
        create = (
            "--from-stdin with the provider's signing secret"
            if webhook.auth_mode == "signature"
            else "--generate"
        )
        hint = f"create it first: factoryctl secrets create {name} {create}"
        return [_diag("FC040", f"team secret '{name}' does not exist", where, fallback, hint)]
    scope_problem = secrets.webhook_problem(name, row.scope)
    if scope_problem:
        hint = (
            f"runs may read a {row.scope} secret: if none does, factoryctl secrets set {name} --scope"
            f" {secrets.WEBHOOK}; else give the webhook a secret of its own"
        )
        return [_diag(SCOPE_RULE, scope_problem, where, fallback, hint)]
    if name not in values:
        values[name] = (await secrets.reveal(session, box, team_id, name))[0]
    value = values[name]
    if webhook.auth_mode == "url_token" and not secrets.URL_SAFE_RE.match(value):
        message = f"secret '{name}' is not URL-safe; a url_token secret may only contain A-Z a-z 0-9 . _ ~ -"
        hint = f"give it a URL-safe value: factoryctl secrets set {name} --generate"
        return [_diag("FC041", message, where, fallback, hint)]
    if webhook.signature_scheme == "standard_webhooks" and not standard_webhooks_secret_ok(value):
        message = (
            f"secret '{name}' is not a Standard Webhooks secret: expected 'whsec_' followed by the base64 "
            f"of {WHSEC_MIN_BYTES}-{WHSEC_MAX_BYTES} bytes"
        )
        hint = f"set the sender's signing secret: factoryctl secrets set {name} --from-stdin"
        return [_diag("FC042", message, where, fallback, hint)]
    return []


async def _notification(
    session: AsyncSession,
    box: SecretBox,
    team_id: str,
    root: str,
    notification: NotificationSpec,
    values: dict[str, str],
) -> list[Diagnostic]:
    """FC040, FC044 and FC042 for the secret that signs an endpoint's messages."""
    name = notification.secret_name
    where = notification.locations.get("secretName")
    fallback = f"{root}/{notification.path}"
    row = await secrets.get(session, team_id, name)
    if row is None:
        hint = f"create it first: {WHSEC_COMMAND} | factoryctl secrets create {name} --from-stdin"
        return [_diag("FC040", f"team secret '{name}' does not exist", where, fallback, hint)]
    if secrets.webhook_problem(name, row.scope):  # the rule of webhooks: it signs outbound webhooks
        message = (
            f"team secret '{name}' may not sign notifications (scope: {row.scope});"
            " use a webhook-scoped secret"
        )
        hint = (
            f"a {row.scope} secret can be read by runs, and this one signs notifications: if no run uses"
            f" it, factoryctl secrets set {name} --scope {secrets.WEBHOOK}; else give the endpoint a secret"
            " of its own"
        )
        return [_diag(SCOPE_RULE, message, where, fallback, hint)]
    if name not in values:
        values[name] = (await secrets.reveal(session, box, team_id, name))[0]
    if not standard_webhooks_secret_ok(values[name]):
        message = (
            f"secret '{name}' is not a Standard Webhooks secret: expected 'whsec_' followed by the base64 "
            f"of {WHSEC_MIN_BYTES}-{WHSEC_MAX_BYTES} bytes (it signs the endpoint's messages)"
        )
        hint = f"give it one: {WHSEC_COMMAND} | factoryctl secrets set {name} --from-stdin"
        return [_diag("FC042", message, where, fallback, hint)]
    return []


def _run_refs(definition: FactoryDefinition) -> Iterator[tuple[str, str, Mapping[str, Location], str]]:
    """``(secret name, key, locations, file)`` for every secret a run started from ``definition`` may
    reference: environments' ``secrets`` and ``mcpServers`` ``secret:NAME`` values, MCP ``secret:NAME`` values
    of agents, automations and schedules."""
    root = definition.root
    for environment in definition.environments:
        names: Any = (environment.spec or {}).get("secrets") or []
        for index, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str):
                yield name, f"secrets[{index}]", environment.locations, f"{root}/{environment.path}"
        for key, name in secrets.mcp_secret_refs((environment.spec or {}).get("mcpServers")):
            where = "mcpServers." + key.split(".", 1)[1]  # the helper names them mcp_servers.*
            yield name, where, environment.locations, f"{root}/{environment.path}"
    factory = definition.factory
    for agent, config in sorted(factory.agents.items()):
        if isinstance(config, Mapping):
            for key, name in secrets.mcp_secret_refs(config.get("mcp_servers")):
                yield name, f"agents.{agent}.{key}", factory.locations, f"{root}/{factory.path}"
    yield from _named_secrets(definition)
    for automation in definition.automations:
        for key, name in secrets.mcp_secret_refs(automation.config.get("mcp_servers")):
            yield name, f"config.{key}", automation.locations, f"{root}/{automation.path}"
    for schedule in definition.schedules:
        for key, name in secrets.mcp_secret_refs(schedule.config.get("mcp_servers")):
            yield name, f"config.{key}", schedule.locations, f"{root}/{schedule.path}"


def _named_secrets(definition: FactoryDefinition) -> Iterator[tuple[str, str, Mapping[str, Location], str]]:
    """The secrets a v1alpha1 tree names for its runs: ``secrets`` lists (the factory's, ``agentDefaults``',
    agents', automations') and ``harness.auth.secretName``; each must exist (FC040), a ``run`` secret."""
    root, factory = definition.root, definition.factory
    layers: list[tuple[Mapping[str, Any], str, Mapping[str, Location], str]] = [
        (factory.settings, "", factory.locations, f"{root}/{factory.path}"),
        (
            factory.settings.get("agentDefaults") or {},
            "agentDefaults.",
            factory.locations,
            f"{root}/{factory.path}",
        ),
    ]
    layers += [(a.overrides, "", a.locations, f"{root}/{a.path}") for a in definition.agents if not a.legacy]
    layers += [(a.front_matter, "", a.locations, f"{root}/{a.path}") for a in definition.automations]
    for layer, prefix, locations, path in layers:
        for index, name in enumerate(layer.get("secrets") or ()):
            yield name, f"{prefix}secrets[{index}]", locations, path
        harness = layer.get("harness")
        auth = harness.get("auth") if isinstance(harness, Mapping) else None
        if isinstance(auth, Mapping) and auth.get("secretName"):
            yield auth["secretName"], f"{prefix}harness.auth.secretName", locations, path


async def _missing_named(
    session: AsyncSession, team_id: str, definition: FactoryDefinition
) -> list[Diagnostic]:
    """FC040 for each secret a v1alpha1 tree names that the team does not have."""
    refs = list(_named_secrets(definition))
    found = await secrets.scopes(session, team_id, (name for name, *_ in refs))
    return [
        _diag("FC040", f"team secret '{name}' does not exist", locations.get(key), path,
              f"create it: factoryctl secrets create {name} --scope {secrets.RUN} --from-stdin")
        for name, key, locations, path in refs
        if name not in found
    ]  # fmt: skip


async def _alias(session: AsyncSession, team_id: str, definition: FactoryDefinition) -> list[Diagnostic]:
    """FC046 when another factory of the team has the same ``alias``, compared case-insensitively (the
    foreman's @-mention handle must name one factory)."""
    factory = definition.factory
    alias = factory.alias.strip() if factory.alias else ""
    if not alias:
        return []
    stmt = select(Factory.name).where(
        Factory.team_id == team_id, func.lower(Factory.alias) == alias.lower(), Factory.name != factory.name
    )
    taken = (await session.execute(stmt.limit(1))).scalar_one_or_none()
    if taken is None:
        return []
    where = factory.locations.get("alias")
    hint = "an alias is unique in the team, compared case-insensitively; choose another"
    message = f"alias '{alias}' is already factory '{taken}''s"
    return [_diag("FC046", message, where, f"{definition.root}/{factory.path}", hint)]


async def _run_references(
    session: AsyncSession, team_id: str, definition: FactoryDefinition
) -> list[Diagnostic]:
    """FC044 for every run reference to an existing secret that is not ``run``-scoped."""
    refs = list(_run_refs(definition))
    found = await secrets.scopes(session, team_id, (name for name, *_ in refs))
    out = []
    for name, key, locations, fallback in refs:
        scope = found.get(name)
        problem = secrets.run_problem(name, scope) if scope is not None else None
        if problem:
            hint = (
                f"a {scope} secret never reaches a run: reference a secret created with --scope"
                f" {secrets.RUN} (factoryctl secrets create NAME --scope {secrets.RUN} --from-stdin)"
            )
            out.append(_diag(SCOPE_RULE, problem, locations.get(key), fallback, hint))
    return out


def _uids(definition: FactoryDefinition, known: Mapping[str, str]) -> list[Diagnostic]:
    out = []
    listed = ", ".join(f"{name} ({uid})" for uid, name in sorted(known.items(), key=lambda kv: kv[1])[:20])
    hint = (
        f"webhooks of this factory: {listed}" if listed else "this factory has no webhooks in the store yet"
    )
    for automation in definition.automations:
        for index, trigger in enumerate(automation.triggers):
            for position, uid in enumerate(trigger.webhook_ids):
                if not is_webhook_uid(uid) or uid in known:
                    continue  # malformed entries are reported offline (FC010/FC031)
                key = f"triggers[{index}].filter.webhook_ids[{position}]"
                where = automation.locations.get(key) or trigger.location
                message = f"webhook UID '{uid}' does not exist in factory '{definition.factory.name}'"
                out.append(_diag("FC043", message, where, f"{definition.root}/{automation.path}", hint))
    return out
