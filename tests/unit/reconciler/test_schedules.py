"""schedules/<name>.yaml: loading, the schema's messages, and the rules (FC070-FC072, FC060, FC020)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler import rules
from reconciler.loadcache import LoadCache
from reconciler.loader import LoadResult, load
from reconciler.specs import FactoryDefinition, ScheduleSpec
from store.rules import cron

NIGHTLY = "---\ntitle: Nightly\n---\nWrite the nightly report.\n"


def loaded(root: Path) -> FactoryDefinition:
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    return result.definition


def cron_problem(expression: str) -> str:
    """What :mod:`store.rules.cron` says about ``expression`` (the rule passes it on)."""
    with pytest.raises(cron.CronError) as caught:
        cron.parse(expression)
    return caught.value.message


def test_both_forms_load_with_their_defaults(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "automations/nightly-report/automation.md": NIGHTLY,
            "environments/repo.yaml": "setup: [make]\n",
            "schedules/nightly.yaml": 'cron: "0 2 * * *"\nautomation: nightly-report\n',
            "schedules/weekly.yml": (
                'cron: "30 9 * * MON"\ntimezone: Europe/Berlin\nprompt: |\n  Check the dependencies.\n'
                "config:\n  environment_id: repo\nenabled: false\ndescription: for people\n"
            ),
        }
    )
    definition = loaded(root)
    nightly, weekly = definition.schedules
    assert nightly == ScheduleSpec(
        name="nightly", path="schedules/nightly.yaml", cron="0 2 * * *", automation="nightly-report"
    )
    assert (nightly.timezone, nightly.prompt, nightly.config, nightly.enabled) == ("UTC", None, {}, True)
    assert weekly.fields() == {
        "cron": "30 9 * * MON",
        "timezone": "Europe/Berlin",
        "automation": None,
        "prompt": "Check the dependencies.\n",
        "config": {"environment_id": "repo"},
        "enabled": False,
    }
    assert weekly.description == "for people" and "description" not in weekly.fields()
    assert rules.check(definition) == []


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        (
            'cron: "0 2 * * *"\n',
            1,
            1,
            "a schedule needs 'automation' (the name of an automation of this factory) or 'prompt'"
            " (what the run should do)",
        ),
        (
            'cron: "0 2 * * *"\nautomation: a\nprompt: do it\n',
            3,
            1,
            "'prompt' is not allowed with 'automation': a schedule runs either an automation (its prompt"
            " and configuration) or a prompt of its own",
        ),
        (
            'cron: "0 2 * * *"\nautomation: a\nconfig:\n  model_id: m\n',
            3,
            1,
            "'config' is not allowed with 'automation': the automation's own configuration is used;"
            " configure it in automations/<name>/automation.md",
        ),
        ("prompt: do it\n", 1, 1, "missing required key 'cron'"),
        ('cron: "0 2 * * *"\nprompt: "  "\n', 2, 9, "'prompt' must not be empty; got '  '"),
        ('cron: " "\nprompt: x\n', 1, 7, "'cron' must not be empty; got ' '"),
        (
            'cron: "0 2 * * *"\nprompt: x\ntimzone: UTC\n',
            3,
            1,
            "unknown key 'timzone' (did you mean 'timezone'?)",
        ),
        ("cron: 5\nprompt: x\n", 1, 7, "'cron' must be a string, got integer"),
        (
            'cron: "0 2 * * *"\nautomation: nightly/report\n',
            2,
            13,
            "'automation' automation names use letters, digits, '.', '_' or '-' (1-200, starting with a"
            " letter or digit); got 'nightly/report'",
        ),
    ],
)
def test_schema_problems_are_fc010_at_their_place(  # type: ignore[no-untyped-def]
    factory_tree, where, text: str, line: int, column: int, message: str
) -> None:
    root = factory_tree({"schedules/s.yaml": text})
    result = load(root)
    assert where(root, result.diagnostics) == [("schedules/s.yaml", line, column, "FC010")]
    assert result.diagnostics[0].message == message
    assert result.definition is not None and result.definition.schedules == ()


def test_a_bad_file_name_is_refused(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {"schedules/bad name.yaml": 'cron: "0 2 * * *"\nprompt: x\n', "schedules/notes.txt": ""}
    )
    result = load(root)
    assert where(root, result.diagnostics) == [
        ("schedules/bad name.yaml", 0, 0, "FC010"),
        ("schedules/notes.txt", 0, 0, "FC001"),
    ]
    assert result.diagnostics[1].severity == "warning"
    assert result.diagnostics[1].message == "ignored: schedule definitions are schedules/<name>.yaml"


def test_a_broken_cron_points_at_its_value(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "schedules/ok.yaml": 'cron: "*/15 * * * MON-FRI"\nprompt: x\n',
            "schedules/hour.yaml": 'description: bad hour\ncron: "0 25 * * *"\nprompt: x\n',
            "schedules/folded.yaml": "prompt: x\ncron: >-\n  0 2 * *\n",
        }
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [
        ("schedules/folded.yaml", 2, 7, "FC070"),
        ("schedules/hour.yaml", 2, 7, "FC070"),
    ]
    folded, hour = found
    assert hour.message == f"invalid cron expression: {cron_problem('0 25 * * *')}"
    assert hour.message.startswith("invalid cron expression: hour: 25 is out of range 0-23")
    assert hour.hint == "the fields are minute, hour, day of month, month, day of week"
    assert folded.message == f"invalid cron expression: {cron_problem('0 2 * *')}"
    assert folded.hint is None  # the message already says how many fields and which


def test_an_unknown_time_zone_points_at_its_value(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "schedules/typo.yaml": 'cron: "0 2 * * *"\ntimezone: Europe/Berln\nprompt: x\n',
            "schedules/case.yaml": 'cron: "0 2 * * *"\nprompt: x\ntimezone: europe/berlin\n',
        }
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [
        ("schedules/case.yaml", 3, 11, "FC071"),
        ("schedules/typo.yaml", 2, 11, "FC071"),
    ]
    case, typo = found
    for diagnostic, name in ((case, "europe/berlin"), (typo, "Europe/Berln")):
        with pytest.raises(cron.CronError) as caught:
            cron.zone(name)
        assert diagnostic.message == caught.value.message and caught.value.field is None
    assert typo.hint == "did you mean 'Europe/Berlin'?"
    assert case.hint is None and "'Europe/Berlin'" in case.message  # store.rules.cron suggests it already


def test_an_automation_that_does_not_exist_lists_those_that_do(  # type: ignore[no-untyped-def]
    factory_tree, where
) -> None:
    root = factory_tree(
        {
            "automations/nightly-report/automation.md": NIGHTLY,
            "automations/triage/automation.md": NIGHTLY,
            "schedules/s.yaml": 'cron: "0 2 * * *"\nautomation: nightly\n',
        }
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [("schedules/s.yaml", 2, 13, "FC072")]
    assert found[0].message == (
        "automation 'nightly' is not defined in this factory (automations: nightly-report, triage)"
    )
    assert found[0].hint == "add automations/nightly/automation.md or name one of the factory's automations"
    shutil.rmtree(root / "automations")
    assert rules.check(loaded(root))[0].message.endswith("(automations: none)")


def test_config_environments_and_duplicate_names(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "environments/repo.yaml": "setup: [make]\n",
            "schedules/a.yaml": 'cron: "0 2 * * *"\nprompt: x\nconfig:\n  environment_id: staging\n',
            "schedules/a.yml": 'cron: "0 3 * * *"\nprompt: y\nconfig:\n  environment_id: repo\n',
        }
    )
    found = rules.check(loaded(root))
    assert where(root, found) == [("schedules/a.yaml", 4, 3, "FC060"), ("schedules/a.yml", 1, 1, "FC020")]
    assert found[0].message == "unknown environment 'staging'"
    assert found[1].message == "schedule 'a' is defined twice: schedules/a.yaml and schedules/a.yml"
    # An environment the store knows (another factory's, or the API's) is fine, as for automations.
    assert [d.rule for d in rules.check(loaded(root), known_environments={"staging"})] == ["FC020"]


def test_one_broken_schedule_does_not_hide_the_others(factory_tree, where) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree(
        {
            "schedules/good.yaml": 'cron: "0 2 * * *"\nprompt: x\n',
            "schedules/yaml.yaml": "cron: [unclosed\n",
            "schedules/zone.yaml": 'cron: "0 2 * * *"\ntimezone: Mars/Olympus\nprompt: x\n',
        }
    )
    result = load(root)
    assert result.definition is not None
    assert [s.name for s in result.definition.schedules] == ["good", "zone"]
    found = [*result.diagnostics, *rules.check(result.definition)]
    assert where(root, found) == [
        ("schedules/yaml.yaml", 2, 1, "FC002"),
        ("schedules/zone.yaml", 2, 11, "FC071"),
    ]


def test_the_load_cache_sees_edits_in_schedules(factory_tree) -> None:  # type: ignore[no-untyped-def]
    root = factory_tree({"schedules/s.yaml": 'cron: "0 2 * * *"\nprompt: one\n'})
    calls: list[Path] = []

    def counting(path: Path) -> LoadResult:
        calls.append(path)
        return load(path)

    def names(result: LoadResult) -> list[tuple[str, str | None]]:
        assert result.definition is not None
        return [(s.name, s.prompt) for s in result.definition.schedules]

    cache = LoadCache(load=counting, racy_ns=0)
    assert cache.load(root) is cache.load(root) and len(calls) == 1
    (root / "schedules" / "s.yaml").write_text('cron: "0 2 * * *"\nprompt: two, longer\n')
    assert names(cache.load(root)) == [("s", "two, longer")]
    (root / "schedules" / "t.yaml").write_text('cron: "0 4 * * *"\nprompt: t\n')
    assert names(cache.load(root)) == [("s", "two, longer"), ("t", "t")]
    assert len(calls) == 3
