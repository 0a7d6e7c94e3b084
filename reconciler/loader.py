"""Load a factory directory into typed specs, collecting every problem of every file.

A file that cannot be read, parsed or schema-checked yields diagnostics (never a traceback) and is
left out of the definition; the other files still load, so one run reports everything. Files are
size-checked before they are read, decoded strictly as UTF-8, parsed with marks (see
:mod:`reconciler.yamlmarks`) and checked against ``schemas/*.schema.json``.

Paths: a spec's ``path`` is relative to the factory root (it is what the store records as the
definition path); diagnostics and ``Location``s use the root as the caller gave it joined with
that relative path, so CI annotations point at real files.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler import schema_errors
from reconciler.diagnostics import Diagnostic
from reconciler.specs import (
    AutomationSpec,
    EnvironmentSpec,
    FactoryDefinition,
    FactorySpec,
    Location,
    TriggerSpec,
    WebhookSpec,
    canonical_scheme,
)
from reconciler.yamlmarks import Marks, parse_yaml, path_str, split_front_matter

MAX_FILE_BYTES = 1024 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class LoadResult:
    """``definition`` holds every file that loaded cleanly; it is ``None`` when ``factory.yaml``
    itself did not. Callers that act on it (plan, apply) must first check :attr:`ok`."""

    definition: FactoryDefinition | None
    diagnostics: list[Diagnostic]
    files: int
    root: str = ""

    @property
    def ok(self) -> bool:
        return self.definition is not None and not any(d.severity == "error" for d in self.diagnostics)


@dataclass
class _Doc:
    data: dict[str, Any]
    marks: Marks
    display: str

    def locations(self) -> dict[str, Location]:
        places = {**self.marks.values, **self.marks.keys}
        return {path_str(p): Location(self.display, *pos) for p, pos in places.items()}


@dataclass
class _Loader:
    root: Path
    diagnostics: list[Diagnostic] = field(default_factory=list)
    contents: dict[str, bytes] = field(default_factory=dict)
    files: int = 0

    def display(self, rel: str) -> str:
        return (self.root / rel).as_posix()

    def error(self, rel: str, message: str, line: int = 0, column: int = 0, rule: str = "FC001") -> None:
        self.diagnostics.append(Diagnostic(rule, message, self.display(rel), line, column))

    def warn(self, rel: str, message: str) -> None:
        self.diagnostics.append(Diagnostic("FC001", message, self.display(rel), severity="warning"))

    def read(self, rel: str, *, missing: str = "file not found") -> str | None:
        """The file's text, or ``None`` after recording why it cannot be used."""
        self.files += 1
        full = self.root / rel
        try:
            info = full.stat()
            if not stat.S_ISREG(info.st_mode):
                self.error(rel, "not a regular file")
                return None
            if info.st_size > MAX_FILE_BYTES:
                self.error(rel, f"file is {info.st_size} bytes; the limit is {MAX_FILE_BYTES} bytes (1 MiB)")
                return None
            with full.open("rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            self.error(rel, "dangling symlink (its target does not exist)" if full.is_symlink() else missing)
            return None
        except OSError as exc:
            reason = (
                "symlink loop" if exc.errno == errno.ELOOP else f"cannot read file: {exc.strerror or exc}"
            )
            self.error(rel, reason)
            return None
        if len(data) > MAX_FILE_BYTES:
            self.error(rel, f"file is larger than {MAX_FILE_BYTES} bytes (1 MiB)")
            return None
        self.contents[rel] = data
        body = data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = body.count(b"\n", 0, exc.start) + 1
            column = exc.start - body.rfind(b"\n", 0, exc.start)
            byte = body[exc.start]
            self.error(rel, f"not valid UTF-8 (byte 0x{byte:02x}); save the file as UTF-8", line, column)
            return None

    def listdir(self, rel: str) -> list[os.DirEntry[str]]:
        """Entries of a sub-directory, sorted, skipping dot files (editor locks, swap files)."""
        full = self.root / rel
        if not full.exists() and not full.is_symlink():
            return []
        try:
            with os.scandir(full) as entries:
                return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
        except NotADirectoryError:
            self.error(rel, f"'{rel}' must be a directory")
        except OSError as exc:
            self.error(
                rel, "symlink loop" if exc.errno == errno.ELOOP else f"cannot list directory: {exc.strerror}"
            )
        return []

    def document(
        self, rel: str, schema: str, text: str, *, line_offset: int = 0, empty_ok: bool = False
    ) -> _Doc | None:
        display = self.display(rel)
        parsed = parse_yaml(text, display, line_offset=line_offset)
        self.diagnostics.extend(parsed.diagnostics)
        data = parsed.data
        if data is None and not parsed.diagnostics and empty_ok:
            data = {}
        if data is None and parsed.diagnostics:
            return None
        if not isinstance(data, dict):
            what = "empty" if data is None else f"a {schema_errors.kind(data)}"
            self.error(
                rel,
                f"expected a mapping of keys, but the document is {what}",
                *parsed.marks.value(()),
                "FC003",
            )
            return None
        problems = schema_errors.check(schema, data, parsed.marks, display)
        self.diagnostics.extend(problems)
        return None if problems or not parsed.ok else _Doc(data, parsed.marks, display)

    def named(self, rel: str, name: str, what: str) -> bool:
        if NAME_RE.match(name):
            return True
        self.error(
            rel,
            f"{what} name '{name}' (from the file name) must use letters, digits, '.', '_' or '-'",
            rule="FC010",
        )
        return False

    def yaml_files(self, folder: str, what: str) -> Iterable[tuple[str, str]]:
        for entry in self.listdir(folder):
            rel = f"{folder}/{entry.name}"
            stem, suffix = os.path.splitext(entry.name)
            if suffix in YAML_SUFFIXES:
                if self.named(rel, stem, what):
                    yield rel, stem
            elif not entry.name.lower().endswith(".md") and not entry.is_dir():
                self.warn(rel, f"ignored: {what} definitions are {folder}/<name>.yaml")

    def factory(self) -> FactorySpec | None:
        text = self.read("factory.yaml")
        doc = None if text is None else self.document("factory.yaml", "factory", text)
        if doc is None:
            return None
        data = doc.data
        return FactorySpec(
            name=data["name"],
            path="factory.yaml",
            description=data.get("description"),
            worker_host=data.get("workerHost"),
            agents=data.get("agents", {}),
            locations=doc.locations(),
        )

    def webhooks(self) -> list[WebhookSpec]:
        out = []
        for rel, name in self.yaml_files("webhooks", "webhook"):
            text = self.read(rel)
            doc = None if text is None else self.document(rel, "webhook", text)
            if doc is None:
                continue
            data = doc.data
            scheme = data.get("signatureScheme")
            out.append(
                WebhookSpec(
                    name=name,
                    path=rel,
                    secret_name=data["secretName"],
                    auth_mode=data.get("authMode", "token"),
                    signature_scheme=canonical_scheme(scheme) if scheme else None,
                    delivery_id_header=data.get("deliveryIdHeader"),
                    enabled=data.get("enabled", True),
                    description=data.get("description"),
                    locations=doc.locations(),
                )
            )
        return out

    def automations(self) -> list[AutomationSpec]:
        out = []
        for entry in self.listdir("automations"):
            folder = f"automations/{entry.name}"
            if entry.is_file():
                if not entry.name.lower().startswith("readme"):
                    self.warn(
                        folder, "ignored: an automation is a directory, automations/<name>/automation.md"
                    )
                continue
            rel = f"{folder}/automation.md"
            text = self.read(rel, missing=f"{folder}/ has no automation.md")
            if text is None or not self.named(rel, entry.name, "automation"):
                continue
            spec = self.automation(rel, entry.name, text)
            if spec is not None:
                out.append(spec)
        return out

    def automation(self, rel: str, name: str, text: str) -> AutomationSpec | None:
        split = split_front_matter(text, self.display(rel))
        if isinstance(split, Diagnostic):
            self.diagnostics.append(split)
            return None
        front, offset, body, body_line = split
        doc = self.document(rel, "automation", front, line_offset=offset, empty_ok=True)
        if doc is None:
            return None
        data, prompt = doc.data, body.strip()
        config = data.get("config", {})
        if not prompt and not config.get("skill_spec"):
            message = "the automation has no prompt: write it as Markdown below the front matter"
            self.error(rel, message, body_line - 1, 1, "FC010")
            return None
        locations = doc.locations()
        locations["prompt"] = Location(doc.display, body_line, 1)
        triggers = tuple(
            TriggerSpec(
                provider=t["provider"],
                event=t["event"],
                webhook_ids=tuple(t["filter"]["webhook_ids"]),
                payload_filter=t["filter"].get("payload"),
                location=locations.get(f"triggers[{i}]"),
            )
            for i, t in enumerate(data.get("triggers", []))
        )
        return AutomationSpec(
            name=name,
            path=rel,
            prompt=prompt,
            enabled=data.get("enabled", True),
            agent=data.get("agent", "foreman"),
            title=data.get("title"),
            config=config,
            triggers=triggers,
            locations=locations,
        )

    def environments(self) -> list[EnvironmentSpec]:
        out = []
        for rel, name in self.yaml_files("environments", "environment"):
            text = self.read(rel)
            doc = None if text is None else self.document(rel, "environment", text, empty_ok=True)
            if doc is not None:
                out.append(EnvironmentSpec(name=name, path=rel, spec=doc.data, locations=doc.locations()))
        return out

    def digest(self) -> str:
        sha = hashlib.sha256()
        for rel in sorted(self.contents):
            data = self.contents[rel]
            sha.update(rel.encode("utf-8") + b"\0" + len(data).to_bytes(8, "big"))
            sha.update(data)
        return sha.hexdigest()


def load(root: Path) -> LoadResult:
    """Load the factory directory ``root`` (``factory.yaml``, ``webhooks/``, ``automations/``,
    ``environments/``). Never raises for bad input: every problem is a diagnostic."""
    loader = _Loader(root)
    shown = root.as_posix()
    if not root.is_dir():
        why = "is not a directory" if root.exists() else "does not exist"
        return LoadResult(None, [Diagnostic("FC001", f"factory directory '{shown}' {why}", shown)], 0, shown)
    if not (root / "factory.yaml").exists() and not (root / "factory.yaml").is_symlink():
        hint = "rename factory.yml to factory.yaml" if (root / "factory.yml").exists() else None
        message = f"'{shown}' is not a factory: factory.yaml not found"
        return LoadResult(
            None, [Diagnostic("FC001", message, loader.display("factory.yaml"), hint=hint)], 0, shown
        )
    factory = loader.factory()
    webhooks, automations, environments = loader.webhooks(), loader.automations(), loader.environments()
    definition = None
    if factory is not None:
        definition = FactoryDefinition(
            root=shown,
            factory=factory,
            webhooks=tuple(webhooks),
            automations=tuple(automations),
            environments=tuple(environments),
            content_digest=loader.digest(),
        )
    return LoadResult(definition, loader.diagnostics, loader.files, shown)


def load_many(paths: Iterable[Path]) -> list[LoadResult]:
    """:func:`load` for each path, in order."""
    return [load(path) for path in paths]
