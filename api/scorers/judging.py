"""The scorers' job: judge runs of the agents a scorer names when they finish, record the judges' answers.

docs/scorers.md. Like the notification fan-out (:mod:`api.notifications.fanout`), a turn reads the run
event log in commit order (:func:`api.runs.events.read_ordered`) from a stored position (the
``notification_cursor`` row named :data:`CURSOR`; a fresh cursor starts at the newest event, so a new
server judges what finishes from then on, not its history), takes its turn by moving that position with a
compare-and-set, and only then writes. It looks at terminal ``state`` events only:

- a run that ended ``SUCCEEDED`` or ``FAILED``, runs as a factory agent and is not itself a judge run
  (source ``RUN_SCORER``) gets, for each scorer of its factory that names its agent and samples it
  (:func:`api.scorers.verdicts.sampled`), a ``run_scores`` row inserted ON CONFLICT DO NOTHING and, only
  when this turn inserted it, a judge run: so a run is judged once per scorer even when two replicas,
  or a cursor that went back, see its finish twice;
- a judge run that ended records its answer (:func:`api.scorers.verdicts.judgement`) on its row, in the
  judged run's ``scores`` and as a ``score`` event in the judged run's stream, which the notification
  fan-out also reads (a ``run.scored`` message, :mod:`api.notifications.scores`).

Every write of a turn is in one transaction with the cursor's move: a turn that fails leaves nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.runs import events
from api.runs.config import worker_host_of
from api.runs.event_cursors import advance_cursor, read_cursor
from api.runs.new_run import Creator, NewRun
from api.runs.records import TITLE_MAX, create_run, get_run
from api.scorers.verdicts import Judgement, Scorer, judge_prompt, judgement, sampled, transcript_lines
from store.clock import Clock, ManualClock
from store.models import Factory, FactoryObject, Run, RunEvent, RunScore
from store.rules.vocabulary import RunSource, RunState

CURSOR: Final = "scorers"
SCORE: Final = "score"  # the judged run's event kind (docs/events.md)
JUDGED_STATES: Final = frozenset({RunState.SUCCEEDED.value, RunState.FAILED.value})
JUDGE_ENDS: Final = frozenset(
    s.value for s in (RunState.SUCCEEDED, RunState.FAILED, RunState.ERROR, RunState.CANCELLED)
)
DEFAULT_HARNESS: Final = "oz"  # the worker's default harness (docs/workers.md, "Harnesses")
MAX_TRANSCRIPT_EVENTS: Final = 400  # the judged run's newest output events read for the judge's prompt
_OUTPUT_KINDS: Final = ("message", "tool_call", "tool_result", "log")


@dataclass
class Turn:
    """What one turn did: the judge runs it started and the judgements it recorded."""

    started: list[str] = field(default_factory=list)
    recorded: list[Judgement] = field(default_factory=list)


def _insert(session: AsyncSession, table: Any) -> Any:
    return (sqlite.insert if session.get_bind().dialect.name == "sqlite" else postgresql.insert)(table)


async def _scorers(session: AsyncSession, factory_uid: str) -> list[Scorer]:
    stmt = select(FactoryObject.uid, FactoryObject.name, FactoryObject.spec).where(
        FactoryObject.factory_uid == factory_uid, FactoryObject.kind == "scorer"
    )
    return [
        Scorer.of(uid, name, spec or {})
        for uid, name, spec in await session.execute(stmt.order_by(FactoryObject.name))
    ]


async def _judge_config(session: AsyncSession, factory_uid: str, model: str | None) -> dict[str, Any]:
    """The judge run's config: the scorer's model, the harness (type and auth) of the factory's foreman
    (else the worker's default), the factory's worker host."""
    agents = select(FactoryObject.spec).where(
        FactoryObject.factory_uid == factory_uid, FactoryObject.kind == "agent"
    )
    harness: dict[str, Any] = {"type": DEFAULT_HARNESS}
    for spec in await session.scalars(agents.order_by(FactoryObject.name)):
        if (spec or {}).get("agent_type") == "FOREMAN":
            found = ((spec.get("config") or {}).get("harness")) or {}
            if isinstance(found, Mapping) and found.get("type"):
                harness = {k: found[k] for k in ("type", "auth") if found.get(k) is not None}
            break
    config: dict[str, Any] = {"harness": harness}
    if model:
        config["model_id"] = model
        harness["model_id"] = model
    host = await session.scalar(select(Factory.worker_host).where(Factory.uid == factory_uid))
    if worker_host_of(host):
        config["worker_host"] = host
    return config


async def _output(session: AsyncSession, run_id: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The run's newest output events (bounded), oldest first."""
    stmt = (
        select(RunEvent.kind, RunEvent.data)
        .where(RunEvent.run_id == run_id, RunEvent.kind.in_(_OUTPUT_KINDS))
        .order_by(RunEvent.id.desc())
        .limit(MAX_TRANSCRIPT_EVENTS)
    )
    return [(kind, data or {}) for kind, data in reversed((await session.execute(stmt)).all())]


def _status_text(status: Mapping[str, Any] | None) -> str | None:
    return str(status.get("message")) if status and status.get("message") else None


async def _start_judges(session: AsyncSession, now: dt.datetime, run: Run, state: str, turn: Turn) -> None:
    if run.factory_uid is None or run.agent is None:
        return
    chosen = [
        s
        for s in await _scorers(session, run.factory_uid)
        if run.agent in s.agents and sampled(run.run_id, s.uid, s.sampling_rate)
    ]
    transcript: list[str] | None = None
    for scorer in chosen:
        claimed = await session.execute(
            _insert(session, RunScore)
            .values(run_id=run.run_id, scorer_uid=scorer.uid, scorer=scorer.name[:300], created_at=now)
            .on_conflict_do_nothing(index_elements=[RunScore.run_id, RunScore.scorer_uid])
        )
        if not getattr(claimed, "rowcount", 0):
            continue  # judged already (another replica, an earlier turn)
        if transcript is None:
            transcript = transcript_lines(await _output(session, run.run_id))
        judge = await create_run(
            session,
            ManualClock(now),
            NewRun(
                team_id=run.team_id,
                prompt=judge_prompt(
                    scorer,
                    run_prompt=run.prompt,
                    state=state,
                    status_message=_status_text(run.status_message),
                    transcript=transcript,
                ),
                title=f"{scorer.name}: {run.title}"[:TITLE_MAX],
                agent_config=await _judge_config(session, run.factory_uid, scorer.model),
                source=RunSource.RUN_SCORER,
                creator=Creator.for_definition("scorer", scorer.uid, scorer.name),
                factory_uid=run.factory_uid,
                parent_run_id=run.run_id,
            ),
        )
        await session.execute(
            update(RunScore)
            .where(RunScore.run_id == run.run_id, RunScore.scorer_uid == scorer.uid)
            .values(judge_run_id=judge.run_id)
            .execution_options(synchronize_session=False)
        )
        turn.started.append(judge.run_id)


def answer_of(output: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
    """A judge's answer: its last assistant message, else (echo and command harnesses) its stdout."""
    for kind, data in reversed(output):
        if kind == "message" and data.get("role", "assistant") == "assistant":
            return str(data.get("text", ""))
    lines = [
        str(d.get("text", "")) for k, d in output if k == "log" and d.get("stream", "stdout") == "stdout"
    ]
    return "\n".join(lines) if lines else None


async def _record(session: AsyncSession, now: dt.datetime, judge: Run, state: str, turn: Turn) -> None:
    row = await session.scalar(
        select(RunScore).where(RunScore.judge_run_id == judge.run_id, RunScore.recorded_at.is_(None))
    )
    if row is None:
        return  # recorded already (a judge that was followed up), or not a scorer's judge
    spec = await session.scalar(select(FactoryObject.spec).where(FactoryObject.uid == row.scorer_uid))
    if spec is None:
        result = Judgement(row.scorer, judge.run_id, error="the scorer no longer exists")
    else:
        scorer = Scorer.of(row.scorer_uid, row.scorer, spec)
        result = judgement(scorer, judge.run_id, answer_of(await _output(session, judge.run_id)), state)
    row.label, row.score, row.passed = result.label, result.score, result.passed
    row.error, row.recorded_at = result.error, now
    judged = await get_run(session, judge.team_id, row.run_id, for_update=True)  # events in id order
    judged.scores = [*(judged.scores or []), result.as_json()]
    events.add_event(judged, SCORE, result.as_json(), now)
    turn.recorded.append(result)


async def judge_turn(session: AsyncSession, clock: Clock, *, batch: int = 1000, rounds: int = 5) -> Turn:
    """One turn in the caller's transaction (the caller commits): read the finishes past the cursor, and,
    if the cursor was still where this turn found it, move it and act on them."""
    turn = Turn()
    now = clock.now()
    start = await read_cursor(session, CURSOR, now)
    if start is None:
        return turn
    latest = await events.latest_position(session)
    if latest <= start:
        return turn  # nothing new: every idle turn of every replica ends here, after two reads
    if await session.scalar(select(FactoryObject.uid).where(FactoryObject.kind == "scorer").limit(1)) is None:
        await advance_cursor(
            session, CURSOR, start, latest, now
        )  # no scorer anywhere: skip what finished meanwhile
        return turn
    position, finishes = start, []
    for _ in range(rounds):
        rows = await events.read_ordered(session, position, batch)
        if not rows:
            break
        position = events.position_of(rows[-1])
        finishes += [
            (e.run_id, e.data["state"])
            for e in rows
            if e.kind == events.STATE and e.data.get("state") in JUDGE_ENDS
        ]
        if len(rows) < batch:
            break
    if position == start or not await advance_cursor(session, CURSOR, start, position, now):
        return turn
    runs = {
        r.run_id: r
        for r in await session.scalars(select(Run).where(Run.run_id.in_({r for r, _ in finishes})))
    }
    for run_id, state in finishes:
        run = runs.get(run_id)
        if run is None:
            continue  # deleted since
        if run.source == RunSource.RUN_SCORER:
            await _record(session, now, run, state, turn)  # never judged itself
        elif state in JUDGED_STATES:
            await _start_judges(session, now, run, state, turn)
    return turn


async def judge_tick(
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    *,
    committed: Callable[[Turn], None] | None = None,
) -> Turn:
    """One turn in a transaction of its own; ``committed`` is called after a commit that did something."""
    async with sessions() as session, session.begin():
        turn = await judge_turn(session, clock)
    if committed is not None and (turn.started or turn.recorded):
        committed(turn)
    return turn


__all__ = ["CURSOR", "SCORE", "Turn", "answer_of", "judge_tick", "judge_turn"]
