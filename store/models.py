"""SQLAlchemy 2.0 typed models: the one contract the reconciler and the API share.

Every row belongs to a team (``team_id``); other teams' rows are invisible to callers.
Identifiers are prefixed strings (``fa_``, ``wh_``, ``au_``, ``run_``...) minted by :mod:`store.ids`.
Timestamps are timezone-aware UTC (:class:`UTCDateTime` normalises what SQLite hands back).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JSON, list[Any]: JSON}


# --- teams, keys, secrets -------------------------------------------------------------------------


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[dt.datetime]


class ApiKey(Base):
    """An API key; only a SHA-256 of the (high-entropy) key is stored."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))  # admin | member | worker
    worker_hosts: Mapped[list[Any]] = mapped_column(default=list)
    prefix: Mapped[str] = mapped_column(String(20))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime]
    last_used_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]


class Secret(Base):
    """A team secret; values live in :class:`SecretVersion`, encrypted.

    ``scope`` says what may use it (docs/management.md, "Team secrets"): ``webhook`` backs a webhook's
    auth and never reaches a run; ``run`` may be referenced by runs. Exactly one; the database default is
    the closed one, ``webhook``.
    """

    __tablename__ = "secrets"
    __table_args__ = (
        UniqueConstraint("team_id", "name"),
        CheckConstraint("scope IN ('run', 'webhook')", name="scope"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(20), server_default=text("'webhook'"))
    current_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class SecretVersion(Base):
    __tablename__ = "secret_versions"
    __table_args__ = (UniqueConstraint("secret_id", "version"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    secret_id: Mapped[str] = mapped_column(ForeignKey("secrets.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime]


# --- factories and their definitions --------------------------------------------------------------


class Factory(Base):
    __tablename__ = "factories"
    __table_args__ = (UniqueConstraint("team_id", "name"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    worker_host: Mapped[str | None] = mapped_column(String(200))
    managed_by: Mapped[str] = mapped_column(String(20))  # definitions | api
    # The agents runs see, by name: each one's resolved config (docs/definitions.md, "Inheritance"). Kept
    # by the agent kind's store module from agents/<name>/agent.md; API-created factories hold the foreman.
    agents: Mapped[dict[str, Any]] = mapped_column(default=dict)
    alias: Mapped[str | None] = mapped_column(String(100))
    repositories: Mapped[list[Any]] = mapped_column(default=list)  # [{owner, name}]
    # The rest of factory.yaml as written: schemaVersion, credentialStrategy, secrets, mcpServers,
    # cloudProviders, integrations, agentDefaults.
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    source: Mapped[str | None] = mapped_column(String(1000))  # where definitions come from
    spec_digest: Mapped[str | None] = mapped_column(String(64))  # digest of factory.yaml spec
    last_applied_revision: Mapped[str | None] = mapped_column(String(100))
    last_attempted_revision: Mapped[str | None] = mapped_column(String(100))
    conditions: Mapped[list[Any]] = mapped_column(default=list)
    # GitOps status (docs/reconcile.md, "Sync status", "Who manages a factory"): the last comparison with
    # the source, the serve following it, and the git commit of the applied revision.
    sync: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    manager: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    applied_commit: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class Webhook(Base):
    """A webhook. Deleted webhooks keep their row (``deleted_at``) so UIDs are never reused."""

    __tablename__ = "webhooks"
    __table_args__ = (
        Index(
            "uq_webhooks_live_name",
            "factory_uid",
            "name",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    factory_uid: Mapped[str] = mapped_column(ForeignKey("factories.uid"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    auth_mode: Mapped[str] = mapped_column(String(20))  # token | url_token | signature
    signature_scheme: Mapped[str | None] = mapped_column(String(40))
    secret_name: Mapped[str | None] = mapped_column(String(200))
    # The secret version captured when the definition last applied (docs/reconcile.md, "Secret rotation");
    # None: not yet supplied.
    secret_version: Mapped[int | None] = mapped_column(Integer)
    delivery_id_header: Mapped[str | None] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    managed_by: Mapped[str] = mapped_column(String(20))
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    deleted_at: Mapped[dt.datetime | None]


class IngressGeneration(Base):
    """One row (``id`` 1) whose ``value`` the database bumps, in the same transaction, whenever a row of
    ``webhooks`` or ``secrets`` changes - triggers of migration 0008, whoever the writer is. Ingress caches
    webhook lookups under the value it read and drops them when it changes (docs/ingress.md, "Webhook
    lookup cache")."""

    __tablename__ = "ingress_generation"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    value: Mapped[int] = mapped_column(BigInteger)


class Automation(Base):
    __tablename__ = "automations"
    __table_args__ = (UniqueConstraint("factory_uid", "name"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    factory_uid: Mapped[str] = mapped_column(ForeignKey("factories.uid", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    agent: Mapped[str] = mapped_column(String(200), default="foreman")
    title: Mapped[str | None] = mapped_column(String(500))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    prompt: Mapped[str] = mapped_column(Text)
    triggers: Mapped[list[Any]] = mapped_column(default=list)
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class FactoryObject(Base):
    """A definition object of the kinds that are stored as written: agents, skills, runners, scorers and
    benchmark suites (docs/definitions.md). ``kind`` is the registry's kind name; ``spec`` holds the spec's
    compared fields; the UID prefix follows the kind (``ag_``, ``sk_``, ``rn_``, ``sc_``, ``bm_``).

    One table for all of them: each is read whole by name, none is queried by its contents.
    """

    __tablename__ = "factory_objects"
    __table_args__ = (UniqueConstraint("factory_uid", "kind", "name"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    factory_uid: Mapped[str] = mapped_column(ForeignKey("factories.uid", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))
    name: Mapped[str] = mapped_column(String(300))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class AutomationWebhook(Base):
    """Routing index: which automations a delivery to a webhook must be matched against.

    One row per (automation, webhook trigger, selected webhook UID). ``payload_filter`` is the
    trigger's filter (already validated at apply time); None means "every delivery matches".
    Rows may name a webhook UID that was deleted: such rows never match (the webhook 404s first).
    """

    __tablename__ = "automation_webhooks"
    automation_uid: Mapped[str] = mapped_column(
        ForeignKey("automations.uid", ondelete="CASCADE"), primary_key=True
    )
    trigger_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_uid: Mapped[str] = mapped_column(String(40), primary_key=True, index=True)
    payload_filter: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Environment(Base):
    """A run environment (docs/agent-config.md): repos to clone, setup commands, env, secrets by name."""

    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("team_id", "name"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    factory_uid: Mapped[str | None] = mapped_column(ForeignKey("factories.uid", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    managed_by: Mapped[str] = mapped_column(String(20))
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class Schedule(Base):
    """A scheduled agent (docs/schedules.md): a cron expression in a time zone that starts runs.

    Definition-managed schedules (``schedules/<name>.yaml``) belong to a factory and are unique by
    (factory, name); API-created ones have no factory (``factory_uid`` NULL, names need not be unique).
    ``automation`` names an automation of the same factory, looked up when the schedule fires; otherwise
    ``prompt`` and ``agent_config`` say what the run does. ``next_fire_at`` is the next fire time (NULL
    while disabled or when the expression never fires again); the scheduler selects on it.
    """

    __tablename__ = "schedules"
    __table_args__ = (
        UniqueConstraint("factory_uid", "name"),
        Index("ix_schedules_due", "enabled", "next_fire_at"),
    )
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    factory_uid: Mapped[str | None] = mapped_column(ForeignKey("factories.uid", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    cron: Mapped[str] = mapped_column(String(200))
    timezone: Mapped[str] = mapped_column(String(100), default="UTC")
    automation: Mapped[str | None] = mapped_column(String(200))
    prompt: Mapped[str | None] = mapped_column(Text)
    agent_config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    run_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    next_fire_at: Mapped[dt.datetime | None]
    last_fired_at: Mapped[dt.datetime | None]
    last_spawn_error: Mapped[str | None] = mapped_column(String(1000))
    managed_by: Mapped[str] = mapped_column(String(20))  # definitions | api
    # Set on a schedule declared inline by an automation's schedule/cron_fired trigger: the automation's
    # name; such rows are written with their automation, never by schedules/<name>.yaml.
    inline_of: Mapped[str | None] = mapped_column(String(200))
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    creator_uid: Mapped[str | None] = mapped_column(String(100))
    creator_display_name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class ScheduleFire(Base):
    """One fire of a schedule: the primary key (schedule, fire time) is what makes a fire happen once.

    Every replica's scheduler inserts this row with ON CONFLICT DO NOTHING in the transaction that starts
    the run; the one that gets the row starts it, the others start nothing. ``run_id`` is NULL when
    the fire could not start a run (``error`` says why). ``fire_time`` NULL never occurs; a manual
    "run now" writes no fire row.
    """

    __tablename__ = "schedule_fires"
    schedule_uid: Mapped[str] = mapped_column(
        ForeignKey("schedules.uid", ondelete="CASCADE"), primary_key=True
    )
    fire_time: Mapped[dt.datetime] = mapped_column(primary_key=True)
    run_id: Mapped[str | None] = mapped_column(String(40))
    error: Mapped[str | None] = mapped_column(String(1000))
    created_at: Mapped[dt.datetime]


class ApplyRecord(Base):
    """One reconcile attempt of one factory: revision, outcome, duration, summary and errors."""

    __tablename__ = "apply_history"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    factory_uid: Mapped[str | None] = mapped_column(String(40), index=True)
    factory_name: Mapped[str] = mapped_column(String(200))
    revision: Mapped[str] = mapped_column(String(100))
    outcome: Mapped[str] = mapped_column(String(20))  # succeeded | failed | noop
    started_at: Mapped[dt.datetime]
    duration_ms: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    errors: Mapped[list[Any]] = mapped_column(default=list)
    commit: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # git sources


# --- ingress --------------------------------------------------------------------------------------


class Delivery(Base):
    """One delivery log entry. ``delivery_id`` is the delivery's identity (docs/ingress.md, "Delivery
    identity and duplicates").

    At most one *Accepted* entry per (webhook, delivery_id): the partial unique index is what
    decides duplicates (INSERT ... ON CONFLICT DO NOTHING), never a check-then-insert.
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        Index(
            "uq_deliveries_accepted_identity",
            "webhook_uid",
            "delivery_id",
            unique=True,
            sqlite_where=text("status = 'Accepted'"),
            postgresql_where=text("status = 'Accepted'"),
        ),
        # A GitHub App delivery's identity is X-GitHub-Delivery, which the signature does not cover; the
        # signed body decides too, so a captured delivery re-sent under a new id is a Duplicate
        # (docs/ingress.md, "GitHub App deliveries").
        Index(
            "uq_deliveries_accepted_content",
            "webhook_uid",
            "content_key",
            unique=True,
            sqlite_where=text("status = 'Accepted' AND content_key IS NOT NULL"),
            postgresql_where=text("status = 'Accepted' AND content_key IS NOT NULL"),
        ),
        Index("ix_deliveries_webhook_seq", "webhook_uid", "seq"),
        Index("ix_deliveries_received_at", "received_at"),
    )
    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    team_id: Mapped[str] = mapped_column(String(40))
    webhook_uid: Mapped[str] = mapped_column(String(40))
    delivery_id: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(40))
    size: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[dt.datetime]
    payload: Mapped[bytes | None] = mapped_column(LargeBinary)
    detail: Mapped[str | None] = mapped_column(String(500))
    content_key: Mapped[str | None] = mapped_column(String(60))  # GitHub App deliveries: the body's hash
    # Accepted and Replayed entries: why each automation selecting the webhook started a run or did not
    # (docs/ingress.md, "Decisions"); SQL NULL otherwise and for entries from before migration 0019.
    decisions: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))


class RateCounter(Base):
    """Fixed-window counters shared by all replicas (upserted with ON CONFLICT ... DO UPDATE)."""

    __tablename__ = "rate_counters"
    key: Mapped[str] = mapped_column(String(120), primary_key=True)
    window_start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # epoch seconds
    count: Mapped[int] = mapped_column(Integer)


# --- runs -----------------------------------------------------------------------------------------


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        # A delivery starts at most one run per automation, even under retries and crashes.
        Index(
            "uq_runs_automation_delivery",
            "automation_id",
            "webhook_uid",
            "delivery_id",
            unique=True,
            sqlite_where=text("delivery_id IS NOT NULL"),
            postgresql_where=text("delivery_id IS NOT NULL"),
        ),
        # Keyset pagination indexes: (team, sort key, run_id) with and without state.
        Index("ix_runs_team_updated", "team_id", "updated_at", "run_id"),
        Index("ix_runs_team_created", "team_id", "created_at", "run_id"),
        Index("ix_runs_team_title", "team_id", "title", "run_id"),
        Index("ix_runs_team_state_updated", "team_id", "state", "updated_at", "run_id"),
        # The console's runs list (newest created first) with each equality filter of its form: the filter's
        # rows in page order, so a rare or absent value costs an index seek, not a scan of the team's runs
        # (docs/benchmarks.md, "Console pages at scale"). The config-name one also serves the skills catalog.
        Index("ix_runs_team_state_created", "team_id", "state", "created_at", "run_id"),
        Index("ix_runs_team_source_created", "team_id", "source", "created_at", "run_id"),
        Index("ix_runs_team_factory_created", "team_id", "factory_uid", "created_at", "run_id"),
        Index("ix_runs_team_config_created", "team_id", "config_name", "created_at", "run_id"),
        Index("ix_runs_team_creator_created", "team_id", "creator_uid", "created_at", "run_id"),
        # The runs a webhook's deliveries started (the delivery log, the console's webhook page, replay).
        Index(
            "ix_runs_webhook_delivery",
            "webhook_uid",
            "delivery_id",
            sqlite_where=text("delivery_id IS NOT NULL"),
            postgresql_where=text("delivery_id IS NOT NULL"),
        ),
        # Claim queue: oldest QUEUED run for a worker host; ``harness_type`` last, so a worker's offered
        # harnesses filter inside the index without changing its order (docs/workers.md, "Harnesses").
        Index("ix_runs_queue", "state", "worker_host", "queued_at", "harness_type"),
        Index("ix_runs_lease", "state", "lease_expires_at"),
        # Finished runs still holding log lines, oldest first: what log retention prunes (docs/operations.md).
        Index(
            "ix_runs_log_retention",
            "finished_at",
            sqlite_where=text("log_lines > 0 OR log_dropped > 0"),
            postgresql_where=text("log_lines > 0 OR log_dropped > 0"),
        ),
    )
    run_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    title: Mapped[str] = mapped_column(String(500))
    prompt: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    queued_at: Mapped[dt.datetime | None]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    session_id: Mapped[str | None] = mapped_column(String(100))
    session_link: Mapped[str | None] = mapped_column(String(1000))
    agent_config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    config_name: Mapped[str | None] = mapped_column(String(200))
    model_id: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(30))  # store.rules.vocabulary.RunSource
    creator_type: Mapped[str] = mapped_column(String(30))  # user | service_account
    creator_uid: Mapped[str] = mapped_column(String(100))
    creator_display_name: Mapped[str | None] = mapped_column(String(200))
    status_message: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    run_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    factory_uid: Mapped[str | None] = mapped_column(String(40))
    automation_id: Mapped[str | None] = mapped_column(String(40))
    agent: Mapped[str | None] = mapped_column(String(200))  # the factory agent it runs as (definitions' runs)
    webhook_uid: Mapped[str | None] = mapped_column(String(40))
    delivery_id: Mapped[str | None] = mapped_column(String(300))
    conversation_id: Mapped[str | None] = mapped_column(String(100))
    # Scheduled runs: the schedule's uid, and its name and cron expression when the run was created.
    schedule_id: Mapped[str | None] = mapped_column(String(40), index=True)
    schedule: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    parent_run_id: Mapped[str | None] = mapped_column(String(40))
    # "" means service-hosted (worker_host unset or "warp"); otherwise only that worker may claim.
    worker_host: Mapped[str] = mapped_column(String(200), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    # The claim's random lease token: every worker call must present it, so a stale holder of an earlier
    # attempt (same key and worker ID) is refused (docs/workers.md, "Leases").
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[dt.datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # What the run's log holds, and the lines refused past its caps (docs/workers.md, "Log limits").
    log_lines: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    log_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    log_dropped: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The agent CLI preset the run needs ("claude" | "codex" | "gemini"), "" when any worker may run it:
    # only a worker offering that preset claims it (api/claims/queue.py).
    harness_type: Mapped[str] = mapped_column(String(20), server_default="")
    # Token and cost totals of the run's ``usage`` events over all attempts: {input_tokens, output_tokens,
    # cost_usd}; NULL until the first (api/claims/transcript.py).
    request_usage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The attempt whose ``session`` event set ``session_id``: the first of each attempt wins.
    session_attempt: Mapped[int | None] = mapped_column(Integer)
    # What the factory's scorers said about this run (docs/scorers.md): one entry per recorded judgement,
    # {scorer, label, score, passed, judge_run_id[, error]}; NULL until the first (api/scorers/).
    scores: Mapped[list[Any] | None] = mapped_column(JSON)
    # Where the worker ran it, as reported when the run started (docs/workers.md, "Sandbox"):
    # {kind: bwrap|none, network: none|allowlist|open}; NULL until then.
    sandbox: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class RunScore(Base):
    """One scorer's judgement of one run (docs/scorers.md). The primary key (run, scorer) is what makes a
    run judged at most once per scorer however many replicas look: the job inserts ON CONFLICT DO NOTHING
    and starts a judge run only for the row it inserted. ``judge_run_id`` is unique, so a judge's finish
    finds its row by one index probe; ``label``/``error`` stay NULL until the judge's answer is recorded."""

    __tablename__ = "run_scores"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    scorer_uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    scorer: Mapped[str] = mapped_column(String(300))  # the scorer's name when the judge started
    judge_run_id: Mapped[str | None] = mapped_column(String(40), unique=True)
    label: Mapped[str | None] = mapped_column(String(200))
    score: Mapped[float | None] = mapped_column(Float)
    passed: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[dt.datetime]
    recorded_at: Mapped[dt.datetime | None]


class RunArtifact(Base):
    """What a run left behind (docs/agents.md, "Artifacts"): a ``FILE`` its agent wrote under
    ``FACTORY_OUTPUTS`` (name, path, MIME type, size and the bytes, deferred so listings never load them),
    or a ``PULL_REQUEST`` / ``EXTERNAL_REFERENCE`` link it declared (url, branch, reference type, title).
    Uploaded by the run's lease holder; deleted with the run."""

    __tablename__ = "run_artifacts"
    __table_args__ = (Index("ix_run_artifacts_run", "run_id", "created_at"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"))
    artifact_type: Mapped[str] = mapped_column(String(30))  # FILE | PULL_REQUEST | EXTERNAL_REFERENCE
    created_at: Mapped[dt.datetime]
    filename: Mapped[str | None] = mapped_column(String(255))
    filepath: Mapped[str | None] = mapped_column(String(500))
    mime_type: Mapped[str | None] = mapped_column(String(200))
    size_bytes: Mapped[int | None] = mapped_column(Integer)
    data: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    url: Mapped[str | None] = mapped_column(String(2048))
    branch: Mapped[str | None] = mapped_column(String(300))
    reference_type: Mapped[str | None] = mapped_column(String(300))
    title: Mapped[str | None] = mapped_column(String(300))


class RunAttachment(Base):
    __tablename__ = "run_attachments"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    file_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    mime_type: Mapped[str] = mapped_column(String(200))
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RunFollowup(Base):
    __tablename__ = "run_followups"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), index=True)
    message: Mapped[str] = mapped_column(Text)
    mode: Mapped[str | None] = mapped_column(String(40))
    outcome: Mapped[str] = mapped_column(String(40))  # queued | delivered | requeued
    created_at: Mapped[dt.datetime]
    delivered_at: Mapped[dt.datetime | None]


class RunLog(Base):
    __tablename__ = "run_logs"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), index=True)
    stream: Mapped[str] = mapped_column(String(10))  # stdout | stderr | system
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime]


class AppliedLock(Base):
    """SQLite stand-in for PostgreSQL advisory locks (single-process deployments)."""

    __tablename__ = "locks"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[dt.datetime]


class RunEvent(Base):
    """One entry of a run's ordered event log (docs/events.md): the id is the SSE event id.

    ``kind`` is ``state`` | ``followup`` | ``log`` | ``truncated`` or a transcript kind (``message`` ...);
    written in the transaction of the change it records, so a rolled-back change leaves no event.
    """

    __tablename__ = "run_events"
    __table_args__ = (
        Index("ix_run_events_run_id_id", "run_id", "id"),
        Index("ix_run_events_team_id_txid_id", "team_id", "txid", "id"),
        Index("ix_run_events_txid_id", "txid", "id"),
        # AUTOINCREMENT: SQLite never reuses an id, even the highest one's after its run is deleted
        {"sqlite_autoincrement": True},
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"))
    team_id: Mapped[str] = mapped_column(String(40))
    factory_uid: Mapped[str | None] = mapped_column(String(40))
    # The writing transaction's id on PostgreSQL (a server default set by migration 0005); 0 on SQLite,
    # whose single writer commits in id order. Cross-run readers order by (txid, id) below the oldest
    # running transaction (docs/events.md, "Ordering and delivery").
    txid: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    kind: Mapped[str] = mapped_column(String(20))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime]


# --- outbound notifications (docs/notifications.md) -----------------------------------------------


class NotificationEndpoint(Base):
    """A receiver told about run state changes: ``notifications/<name>.yaml`` or created over the API.

    ``events`` lists run states (or ``run.*``); ``filter`` narrows by factory, automation and source.
    ``consecutive_failures`` counts failed attempts since the last success; at the threshold the
    endpoint is marked ``failing`` (it keeps being attempted; a success clears it).
    """

    __tablename__ = "notification_endpoints"
    __table_args__ = (UniqueConstraint("factory_uid", "name"),)
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), index=True)
    factory_uid: Mapped[str] = mapped_column(ForeignKey("factories.uid", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    url: Mapped[str] = mapped_column(String(2000))
    secret_name: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[Any]] = mapped_column(default=list)
    filter: Mapped[dict[str, Any]] = mapped_column(default=dict)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    description: Mapped[str | None] = mapped_column(Text)
    failing: Mapped[bool] = mapped_column(Boolean, default=False)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    failing_since: Mapped[dt.datetime | None]
    last_success_at: Mapped[dt.datetime | None]
    managed_by: Mapped[str] = mapped_column(String(20))  # definitions | api
    definition_path: Mapped[str | None] = mapped_column(String(1000))
    spec_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class NotificationMessage(Base):
    """One run event for one endpoint: the outbox entry the sender delivers (at least once).

    ``id`` is the Standard Webhooks ``webhook-id`` of every attempt (receivers de-duplicate on it) and
    ``payload`` the exact body, frozen when the message is made. The unique (endpoint, event) pair makes
    the fan-out idempotent. ``status`` is ``pending`` | ``delivered`` | ``failed``; a pending message is
    due at ``next_attempt_at``, which a claim pushes past the attempt's deadline (its lease), so a sender
    killed mid-attempt leaves it due again; ``claim_token`` fences a stale sender's result.
    """

    __tablename__ = "notification_messages"
    __table_args__ = (
        UniqueConstraint("endpoint_uid", "event_id"),
        Index("ix_notification_messages_due", "status", "next_attempt_at"),
        Index("ix_notification_messages_endpoint", "endpoint_uid", "created_at"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(String(40))
    endpoint_uid: Mapped[str] = mapped_column(ForeignKey("notification_endpoints.uid", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), index=True)
    event_id: Mapped[int] = mapped_column(BigInteger)
    event_type: Mapped[str] = mapped_column(String(40))
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(12))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None]
    claim_token: Mapped[str | None] = mapped_column(String(40))
    manual: Mapped[bool] = mapped_column(Boolean, default=False)  # a resend asked for: one attempt, by hand
    last_attempt_at: Mapped[dt.datetime | None]
    last_response_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(500))
    delivered_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime]


class NotificationAttempt(Base):
    """One HTTP attempt of a message: when, how long, what came back, and what happens next."""

    __tablename__ = "notification_attempts"
    __table_args__ = (Index("ix_notification_attempts_message_id_id", "message_id", "id"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    message_id: Mapped[str] = mapped_column(ForeignKey("notification_messages.id", ondelete="CASCADE"))
    endpoint_uid: Mapped[str] = mapped_column(String(40))
    attempt: Mapped[int] = mapped_column(Integer)
    trigger: Mapped[str] = mapped_column(String(10))  # scheduled | manual
    started_at: Mapped[dt.datetime]
    duration_ms: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(12))  # succeeded | failed | timeout | refused
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_excerpt: Mapped[str | None] = mapped_column(String(500))
    error: Mapped[str | None] = mapped_column(String(500))
    next_attempt_at: Mapped[dt.datetime | None]


class NotificationCursor(Base):
    """How far the fan-out has read ``run_events``, as a (txid, id) position (one row, ``name`` fan-out)."""

    __tablename__ = "notification_cursor"
    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    txid: Mapped[int] = mapped_column(BigInteger)
    event_id: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[dt.datetime]


# --- the web console (docs/console.md) ------------------------------------------------------------


class ConsoleSession(Base):
    """A signed-in console session. ``id`` is the SHA-256 of the cookie's random value (the cookie alone
    opens it; a database read never does); the API key it was opened with is never stored anywhere else.

    It ends at ``expires_at`` (absolute), after ``idle`` without a request, on sign-out, and when its key is
    revoked (checked on every request) or deleted (cascade).
    """

    __tablename__ = "console_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(20))
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    last_seen_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]


# --- integrations (docs/ingress.md, "GitHub App deliveries") --------------------------------------


class GitHubConnection(Base):
    """A team's GitHub App: deliveries to ``/webhooks/github/<uid>`` are verified with the current version
    of the team secret ``secret_name`` (the App's webhook secret). At most one per team: the unique
    constraint on ``team_id`` decides, never a check-then-insert. Its UID is what the delivery log and
    runs record as ``webhook_uid``."""

    __tablename__ = "github_connections"
    uid: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), unique=True)
    secret_name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime]


# --- agent sessions (docs/agents.md, "Sessions and follow-ups") -----------------------------------


class RunSessionState(Base):
    """The agent CLI's session files of a run's latest attempt (a ``tar.gz`` the worker packed), encrypted
    at rest with the secrets' key: a follow-up's worker restores them to resume the conversation. One row
    per run, replaced by each attempt; deleted with the run."""

    __tablename__ = "run_session_states"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True)
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)  # bytes of the archive before encryption
    attempt: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[dt.datetime]
