"""Reconcile one factory directory: load, validate, plan and apply, as one transaction.

:func:`reconcile` is what ``factoryctl plan``/``apply`` and the watch and git loops call. With
``dry_run`` it only reads and returns the plan. Otherwise, in one transaction: take the factory's
apply lock (:mod:`reconciler.locks`), read the store, run the offline rules and the online checks,
plan, apply, record the revision, conditions and an apply-history row, commit. Any definition
problem rolls everything back, and then a second, small transaction records the failed attempt
(history row with the errors, ``last_attempted_revision`` and Ready=False/Stalled=True on the factory
when it exists): the last good state stays live and the failure is visible. The loops record what
happens before a tree can be loaded the same way: :func:`record_revision_failure` (a revision the source
could not read) and :func:`record_source_failure` (the source itself cannot be read).

Definition problems are returned (``outcome == "failed"`` with diagnostics or an error); only
unexpected failures (the database going away) raise, after an attempt to record them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler import DefinitionsInvalid, ReconcileError, loader, online, rules
from reconciler.apply import MANAGED_BY, apply_plan, find_factory, read_state
from reconciler.diagnostics import Diagnostic
from reconciler.loadcache import LoadCache
from reconciler.locks import acquire
from reconciler.plan import Plan, StoreState, diff
from reconciler.registry import KINDS
from reconciler.specs import FactoryDefinition
from reconciler.syncstate import SYNCED, UNKNOWN, ManagedElsewhere, Manager, active, describe, refusal, status
from store.clock import Clock, rfc3339
from store.crypto import SecretBox
from store.models import ApplyRecord, Factory, Team
from store.teams import ensure_team


class ApplyRefused(ReconcileError):
    """The definitions are valid but cannot apply here (API-managed factory, plan changed since approval)."""


@dataclass(frozen=True)
class ReconcileOutcome:
    """What one reconcile did.

    ``outcome``: ``planned`` (dry run, no errors), ``succeeded`` (changes applied), ``noop`` (applied,
    nothing to change), ``failed`` (nothing written but the failure record). ``plan`` is None when the
    definitions could not be planned; after an apply it carries the UIDs minted for created objects.
    """

    outcome: str
    revision: str
    duration_ms: int
    plan: Plan | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    error: str | None = None
    factory_name: str | None = None
    factory_uid: str | None = None
    files: int = 0
    reason: str | None = None  # why it failed, when the caller must tell (``ManagedElsewhere``)
    managed_by: str | None = None  # a plan: the live ``serve`` that manages the factory, described

    @property
    def ok(self) -> bool:
        return self.outcome != "failed"

    @property
    def has_changes(self) -> bool:
        return self.plan is not None and self.plan.has_changes

    def diagnostics_json(self) -> list[dict[str, Any]]:
        """Every diagnostic (warnings included), then the refusal error if any, as in ``--format json``."""
        out = [d.to_json() for d in self.diagnostics]
        if self.error:
            refusal = Diagnostic("", self.error, "")
            out.append(refusal.to_json() | {"rule": None})
        return out

    def errors_json(self) -> list[dict[str, Any]]:
        """The errors only (what the apply history records)."""
        return [d for d in self.diagnostics_json() if d["severity"] == "error"]


def conditions(
    previous: list[Any], *, ready: bool, reason: str, message: str, now: dt.datetime
) -> list[dict[str, Any]]:
    """Ready/Reconciling/Stalled conditions; a condition's transition time moves only when its status does.

    Reconciling is always False afterwards: an apply is one transaction, so nobody sees it in progress.
    """
    before = {c.get("type"): c for c in previous if isinstance(c, dict)}
    wanted = (
        ("Ready", ready, message),
        ("Reconciling", False, ""),
        ("Stalled", not ready, "" if ready else message),
    )
    out = []
    for kind, flag, text in wanted:
        status = "True" if flag else "False"
        old = before.get(kind)
        since = old.get("last_transition_time") if old and old.get("status") == status else rfc3339(now)
        out.append(
            {"type": kind, "status": status, "reason": reason, "message": text, "last_transition_time": since}
        )
    return out


def first_error(diagnostics: tuple[Diagnostic, ...], error: str | None) -> str:
    if error:
        return error
    errors = [d for d in diagnostics if d.severity == "error"]
    first = str(errors[0]) if errors else "apply failed"
    more = len(errors) - 1
    return f"{first} (and {more} more)" if more > 0 else first


async def _team_id(session: AsyncSession, team: str) -> str | None:
    return (await session.execute(select(Team.id).where(Team.name == team))).scalar_one_or_none()


def _load(root: Path, cache: LoadCache | None, follow_symlinks: bool) -> tuple[loader.LoadResult, str]:
    """File I/O, run in a thread: the load result and the absolute path of ``root``."""
    if cache is not None:
        return cache.load(root, follow_symlinks=follow_symlinks), str(root.resolve())
    return loader.load(root, follow_symlinks=follow_symlinks), str(root.resolve())


def _shown(definition: FactoryDefinition, rel: str) -> str:
    """A path as the loader shows it: the root as given, joined with the file's relative path."""
    return (Path(definition.root) / rel).as_posix()


@dataclass(frozen=True)
class _Checks:
    """Every check that needs the store, then the plan."""

    box: SecretBox
    definition: FactoryDefinition
    load_diagnostics: list[Diagnostic]
    allow_empty: bool

    async def plan(
        self, session: AsyncSession, team_id: str | None, state: StoreState
    ) -> tuple[Plan, tuple[Diagnostic, ...]]:
        """The plan and any warnings; raises DefinitionsInvalid (with every problem found) or ApplyRefused."""
        definition = self.definition
        if state.managed_by not in (None, MANAGED_BY):
            uid = state.factory.uid if state.factory else ""
            raise ApplyRefused(
                f"factory {definition.factory.name!r} ({uid}) is managed through the API;"
                " definition files cannot apply to it"
            )
        names = {w.name for w in definition.webhooks}
        surviving = {obj.uid: name for name, obj in state.objects("webhook").items() if name in names}
        diagnostics = list(self.load_diagnostics)
        known_uids = {name: obj.uid for name, obj in state.objects("webhook").items()}
        # Environments of other factories (or the API) may be referenced; this factory's own are in the tree.
        diagnostics += rules.check(definition, known_uids, known_environments=set(state.taken_environments))
        diagnostics += await online.check(session, self.box, team_id or "", definition, surviving)
        for env in definition.environments:
            owner = state.taken_environments.get(env.name)
            if owner is not None:
                message = f"environment {env.name!r} already exists in this team ({owner})"
                diagnostics.append(Diagnostic("FC020", message, _shown(definition, env.path)))
        content = [kind for kind in KINDS if kind.content]
        if not self.allow_empty and not any(kind.specs(definition) for kind in content):
            folders = [kind.folder for kind in content]
            listed = f"{', '.join(folders[:-1])} or {folders[-1]}"
            diagnostics.append(
                Diagnostic(
                    "FC050",
                    f"the tree has no {listed}: applying it would delete them all",
                    _shown(definition, definition.factory.path),
                    hint="pass --allow-empty to apply it anyway",
                )
            )
        if any(d.severity == "error" for d in diagnostics):
            raise DefinitionsInvalid(diagnostics)
        return diff(definition, state), tuple(diagnostics)


async def reconcile(
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    clock: Clock,
    *,
    team: str,
    root: Path,
    revision: str | None,
    allow_empty: bool = False,
    dry_run: bool = False,
    source: str | None = None,
    expected_plan: str | None = None,
    cache: LoadCache | None = None,
    follow_symlinks: bool = True,
    commit: dict[str, Any] | None = None,
    manager: Manager | None = None,
    force: bool = False,
) -> ReconcileOutcome:
    """Plan (``dry_run``) or apply the factory directory ``root`` for ``team``.

    ``revision`` is recorded as applied (a git SHA); None records the definitions' content digest.
    ``source`` is stored on the factory (default: ``root`` as an absolute path). ``expected_plan`` is
    a :meth:`Plan.digest` the caller showed and had approved: if the plan differs now, nothing is
    applied. ``cache`` (long-running loops) skips re-loading a directory whose files did not change.
    ``follow_symlinks`` False (git snapshots) reports every symlink instead of following it.
    ``commit`` describes a git ``revision`` (recorded with it). ``manager`` is the ``serve`` applying its
    source (recorded as the factory's manager); an apply to a factory another live manager holds is
    refused (``reason="ManagedElsewhere"``, nothing recorded) unless ``force`` (docs/reconcile.md, "Who
    manages a factory").
    """
    started, t0 = clock.now(), clock.monotonic()
    loaded, where = await asyncio.to_thread(_load, root, cache, follow_symlinks)
    definition = loaded.definition
    rev = revision or (f"sha256:{definition.content_digest}" if definition else "unknown")

    def outcome(kind: str, **kw: Any) -> ReconcileOutcome:
        ms = int((clock.monotonic() - t0) * 1000)
        return ReconcileOutcome(kind, rev, ms, files=loaded.files, **kw)

    if definition is None:
        diags = tuple(loaded.diagnostics) or (Diagnostic("FC001", "no factory definition found", str(root)),)
        failed = outcome("failed", diagnostics=diags)
        if not dry_run:
            await _record_failure(
                sessions, clock, team, started, failed, "DefinitionsInvalid", label=root.name
            )
        return failed
    name = definition.factory.name
    checks = _Checks(box, definition, loaded.diagnostics, allow_empty)
    try:
        if dry_run:
            async with sessions() as session:
                team_id = await _team_id(session, team)
                state = await read_state(session, team_id, name)
                plan, warnings = await checks.plan(session, team_id, state)
                holder = await _holder(session, team_id, name, None, True, clock.now()) if team_id else None
            return outcome(
                "planned",
                plan=plan,
                diagnostics=warnings,
                factory_name=name,
                factory_uid=plan.factory_uid,
                managed_by=describe(holder) if holder else None,
            )
        async with sessions() as session, session.begin():
            await acquire(session, team, name, now=started)
            team_id = (await ensure_team(session, team, clock)).id
            state = await read_state(session, team_id, name)
            holder = await _holder(session, team_id, name, manager, force, clock.now())
            plan, warnings = await checks.plan(session, team_id, state)
            if expected_plan is not None and plan.digest() != expected_plan:
                raise ApplyRefused("the plan changed since it was shown; run apply again")
            now = clock.now()
            factory, assigned = await apply_plan(
                session, team_id, definition, state, plan, now=now, source=source or where
            )
            plan = plan.with_uids(assigned)
            result = outcome(
                "succeeded" if plan.has_changes else "noop",
                plan=plan,
                diagnostics=warnings,
                factory_name=name,
                factory_uid=factory.uid,
            )
            factory.last_applied_revision = rev
            factory.last_attempted_revision = rev
            factory.conditions = conditions(
                factory.conditions, ready=True, reason="Applied", message=f"applied revision {rev}", now=now
            )
            factory.applied_commit = commit
            if manager is not None:
                factory.manager = manager.record(now)
            if holder is not None:  # forced over a live manager: its next check compares its own source
                note = f"applied with --force from {source or where}; the {describe(holder)} checks it next"
                factory.sync = status(UNKNOWN, rev, now, message=note, previous=factory.sync)
            else:
                factory.sync = status(SYNCED, rev, now, previous=factory.sync)
            session.add(_history(team_id, started, result, commit))
        return result
    except ManagedElsewhere as exc:
        return outcome("failed", error=str(exc), factory_name=name, reason="ManagedElsewhere")
    except (DefinitionsInvalid, ApplyRefused) as exc:
        diags = tuple(exc.diagnostics) if isinstance(exc, DefinitionsInvalid) else ()
        failed = outcome("failed", diagnostics=diags, error=None if diags else str(exc), factory_name=name)
        if not dry_run:
            reason = "DefinitionsInvalid" if diags else "ApplyRefused"
            await _record_failure(sessions, clock, team, started, failed, reason)
        return failed
    except Exception as exc:
        if not dry_run:
            failed = outcome("failed", error=f"internal error: {exc!r}", factory_name=name)
            with contextlib.suppress(Exception):  # the original error is the one worth raising
                await _record_failure(sessions, clock, team, started, failed, "ApplyFailed")
        raise


async def _holder(
    session: AsyncSession, team_id: str, name: str, manager: Manager | None, force: bool, now: dt.datetime
) -> dict[str, Any] | None:
    """The live manager record of another source that this apply overrides (``force``), else None;
    raises :class:`ManagedElsewhere` when it may not."""
    row = await find_factory(session, team_id, name)
    if row is None or row.managed_by != MANAGED_BY:
        return None
    holder = active(row.manager, now)
    if holder is None or (manager is not None and manager.same(holder)):
        return None
    if not force:
        raise refusal(name, row.uid, holder)
    return holder


def _history(
    team_id: str, started: dt.datetime, result: ReconcileOutcome, commit: dict[str, Any] | None = None
) -> ApplyRecord:
    plan = result.plan
    summary = plan.summary() | {"changes": [c.to_json() for c in plan.changes]} if plan else {}
    return ApplyRecord(
        team_id=team_id,
        factory_uid=result.factory_uid,
        factory_name=result.factory_name or "",
        revision=result.revision,
        outcome=result.outcome,
        started_at=started,
        duration_ms=result.duration_ms,
        summary=summary,
        errors=result.errors_json(),
        commit=commit,
    )


async def _record_failure(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    team: str,
    started: dt.datetime,
    failed: ReconcileOutcome,
    reason: str,
    *,
    label: str = "",
) -> None:
    """A failed attempt, in its own transaction: history row, and the factory's attempt and conditions."""
    async with sessions() as session, session.begin():
        team_id = (await ensure_team(session, team, clock)).id
        name = failed.factory_name
        factory = await find_factory(session, team_id, name) if name else None
        if factory is not None and factory.managed_by != MANAGED_BY:
            factory = None  # an API-managed factory is not ours to mark
        if factory is not None:
            factory.last_attempted_revision = failed.revision
            message = first_error(failed.diagnostics, failed.error)
            factory.conditions = conditions(
                factory.conditions, ready=False, reason=reason, message=message, now=clock.now()
            )
        uid = factory.uid if factory is not None else None
        session.add(_history(team_id, started, replace(failed, factory_uid=uid, factory_name=name or label)))


async def _factory_name(session: AsyncSession, team_id: str, name: str | None, source: str) -> str | None:
    """``name`` when given, else the definitions-managed factory last applied from ``source``."""
    if name:
        return name
    stmt = (
        select(Factory.name)
        .where(Factory.team_id == team_id, Factory.source == source, Factory.managed_by == MANAGED_BY)
        .order_by(Factory.updated_at.desc())
        .limit(1)
    )
    return (await session.execute(stmt)).scalar_one_or_none()


async def record_revision_failure(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    *,
    team: str,
    source: str,
    revision: str,
    error: str,
    factory_name: str | None = None,
) -> ReconcileOutcome:
    """A revision the source could not read (a malformed git tree), recorded as a failed reconcile of it:
    history row, ``last_attempted_revision`` and Ready=False/Stalled=True (``RevisionUnreadable``) on the
    factory — ``factory_name``, else the one last applied from ``source`` (docs/reconcile.md)."""
    started = clock.now()
    async with sessions() as session:
        team_id = await _team_id(session, team)
        name = await _factory_name(session, team_id, factory_name, source) if team_id else factory_name
    failed = ReconcileOutcome("failed", revision, 0, error=error, factory_name=name)
    await _record_failure(sessions, clock, team, started, failed, "RevisionUnreadable", label=source)
    return failed


async def record_source_failure(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    *,
    team: str,
    source: str,
    error: str,
    factory_name: str | None = None,
) -> None:
    """The source cannot be read at all (fetch failed): Ready=False/Stalled=True (``SourceUnavailable``) on
    the factory, nothing else — no revision was attempted. The next reconcile sets them again."""
    async with sessions() as session, session.begin():
        team_id = await _team_id(session, team)
        name = await _factory_name(session, team_id, factory_name, source) if team_id else None
        factory = await find_factory(session, team_id, name) if team_id and name else None
        if factory is None or factory.managed_by != MANAGED_BY:
            return
        factory.conditions = conditions(
            factory.conditions, ready=False, reason="SourceUnavailable", message=error, now=clock.now()
        )
