"""Rewrite a factory tree from factoryctl's legacy format to v1alpha1 (``factoryctl migrate``).

Pure: :func:`plan` takes the texts of the files that matter (by path relative to the factory
directory) and returns the files to write, so the CLI owns every disk access and ``--dry-run`` and
``--check`` run the same code as the real thing. Nothing is dropped: every legacy value has a place
in the new files (the mapping is docs/cli.md, "factoryctl migrate"), and a key this module does not
know stops the migration instead of being left behind.

What changes: ``factory.yaml`` gains ``schemaVersion``, ``repositories`` and ``agentDefaults`` and
loses ``agents`` and ``workerHost``; every legacy agent (and the foreman, which legacy trees have even
when unlisted) becomes ``agents/<name>/agent.md``; an automation's ``config:`` becomes top-level
keys. Edits keep the files' other lines as written (:mod:`reconciler.yamltext`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler import yamltext
from reconciler.yamlmarks import parse_yaml, split_front_matter

SCHEMA_VERSION = "v1alpha1"
FOREMAN = "foreman"
DEFAULT_MODEL = "auto"
SERVICE_HOST = "warp"

# Legacy AmbientAgentConfig key -> v1alpha1 front matter key, in the order they are written.
# ``model_id`` and ``harness`` are handled together (a harness carries its own model); ``base_prompt``
# becomes a Markdown body.
CONFIG_KEYS = {
    "name": "runName",
    "model_id": "model",
    "harness": "harness",
    "environment_id": "environmentId",
    "worker_host": "workerHost",
    "skill_spec": "skillSpec",
    "mcp_servers": "mcpServers",
}
_LEGACY_CONFIG = {*CONFIG_KEYS, "base_prompt"}
_LEGACY_FACTORY = {"agents", "workerHost"}
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REPOSITORY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})$")
_GITHUB_URL = re.compile(
    r"^(?:https://(?:[^@/]+@)?github\.com/|ssh://git@github\.com/|git@github\.com:)"
    r"([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]+?)(?:\.git)?/?$"
)


class MigrationError(Exception):
    """The tree cannot be migrated as it is; the message says which file and why."""


class RepositoriesNeeded(MigrationError):
    """No repository could be derived: the user must name one (``--repository owner/name``)."""


@dataclass(frozen=True)
class FileWrite:
    path: str  # relative to the factory directory, '/'-separated
    text: str
    new: bool  # the file does not exist yet


@dataclass(frozen=True)
class Plan:
    """The files to write, in a safe order: new files first, ``factory.yaml`` (the marker) last."""

    writes: tuple[FileWrite, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def done(self) -> bool:
        """Nothing to write: the tree is v1alpha1 already."""
        return not self.writes


def parse_repository(text: str) -> dict[str, str]:
    """``owner/name`` -> ``{"owner", "name"}``; :class:`ValueError` for anything else."""
    match = _REPOSITORY.match(text.strip())
    if match is None:
        raise ValueError(f"'{text}' is not a GitHub repository: use owner/name")
    return {"owner": match[1], "name": match[2]}


def pending(files: Mapping[str, str]) -> list[str]:
    """The files still in the legacy format (empty: nothing to migrate). For ``--check``."""
    out = [] if _is_v1(_load_yaml(files, "factory.yaml")) else ["factory.yaml"]
    for path in _automations(files):
        front, _body = _front_matter(files, path)
        if "config" in front:
            out.append(path)
    return out


def plan(files: Mapping[str, str], repositories: Sequence[Mapping[str, str]] = ()) -> Plan:
    """What migrating the tree ``files`` writes. ``repositories`` (from ``--repository``) come first
    in ``factory.yaml``, then the GitHub repositories of the environments, without duplicates."""
    notes: list[str] = []
    factory = _load_yaml(files, "factory.yaml")
    agent_writes: list[FileWrite] = []
    factory_writes: list[FileWrite] = []
    if not _is_v1(factory):
        agents = _legacy_agents(factory)
        defaults = _agent_defaults(factory, agents)
        for name, config in agents.items():
            agent_writes.append(_agent_file(files, name, config, defaults))
        repos = _repositories(files, repositories, notes)
        factory_writes.append(_factory_file(files["factory.yaml"], factory, repos, defaults))
    automation_writes = [w for w in (_automation_file(files, p, notes) for p in _automations(files)) if w]
    writes = [w for w in agent_writes if w.new]  # an existing one is identical (_agent_file checked)
    return Plan((*writes, *automation_writes, *factory_writes), tuple(notes))


# -- reading ---------------------------------------------------------------------------------------


def _load_yaml(files: Mapping[str, str], path: str, text: str | None = None, offset: int = 0) -> Any:
    if text is None:
        if path not in files:
            raise MigrationError(f"{path}: not found (is this a factory directory?)")
        text = files[path]
    parsed = parse_yaml(text, path, line_offset=offset)
    if not parsed.ok:
        first = next(d for d in parsed.diagnostics if d.severity == "error")
        raise MigrationError(f"{path}:{first.line}:{first.column}: {first.message}")
    data = parsed.data if parsed.data is not None else {}
    if not isinstance(data, dict):
        raise MigrationError(f"{path}: expected a mapping at the top")
    return data


def _front_matter(files: Mapping[str, str], path: str) -> tuple[dict[str, Any], str]:
    split = split_front_matter(files[path], path)
    if not isinstance(split, tuple):
        raise MigrationError(f"{path}: {split.message}")
    front, offset, body, _line = split
    data: dict[str, Any] = _load_yaml(files, path, front, offset)
    return data, body


def _is_v1(factory: Mapping[str, Any]) -> bool:
    version = factory.get("schemaVersion")
    if version is None:
        return False
    if version != SCHEMA_VERSION:
        raise MigrationError(
            f"factory.yaml: unknown schemaVersion {version!r} (this factoryctl knows v1alpha1)"
        )
    if _LEGACY_FACTORY & set(factory):
        keys = ", ".join(sorted(_LEGACY_FACTORY & set(factory)))
        raise MigrationError(
            f"factory.yaml: schemaVersion v1alpha1 with the legacy key(s) {keys}: move them by hand"
        )
    return True


def _automations(files: Mapping[str, str]) -> list[str]:
    return sorted(p for p in files if p.startswith("automations/") and p.endswith("/automation.md"))


def _legacy_agents(factory: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The legacy ``agents`` map, the foreman first (it exists even when unlisted)."""
    raw = factory.get("agents") or {}
    if not isinstance(raw, dict):
        raise MigrationError("factory.yaml: 'agents' must be a mapping of agent name to configuration")
    agents: dict[str, dict[str, Any]] = {FOREMAN: {}}
    for name, config in raw.items():
        if not _AGENT_NAME.match(name):
            raise MigrationError(f"factory.yaml: agent name {name!r} cannot be a directory name")
        if config is not None and not isinstance(config, dict):
            raise MigrationError(f"factory.yaml: agents.{name} must be a mapping")
        agents[name] = dict(config or {})
    return agents


# -- agents and defaults ---------------------------------------------------------------------------


def _agent_defaults(factory: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``model``: the foreman's, else the agents' most common, else ``auto``; the factory's worker host."""
    model = agents[FOREMAN].get("model_id")
    if model is None:
        counts = Counter(c["model_id"] for c in agents.values() if c.get("model_id") is not None)
        model = counts.most_common(1)[0][0] if counts else DEFAULT_MODEL
    defaults: dict[str, Any] = {"model": model}
    host = factory.get("workerHost")
    if host is not None and host != SERVICE_HOST:
        defaults["workerHost"] = host
    return defaults


def convert_config(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A legacy AmbientAgentConfig (``base_prompt`` aside) as v1alpha1 front matter keys."""
    unknown = sorted(set(config) - _LEGACY_CONFIG)
    if unknown:
        raise MigrationError(f"{where}: unknown key(s) {', '.join(unknown)}: nothing to migrate them to")
    out: dict[str, Any] = {}
    for legacy, new in CONFIG_KEYS.items():
        if legacy not in config:
            continue
        value = config[legacy]
        if legacy == "model_id" and "harness" in config:
            continue  # a harness carries its own model
        if legacy == "harness" and isinstance(value, dict) and config.get("model_id") is not None:
            value = {**value, "model": config["model_id"]}
        elif legacy == "mcp_servers" and isinstance(value, dict):
            value = {name: _mcp_server(server) for name, server in value.items()}
        out[new] = value
    return out


def _mcp_server(server: Any) -> Any:
    if isinstance(server, dict) and "warp_id" in server:
        return {("warpId" if k == "warp_id" else k): v for k, v in server.items()}
    return server


def _agent_file(
    files: Mapping[str, str], name: str, config: Mapping[str, Any], defaults: Mapping[str, Any]
) -> FileWrite:
    path = f"agents/{name}/agent.md"
    front: dict[str, Any] = {"agentType": "FOREMAN" if name == FOREMAN else "CUSTOM"}
    front.update(convert_config(config, f"factory.yaml: agents.{name}"))
    if front.get("model") == defaults["model"]:
        del front["model"]
    body = config.get("base_prompt") or ""
    if not isinstance(body, str):
        raise MigrationError(f"factory.yaml: agents.{name}.base_prompt must be a string")
    if body and not body.endswith("\n"):
        body += "\n"
    text = f"---\n{yamltext.dump(front)}---\n{body}"
    existing = files.get(path)
    if existing is not None and existing != text:
        raise MigrationError(
            f"{path}: already exists and differs from the migrated agent '{name}': move it aside"
        )
    return FileWrite(path, text, existing is None)


# -- factory.yaml ----------------------------------------------------------------------------------


def _repositories(
    files: Mapping[str, str],
    given: Sequence[Mapping[str, str]],
    notes: list[str],
) -> list[dict[str, str]]:
    found = [dict(r) for r in given]
    environments = sorted(p for p in files if p.startswith("environments/") and p.endswith((".yaml", ".yml")))
    for path in environments:
        try:
            env = _load_yaml(files, path)
        except MigrationError as exc:
            notes.append(f"{exc} (its repositories are not read)")
            continue
        for repo in env.get("repos") or []:
            url = repo.get("url") if isinstance(repo, dict) else None
            match = _GITHUB_URL.match(url) if isinstance(url, str) else None
            if match:
                found.append({"owner": match[1], "name": match[2]})
    unique: list[dict[str, str]] = []
    for repo in found:
        if not any(
            r["owner"].lower() == repo["owner"].lower() and r["name"].lower() == repo["name"].lower()
            for r in unique
        ):
            unique.append(repo)
    if not unique:
        raise RepositoriesNeeded(
            "v1alpha1 factories list their repositories, and no environment clones a GitHub repository: "
            "name them with --repository owner/name (repeatable)"
        )
    return unique


def _factory_file(
    text: str, factory: Mapping[str, Any], repos: list[dict[str, str]], defaults: dict[str, Any]
) -> FileWrite:
    started = sorted({"agentDefaults", "repositories"} & set(factory))
    if started:
        raise MigrationError(
            f"factory.yaml: has {', '.join(started)} but no schemaVersion: finish it by hand"
        )
    kept = {k: v for k, v in factory.items() if k not in _LEGACY_FACTORY}
    expected = {"schemaVersion": SCHEMA_VERSION, **kept, "repositories": repos, "agentDefaults": defaults}
    doc = yamltext.split(text)
    if doc is not None:
        doc.drop([*_LEGACY_FACTORY])
        doc.insert_first(yamltext.dump({"schemaVersion": SCHEMA_VERSION}))
        doc.append(yamltext.dump({"repositories": repos, "agentDefaults": defaults}))
        edited = doc.text()
        if yamltext.reads_as(edited, expected):
            return FileWrite("factory.yaml", edited, False)
    rewritten = "".join(yamltext.leading_comment(text)) + yamltext.dump(expected)
    return FileWrite("factory.yaml", rewritten, False)


# -- automations -----------------------------------------------------------------------------------


def _automation_file(files: Mapping[str, str], path: str, notes: list[str]) -> FileWrite | None:
    """The automation with ``config:`` spelled as top-level keys; ``None`` when it has no ``config``."""
    front, body = _front_matter(files, path)
    if "config" not in front:
        return None
    config = front["config"] or {}
    if not isinstance(config, dict):
        raise MigrationError(f"{path}: 'config' must be a mapping")
    keys = convert_config(config, f"{path}: config")
    clash = sorted(set(keys) & set(front))
    if clash:
        raise MigrationError(
            f"{path}: config and the front matter both set {', '.join(clash)}: keep one by hand"
        )
    base = config.get("base_prompt")
    if base:
        body = f"{base.rstrip()}\n\n{body}"
        notes.append(
            f"{path}: config.base_prompt now opens the prompt (a v1alpha1 automation has no base prompt; "
            "its agent's prompt applies as well)"
        )
    expected: dict[str, Any] = {}
    for key, value in front.items():
        expected.update(keys if key == "config" else {key: value})
    split = split_front_matter(files[path], path)
    assert isinstance(split, tuple)  # _front_matter read the same text
    original = split[0]
    doc = yamltext.split(original)
    new_front: str | None = None
    if doc is not None:
        doc.replace("config", yamltext.dump(keys))
        if yamltext.reads_as(doc.text(), expected):
            new_front = doc.text()
    if new_front is None:
        new_front = "".join(yamltext.leading_comment(original)) + yamltext.dump(expected)
    return FileWrite(path, f"---\n{new_front}---\n{body}", False)
