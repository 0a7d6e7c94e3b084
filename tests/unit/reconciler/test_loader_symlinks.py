"""Symlinks never lead the loader out of the factory directory (docs/definitions.md, "How files are read").

A file whose real path is outside the root — through a symlinked file, a symlinked directory, or a chain
of both — is a diagnostic at its path that says so and shows nothing of the target: not its contents (a
``/etc/shadow`` line echoed as an "unknown key"), not even the names of the files in a symlinked
directory. Symlinks that stay inside the root keep working; a git snapshot follows none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from reconciler.diagnostics import Diagnostic
from reconciler.loadcache import LoadCache, fingerprint
from reconciler.loader import load

OUTSIDE = "symlink points outside the factory directory"
NOT_FOLLOWED = "symlink not followed: definitions from a git source are read from the commit's tree"
SECRET = "TOP-SECRET-LINE: do not print\nsecretName: s\n"
Tree = Callable[[dict[str, str | bytes]], Path]

Where = Callable[[Path, Iterable[Diagnostic]], list[tuple[str, int, int, str]]]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the factory holding a secret file, a YAML file and an automation."""
    place = tmp_path / "outside"
    (place / "triage").mkdir(parents=True)
    (place / "shadow").write_text(SECRET)
    (place / "private-name.yaml").write_text(SECRET)
    (place / "triage" / "automation.md").write_text("---\nTOP-SECRET-KEY: 1\n---\nTOP-SECRET prompt\n")
    (place / "automation.md").write_text("---\nTOP-SECRET-KEY: 1\n---\nTOP-SECRET prompt\n")
    return place


def shown(result: object) -> str:
    return repr(result)


def test_a_symlinked_file_outside_the_root_is_refused_without_its_contents(
    factory_tree: Tree, outside: Path, where: Where
) -> None:
    root = factory_tree({"webhooks/ok.yaml": "secretName: s\n"})
    os.symlink(outside / "shadow", root / "webhooks" / "x.yaml")
    result = load(root)
    assert where(root, result.diagnostics) == [("webhooks/x.yaml", 0, 0, "FC001")]
    assert result.diagnostics[0].message == OUTSIDE
    assert "TOP-SECRET" not in shown(result)
    assert result.definition is not None and [w.name for w in result.definition.webhooks] == ["ok"]


def test_a_symlinked_directory_outside_the_root_is_not_even_listed(
    factory_tree: Tree, outside: Path, where: Where
) -> None:
    root = factory_tree({})
    os.symlink(outside, root / "webhooks")
    os.symlink(outside, root / "environments")
    result = load(root)
    assert sorted(where(root, result.diagnostics)) == [
        ("environments", 0, 0, "FC001"),
        ("webhooks", 0, 0, "FC001"),
    ]
    assert {d.message for d in result.diagnostics} == {OUTSIDE}
    assert "TOP-SECRET" not in shown(result) and "private-name" not in shown(result)


def test_automations_and_factory_yaml_through_symlinks_outside(
    factory_tree: Tree, outside: Path, where: Where
) -> None:
    root = factory_tree({})
    (root / "automations").mkdir()
    os.symlink(outside / "triage", root / "automations" / "triage")
    os.symlink(outside, root / "automations" / "other")
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("automations/other/automation.md", 0, 0, "FC001"),
        ("automations/triage/automation.md", 0, 0, "FC001"),
    ]
    assert {d.message for d in result.diagnostics} == {OUTSIDE}
    assert "TOP-SECRET" not in shown(result)

    (root / "factory.yaml").unlink()
    os.symlink(outside / "shadow", root / "factory.yaml")
    result = load(root)
    assert result.definition is None
    assert next((d.path.rsplit("/", 1)[-1], d.message) for d in result.diagnostics) == (
        "factory.yaml",
        OUTSIDE,
    )
    assert "TOP-SECRET" not in shown(result)


def test_a_chain_that_leaves_the_root_through_an_inner_link_is_refused(
    factory_tree: Tree, outside: Path, where: Where
) -> None:
    root = factory_tree({})
    os.symlink(outside, root / "escape")  # a link the loader does not look at by itself
    (root / "webhooks").mkdir()
    os.symlink("../escape/shadow", root / "webhooks" / "x.yaml")
    result = load(root)
    assert where(root, result.diagnostics) == [("webhooks/x.yaml", 0, 0, "FC001")]
    assert result.diagnostics[0].message == OUTSIDE and "TOP-SECRET" not in shown(result)


def test_symlinks_that_stay_inside_the_root_keep_working(factory_tree: Tree) -> None:
    root = factory_tree({"shared/a.yaml": "secretName: s\ndescription: shared\n", "real-envs/e.yaml": "{}\n"})
    (root / "webhooks").mkdir()
    os.symlink("../shared/a.yaml", root / "webhooks" / "a.yaml")
    os.symlink("real-envs", root / "environments")
    result = load(root)
    assert result.ok and result.definition is not None, result.diagnostics
    assert [w.description for w in result.definition.webhooks] == ["shared"]
    assert [e.name for e in result.definition.environments] == ["e"]


def test_a_root_reached_through_a_symlink_is_its_real_path(factory_tree: Tree, tmp_path: Path) -> None:
    root = factory_tree({"webhooks/a.yaml": "secretName: s\n"})
    os.symlink(root, tmp_path / "alias")
    assert load(tmp_path / "alias").ok


def test_without_following_every_symlink_is_reported(factory_tree: Tree, where: Where) -> None:
    root = factory_tree({"shared/a.yaml": "secretName: s\n", "real-envs/e.yaml": "{}\n"})
    (root / "webhooks").mkdir()
    os.symlink("../shared/a.yaml", root / "webhooks" / "a.yaml")
    os.symlink("real-envs", root / "environments")
    result = load(root, follow_symlinks=False)
    assert sorted(where(root, result.diagnostics)) == [
        ("environments", 0, 0, "FC001"),
        ("webhooks/a.yaml", 0, 0, "FC001"),
    ]
    assert {d.message for d in result.diagnostics} == {NOT_FOLLOWED}


def test_the_cache_fingerprint_does_not_look_into_directories_outside(
    factory_tree: Tree, outside: Path
) -> None:
    root = factory_tree({})
    os.symlink(outside, root / "webhooks")
    before = fingerprint(root)
    (outside / "new.yaml").write_text("secretName: s\n")  # a change out there is none of our business
    assert fingerprint(root) == before
    assert [d.message for d in LoadCache(racy_ns=0).load(root).diagnostics] == [OUTSIDE]
    assert not any(str(outside) in stamp[0] for stamp in before or ())


def test_the_cache_sees_an_edit_of_a_symlinked_file_inside(factory_tree: Tree) -> None:
    root = factory_tree({"shared/a.yaml": "secretName: s\ndescription: one\n"})
    (root / "webhooks").mkdir()
    os.symlink("../shared/a.yaml", root / "webhooks" / "a.yaml")
    cache = LoadCache(racy_ns=0)

    def description() -> str | None:
        definition = cache.load(root).definition
        assert definition is not None
        return definition.webhooks[0].description

    assert description() == "one"
    (root / "shared" / "a.yaml").write_text("secretName: s\ndescription: two\n")
    assert description() == "two"
    assert cache.load(root, follow_symlinks=False).diagnostics[0].message == NOT_FOLLOWED
