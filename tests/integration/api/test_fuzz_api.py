"""Fuzz the HTTP API with schemathesis against the OpenAPI document it serves (docs/api.md, "Fuzzing").

A real ``factoryctl serve`` subprocess (a temporary data directory on the ``db_url`` database: SQLite, and
PostgreSQL when ``FACTORY_TEST_POSTGRES_URL`` is set; no service-hosted workers; a directory definitions
source) is seeded over HTTP with one resource of every kind: an API-managed and a
definitions-managed factory, webhooks in each auth mode, an automation, deliveries, runs in several states,
environments and secrets. schemathesis then loads ``/api/v1/openapi.json`` from that server and runs
every operation through its examples, coverage and fuzzing phases (positive and negative data), with the
seeded IDs offered as path parameters most of the time so requests get past the 404 and reach the
handlers. Every response must pass:

- ``not_a_server_error``: no 5xx, ever;
- ``status_code_conformance``: the status is documented for the operation;
- ``content_type_conformance`` and ``response_schema_conformance``: the body has the documented media
  type and validates against the documented schema;
- ``response_headers_conformance``: documented headers (``Retry-After``) have their documented shape;
- :func:`problem_json`: every 4xx and 5xx is ``application/problem+json`` holding an ``Error`` whose
  ``status`` is the HTTP status.

The run is deterministic: a fixed seed, derandomized generation and no example database, so CI sees the
same cases every time. ``FACTORY_FUZZ_EXAMPLES`` (default :data:`CI_EXAMPLES`) bounds the fuzzing phase
per operation; ``make fuzz`` runs the same test with many more. ``FACTORY_FUZZ_SEED`` changes the seed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from jsonschema import Draft202012Validator
from schemathesis import BaseSchema, Case, CheckContext, HookContext, Response
from schemathesis.engine import events
from schemathesis.engine.recorder import CheckFailureInfo, ScenarioRecorder

from api.http.pagination import Cursor, encode_cursor, fingerprint
from api.runs.routes import load_openapi

pytestmark = pytest.mark.slow

CI_EXAMPLES = 15
EXAMPLES = int(os.environ.get("FACTORY_FUZZ_EXAMPLES", str(CI_EXAMPLES)))
SEED = int(os.environ.get("FACTORY_FUZZ_SEED", "20260131"))
PROBLEM_JSON = "application/problem+json"
HOOKS_SECRET = "fuzz-hooks-secret-0123456789"  # the definitions webhook's team secret (token mode)
WORKER_HOST = "fuzz-host"
LIVE_HOST = "fuzz-live"  # the claimed run's host: nothing else queues runs there
WORKER_ID = "fuzz-worker"

DOC = load_openapi()
ERROR_VALIDATOR = Draft202012Validator(
    {"$ref": "#/components/schemas/Error", "components": DOC["components"]},
)


# --- the server ----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    """This process's environment without ``FACTORY_*`` settings, which would leak into the server."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")} | {
        "NO_COLOR": "1",
        "FACTORY_CONTEXT": "none",  # never a CLI context `make run` left in the checkout
    }


def _cli(data_dir: Path, database: str, *args: str, stdin: str | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", "--data-dir", str(data_dir), "--database", database, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=60,
    )
    assert done.returncode == 0, f"factoryctl {' '.join(args)}: {done.stdout}{done.stderr}"


def _wait(predicate: Any, what: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"{what}: factoryctl serve exited ({proc.returncode})\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s\n{log.read_text()}")
        time.sleep(0.05)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Server:
    url: str
    key: str
    repo: Path
    proc: subprocess.Popen[bytes]
    log: Path
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=10
        )

    def call(self, method: str, path: str, body: Any = None, status: int = 200, **kwargs: Any) -> Any:
        resp = self.http.request(method, path, json=body, **kwargs)
        assert resp.status_code == status, f"{method} {path}: {resp.status_code} {resp.text}"
        return resp.json() if resp.content else None

    def wait(self, predicate: Any, what: str) -> Any:
        return _wait(predicate, what, self.proc, self.log)


@contextlib.contextmanager
def serving(root: Path, database: str) -> Iterator[Server]:
    """``factoryctl serve`` on a free port and ``database``, following the definitions in ``root/factory``."""
    data, repo, log = root / "data", root / "factory", root / "serve.log"
    _cli(data, database, "secrets", "create", "hooks", "--from-stdin", stdin=HOOKS_SECRET)
    (repo / "webhooks").mkdir(parents=True)
    (repo / "environments").mkdir()
    (repo / "factory.yaml").write_text(f"name: fuzz-defs\nworkerHost: {WORKER_HOST}\n")
    (repo / "webhooks" / "events.yaml").write_text("secretName: hooks\n")
    (repo / "environments" / "defs-env.yaml").write_text("setup:\n  - 'true'\n")
    port = _free_port()
    args = ["--data-dir", str(data), "--database", database, "serve", "--port", str(port), "--workers", "0"]
    args += ["--repo", str(repo)]
    # Ingress rate limits high enough that fuzzed deliveries reach the pipeline instead of a 429.
    args += ["--delivery-rate-limit", "1000000", "--auth-failure-limit", "1000000"]
    args += ["--client-auth-failure-limit", "1000000"]  # the same for the per-address budget
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "factoryctl.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(lambda: _healthy(url), "serve answering /healthz", proc, log)
        server = Server(url, (data / "admin.key").read_text().strip(), repo, proc, log)
        with server.http:
            yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# --- seeded resources ----------------------------------------------------------------------------------


@dataclass
class Seeds:
    """IDs of the seeded resources, grouped by the path parameters they are offered as."""

    runs: list[str] = field(default_factory=list)
    factories: list[str] = field(default_factory=list)
    webhooks: list[str] = field(default_factory=list)  # readable: get, list deliveries
    mutable_webhooks: list[str] = field(default_factory=list)  # patch, rotate, supply secret
    deletable_webhooks: list[str] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)
    automations: list[str] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)  # notification endpoints: read, edit (by ID or name)
    deletable_endpoints: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    ingress_webhook: str = ""
    ingress_token: str = ""
    url_token_webhook: str = ""
    url_token: str = ""


def _factory_named(server: Server, name: str) -> dict[str, Any] | None:
    for item in server.call("GET", "/api/v1/factory")["factories"]:
        if item["name"] == name:
            return dict(server.call("GET", f"/api/v1/factory/{item['uid']}"))
    return None


def seed(server: Server) -> Seeds:
    s = Seeds()
    v1 = "/api/v1"
    # The definitions-managed factory, its webhook, then an automation selecting that webhook.
    defs = server.wait(lambda: (f := _factory_named(server, "fuzz-defs")) and f["webhooks"] and f, "apply")
    defs_hook = defs["webhooks"][0]["uid"]
    automation = server.repo / "automations" / "on-event" / "automation.md"
    automation.parent.mkdir(parents=True)
    automation.write_text(
        "---\ntitle: On event\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        f"      webhook_ids: [{defs_hook}]\n      payload:\n        action: opened\n---\nTriage it.\n"
    )
    defs = server.wait(lambda: (f := _factory_named(server, "fuzz-defs")) and f["automations"] and f, "apply")
    s.automations.append(defs["automations"][0]["uid"])

    # An API-managed factory with webhooks in every auth mode.
    api = server.call("POST", f"{v1}/factory", {"name": "fuzz-api", "worker_host": WORKER_HOST}, 201)
    hooks = f"{v1}/factory/{api['uid']}/webhooks"
    ingress = server.call("POST", hooks, {"name": "ingress"}, 201)
    url_token = server.call("POST", hooks, {"name": "by-url", "auth_mode": "url_token"}, 201)
    mutable = server.call("POST", hooks, {"name": "mutable"}, 201)
    unsigned = server.call(
        "POST", hooks, {"name": "unsigned", "auth_mode": "signature", "signature_scheme": "github"}, 201
    )
    doomed = server.call("POST", hooks, {"name": "doomed"}, 201)
    s.factories += [api["uid"], defs["uid"]]
    s.ingress_webhook, s.ingress_token = ingress["uid"], ingress["secret"]
    s.url_token_webhook, s.url_token = url_token["uid"], url_token["secret"]
    s.webhooks += [ingress["uid"], url_token["uid"], mutable["uid"], defs_hook]
    s.mutable_webhooks += [mutable["uid"], unsigned["uid"], defs_hook]
    s.deletable_webhooks += [doomed["uid"], defs_hook]

    # Deliveries: accepted ones to both factories (one matching the automation's filter), a duplicate.
    for uid, secret, payload in (
        (defs_hook, HOOKS_SECRET, {"action": "opened", "n": 1}),
        (defs_hook, HOOKS_SECRET, {"action": "closed", "n": 2}),
        (ingress["uid"], ingress["secret"], {"action": "opened", "n": 3}),
        (ingress["uid"], ingress["secret"], {"action": "opened", "n": 3}),
    ):
        resp = httpx.post(
            f"{server.url}/webhooks/w/{uid}", json=payload, headers={"Authorization": f"Bearer {secret}"}
        )
        assert resp.status_code == 202, resp.text
        s.deliveries.append(resp.json()["delivery_id"])

    # Notification endpoints of the API-managed factory: one to read, edit and resend from (nothing listens
    # at its URL, so its messages stay pending and fail), one to delete; every run change below is a message.
    signing = "whsec_" + base64.b64encode(b"fuzz-signing-key-of-32-bytes!!!!").decode()
    server.call("POST", f"{v1}/secrets", {"name": "fuzz-sign", "value": signing}, 201)
    notify = f"{v1}/factory/{api['uid']}/notifications"
    for name in ("fuzz-ops", "fuzz-doomed"):
        body = {
            "name": name,
            "url": "http://127.0.0.1:9/hook",
            "secretName": "fuzz-sign",
            "events": ["run.*"],
            "filter": {"factories": ["*"]},
        }
        endpoint = server.call("POST", notify, body, 201)
        (s.endpoints if name == "fuzz-ops" else s.deletable_endpoints).append(endpoint["id"])
    s.endpoints.append("fuzz-ops")

    # Runs: queued, cancelled, claimed and in progress (with log lines), and one dispatched to a factory.
    queued = server.call("POST", f"{v1}/agent/run", {"prompt": "fuzz: queued"})["run_id"]
    cancelled = server.call("POST", f"{v1}/agent/run", {"prompt": "fuzz: cancelled"})["run_id"]
    server.call("POST", f"{v1}/agent/runs/{cancelled}/cancel")
    live = server.call(
        "POST", f"{v1}/agent/run", {"prompt": "fuzz: live", "config": {"worker_host": LIVE_HOST}}
    )["run_id"]
    claim = {"worker_host": LIVE_HOST, "wait_seconds": 0, "worker_id": WORKER_ID}
    claimed = server.call("POST", f"{v1}/workers/claim", claim)
    assert claimed["run"]["run_id"] == live
    lease = {"worker_id": WORKER_ID, "lease_token": claimed["lease_token"]}
    server.call("POST", f"{v1}/workers/runs/{live}/heartbeat", {"state": "INPROGRESS", **lease})
    lines = [{"stream": "stdout", "text": "hello"}, {"stream": "stderr", "text": "oops"}]
    server.call("POST", f"{v1}/workers/runs/{live}/logs", {"lines": lines, **lease})
    dispatched = server.call("POST", f"{v1}/factory/{api['uid']}/runs", {"prompt": "fuzz: dispatched"})
    s.runs += [queued, cancelled, live, dispatched["run_id"]]
    ENDED_RUN["id"] = cancelled

    listed = server.wait(
        lambda: server.call("GET", f"{notify}/{s.endpoints[0]}/messages")["messages"], "notification messages"
    )
    s.messages += [m["id"] for m in listed]

    # Environments and secrets: API-managed, definitions-managed (read-only: 409) and in use (409).
    server.call("POST", f"{v1}/environments", {"name": "fuzz-env", "setup": ["true"]}, 201)
    s.environments += ["fuzz-env", "defs-env"]
    server.call("POST", f"{v1}/secrets", {"name": "fuzz-secret", "value": "v"}, 201)
    s.secrets += ["fuzz-secret", "hooks"]

    # Scheduled agents: one to edit, pause, resume and run now, one to delete.
    for name in ("fuzz-nightly", "fuzz-doomed"):
        body = {"name": name, "cron_schedule": "0 3 * * *", "prompt": f"fuzz: {name}"}
        s.schedules.append(server.call("POST", f"{v1}/agent/schedules", body, 201)["id"])
    return s


# --- schemathesis --------------------------------------------------------------------------------------

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "problem_json",
)


@schemathesis.check
def problem_json(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    """Every 4xx and 5xx is an RFC 9457 ``application/problem+json`` ``Error`` naming its own status."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])[0].split(";")[0].strip()
    assert content_type == PROBLEM_JSON, f"{response.status_code} with Content-Type {content_type!r}"
    body = json.loads(response.content)
    errors = [f"{list(e.path)}: {e.message}" for e in ERROR_VALIDATOR.iter_errors(body)]
    assert not errors, f"{response.status_code} is not an Error: {'; '.join(errors)}"
    assert body["status"] == response.status_code, f"status {body['status']} in a {response.status_code}"
    return None


# A run that has ended (seeded): a stream of it replays and ends instead of following a live run.
ENDED_RUN: dict[str, str] = {}


def _never_wait(context: HookContext, case: Case[Any], kwargs: dict[str, Any]) -> None:
    """Calls that would wait are sent so they do not, and everything else about them stays fuzzed:
    ``POST /workers/claim`` long-polls up to ``wait_seconds`` (a positive wait is sent as 0), and
    ``GET /agent/runs/{runId}/events`` follows a live run until it ends (a seeded run's ID is swapped for
    the ended run's, so the stream replays and closes)."""
    operation = case.operation.definition.raw.get("operationId")
    if operation == "claimRun" and isinstance(case.body, dict):
        wait = case.body.get("wait_seconds")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
            case.body["wait_seconds"] = 0
    if (
        operation == "streamRunEvents"
        and ENDED_RUN
        and str(case.path_parameters.get("runId", "")).startswith("run_")
    ):
        case.path_parameters["runId"] = ENDED_RUN["id"]


def fuzz_config(server: Server, s: Seeds) -> schemathesis.Config:
    """Generation and checks for the run, with seeded IDs offered as path parameters (80% of cases)."""
    dictionaries: dict[str, list[str]] = {"deliveries": s.deliveries, "workers": [WORKER_ID]}

    def offer(name: str, values: list[str], probability: float = 0.8) -> dict[str, Any]:
        key = f"{name}-{len(dictionaries)}"
        dictionaries[key] = values
        return {f"path.{name}": {"dictionary": key, "probability": probability}}

    def operations(ids: list[str], parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"include-operation-id": ids, "parameters": parameters, **extra}

    run_ops = ["getRun", "followupRun", "cancelRun", "getRunLogs"]
    worker_ops = ["heartbeat", "reportState", "appendLogs", "runSecrets"]  # the lease holder is WORKER_ID
    factory_ops = ["getFactory", "dispatchFactoryRun", "reconcileFactory", "listWebhooks", "createWebhook"]
    reading_ops = ["getWebhook", "listDeliveries", "getDelivery"]
    config: dict[str, Any] = {
        "seed": SEED,
        "base-url": server.url,
        "workers": 1,
        "continue-on-failure": True,
        "cache": {"enabled": False},  # nothing carried over from an earlier run: same cases every time
        "headers": {"Authorization": f"Bearer {server.key}"},
        "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none", "mode": "all"},
        "phases": {"stateful": {"enabled": False}},
        "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        "operations": [
            operations(run_ops, offer("runId", s.runs)),
            operations(
                worker_ops,
                offer("runId", s.runs) | {"body.worker_id": {"dictionary": "workers", "probability": 0.8}},
            ),
            operations(factory_ops, offer("factoryUid", s.factories)),
            operations(
                reading_ops,
                offer("factoryUid", s.factories)
                | offer("webhookUid", s.webhooks)
                | offer("deliveryId", s.deliveries),
            ),
            operations(
                ["replayDelivery"],
                offer("factoryUid", s.factories)
                | offer("webhookUid", s.webhooks)
                | offer("deliveryId", s.deliveries),
            ),
            operations(
                ["getNotificationEndpoint", "updateNotificationEndpoint", "listNotificationMessages"],
                offer("factoryUid", s.factories) | offer("endpointRef", s.endpoints),
            ),
            operations(
                ["deleteNotificationEndpoint"],
                offer("factoryUid", s.factories) | offer("endpointRef", s.deletable_endpoints),
            ),
            operations(
                ["getNotificationMessage", "resendNotificationMessage"],
                offer("factoryUid", s.factories)
                | offer("endpointRef", s.endpoints)
                | offer("messageId", s.messages),
            ),
            operations(
                ["updateWebhook", "rotateWebhookSecret", "supplyWebhookSecret"],
                offer("factoryUid", s.factories) | offer("webhookUid", s.mutable_webhooks),
            ),
            operations(
                ["deleteWebhook"],
                offer("factoryUid", s.factories) | offer("webhookUid", s.deletable_webhooks),
            ),
            operations(
                ["testFilter"],
                offer("factoryUid", s.factories[1:])
                | offer("automationUid", s.automations)
                | {"body.delivery_id": {"dictionary": "deliveries", "probability": 0.8}},
            ),
            operations(
                ["getEnvironment", "replaceEnvironment", "deleteEnvironment"], offer("name", s.environments)
            ),
            operations(["setSecret", "deleteSecret"], offer("name", s.secrets)),
            operations(
                [
                    "getSchedule",
                    "updateSchedule",
                    "pauseSchedule",
                    "resumeSchedule",
                    "runScheduleNow",
                    "deleteSchedule",
                ],
                offer("scheduleId", s.schedules),
            ),
            # The team stream never ends by itself (docs/events.md, "Team stream"), and it is fuzzed as it
            # is, not swapped for something that ends: schemathesis reads an event stream until it ends,
            # sends `max-stream-events` events or the request timeout passes, then closes the connection
            # and checks what arrived. So each case is answered by a problem at once (a malformed cursor,
            # an unknown state...) or gets the status, the media type and the first 0.3 s of the live
            # stream: the `retry:` hint, the position frame, and the events replayed after a fuzzed cursor,
            # each frame validated against the documented frame schema. 0.3 s per accepted case, not
            # the 10 s default (nothing more arrives in between: heartbeats come every 15 s).
            {
                "include-operation-id": ["streamTeamEvents"],
                "request-timeout": 0.3,
                "max-stream-events": 5,
            },
            operations(
                ["deliverWebhook"],
                offer("webhookUid", [s.ingress_webhook], 0.9),
                headers={"Authorization": f"Bearer {s.ingress_token}"},
            ),
            operations(
                ["deliverWebhookUrlToken"],
                offer("webhookUid", [s.url_token_webhook], 0.9) | offer("token", [s.url_token], 0.9),
            ),
        ],
    }
    config["dictionaries"] = {k: {"values": v} for k, v in dictionaries.items()}
    return schemathesis.Config.from_dict(config)


@dataclass(frozen=True)
class KnownIssue:
    """A failure whose fix is in progress outside this test's files: matched exactly and left out, with the
    reason. Remove the entry when the fix lands; the fuzzer then guards it like everything else."""

    reason: str
    status: int
    sent: Callable[[Any], bool]  # what the request carried
    operation: str | None = None  # None: any operation
    database: str | None = None  # "sqlite" or "postgres"; None: both

    def matches(self, label: str, request: Any, response: Any, database: str) -> bool:
        return (
            request is not None
            and response is not None
            and response.status_code == self.status
            and self.operation in (None, label)
            and self.database in (None, database)
            and self.sent(request)
        )


KNOWN_ISSUES: tuple[KnownIssue, ...] = ()  # every finding so far is fixed; add one here with its reason


def describe(label: str, info: CheckFailureInfo, response: Response | None) -> str:
    status = f"{response.status_code} {response.content[:600]!r}" if response is not None else "no response"
    return f"{label}: {info.failure.title}\n{info.failure.message}\n-> {status}\n{info.code_sample}"


@dataclass
class Report:
    """What a run found: distinct problems, the statuses each operation answered, and the time it took."""

    database: str
    problems: dict[tuple[str, str, str], str] = field(default_factory=dict)
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    known: Counter[tuple[str, str]] = field(default_factory=Counter)  # checks left out: (reason, operation)
    elapsed: float = 0.0

    def record(self, recorder: ScenarioRecorder) -> None:
        """One operation's scenario: its statuses, and each failed check not caused by a known issue."""
        label = recorder.label
        for sent in recorder.interactions.values():
            if sent.response is not None:
                self.statuses[label][sent.response.status_code] += 1
        for case_id, nodes in recorder.checks.items():
            interaction = recorder.interactions.get(case_id)
            request = interaction.request if interaction is not None else None
            response = interaction.response if interaction is not None else None
            for node in nodes:
                if node.failure_info is None:
                    continue
                issue = next(
                    (k for k in KNOWN_ISSUES if k.matches(label, request, response, self.database)), None
                )
                if issue is not None:
                    self.known[issue.reason, label] += 1
                    continue
                key = (label, node.name, node.failure_info.failure.title)
                self.problems.setdefault(key, describe(label, node.failure_info, response))

    def summary(self) -> str:
        lines = [
            f"{label}: {dict(sorted(counts.items()))}" for label, counts in sorted(self.statuses.items())
        ]
        cases = sum(sum(c.values()) for c in self.statuses.values())
        head = (
            f"{self.database}: {cases} cases in {self.elapsed:.1f}s"
            f" ({EXAMPLES} fuzzed examples per operation, seed {SEED})"
        )
        known = [
            f"known issue, {n} failed checks left out: {op}: {why}" for (why, op), n in self.known.items()
        ]
        return "\n".join([head, *lines, *known])


def fuzz(schema: BaseSchema, database: str) -> Report:
    """Run schemathesis' engine over every operation (examples, coverage and fuzzing phases)."""
    report = Report(database)
    schemathesis.hook("before_call")(_never_wait)  # global: the only scope before_call has; removed below
    try:
        for event in schemathesis.engine.from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                report.record(event.recorder)
            elif isinstance(event, events.NonFatalError):
                report.problems.setdefault(
                    (event.label, "error", repr(event.value)), f"{event.label}: {event.value!r}"
                )
            elif isinstance(event, events.FatalError):
                raise event.exception
            elif isinstance(event, events.EngineFinished):
                report.elapsed = event.running_time
    finally:
        schemathesis.hooks.GLOBAL_HOOK_DISPATCHER.unregister(_never_wait)
    return report


def _backend(db_url: str) -> str:
    return "postgres" if db_url.startswith("postgres") else "sqlite"


def test_every_operation_conforms_to_the_served_document(tmp_path: Path, db_url: str) -> None:
    with serving(tmp_path, db_url) as server:
        seeds = seed(server)
        config = fuzz_config(server, seeds)
        schema = schemathesis.openapi.from_url(f"{server.url}/api/v1/openapi.json", config=config)
        report = fuzz(schema, _backend(db_url))
    print(report.summary())
    assert report.statuses, "nothing was fuzzed"
    problems = list(report.problems.values())
    assert not problems, f"{len(problems)} problems:\n\n" + "\n\n".join(problems)


def test_edge_inputs_found_in_review_are_client_errors(tmp_path: Path, db_url: str) -> None:
    """Inputs the generators rarely produce, found reading the handlers the fuzzer drives: each was a 500."""
    with serving(tmp_path, db_url) as server:
        defs = server.wait(
            lambda: (f := _factory_named(server, "fuzz-defs")) and f["webhooks"] and f, "apply"
        )
        webhook = defs["webhooks"][0]["uid"]
        deliveries = f"/api/v1/factory/{defs['uid']}/webhooks/{webhook}/deliveries"
        fp = fingerprint({"list": "deliveries", "webhook": webhook, "status": []})
        cases = [
            # An RFC 3339 time whose UTC instant falls outside years 1-9999 (OverflowError in astimezone).
            ("/api/v1/agent/runs", {"created_after": "0001-01-01T00:00:00+01:00"}),
            ("/api/v1/agent/runs", {"updated_after": "9999-12-31T23:59:59-01:00"}),
            # Delivery-log cursors whose position is not an ASCII sequence number a 64-bit column holds.
            (deliveries, {"cursor": encode_cursor(Cursor(value=None, row_id="²"), fp)}),
            (deliveries, {"cursor": encode_cursor(Cursor(value=None, row_id="9" * 30), fp)}),
        ]
        for path, params in cases:
            resp = server.http.get(path, params=params)
            assert resp.status_code == 400, f"GET {path} {params}: {resp.status_code} {resp.text}"
            assert resp.headers["content-type"].startswith(PROBLEM_JSON)
