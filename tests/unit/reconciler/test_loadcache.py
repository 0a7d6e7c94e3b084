"""LoadCache: an unchanged directory is not parsed again; any edit, addition or removal is seen."""

from __future__ import annotations

import os
import time
from pathlib import Path

from reconciler import loader
from reconciler.loadcache import LoadCache


def make_tree(root: Path) -> Path:
    (root / "webhooks").mkdir(parents=True)
    (root / "automations" / "triage").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: acme\n")
    (root / "webhooks" / "a.yaml").write_text("secretName: s\ndescription: one\n")
    (root / "automations" / "triage" / "automation.md").write_text("---\ntitle: T\n---\nDo it.\n")
    return root


def counting_cache(**kw) -> tuple[LoadCache, list[Path]]:
    calls: list[Path] = []

    def load(root: Path) -> loader.LoadResult:
        calls.append(root)
        return loader.load(root)

    return LoadCache(load=load, **kw), calls


def test_unchanged_tree_is_served_from_the_cache(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "f")
    cache, calls = counting_cache(racy_ns=0)
    first = cache.load(root)
    assert cache.load(root) is first and len(calls) == 1 and (cache.hits, cache.misses) == (1, 1)
    assert first.definition is not None and first.definition.webhooks[0].description == "one"


def test_an_edit_of_the_same_size_is_seen(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "f")
    hook = root / "webhooks" / "a.yaml"
    os.utime(hook, (time.time() - 100, time.time() - 100))  # so the rewrite surely gets another mtime
    cache, calls = counting_cache(racy_ns=0)
    cache.load(root)
    hook.write_text("secretName: s\ndescription: two\n")
    result = cache.load(root)
    assert len(calls) == 2 and result.definition.webhooks[0].description == "two"


def test_added_and_removed_files_are_seen(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "f")
    cache, calls = counting_cache(racy_ns=0)
    cache.load(root)
    (root / "webhooks" / "b.yaml").write_text("secretName: s\n")
    assert [w.name for w in cache.load(root).definition.webhooks] == ["a", "b"]
    (root / "automations" / "triage" / "automation.md").unlink()
    (root / "automations" / "triage").rmdir()
    assert cache.load(root).definition.automations == ()
    assert len(calls) == 3


def test_a_tree_edited_within_the_racy_window_is_loaded_again(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "f")
    cache, calls = counting_cache()  # default window: files younger than 2 s are not trusted
    cache.load(root)
    cache.load(root)
    assert len(calls) == 2


def test_missing_directory_is_not_cached(tmp_path: Path) -> None:
    cache, calls = counting_cache(racy_ns=0)
    assert cache.load(tmp_path / "nope").definition is None
    make_tree(tmp_path / "nope")
    assert cache.load(tmp_path / "nope").definition is not None
    assert len(calls) == 2
