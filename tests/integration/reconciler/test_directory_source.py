"""The directory source (``serve --repo``, ``factoryctl watch``) against a real directory and real inotify."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reconciler.sources.local import DirectorySource

NEVER = 10.0  # seconds: a bound for "it never came", not a speed requirement


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "factory"
    root.mkdir()
    (root / "factory.yaml").write_text("name: demo\n")
    return root


async def test_an_edit_saved_while_the_first_snapshot_is_applied_is_yielded_next(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stop = asyncio.Event()
    snapshots = DirectorySource(root, debounce_ms=50, step_ms=10).snapshots(stop)
    first = await anext(snapshots)
    # The consumer is still "applying" the first snapshot when the file is saved.
    (root / "webhooks").mkdir()
    (root / "webhooks" / "alerts.yaml").write_text("secretName: alerts-token\n")
    second = await asyncio.wait_for(anext(snapshots), NEVER)
    assert (first.root, second.root) == (root, root)
    assert not second.forced
    stop.set()
    await snapshots.aclose()


async def test_edits_during_one_apply_coalesce_and_a_forced_reconcile_is_marked(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    stop = asyncio.Event()
    source = DirectorySource(root, debounce_ms=50, step_ms=10)
    snapshots = source.snapshots(stop)
    await anext(snapshots)
    for n in range(3):
        (root / f"README{n}.md").write_text("notes\n")
    await asyncio.wait_for(anext(snapshots), NEVER)  # one snapshot for the whole batch
    source.force.set()
    forced = await asyncio.wait_for(anext(snapshots), NEVER)
    assert forced.forced
    stop.set()
    await snapshots.aclose()
