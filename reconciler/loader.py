"""Load a factory directory into typed specs, collecting every problem of every file.

A file that cannot be read, parsed or schema-checked yields diagnostics (never a traceback) and is
left out of the definition; the other files still load, so one run reports everything. Files are
size-checked before they are read, decoded strictly as UTF-8, parsed with marks (see
:mod:`reconciler.yamlmarks`) and checked against ``schemas/*.schema.json``.

Files are read by one reader (:meth:`_Loader.read`): nothing whose real path lies outside the
factory root's real path is ever opened or listed, whatever symlinks (of files or of directories)
lead there; such a file is a diagnostic that says so and shows nothing of the target.

Paths: a spec's ``path`` is relative to the factory root (it is what the store records as the
definition path); diagnostics and ``Location``s use the root as the caller gave it joined with
that relative path, so CI annotations point at real files.
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler import execution, schema_errors
from reconciler.diagnostics import Diagnostic
from reconciler.objectspecs import AgentSpec, resolve_agents
from reconciler.registry import KINDS, Kind
from reconciler.specs import AutomationSpec, FactoryDefinition, FactorySpec, Location, ScheduleSpec
from reconciler.yamlmarks import Marks, parse_yaml, path_str, split_front_matter
from store.rules import cron

MAX_FILE_BYTES = 1024 * 1024
OUTSIDE = "symlink points outside the factory directory"
NOT_FOLLOWED = "symlink not followed: definitions from a git source are read from the commit's tree"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
YAML_SUFFIXES = (".yaml", ".yml")
DEFAULT_AGENT = "foreman"  # a legacy tree's foreman, present even when factory.yaml lists no agents
# The v1alpha1 keys of factory.yaml kept as written (FactorySpec.settings).
SETTINGS = (
    "schemaVersion",
    "credentialStrategy",
    "secrets",
    "mcpServers",
    "cloudProviders",
    "integrations",
    "agentDefaults",
)


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


@dataclass(frozen=True)
class _Entry:
    """A directory entry: ``kind`` is ``file``, ``dir``, ``other`` or ``link`` (a symlink not followed)."""

    name: str
    kind: str


class Refused(Exception):
    """A path the reader will not open; ``message`` says why without naming what lies beyond it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Confined:
    """A factory root and whether symlinks inside it are followed: decides which paths may be opened.

    Shared by the loader and :mod:`reconciler.loadcache`, so what is fingerprinted is what is read.
    """

    def __init__(self, root: Path, follow_symlinks: bool = True) -> None:
        self.root = root
        self.follow_symlinks = follow_symlinks
        self.real_root = os.path.realpath(root)

    def locate(self, rel: str) -> str:
        """The real path of ``root/rel``, which is inside the root's real path; raises :class:`Refused`
        (symlink not followed, pointing outside, dangling or looping) or ``FileNotFoundError``."""
        full = os.path.join(self.root, rel)
        if not self.follow_symlinks:
            path = str(self.root)
            for part in rel.split("/"):
                path = os.path.join(path, part)
                if os.path.islink(path):
                    raise Refused(NOT_FOLLOWED)
        try:
            os.stat(full)  # metadata only: nothing outside the root is ever opened
        except FileNotFoundError:
            if os.path.islink(full):
                raise Refused("dangling symlink (its target does not exist)") from None
            if not self.inside(os.path.realpath(full)):
                raise Refused(OUTSIDE) from None
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused("symlink loop") from None
            raise
        real = os.path.realpath(full)
        if not self.inside(real):
            raise Refused(OUTSIDE)
        return real

    def inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root.rstrip(os.sep) + os.sep)


def _os_problem(exc: OSError, what: str) -> str:
    if exc.errno == errno.ELOOP:  # the walk met a symlink that was not there when the path was resolved
        return "a symlink appeared while the file was read; it is not followed"
    return f"{what}: {exc.strerror or exc}"


def open_beneath(real_root: str, real: str, *, directory: bool = False) -> int:
    """Open ``real`` (a real path inside ``real_root``) one component at a time from the root, never
    following a symlink (``O_NOFOLLOW``): a path changed into a symlink after it was resolved fails."""
    relative = os.path.relpath(real, real_root)
    parts = [] if relative == "." else relative.split(os.sep)
    fd = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            kind = os.O_DIRECTORY if directory or not last else os.O_NONBLOCK  # a FIFO never blocks us
            inner = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | kind, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class _Loader:
    root: Path
    follow_symlinks: bool = True
    diagnostics: list[Diagnostic] = field(default_factory=list)
    contents: dict[str, bytes] = field(default_factory=dict)
    files: int = 0
    confined: Confined = field(init=False)

    def __post_init__(self) -> None:
        self.confined = Confined(self.root, self.follow_symlinks)

    @property
    def real_root(self) -> str:
        return self.confined.real_root

    def display(self, rel: str) -> str:
        return (self.root / rel).as_posix()

    def error(self, rel: str, message: str, line: int = 0, column: int = 0, rule: str = "FC001") -> None:
        self.diagnostics.append(Diagnostic(rule, message, self.display(rel), line, column))

    def warn(self, rel: str, message: str) -> None:
        self.diagnostics.append(Diagnostic("FC001", message, self.display(rel), severity="warning"))

    def locate(self, rel: str) -> str:
        return self.confined.locate(rel)

    def inside(self, real: str) -> bool:
        return self.confined.inside(real)

    def read(self, rel: str, *, missing: str = "file not found") -> str | None:
        """The file's text, or ``None`` after recording why it cannot be used.

        The one reader of definition files (docs/definitions.md, "How files are read"): the file is
        opened only when its real path lies inside the root's, component by component without following
        symlinks (a symlink swapped in meanwhile fails the open), so no byte of any other file is read.
        """
        self.files += 1
        try:
            real = self.locate(rel)
            info = os.lstat(real)
            if not stat.S_ISREG(info.st_mode):
                self.error(rel, "not a regular file")
                return None
            if info.st_size > MAX_FILE_BYTES:
                self.error(rel, f"file is {info.st_size} bytes; the limit is {MAX_FILE_BYTES} bytes (1 MiB)")
                return None
            with os.fdopen(open_beneath(self.real_root, real), "rb") as handle:
                opened = os.fstat(handle.fileno())
                if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                    self.error(rel, "the file was replaced while it was read; read it again")
                    return None
                data = handle.read(MAX_FILE_BYTES + 1)
        except Refused as exc:
            self.error(rel, exc.message)
            return None
        except FileNotFoundError:
            self.error(rel, missing)
            return None
        except OSError as exc:
            self.error(rel, _os_problem(exc, "cannot read file"))
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

    def listdir(self, rel: str) -> list[_Entry]:
        """Entries of a sub-directory, sorted, skipping dot files (editor locks, swap files).

        Listed only when the directory's real path is inside the root (names are information too).
        """
        if not os.path.lexists(os.path.join(self.root, rel)):
            return []
        try:
            real = self.locate(rel)
            if not os.path.isdir(real):
                self.error(rel, f"'{rel}' must be a directory")
                return []
            fd = open_beneath(self.real_root, real, directory=True)
            try:
                names = sorted(n for n in os.listdir(fd) if not n.startswith("."))
                return [self.entry(fd, real, name) for name in names]
            finally:
                os.close(fd)
        except Refused as exc:
            self.error(rel, exc.message)
        except FileNotFoundError:
            pass  # removed while we looked: as if it never was
        except OSError as exc:
            self.error(rel, _os_problem(exc, "cannot list directory"))
        return []

    def entry(self, dir_fd: int, real_dir: str, name: str) -> _Entry:
        """What ``name`` in the open directory is; a symlink is looked through only when it may be
        followed and its target is inside the root (``link`` otherwise: reading it reports why)."""
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            target = os.path.realpath(os.path.join(real_dir, name))
            if not self.follow_symlinks or not self.inside(target):
                return _Entry(name, "link")
            try:
                info = os.stat(target)
            except OSError:
                return _Entry(name, "link")
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"
        return _Entry(name, kind)

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
            elif not entry.name.lower().endswith(".md") and entry.kind != "dir":
                self.warn(rel, f"ignored: {what} definitions are {folder}/<name>.yaml")

    def factory(self) -> FactorySpec | None:
        text = self.read("factory.yaml")
        doc = None if text is None else self.document("factory.yaml", "factory", text)
        if doc is None:
            return None
        data = doc.data
        settings = {key: data[key] for key in SETTINGS if key in data}
        repositories = tuple((r["owner"], r["name"]) for r in data.get("repositories", ()))
        return FactorySpec(
            name=data["name"],
            path="factory.yaml",
            description=data.get("description"),
            worker_host=data.get("workerHost"),
            agents=data.get("agents", {}),
            alias=data.get("alias"),
            repositories=repositories,
            settings=settings,
            locations=doc.locations(),
        )

    def kind(self, kind: Kind) -> list[Any]:
        """Every spec of ``kind`` that loads cleanly, its files found by the kind's pattern."""
        if not kind.file:
            return self.yaml_specs(kind)
        out = self.nested_specs(kind, kind.folder)
        if kind.scoped_by:  # agents/<agent>/skills/<name>/SKILL.md, named <agent>/<name>
            for entry in self.listdir(kind.scoped_by):
                if entry.kind == "dir":
                    scope = f"{kind.scoped_by}/{entry.name}"
                    out += self.nested_specs(kind, f"{scope}/{kind.folder}", prefix=f"{entry.name}/")
        return out

    def yaml_specs(self, kind: Kind) -> list[Any]:
        """Specs of ``<folder>/<name>.yaml`` files."""
        out = []
        for rel, name in self.yaml_files(kind.folder, kind.name):
            text = self.read(rel)
            doc = None if text is None else self.document(rel, kind.schema, text, empty_ok=kind.empty_ok)
            if doc is not None:
                # The rules judge these values (FC070-FC072, FC080): point at the value, where the fix goes.
                values = {
                    k: Location(doc.display, *doc.marks.value((k,))) for k in kind.values if k in doc.data
                }
                out.append(kind.spec.from_document(name, rel, doc.data, doc.locations() | values))
        return out

    def nested_specs(self, kind: Kind, folder: str, prefix: str = "") -> list[Any]:
        """Specs of ``<folder>/<name>/<file>`` files: Markdown whose front matter is the document, or a
        YAML document (with its ``children`` documents)."""
        out = []
        for entry in self.listdir(folder):
            where = f"{folder}/{entry.name}"
            if entry.kind == "file":
                if not entry.name.lower().startswith("readme") and not prefix:
                    article = "an" if kind.name[0] in "aeiou" else "a"
                    self.warn(where, f"ignored: {article} {kind.name} is a directory, {kind.pattern}")
                continue
            rel = f"{where}/{kind.file}"
            text = self.read(rel, missing=f"{where}/ has no {kind.file}")
            if text is None or not self.named(rel, entry.name, kind.name):
                continue
            name = prefix + entry.name
            spec = (
                self.markdown(kind, rel, name, text) if kind.markdown else self.suite(kind, rel, name, text)
            )
            if spec is not None:
                out.append(spec)
        return out

    def suite(self, kind: Kind, rel: str, name: str, text: str) -> Any:
        """A YAML object file with its ``children`` documents (a benchmark suite and its tasks)."""
        doc = self.document(rel, kind.schema, text)
        if doc is None:
            return None
        children: dict[str, Any] = {}
        if kind.children and kind.child_schema:
            folder = f"{rel.rsplit('/', 1)[0]}/{kind.children}"
            for child_rel, slug in self.yaml_files(folder, f"{kind.name} {kind.children[:-1]}"):
                child_text = self.read(child_rel)
                child = (
                    None if child_text is None else self.document(child_rel, kind.child_schema, child_text)
                )
                if child is not None:
                    children[slug] = child.data
        return kind.spec.from_document(name, rel, doc.data, doc.locations(), children=children)

    def markdown(self, kind: Kind, rel: str, name: str, text: str) -> Any:
        split = split_front_matter(text, self.display(rel))
        if isinstance(split, Diagnostic):
            self.diagnostics.append(split)
            return None
        front, offset, body, body_line = split
        doc = self.document(rel, kind.schema, front, line_offset=offset, empty_ok=True)
        if doc is None:
            return None
        body_at = Location(doc.display, body_line, 1)
        spec = kind.spec.from_markdown(name, rel, doc.data, doc.locations(), body, body_at)
        if isinstance(spec, str):  # what the body lacks
            self.error(rel, spec, body_line - 1, 1, "FC010")
            return None
        return spec

    def digest(self) -> str:
        sha = hashlib.sha256()
        for rel in sorted(self.contents):
            data = self.contents[rel]
            sha.update(rel.encode("utf-8") + b"\0" + len(data).to_bytes(8, "big"))
            sha.update(data)
        return sha.hexdigest()


def load(root: Path, *, follow_symlinks: bool = True) -> LoadResult:
    """Load the factory directory ``root`` (``factory.yaml`` and the folder of every kind of
    :mod:`reconciler.registry`). Never raises for bad input: every problem is a diagnostic.

    Symlinks whose real path stays inside the root are followed; with ``follow_symlinks=False`` (a git
    snapshot, where the commit's tree is the truth) none is, and each is a diagnostic.
    """
    loader = _Loader(root, follow_symlinks)
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
    specs = {kind.folder: tuple(loader.kind(kind)) for kind in KINDS}  # in the registry's load order
    definition = None
    if factory is not None:
        definition = FactoryDefinition(root=shown, factory=factory, content_digest=loader.digest(), **specs)
        definition = finish(definition)
    return LoadResult(definition, loader.diagnostics, loader.files, shown)


def finish(definition: FactoryDefinition) -> FactoryDefinition:
    """What needs the whole tree: a legacy file's inline agents become agent specs (with the foreman, which
    a legacy tree always has; one with no ``agents`` map keeps only that implicit foreman, no object),
    agents get their resolved run configuration, automations that name no agent run as the foreman and
    get the factory-wide grants."""
    factory = definition.factory
    agents = definition.agents
    if factory.legacy and not agents and factory.agents:
        inline = dict(factory.agents)
        inline.setdefault(DEFAULT_AGENT, {})
        agents = tuple(
            AgentSpec.from_legacy(
                name,
                config if isinstance(config, dict) else {},
                {"": factory.locations.get(f"agents.{name}", Location(factory.path))},
                foreman=name == DEFAULT_AGENT,
            )
            for name, config in inline.items()
        )
    agents = resolve_agents(agents, factory.settings, definition.skills)
    definition = dataclasses.replace(definition, agents=agents)
    foreman = definition.foreman
    automations = tuple(
        dataclasses.replace(
            a,
            agent=a.agent or foreman,
            config=execution.automation_config(a.front_matter, factory.settings),
        )
        for a in definition.automations
    )
    return dataclasses.replace(
        definition, automations=automations, schedules=(*definition.schedules, *inline_schedules(automations))
    )


def inline_schedules(automations: tuple[AutomationSpec, ...]) -> list[ScheduleSpec]:
    """The schedules declared inline by ``schedule``/``cron_fired`` triggers, named
    ``<automation>:<schedule name>`` (``:`` is in no file name, so they never meet ``schedules/``), always
    UTC; they run their automation when they fire, like a ``schedules/`` file that names it. An expression
    the trigger rules refuse (FC073) declares none."""
    out = []
    for automation in automations:
        for trigger in automation.triggers:
            if trigger.provider != "schedule" or not trigger.schedule:
                continue
            try:
                expression = cron.expression_for_trigger(trigger.schedule["cron"])
            except cron.CronError:
                continue
            name = f"{automation.name}:{trigger.schedule.get('name') or 'schedule'}"
            where = trigger.location or Location(automation.path)
            out.append(
                ScheduleSpec(
                    name=name,
                    path=automation.path,
                    cron=expression,
                    automation=automation.name,
                    enabled=automation.enabled,
                    locations={"": where, "cron": where, "automation": where},
                    inline_of=automation.name,
                )
            )
    return out


def load_many(paths: Iterable[Path]) -> list[LoadResult]:
    """:func:`load` for each path, in order."""
    return [load(path) for path in paths]
