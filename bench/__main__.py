"""``python -m bench``: list the benchmarks, or run one (``python -m bench ingress [args]``)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    names = sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))
    if len(sys.argv) < 2 or sys.argv[1] not in names:
        print("benchmarks (python -m bench NAME [args], or python bench/NAME.py --help):")
        for name in names:
            doc = (HERE / f"{name}.py").read_text().split('"""')[1].strip().splitlines()[0]
            print(f"  {name:<12} {doc}")
        print("results and machine details: docs/benchmarks.md")
        return 0
    name = sys.argv.pop(1)
    sys.argv[0] = str(HERE / f"{name}.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
