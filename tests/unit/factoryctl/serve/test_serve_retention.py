"""``serve --run-retention-days`` as the CLI edge reads it (docs/operations.md, "Retention"): the flag, then
``FACTORY_RUN_RETENTION_DAYS``, then 30; run-log retention rides along; a negative value stops the start."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from api.runs.retention import RetentionSettings, policies
from factoryctl.cli import build_parser
from factoryctl.context import CliContext
from factoryctl.serve.options import ServeOptions


def options(argv: list[str], env: dict[str, str], tmp_path: Path) -> ServeOptions:
    args = build_parser(["serve", *argv]).parse_args(["serve", "--workers", "0", *argv])
    return ServeOptions.from_args(CliContext(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'f.db'}", env), args)


def test_defaults_then_variables_then_flags(tmp_path: Path) -> None:
    assert options([], {}, tmp_path).retention == RetentionSettings(run_days=30, run_log_days=30)
    env = {"FACTORY_RUN_RETENTION_DAYS": "0", "FACTORY_RUN_LOG_RETENTION_DAYS": "7"}
    assert options([], env, tmp_path).retention == RetentionSettings(run_days=0, run_log_days=7)
    assert options(["--run-retention-days", "90"], env, tmp_path).retention.run_days == 90


def test_a_negative_age_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--run-retention-days must be 0"):
        options(["--run-retention-days", "-1"], {}, tmp_path)


def test_a_fraction_of_a_day_keeps_runs_hours(tmp_path: Path) -> None:
    retention = options(["--run-retention-days", "0.25"], {}, tmp_path).retention
    assert policies(retention)[0].keep == dt.timedelta(hours=6)
    assert options([], {"FACTORY_RUN_RETENTION_DAYS": "1.5"}, tmp_path).retention.run_days == 1.5


@pytest.mark.parametrize("value", ["nan", "inf", "40000"])
def test_an_age_that_is_no_date_stops_the_start(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="--run-retention-days must be 0"):
        options([], {"FACTORY_RUN_RETENTION_DAYS": value}, tmp_path)


def test_the_delivery_log_keeps_fractions_of_a_day_too(tmp_path: Path) -> None:
    assert options(["--delivery-retention-days", "0.5"], {}, tmp_path).settings.delivery_retention_days == 0.5
    with pytest.raises(ValueError, match="--delivery-retention-days must be 0"):
        options([], {"FACTORY_DELIVERY_RETENTION_DAYS": "nan"}, tmp_path)
