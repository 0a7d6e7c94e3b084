"""What a preset is, and the transcript events every preset produces (docs/agents.md, "Events").

A preset turns a :class:`~factoryctl.worker.job.Job` into an :class:`Invocation` of its CLI (argv,
environment, files to write into the run's agent home) and reads the CLI's structured output one line at
a time with a :class:`StreamParser`, which yields :class:`AgentEvent` values and, at the end, the CLI's own
verdict (:class:`Verdict`). Presets are pure: they start nothing and touch no file themselves, so each is
tested against recorded output, and :mod:`factoryctl.worker.presets.harness` is the one place a CLI runs.

Event kinds and their ``data`` (the run's event stream carries them as they are, bounded by the server):

==============  ================================================================================
kind            data
==============  ================================================================================
``message``     ``{role: "assistant" | "user" | "system", text}``
``tool_call``   ``{id, name, input}`` (``input``: the tool's arguments, JSON)
``tool_result`` ``{id, ok, output}`` (``output``: text, cut to :data:`MAX_OUTPUT_CHARS`, ``truncated``)
``usage``       ``{input_tokens, output_tokens, cost_usd}`` (``cost_usd`` None when the CLI reports none)
``session``     ``{session_id}``: the CLI's session or thread, which a follow-up resumes
==============  ================================================================================

The worker itself adds ``egress_refused`` ``{host, port, reason}`` (its egress proxy refused a
destination, :mod:`factoryctl.worker.egress_run`); no preset produces it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from factoryctl.worker.job import Job

EventKind = Literal["message", "tool_call", "tool_result", "usage", "session", "egress_refused"]
EVENT_KINDS: tuple[EventKind, ...] = ("message", "tool_call", "tool_result", "usage", "session")
MAX_OUTPUT_CHARS = 4000  # a tool result's excerpt in its event
MAX_TEXT_CHARS = 32_000  # a message's text in its event


@dataclass(frozen=True)
class AgentEvent:
    kind: EventKind
    data: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "data": dict(self.data)}


def message(text: str, role: str = "assistant") -> AgentEvent:
    return AgentEvent("message", {"role": role, "text": text[:MAX_TEXT_CHARS]})


def tool_call(call_id: str, name: str, arguments: Any) -> AgentEvent:
    return AgentEvent("tool_call", {"id": call_id, "name": name, "input": arguments})


def tool_result(call_id: str, ok: bool, output: str) -> AgentEvent:
    cut = output[:MAX_OUTPUT_CHARS]
    return AgentEvent(
        "tool_result", {"id": call_id, "ok": ok, "output": cut, "truncated": len(cut) < len(output)}
    )


def usage(input_tokens: int, output_tokens: int, cost_usd: float | None = None) -> AgentEvent:
    return AgentEvent(
        "usage",
        {"input_tokens": int(input_tokens), "output_tokens": int(output_tokens), "cost_usd": cost_usd},
    )


def session(session_id: str) -> AgentEvent:
    return AgentEvent("session", {"session_id": session_id})


@dataclass(frozen=True)
class Verdict:
    """The CLI's own result: ``ok`` (the agent finished its task), ``message`` (its final answer or the
    error it reported), ``blocked`` (it stopped to ask for input: the run becomes BLOCKED until a
    follow-up)."""

    ok: bool
    message: str | None = None
    blocked: bool = False


@dataclass(frozen=True)
class Invocation:
    """How to start the CLI for one run: ``argv[0]`` is the CLI's executable; ``env`` is added to the
    run's environment; ``files`` are written (mode 0600) under the run's agent home before it starts, keyed
    by their path relative to it; ``stdin`` is sent then closed (None: ``/dev/null``)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None


class StreamParser(Protocol):
    def feed(self, line: str) -> list[AgentEvent]:
        """The events one line of the CLI's stdout carries (``[]`` for a line that carries none)."""

    def is_structured(self, line: str) -> bool:
        """Whether ``line`` is the CLI's structured output (else the harness logs it as a plain line)."""

    def verdict(self) -> Verdict | None:
        """The CLI's result once its output ended; None when it printed none (a crash)."""


@dataclass(frozen=True)
class Context:
    """What a preset needs besides the job: the run's workspace, its private agent home (HOME and the
    CLI's configuration directory live there), the session to resume (None: a new one), the skills
    directory (``$FACTORY_SKILLS_DIR``, or None), and the model endpoint and credential variables the
    run's environment provides (``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY`` ...)."""

    workspace: Path
    home: Path
    resume: str | None = None
    skills_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)


class Preset(Protocol):
    name: str  # the harness type: claude | codex | gemini
    executable: str  # the CLI's command name on PATH (claude, codex, gemini)
    minimum_version: tuple[int, ...]

    def version(self, output: str) -> tuple[int, ...] | None:
        """The version ``<executable> --version`` printed, or None when it is not recognised."""

    def invocation(self, job: Job, executable: str, context: Context) -> Invocation: ...

    def parser(self) -> StreamParser: ...

    def session_paths(self) -> tuple[str, ...]:
        """Where the CLI keeps its sessions, relative to the agent home (files or directories): the worker
        saves them after each attempt for a follow-up (docs/agents.md, "Sessions and follow-ups")."""

    def session_moves(self, files: Sequence[str], context: Context) -> dict[str, str]:
        """How restored session files (relative to the agent home) must be renamed for ``context``'s new
        workspace, since the CLIs file sessions under a name derived from the working directory;
        ``{old: new}``, only the files that move."""


# -- what every preset's parser and version check share ---------------------------------------------

_SEMVER = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.(\d+)")


def semver(output: str) -> tuple[int, ...] | None:
    """The first ``X.Y.Z`` a ``--version`` output holds at a word's start (``2.1.332 (Claude Code)``,
    ``codex-cli 0.169.0``), or None."""
    found = _SEMVER.search(output)
    return tuple(int(part) for part in found.groups()) if found else None


def typed_object(line: str) -> dict[str, Any] | None:
    """A line of structured output: a JSON object with a string ``type``, else None (plain output)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        item = json.loads(text)
    except ValueError:
        return None
    return item if isinstance(item, dict) and isinstance(item.get("type"), str) else None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (structured output is read defensively)."""
    return value if isinstance(value, Mapping) else {}
