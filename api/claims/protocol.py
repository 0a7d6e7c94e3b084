"""One path per worker call: what the HTTP routes and the service-hosted workers both call.

A worker claims a run (with its claim answer), heartbeats, sends log lines and its agent's transcript
events, reports the outcome and reads the run's secrets. Self-hosted workers make these calls over HTTP
(:mod:`api.claims.routes` parses, authorizes and serialises), service-hosted workers in-process
(:mod:`factoryctl.serve.local_workers`); both reach the store only through :class:`WorkerProtocol`,
so the lease rule, the log caps, claim-time skill and MCP resolution and the event wake-ups hold
whatever the path (docs/workers.md).

Every refusal because of the lease or the run's state is one :class:`~api.claims.errors.LeaseRefused`;
a run that does not exist (or is another team's) is :class:`store.NotFound`. The transactions are
opened here, one per call; the SQL is :mod:`api.claims.queue`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.claims import queue, run_logs, session_state, transcript
from api.claims.errors import LeaseRefused, NotLeaseHolder
from api.claims.payload import claim_payload, complete_claim, followup_json, run_secret_names
from api.context import BOX, CLOCK, SESSIONS, SETTINGS
from api.runs.event_hub import notify_events
from api.runs.prepare import SKILLS
from api.runs.skills import SkillResolver
from api.runs.states import IllegalTransition
from store import NotFound
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Run
from store.write_gate import write_gate, writing

__all__ = ["HeartbeatAnswer", "Holder", "WorkerProtocol", "run_secrets", "skill_resolver"]


@dataclass(frozen=True)
class Holder:
    """Who calls for a run: the lease owner, the claim's ``lease_token`` it presents, and the team it
    acts in (None: every team, as service-hosted workers do; docs/workers.md, "Leases")."""

    owner: str
    lease_token: str | None
    team_id: str | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    """The run after a heartbeat; ``followups`` (wire shape) are handed over once each."""

    state: str
    cancel_requested: bool
    lease_expires_at: dt.datetime
    followups: list[dict[str, Any]]


def skill_resolver(app: web.Application) -> SkillResolver:
    """The app's skill resolver (installed by the run routes), or one built from the settings."""
    resolver = app.get(SKILLS)
    if resolver is None:
        resolver = SkillResolver.from_settings(app[SETTINGS])
    return resolver


class WorkerProtocol:
    """The worker calls on one app's store. ``committed`` runs after each commit a worker's call makes
    visible (this process's event streams look now, docs/events.md); ``skills`` gives the resolver a
    claim uses for a skill the run was created without."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Clock,
        box: SecretBox,
        *,
        lease_seconds: float,
        log_limits: run_logs.LogLimits = run_logs.DEFAULT_LOG_LIMITS,
        skills: Callable[[], SkillResolver],
        committed: Callable[[], None] = lambda: None,
    ) -> None:
        self.sessions, self.clock, self.box = sessions, clock, box
        self.lease_seconds, self.log_limits = lease_seconds, log_limits
        self.skills, self.committed = skills, committed
        self.gate = write_gate(sessions)

    def _writing(self) -> AbstractAsyncContextManager[None]:
        """A worker call's write transaction goes before the next ingress batch on SQLite
        (:mod:`store.write_gate`; docs/operations.md, "Fair sharing")."""
        return writing(self.gate, urgent=True)

    @classmethod
    def of(cls, app: web.Application, *, lease_seconds: float | None = None) -> WorkerProtocol:
        """The protocol of ``app``: its store, clock, secret box, lease (or ``lease_seconds``, the one a
        claim answered) and log caps (server settings)."""
        settings = app[SETTINGS]
        return cls(
            app[SESSIONS],
            app[CLOCK],
            app[BOX],
            lease_seconds=settings.lease_seconds if lease_seconds is None else lease_seconds,
            log_limits=run_logs.LogLimits(settings.run_log_max_lines, settings.run_log_max_bytes),
            skills=lambda: skill_resolver(app),
            committed=lambda: notify_events(app),
        )

    async def claim(
        self,
        hosts: Sequence[str],
        owner: str,
        *,
        team_id: str | None = None,
        peek: bool = False,
        harnesses: Sequence[str] | None = None,
    ) -> dict[str, Any] | None:
        """Claim the oldest run queued for ``hosts`` that a worker offering ``harnesses`` runs (None: any
        run) and answer it (:mod:`api.claims.payload`); None when there is none. ``peek`` reads first, so
        idle pollers never take write locks."""
        if peek:
            async with self.sessions() as session:
                found = await queue.queued_exists(
                    session, worker_hosts=hosts, team_id=team_id, harnesses=harnesses
                )
                if not found:
                    return None
        lease = self.lease_seconds
        while True:  # a run whose skill fails at claim time ends FAILED; then take the next one
            async with self._writing(), self.sessions() as session, session.begin():
                run = await queue.claim_next(
                    session,
                    self.clock,
                    worker_hosts=hosts,
                    owner=owner,
                    lease_seconds=lease,
                    team_id=team_id,
                    harnesses=harnesses,
                )
                if run is None:
                    return None
                answer = await claim_payload(session, self.clock, run, lease)
            self.committed()  # the claim is a state event (docs/events.md)
            completed = await complete_claim(self.sessions, self.clock, self.skills(), answer, owner=owner)
            if completed is not None:
                return completed

    async def heartbeat(
        self, run_id: str, holder: Holder, *, start: bool = False, sandbox: dict[str, str] | None = None
    ) -> HeartbeatAnswer:
        """Extend the lease; ``start`` also moves a CLAIMED run to INPROGRESS and ``sandbox`` is recorded
        on the run (:func:`queue.heartbeat`)."""
        try:
            async with self._writing(), self.sessions() as session, session.begin():
                beat = await queue.heartbeat(
                    session,
                    self.clock,
                    run_id,
                    owner=holder.owner,
                    lease_token=holder.lease_token,
                    lease_seconds=self.lease_seconds,
                    start=start,
                    team_id=holder.team_id,
                    sandbox=sandbox,
                )
                followups = [followup_json(f) for f in beat.followups]
        except IllegalTransition as exc:
            raise LeaseRefused(str(exc), exc.state.value) from exc
        if start:
            self.committed()  # a start is a state event
        return HeartbeatAnswer(beat.state, beat.cancel_requested, beat.lease_expires_at, followups)

    async def report(
        self, run_id: str, holder: Holder, state: str, status_message: dict[str, Any] | None = None
    ) -> Run:
        """A worker's state report, through the state machine (:func:`queue.report_state`)."""
        try:
            async with self._writing(), self.sessions() as session, session.begin():
                run = await queue.report_state(
                    session,
                    self.clock,
                    run_id,
                    owner=holder.owner,
                    lease_token=holder.lease_token,
                    state=state,
                    status_message=status_message,
                    team_id=holder.team_id,
                )
        except IllegalTransition as exc:
            detail = f"cannot report {state} for a run in state {exc.state.value}"
            raise LeaseRefused(detail, exc.state.value) from exc
        self.committed()
        return run

    async def append_logs(self, run_id: str, holder: Holder, lines: Sequence[tuple[str, str]]) -> int:
        """Append output lines within the run's log caps (:mod:`api.claims.run_logs`); how many stored."""
        async with self._writing(), self.sessions() as session, session.begin():
            count = await run_logs.append_logs(
                session,
                self.clock,
                run_id,
                lines,
                owner=holder.owner,
                lease_token=holder.lease_token,
                team_id=holder.team_id,
                limits=self.log_limits,
            )
        self.committed()
        return count

    async def append_events(self, run_id: str, holder: Holder, batch: Sequence[Any]) -> int:
        """Append the agent's transcript events (``{kind, data}`` objects or parsed
        :class:`~api.claims.transcript.TranscriptEvent` values) within the run's event cap
        (:mod:`api.claims.transcript`); how many were stored. A malformed or oversized batch is
        :class:`api.ValidationFailed` before anything is read."""
        if all(isinstance(e, transcript.TranscriptEvent) for e in batch):
            parsed: list[transcript.TranscriptEvent] = list(batch)
        else:
            parsed = transcript.parse_events(list(batch))
        async with self._writing(), self.sessions() as session, session.begin():
            count = await transcript.append_events(
                session,
                self.clock,
                run_id,
                parsed,
                owner=holder.owner,
                lease_token=holder.lease_token,
                team_id=holder.team_id,
            )
        self.committed()
        return count

    async def save_session_state(self, run_id: str, holder: Holder, archive: bytes) -> int:
        """Keep the agent CLI's session files of this attempt (a ``tar.gz``), encrypted, for a follow-up
        (:mod:`api.claims.session_state`); its size. Over the cap:
        :class:`~api.claims.session_state.SessionStateTooLarge`."""
        async with self._writing(), self.sessions() as session, session.begin():
            return await session_state.save_state(
                session,
                self.clock,
                self.box,
                run_id,
                archive,
                owner=holder.owner,
                lease_token=holder.lease_token,
                team_id=holder.team_id,
            )

    async def load_session_state(self, run_id: str, holder: Holder) -> bytes | None:
        """The session files an earlier attempt saved (None: none), to the lease holder only."""
        async with self.sessions() as session, session.begin():
            return await session_state.load_state(
                session,
                self.box,
                run_id,
                owner=holder.owner,
                lease_token=holder.lease_token,
                team_id=holder.team_id,
            )

    async def secrets(self, run_id: str, holder: Holder) -> secret_store.RunSecrets:
        """The secrets the run references, to the holder of its lease only (:func:`run_secrets`)."""
        return await run_secrets(self.sessions, self.box, run_id, holder=holder)


async def run_secrets(
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    run_id: str,
    *,
    holder: Holder | None = None,
    names: Sequence[str] | None = None,
) -> secret_store.RunSecrets:
    """The current values of the team secrets among ``names`` (None: every one the stored run references,
    :func:`~api.claims.payload.run_secret_names`), under :func:`store.secrets.reveal_for_run`'s rule
    (``run`` scope only). With ``holder``, only while it holds the run's lease (self-hosted workers);
    a service-hosted worker reads them in the process that claimed the run."""
    conds: list[ColumnElement[bool]] = [Run.run_id == run_id]
    if holder is not None and holder.team_id is not None:
        conds.append(Run.team_id == holder.team_id)
    async with sessions() as session:
        run = await session.scalar(select(Run).where(*conds))
        if run is None:
            raise NotFound(f"run {run_id} does not exist")
        if holder is not None and not queue.holds_lease(run, holder.owner, holder.lease_token):
            raise NotLeaseHolder(run.run_id, run.state)
        wanted = await run_secret_names(session, run) if names is None else names
        return await secret_store.reveal_for_run(session, box, run.team_id, wanted)
