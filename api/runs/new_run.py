"""What a caller decides about a run it starts, as one value: :class:`NewRun`.

Every path that starts a run - ``POST /agent/run``, factory dispatch, a webhook delivery and its replay,
a schedule - describes it as a :class:`NewRun` and hands it to :func:`api.runs.records.create_run` (one
run through the ORM) or :func:`api.runs.records.build_run_row` (ingress's bulk insert, docs/ingress.md,
"Group commit"). What the store derives - the id, the state, the times, the title's default, the worker
host's spelling, the columns indexed from the config - is decided there, once, not by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CREATOR_NAME_MAX = 200  # runs.creator_display_name


@dataclass(frozen=True)
class Creator:
    """Who started a run: ``user`` or ``service_account`` (API keys), with a stable uid."""

    type: str
    uid: str
    display_name: str | None = None

    @classmethod
    def for_definition(cls, kind: str, uid: str, name: str) -> Creator:
        """A definition that starts runs on its own (a ``webhook``, a ``schedule``), as a service account
        named after it."""
        return cls("service_account", uid, f"{kind} {name}"[:CREATOR_NAME_MAX])


@dataclass(frozen=True)
class NewAttachment:
    file_name: str
    mime_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to queue for ``team_id``: its content, who and what started it, and the rows it links to.

    ``title`` None or blank defaults to the prompt's first line (else the config's skill); ``worker_host``
    None takes ``agent_config["worker_host"]``, and None, ``""`` and ``"warp"`` are stored as ``""``
    (service-hosted). A scheduled run carries its schedule's uid and a snapshot of it
    (docs/schedules.md, "Runs started by a schedule"); a webhook's run its webhook and delivery ID.
    """

    team_id: str
    prompt: str
    title: str | None
    agent_config: Mapping[str, Any]
    source: str
    creator: Creator
    metadata: Mapping[str, str] | None = None
    attachments: Sequence[NewAttachment] = ()
    factory_uid: str | None = None
    automation_id: str | None = None
    agent: str | None = None  # the factory agent it runs as
    webhook_uid: str | None = None
    delivery_id: str | None = None
    worker_host: str | None = None
    conversation_id: str | None = None
    parent_run_id: str | None = None
    schedule_id: str | None = None
    schedule: Mapping[str, Any] | None = None
