"""Loading a factory tree: every bad input is a diagnostic at an exact file:line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from reconciler.loader import MAX_FILE_BYTES, load

REPO = Path(__file__).resolve().parents[3]


def one(result_diagnostics: list, rule: str | None = None):  # type: ignore[no-untyped-def]
    assert len(result_diagnostics) == 1, result_diagnostics
    diag = result_diagnostics[0]
    if rule:
        assert diag.rule == rule
    return diag


def test_example_factory_loads_into_specs() -> None:
    result = load(REPO / "example-factory")
    assert result.ok, result.diagnostics
    definition = result.definition
    assert definition is not None
    assert definition.factory.name == "example"
    assert {a.name for a in definition.agents} == {"foreman", "triage"}
    hooks = {w.name: w for w in definition.webhooks}
    assert set(hooks) == {"github-issues", "stripe-payments", "alerts"}
    assert hooks["github-issues"].auth_mode == "signature"
    assert hooks["github-issues"].signature_scheme == "github"
    assert hooks["github-issues"].path == "webhooks/github-issues.yaml"
    assert hooks["alerts"].auth_mode == "token" and hooks["alerts"].enabled is True
    autos = {a.name: a for a in definition.automations}
    triage = autos["triage-github-issues"]
    assert triage.agent == "triage"
    assert triage.prompt.startswith("A GitHub issue was opened")
    assert triage.triggers[0].payload_filter == {
        "action": ["opened", "reopened"],
        "issue": {"labels": {"name": {"not_in": ["wontfix", "duplicate"]}}},
    }
    assert autos["nightly-report"].triggers == ()
    assert [e.name for e in definition.environments] == ["example-repo"]
    schedules = {s.name: s for s in definition.schedules}
    assert set(schedules) == {"nightly-report", "weekly-dependencies"}
    assert (schedules["nightly-report"].automation, schedules["nightly-report"].timezone) == (
        "nightly-report",
        "Europe/Berlin",
    )
    assert schedules["weekly-dependencies"].config["environment_id"] == "example-repo"
    assert result.files == 13
    assert len(definition.content_digest) == 64


def test_locations_point_at_keys_in_files_and_front_matter(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/hook.yaml": "# comment\nauthMode: url_token\nsecretName: cron-token\n",
            "automations/a/automation.md": (
                "---\ntitle: T\ntriggers:\n  - provider: webhook\n    event: received\n"
                "    filter:\n      webhook_ids: [wh_0123456789abcdefghjkmnpqrs]\n---\nDo it.\n"
            ),
        }
    )
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    hook = result.definition.webhooks[0]
    assert str(hook.locations["secretName"]) == f"{root.as_posix()}/webhooks/hook.yaml:3:1"
    auto = result.definition.automations[0]
    assert auto.triggers[0].location is not None
    assert (auto.triggers[0].location.line, auto.triggers[0].location.column) == (4, 5)
    assert auto.locations["triggers[0].filter.webhook_ids[0]"].line == 7
    assert auto.locations["prompt"].line == 9


def test_signature_scheme_aliases_are_canonical(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/a.yaml": "authMode: signature\nsignatureScheme: svix\nsecretName: s\n",
            "webhooks/b.yaml": "authMode: signature\nsignatureScheme: standard-webhooks\nsecretName: s\n",
        }
    )
    result = load(root)
    assert result.definition is not None
    assert {w.signature_scheme for w in result.definition.webhooks} == {"standard_webhooks"}


def test_malformed_yaml(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/bad.yaml": "authMode: token\nsecretName: [unclosed\nenabled: true\n"})
    diag = one(load(root).diagnostics, "FC002")
    assert where(root, [diag]) == [("webhooks/bad.yaml", 3, 8, "FC002")]
    assert "YAML syntax error: did not find expected ',' or ']'" in diag.message
    assert "line 2" in diag.message  # where the flow sequence started


def test_yaml_list_instead_of_mapping(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/list.yaml": "- secretName: a\n- secretName: b\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/list.yaml", 1, 1, "FC003")]
    assert diag.message == "expected a mapping of keys, but the document is a list"


def test_empty_webhook_file(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/empty.yaml": ""})
    diag = one(load(root).diagnostics)
    assert diag.rule == "FC003"
    assert "the document is empty" in diag.message


def test_missing_front_matter(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"automations/a/automation.md": "title: x\n\nPrompt.\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("automations/a/automation.md", 1, 1, "FC005")]


def test_unterminated_front_matter(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"automations/a/automation.md": "---\ntitle: x\n\nPrompt.\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("automations/a/automation.md", 1, 1, "FC005")]
    assert "never closed" in diag.message


def test_front_matter_errors_report_real_file_lines(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"automations/a/automation.md": "---\ntitle: x\nenabled: sometimes\n---\nPrompt.\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("automations/a/automation.md", 3, 10, "FC010")]
    assert diag.message == "'enabled' must be a boolean, got string"


def test_empty_prompt_is_an_error(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"automations/a/automation.md": "---\ntitle: x\n---\n\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("automations/a/automation.md", 3, 1, "FC010")]
    assert "no prompt" in diag.message


def test_non_utf8_file(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/latin1.yaml": b"secretName: s\ndescription: caf\xe9\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/latin1.yaml", 2, 17, "FC001")]
    assert "not valid UTF-8 (byte 0xe9)" in diag.message


def test_utf8_bom_is_accepted(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/bom.yaml": "\ufeffsecretName: s\n".encode()})
    assert load(root).ok


def test_symlink_loop(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({})
    (root / "webhooks").mkdir()
    os.symlink("loop-b.yaml", root / "webhooks" / "loop-a.yaml")
    os.symlink("loop-a.yaml", root / "webhooks" / "loop-b.yaml")
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("webhooks/loop-a.yaml", 0, 0, "FC001"),
        ("webhooks/loop-b.yaml", 0, 0, "FC001"),
    ]
    assert all(d.message == "symlink loop" for d in result.diagnostics)


def test_directory_symlink_loop(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({})
    os.symlink("webhooks", root / "webhooks")
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks", 0, 0, "FC001")]
    assert diag.message == "symlink loop"


def test_dangling_symlink(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({})
    (root / "webhooks").mkdir()
    os.symlink("/nonexistent/target.yaml", root / "webhooks" / "gone.yaml")
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/gone.yaml", 0, 0, "FC001")]
    assert "dangling symlink" in diag.message


def test_editor_lock_files_are_ignored(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/a.yaml": "secretName: s\n"})
    os.symlink("user@host.1234", root / "webhooks" / ".#a.yaml")  # how Emacs marks a file being edited
    assert load(root).ok


def test_unreadable_file(factory_tree) -> None:  # type: ignore[no-untyped-def]
    """A file the process may not read is a diagnostic, not a crash.

    Root reads every file, so when the suite runs as root (as in CI) the loader runs in a subprocess whose
    capabilities lack the two that bypass file permissions (``setpriv``, util-linux)."""
    root = factory_tree({"webhooks/secret.yaml": "secretName: s\n"})
    (root / "webhooks" / "secret.yaml").chmod(0)
    code = (
        "import json, sys, pathlib; from reconciler.loader import load; "
        "print(json.dumps([d.message for d in load(pathlib.Path(sys.argv[1])).diagnostics]))"
    )
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*drop, sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
    )
    [message] = json.loads(done.stdout)
    assert message.startswith("cannot read file: Permission denied")


def test_twenty_megabyte_file_is_refused_before_reading(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({})
    (root / "webhooks").mkdir()
    with (root / "webhooks" / "huge.yaml").open("wb") as handle:
        handle.truncate(20 * 1024 * 1024)  # sparse: instant to create
    started = time.perf_counter()
    diag = one(load(root).diagnostics)
    assert time.perf_counter() - started < 0.5
    assert where(root, [diag]) == [("webhooks/huge.yaml", 0, 0, "FC001")]
    assert diag.message == f"file is {20 * 1024 * 1024} bytes; the limit is {MAX_FILE_BYTES} bytes (1 MiB)"


def test_duplicate_yaml_keys(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/dup.yaml": "secretName: one\nenabled: true\nsecretName: two\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/dup.yaml", 3, 1, "FC004")]
    assert diag.message == "duplicate key 'secretName' (first defined at line 1)"


def test_unknown_key_suggests_the_right_one(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/typo.yaml": "secretName: s\nauthmode: token\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/typo.yaml", 2, 1, "FC010")]
    assert diag.message == "unknown key 'authmode' (did you mean 'authMode'?)"


def test_unknown_nested_key(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"factory.yaml": "name: f\nagents:\n  triage:\n    modelid: x\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("factory.yaml", 4, 5, "FC010")]
    assert diag.message == "unknown key 'modelid' in 'agents.triage' (did you mean 'model_id'?)"


def test_wrong_types(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/types.yaml": 'secretName: 42\nenabled: "yes"\ndescription: [a]\n'})
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("webhooks/types.yaml", 1, 13, "FC010"),
        ("webhooks/types.yaml", 2, 10, "FC010"),
        ("webhooks/types.yaml", 3, 14, "FC010"),
    ]
    assert [d.message for d in result.diagnostics] == [
        "'secretName' must be a string, got integer",
        "'enabled' must be a boolean, got string",
        "'description' must be a string, got list",
    ]


def test_unknown_signature_scheme_lists_the_allowed_ones(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/s.yaml": "authMode: signature\nsignatureScheme: strip\nsecretName: s\n"})
    diag = one(load(root).diagnostics)
    assert where(root, [diag]) == [("webhooks/s.yaml", 2, 18, "FC010")]
    assert diag.message.startswith(
        "'signatureScheme' must be one of: standard_webhooks, standard-webhooks, svix,"
    )
    for scheme in ("stripe", "github", "sentry", "pagerduty", "vercel", "slack", "linear", "shopify"):
        assert scheme in diag.message
    assert diag.message.endswith("got 'strip' (did you mean 'stripe'?)")


def test_signature_scheme_required_iff_signature(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/needs.yaml": "secretName: s\nauthMode: signature\n",
            "webhooks/forbids.yaml": "secretName: s\nauthMode: url_token\nsignatureScheme: github\n",
        }
    )
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("webhooks/forbids.yaml", 3, 1, "FC010"),
        ("webhooks/needs.yaml", 1, 1, "FC010"),
    ]
    assert [d.message for d in result.diagnostics] == [
        "'signatureScheme' is only allowed when authMode is 'signature'",
        "'signatureScheme' is required when authMode is 'signature'",
    ]


def test_missing_required_key(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/x.yaml": "description: d\n"})
    diag = one(load(root).diagnostics)
    assert (diag.rule, diag.message) == ("FC010", "missing required key 'secretName'")


def test_not_a_factory_and_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    diag = one(load(tmp_path / "empty").diagnostics, "FC001")
    assert "not a factory: factory.yaml not found" in diag.message
    (tmp_path / "yml").mkdir()
    (tmp_path / "yml" / "factory.yml").write_text("name: x\n")
    assert one(load(tmp_path / "yml").diagnostics).hint == "rename factory.yml to factory.yaml"
    result = load(tmp_path / "missing")
    assert result.definition is None and not result.ok
    assert (
        one(result.diagnostics, "FC001").message
        == f"factory directory '{(tmp_path / 'missing').as_posix()}' does not exist"
    )


def test_bad_names_and_stray_files(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "webhooks/has space.yaml": "secretName: s\n",
            "webhooks/notes.txt": "x",
            "automations/loose.md": "---\n---\nx\n",
            "automations/empty-dir/other.md": "x",
        }
    )
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("webhooks/has space.yaml", 0, 0, "FC010"),
        ("webhooks/notes.txt", 0, 0, "FC001"),
        ("automations/empty-dir/automation.md", 0, 0, "FC001"),
        ("automations/loose.md", 0, 0, "FC001"),
    ]
    severities = {d.path.rsplit("/", 1)[-1]: d.severity for d in result.diagnostics}
    assert severities["notes.txt"] == "warning" and severities["loose.md"] == "warning"
    assert severities["automation.md"] == "error"


def test_every_file_reports_together(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "factory.yaml": "name: f\ndescription: 5\n",
            "webhooks/a.yaml": "secretName: [\n",
            "webhooks/b.yaml": "secretname: s\n",
            "automations/x/automation.md": "no front matter\n",
            "environments/e.yaml": "setupTimeoutSeconds: -1\n",
        }
    )
    result = load(root)
    assert result.definition is None  # factory.yaml itself is invalid
    assert result.files == 5
    assert sorted(where(root, result.diagnostics)) == [
        ("automations/x/automation.md", 1, 1, "FC005"),
        ("environments/e.yaml", 1, 22, "FC010"),
        ("factory.yaml", 2, 14, "FC010"),
        ("webhooks/a.yaml", 2, 1, "FC002"),
        ("webhooks/b.yaml", 1, 1, "FC010"),
        ("webhooks/b.yaml", 1, 1, "FC010"),
    ]


def test_broken_file_is_left_out_but_others_load(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/good.yaml": "secretName: s\n", "webhooks/bad.yaml": "secretName: [\n"})
    result = load(root)
    assert not result.ok
    assert result.definition is not None
    assert [w.name for w in result.definition.webhooks] == ["good"]


def test_content_digest_tracks_bytes_and_names(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"webhooks/a.yaml": "secretName: s\n"})
    first = load(root).definition
    assert first is not None
    assert load(root).definition.content_digest == first.content_digest  # type: ignore[union-attr]
    (root / "webhooks" / "a.yaml").write_text("secretName: s  \n")
    changed = load(root).definition
    assert changed is not None and changed.content_digest != first.content_digest
