"""bench/soak.py's verdicts: the slope that judges RSS, QUEUED and sizes, and each "Done when" target."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # bench/ is not installed: the repository's

from bench._soak_probe import Outcome, memory_lines, slope_per_min, verdicts


def _row(minute: float, rss: float, queued: int, picks: list[float], done: float) -> tuple[float, Any]:
    sample = {
        "rss_mb": rss, "queued": queued, "db_mb": 10.0, "wal_mb": 1.0, "worker_per_s": done, "pickup": picks,
    }  # fmt: skip
    return minute, sample


def test_slope_is_per_minute_and_zero_without_two_points() -> None:
    assert slope_per_min([(0, 100.0), (1, 101.0), (2, 102.0)]) == 1.0
    assert slope_per_min([(5, 3.0)]) == 0.0


def test_a_flat_run_meets_every_target_and_a_growing_one_does_not() -> None:
    flat = [_row(m, 130.0, 0, [0.1, 0.2], 1.0) for m in range(1, 11)]
    outcome = Outcome(idle_rate=3.0, run_arrivals=1.0, idle=(23, 9), after=(25, 10), errors=0, requests=100)
    assert all(ok for _, _, ok in verdicts(flat, outcome))

    growing = [_row(m, 130.0 + m, 100 * m, [2.0], 0.5) for m in range(1, 11)]
    leaky = Outcome(idle_rate=3.0, run_arrivals=1.0, idle=(23, 9), after=(60, 25), errors=3, requests=100)
    failed = {target for target, _, ok in verdicts(growing, leaky) if not ok}
    assert failed == {
        "0 errors",
        "RSS growth, last half < 0.2 MB/min",
        "fds back to idle ± 5",
        "QUEUED bounded (arrivals < idle rate)",
        "worker throughput under load ≥ 50% of idle",
        "delivery → run started p99 < 1 s",
    }


def test_memory_lines_say_which_part_grew_over_the_last_half(tmp_path: Path) -> None:
    start = 1_000_000.0
    samples = [
        {
            "t": start + 30 * i,
            "py_blocks": 500_000,
            "sqlite": (10 + i) * 1024 * 1024,
            "malloc_used": 80 * 1024 * 1024,
        }
        for i in range(21)
    ]  # 10 minutes: SQLite grows 2 MB/min, the rest is flat
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    lines = memory_lines(tmp_path / "memory.jsonl", start, 10)
    assert lines[-1] == "  last half: py_blocks +0.000k/min, sqlite +2.000 MB/min, malloc_used +0.000 MB/min"
    assert lines[1].split()[:3] == ["0.0", "500.0", "10.0"]
    assert memory_lines(tmp_path / "absent.jsonl", start, 10) == [
        "memory: no samples (the serve hook did not load)"
    ]


def test_memory_lines_give_each_long_lived_process_its_own_block(tmp_path: Path) -> None:
    """serve and its workers' process both sample; a child that lived for two samples is left out."""
    start = 1_000_000.0
    samples = [
        {"t": start + 30 * i, "pid": pid, "py_blocks": 1000 * pid, "malloc_used": 0}
        for i in range(21)
        for pid in (100, 200)
    ] + [{"t": start + 30 * i, "pid": 300, "py_blocks": 1, "malloc_used": 0} for i in range(2)]
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    lines = memory_lines(tmp_path / "memory.jsonl", start, 10)
    assert [line for line in lines if line.startswith("process")] == ["process 100:", "process 200:"]
    assert lines[2].split()[:2] == ["0.0", "100.0"]
    assert lines[lines.index("process 200:") + 2].split()[:2] == ["0.0", "200.0"]
