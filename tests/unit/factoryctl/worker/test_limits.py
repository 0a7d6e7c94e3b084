"""The limits' decision (docs/workers.md, "Limits"): a sample over a limit is a breach naming limit and
value; a runner's instance shape lowers the memory limit, never raises it; sizes as operators write them."""

from __future__ import annotations

import pytest

from factoryctl.worker.limits import (
    DISK_CODE,
    GIB,
    MEMORY_CODE,
    PROCESS_CODE,
    Limits,
    Sample,
    breach,
    describe,
    format_size,
    limits_from,
    parse_count,
    parse_size,
)

MIB = 1024**2
LIMITS = Limits(memory_bytes=512 * MIB, processes=10, disk_bytes=GIB)


def test_a_sample_within_every_limit_is_no_breach() -> None:
    assert breach(LIMITS, Sample(memory_bytes=512 * MIB, processes=10, disk_bytes=GIB)) is None
    assert breach(LIMITS, Sample(memory_bytes=0, processes=0)) is None  # disk not measured this time


def test_each_limit_over_by_one_is_a_breach_naming_it_and_the_value() -> None:
    memory = breach(LIMITS, Sample(memory_bytes=512 * MIB + 1, processes=1))
    assert memory is not None and memory.error_code == MEMORY_CODE == "memory_limit_exceeded"
    assert "512 MiB" in memory.message and "memory limit" in memory.message

    processes = breach(LIMITS, Sample(memory_bytes=0, processes=11))
    assert processes is not None and processes.error_code == PROCESS_CODE == "process_limit_exceeded"
    assert processes.message == "the run had 11 processes, over its process limit of 10"

    disk = breach(LIMITS, Sample(memory_bytes=0, processes=1, disk_bytes=3 * GIB // 2))
    assert disk is not None and disk.error_code == DISK_CODE == "disk_limit_exceeded"
    assert "1.5 GiB" in disk.message and "disk limit of 1 GiB" in disk.message


def test_memory_is_named_first_when_several_are_over() -> None:
    found = breach(LIMITS, Sample(memory_bytes=GIB, processes=100, disk_bytes=2 * GIB))
    assert found is not None and found.error_code == MEMORY_CODE


def test_no_limit_is_never_a_breach() -> None:
    unlimited = Limits(memory_bytes=None, processes=None, disk_bytes=None)
    assert breach(unlimited, Sample(memory_bytes=10**15, processes=10**6, disk_bytes=10**15)) is None


def test_a_runners_shape_lowers_the_memory_limit_and_never_raises_it() -> None:
    worker = Limits(memory_bytes=4 * GIB)
    assert worker.for_runner({"instance_shape": {"vcpus": 2, "memory_gb": 2}}).memory_bytes == 2 * GIB
    assert worker.for_runner({"instance_shape": {"memory_gb": 0.5}}).memory_bytes == GIB // 2
    assert worker.for_runner({"instance_shape": {"memory_gb": 16}}) == worker
    assert worker.for_runner({"instance_shape": {"vcpus": 8}}) == worker
    assert worker.for_runner(None) == worker
    assert worker.for_runner({"instance_shape": {"memory_gb": True}}) == worker  # not a number
    unlimited = Limits(memory_bytes=None)
    assert unlimited.for_runner({"instance_shape": {"memory_gb": 8}}).memory_bytes == 8 * GIB


@pytest.mark.parametrize(
    ("text", "value"),
    [("4G", 4 * GIB), ("4GiB", 4 * GIB), ("512m", 512 * MIB), ("1.5g", 3 * GIB // 2), ("1048576", MIB)],
)
def test_sizes_as_operators_write_them(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["0", "none", "unlimited"])
def test_zero_means_no_limit(text: str) -> None:
    assert parse_size(text) is None and parse_count(text) is None


@pytest.mark.parametrize("text", ["four gigs", "-1G", "4X", ""])
def test_a_size_that_is_not_one_is_refused_clearly(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_process_counts() -> None:
    assert parse_count("256") == 256
    with pytest.raises(ValueError, match="not a number of processes"):
        parse_count("lots")
    with pytest.raises(ValueError, match="at least 1"):
        parse_count("-3")


def test_sizes_for_people() -> None:
    assert [format_size(v) for v in (512, 2048, 3 * GIB // 2, 4 * GIB)] == [
        "512 B",
        "2 KiB",
        "1.5 GiB",
        "4 GiB",
    ]
    assert describe(Limits()) == "memory 4 GiB, 512 processes, disk 10 GiB, time the run's own timeout"
    unlimited = Limits(None, None, None, 90)
    assert describe(unlimited) == "memory unlimited, unlimited processes, disk unlimited, time 90s"


def test_limits_from_flags_keep_the_default_of_what_is_not_set() -> None:
    assert limits_from(None, None, None) == Limits()
    assert limits_from("1G", "0", None, "600") == Limits(GIB, None, Limits().disk_bytes, 600.0)
    with pytest.raises(ValueError, match="not a number of seconds"):
        limits_from(None, None, None, "soon")
