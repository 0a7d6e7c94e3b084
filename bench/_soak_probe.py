"""What ``bench/soak.py`` samples and judges: the serve process, the store, the clients' latencies.

Kept apart from the load generator so that a sample is one function (:func:`take`) and a verdict is
computed from the table alone (:func:`verdicts`): the targets are issue 29's "Done when"
(docs/benchmarks.md, "Sustained load").
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import time
import tracemalloc
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from store.models import Delivery, NotificationAttempt, NotificationMessage, Run, RunEvent, RunLog

TERMINAL = ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")
TABLES = {
    "runs": Run,
    "run_events": RunEvent,
    "run_logs": RunLog,
    "deliveries": Delivery,
    "notification_messages": NotificationMessage,
    "notification_attempts": NotificationAttempt,
}
MB = 1024 * 1024


@dataclass
class Meter:
    """Client-side outcomes since the last sample, per request kind."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_errors: list[str] = field(default_factory=list)
    total_requests: int = 0
    total_errors: int = 0

    def ok(self, kind: str, seconds: float) -> None:
        self.latencies[kind].append(seconds)
        self.total_requests += 1

    def error(self, kind: str, what: str) -> None:
        self.errors[kind] += 1
        self.total_requests += 1
        self.total_errors += 1
        if len(self.first_errors) < 10:
            self.first_errors.append(f"{kind}: {what}")

    def drain(self) -> tuple[list[float], list[float], int]:
        """(ingress latencies, every request's latencies, errors) since the last call; resets them."""
        ingress = list(self.latencies.get("delivery", []))
        every = [v for values in self.latencies.values() for v in values]
        errors = sum(self.errors.values())
        self.latencies.clear()
        self.errors.clear()
        return ingress, every, errors


def serve_pids(pid: int) -> list[int]:
    """``pid`` and the children it started with ``serve --secondary`` (HTTP secondaries, the workers'
    process of ``--worker-process``): the serve group whose memory and descriptors the soak adds up."""
    pids = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--secondary" in argv:
                pids.append(child)
    return pids


def proc_stats(pid: int) -> tuple[float, int, int]:
    """RSS (MB), open descriptors and threads of ``pid`` and its serve children, from /proc."""
    rss_kb, fds, threads = 0, 0, 0
    for member in serve_pids(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss_kb += int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads += int(line.split()[1])
            fds += len(os.listdir(f"/proc/{member}/fd"))
        except OSError:  # a child that just exited
            continue
    return rss_kb / 1024, fds, threads


def fd_kinds(pid: int) -> dict[str, int]:
    """The open descriptors of ``pid`` and its serve children by what they point at: database files,
    sockets, pipes, the rest."""
    kinds: dict[str, int] = defaultdict(int)
    for member in serve_pids(pid):
        try:
            fds = os.listdir(f"/proc/{member}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{member}/fd/{fd}")
            except OSError:
                continue
            if ".db" in target:
                kinds["db/wal/shm files"] += 1
            elif target.startswith(("socket:", "pipe:", "anon_inode:")):
                kinds[target.split(":")[0]] += 1
            else:
                kinds["other"] += 1
    return dict(sorted(kinds.items()))


def tracemalloc_growth(directory: Path, minutes: float, top: int = 12) -> list[str]:
    """What grew between the snapshot a third into the run and the last one (``--tracemalloc``)."""
    snaps = sorted(directory.glob("*.snap"))
    if len(snaps) < 3:
        return [f"tracemalloc: {len(snaps)} snapshots, too few to compare"]
    first, last = snaps[len(snaps) // 3], snaps[-1]
    old, new = tracemalloc.Snapshot.load(str(first)), tracemalloc.Snapshot.load(str(last))
    total = sum(s.size for s in new.statistics("filename")) - sum(s.size for s in old.statistics("filename"))
    span = minutes * (len(snaps) - 1 - len(snaps) // 3) / max(1, len(snaps) - 1)
    lines = [f"tracemalloc {first.name} → {last.name} (~{span:.1f} min): traced {total / MB:+.2f} MB"]
    for stat in new.compare_to(old, "lineno")[:top]:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('site-packages/')[-1].split('/main/')[-1]}:{frame.lineno}"
        lines.append(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {where}")
    return lines


def memory_lines(path: Path, start: float, minutes: float) -> list[str]:
    """Where serve's memory went (``memory.jsonl`` of ``bench/_serve_hook``): every ~5 minutes of the load
    phase, then each part's growth per minute over the last half, beside RSS's; one block per long-lived
    process of serve (the primary, its workers' process), headed by its pid when there are several."""
    if not path.exists():
        return ["memory: no samples (the serve hook did not load)"]
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    counts = Counter(s.get("pid") for s in samples)
    most = max(counts.values(), default=0)
    # serve's processes, not a short-lived child that inherited the hook
    pids = sorted(pid for pid, n in counts.items() if n >= most / 2)
    lines: list[str] = []
    for pid in pids:
        mine = _memory_block([s for s in samples if s.get("pid") == pid], start, minutes)
        lines += ([f"process {pid}:"] if len(pids) > 1 else []) + mine
    return lines or ["memory: too few samples"]


def _memory_block(samples: list[dict[str, Any]], start: float, minutes: float) -> list[str]:
    rows = [(round((s["t"] - start) / 60, 1), s) for s in samples if 0 <= s["t"] - start <= minutes * 60 + 1]
    if len(rows) < 2:
        return ["memory: too few samples"]
    parts = ("py_blocks", "sqlite", "malloc_used", "malloc_free")
    scale = {"py_blocks": 1e3, "sqlite": MB, "malloc_used": MB, "malloc_free": MB}
    lines = ["  min  Python blocks (k)  SQLite MB  malloc in use MB  malloc held free MB"]
    step = max(1, len(rows) // 12)
    for minute, s in rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else []):
        cells = [f"{s[k] / scale[k]:.1f}" if k in s else "-" for k in parts]
        lines.append(f"{minute:5.1f} {cells[0]:>17} {cells[1]:>10} {cells[2]:>17} {cells[3]:>20}")
    half = rows[len(rows) // 2 :]
    unit = {"py_blocks": "k"}
    growth = [
        f"{k} {slope_per_min([(m, s[k] / scale[k]) for m, s in half]):+.3f}{unit.get(k, ' MB')}/min"
        for k in parts
        if k in half[0][1]
    ]
    lines.append("  last half: " + ", ".join(growth))
    return lines


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def store_stats(engine: AsyncEngine, since: dt.datetime) -> dict[str, Any]:
    """Run states, table rows, the notification backlog and delivery → started latencies since ``since``."""
    out: dict[str, Any] = {}
    async with engine.connect() as conn:
        states = dict((await conn.execute(select(Run.state, func.count()).group_by(Run.state))).all())
        out["queued"] = int(states.get("QUEUED", 0))
        out["active"] = sum(int(states.get(s, 0)) for s in ("PENDING", "CLAIMED", "INPROGRESS"))
        out["terminal"] = sum(int(states.get(s, 0)) for s in TERMINAL)
        out["rows"] = {
            name: int((await conn.execute(select(func.count()).select_from(model))).scalar_one())
            for name, model in TABLES.items()
        }
        # Counted by finish time, not as a difference of terminal runs: retention deletes those.
        finished = select(func.count()).select_from(Run).where(Run.finished_at >= since)
        out["finished"] = int((await conn.execute(finished)).scalar_one())
        pending = NotificationMessage.status == "pending"
        backlog = select(func.count()).select_from(NotificationMessage).where(pending)
        out["notify_backlog"] = int((await conn.execute(backlog)).scalar_one())
        started = select(Run.queued_at, Run.started_at).where(
            Run.started_at >= since, Run.webhook_uid.is_not(None)
        )
        out["pickup"] = [
            (s - q).total_seconds()
            for q, s in (await conn.execute(started)).all()
            if q is not None and s is not None
        ]
        if engine.dialect.name == "postgresql":
            size = await conn.execute(text("SELECT pg_database_size(current_database())"))
            out["db_mb"], out["wal_mb"] = int(size.scalar_one()) / MB, 0.0
    if engine.dialect.name == "sqlite":
        out["db_mb"], out["wal_mb"] = sqlite_sizes(Path(str(engine.url.database)))
    return out


def sqlite_sizes(path: Path) -> tuple[float, float]:
    """The database file's and its WAL's sizes in MB (the WAL is absent after a clean close)."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size / MB, wal.stat().st_size / MB if wal.exists() else 0.0


async def take(
    engine: AsyncEngine, pid: int, meter: Meter, since: dt.datetime, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """One row of the table: the process, the store, and what happened since ``previous``."""
    now = time.monotonic()
    rss, fds, threads = proc_stats(pid)
    stats = await store_stats(engine, since)
    ingress, every, errors = meter.drain()
    elapsed = now - previous["mono"] if previous else 0.0
    finished = stats["finished"] if previous else 0
    return {
        "mono": now,
        "rss_mb": rss,
        "fds": fds,
        "threads": threads,
        **stats,
        "errors": errors,
        "ingress_p50_ms": percentile(ingress, 0.5) * 1000,
        "ingress_p99_ms": percentile(ingress, 0.99) * 1000,
        "all_p99_ms": percentile(every, 0.99) * 1000,
        "requests": len(every) + errors,
        "worker_per_s": finished / elapsed if elapsed else float("nan"),
        "pickup_p99_s": percentile(stats["pickup"], 0.99),
    }


HEADER = (
    f"{'min':>5} {'RSS MB':>7} {'fds':>4} {'thr':>4} {'DB MB':>7} {'WAL MB':>7} {'runs':>8} "
    f"{'events':>8} {'QUEUED':>7} {'notify':>6} {'req':>6} {'err':>4} {'in p50':>7} {'in p99':>7} "
    f"{'all p99':>8} {'done/s':>7} {'pick p99':>8}"
)


def row_line(minute: float, r: dict[str, Any]) -> str:
    return (
        f"{minute:5.1f} {r['rss_mb']:7.1f} {r['fds']:4d} {r['threads']:4d} {r['db_mb']:7.1f} "
        f"{r['wal_mb']:7.1f} {r['rows']['runs']:8d} {r['rows']['run_events']:8d} {r['queued']:7d} "
        f"{r['notify_backlog']:6d} {r['requests']:6d} {r['errors']:4d} {r['ingress_p50_ms']:7.1f} "
        f"{r['ingress_p99_ms']:7.1f} {r['all_p99_ms']:8.1f} {r['worker_per_s']:7.1f} {r['pickup_p99_s']:8.2f}"
    )


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (minute, value) points, per minute; 0 with fewer than two points."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


@dataclass(frozen=True)
class Outcome:
    """What the soak measured outside the sample table."""

    idle_rate: float  # runs/s the workers finished with no other load
    run_arrivals: float  # runs/s the load asked for (deliveries that start runs + API runs)
    idle: tuple[int, int]  # fds, threads before the load
    after: tuple[int, int]  # fds, threads once the load stopped and the backlog drained
    errors: int
    requests: int


def verdicts(rows: list[tuple[float, dict[str, Any]]], outcome: Outcome) -> list[tuple[str, str, bool]]:
    """(target, measured, met) per "Done when" target of issue 29; ``rows`` are (minute, sample)."""
    half = rows[len(rows) // 2 :] if len(rows) > 2 else rows
    rss = slope_per_min([(m, r["rss_mb"]) for m, r in half])
    queued = slope_per_min([(m, r["queued"]) for m, r in half])
    db = slope_per_min([(m, r["db_mb"] + r["wal_mb"]) for m, r in half])
    wal_max = max((r["wal_mb"] for _, r in rows), default=0.0)
    loaded = [r["worker_per_s"] for _, r in rows[1:] if r["worker_per_s"] == r["worker_per_s"]]
    under_load = statistics.fmean(loaded) if loaded else 0.0
    picks = [p for _, r in rows for p in r["pickup"]]
    pick99 = percentile(picks, 0.99)
    keeps_up = queued < 1.0 and (half[-1][1]["queued"] if half else 0) < max(50, 10 * outcome.run_arrivals)
    share = under_load / outcome.idle_rate if outcome.idle_rate else 0.0
    fd_delta, thr_delta = outcome.after[0] - outcome.idle[0], outcome.after[1] - outcome.idle[1]
    return [
        ("0 errors", f"{outcome.errors} of {outcome.requests} requests", outcome.errors == 0),
        ("RSS growth, last half < 0.2 MB/min", f"{rss:+.2f} MB/min", rss < 0.2),
        (
            "fds back to idle ± 5",
            f"{outcome.idle[0]} → {outcome.after[0]} ({fd_delta:+d}); threads {outcome.idle[1]} → "
            f"{outcome.after[1]} ({thr_delta:+d})",
            abs(fd_delta) <= 5,
        ),
        (
            "QUEUED bounded (arrivals < idle rate)",
            f"arrivals {outcome.run_arrivals:.1f}/s vs idle {outcome.idle_rate:.1f}/s; QUEUED "
            f"{queued:+.1f}/min over the last half, {half[-1][1]['queued'] if half else 0} at the end",
            keeps_up or outcome.run_arrivals >= outcome.idle_rate,
        ),
        ("DB + WAL flat, last half", f"{db:+.2f} MB/min; WAL max {wal_max:.1f} MB", db < 0.1),
        (
            "worker throughput under load ≥ 50% of idle",
            f"{under_load:.1f}/s vs idle {outcome.idle_rate:.1f}/s ({share:.0%})"
            + (" - kept up with every arrival" if keeps_up else ""),
            share >= 0.5 or keeps_up,
        ),
        ("delivery → run started p99 < 1 s", f"{pick99:.2f} s over {len(picks)} runs", pick99 < 1.0),
    ]
