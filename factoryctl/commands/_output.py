"""Text output shared by the HTTP commands: one table layout and one ``key: value`` layout.

``rich`` is imported only when a table is printed on a terminal, so ``factoryctl --help`` and piped
output never pay for it (docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def print_json(data: Any) -> None:
    """A JSON answer on stdout, indented (``--format json`` of every HTTP verb)."""
    print(json.dumps(data, indent=2))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Rows under headers: a rich table on a terminal, plain aligned columns otherwise."""
    if sys.stdout.isatty():
        from rich import box
        from rich.console import Console
        from rich.table import Table

        shown = Table(*headers, box=box.SIMPLE_HEAD, header_style="bold")
        for row in rows:
            shown.add_row(*row)
        Console().print(shown)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    for line in (headers, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=False)) + "  " + line[-1])


def fields(pairs: Sequence[tuple[str, object]]) -> None:
    """``key: value`` lines, aligned; empty values are left out."""
    width = max(len(k) for k, _ in pairs) + 1
    for key, value in pairs:
        if value is not None and value != "":
            print(f"{key + ':':<{width}} {value}")
