"""CLI start-up: ``factoryctl --help`` and ``factoryctl validate example-factory`` vs ``python -c pass``.

Every command runs as a fresh subprocess, as a user or CI runs it: the venv's ``factoryctl`` console
script and the venv's ``python``. The rounds are interleaved (one of each command per round) so a
noisy neighbour slows every command alike, and the figure is the median of N runs. The baseline,
``python -c pass``, is measured in the same run: the ratio is what to compare across machines.

    .venv/bin/python bench/cli_startup.py [--runs N] [--venv DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS_MS = {"factoryctl --help": 150.0, "factoryctl validate example-factory": 300.0}


def commands(bin_dir: Path) -> dict[str, list[str]]:
    script = str(bin_dir / "factoryctl")
    return {
        "python -c pass": [str(bin_dir / "python"), "-c", "pass"],
        "factoryctl --help": [script, "--help"],
        "factoryctl validate example-factory": [script, "validate", "example-factory"],
    }


def clean_env() -> dict[str, str]:
    """No FACTORY_* settings (validate stays offline) and no colour: the figures measure start-up only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    env["NO_COLOR"] = "1"
    return env


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each command (default 30)")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv", help="venv holding factoryctl")
    args = parser.parse_args()
    cmds = commands(args.venv / "bin")
    env = clean_env()
    for argv in cmds.values():  # warm the page cache and .pyc files; not counted
        time_once(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, argv in cmds.items():
            samples[name].append(time_once(argv, env))
    print(f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"median of {args.runs} runs each, interleaved")
    base = statistics.median(samples["python -c pass"])
    print(f"{'command':<38} {'median':>9} {'min':>9} {'ratio':>7}  target")
    for name, values in samples.items():
        median = statistics.median(values)
        target = TARGETS_MS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"< {target:.0f} ms {'met' if median * 1000 < target else 'NOT met'}"
        fastest = min(values) * 1000
        print(f"{name:<38} {median * 1000:>6.1f} ms {fastest:>6.1f} ms {median / base:>6.1f}x  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
