"""Typed views of the API's JSON objects (docs/api.md, docs/management.md), read tolerantly.

Every model is a frozen dataclass built by :meth:`Model.from_json`: members the model does not know
are ignored (and kept in ``raw``), so a newer server never breaks an older client; a missing member
takes the field's default, and only the identity fields have none (their absence, or a member of the
wrong JSON type, is an :class:`~factoryctl.client.errors.APIResponseValidationError`). Timestamps become
aware :class:`datetime.datetime` objects. The machinery is in :mod:`factoryctl.client._modelbase`.
"""

from __future__ import annotations

import base64
import datetime as dt
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

# Re-exported: the models' base, pages and their parser are part of this module's surface.
from factoryctl.client._modelbase import Model as Model
from factoryctl.client._modelbase import Page as Page
from factoryctl.client._modelbase import PageInfo as PageInfo
from factoryctl.client._modelbase import parse_page as parse_page

# --- runs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCreator(Model):
    type: str | None = None
    uid: str | None = None
    display_name: str | None = None


@dataclass(frozen=True)
class RunStatusMessage(Model):
    message: str
    error_code: str | None = None
    retryable: bool | None = None


@dataclass(frozen=True)
class RunSchedule(Model):
    """The schedule a run came from (runs with ``source: SCHEDULED_AGENT``)."""

    schedule_id: str
    schedule_name: str | None = None
    cron_schedule: str | None = None


@dataclass(frozen=True)
class RequestUsage(Model):
    """The SDK's ``RunItem.RequestUsage``: tokens and cost summed over the run's attempts."""

    total_tokens: int | None = None
    inference_cost_usd: float | None = None
    inference_cost: float | None = None


@dataclass(frozen=True)
class RunSandbox(Model):
    """Where the worker runs the run (docs/workers.md, "Sandbox"): ``kind`` ``bwrap``|``none``, ``network``
    ``none``|``allowlist``|``open``."""

    kind: str
    network: str


@dataclass(frozen=True)
class Run(Model):
    """RunItem: the same shape from the list and from the single GET."""

    TERMINAL: ClassVar[frozenset[str]] = frozenset({"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"})
    run_id: str
    state: str
    task_id: str | None = None
    title: str | None = None
    prompt: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    session_id: str | None = None
    session_link: str | None = None
    agent_config: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    creator: RunCreator | None = None
    status_message: RunStatusMessage | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    execution_location: str | None = None
    worker_host: str | None = None
    attempt: int | None = None
    cancel_requested: bool = False
    conversation_id: str | None = None
    parent_run_id: str | None = None
    factory_uid: str | None = None
    automation_id: str | None = None
    webhook_uid: str | None = None
    delivery_id: str | None = None
    attachments: list[str] = field(default_factory=list)
    schedule: RunSchedule | None = None
    request_usage: RequestUsage | None = None
    run_time: str | None = None  # ISO 8601 duration
    sandbox: RunSandbox | None = None
    is_sandbox_running: bool = False
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL


RunPage = Page[Run]


@dataclass(frozen=True)
class RunCreated(Model):
    """RunAgentResponse."""

    run_id: str
    state: str
    task_id: str | None = None
    at_capacity: bool | None = None


@dataclass(frozen=True)
class Followup(Model):
    followup_id: str
    outcome: str | None = None


@dataclass(frozen=True)
class LogLine(Model):
    id: int
    text: str
    stream: str = "stdout"
    created_at: dt.datetime | None = None


@dataclass(frozen=True)
class LogPage(Model):
    logs: list[LogLine] = field(default_factory=list)
    next_after: int = 0
    has_more: bool = False

    @property
    def items(self) -> list[LogLine]:
        return self.logs

    def next_page_params(self) -> dict[str, Any] | None:
        return {"after": self.next_after} if self.has_more else None


@dataclass(frozen=True)
class Attachment:
    """A file to attach to a new run (sent base64-encoded)."""

    file_name: str
    data: bytes
    mime_type: str = "application/octet-stream"

    @classmethod
    def from_path(cls, path: str | Path) -> Attachment:
        p = Path(path)
        return cls(p.name, p.read_bytes(), mimetypes.guess_type(p.name)[0] or "application/octet-stream")

    def to_json(self) -> dict[str, str]:
        return {
            "file_name": self.file_name,
            "mime_type": self.mime_type,
            "data": base64.b64encode(self.data).decode("ascii"),
        }


# --- factories -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Factory(Model):
    uid: str
    name: str
    description: str | None = None
    managed_by: str | None = None
    worker_host: str | None = None
    last_applied_revision: str | None = None
    last_attempted_revision: str | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass(frozen=True)
class Automation(Model):
    uid: str
    name: str
    enabled: bool = True
    agent: str | None = None
    triggers: list[dict[str, Any]] = field(default_factory=list)
    definition_path: str | None = None


@dataclass(frozen=True)
class ApplyRecord(Model):
    revision: str | None = None
    outcome: str | None = None
    started_at: dt.datetime | None = None
    duration_ms: int | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    errors: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Webhook(Model):
    uid: str
    name: str
    factory_uid: str | None = None
    auth_mode: str = "token"
    signature_scheme: str | None = None
    secret_name: str | None = None
    delivery_id_header: str | None = None
    enabled: bool = True
    ingress_url: str | None = None
    managed_by: str | None = None
    secret_configured: bool | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass(frozen=True)
class WebhookWithSecret(Webhook):
    """A create or rotate answer: the secret is shown this once.

    ``secret`` is None when the webhook reuses an existing team secret, or when a provider-issued
    signing secret is still to be supplied (``webhooks.set_secret``). ``applies_on_next_apply`` is
    True when a definitions-managed webhook keeps its old secret until its definition next applies.
    """

    secret: str | None = None
    ingress_url_with_token: str | None = None
    applies_on_next_apply: bool | None = None


@dataclass(frozen=True)
class FactoryDetail(Factory):
    webhooks: list[Webhook] = field(default_factory=list)
    automations: list[Automation] = field(default_factory=list)
    last_apply: ApplyRecord | None = None


@dataclass(frozen=True)
class FactoryRun(Model):
    """The answer to a factory dispatch (a run of its foreman)."""

    run_id: str
    factory_uid: str | None = None
    foreman_agent: str | None = None
    state: str | None = None
    ticket_ref: str | None = None


# --- deliveries and filters ------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery(Model):
    """A delivery log entry; ``payload`` only on the single GET of an Accepted entry."""

    delivery_id: str
    status: str
    webhook_uid: str | None = None
    size: int | None = None
    received_at: dt.datetime | None = None
    run_ids: list[str] = field(default_factory=list)
    detail: str | None = None
    payload: Any = None


@dataclass(frozen=True)
class ReplayedRun(Model):
    """A run a replay started, and the automation it belongs to."""

    run_id: str
    automation_id: str | None = None


@dataclass(frozen=True)
class DeliveryReplay(Model):
    """The ``Replayed`` log entry a replay wrote (docs/management.md, "Replaying a delivery"): its own
    identity, the delivery it replays, and the runs it started (empty when nothing matched)."""

    delivery_id: str
    replay_of: str
    status: str = "Replayed"
    webhook_uid: str | None = None
    received_at: dt.datetime | None = None
    automation_id: str | None = None
    detail: str | None = None
    runs: list[ReplayedRun] = field(default_factory=list)

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]


@dataclass(frozen=True)
class Check(Model):
    passed: bool
    detail: str = ""
    failed_path: str | None = None


@dataclass(frozen=True)
class FilterTestResult(Model):
    """ "Test filter": would this stored delivery start a run of the automation, and why (not)."""

    result: str
    webhook_check: Check
    payload_check: Check
    delivery: Delivery | None = None

    @property
    def would_trigger(self) -> bool:
        return self.webhook_check.passed and self.payload_check.passed


# --- notification endpoints, messages and attempts ------------------------------------------------


@dataclass(frozen=True)
class NotificationEndpoint(Model):
    """An outbound notification endpoint (docs/management.md, "Notification endpoints"); the secret is
    named, never shown."""

    id: str
    name: str
    url: str = ""
    events: list[str] = field(default_factory=list)
    filter: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    description: str | None = None
    secret_name: str | None = None
    managed_by: str | None = None
    definition_path: str | None = None
    failing: bool = False
    consecutive_failures: int = 0
    failing_since: dt.datetime | None = None
    last_success_at: dt.datetime | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass(frozen=True)
class NotificationMessage(Model):
    """One run state change for one endpoint; ``id`` is its ``webhook-id``, ``attempts`` a count."""

    id: str
    status: str  # pending | delivered | failed
    endpoint_id: str | None = None
    run_id: str | None = None
    event_type: str | None = None
    attempts: int = 0
    next_attempt_at: dt.datetime | None = None
    last_attempt_at: dt.datetime | None = None
    last_response_status: int | None = None
    last_error: str | None = None
    delivered_at: dt.datetime | None = None
    created_at: dt.datetime | None = None


@dataclass(frozen=True)
class NotificationAttempt(Model):
    attempt: int
    outcome: str  # succeeded | failed | timeout | refused
    trigger: str = "scheduled"  # or manual (a resend)
    started_at: dt.datetime | None = None
    duration_ms: int | None = None
    response_status: int | None = None
    response_excerpt: str | None = None
    error: str | None = None
    next_attempt_at: dt.datetime | None = None


@dataclass(frozen=True)
class NotificationMessageDetail(NotificationMessage):
    """A message with the body it sends and its attempts, oldest first."""

    payload: Any = None
    attempt_log: list[NotificationAttempt] = field(default_factory=list)


# --- scheduled agents, environments, agents (the SDK's /agent surfaces) -----------------------------


@dataclass(frozen=True)
class Scope(Model):
    """Who owns a resource: ``{"type": "Team", "uid": ...}``."""

    type: str | None = None
    uid: str | None = None


@dataclass(frozen=True)
class ScheduledAgentHistory(Model):
    """When a schedule last started a run and when it will next (None: never / not while paused)."""

    last_ran: dt.datetime | None = None
    next_run: dt.datetime | None = None


@dataclass(frozen=True)
class ScheduledAgent(Model):
    """ScheduledAgentItem: the SDK's shape plus our extensions (``timezone`` to ``automation``).

    ``history`` is never None here (a null one reads as "no runs, no next run"), so callers can write
    ``item.history.next_run``. ``managed_by`` is ``definitions`` for a ``schedules/*.yaml`` file
    (``definition_path``), which the API refuses to change (409), or ``api``.
    """

    id: str
    name: str
    cron_schedule: str
    prompt: str = ""
    enabled: bool = True
    agent_config: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    history: ScheduledAgentHistory = field(default_factory=ScheduledAgentHistory)
    last_spawn_error: str | None = None
    scope: Scope | None = None
    created_by: RunCreator | None = None  # the same UserProfile shape as a run's creator
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    timezone: str = "UTC"
    managed_by: str | None = None
    factory_uid: str | None = None
    definition_path: str | None = None
    automation: str | None = None


@dataclass(frozen=True)
class GitHubRepo(Model):
    owner: str
    repo: str


@dataclass(frozen=True)
class EnvironmentRepo(Model):
    """Any repository an environment clones (credentials in ``url`` shown as ``***``)."""

    url: str
    ref: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class CloudEnvironmentConfig(Model):
    """``github_repos`` holds the github.com repositories only; ``repos`` (our extension) every one."""

    name: str | None = None
    description: str | None = None
    github_repos: list[GitHubRepo] = field(default_factory=list)
    setup_commands: list[str] = field(default_factory=list)
    docker_image: str | None = None
    repos: list[EnvironmentRepo] = field(default_factory=list)


@dataclass(frozen=True)
class EnvironmentTask(Model):
    """The most recent run created in an environment (``last_task_created``)."""

    id: str
    state: str | None = None
    title: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    started_at: dt.datetime | None = None


@dataclass(frozen=True)
class CloudEnvironment(Model):
    """An environment as ``GET /agent/environments`` lists it (the SDK's CloudEnvironment)."""

    uid: str
    config: CloudEnvironmentConfig = field(default_factory=CloudEnvironmentConfig)
    last_updated: dt.datetime | None = None
    setup_failed: bool = False
    last_task_created: EnvironmentTask | None = None
    last_task_run_timestamp: dt.datetime | None = None
    scope: Scope | None = None


@dataclass(frozen=True)
class VariantEnvironment(Model):
    name: str
    uid: str


@dataclass(frozen=True)
class VariantSource(Model):
    """Where a skill was found: ``owner/name`` and the SKILL.md path in it."""

    owner: str
    name: str
    skill_path: str
    worker_host: str | None = None


@dataclass(frozen=True)
class AgentVariant(Model):
    """One SKILL.md of an agent; ``id`` is ``owner/repo:skill_path``, a run's ``skill_spec``."""

    id: str
    base_prompt: str = ""
    description: str = ""
    environments: list[VariantEnvironment] = field(default_factory=list)
    source: VariantSource | None = None
    error: str | None = None  # a malformed SKILL.md (only with include_malformed_skills)
    last_run_timestamp: dt.datetime | None = None


@dataclass(frozen=True)
class AgentSkill(Model):
    """An agent (``GET /agent``): skills of one name, one variant per repository that defines it."""

    name: str
    variants: list[AgentVariant] = field(default_factory=list)


# --- secrets, validation, workers ------------------------------------------------------------------


@dataclass(frozen=True)
class Secret(Model):
    """A team secret's metadata; ``value`` only when the service generated it (shown once)."""

    name: str
    scope: str | None = None  # webhook | run
    version: int | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    used_by: list[str] = field(default_factory=list)
    value: str | None = None


@dataclass(frozen=True)
class ValidationDiagnostic(Model):
    rule: str
    message: str
    severity: str = "error"
    path: str = ""
    line: int = 0
    column: int = 0
    hint: str | None = None


@dataclass(frozen=True)
class FactoryValidation(Model):
    path: str = "."
    name: str | None = None
    files: int = 0
    errors: list[ValidationDiagnostic] = field(default_factory=list)


@dataclass(frozen=True)
class ValidationReport(Model):
    """The ``factoryctl validate --format json`` report (``raw`` is that JSON unchanged)."""

    valid: bool
    factories: list[FactoryValidation] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FactoryFileDiagnostic(Model):
    """One problem in ``POST /factory-files/validate``'s answer; ``code`` is an ``FF_*`` code or a rule ID.

    ``rule``, ``severity``, ``hint`` and ``located`` (False: ``line``/``column`` are the placeholder 1) are
    factoryctl's extensions of the product's shape."""

    code: str
    path: str
    message: str
    line: int = 1
    column: int = 1
    rule: str | None = None
    severity: str = "error"
    hint: str | None = None
    located: bool = True


@dataclass(frozen=True)
class DeferredResolution(Model):
    """A reference the offline checks leave to the server's state (a secret, an environment ID...)."""

    path: str
    field: str
    kind: str


@dataclass(frozen=True)
class FactoryFilesValidation(Model):
    """The answer of ``POST /factory-files/validate`` (docs/api.md, "Factory files")."""

    valid: bool
    schema_version: str = "v1alpha1"
    diagnostics: list[FactoryFileDiagnostic] = field(default_factory=list)
    deferred_resolutions: list[DeferredResolution] = field(default_factory=list)
    state_dependent_checks_not_run: list[str] = field(default_factory=list)
    validation_scope: dict[str, str] = field(default_factory=dict)
    factory: dict[str, Any] = field(default_factory=dict)  # factoryctl extension: {name, files}


@dataclass(frozen=True)
class PendingFollowup(Model):
    followup_id: str
    message: str = ""
    mode: str | None = None


@dataclass(frozen=True)
class ClaimedRun(Model):
    run_id: str
    prompt: str = ""
    title: str | None = None
    base_prompt: str | None = None
    agent_config: dict[str, Any] = field(default_factory=dict)
    model_id: str | None = None
    attachments: list[dict[str, Any]] = field(default_factory=list)
    followups: list[PendingFollowup] = field(default_factory=list)
    attempt: int | None = None
    worker_host: str | None = None
    lease_expires_at: dt.datetime | None = None
    conversation_id: str | None = None
    parent_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    resume_session_id: str | None = None  # the agent session an earlier attempt recorded


@dataclass(frozen=True)
class Claim(Model):
    run: ClaimedRun
    lease_seconds: float | None = None
    lease_token: str | None = None  # presented on every call for the run (docs/workers.md, "Leases")


@dataclass(frozen=True)
class Heartbeat(Model):
    run_id: str
    state: str | None = None
    cancel_requested: bool = False
    followups: list[PendingFollowup] = field(default_factory=list)
    lease_expires_at: dt.datetime | None = None


@dataclass(frozen=True)
class StateReport(Model):
    run_id: str
    state: str
    cancel_requested: bool = False
