"""The accept transaction: a delivery's log entry and its runs commit together, or not at all.

Deduplication is decided by the database, never by a check-then-insert: the Accepted entry is inserted
with ``ON CONFLICT (webhook_uid, delivery_id) WHERE status = 'Accepted' DO NOTHING RETURNING seq``
against the partial unique index. Exactly one of any number of concurrent deliveries with one identity
(on any replica) gets a row back; the others write a ``Duplicate`` entry and start nothing. The winner,
in the same transaction, creates one QUEUED run per automation that the webhook's routing rows match; the
routing, done just before the insert, gives each entry the decision behind every automation's run or
absence of one (:mod:`api.ingress.decisions`). A 202 is sent only after the commit, so an acknowledged
delivery survives a crash, and a delivery that was not committed was not acknowledged (the sender
retries, and the retry is not a duplicate of anything).

The runs' own partial unique index (automation, webhook, delivery) is the backstop for "at most one run
per automation per delivery". It matters once retention has pruned an old Accepted entry and the sender
repeats that delivery ID: the delivery is accepted again, but automations that already ran for it are
skipped (the Accepted insert has serialised that identity, so the check cannot race).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.ingress import decisions, github_routing, lookup
from api.ingress.direct import DirectSqlite
from api.ingress.envelope import PAYLOAD_FILE, PAYLOAD_MIME, github_envelope, run_prompt, with_envelope
from api.runs.config import automation_config
from api.runs.new_run import Creator, NewAttachment, NewRun
from api.runs.records import build_run_row, insert_runs
from store.bulk import insert_returning, insert_rows
from store.clock import Clock
from store.models import Delivery
from store.rules.vocabulary import RunSource
from store.write_gate import write_gate, writing

ACCEPTED = "Accepted"
DUPLICATE = "Duplicate"
REJECTED_AUTH = "Rejected (auth)"
REJECTED_JSON = "Rejected (invalid JSON)"
REJECTED_TOO_LARGE = "Rejected (too large)"
STATUSES = (ACCEPTED, DUPLICATE, REJECTED_AUTH, REJECTED_JSON, REJECTED_TOO_LARGE)

RUN_SOURCE = RunSource.CUSTOM_WEBHOOK
# The detail of a GitHub App delivery's Accepted/Duplicate entry: the event, which a replay routes by.
EVENT_DETAIL = "GitHub event "
_DETAIL_MAX = 500
_DELIVERIES: Table = Delivery.__table__  # type: ignore[assignment]
_INSERT_DELIVERIES = insert(_DELIVERIES)


@dataclass(frozen=True, slots=True)
class Pending:
    """An authenticated, parsed delivery waiting for the accept transaction."""

    webhook: lookup.WebhookRow  # for a GitHub App delivery: its connection (github_routing.connection_row)
    delivery_id: str
    raw: bytes
    payload: object
    event: str | None = None  # the GitHub event name (X-GitHub-Event); None for a webhook delivery
    content_key: str | None = None  # a GitHub App delivery's body hash: also unique among Accepted ones


@dataclass(frozen=True, slots=True)
class Committed:
    """What the accept transaction committed for one delivery."""

    delivery_id: str
    duplicate: bool
    run_ids: tuple[str, ...] = ()


def _accept_statement(dialect: str) -> Any:
    """The dialect's ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` on the partial unique indexes: the
    identity's, and a GitHub App delivery's content key (no conflict target, so both decide).

    Built once per dialect and executed with a list of rows: SQLAlchemy's "insertmanyvalues" sends it as
    one multi-row INSERT (rows in order) from a cached compilation.
    """
    insert_ = sqlite.insert if dialect == "sqlite" else postgresql.insert
    return (
        insert_(_DELIVERIES)
        .on_conflict_do_nothing()
        .returning(_DELIVERIES.c.webhook_uid, _DELIVERIES.c.delivery_id)
    )


_ACCEPT = {dialect: _accept_statement(dialect) for dialect in ("sqlite", "postgresql")}


async def accept(
    session: AsyncSession, clock: Clock, batch: Sequence[Pending], filters: lookup.FilterCache
) -> list[Committed]:
    """Log each delivery as Accepted or Duplicate and start its runs, all in one committed transaction."""
    async with session.begin():
        conn = await session.connection()
        return await conn.run_sync(accept_in, clock, batch, filters)


def accept_in(
    conn: Connection, clock: Clock, batch: Sequence[Pending], filters: lookup.FilterCache
) -> list[Committed]:
    """The statements of :func:`accept` inside the caller's transaction on a synchronous connection.

    One multi-row insert decides every delivery of the batch; within a batch, the first of several
    deliveries with one identity is the accepted one (rows are inserted in order). The runs of the whole
    batch, and their attachments, are then inserted with one statement each.
    """
    now = clock.now()
    entries = [
        {
            "team_id": p.webhook.team_id,
            "webhook_uid": p.webhook.uid,
            "delivery_id": p.delivery_id,
            "size": len(p.raw),
            "received_at": now,
            "detail": None if p.event is None else EVENT_DETAIL + p.event,
            "content_key": p.content_key,
            "decisions": None,
        }
        for p in batch
    ]
    # Routed before the Accepted insert, so that each entry is inserted with its decisions (docs/ingress.md,
    # "Decisions"); a Duplicate's routing is discarded.
    routed = route_in(conn, batch, filters)
    rows = [
        {**e, "status": ACCEPTED, "payload": p.raw, "decisions": r.decisions}
        for e, p, r in zip(entries, batch, routed, strict=True)
    ]
    for entry in entries:  # a Duplicate entry keeps no key: only Accepted ones are unique by it
        entry["content_key"] = None
    # In identity order (stable: the first of equal identities stays first), so concurrent batches take
    # the unique index's entries in one order and cannot deadlock each other.
    rows.sort(key=lambda r: (r["webhook_uid"], r["delivery_id"]))
    inserted = {(uid, did) for uid, did in insert_returning(conn, _ACCEPT[conn.dialect.name], rows)}
    won: list[int] = []
    lost: list[int] = []
    for index, p in enumerate(batch):
        key = (p.webhook.uid, p.delivery_id)
        if key in inserted:
            inserted.discard(key)  # a later copy of this identity in the batch is a Duplicate
            won.append(index)
        else:
            lost.append(index)
    if lost:
        insert_rows(
            conn, _INSERT_DELIVERIES, [{**entries[i], "status": DUPLICATE, "payload": None} for i in lost]
        )
    runs: dict[int, tuple[str, ...]] = {}
    wanted = {i: routed[i].matched for i in won if routed[i].matched}
    if wanted:
        runs = start_runs(conn, now, batch, wanted)
    duplicates = set(lost)
    return [
        Committed(p.delivery_id, duplicate=i in duplicates, run_ids=runs.get(i, ()))
        for i, p in enumerate(batch)
    ]


def route_in(
    conn: Connection, batch: Sequence[Pending], filters: lookup.FilterCache
) -> list[decisions.Routed]:
    """For each delivery, the UIDs of the automations it starts runs for and the decisions behind them:
    a webhook's routing rows (:func:`api.ingress.decisions.decide_in`) or, for a GitHub App delivery, the
    team's automations with a matching ``github`` trigger (:func:`api.ingress.github_routing.match_in`).
    The accept transaction and a replay both route through here."""
    hooks = [i for i, p in enumerate(batch) if p.event is None]
    github = [i for i, p in enumerate(batch) if p.event is not None]
    routed: list[decisions.Routed] = [decisions.Routed([], None) for _ in batch]
    if hooks:
        found = decisions.decide_in(conn, [(batch[i].webhook, batch[i].payload) for i in hooks], filters)
        for i, result in zip(hooks, found, strict=True):
            routed[i] = result
    if github:
        found_github = github_routing.match_in(
            conn, [(batch[i].webhook.team_id, batch[i].event or "", batch[i].payload) for i in github]
        )
        for i, result in zip(github, found_github, strict=True):
            routed[i] = result
    return routed


def start_runs(
    conn: Connection, now: dt.datetime, batch: Sequence[Pending], wanted: dict[int, list[str]]
) -> dict[int, tuple[str, ...]]:
    """One QUEUED run per (delivery, matching automation), skipping automations that already ran for the
    delivery ID (possible only after retention pruned its Accepted entry).

    ``wanted`` maps an index of ``batch`` to the UIDs of its matching automations. The one place a
    webhook's runs are built (docs/ingress.md, "Routing and runs"): the accept transaction calls it, and so
    does a replay (:mod:`api.management.replay`, docs/management.md, "Replaying a delivery").
    """
    automations, already = lookup.load_automations_in(
        conn,
        sorted({uid for uids in wanted.values() for uid in uids}),
        [(batch[i].webhook.uid, batch[i].delivery_id) for i in wanted],
    )
    started: dict[int, tuple[str, ...]] = {}
    rows: list[tuple[dict[str, Any], Sequence[NewAttachment]]] = []
    for index, uids in wanted.items():
        p = batch[index]
        creator, metadata = _origin(p)
        attachment = (NewAttachment(file_name=PAYLOAD_FILE, mime_type=PAYLOAD_MIME, data=p.raw),)
        run_ids = []
        for uid in uids:
            automation = automations.get(uid)
            if automation is None or (uid, p.webhook.uid, p.delivery_id) in already:
                continue
            config = automation_config(
                automation.config, automation.agent, automation.factory_agents, automation.factory_worker_host
            )
            new = NewRun(
                team_id=p.webhook.team_id,
                prompt=_prompt(p, automation.prompt),
                title=automation.title or automation.name,  # never taken from the payload
                agent_config=config,
                source=RUN_SOURCE,
                creator=creator,
                metadata=metadata,
                attachments=attachment,
                factory_uid=automation.factory_uid,
                automation_id=automation.uid,
                agent=automation.agent,
                webhook_uid=p.webhook.uid,
                delivery_id=p.delivery_id,
            )
            row = build_run_row(now, new)
            rows.append((row, new.attachments))
            run_ids.append(row["run_id"])
        started[index] = tuple(run_ids)
    insert_runs(conn, rows)
    return started


def _origin(p: Pending) -> tuple[Creator, dict[str, str] | None]:
    """Who started a delivery's runs, and the run metadata naming a GitHub event and delivery."""
    if p.event is None:
        return Creator.for_definition("webhook", p.webhook.uid, p.webhook.name), None
    creator = Creator("service_account", p.webhook.uid, p.webhook.name)
    return creator, {"github_event": p.event, "github_delivery": p.delivery_id}


def _prompt(p: Pending, automation_prompt: str) -> str:
    if p.event is None:
        hook = p.webhook
        return run_prompt(
            automation_prompt, webhook_name=hook.name, webhook_uid=hook.uid, delivery_id=p.delivery_id
        )
    text = github_envelope(event=p.event, connection_uid=p.webhook.uid, delivery_id=p.delivery_id)
    return with_envelope(automation_prompt, text)


async def record(
    session: AsyncSession,
    clock: Clock,
    webhook: lookup.WebhookRow,
    *,
    delivery_id: str,
    status: str,
    size: int,
    detail: str | None = None,
) -> None:
    """Log a rejected delivery (metadata only, never the payload) in its own short transaction."""
    async with session.begin():
        await session.execute(_record_statement(clock, webhook, delivery_id, status, size, detail))


def _record_statement(
    clock: Clock, webhook: lookup.WebhookRow, delivery_id: str, status: str, size: int, detail: str | None
) -> Any:
    return insert(_DELIVERIES).values(
        team_id=webhook.team_id,
        webhook_uid=webhook.uid,
        delivery_id=delivery_id,
        status=status,
        size=size,
        received_at=clock.now(),
        payload=None,
        detail=detail[:_DETAIL_MAX] if detail else None,
    )


class Writer:
    """Runs accept transactions in groups: deliveries that arrive together commit as one transaction.

    Requests queue their :class:`Pending` delivery and await a future; a committer task takes everything
    queued so far (up to ``max_batch``), commits it as one transaction and only then resolves the futures,
    so a 202 still means "committed" (docs/ingress.md, "Group commit"). If a batch fails, its deliveries
    are retried one by one, so one bad delivery cannot fail its neighbours.

    - SQLite has one write lock per database; concurrent write transactions would wait for it in SQLite's
      busy handler, which sleeps in growing steps (up to 100 ms) and wrecks tail latency. So one committer
      (``committers=1``) owns every ingress write, rejection log entries included. With ``direct`` (a
      file-backed database, :mod:`api.ingress.direct`) each batch is one call on the writer thread.
    - PostgreSQL takes concurrent writers, and a commit's cost is mostly its round trips and WAL flush, so
      several committers keep batches in flight while the next group gathers. A batch inserts its
      deliveries in (webhook, delivery ID) order, so two batches holding the same identities wait on each
      other in one order and never deadlock. Rejections are logged in their own short transactions.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Clock,
        filters: lookup.FilterCache,
        *,
        committers: int = 1,
        max_batch: int = 64,
        direct: DirectSqlite | None = None,
    ) -> None:
        if committers < 1:
            raise ValueError("committers must be at least 1")
        self._sessions, self._clock, self._filters = sessions, clock, filters
        self._committers, self._max_batch = committers, max_batch
        self._direct = direct
        self._serial = committers == 1  # one committer: rejections join the same queue of writes
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[tuple[Pending, asyncio.Future[Committed]] | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        # On SQLite, a worker's call waiting for the write lock goes before the next batch
        # (store/write_gate.py; docs/operations.md, "Fair sharing").
        self._gate = write_gate(sessions)

    async def accept(self, pending: Pending) -> Committed:
        future: asyncio.Future[Committed] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((pending, future))
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(), name=f"ingress-group-commit-{i}")
                for i in range(self._committers)
            ]
        return await future

    async def record(
        self,
        webhook: lookup.WebhookRow,
        *,
        delivery_id: str,
        status: str,
        size: int,
        detail: str | None = None,
    ) -> None:
        if self._direct is not None:
            statement = _record_statement(self._clock, webhook, delivery_id, status, size, detail)
            async with writing(self._gate):
                await self._direct.write(lambda conn: conn.execute(statement))
            return
        entry: dict[str, Any] = {"delivery_id": delivery_id, "status": status, "size": size, "detail": detail}
        if not self._serial:
            async with self._sessions() as session:
                await record(session, self._clock, webhook, **entry)
            return
        async with self._lock, writing(self._gate), self._sessions() as session:
            await record(session, self._clock, webhook, **entry)

    async def close(self) -> None:
        """Commit what is queued, then stop the committer tasks."""
        tasks, self._tasks = self._tasks, []
        for _ in tasks:
            self._queue.put_nowait(None)
        await asyncio.gather(*tasks)

    async def _run(self) -> None:
        while (item := await self._queue.get()) is not None:
            batch = [item]
            while len(batch) < self._max_batch and not self._queue.empty():
                following = self._queue.get_nowait()
                if following is None:  # closing: commit what was taken, then stop
                    await self._commit(batch)
                    return
                batch.append(following)
            await self._commit(batch)

    async def _accept(self, batch: list[Pending]) -> list[Committed]:
        if self._direct is not None:
            clock, filters = self._clock, self._filters
            async with writing(self._gate):
                return await self._direct.write(lambda conn: accept_in(conn, clock, batch, filters))
        if self._serial:
            async with self._lock, writing(self._gate), self._sessions() as session:
                return await accept(session, self._clock, batch, self._filters)
        async with self._sessions() as session:
            return await accept(session, self._clock, batch, self._filters)

    async def _commit(self, batch: list[tuple[Pending, asyncio.Future[Committed]]]) -> None:
        try:
            outcomes = await self._accept([p for p, _ in batch])
        except Exception as exc:
            if len(batch) > 1:
                for single in batch:
                    await self._commit([single])
            elif not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)
