"""Names or UIDs: the one lookup behind every place a person names a factory, webhook, automation or
schedule (the CLI's arguments, scripts on the client).

People read names (``factoryctl schedules list``, ``webhooks/alerts.yaml``); the API addresses objects
by UID. The rule, the same for every kind (docs/cli.md, "Names or UIDs"):

- an argument shaped like a UID of that kind (``fa_`` + 26 base32 characters) is a UID: no lookup;
- any other is looked up among the names (one listing call): one match gives its UID; several (API-made
  schedules may share a name, so may two factories' definitions) raise :class:`AmbiguousName`, which
  lists their UIDs;
- a name nothing has is returned as it is, so the server's 404 is the answer, unless the caller needs
  it to exist (``events --factory``: a filter on nothing would wait in silence), which raises
  :class:`UnknownName`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factoryctl.client.sync_client import FactoryClient

# store/ids.py: <prefix>_<26 Crockford base32 characters>; repeated so the client needs no store.
PREFIX = {"factory": "fa", "webhook": "wh", "automation": "au", "schedule": "sch"}
ID_LABEL = {"schedule": "ID"}  # the API calls a schedule's UID its ``id``
_BODY = "[0-9a-z]{26}"  # as the server mints them (lenient: a typo is still a UID, and 404s)


class NameProblem(ValueError):
    """A name that does not pick exactly one object."""


class AmbiguousName(NameProblem):
    pass


class UnknownName(NameProblem):
    pass


def is_uid(kind: str, ref: str) -> bool:
    return re.fullmatch(f"{PREFIX[kind]}_{_BODY}", ref) is not None


def pick(kind: str, ref: str, candidates: Iterable[tuple[str, str]], *, must_exist: bool = False) -> str:
    """The UID ``ref`` names among ``(name, uid)`` pairs (see the module docstring)."""
    found = [uid for name, uid in candidates if name == ref]
    label = ID_LABEL.get(kind, "UID")
    if len(found) > 1:
        raise AmbiguousName(f"{len(found)} {kind}s are named {ref!r} ({', '.join(found)}): give its {label}")
    if found:
        return found[0]
    if must_exist:
        raise UnknownName(f"no {kind} is named {ref!r} (give a {kind}'s name or {label})")
    return ref


def factory_uid(client: FactoryClient, ref: str, *, must_exist: bool = False) -> str:
    if is_uid("factory", ref):
        return ref
    listed = ((f.name, f.uid) for f in client.factories.iter(search=ref))
    return pick("factory", ref, listed, must_exist=must_exist)


def webhook_uid(client: FactoryClient, factory: str, ref: str) -> str:
    """``factory`` is a UID (resolve it first with :func:`factory_uid`)."""
    if is_uid("webhook", ref):
        return ref
    return pick("webhook", ref, ((w.name, w.uid) for w in client.webhooks.iter(factory, limit=100)))


def automation_uid(client: FactoryClient, factory: str, ref: str, *, must_exist: bool = False) -> str:
    """``factory`` is a UID; automations are listed with their factory (``GET /factory/{uid}``)."""
    if is_uid("automation", ref):
        return ref
    listed = ((a.name, a.uid) for a in client.factories.get(factory).automations)
    return pick("automation", ref, listed, must_exist=must_exist)


def schedule_id(client: FactoryClient, ref: str, *, must_exist: bool = False) -> str:
    if is_uid("schedule", ref):
        return ref
    return pick("schedule", ref, ((s.name, s.id) for s in client.schedules.list()), must_exist=must_exist)
