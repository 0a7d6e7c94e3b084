"""The GitOps loop: follow a source and reconcile every snapshot it yields.

A snapshot that fails validation (or a revision the source could not read) leaves the last good state
live: the failure is logged with file:line diagnostics and recorded on the factory (Ready=False).

:func:`follow` is the loop's one error boundary (docs/reconcile.md, "The loop's health"): anything the
source or a reconcile raises — an unreachable repository, the database going away, a bug — is logged,
reported (``report``: recorded on the factory when one is known) and counted in :class:`LoopHealth`; the
loop then waits a capped, doubling backoff (a forced reconcile cuts it short) and iterates the source
again, which hands out the snapshot that was not finished. So no error stops the loop, and ``/readyz``
can tell a loop that keeps failing from one that works.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.service import ReconcileOutcome
from reconciler.sources import Snapshot

log = logging.getLogger("factoryctl.reconciler")

ReconcileFn = Callable[[Snapshot], Awaitable[ReconcileOutcome]]
ReportFn = Callable[[str], Awaitable[None]]
FAILURE_THRESHOLD = 3


class Source(Protocol):
    force: asyncio.Event

    def snapshots(self, stop: asyncio.Event) -> AsyncGenerator[Snapshot, None]: ...


@dataclass
class LoopHealth:
    """Whether the loop runs and makes progress; read by ``/readyz`` through the composition root.

    Unhealthy while the loop is not running, or after ``threshold`` consecutive failures of the source
    or of reconciling (a revision that fails *validation* is progress, not a failure of the loop).
    """

    threshold: int = FAILURE_THRESHOLD
    running: bool = False
    failures: int = 0
    last_error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.running and self.failures < self.threshold

    @property
    def reason(self) -> str:
        if not self.running:
            why = f": {self.last_error}" if self.last_error else ""
            return f"the reconciler loop is not running{why}"
        if self.failures:
            return f"{self.failures} consecutive reconciler failure(s); last: {self.last_error}"
        return ""

    def progressed(self) -> None:
        self.failures, self.last_error = 0, None

    def failed(self, error: str) -> None:
        self.failures += 1
        self.last_error = error


class _ReconcileRaised(Exception):
    """A reconcile raised (it has recorded the failure itself when it could)."""


def _log_outcome(snapshot: Snapshot, result: ReconcileOutcome) -> None:
    record: dict[str, object] = {
        "msg": "reconcile",
        "outcome": result.outcome,
        "factory": result.factory_name,
        "factory_uid": result.factory_uid,
        "revision": result.revision,
        "duration_ms": result.duration_ms,
        "forced": snapshot.forced,
    }
    if result.plan is not None and result.plan.has_changes:
        record["summary"] = result.plan.summary()
    if result.ok:
        log.info(json.dumps(record))
        return
    record["errors"] = [str(d) for d in result.diagnostics] or [result.error or "apply failed"]
    log.error(json.dumps(record))


def _describe(exc: Exception) -> str:
    """A reconcile's exception as ``repr`` (its type says most); a source's by its message."""
    if isinstance(exc, _ReconcileRaised) and exc.__cause__ is not None:
        return repr(exc.__cause__)[:500]
    return (str(exc).strip() or repr(exc))[:500]


async def follow(
    source: Source,
    reconcile: ReconcileFn,
    stop: asyncio.Event,
    *,
    on_result: Callable[[ReconcileOutcome], None] | None = None,
    report: ReportFn | None = None,
    health: LoopHealth | None = None,
    first_backoff: float = 0.5,
    max_backoff: float = 30.0,
) -> None:
    """Reconcile each snapshot until ``stop`` is set; never raises for a failure of the source or of a
    reconcile (see the module docstring). ``report`` is awaited with the error of each new source failure
    (not repeated while the same error persists)."""
    health = health if health is not None else LoopHealth()
    health.running = True
    delay, reported = first_backoff, None
    try:
        while not stop.is_set():
            try:
                async with contextlib.aclosing(source.snapshots(stop)) as snapshots:
                    async for snapshot in snapshots:
                        try:
                            result = await reconcile(snapshot)
                        except Exception as exc:
                            raise _ReconcileRaised(exc) from exc
                        _log_outcome(snapshot, result)
                        health.progressed()
                        delay, reported = first_backoff, None
                        if on_result is not None:
                            on_result(result)
                        if stop.is_set():
                            return
                if not stop.is_set():
                    raise RuntimeError("the definitions source stopped without being asked to")
            except Exception as exc:
                error = _describe(exc)
                health.failed(error)
                what = "reconcile error; retrying" if isinstance(exc, _ReconcileRaised) else "source error"
                log.error(json.dumps({"msg": what, "error": error, "retry_in": delay}))
                if report is not None and not isinstance(exc, _ReconcileRaised) and error != reported:
                    reported = error
                    try:
                        await report(error)
                    except Exception as failure:
                        log.error(
                            json.dumps({"msg": "cannot record the source error", "error": repr(failure)})
                        )
                await _pause(stop, source.force, delay)
                delay = min(delay * 2, max_backoff)
    finally:
        health.running = False


async def _pause(stop: asyncio.Event, force: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less if the loop is stopped or a reconcile is forced meanwhile. A force that
    is already pending is consumed: the next iteration reconciles the current state anyway, and a pending
    force must not turn the backoff into a busy loop."""
    force.clear()
    waits = {asyncio.create_task(stop.wait()), asyncio.create_task(force.wait())}
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
