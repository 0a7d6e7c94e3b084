"""The validation behind ``POST /api/v1/factory-files/validate``: uploaded files -> the answer.

``api`` may not import ``reconciler`` (docs/architecture.md), so the composition root builds the callable
here and hands it to the app under :data:`api.management.validate.VALIDATOR`::

    app[VALIDATOR] = make_validator(box)

The files are written to a private temporary directory (no symlink is followed) and go through what an
apply checks before it plans: the loader (schemas, YAML, front matter) and the cross-file rules for every
caller; for an authenticated caller (an :class:`~api.management.validate.OnlineScope`) the rules get the
store's webhook UIDs as hints and the online checks run too (secrets exist and fit their webhook,
referenced UIDs exist in the factory, names are not taken). Diagnostics name paths relative to the factory
root, so CI can annotate its own checkout; :mod:`.factory_files` shapes the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api.management.validate import OnlineScope, Validator
from factoryctl.serve import factory_files
from reconciler import loader, online, rules
from reconciler.apply import MANAGED_BY, read_state
from reconciler.diagnostics import Diagnostic
from reconciler.loader import LoadResult
from reconciler.report import FactoryReport
from store.crypto import SecretBox


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` under ``root``; a path that would leave it is refused (the API checks this too)."""
    for rel, data in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"unsafe path {rel!r}")
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _relative(diagnostic: Diagnostic, root: str) -> Diagnostic:
    """The diagnostic with the temporary root removed from its path and text."""

    def strip(text: str) -> str:
        return text.replace(root + "/", "").replace(root, ".")

    return dataclasses.replace(
        diagnostic,
        path=strip(diagnostic.path),
        message=strip(diagnostic.message),
        hint=strip(diagnostic.hint) if diagnostic.hint else None,
    )


async def online_diagnostics(
    session: AsyncSession, box: SecretBox, team_id: str, loaded: LoadResult
) -> list[Diagnostic]:
    """Rules and online checks of a loaded definition against this team's store (as an apply runs them)."""
    definition = loaded.definition
    if definition is None:
        return []
    state = await read_state(session, team_id, definition.factory.name)
    out: list[Diagnostic] = []
    if state.managed_by not in (None, MANAGED_BY):
        where = definition.factory.locations.get("name")
        out.append(
            Diagnostic(
                "FC020",
                f"factory name '{definition.factory.name}' belongs to a factory managed through the API;"
                " definition files cannot apply to it",
                where.path if where else f"{definition.root}/{definition.factory.path}",
                where.line if where else 0,
                where.column if where else 0,
                hint="choose another name in factory.yaml",
            )
        )
    names = {w.name for w in definition.webhooks}
    stored = state.objects("webhook")
    surviving = {obj.uid: name for name, obj in stored.items() if name in names}
    out += rules.check(definition, {name: obj.uid for name, obj in stored.items()})
    out += await online.check(session, box, team_id, definition, surviving)
    for env in definition.environments:
        owner = state.taken_environments.get(env.name)
        if owner is not None:
            out.append(
                Diagnostic(
                    "FC020", f"environment {env.name!r} already exists in this team ({owner})", env.path
                )
            )
    return out


async def validate_files(
    box: SecretBox, files: dict[str, bytes], scope: OnlineScope | None
) -> dict[str, Any]:
    """The endpoint's answer for ``files`` (path inside the factory -> bytes); with ``scope`` (an
    authenticated caller) the state-dependent checks run against that team's store too."""
    with tempfile.TemporaryDirectory(prefix="factory-validate-") as tmp:
        root = Path(tmp) / "factory"
        await asyncio.to_thread(_write_tree, root, files)
        loaded = await asyncio.to_thread(loader.load, root, follow_symlinks=False)
        if scope is not None:
            extra = await online_diagnostics(scope.session, box, scope.team_id, loaded)
        else:
            extra = rules.check(loaded.definition) if loaded.definition else []
    shown = root.as_posix()
    ordered = FactoryReport.from_load(loaded, extra).diagnostics  # in a local run's order
    found = [_relative(d, shown) for d in ordered]
    return factory_files.answer(files, loaded, found, online=scope is not None)


def make_validator(box: SecretBox) -> Validator:
    """The callable the app keeps under ``VALIDATOR``."""

    async def validate(files: dict[str, bytes], scope: OnlineScope | None) -> dict[str, Any]:
        return await validate_files(box, files, scope)

    return validate
