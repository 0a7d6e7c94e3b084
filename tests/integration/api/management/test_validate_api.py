"""``POST /api/v1/factory-files/validate``: the product's shape, the anonymous tiers, a key's online tier."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.management.validate import ANONYMOUS_LIMIT_KEY, VALIDATOR
from factoryctl.serve.validation import make_validator
from store.crypto import SecretBox

if TYPE_CHECKING:
    from conftest import Mgmt

PATH = "/api/v1/factory-files/validate"
FILES = {
    "factory.yaml": "name: ci-check\n",
    "webhooks/orders.yaml": "secretName: orders-token\n",
    "webhooks/cron.yaml": "authMode: url_token\nsecretName: cron-token\n",
}


@pytest.fixture
def api_app(api_app: web.Application, box: SecretBox) -> web.Application:
    api_app[VALIDATOR] = make_validator(box)
    return api_app


def listed(files: dict[str, str]) -> dict[str, Any]:
    """The product's request body."""
    return {"files": [{"path": k, "content": v} for k, v in files.items()]}


def rules_of(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["rule"], e["path"]) for e in report["diagnostics"]]


async def test_anonymous_call_runs_the_offline_tiers_only(mgmt: Mgmt) -> None:
    """No key: the product's answer; a missing secret is not reported, it is a deferred resolution."""
    resp = await mgmt.client.post(PATH, json=listed(FILES))
    assert resp.status == 200
    report = await resp.json()
    assert report["valid"] is True and report["diagnostics"] == []
    assert report["schema_version"] == "v1alpha1"
    assert report["validation_scope"] == {
        "parser": "checked",
        "state_independent": "checked",
        "state_dependent": "not_checked",
    }
    assert report["state_dependent_checks_not_run"]
    assert {"path": "webhooks/cron.yaml", "field": "secretName", "kind": "secret"} in report[
        "deferred_resolutions"
    ]


async def test_a_key_adds_the_state_dependent_tier_for_its_team(mgmt: Mgmt) -> None:
    status, report = await mgmt.call("POST", PATH, mgmt.member, json=listed(FILES))
    assert status == 200 and report["valid"] is False
    assert report["validation_scope"]["state_dependent"] == "checked"
    assert report["state_dependent_checks_not_run"] == []
    assert rules_of(report) == [("FC040", "webhooks/cron.yaml"), ("FC040", "webhooks/orders.yaml")]
    first = report["diagnostics"][0]
    assert first["code"] == "FC040" and first["severity"] == "error"  # state-dependent: no FF_ code
    assert first["line"] == 2 and first["column"] > 0 and "cron-token" in first["message"]
    assert report["factory"] == {"name": "ci-check", "files": 3}

    await mgmt.call("POST", "/api/v1/secrets", json={"name": "orders-token"})
    await mgmt.call("POST", "/api/v1/secrets", json={"name": "cron-token", "value": "not url/safe"})
    _, report = await mgmt.call("POST", PATH, json=FILES)  # the older path -> content map works too
    assert rules_of(report) == [("FC041", "webhooks/cron.yaml")]

    await mgmt.call("PUT", "/api/v1/secrets/cron-token")
    _, report = await mgmt.call("POST", PATH, json={"files": FILES})
    assert report["valid"] is True and report["diagnostics"] == []

    # Another team's store has none of these secrets.
    _, report = await mgmt.call("POST", PATH, mgmt.other_admin, json=listed(FILES))
    assert [r for r, _ in rules_of(report)] == ["FC040", "FC040"]


async def test_broken_tree_codes_lines_and_no_temporary_paths(mgmt: Mgmt) -> None:
    files = {
        "factory.yaml": "schemaVersion: v1alpha1\nname: ci-check\nnmae: typo\n",
        "webhooks/orders.yaml": "secretName: orders-token\nauthMode: basic\n",
        "webhooks/cron.yaml": "secretName: [unclosed\n",
        "automations/triage/automation.md": "no front matter\n",
    }
    resp = await mgmt.client.post(PATH, json=listed(files))
    report = await resp.json()
    assert report["valid"] is False
    codes = {(e["code"], e["path"], e["line"]) for e in report["diagnostics"]}
    assert ("FF_INVALID_VALUE", "webhooks/orders.yaml", 2) in codes  # authMode: basic
    assert any(c == "FF_INVALID_YAML" and p == "webhooks/cron.yaml" for c, p, _ in codes), codes
    assert any(c == "FF_MALFORMED_FRONTMATTER" for c, _, _ in codes), codes
    assert all(e["line"] >= 1 and e["column"] >= 1 for e in report["diagnostics"])
    assert "/tmp" not in str(report) and "factory-validate" not in str(report)


async def test_missing_factory_and_unknown_field_codes(mgmt: Mgmt) -> None:
    resp = await mgmt.client.post(PATH, json=listed({"webhooks/a.yaml": "secretName: s\n"}))
    report = await resp.json()
    assert [e["code"] for e in report["diagnostics"]] == ["FF_MISSING_FACTORY"]
    assert report["validation_scope"]["state_independent"] == "not_run"
    resp = await mgmt.client.post(PATH, json=listed({"factory.yaml": "name: x\nnmae: y\n"}))
    report = await resp.json()
    unknown = report["diagnostics"][0]
    assert (unknown["code"], unknown["rule"], unknown["line"]) == ("FF_UNKNOWN_FIELD", "FC010", 2)


async def test_multipart_upload_is_still_accepted(mgmt: Mgmt) -> None:
    form = aiohttp.FormData()
    form.add_field("factory.yaml", b"name: ci-check\n", filename="factory.yaml")
    form.add_field(
        "./automations/triage/automation.md",
        b"---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        b"      webhook_ids: [wh_00000000000000000000000000]\n---\nTriage it.\n",
        filename="automation.md",
    )
    resp = await mgmt.client.post(PATH, data=form, headers=mgmt.admin)
    assert resp.status == 200
    report = await resp.json()
    assert ("FC043", "automations/triage/automation.md") in rules_of(report)  # UID not in this factory


async def test_store_webhook_uids_count_for_an_applied_factory(mgmt: Mgmt) -> None:
    fa = await mgmt.definitions_factory(name="ci-check", webhooks=("orders",))
    _, listed_hooks = await mgmt.call("GET", f"/api/v1/factory/{fa}/webhooks")
    uid = listed_hooks["webhooks"][0]["uid"]
    files = {
        "factory.yaml": "name: ci-check\n",
        "webhooks/orders.yaml": "secretName: orders-token\n",
        "automations/triage/automation.md": (
            f"---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
            f"      webhook_ids: [{uid}]\n---\nTriage it.\n"
        ),
    }
    _, report = await mgmt.call("POST", PATH, json=listed(files))
    assert report["valid"] is True, report
    files["automations/triage/automation.md"] = files["automations/triage/automation.md"].replace(
        uid, "orders"
    )
    _, report = await mgmt.call("POST", PATH, json=listed(files))
    names_file = next(e for e in report["diagnostics"] if e["rule"] == "FC031")
    assert uid in (names_file["hint"] or "") + names_file["message"]


async def test_size_limits(mgmt: Mgmt) -> None:
    big = "# " + "x" * (2 * 1024 * 1024) + "\n"
    status, problem = await mgmt.call(
        "POST", PATH, json=listed({"factory.yaml": "name: x\n", "notes.md": big})
    )
    assert status == 413 and "notes.md" in problem["detail"]
    total = {f"notes/{i}.md": "x" * (1024 * 1024) for i in range(9)}
    status, problem = await mgmt.call("POST", PATH, json=listed({"factory.yaml": "name: x\n", **total}))
    assert status == 413 and "8388608" in problem["detail"], problem


async def test_anonymous_calls_are_rate_limited_per_address(
    aiohttp_client: Any, tmp_path: Path, engine: AsyncEngine, box: SecretBox, mgmt: Mgmt
) -> None:
    app = create_app(ServerSettings(data_dir=tmp_path), engine, box, route_modules=ROUTE_MODULES)
    app[VALIDATOR] = make_validator(box)
    app[ANONYMOUS_LIMIT_KEY] = 2
    client = await aiohttp_client(app)
    for _ in range(2):
        assert (await client.post(PATH, json=listed(FILES))).status == 200
    resp = await client.post(PATH, json=listed(FILES))
    body = await resp.json(content_type=None)
    assert (resp.status, resp.content_type, body["error_code"]) == (
        429,
        "application/problem+json",
        "budget_exceeded",
    )
    assert int(resp.headers["Retry-After"]) >= 1
    # A key holder is accountable: not limited by the anonymous budget.
    assert (await client.post(PATH, json=listed(FILES), headers=mgmt.member)).status == 200


async def test_bad_uploads_are_422(mgmt: Mgmt) -> None:
    for files in (
        {"../factory.yaml": "name: x\n"},
        {"/etc/factory.yaml": "name: x\n"},
        {"webhooks//a.yaml": "x"},
        {"factory.yaml": 5},
        {},
        [{"path": "../factory.yaml", "content": "name: x\n"}],
        [{"path": "factory.yaml"}],
    ):
        status, problem = await mgmt.call("POST", PATH, json={"files": files})
        assert status == 422 and problem["errors"][0]["field"].startswith("files"), files


@pytest.mark.parametrize(
    ("files", "field"),
    [
        ({"factory.yaml": "name: x\n", "a": "x", "a/b.yaml": "y"}, "files.a"),
        ({"factory.yaml": "name: x\n", "a/b/c.yaml": "y", "a/b": "x"}, "files.a/b"),
        ({"factory.yaml": "name: x\n", "factory.yaml/inner.yaml": "y"}, "files.factory.yaml"),
        (
            {"factory.yaml": "name: x\n", "skills/" + "s" * 300 + "/SKILL.md": "x"},
            "files.skills/" + "s" * 300 + "/SKILL.md",
        ),
        ({"factory.yaml": "name: x\n", "é" * 200 + ".md": "x"}, "files." + "é" * 200 + ".md"),  # 400 bytes
        ({"factory.yaml": "name: x\n", "/".join(["é" * 100] * 6): "x"}, "files." + "/".join(["é" * 100] * 6)),
    ],
    ids=[
        "file-then-dir",
        "dir-then-file",
        "factory-yaml-as-dir",
        "300-char-segment",
        "multibyte-segment",
        "path-bytes",
    ],
)
async def test_paths_the_file_system_cannot_hold_are_422_naming_the_file(
    mgmt: Mgmt, files: dict[str, str], field: str
) -> None:
    """The finding: a file/directory clash or an over-long name reached the temporary tree and was a 500."""
    status, problem = await mgmt.call("POST", PATH, json={"files": files})
    assert status == 422, problem
    assert [e["field"] for e in problem["errors"]] == [field], problem
    form = aiohttp.FormData()  # the multipart upload takes the same checks
    for path, content in files.items():
        form.add_field(path, content.encode(), filename="f")
    resp = await mgmt.client.post(PATH, data=form, headers=mgmt.admin)
    assert resp.status == 422 and (await resp.json(content_type=None))["errors"][0]["field"] == field


async def test_longest_acceptable_names_validate(mgmt: Mgmt) -> None:
    files = {"factory.yaml": "name: x\n", "notes/" + "n" * 255: "x", "/".join(["d" * 199] * 5): "x"}
    status, report = await mgmt.call("POST", PATH, json={"files": files})
    assert status == 200 and "diagnostics" in report, report


async def test_keys(mgmt: Mgmt) -> None:
    """A worker key is refused and a wrong key is a 401: never silently the anonymous tier."""
    assert (await mgmt.call("POST", PATH, mgmt.worker, json=FILES))[0] == 403
    bad = {"Authorization": "Bearer fk_not_a_key"}
    assert (await mgmt.client.post(PATH, json=FILES, headers=bad)).status == 401


async def test_without_a_validator_the_endpoint_is_501(
    aiohttp_client: Any, tmp_path: Path, engine: AsyncEngine, box: SecretBox, mgmt: Mgmt
) -> None:
    app = create_app(ServerSettings(data_dir=tmp_path), engine, box, route_modules=ROUTE_MODULES)
    client = await aiohttp_client(app)
    resp = await client.post(PATH, json=FILES, headers=mgmt.member)
    assert (
        resp.status == 501 and (await resp.json(content_type=None))["error_code"] == "feature_not_available"
    )


@pytest.mark.parametrize(
    ("content_type", "raw"),
    [
        ("multipart/form-data", b"{}"),  # no boundary (a fuzzer finding: was a 500)
        ("multipart/form-data; boundary=4bea", b"--4bea\r\n--4bea--\r\n"),  # a part without headers
    ],
    ids=["no-boundary", "bad-part"],
)
async def test_a_multipart_body_that_cannot_be_split_is_400(
    mgmt: Mgmt, content_type: str, raw: bytes
) -> None:
    resp = await mgmt.client.post(PATH, data=raw, headers={**mgmt.member, "Content-Type": content_type})
    body = await resp.json(content_type=None)
    assert (resp.status, resp.content_type, body["error_code"]) == (
        400,
        "application/problem+json",
        "invalid_request",
    )
    assert body["detail"].startswith("malformed multipart/form-data body")
