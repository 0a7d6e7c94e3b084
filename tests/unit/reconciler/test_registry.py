"""The registry of definition kinds is the one list of kinds: every other list is derived from it or,
where a contract forbids the import (the typed client), checked against it here
(docs/architecture.md, "Adding a definition kind")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gitobjects import ObjectRepo as Repo

import schemas
from factoryctl.client import files
from reconciler import loadcache, registry
from reconciler.kinds.stores import STORES
from reconciler.plan import KIND_ORDER, UID_PREFIX
from reconciler.sources.git import GitSource
from reconciler.specs import FactoryDefinition


def one_file_per_kind() -> list[str]:
    """A factory's relative paths: ``factory.yaml`` and one file of every kind, as its pattern says."""
    rels = ["factory.yaml", *(kind.pattern.replace("<name>", "one") for kind in registry.KINDS)]
    for kind in registry.KINDS:  # the deeper places: an agent's own skill, a suite's task
        if kind.scoped_by:
            rels.append(f"{kind.scoped_by}/one/{kind.folder}/one/{kind.file}")
        if kind.children:
            rels.append(f"{kind.folder}/one/{kind.children}/one.yaml")
    return rels


def write_tree(root: Path) -> list[str]:
    rels = one_file_per_kind()
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("name: one\n")
    return rels


def test_the_client_collects_a_file_of_every_kind(tmp_path: Path) -> None:
    rels = write_tree(tmp_path)
    assert set(files.FOLDERS) == {kind.folder for kind in registry.KINDS if kind.file is None}
    assert files.NESTED == {folder: depth for folder, depth in registry.DEPTH.items() if depth}
    assert sorted(files.collect_files(tmp_path)) == sorted(rels)


def test_the_load_cache_stamps_a_file_of_every_kind(tmp_path: Path) -> None:
    rels = write_tree(tmp_path)
    stamps = loadcache.fingerprint(tmp_path)
    assert stamps is not None
    stamped = {Path(stamp[0]).relative_to(tmp_path).as_posix() for stamp in stamps}
    assert set(rels) <= stamped


def test_the_git_source_exports_a_file_of_every_kind(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "src")
    blob = repo.blob(b"name: one\n")

    def tree(paths: list[list[str]]) -> str:
        """The tree of ``paths`` (each split into components), merging shared directories."""
        below: dict[str, list[list[str]]] = {}
        entries = []
        for head, *rest in paths:
            if rest:
                below.setdefault(head, []).append(rest)
            else:
                entries.append(("100644", head, blob))
        entries += [("40000", name, tree(inner)) for name, inner in below.items()]
        return repo.tree(*sorted(entries, key=lambda e: e[1]))

    repo.commit(tree([rel.split("/") for rel in one_file_per_kind()]), "c")
    source = GitSource(str(repo.path), "main", tmp_path / "data")
    root = source.export(source.fetch())
    exported = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert exported == set(one_file_per_kind())


def test_every_kind_has_a_schema_a_definition_field_and_a_store_module() -> None:
    definition_fields = {f.name for f in dataclasses.fields(FactoryDefinition)}
    for kind in registry.KINDS:
        assert kind.schema in schemas.NAMES, kind.name
        assert kind.folder in definition_fields, kind.name
        assert hasattr(kind.spec, "from_markdown" if kind.markdown else "from_document"), kind.name
    assert set(STORES) == {kind.name for kind in registry.KINDS}
    assert all(store.kind is registry.BY_NAME[name] for name, store in STORES.items())


def test_prefixes_and_order_come_from_the_registry() -> None:
    kinds = (registry.FACTORY, *registry.KINDS)
    assert len({kind.prefix for kind in kinds}) == len(kinds)  # a UID names its kind
    assert UID_PREFIX == {kind.name: kind.prefix for kind in kinds}
    assert KIND_ORDER == tuple(kind.name for kind in sorted(kinds, key=lambda kind: kind.order))
    assert KIND_ORDER.index("webhook") < KIND_ORDER.index("automation")  # automations name webhooks
